//! The single audit writer: one blocking thread that seals every line into the run's chain,
//! applies the audit limit, writes, flushes, and answers those waiting for their record.
//!
//! A record that holds its place in the budget (egress, see [`super::budget`]) is always
//! written; any other takes a place here or is only counted, by decision, for `end`.
//!
//! Ordinary records (allowed attempts, tunnels at their end) are queued and the thread
//! drains the queue every [`WRITER_TICK`] while records keep coming, and every
//! [`WRITER_IDLE_TICK`] once a drain found nothing, so sending one never wakes a thread: on
//! a small machine that wake-up sat on every request's critical path (measured with
//! bench/proxy.sh). A refusal instead wakes the thread and waits for its acknowledgement,
//! which comes only after the line is written and flushed: whoever sees the 403 or the
//! NXDOMAIN can read the record at once.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};

use super::AuditRecord;
use super::budget::Budget;
use egress_core::audit::{Chain, DroppedByDecision, EndRecord, LimitRecord};
use egress_core::audit::{OnAuditLimit, reserve_for};

/// How often the writer drains the queue while records keep coming.
const WRITER_TICK: std::time::Duration = std::time::Duration::from_millis(5);

/// How long the writer sleeps after a drain that found nothing. An idle proxy then wakes
/// the writer 20 times a second instead of 200 (each wake-up is a context switch, which
/// costs tens of microseconds on a small VM and lands on whatever request is running),
/// and a run with a fresh connection every few milliseconds wakes it far less than once a
/// request. An allowed attempt's line is written at most this much later; a refusal's
/// line never waits for it.
const WRITER_IDLE_TICK: std::time::Duration = std::time::Duration::from_millis(50);

pub(super) enum WriterMessage {
    /// A record; `done` is answered once it is written and flushed (or counted as dropped).
    /// `held`: its place in the budget was taken before the attempt acted.
    Record {
        record: Box<AuditRecord>,
        held: bool,
        done: Option<oneshot::Sender<()>>,
    },
    /// Everything sent before this is written and flushed when the sender is answered.
    Flush(oneshot::Sender<()>),
    /// Close the chain with the `end` record; later records are not written.
    End(oneshot::Sender<()>),
}

/// Where the writer's lines go.
pub(super) enum Output {
    Writer(Box<dyn Write + Send>),
    /// Attempt records handed to a library caller; the chain's `limit` and `end` lines are
    /// not attempts and exist only in written logs.
    Channel(mpsc::UnboundedSender<AuditRecord>),
}

/// What the writer needs to know about the run.
pub(super) struct WriterSettings {
    pub run: Option<String>,
    pub policy: String,
    /// Attempt records written before refusals are only counted (`--audit-limit`).
    pub limit: u64,
    pub on_limit: OnAuditLimit,
    /// The places left, shared with the doors that hold theirs before they act.
    pub budget: Arc<Budget>,
    /// Attempts dropped elsewhere (DNS queries over the rate), reported in `end`.
    pub dropped_elsewhere: Arc<AtomicU64>,
    /// Failed writes and flushes, for the proxy's exit status.
    pub write_errors: Arc<AtomicU64>,
}

struct Writer {
    output: Sink,
    settings: WriterSettings,
    chain: Chain,
    written: u64,
    dropped: DroppedByDecision,
    limit_written: bool,
    ended: bool,
}

/// The writer thread's body; returns when every sender is gone.
pub(super) fn run(
    mut rx: mpsc::UnboundedReceiver<WriterMessage>,
    output: Output,
    settings: WriterSettings,
) {
    let output = match output {
        Output::Channel(channel) => Sink::Channel(channel),
        Output::Writer(writer) => Sink::Writer(io::BufWriter::with_capacity(64 * 1024, writer)),
    };
    let mut writer = Writer {
        output,
        chain: Chain::new(settings.run.as_deref()),
        settings,
        written: 0,
        dropped: DroppedByDecision::default(),
        limit_written: false,
        ended: false,
    };
    let mut waiting = Vec::new();
    loop {
        let mut wrote = false;
        let closed = loop {
            match rx.try_recv() {
                Ok(WriterMessage::Record { record, held, done }) => {
                    writer.attempt(*record, held);
                    wrote = true;
                    waiting.extend(done);
                }
                Ok(WriterMessage::Flush(done)) => waiting.push(done),
                Ok(WriterMessage::End(done)) => {
                    writer.end();
                    wrote = true;
                    waiting.push(done);
                }
                Err(mpsc::error::TryRecvError::Empty) => break false,
                Err(mpsc::error::TryRecvError::Disconnected) => break true,
            }
        };
        if (wrote || !waiting.is_empty()) && !writer.output.flush() {
            writer.settings.write_errors.fetch_add(1, Ordering::Relaxed);
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
        if closed {
            return;
        }
        // A refusal unparks the thread at once; otherwise it drains once per tick.
        std::thread::park_timeout(if wrote { WRITER_TICK } else { WRITER_IDLE_TICK });
    }
}

impl Writer {
    fn attempt(&mut self, record: AuditRecord, held: bool) {
        if self.ended {
            tracing::warn!("an audit record arrived after the end record; not written");
            return;
        }
        if !held && !self.settings.budget.take_shared() {
            self.limit_reached();
            self.dropped.add(record.decision);
            return;
        }
        // Past the limit only held records come; the `limit` line goes before the first.
        if self.written == self.settings.limit {
            self.limit_reached();
        }
        self.written += 1;
        match &mut self.output {
            Sink::Channel(channel) => {
                let _ = channel.send(record);
            }
            Sink::Writer(_) => {
                let line = record.to_line();
                self.emit(line);
            }
        }
    }

    /// The one `limit` record, written when the first attempt past the limit arrives.
    fn limit_reached(&mut self) {
        if std::mem::replace(&mut self.limit_written, true) {
            return;
        }
        let reserve = reserve_for(self.settings.limit, self.settings.on_limit);
        let record = LimitRecord::new(
            self.settings.run.clone(),
            Some(self.settings.policy.clone()),
            self.settings.limit,
            self.settings.on_limit,
        );
        tracing::warn!(
            limit = self.settings.limit,
            reserve,
            "audit limit reached: further refusals are counted, not written; egress is \
             written from the reserve, and refused once none is left"
        );
        self.emit(serde_json::to_string(&record).expect("a limit record always serialises"));
    }

    fn end(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        let mut dropped = self.dropped;
        // Queries over the DNS rate are answered REFUSED: refusals.
        dropped.blocked += self.settings.dropped_elsewhere.load(Ordering::Relaxed);
        let record = EndRecord::new(
            self.settings.run.clone(),
            Some(self.settings.policy.clone()),
            self.chain.len(),
            dropped,
        );
        self.emit(serde_json::to_string(&record).expect("an end record always serialises"));
    }

    /// Seals one serialised line into the chain and writes it.
    fn emit(&mut self, line: String) {
        let Sink::Writer(writer) = &mut self.output else {
            return;
        };
        let mut line = self.chain.seal(line);
        line.push('\n');
        if let Err(error) = writer.write_all(line.as_bytes()) {
            self.settings.write_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(%error, "cannot write the audit log");
        }
    }
}

enum Sink {
    Writer(io::BufWriter<Box<dyn Write + Send>>),
    Channel(mpsc::UnboundedSender<AuditRecord>),
}

impl Sink {
    /// False when the flush failed.
    fn flush(&mut self) -> bool {
        if let Sink::Writer(writer) = self
            && let Err(error) = writer.flush()
        {
            tracing::error!(%error, "cannot flush the audit log");
            return false;
        }
        true
    }
}
