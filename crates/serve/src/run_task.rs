//! One accepted `POST /v1/runs`: the run through the library's lifecycle, turned into the
//! NDJSON event stream. The stream's receiver going away (the client closed the
//! connection) cancels the run, as does `DELETE /v1/runs/{id}` and the daemon's shutdown.
//!
//! The stream holds at most [`STREAM_LINES`] lines not yet sent: a client that reads
//! slowly slows the command's output down (through Docker, the command itself, as a slow
//! pipe would), never grows the daemon's memory.

use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde_json::value::RawValue;
use tokio::sync::mpsc::{Receiver, Sender, channel};
use tokio_util::sync::PollSender;

use super::Shared;
use super::live_runs::LiveRun;
use egress_sandbox::Leftovers;
use egress_sandbox::{Interruption, OutputSinks, RunEvent, RunSpec, RunStatus};
use egress_sandbox::{RunReport, summary_line};

/// Lines of the event stream the daemon holds for a client that has not read them yet.
const STREAM_LINES: usize = 64;
/// Run events waiting for the stream: a client that reads slowly slows a running
/// command's audit stream (`sandbox::events`), never grows the daemon's memory.
const RUN_EVENTS: usize = 256;
/// How long the run's last lines (audit records, then `exit`) may wait for a client that
/// does not read, once the run is over; then the stream is cut and the objects removed.
/// One bound for all of them: the audit records and the `exit` line share it.
const LAST_LINES_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// An `audit` event: the record is the proxy's line, byte for byte.
#[derive(serde::Serialize)]
struct AuditLine<'a> {
    event: &'static str,
    record: &'a RawValue,
}

/// The `exit` event: the report as `run` writes it (field order kept), the summary line.
#[derive(serde::Serialize)]
struct ExitLine<'a> {
    event: &'static str,
    report: &'a RawValue,
    summary: String,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    teardown_errors: &'a [String],
}

/// The `error` event: the set-up failed (nothing of the run is left), and the request
/// field at fault when one is (named as a 400's `field` names it).
#[derive(serde::Serialize)]
struct ErrorLine {
    event: &'static str,
    error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'static str>,
    exit_code: u8,
}

/// One event line of the stream (with its newline). Built from typed structs (never a
/// `Value`, which would re-sort raw JSON's fields).
fn line(event: &impl serde::Serialize) -> Bytes {
    let mut text = serde_json::to_vec(event).expect("an event always serialises");
    text.push(b'\n');
    Bytes::from(text)
}

/// Writes the command's output as `output` events, waiting for room in the stream.
struct OutputEvents {
    stream: &'static str,
    lines: PollSender<Bytes>,
}

impl tokio::io::AsyncWrite for OutputEvents {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        // A closed stream is the run's cancellation, handled elsewhere; keep draining.
        if std::task::ready!(self.lines.poll_reserve(cx)).is_ok() {
            let event = serde_json::json!({
                "event": "output",
                "stream": self.stream,
                "b64": STANDARD.encode(buf),
            });
            let _ = self.lines.send_item(line(&event));
        }
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Runs `spec` in the background; the returned receiver is the response body. The run
/// holds its `live` place until its answer is sent, not while its objects are removed.
pub(super) fn start(
    shared: Arc<Shared>,
    spec: RunSpec,
    stdin: Vec<u8>,
    live: LiveRun,
) -> Receiver<Bytes> {
    let (lines, body) = channel(STREAM_LINES);
    // The few warnings fit the fresh stream.
    let warnings = spec.warnings().iter().map(ToString::to_string);
    for text in warnings.chain(spec.notices().iter().cloned()) {
        let _ = lines.try_send(line(&serde_json::json!({
            "event": "warning",
            "text": text,
        })));
    }
    let guard = shared.enter();
    tokio::spawn(async move {
        let _guard = guard;
        shared.metrics.active().inc();
        let leftovers = run(&shared, spec, stdin, lines).await;
        // Before the gauge falls: a client that saw it fall may ask for a run at once.
        drop(live);
        shared.metrics.active().dec();
        // Answered (the stream has ended): now the containers and the network go.
        if let Some(leftovers) = leftovers {
            shared.metrics.tearing_down().inc();
            let run_id = leftovers.run_id().to_string();
            for failure in leftovers.remove().await {
                tracing::warn!(run = %run_id, "could not remove {failure}; `egress-sandbox gc` will");
            }
            tracing::debug!(run = %run_id, "run objects removed");
            shared.metrics.tearing_down().dec();
        }
    });
    body
}

/// Runs to the outcome and answers with it; returns the objects left to remove (the
/// stream has ended when it returns).
async fn run(
    shared: &Arc<Shared>,
    spec: RunSpec,
    stdin: Vec<u8>,
    lines: Sender<Bytes>,
) -> Option<Leftovers> {
    let accepted = Instant::now();
    let (events_tx, events) = channel(RUN_EVENTS);
    let sinks = OutputSinks::new(
        OutputEvents {
            stream: "stdout",
            lines: PollSender::new(lines.clone()),
        },
        OutputEvents {
            stream: "stderr",
            lines: PollSender::new(lines.clone()),
        },
    )
    .with_stdin(std::io::Cursor::new(stdin))
    .with_events(events_tx);
    let cancel = Arc::new(tokio::sync::Notify::new());
    let cancel_signal = Arc::new(std::sync::Mutex::new(Interruption::Interrupt));
    let follower = tokio::spawn(follow(
        shared.clone(),
        events,
        lines.clone(),
        cancel.clone(),
        cancel_signal.clone(),
        accepted,
    ));
    let interrupt = {
        let lines = lines.clone();
        let mut shutdown = shared.shutdown.subscribe();
        async move {
            tokio::select! {
                () = lines.closed() => Interruption::Interrupt,
                () = cancel.notified() => *cancel_signal.lock().expect("cancel signal lock"),
                _ = shutdown.wait_for(|stopping| *stopping) => Interruption::Terminate,
            }
        }
    };
    let (warm, refill) = match shared.pool.take(&spec) {
        Some((warm, refill)) => (Some(warm), Some(refill)),
        None => (None, None),
    };
    shared.metrics.run_start(warm.is_some());
    let (result, leftovers) = shared
        .sandbox
        .run_leaving_objects(warm, &spec, sinks, interrupt)
        .await;
    // The follower sees every event once the run's last ones are delivered (after the
    // command, nothing waits for it). Not waited for without a bound: teardown must never
    // hang on it.
    let last_lines_by = tokio::time::Instant::now() + LAST_LINES_WAIT;
    let mut follower = follower;
    let run_id = match tokio::time::timeout_at(last_lines_by, &mut follower).await {
        Ok(joined) => joined.ok().flatten(),
        Err(_) => {
            tracing::warn!("the run's events did not end with the run");
            follower.abort();
            leftovers
                .as_ref()
                .map(|objects| objects.run_id().to_owned())
        }
    };
    if let Some(id) = &run_id {
        shared.runs.lock().expect("runs lock").remove(id);
    }
    let last_line = match result {
        Ok(outcome) => {
            shared.metrics.run_finished(
                status_name(outcome.status),
                (!outcome.duration.is_zero()).then_some(outcome.duration.as_secs_f64()),
            );
            let report = serde_json::to_string(&RunReport::new(&outcome))
                .expect("a report always serialises");
            let report = RawValue::from_string(report).expect("a report is JSON");
            line(&ExitLine {
                event: "exit",
                report: &report,
                summary: summary_line(&outcome),
                teardown_errors: &outcome.teardown_errors,
            })
        }
        Err(error) => {
            shared.metrics.run_finished("setup_failed", None);
            line(&ErrorLine {
                event: "error",
                error: error.message_with_causes(),
                field: error.field().map(egress_sandbox::Field::name),
                exit_code: 125,
            })
        }
    };
    if tokio::time::timeout_at(last_lines_by, lines.send(last_line))
        .await
        .is_err()
    {
        tracing::warn!("the client did not read its run's last line; the stream is cut");
    }
    // Answered: the claimed slot's replacement may start now.
    drop(refill);
    leftovers
}

/// Turns run events into `started` / `audit` lines, registers the run for DELETE, counts
/// metrics. Returns the run id.
async fn follow(
    shared: Arc<Shared>,
    mut events: Receiver<RunEvent>,
    lines: Sender<Bytes>,
    cancel: Arc<tokio::sync::Notify>,
    cancel_signal: Arc<std::sync::Mutex<Interruption>>,
    accepted: Instant,
) -> Option<String> {
    let mut run_id = None;
    while let Some(event) = events.recv().await {
        match event {
            RunEvent::Id(id) => {
                shared.runs.lock().expect("runs lock").insert(
                    id.clone(),
                    super::Cancel {
                        notify: cancel.clone(),
                        signal: cancel_signal.clone(),
                    },
                );
                let _ = lines
                    .send(line(&serde_json::json!({"event": "started", "run": id})))
                    .await;
                run_id = Some(id);
            }
            RunEvent::Started => shared.metrics.setup_done(accepted.elapsed().as_secs_f64()),
            RunEvent::Audit(entry) => {
                shared.metrics.audit_record(entry.bytes());
                match std::str::from_utf8(entry.bytes())
                    .ok()
                    .and_then(|text| RawValue::from_string(text.to_string()).ok())
                {
                    Some(raw) => {
                        let _ = lines
                            .send(line(&AuditLine {
                                event: "audit",
                                record: &raw,
                            }))
                            .await;
                    }
                    None => tracing::warn!("an audit record is not JSON; not streamed"),
                }
            }
            // Not a record of the chain: the stream carries only those (the run's
            // diagnostics say what it was).
            RunEvent::UnparsedLine(_) | RunEvent::Ended => {}
            // An event this daemon does not stream.
            _ => {}
        }
    }
    run_id
}

fn status_name(status: RunStatus) -> &'static str {
    match serde_json::to_value(status) {
        Ok(serde_json::Value::String(name)) => match name.as_str() {
            "exited" => "exited",
            "timeout" => "timeout",
            "oom" => "oom",
            "interrupted" => "interrupted",
            "proxy_failed" => "proxy_failed",
            _ => "other",
        },
        _ => "other",
    }
}
