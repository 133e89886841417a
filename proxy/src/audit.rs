//! The audit record: one JSON line per attempt (`docs/src/reference/audit-record.md`), written by
//! a single writer so lines never interleave.
//!
//! Doors never format or write records themselves: they fill in an `Attempt`, which sends
//! its record to the [`AuditSink`] when it is dropped — so an attempt cut short by shutdown,
//! a client hang-up or a panic still leaves exactly one line. The sink forwards records over a
//! channel to one writer thread (file or stdout), or hands them to the library caller.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::policy::{Decision, Reason, RuleRef, Verdict};
use crate::secret_forms::SecretForms;
use crate::text::{must_escape, push_escape};
use writer::WriterMessage;

mod budget;
mod chain;
mod writer;

pub use budget::{OnAuditLimit, OnAuditLimitError};
pub use chain::{
    AuditLine, Chain, DroppedByDecision, EndKind, EndRecord, LimitKind, LimitRecord, genesis,
    sha256_hex,
};

/// The schema version written in every record's `v`.
pub const AUDIT_VERSION: u32 = 1;

/// Raw, untrusted host strings are cut to this many bytes before they are logged.
pub const MAX_RAW_HOST_BYTES: usize = 256;

/// How the attempt reached the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Kind {
    Connect,
    Http,
    Dns,
    /// Transparent TLS, routed by SNI.
    Tls,
    /// Transparent, neither TLS nor HTTP.
    Tcp,
}

impl Kind {
    /// The name the audit record's `kind` field carries (`connect`, `http`, `dns`, `tls`,
    /// `tcp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Connect => "connect",
            Kind::Http => "http",
            Kind::Dns => "dns",
            Kind::Tls => "tls",
            Kind::Tcp => "tcp",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
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

/// The record's decision for a policy verdict: allow → allowed, block → blocked,
/// report mode → would_block.
impl From<Verdict> for Outcome {
    fn from(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Allow => Outcome::Allowed,
            Verdict::Block => Outcome::Blocked,
            Verdict::WouldBlock => Outcome::WouldBlock,
        }
    }
}

/// One line of the audit log. Field order is the order of
/// `docs/src/reference/audit-record.md`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub v: u32,
    /// RFC 3339 UTC with milliseconds, e.g. `2026-11-29T18:40:43.123Z`.
    pub ts: String,
    pub run: Option<String>,
    pub policy: Option<String>,
    pub kind: Kind,
    pub client: Option<String>,
    /// The sandbox's host name, the client's name as the sandbox knows itself, when the run
    /// has one (`ProxyConfig::sandbox_hostname`): what names the source of every attempt in
    /// an export such as OCSF's `src_endpoint.hostname`. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_hostname: Option<String>,
    /// Normalised when valid; otherwise the raw value, escaped and cut to 256 bytes.
    pub host: String,
    pub port: Option<u16>,
    pub decision: Outcome,
    pub reason: Reason,
    pub rule: Option<String>,
    pub addr: Option<String>,
    /// Refusals after resolution only (`private_address`, a deny `cidr`): every address the
    /// name resolved to, each refused, so an operator can tell a rebinding attempt from a
    /// split-horizon mistake. The sandbox is never told them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addrs: Vec<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
    /// `http` requests whose method and path the proxy read: `method`, `path`, `status`,
    /// and for inspected requests `credential`.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestFields>,
}

/// What a request read in clear (plain or inspected) adds to its `http` record. `path`
/// never holds the query string; `credential` is the name of the secret an inspected
/// request had added, never a value, and null on plain requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestFields {
    pub method: String,
    pub path: String,
    /// The upstream's status, or null when no response came.
    pub status: Option<u16>,
    pub credential: Option<String>,
    /// Occurrences of a run's real secret replaced by its placeholder in the answer (reason
    /// phrase, headers, body, trailers; a refused answer's quoted coding); absent when none
    /// was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflected: Option<u64>,
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

/// An untrusted host (or label, SNI, path) as bytes, made safe for the log at the source:
/// every character of [`must_escape`] (C0 controls, DEL, C1 controls, bidi controls, line
/// and paragraph separators) becomes the visible text `\x1b` / `\u202e`, invalid UTF-8 bytes
/// become the text `\xNN`, and the result is cut to [`MAX_RAW_HOST_BYTES`] on a character
/// boundary. JSON escaping alone is not enough: every JSON reader undoes it, and the record's
/// text would then erase or forge what an operator reads on a terminal.
pub fn raw_host_for_log(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len().min(MAX_RAW_HOST_BYTES));
    let mut escaped = String::new();
    for chunk in raw.utf8_chunks() {
        for c in chunk.valid().chars() {
            let pushed = if must_escape(c) {
                escaped.clear();
                push_escape(&mut escaped, c);
                push_bounded(&mut out, &escaped)
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

/// Text for a record's field made safe as [`raw_host_for_log`] does; unchanged (apart from
/// the cut) when it holds nothing to escape, so escaping twice changes nothing.
pub(crate) fn text_for_log(text: &str) -> String {
    raw_host_for_log(text.as_bytes())
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
#[non_exhaustive]
pub enum AuditDestination {
    /// One line per record on the process's stdout (the proxy container's audit stream).
    Stdout,
    /// Appended to this file, created if missing.
    File(PathBuf),
    /// Attempt records handed to the library caller (tests, embedders); nothing is written,
    /// so there is no chain and no `limit` or `end` line.
    Channel(mpsc::UnboundedSender<AuditRecord>),
}

/// Records per (decision, reason), for the caller's summary.
pub type AuditCounts = BTreeMap<(Outcome, Reason), u64>;

/// The default of `--audit-limit`: attempt records written per run before the rest are
/// only counted.
pub const DEFAULT_AUDIT_LIMIT: u64 = 100_000;

/// The cheap, clonable handle every door holds. Sending never blocks the request path.
#[derive(Clone)]
pub struct AuditSink {
    tx: mpsc::UnboundedSender<WriterMessage>,
    /// The writer thread, woken when someone waits for their record.
    writer: std::thread::Thread,
    counts: Arc<Mutex<AuditCounts>>,
    /// The places left for records; egress takes its own before it acts.
    budget: Arc<budget::Budget>,
    dropped: Arc<AtomicU64>,
    /// Writes and flushes of the log that failed (a full disk, a reader gone).
    write_errors: Arc<AtomicU64>,
    run: Option<Arc<str>>,
    policy: Arc<str>,
    /// The run's real secrets: where one sits in a host or path, the record shows
    /// `«secret:NAME»`.
    redactor: Arc<SecretForms>,
    sandbox_hostname: Option<Arc<str>>,
}

impl AuditSink {
    /// Opens the destination (a file is opened now, so a bad path fails before any listener
    /// is bound) and starts the single writer thread. After `limit` attempt records, one
    /// `limit` record is written and later refusals are only counted; egress then goes as
    /// `on_limit` says ([`OnAuditLimit`]).
    pub fn start(
        destination: AuditDestination,
        run: Option<String>,
        policy: &str,
        limit: u64,
        on_limit: OnAuditLimit,
    ) -> io::Result<AuditSink> {
        let (tx, rx) = mpsc::unbounded_channel();
        let output = match destination {
            AuditDestination::Stdout => writer::Output::Writer(Box::new(io::stdout())),
            AuditDestination::File(path) => writer::Output::Writer(Box::new(
                OpenOptions::new().create(true).append(true).open(&path)?,
            )),
            AuditDestination::Channel(channel) => writer::Output::Channel(channel),
        };
        let dropped = Arc::new(AtomicU64::new(0));
        let write_errors = Arc::new(AtomicU64::new(0));
        let budget = Arc::new(budget::Budget::new(limit, on_limit));
        let settings = writer::WriterSettings {
            run: run.clone(),
            policy: policy.to_owned(),
            limit,
            on_limit,
            budget: budget.clone(),
            dropped_elsewhere: dropped.clone(),
            write_errors: write_errors.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("audit-writer".into())
            .spawn(move || writer::run(rx, output, settings))?;
        Ok(AuditSink {
            tx,
            writer: thread.thread().clone(),
            counts: Arc::default(),
            budget,
            dropped,
            write_errors,
            run: run.map(Arc::from),
            policy: Arc::from(policy),
            redactor: Arc::default(),
            sandbox_hostname: None,
        })
    }

    /// The sink that keeps the run's real secrets out of records' hosts and paths.
    pub(crate) fn with_redactor(mut self, secrets: Arc<SecretForms>) -> Self {
        self.redactor = secrets;
        self
    }

    /// Every attempt record names the sandbox by this host name (`sandbox_hostname`), as
    /// each names its run and policy, so each line says where it came from on its own.
    #[must_use]
    pub fn with_sandbox_hostname(mut self, name: Option<&str>) -> AuditSink {
        self.sandbox_hostname = name.map(Arc::from);
        self
    }

    /// Fills in `v`, `run`, `policy` and `sandbox_hostname` and counts the record.
    fn prepare(&self, record: &mut AuditRecord) {
        record.v = AUDIT_VERSION;
        record.run = self.run.as_deref().map(str::to_owned);
        record.policy = Some(self.policy.to_string());
        record.sandbox_hostname = self.sandbox_hostname.as_deref().map(str::to_owned);
        if let Ok(mut counts) = self.counts.lock() {
            *counts.entry((record.decision, record.reason)).or_default() += 1;
        }
    }

    /// Queues the record; it reaches the log within a writer tick (5 ms while records keep
    /// coming, 50 ms after a quiet spell).
    pub fn send(&self, record: AuditRecord) {
        self.send_record(record, false);
    }

    fn send_record(&self, mut record: AuditRecord, held: bool) {
        self.prepare(&mut record);
        // The writer only stops when the process ends; a failed send means it is gone.
        let _ = self.tx.send(WriterMessage::Record {
            record: Box::new(record),
            held,
            done: None,
        });
    }

    /// Sends the record and waits until it is written and flushed (or counted as dropped
    /// past the audit limit): how a refusal is recorded before it is answered.
    pub async fn send_and_wait(&self, record: AuditRecord) {
        self.send_and_wait_record(record, false).await;
    }

    async fn send_and_wait_record(&self, mut record: AuditRecord, held: bool) {
        self.prepare(&mut record);
        let (done, wait) = oneshot::channel();
        let message = WriterMessage::Record {
            record: Box::new(record),
            held,
            done: Some(done),
        };
        self.wait_for(message, wait).await;
    }

    /// Waits until every record sent so far is written and flushed.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        self.wait_for(WriterMessage::Flush(done), wait).await;
    }

    /// Writes the run's `end` record (after every record sent so far) and waits until it is
    /// flushed. Records sent later are not written. Called once, at shutdown.
    pub async fn finish(&self) {
        let (done, wait) = oneshot::channel();
        self.wait_for(WriterMessage::End(done), wait).await;
    }

    async fn wait_for(&self, message: WriterMessage, wait: oneshot::Receiver<()>) {
        if self.tx.send(message).is_ok() {
            self.writer.unpark();
            let _ = wait.await;
        }
    }

    /// Counts an attempt that gets no record of its own (a DNS query over the rate); the
    /// `end` record reports it in `dropped`.
    pub fn count_dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// How many writes or flushes of the log failed so far. Lines may be missing from it
    /// (the chain then shows where); nonzero means the log is not a complete record.
    pub fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }

    /// A snapshot of the records sent so far, per (decision, reason).
    pub fn counts(&self) -> AuditCounts {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

/// One attempt in progress. Doors and the gate fill it in; dropping it sends its record, so
/// every attempt ends in exactly one line whichever way it ends.
pub(crate) struct Attempt {
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
    /// The addresses refused after resolution, when none was left to connect to.
    pub refused_addrs: Vec<IpAddr>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Set on requests read in clear: their method, path, status (and credential).
    pub request: Option<RequestFields>,
    /// The record went out already ([`Attempt::record`]); dropping sends nothing more.
    sent: bool,
    /// The record's place in the budget is taken ([`Attempt::hold_record`]): it is written
    /// whatever happens.
    held: Option<budget::Place>,
}

impl Attempt {
    /// A new attempt; until a door or the gate decides otherwise it reads as a malformed
    /// request, so an attempt abandoned before any decision is never logged as allowed.
    pub(crate) fn new(sink: &AuditSink, kind: Kind, client: Option<SocketAddr>) -> Attempt {
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
            refused_addrs: Vec::new(),
            bytes_up: 0,
            bytes_down: 0,
            request: None,
            sent: false,
            held: None,
        }
    }

    /// Takes this attempt's place in the audit budget before it reaches anything, so its
    /// record is written whatever the sandbox does next. Every door calls it (through the
    /// gate, the DNS responder and the inspected request's judgement) once the policy let
    /// the attempt through and before anything leaves. False when no place is left: the
    /// attempt is then refused (`audit_limit`) and must not go ahead.
    pub(crate) fn hold_record(&mut self) -> bool {
        if self.held.is_none() {
            self.held = self.sink.budget.hold_for_egress();
        }
        if self.held.is_none() {
            self.set_outcome(Outcome::Blocked, Reason::AuditLimit, None);
        }
        self.held.is_some()
    }

    /// Sends the record now and waits until it is written and flushed. Every door calls
    /// this before it answers a refusal (403, 400, NXDOMAIN, a close), so whoever sees the
    /// answer finds the record in the log.
    pub(crate) async fn record(mut self) {
        if let Some(record) = self.take_record() {
            self.sink
                .send_and_wait_record(record, self.held.is_some())
                .await;
        }
    }

    /// The record, once: `None` after it was taken.
    fn take_record(&mut self) -> Option<AuditRecord> {
        if std::mem::replace(&mut self.sent, true) {
            return None;
        }
        Some(AuditRecord {
            v: AUDIT_VERSION,
            ts: timestamp(self.started_at),
            run: None,
            policy: None,
            kind: self.kind,
            client: self.client.map(|c| c.to_string()),
            sandbox_hostname: None,
            // Whatever a door put here, no control character or secret leaves raw.
            host: text_for_log(&self.sink.redactor.redact(&self.host)),
            port: self.port,
            decision: self.decision,
            reason: self.reason,
            rule: self.rule.take(),
            addr: self.addr.map(|a| a.ip().to_string()),
            addrs: self.refused_addrs.iter().map(ToString::to_string).collect(),
            bytes_up: self.bytes_up,
            bytes_down: self.bytes_down,
            duration_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            request: self.request.take().map(|mut fields| {
                fields.path = self.sink.redactor.redact(&fields.path).into_owned();
                fields
            }),
        })
    }

    /// Sets `host` from an untrusted raw value (secrets redacted, escaped and cut).
    pub(crate) fn set_raw_host(&mut self, raw: &[u8]) {
        self.host = match self.sink.redactor.find(raw) {
            None => raw_host_for_log(raw),
            Some(_) => {
                let text = String::from_utf8_lossy(raw);
                raw_host_for_log(self.sink.redactor.redact(&text).as_bytes())
            }
        };
    }

    pub(crate) fn set_outcome(
        &mut self,
        decision: Outcome,
        reason: Reason,
        rule: Option<&RuleRef>,
    ) {
        self.decision = decision;
        self.reason = reason;
        self.rule = rule.map(ToString::to_string);
    }

    /// Records a policy decision: allow → allowed/rule, report-mode → would_block.
    pub(crate) fn set_decision(&mut self, decision: &Decision) {
        self.set_outcome(
            decision.verdict.into(),
            decision.reason,
            decision.rule.as_ref(),
        );
    }

    /// This attempt gets no record: the DNS responder's answer for the sandbox's own host
    /// name, which reaches nothing (`ProxyConfig::sandbox_hostname`), a client's repeated
    /// lookup of a name it was just answered, or a query over the DNS rate. A place it held
    /// in the audit budget is given back, so unrecorded answers cannot spend the budget.
    pub(crate) fn forget(&mut self) {
        self.sent = true;
        if let Some(place) = self.held.take() {
            self.sink.budget.release(place);
        }
    }

    pub(crate) fn is_refused(&self) -> bool {
        matches!(self.decision, Outcome::Blocked | Outcome::Failed)
    }
}

impl Drop for Attempt {
    /// An attempt that ends any other way (a tunnel closing, shutdown, a panic) still sends
    /// its record, queued.
    fn drop(&mut self) {
        if let Some(record) = self.take_record() {
            self.sink.send_record(record, self.held.is_some());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind; the match fails to compile when a kind is added and not listed.
    fn every_kind() -> [Kind; 5] {
        let every = [Kind::Connect, Kind::Http, Kind::Dns, Kind::Tls, Kind::Tcp];
        for kind in every {
            match kind {
                Kind::Connect | Kind::Http | Kind::Dns | Kind::Tls | Kind::Tcp => {}
            }
        }
        every
    }

    /// Every verdict, as [`every_kind`].
    fn every_verdict() -> [Verdict; 3] {
        let every = [Verdict::Allow, Verdict::Block, Verdict::WouldBlock];
        for verdict in every {
            match verdict {
                Verdict::Allow | Verdict::Block | Verdict::WouldBlock => {}
            }
        }
        every
    }

    fn serde_form(value: impl Serialize) -> String {
        match serde_json::to_value(value).unwrap() {
            serde_json::Value::String(form) => form,
            other => panic!("not a string: {other}"),
        }
    }

    #[test]
    fn a_kind_reads_as_the_records_kind_field() {
        for kind in every_kind() {
            assert_eq!(kind.as_str(), serde_form(kind), "{kind:?}");
            assert_eq!(kind.to_string(), kind.as_str(), "{kind:?}");
        }
    }

    #[test]
    fn a_verdict_reads_as_the_decision_its_record_gets() {
        for verdict in every_verdict() {
            let outcome = Outcome::from(verdict);
            assert_eq!(verdict.as_str(), serde_form(outcome), "{verdict:?}");
            assert_eq!(outcome.as_str(), verdict.as_str(), "{verdict:?}");
            assert_eq!(verdict.to_string(), verdict.as_str(), "{verdict:?}");
        }
    }

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
            sandbox_hostname: None,
            host,
            port: Some(80),
            decision: Outcome::Blocked,
            reason: Reason::BadRequest,
            rule: None,
            addr: None,
            addrs: Vec::new(),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            request: None,
        };
        let line = record.to_line();
        assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
        assert!(
            line.contains(r#"evil\"host\\x0d\\x0a{\"v\":1}\\x00\\x1b\\xff\\xfe.example"#),
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
        let sink = AuditSink::start(
            AuditDestination::Channel(tx),
            Some("r-1".into()),
            "p",
            10,
            OnAuditLimit::Reserve,
        )
        .unwrap();
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
