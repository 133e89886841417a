//! The host's audit writer: each audit line of a run, as it comes, to the `--audit-log`
//! file (from a thread of its own, so a slow disk never blocks an async worker) and to the
//! run's events. The file's lines are the proxy's exact bytes, in order, each with one
//! `write` on a file opened for appending, so concurrent runs appending to one file never
//! interleave within a line and each keeps its own chain.

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::events::{AuditEntry, EventSender, RunEvent};

/// The audit records' way out of a run: the `--audit-log` file (through a writer thread)
/// and/or the event channel.
pub(crate) struct AuditTee {
    file: Option<AuditFileWriter>,
    events: Option<EventSender>,
}

impl AuditTee {
    /// `None` when nobody wants the records. A failure to write the file is kept in
    /// `file_failed`.
    pub(super) fn new(
        file: Option<File>,
        events: Option<EventSender>,
        file_failed: Arc<OnceLock<String>>,
    ) -> Option<AuditTee> {
        if file.is_none() && events.is_none() {
            return None;
        }
        Some(AuditTee {
            file: file.map(|file| AuditFileWriter::spawn(file, file_failed)),
            events,
        })
    }

    /// Appends `entry` to the file, then waits for room in the channel to offer it there.
    pub(super) async fn record(&mut self, entry: AuditEntry) {
        if let Some(file) = &self.file {
            file.append(entry.bytes());
        }
        self.send(RunEvent::Audit(entry)).await;
    }

    /// Offers a line that is no record to the channel (not to the file).
    pub(super) async fn unparsed(&mut self, line: Bytes) {
        self.send(RunEvent::UnparsedLine(line)).await;
    }

    async fn send(&mut self, event: RunEvent) {
        if let Some(events) = &self.events
            && !events.send(event).await
        {
            // The follower has gone (a closed API stream); the file and the run go on.
            self.events = None;
        }
    }

    /// Lets go of the channel and waits until every record appended is in the file.
    pub(super) async fn finish(self) {
        drop(self.events);
        if let Some(file) = self.file {
            file.finish().await;
        }
    }
}

/// The `--audit-log` file written from a thread of its own, in the order records came. Dropping it (or [`finish`](Self::finish))
/// ends the thread once everything appended is written.
struct AuditFileWriter {
    lines: std::sync::mpsc::Sender<Bytes>,
    /// Resolves when the thread has written its last line.
    done: oneshot::Receiver<()>,
}

impl AuditFileWriter {
    fn spawn(file: File, failed: Arc<OnceLock<String>>) -> AuditFileWriter {
        let (lines, queued) = std::sync::mpsc::channel::<Bytes>();
        let (finished, done) = oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("audit-log".to_string())
            .spawn(move || {
                write_lines(file, &queued, &failed);
                let _ = finished.send(());
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start the audit log's writer; no records are written there");
        }
        AuditFileWriter { lines, done }
    }

    fn append(&self, line: &[u8]) {
        let mut whole = Vec::with_capacity(line.len() + 1);
        whole.extend_from_slice(line);
        whole.push(b'\n');
        // Gone only if the thread never started (said above).
        let _ = self.lines.send(Bytes::from(whole));
    }

    async fn finish(self) {
        drop(self.lines);
        let _ = self.done.await;
    }
}

/// Each line with one `write` on a file opened for appending, so concurrent runs appending
/// to one file never interleave within a line. After the first error the rest is read and
/// dropped, and why is kept for the outcome to say.
fn write_lines(
    mut file: File,
    queued: &std::sync::mpsc::Receiver<Bytes>,
    failed: &OnceLock<String>,
) {
    let mut writing = true;
    for line in queued {
        if writing && let Err(error) = file.write_all(&line) {
            tracing::error!(%error, "cannot append to the audit log; no further records are written there");
            let _ = failed.set(error.to_string());
            writing = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(line: &str) -> AuditEntry {
        AuditEntry::parse(Bytes::copy_from_slice(line.as_bytes())).unwrap()
    }

    const ATTEMPT: &str = r#"{"v":1,"ts":"t","run":"r","policy":"p","kind":"dns","client":null,"host":"a.test","port":null,"decision":"blocked","reason":"not_allowed","rule":null,"addr":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"seq":0,"prev":"x"}"#;

    #[tokio::test]
    async fn a_record_goes_to_the_file_with_its_newline_and_to_the_channel_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let failed = Arc::default();
        let mut tee = AuditTee::new(
            Some(File::create(&path).unwrap()),
            Some(EventSender::new(tx)),
            Arc::clone(&failed),
        )
        .unwrap();
        tee.record(entry(ATTEMPT)).await;
        tee.unparsed(Bytes::from_static(b"not json")).await;
        tee.finish().await;
        assert_eq!(
            std::fs::read(&path).unwrap(),
            format!("{ATTEMPT}\n").as_bytes()
        );
        let Some(RunEvent::Audit(sent)) = rx.recv().await else {
            panic!("an audit event")
        };
        assert_eq!(sent.bytes().as_ref(), ATTEMPT.as_bytes());
        assert_eq!(sent.attempt().unwrap().host, "a.test");
        assert_eq!(
            rx.recv().await,
            Some(RunEvent::UnparsedLine(Bytes::from_static(b"not json")))
        );
        assert_eq!(rx.recv().await, None, "the tee let go of the channel");
        assert!(failed.get().is_none());
        assert!(AuditTee::new(None, None, failed).is_none());
    }

    /// A full disk: the run goes on, and why the log is incomplete is kept for the outcome.
    #[tokio::test]
    async fn a_file_that_cannot_be_written_is_dropped_and_why_is_kept() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let failed = Arc::<OnceLock<String>>::default();
        let full = std::fs::OpenOptions::new()
            .append(true)
            .open("/dev/full")
            .unwrap();
        let mut tee =
            AuditTee::new(Some(full), Some(EventSender::new(tx)), Arc::clone(&failed)).unwrap();
        tee.record(entry(ATTEMPT)).await;
        tee.record(entry(ATTEMPT)).await;
        tee.finish().await;
        assert!(
            failed.get().unwrap().contains("No space left on device"),
            "{failed:?}"
        );
        assert!(rx.try_recv().is_ok() && rx.try_recv().is_ok());
    }

    /// The file keeps every record whatever the channel does: a receiver that went away
    /// ends only the events.
    #[tokio::test]
    async fn a_receiver_that_went_away_leaves_the_file_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        drop(rx);
        let mut tee = AuditTee::new(
            Some(File::create(&path).unwrap()),
            Some(EventSender::new(tx)),
            Arc::default(),
        )
        .unwrap();
        for _ in 0..3 {
            tee.record(entry(ATTEMPT)).await;
        }
        tee.finish().await;
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{ATTEMPT}\n").repeat(3)
        );
    }
}
