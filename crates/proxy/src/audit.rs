//! The audit record: one JSON line per attempt (`docs/src/reference/audit-record.md`), written by
//! a single writer so lines never interleave.
//!
//! Doors never format or write records themselves: they fill in an `Attempt`, which sends
//! its record to the [`AuditSink`] when it is dropped — so an attempt cut short by shutdown,
//! a client hang-up or a panic still leaves exactly one line. The sink forwards records over a
//! channel to one writer thread (file or stdout), or hands them to the library caller.

use std::fs::OpenOptions;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use tokio::sync::{mpsc, oneshot};

pub(crate) use egress_core::audit::*;

use crate::policy::{Decision, Reason, RuleRef};
use crate::secret_forms::SecretForms;
use writer::WriterMessage;

mod budget;
mod writer;

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

/// The cheap, clonable handle every door holds. Sending never blocks the request path.
#[derive(Clone)]
pub struct AuditSink {
    /// One shared allocation: every attempt clones the handle, and one reference count
    /// costs one atomic update where a field per `Arc` cost ten, all of them on cache lines
    /// every connection of the run touches.
    inner: Arc<SinkState>,
}

/// What an [`AuditSink`] shares.
#[derive(Clone)]
struct SinkState {
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
            inner: Arc::new(SinkState {
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
            }),
        })
    }

    /// The sink that keeps the run's real secrets out of records' hosts and paths.
    pub(crate) fn with_redactor(mut self, secrets: Arc<SecretForms>) -> Self {
        Arc::make_mut(&mut self.inner).redactor = secrets;
        self
    }

    /// Every attempt record names the sandbox by this host name (`sandbox_hostname`), as
    /// each names its run and policy, so each line says where it came from on its own.
    #[must_use]
    pub fn with_sandbox_hostname(mut self, name: Option<&str>) -> AuditSink {
        Arc::make_mut(&mut self.inner).sandbox_hostname = name.map(Arc::from);
        self
    }

    /// Fills in `v`, `run`, `policy` and `sandbox_hostname` and counts the record.
    fn prepare(&self, record: &mut AuditRecord) {
        record.v = AUDIT_VERSION;
        record.run = self.inner.run.as_deref().map(str::to_owned);
        record.policy = Some(self.inner.policy.to_string());
        record.sandbox_hostname = self.inner.sandbox_hostname.as_deref().map(str::to_owned);
        if let Ok(mut counts) = self.inner.counts.lock() {
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
        let _ = self.inner.tx.send(WriterMessage::Record {
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
        if self.inner.tx.send(message).is_ok() {
            self.inner.writer.unpark();
            let _ = wait.await;
        }
    }

    /// Counts an attempt that gets no record of its own (a DNS query over the rate); the
    /// `end` record reports it in `dropped`.
    pub fn count_dropped(&self) {
        self.inner.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// How many writes or flushes of the log failed so far. Lines may be missing from it
    /// (the chain then shows where); nonzero means the log is not a complete record.
    pub fn write_errors(&self) -> u64 {
        self.inner.write_errors.load(Ordering::Relaxed)
    }

    /// A snapshot of the records sent so far, per (decision, reason).
    pub fn counts(&self) -> AuditCounts {
        self.inner
            .counts
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
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
    pub rule: Option<RuleRef>,
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
            self.held = self.sink.inner.budget.hold_for_egress();
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
        // Whatever a door put in the host, no control character or secret leaves raw.
        let host = text_for_log(&self.sink.inner.redactor.redact(&self.host));
        let mut record = AuditRecord::new(self.kind, host, self.decision, self.reason);
        record.ts = timestamp(self.started_at);
        record.client = self.client.map(|c| c.to_string());
        record.port = self.port;
        record.rule = self.rule.take().map(|rule| rule.to_string());
        record.addr = self.addr.map(|a| a.ip().to_string());
        record.addrs = self.refused_addrs.iter().map(ToString::to_string).collect();
        record.bytes_up = self.bytes_up;
        record.bytes_down = self.bytes_down;
        record.duration_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        record.request = self.request.take().map(|mut fields| {
            fields.path = self.sink.inner.redactor.redact(&fields.path).into_owned();
            fields
        });
        Some(record)
    }

    /// Sets `host` from an untrusted raw value (secrets redacted, escaped and cut).
    pub(crate) fn set_raw_host(&mut self, raw: &[u8]) {
        self.host = match self.sink.inner.redactor.find(raw) {
            None => raw_host_for_log(raw),
            Some(_) => {
                let text = String::from_utf8_lossy(raw);
                raw_host_for_log(self.sink.inner.redactor.redact(&text).as_bytes())
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
        // Kept as it is, written out once for the record: an attempt is often decided
        // twice (the name, then its addresses' check).
        self.rule = rule.cloned();
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
            self.sink.inner.budget.release(place);
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
