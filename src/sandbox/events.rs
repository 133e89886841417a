//! A run followed live: its id before anything is created, the moment the command is let
//! go and the moment it is over, and each audit record as the proxy writes it. The daemon
//! (`serve`) streams these to its API clients; the CLI needs none of them.

use std::fs::File;
use std::io::{self, Write};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::sync::mpsc::UnboundedSender;

use super::audit_trail::AuditSink;

/// One step of a run, in order: `Id`, then (if set-up succeeds) `Started`, any number of
/// `Audit`, `Ended`, and possibly more `Audit` (records the proxy flushes at its stop).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunEvent {
    /// The run's id, before any object is created.
    Id(String),
    /// Set-up is over and the command was let go.
    Started,
    /// One audit record, the proxy's line exactly (no newline).
    Audit(Bytes),
    /// The command is over (exited, killed); teardown begins.
    Ended,
}

/// The audit records' way out of a run: the `--audit-log` file and/or the event channel.
pub(super) struct AuditTee {
    file: Option<File>,
    events: Option<UnboundedSender<RunEvent>>,
    /// Why the file took no more records (the first error), for the outcome to say.
    file_failed: Arc<OnceLock<String>>,
}

impl AuditTee {
    /// `None` when nobody wants the records. A failure to write the file is kept in
    /// `file_failed`.
    pub(super) fn sink(
        file: Option<File>,
        events: Option<UnboundedSender<RunEvent>>,
        file_failed: Arc<OnceLock<String>>,
    ) -> Option<AuditSink> {
        if file.is_none() && events.is_none() {
            return None;
        }
        Some(Box::new(AuditTee {
            file,
            events,
            file_failed,
        }))
    }
}

impl Write for AuditTee {
    /// Takes one whole line (the reader writes each record with one call).
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        if let Some(file) = &mut self.file
            && let Err(error) = file.write_all(line)
        {
            tracing::error!(%error, "cannot append to the audit log; no further records are written there");
            let _ = self.file_failed.set(error.to_string());
            self.file = None;
        }
        if let Some(events) = &self.events {
            let record = line.strip_suffix(b"\n").unwrap_or(line);
            let _ = events.send(RunEvent::Audit(Bytes::copy_from_slice(record)));
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_goes_to_the_file_and_the_channel_without_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let failed = Arc::default();
        let mut sink = AuditTee::sink(
            Some(File::create(&path).unwrap()),
            Some(tx),
            Arc::clone(&failed),
        )
        .unwrap();
        sink.write_all(b"{\"a\":1}\n").unwrap();
        drop(sink);
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n");
        assert_eq!(
            rx.try_recv().unwrap(),
            RunEvent::Audit(Bytes::from_static(b"{\"a\":1}"))
        );
        assert!(failed.get().is_none());
        assert!(AuditTee::sink(None, None, failed).is_none());
    }

    /// A full disk: the run goes on, and why the log is incomplete is kept for the outcome.
    #[test]
    fn a_file_that_cannot_be_written_is_dropped_and_why_is_kept() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let failed = Arc::<OnceLock<String>>::default();
        let full = std::fs::OpenOptions::new()
            .append(true)
            .open("/dev/full")
            .unwrap();
        let mut sink = AuditTee::sink(Some(full), Some(tx), Arc::clone(&failed)).unwrap();
        sink.write_all(b"{\"a\":1}\n").unwrap();
        sink.write_all(b"{\"a\":2}\n").unwrap();
        assert!(
            failed.get().unwrap().contains("No space left on device"),
            "{failed:?}"
        );
        assert!(rx.try_recv().is_ok() && rx.try_recv().is_ok());
    }
}
