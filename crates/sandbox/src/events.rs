//! A run followed live: its id before anything is created, the moment the command is let
//! go and the moment it is over, and each audit record as the proxy writes it. The daemon
//! (`serve`) streams these to its API clients; the CLI needs none of them.
//!
//! # Backpressure
//!
//! Events go into a bounded [`tokio::sync::mpsc::Sender`] whose capacity the caller picks
//! ([`OutputSinks::with_events`](super::OutputSinks::with_events)). No event is ever dropped
//! for want of room:
//!
//! - While the command runs, a full channel makes the run wait for the receiver: the run's
//!   reading of the proxy's audit stream pauses (the proxy's output then waits in the
//!   engine), as a slow reader of the command's output slows the command. The time limit
//!   and interrupts hold all the same.
//! - Once the command is over, nothing waits for the receiver: `Ended` and the records the
//!   proxy writes at its stop are queued in order and delivered as room comes, by a task
//!   that holds the channel open until the last one is in. So a slow receiver never holds
//!   the run's end, its audit file or its outcome; the queue is the tail of one run's
//!   records (at most its audit limit).
//!
//! The `--audit-log` file does not depend on the channel: each record is handed to the
//! file's writer thread before it is offered to the channel, and a receiver that is dropped
//! only ends the events. A receiver sees every event by reading until the channel closes,
//! which may be a little after the run's future has resolved.

use bytes::Bytes;
/// The parsed audit lines, re-exported so an embedder reads records without naming the
/// proxy crate.
pub use egress_core::audit::{AuditLine, AuditRecord, EndRecord, Kind, LimitRecord, Outcome};
pub use egress_core::policy::Reason;
use tokio::sync::mpsc::{Sender, UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

/// One step of a run, in order: `Id`, then (if set-up succeeds) `Started`, any number of
/// `Audit` (and `UnparsedLine`), `Ended`, and possibly more `Audit` (records the proxy
/// flushes at its stop).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunEvent {
    /// The run's id, before any object is created.
    Id(String),
    /// Set-up is over and the command was let go.
    Started,
    /// One line of the run's audit log, parsed, with its exact bytes.
    Audit(AuditEntry),
    /// A line on the proxy's audit stream that is no audit record (not JSON, or no known
    /// kind of line): kept here, exactly (no newline), so that nothing the proxy said is
    /// lost without a trace. It is not written to the `--audit-log` file, whose lines are
    /// all records of the chain, and the run's counts do not include it.
    UnparsedLine(Bytes),
    /// The command is over (exited, or killed); teardown begins.
    Ended,
}

/// The run's side of the event channel: while the command runs, a send waits for room;
/// once [`stop_waiting`](Self::stop_waiting) is called (the command is over), nothing
/// waits any more: each event is queued, in order, for a task that delivers them as room
/// comes, holding the channel open until the last one is delivered.
#[derive(Clone)]
pub(crate) struct EventSender {
    events: Sender<RunEvent>,
    no_more_waiting: CancellationToken,
    /// The events sent after `no_more_waiting`, for `deliver_tail`.
    tail: UnboundedSender<RunEvent>,
}

impl EventSender {
    pub(crate) fn new(events: Sender<RunEvent>) -> EventSender {
        let (tail, queued) = unbounded_channel();
        tokio::spawn(deliver_tail(queued, events.clone()));
        EventSender {
            events,
            no_more_waiting: CancellationToken::new(),
            tail,
        }
    }

    /// Sends `event`; `false` when the receiver has gone (the run goes on without it).
    pub(crate) async fn send(&self, event: RunEvent) -> bool {
        // Once queueing, always: a later event must not overtake one still in the queue.
        if self.no_more_waiting.is_cancelled() {
            return self.tail.send(event).is_ok();
        }
        let permit = tokio::select! {
            biased;
            permit = self.events.reserve() => permit,
            () = self.no_more_waiting.cancelled() => return self.tail.send(event).is_ok(),
        };
        match permit {
            Ok(permit) => {
                permit.send(event);
                true
            }
            Err(_) => false,
        }
    }

    /// From now on no send waits for the receiver.
    pub(crate) fn stop_waiting(&self) {
        self.no_more_waiting.cancel();
    }
}

/// Delivers the events queued after the run stopped waiting, in order, until the queue's
/// senders are gone and it is empty, or the receiver has gone.
async fn deliver_tail(mut queued: UnboundedReceiver<RunEvent>, events: Sender<RunEvent>) {
    while let Some(event) = queued.recv().await {
        if events.send(event).await.is_err() {
            return;
        }
    }
}

/// One line of a run's audit log as the proxy wrote it: the parsed line
/// ([`line`](Self::line), or [`attempt`](Self::attempt) for an attempt's record) and its
/// exact bytes ([`bytes`](Self::bytes)), which the chain's hashes cover and which are what
/// is written to a file or streamed on (never a re-serialisation of the parsed line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    line: AuditLine,
    bytes: Bytes,
}

impl AuditEntry {
    /// `bytes` (one line, without its newline) parsed.
    pub fn parse(bytes: Bytes) -> Result<AuditEntry, serde_json::Error> {
        let line = AuditLine::parse(&bytes)?;
        Ok(AuditEntry { line, bytes })
    }

    /// The parsed line: an attempt, the audit limit being reached, or the chain's end.
    pub fn line(&self) -> &AuditLine {
        &self.line
    }

    /// The attempt's record (its decision, reason, host …), when the line is one.
    pub fn attempt(&self) -> Option<&AuditRecord> {
        match &self.line {
            AuditLine::Attempt(record) => Some(record),
            // `limit`, `end`, and kinds of line this version does not know.
            _ => None,
        }
    }

    /// The line exactly as the proxy wrote it, without its newline.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(line: &str) -> AuditEntry {
        AuditEntry::parse(Bytes::copy_from_slice(line.as_bytes())).unwrap()
    }

    const ATTEMPT: &str = r#"{"v":1,"ts":"t","run":"r","policy":"p","kind":"dns","client":null,"host":"a.test","port":null,"decision":"blocked","reason":"not_allowed","rule":null,"addr":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"seq":0,"prev":"x"}"#;

    /// While the command runs a full channel holds the sender; once the run stops waiting,
    /// sends return at once and every event still arrives, in order, before the channel
    /// closes.
    #[tokio::test]
    async fn a_full_channel_holds_the_run_until_it_stops_waiting_and_nothing_is_lost() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let events = EventSender::new(tx);
        assert!(events.send(RunEvent::Started).await);
        {
            let waiting = events.send(RunEvent::Ended);
            tokio::pin!(waiting);
            assert!(
                futures_util::poll!(waiting.as_mut()).is_pending(),
                "a full channel waits"
            );
            events.stop_waiting();
            assert!(waiting.await);
        }
        for n in 0..100 {
            assert!(events.send(RunEvent::Id(n.to_string())).await);
        }
        let mut received = vec![rx.recv().await.unwrap()];
        // Room again, but the queue still holds events: this one waits its turn.
        assert!(events.send(RunEvent::Id("last".to_string())).await);
        drop(events);
        while let Some(event) = rx.recv().await {
            received.push(event);
        }
        let mut expected = vec![RunEvent::Started, RunEvent::Ended];
        expected.extend((0..100).map(|n| RunEvent::Id(n.to_string())));
        expected.push(RunEvent::Id("last".to_string()));
        assert_eq!(received, expected);
    }

    #[tokio::test]
    async fn a_receiver_that_went_away_is_said() {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        drop(rx);
        assert!(!EventSender::new(tx).send(RunEvent::Started).await);
    }

    /// Every kind of line the proxy writes parses: attempts of each door, the limit line
    /// and the end line, each with the chain's fields.
    #[test]
    fn every_kind_of_line_the_proxy_writes_parses() {
        for kind in ["connect", "http", "dns", "tls", "tcp"] {
            let line = ATTEMPT.replace(r#""kind":"dns""#, &format!(r#""kind":"{kind}""#));
            assert!(entry(&line).attempt().is_some(), "{kind}");
        }
        let http = r#"{"v":1,"ts":"t","run":"r","policy":"p","kind":"http","client":"10.0.0.3:5","host":"a.test","port":80,"decision":"allowed","reason":"rule","rule":"a.test","addr":"10.0.0.9:80","bytes_up":10,"bytes_down":20,"duration_ms":3,"method":"GET","path":"/","status":200,"credential":null,"seq":1,"prev":"x"}"#;
        let record = entry(http);
        let request = record.attempt().unwrap().request.as_ref().unwrap();
        assert_eq!(
            (request.method.as_str(), request.status),
            ("GET", Some(200))
        );
        let limit = r#"{"v":1,"ts":"t","run":"r","policy":"p","kind":"limit","reason":"audit_limit","limit":2,"seq":2,"prev":"x"}"#;
        assert!(matches!(entry(limit).line(), AuditLine::Limit(_)));
        let end = r#"{"v":1,"ts":"t","run":"r","policy":"p","kind":"end","records":3,"dropped":1,"seq":3,"prev":"x"}"#;
        assert!(matches!(entry(end).line(), AuditLine::End(_)));
        assert!(AuditEntry::parse(Bytes::from_static(b"not json")).is_err());
    }
}
