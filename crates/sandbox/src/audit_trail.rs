//! Reads the proxy container's output: the ready line first, then one audit record per
//! line on stdout; diagnostics on stderr.
//!
//! The host cannot reach the run network (by design), so this attach stream is the only
//! channel from the proxy to us. Lines go to `--audit-log` and the run's events verbatim
//! as they come (the chain's hashes cover their exact bytes; `AuditTee`). Attempts are
//! counted for the summary and report; the run's `end` line gives the report its
//! `audit_head`.

use bytes::{Bytes, BytesMut};
use egress_core::audit::{AuditLine, sha256_hex};
use futures_util::{Stream, StreamExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::audit_tee::AuditTee;
use crate::engine::{DockerError, OutputFrame};
use crate::events::AuditEntry;
use egress_core::tally::AuditTally;

/// A line longer than this is not a record the proxy writes; it is dropped.
const MAX_LINE: usize = 1 << 20;
/// How much of the proxy's stderr is kept to explain a failed start.
const STDERR_TAIL: usize = 4096;

/// Why the proxy never said it was ready.
#[derive(Debug)]
pub(crate) struct NotReady {
    pub detail: String,
}

/// What the proxy's ready line says that the run needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ready {
    /// The run CA's certificate (PEM), when some host is inspected.
    pub ca: Option<String>,
}

/// The reader's handles: `ready` resolves once with the ready line (or the proxy's last
/// words); `records` ends with what the proxy wrote when its output ends.
pub(crate) struct ProxyOutput {
    pub ready: oneshot::Receiver<Result<Ready, NotReady>>,
    pub records: JoinHandle<ProxyRecords>,
}

/// Dropping the handles stops the reader: a run whose set-up ends before it asks for the
/// records (a claim that failed, an interrupt) must not leave behind a task that lives as
/// long as the proxy and holds the run's event stream open.
impl Drop for ProxyOutput {
    fn drop(&mut self) {
        self.records.abort();
    }
}

/// What the proxy's audit stream amounted to.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProxyRecords {
    /// The attempts counted, and the `limit` and `end` records.
    pub tally: AuditTally,
    /// Hex SHA-256 of the `end` line: the report's `audit_head`. `None` when the proxy
    /// never closed its chain (it died or was killed).
    pub head: Option<String>,
}

pub(super) fn spawn_reader<S>(frames: S, audit_log: Option<AuditTee>) -> ProxyOutput
where
    S: Stream<Item = Result<OutputFrame, DockerError>> + Send + Unpin + 'static,
{
    let (ready_tx, ready) = oneshot::channel();
    let records = tokio::spawn(read(frames, audit_log, ready_tx));
    ProxyOutput { ready, records }
}

struct Reader {
    ready: Option<oneshot::Sender<Result<Ready, NotReady>>>,
    audit_log: Option<AuditTee>,
    records: ProxyRecords,
    stderr_tail: Vec<u8>,
}

async fn read<S>(
    mut frames: S,
    audit_log: Option<AuditTee>,
    ready: oneshot::Sender<Result<Ready, NotReady>>,
) -> ProxyRecords
where
    S: Stream<Item = Result<OutputFrame, DockerError>> + Unpin,
{
    let mut reader = Reader {
        ready: Some(ready),
        audit_log,
        records: ProxyRecords::default(),
        stderr_tail: Vec::new(),
    };
    let mut stdout = LineBuffer::default();
    let mut stderr = LineBuffer::default();
    while let Some(frame) = frames.next().await {
        match frame {
            Ok(OutputFrame::Stdout(message)) => {
                for line in stdout.push(&message) {
                    reader.stdout_line(line).await;
                }
            }
            Ok(OutputFrame::Stderr(message)) => {
                reader.keep_stderr(&message);
                for line in stderr.push(&message) {
                    tracing::info!(
                        "proxy: {}",
                        shown(&without_ansi(&String::from_utf8_lossy(&line)))
                    );
                }
            }
            Err(error) => {
                tracing::debug!(%error, "proxy output stream ended with an error");
                break;
            }
        }
    }
    if let Some(line) = stdout.finish() {
        reader.stdout_line(line).await;
    }
    if let Some(ready) = reader.ready.take() {
        let said = String::from_utf8_lossy(&reader.stderr_tail)
            .trim()
            .to_string();
        let detail = if said.is_empty() {
            "the proxy exited without a word".to_string()
        } else {
            format!("the proxy said: {said}")
        };
        let _ = ready.send(Err(NotReady { detail }));
    }
    if let Some(audit_log) = reader.audit_log.take() {
        audit_log.finish().await;
    }
    reader.records
}

impl Reader {
    async fn stdout_line(&mut self, line: Vec<u8>) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if let Some(ready) = self.ready.take() {
            if let Some(said) = ready_line(&line) {
                let _ = ready.send(Ok(said));
                return;
            }
            // Not the ready line: keep waiting for it.
            self.ready = Some(ready);
            tracing::warn!(
                "proxy printed before it was ready: {}",
                shown(&String::from_utf8_lossy(&line))
            );
            return;
        }
        let line = Bytes::from(line);
        match AuditEntry::parse(line.clone()) {
            Ok(entry) => {
                match entry.line() {
                    AuditLine::Attempt(record) => self.records.tally.add(record),
                    AuditLine::Limit(_) => self.records.tally.add_limit(),
                    AuditLine::End(end) => {
                        self.records.head = Some(sha256_hex(entry.bytes()));
                        self.records.tally.add_end(
                            end.records,
                            end.dropped,
                            end.dropped_by_decision.unwrap_or_default(),
                        );
                    }
                    // A line this version does not know: kept in the log, not counted.
                    _ => {}
                }
                if let Some(audit_log) = &mut self.audit_log {
                    audit_log.record(entry).await;
                }
            }
            Err(error) => {
                tracing::warn!(
                    "proxy printed a line that is not an audit record ({}): {}",
                    shown(&error.to_string()),
                    shown(&String::from_utf8_lossy(&line))
                );
                if let Some(audit_log) = &mut self.audit_log {
                    audit_log.unparsed(line).await;
                }
            }
        }
    }

    fn keep_stderr(&mut self, bytes: &[u8]) {
        self.stderr_tail.extend_from_slice(bytes);
        if self.stderr_tail.len() > STDERR_TAIL {
            let cut = self.stderr_tail.len() - STDERR_TAIL;
            self.stderr_tail.drain(..cut);
        }
    }
}

/// Text from the proxy's output as diagnostics show it: it may quote what the sandbox sent
/// (hosts, labels, SNI), so control, bidi and separator characters become visible escapes.
fn shown(text: &str) -> String {
    egress_core::text::visible(text).into_owned()
}

/// The proxy's diagnostics without terminal colour sequences (`ESC [ … letter`).
fn without_ansi(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

fn ready_line(line: &[u8]) -> Option<Ready> {
    let value = serde_json::from_slice::<serde_json::Value>(line).ok()?;
    (value.get("ready") == Some(&serde_json::Value::Bool(true))).then(|| Ready {
        ca: value
            .get("ca")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
    })
}

/// Reassembles lines from frames that may split or join them.
#[derive(Default)]
struct LineBuffer {
    partial: BytesMut,
    /// Inside a line that already overflowed `MAX_LINE`: drop until its end.
    skipping: bool,
}

impl LineBuffer {
    fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if self.skipping {
                self.skipping = false;
            } else {
                self.partial.extend_from_slice(&rest[..end]);
                lines.push(self.partial.split().to_vec());
            }
            self.partial.clear();
            rest = &rest[end + 1..];
        }
        if !self.skipping {
            self.partial.extend_from_slice(rest);
            if self.partial.len() > MAX_LINE {
                tracing::warn!("proxy printed a line over {MAX_LINE} bytes; dropped");
                self.partial.clear();
                self.skipping = true;
            }
        }
        lines
    }

    fn finish(&mut self) -> Option<Vec<u8>> {
        (!self.skipping && !self.partial.is_empty()).then(|| self.partial.split().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventSender, RunEvent};

    #[test]
    fn proxy_diagnostics_show_what_the_sandbox_sent_as_visible_escapes() {
        let line = "\u{1b}[33mWARN\u{1b}[0m bad sni \u{1b}]0;owned\u{7}\rall-clear\u{202e}";
        let diagnostic = shown(&without_ansi(line));
        assert_eq!(diagnostic, "WARN bad sni 0;owned\\x07\\x0dall-clear\\u202e");
        assert!(!diagnostic.chars().any(egress_core::text::must_escape));
    }

    #[test]
    fn colour_sequences_are_dropped() {
        assert_eq!(
            without_ansi("\u{1b}[2mts\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m x"),
            "ts  WARN x"
        );
    }

    #[test]
    fn lines_are_reassembled_across_frames() {
        let mut buffer = LineBuffer::default();
        assert!(buffer.push(b"{\"a\":").is_empty());
        let lines = buffer.push(b"1}\n{\"b\":2}\n{\"c\"");
        assert_eq!(lines, vec![b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()]);
        assert_eq!(buffer.finish(), Some(b"{\"c\"".to_vec()));
    }

    #[test]
    fn overlong_lines_are_dropped_and_the_next_survives() {
        let mut buffer = LineBuffer::default();
        assert!(buffer.push(&vec![b'x'; MAX_LINE + 1]).is_empty());
        assert_eq!(buffer.push(b"xx\nok\n"), vec![b"ok".to_vec()]);
    }

    #[tokio::test]
    async fn ready_then_records_are_counted_and_appended() {
        let record = r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"connect","client":"10.213.0.3:5","host":"test.example.org","port":443,"decision":"blocked","reason":"not_allowed","rule":null,"addr":null,"bytes_up":0,"bytes_down":0,"duration_ms":0}"#;
        let frames = futures_util::stream::iter(vec![
            Ok(OutputFrame::Stdout(Bytes::from(format!(
                "{{\"ready\":true,\"listen\":\"10.0.0.2:3128\",\"ca\":\"PEM\"}}\n{}",
                &record[..20]
            )))),
            Ok(OutputFrame::Stdout(Bytes::from(format!(
                "{}\nnot json\n",
                &record[20..]
            )))),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let (events, mut received) = tokio::sync::mpsc::channel(4);
        let tee = AuditTee::new(
            Some(file),
            Some(EventSender::new(events)),
            Default::default(),
        );
        let mut output = spawn_reader(frames, tee);
        assert_eq!(
            (&mut output.ready).await.unwrap().unwrap().ca.as_deref(),
            Some("PEM")
        );
        let records = (&mut output.records).await.unwrap();
        assert_eq!(records.tally.attempts.blocked, 1);
        // The file is complete once the reader has ended.
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{record}\n")
        );
        let Some(RunEvent::Audit(entry)) = received.recv().await else {
            panic!("an audit event")
        };
        assert_eq!(entry.bytes().as_ref(), record.as_bytes());
        assert_eq!(
            received.recv().await,
            Some(RunEvent::UnparsedLine(Bytes::from_static(b"not json")))
        );
        assert_eq!(received.recv().await, None);
    }

    #[tokio::test]
    async fn dropping_the_handles_stops_the_reader_and_lets_go_of_its_sink() {
        // The daemon's sink holds the run's event stream: it must close.
        let (events, mut received) = tokio::sync::mpsc::channel(1);
        // A proxy that never writes another byte and never stops.
        let frames = futures_util::stream::pending::<Result<OutputFrame, DockerError>>();
        let output = spawn_reader(
            frames,
            AuditTee::new(None, Some(EventSender::new(events)), Default::default()),
        );
        drop(output);
        let closed = tokio::time::timeout(std::time::Duration::from_secs(30), received.recv());
        assert_eq!(closed.await.expect("the reader let go of its sink"), None);
    }

    #[tokio::test]
    async fn a_proxy_that_dies_first_explains_itself() {
        let frames = futures_util::stream::iter(vec![Ok(OutputFrame::Stderr(Bytes::from_static(
            b"error: cannot bind 10.0.0.2:53\n",
        )))]);
        let mut output = spawn_reader(frames, None);
        let error = (&mut output.ready).await.unwrap().unwrap_err();
        assert!(error.detail.contains("cannot bind"));
    }
}
