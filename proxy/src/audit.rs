//! The audit record: one JSON line per attempt (INTERFACE.md, "Audit record"), written by
//! a single writer so lines never interleave.
//!
//! Doors never format or write records themselves: they fill in an [`Attempt`], which sends
//! its record to the [`AuditSink`] when it is dropped — so an attempt cut short by shutdown,
//! a client hang-up or a panic still leaves exactly one line. The sink forwards records over a
//! channel to one writer thread (file or stdout), or hands them to the library caller.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::policy::{Decision, Reason, RuleRef, Verdict};

/// The schema version written in every record's `v`.
pub const AUDIT_VERSION: u32 = 1;

/// Raw, untrusted host strings are cut to this many bytes before they are logged.
pub const MAX_RAW_HOST_BYTES: usize = 256;

/// How the attempt reached the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Connect,
    Http,
    Dns,
    /// Transparent TLS, routed by SNI.
    Tls,
    /// Transparent, neither TLS nor HTTP.
    Tcp,
}

/// What became of the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Allowed,
    Blocked,
    /// Report mode: the allowlist alone would have refused it; it went through.
    WouldBlock,
    /// Allowed, but the upstream could not be resolved or reached. Not a refusal.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Blocked => "blocked",
            Outcome::WouldBlock => "would_block",
            Outcome::Failed => "failed",
        }
    }
}

/// One line of the audit log. Field order is the order of INTERFACE.md.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub v: u32,
    /// RFC 3339 UTC with milliseconds, e.g. `2026-11-29T18:40:43.123Z`.
    pub ts: String,
    pub run: Option<String>,
    pub policy: Option<String>,
    pub kind: Kind,
    pub client: Option<String>,
    /// Normalised when valid; otherwise the raw value, escaped and cut to 256 bytes.
    pub host: String,
    pub port: Option<u16>,
    pub decision: Outcome,
    pub reason: Reason,
    pub rule: Option<String>,
    pub addr: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
    /// Inspected requests only: `method`, `path`, `status`, `credential`.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestFields>,
}

/// What an inspected request adds to its `http` record. `path` never holds the query
/// string; `credential` is the name of the secret added, never a value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestFields {
    pub method: String,
    pub path: String,
    /// The upstream's status, or null when no response came.
    pub status: Option<u16>,
    pub credential: Option<String>,
}

impl AuditRecord {
    /// The record as one JSON line, without the newline. serde_json escapes every control
    /// character, so the line can never contain a raw newline whatever a client sent.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("an AuditRecord always serialises")
    }
}

/// `ts` format: RFC 3339 UTC with milliseconds.
pub fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// An untrusted host as bytes, made safe for the log: invalid UTF-8 bytes become the text
/// `\xNN`, and the result is cut to [`MAX_RAW_HOST_BYTES`] on a character boundary. ASCII
/// control characters stay characters here; JSON serialisation escapes them as `\u00XX`.
/// C1 controls, line/paragraph separators and bidi overrides become the text `\uXXXX`.
pub fn raw_host_for_log(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len().min(MAX_RAW_HOST_BYTES));
    for chunk in raw.utf8_chunks() {
        for c in chunk.valid().chars() {
            let pushed = if breaks_lines_or_reorders_text(c) {
                push_bounded(&mut out, &format!("\\u{:04x}", u32::from(c)))
            } else {
                push_bounded(&mut out, c.encode_utf8(&mut [0; 4]))
            };
            if !pushed {
                return out;
            }
        }
        for byte in chunk.invalid() {
            if !push_bounded(&mut out, &format!("\\x{byte:02x}")) {
                return out;
            }
        }
    }
    out
}

/// Characters JSON leaves raw that still end a line for some readers (C1 controls such as
/// NEL, U+2028, U+2029: Python's `splitlines`, JavaScript) or reorder what a terminal shows
/// (bidirectional overrides). They are written as the text `\uXXXX`, like invalid bytes.
fn breaks_lines_or_reorders_text(c: char) -> bool {
    matches!(c, '\u{80}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_bounded(out: &mut String, piece: &str) -> bool {
    if out.len() + piece.len() > MAX_RAW_HOST_BYTES {
        return false;
    }
    out.push_str(piece);
    true
}

/// Where records go.
#[derive(Debug)]
pub enum AuditDestination {
    /// One line per record on the process's stdout (the proxy container's audit stream).
    Stdout,
    /// Appended to this file, created if missing.
    File(PathBuf),
    /// Handed to the library caller (tests, embedders); nothing is written.
    Channel(mpsc::UnboundedSender<AuditRecord>),
}

/// Records per (decision, reason), for the caller's summary.
pub type AuditCounts = BTreeMap<(Outcome, Reason), u64>;

enum WriterMessage {
    Record(Box<AuditRecord>),
    /// Everything sent before this is written and flushed when the sender is answered.
    Flush(oneshot::Sender<()>),
}

/// The cheap, clonable handle every door holds. Sending never blocks the request path.
#[derive(Clone)]
pub struct AuditSink {
    tx: mpsc::UnboundedSender<WriterMessage>,
    counts: Arc<Mutex<AuditCounts>>,
    run: Option<Arc<str>>,
    policy: Arc<str>,
}

impl AuditSink {
    /// Opens the destination (a file is opened now, so a bad path fails before any listener
    /// is bound) and starts the single writer thread.
    pub fn start(
        destination: AuditDestination,
        run: Option<String>,
        policy: &str,
    ) -> io::Result<AuditSink> {
        let (tx, rx) = mpsc::unbounded_channel();
        let output: Output = match destination {
            AuditDestination::Stdout => Output::Writer(Box::new(io::stdout())),
            AuditDestination::File(path) => Output::Writer(Box::new(
                OpenOptions::new().create(true).append(true).open(&path)?,
            )),
            AuditDestination::Channel(channel) => Output::Channel(channel),
        };
        std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || write_records(rx, output))?;
        Ok(AuditSink {
            tx,
            counts: Arc::default(),
            run: run.map(Arc::from),
            policy: Arc::from(policy),
        })
    }

    /// Fills in `v`, `ts`, `run` and `policy`, counts the record and queues it.
    pub fn send(&self, mut record: AuditRecord) {
        record.v = AUDIT_VERSION;
        record.run = self.run.as_deref().map(str::to_owned);
        record.policy = Some(self.policy.to_string());
        if let Ok(mut counts) = self.counts.lock() {
            *counts.entry((record.decision, record.reason)).or_default() += 1;
        }
        // The writer only stops when the process ends; a failed send means it is gone.
        let _ = self.tx.send(WriterMessage::Record(Box::new(record)));
    }

    /// Waits until every record sent so far is written and flushed.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(WriterMessage::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    /// A snapshot of the records sent so far, per (decision, reason).
    pub fn counts(&self) -> AuditCounts {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

enum Output {
    Writer(Box<dyn Write + Send>),
    Channel(mpsc::UnboundedSender<AuditRecord>),
}

/// How often the writer thread drains the channel. It polls instead of waiting on the
/// channel so that sending a record never wakes a thread: on a small machine that wake-up
/// sat on every request's critical path (measured with bench/proxy.sh). Records reach the
/// log at most this much later; [`AuditSink::flush`] waits at most this long.
const WRITER_TICK: std::time::Duration = std::time::Duration::from_millis(5);

/// The writer thread: every tick, writes what has queued up and flushes once. A blocking
/// thread keeps slow disks or a full stdout pipe from stalling the async workers.
fn write_records(mut rx: mpsc::UnboundedReceiver<WriterMessage>, output: Output) {
    let mut output = match output {
        Output::Channel(channel) => Sink::Channel(channel),
        Output::Writer(writer) => Sink::Writer(io::BufWriter::with_capacity(64 * 1024, writer)),
    };
    let mut waiting = Vec::new();
    loop {
        let mut wrote = false;
        let closed = loop {
            match rx.try_recv() {
                Ok(WriterMessage::Record(record)) => {
                    output.write(*record);
                    wrote = true;
                }
                Ok(WriterMessage::Flush(done)) => waiting.push(done),
                Err(mpsc::error::TryRecvError::Empty) => break false,
                Err(mpsc::error::TryRecvError::Disconnected) => break true,
            }
        };
        if wrote || !waiting.is_empty() {
            output.flush();
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
        if closed {
            return;
        }
        std::thread::sleep(WRITER_TICK);
    }
}

enum Sink {
    Writer(io::BufWriter<Box<dyn Write + Send>>),
    Channel(mpsc::UnboundedSender<AuditRecord>),
}

impl Sink {
    fn write(&mut self, record: AuditRecord) {
        match self {
            Sink::Writer(writer) => {
                let mut line = record.to_line();
                line.push('\n');
                if let Err(error) = writer.write_all(line.as_bytes()) {
                    tracing::error!(%error, "cannot write the audit log");
                }
            }
            Sink::Channel(channel) => {
                let _ = channel.send(record);
            }
        }
    }

    fn flush(&mut self) {
        if let Sink::Writer(writer) = self
            && let Err(error) = writer.flush()
        {
            tracing::error!(%error, "cannot flush the audit log");
        }
    }
}

/// One attempt in progress. Doors and the gate fill it in; dropping it sends its record, so
/// every attempt ends in exactly one line whichever way it ends.
pub struct Attempt {
    sink: AuditSink,
    started: Instant,
    started_at: SystemTime,
    pub kind: Kind,
    pub client: Option<SocketAddr>,
    /// What goes in `host`: normalised when the target parsed, else the escaped raw value.
    pub host: String,
    pub port: Option<u16>,
    pub decision: Outcome,
    pub reason: Reason,
    pub rule: Option<String>,
    /// The exact upstream address connected to.
    pub addr: Option<SocketAddr>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Set on inspected requests: their method, path, status and credential.
    pub request: Option<RequestFields>,
}

impl Attempt {
    /// A new attempt; until a door or the gate decides otherwise it reads as a malformed
    /// request, so an attempt abandoned before any decision is never logged as allowed.
    pub fn new(sink: &AuditSink, kind: Kind, client: Option<SocketAddr>) -> Attempt {
        Attempt {
            sink: sink.clone(),
            started: Instant::now(),
            started_at: SystemTime::now(),
            kind,
            client,
            host: String::new(),
            port: None,
            decision: Outcome::Blocked,
            reason: Reason::BadRequest,
            rule: None,
            addr: None,
            bytes_up: 0,
            bytes_down: 0,
            request: None,
        }
    }

    /// Sets `host` from an untrusted raw value (escaped and cut).
    pub fn set_raw_host(&mut self, raw: &[u8]) {
        self.host = raw_host_for_log(raw);
    }

    pub fn set_outcome(&mut self, decision: Outcome, reason: Reason, rule: Option<&RuleRef>) {
        self.decision = decision;
        self.reason = reason;
        self.rule = rule.map(ToString::to_string);
    }

    /// Records a policy decision: allow → allowed/rule, report-mode → would_block.
    pub fn set_decision(&mut self, decision: &Decision) {
        let outcome = match decision.verdict {
            Verdict::Allow => Outcome::Allowed,
            Verdict::Block => Outcome::Blocked,
            Verdict::WouldBlock => Outcome::WouldBlock,
        };
        self.set_outcome(outcome, decision.reason, decision.rule.as_ref());
    }

    pub fn is_refused(&self) -> bool {
        matches!(self.decision, Outcome::Blocked | Outcome::Failed)
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        let record = AuditRecord {
            v: AUDIT_VERSION,
            ts: timestamp(self.started_at),
            run: None,
            policy: None,
            kind: self.kind,
            client: self.client.map(|c| c.to_string()),
            host: std::mem::take(&mut self.host),
            port: self.port,
            decision: self.decision,
            reason: self.reason,
            rule: self.rule.take(),
            addr: self.addr.map(|a| a.ip().to_string()),
            bytes_up: self.bytes_up,
            bytes_down: self.bytes_down,
            duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            request: self.request.take(),
        };
        self.sink.send(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_hosts_are_escaped_into_one_line() {
        let raw = b"evil\"host\r\n{\"v\":1}\x00\x1b\xff\xfe.example";
        let host = raw_host_for_log(raw);
        assert!(host.contains("\\xff\\xfe"), "{host}");
        let record = AuditRecord {
            v: 1,
            ts: timestamp(SystemTime::UNIX_EPOCH),
            run: None,
            policy: None,
            kind: Kind::Http,
            client: None,
            host,
            port: Some(80),
            decision: Outcome::Blocked,
            reason: Reason::BadRequest,
            rule: None,
            addr: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            request: None,
        };
        let line = record.to_line();
        assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
        assert!(
            line.contains(r#"evil\"host\r\n{\"v\":1}\u0000\u001b\\xff\\xfe.example"#),
            "{line}"
        );
        let back: AuditRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn raw_hosts_are_cut_on_a_character_boundary() {
        let raw = "é".repeat(200);
        let host = raw_host_for_log(raw.as_bytes());
        assert_eq!(host.len(), MAX_RAW_HOST_BYTES);
        let odd = format!("a{}", "é".repeat(200));
        let host = raw_host_for_log(odd.as_bytes());
        assert_eq!(host.len(), MAX_RAW_HOST_BYTES - 1);
        assert!(host.starts_with("aé"));
    }

    #[test]
    fn timestamps_are_rfc3339_utc_millis() {
        assert_eq!(
            timestamp(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[tokio::test]
    async fn dropped_attempts_are_recorded_and_counted() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink =
            AuditSink::start(AuditDestination::Channel(tx), Some("r-1".into()), "p").unwrap();
        {
            let mut attempt = Attempt::new(&sink, Kind::Connect, None);
            attempt.host = "example.com".into();
            attempt.port = Some(443);
        }
        sink.flush().await;
        let record = rx.recv().await.unwrap();
        assert_eq!(record.host, "example.com");
        assert_eq!(record.run.as_deref(), Some("r-1"));
        assert_eq!(record.policy.as_deref(), Some("p"));
        assert_eq!(
            (record.decision, record.reason),
            (Outcome::Blocked, Reason::BadRequest)
        );
        assert_eq!(sink.counts()[&(Outcome::Blocked, Reason::BadRequest)], 1);
    }
}
