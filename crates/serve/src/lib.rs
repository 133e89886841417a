//! `egress-sandbox serve`: runs over a local API — HTTP/1.1 + JSON on a Unix socket.
//!
//! - `GET /v1/health` → `{"ok":true,"version":…,"pool":{"ready":R,"size":N}}`
//! - `POST /v1/runs` → 400 `{"error","field"}` (nothing created) or 200 NDJSON events:
//!   `started`, `output`, `audit`, then `exit` with the report ([`client::Event`]).
//! - `DELETE /v1/runs/{id}[?signal=TERM]` cancels a run.
//! - `GET /metrics` → Prometheus text (OpenMetrics), also on `--metrics-listen`.
//!
//! Each run goes through the library's lifecycle (`sandbox::Sandbox`), the same code as
//! `egress-sandbox run`: in a warm slot of the warm pool (`egress_sandbox::pool`) when the request fits one, else cold. The
//! `exit` event goes out as soon as the outcome is known; the run's objects (its containers, its
//! host directories, and its network when it has one: remote engines and runtimes other than runc)
//! are removed after it, in the background. On SIGTERM/SIGINT the daemon stops accepting,
//! interrupts every run, waits until each has removed its objects, removes every pool slot, and
//! removes its socket; at start it sweeps what a crashed daemon (or run) left.

#![deny(missing_docs, unreachable_pub)]

pub mod client;

mod daemon;
mod live_runs;
mod metrics;
pub mod request;
mod run_task;
pub mod socket;
mod unavailable;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use tokio::sync::{Notify, watch};

use daemon::Daemon;
use egress_sandbox::{Interruption, Pool, RunSpec, Sandbox};
use live_runs::LiveRuns;
use metrics::Metrics;
use request::{BadRequest, RunRequest};
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// The largest request body (files and stdin travel in it, base64).
const MAX_REQUEST: usize = 96 << 20;

/// The largest stdin `run --server` sends: base64 makes it 4/3 as large, and the rest of
/// the request must fit beside it in the largest body the daemon takes (96 MiB).
pub const MAX_STDIN: usize = 64 << 20;

pub use socket::default_socket;

/// How the daemon is asked to run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The Unix socket the API listens on.
    pub socket: PathBuf,
    /// Makes the socket 0660 owned by this group (name or number) instead of 0600.
    pub socket_group: Option<String>,
    /// Also serve `GET /metrics` on this TCP address.
    pub metrics_listen: Option<SocketAddr>,
    /// Warm slots kept ready (0: every run is cold).
    pub pool: usize,
    /// The egress network of the pool's slots, and of requests that name none.
    pub egress_network: Option<String>,
    /// The OCI runtime of the pool's slots, and of requests that name none (`None`: the
    /// engine's default).
    pub runtime: Option<String>,
    /// Runs at most live at once (from the request until its answer is sent; the removal
    /// of a run's objects that follows is not counted); a request beyond is refused with
    /// 503 and `Retry-After`. 0 is taken as 1.
    pub max_runs: usize,
    /// The shape of the pool's slots (image, runtime, tmp size; the egress network is
    /// `egress_network`'s), for a caller whose runs all take one that is not the default
    /// (`mcp --image …`). Default: a default run.
    pub slot_shape: Option<RunSpec>,
    /// Told the pool's state whenever it changes, from before the `ready` call on (a caller
    /// that serves only once the pool is warm waits on it).
    pub pool_state: Option<watch::Sender<PoolState>>,
}

/// How many of the pool's slots are ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolState {
    /// Slots ready to be claimed now.
    pub ready: usize,
    /// Slots the pool keeps ready (0: no pool, every run is cold).
    pub size: usize,
}

impl PoolState {
    /// Every slot is ready.
    pub fn warm(&self) -> bool {
        self.ready >= self.size
    }
}

/// Warm slots kept ready by default.
pub const DEFAULT_POOL: usize = 2;

/// Runs live at once by default: each is two containers on one engine (and a network of its
/// own for a run on a remote engine or another runtime).
pub const DEFAULT_MAX_RUNS: usize = 32;

impl ServeOptions {
    /// The defaults on `socket`: a pool of [`DEFAULT_POOL`], at most [`DEFAULT_MAX_RUNS`]
    /// runs, the engine's default runtime, no metrics listener, a 0600 socket.
    pub fn new(socket: PathBuf) -> ServeOptions {
        ServeOptions {
            socket,
            socket_group: None,
            metrics_listen: None,
            pool: DEFAULT_POOL,
            egress_network: None,
            runtime: None,
            max_runs: DEFAULT_MAX_RUNS,
            slot_shape: None,
            pool_state: None,
        }
    }
}

/// Why the daemon did not start; it leaves no socket file and no pool slot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The API socket could not be bound.
    #[error(transparent)]
    Socket(#[from] socket::SocketError),
    /// The `--metrics-listen` address could not be bound.
    #[error("cannot listen for metrics on {addr}")]
    MetricsListen {
        /// The address asked for.
        addr: SocketAddr,
        /// The failure to bind it.
        #[source]
        source: std::io::Error,
    },
    /// The engine did not answer its list of runtimes.
    #[error(transparent)]
    Engine(#[from] egress_sandbox::EngineError),
    /// The egress network named is missing, or the engine could not be asked about it.
    #[error(transparent)]
    EgressNetwork(#[from] egress_sandbox::NetworkError),
    /// The engine has no runtime of that name, or the slots' shape cannot be built with it.
    #[error("--runtime: {0}")]
    Runtime(String),
}

/// A way to cancel one run: wake its interrupt with the signal to report.
struct Cancel {
    notify: Arc<Notify>,
    signal: Arc<Mutex<Interruption>>,
}

/// What every connection and run shares.
struct Shared {
    /// Every run goes through this one handle (one engine client, one proxy binary).
    sandbox: Sandbox,
    metrics: Metrics,
    pool: Arc<Pool>,
    /// The egress network of requests that name none (the pool's).
    egress_network: Option<String>,
    /// The runtime of requests that name none (the pool's).
    runtime: Option<String>,
    runs: Mutex<HashMap<String, Cancel>>,
    /// The runs live at once (`ServeOptions::max_runs`), each until its answer is sent.
    live_runs: Arc<LiveRuns>,
    /// Runs in flight: shutdown waits until each has torn down.
    tracker: TaskTracker,
    /// API connections: shutdown lets each deliver its last event (bounded).
    connections: TaskTracker,
    shutdown: watch::Sender<bool>,
}

impl Shared {
    fn enter(self: &Arc<Self>) -> TaskTrackerToken {
        self.tracker.token()
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// Serves until `stop` resolves, then interrupts every run, waits for their teardown and
/// removes the socket. `ready` is called once the socket accepts connections. An error is
/// a daemon that could not start, and it leaves no socket file and no pool slot.
pub async fn serve(
    sandbox: Sandbox,
    options: ServeOptions,
    stop: impl Future<Output = ()>,
    ready: impl FnOnce(&ServeOptions),
) -> Result<(), ServeError> {
    let daemon = Daemon::start(sandbox, &options).await?;
    ready(&options);
    daemon.accept_until(stop).await;
    daemon.stop().await;
    Ok(())
}

async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_string();
    let response = match (request.method(), path.as_str()) {
        (&Method::GET, "/v1/health") => json_response(
            StatusCode::OK,
            &serde_json::json!({
                "ok": true,
                "version": env!("CARGO_PKG_VERSION"),
                "pool": {"ready": shared.pool.ready(), "size": shared.pool.size()},
            }),
        ),
        (&Method::GET, "/metrics") => metrics_response(&shared),
        (&Method::POST, "/v1/runs") => post_run(shared, request).await,
        (&Method::DELETE, path) if path.starts_with("/v1/runs/") => {
            let id = &path["/v1/runs/".len()..];
            match cancel_signal(request.uri().query()) {
                Ok(signal) => cancel(&shared, id, signal),
                Err(refused) => json_response(StatusCode::BAD_REQUEST, &refused),
            }
        }
        (_, "/v1/health" | "/metrics" | "/v1/runs") => json_response(
            StatusCode::METHOD_NOT_ALLOWED,
            &BadRequest::new("method", "method not allowed"),
        ),
        _ => json_response(StatusCode::NOT_FOUND, &BadRequest::new("path", "not found")),
    };
    Ok(response)
}

/// What the request asks of the engine (CPUs, egress network, runtime), checked before
/// anything is created: a 400 naming the field it lacks, a 503 when the engine does not
/// answer.
async fn check_fit(shared: &Shared, spec: &egress_sandbox::RunSpec) -> Result<(), Response<Body>> {
    let unfit = match egress_sandbox::check_fit(shared.sandbox.engine(), spec).await {
        Ok(()) => return Ok(()),
        Err(unfit) => unfit,
    };
    let Some(field) = unfit.field() else {
        return Err(unavailable::engine_down(&egress_sandbox::with_causes(
            &unfit,
        )));
    };
    Err(json_response(
        StatusCode::BAD_REQUEST,
        &BadRequest::of(field, unfit.to_string()),
    ))
}

async fn post_run(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    if *shared.shutdown.borrow() {
        return unavailable::stopping();
    }
    let body = match Limited::new(request.into_body(), MAX_REQUEST)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &BadRequest::new("body", format!("cannot read the request: {error}")),
            );
        }
    };
    let checked = RunRequest::parse(&body)
        .map(|mut request| {
            if request.options.egress_network.is_none() {
                request.options.egress_network = shared.egress_network.clone();
            }
            if request.options.runtime.is_none() {
                request.options.runtime = shared.runtime.clone();
            }
            request
        })
        .and_then(RunRequest::check);
    let checked = match checked {
        Ok(checked) => checked,
        Err(refused) => return json_response(StatusCode::BAD_REQUEST, &refused),
    };
    if let Err(refused) = check_fit(&shared, &checked.spec).await {
        return refused;
    }
    if let Some(image) = checked.spec.image().map(str::to_owned) {
        // `run` answers a missing image with 125 before creating anything: so does this.
        match egress_sandbox::require_local_image(shared.sandbox.engine(), &image).await {
            Ok(()) => {}
            Err(egress_sandbox::ImageError::Missing { image }) => {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &BadRequest::new(
                        "image",
                        format!(
                            "image {image} not found locally: egress-sandbox never pulls images; \
                             build or load it on the daemon's host, then name it in image"
                        ),
                    ),
                );
            }
            Err(egress_sandbox::ImageError::InvalidReference { image, message }) => {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &BadRequest::new(
                        "image",
                        format!("image {image:?} is not a valid image reference: {message}"),
                    ),
                );
            }
            // The engine did not answer: not the request's fault.
            Err(error) => return unavailable::engine_down(&error.to_string()),
        }
    }
    // Again, now that the body is in: a stop that came while it was read must not meet a
    // run that starts after the daemon stopped waiting for runs.
    if *shared.shutdown.borrow() {
        return unavailable::stopping();
    }
    let live = match shared.live_runs.admit(checked.spec.limits().timeout) {
        Ok(live) => live,
        Err(busy) => {
            shared.metrics.refused_busy().inc();
            return unavailable::busy(&busy);
        }
    };
    let lines = run_task::start(shared, checked.spec, checked.stdin, live);
    let stream = futures_util::stream::unfold(lines, |mut lines| async move {
        let line = lines.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(line)), lines))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("a valid response")
}

/// The signal a `DELETE` reports: INT by default, `signal=TERM`, `signal=INT`, or
/// `signal=PIPE` (the caller's reader of the output went away: `run --server … | head`).
/// Anything else is refused rather than read as INT: a caller who asked for another signal
/// (KILL) must not believe it was sent.
fn cancel_signal(query: Option<&str>) -> Result<Interruption, BadRequest> {
    let mut signal = Interruption::Interrupt;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
    {
        signal = match pair {
            "signal=INT" => Interruption::Interrupt,
            "signal=TERM" => Interruption::Terminate,
            "signal=PIPE" => Interruption::OutputClosed,
            other if other.starts_with("signal=") => {
                return Err(BadRequest::new(
                    "signal",
                    "the signal is INT (the default), TERM or PIPE",
                ));
            }
            _ => {
                return Err(BadRequest::new(
                    "query",
                    "the only parameter is signal=INT, signal=TERM or signal=PIPE",
                ));
            }
        };
    }
    Ok(signal)
}

fn cancel(shared: &Shared, id: &str, signal: Interruption) -> Response<Body> {
    let runs = shared.runs.lock().expect("runs lock");
    match runs.get(id) {
        Some(run) => {
            *run.signal.lock().expect("cancel signal lock") = signal;
            run.notify.notify_one();
            json_response(
                StatusCode::OK,
                &serde_json::json!({"run": id, "cancelled": true}),
            )
        }
        None => json_response(
            StatusCode::NOT_FOUND,
            &BadRequest::new("id", format!("no run {id} in progress")),
        ),
    }
}

fn metrics_response(shared: &Shared) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
        .body(Full::new(Bytes::from(shared.metrics.encode())).boxed())
        .expect("a valid response")
}

fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    let mut text = serde_json::to_vec(body).expect("a response body always serialises");
    text.push(b'\n');
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(text)).boxed())
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metrics_address_that_cannot_be_bound_says_its_cause_once() {
        let error = ServeError::MetricsListen {
            addr: "127.0.0.1:9".parse().unwrap(),
            source: std::io::Error::other("address in use"),
        };
        assert!(!error.to_string().contains("address in use"), "{error}");
        let line = egress_sandbox::with_causes(&error);
        assert_eq!(line.matches("address in use").count(), 1, "{line}");
        assert_eq!(
            line,
            "cannot listen for metrics on 127.0.0.1:9: address in use"
        );
    }

    #[test]
    fn a_cancel_names_int_term_or_pipe_and_nothing_else() {
        assert_eq!(cancel_signal(None).unwrap(), Interruption::Interrupt);
        assert_eq!(
            cancel_signal(Some("signal=TERM")).unwrap(),
            Interruption::Terminate
        );
        assert_eq!(
            cancel_signal(Some("signal=INT")).unwrap(),
            Interruption::Interrupt
        );
        assert_eq!(
            cancel_signal(Some("signal=PIPE")).unwrap(),
            Interruption::OutputClosed
        );
        assert_eq!(
            cancel_signal(Some("signal=KILL")).unwrap_err().field,
            "signal"
        );
        assert_eq!(cancel_signal(Some("sig=TERM")).unwrap_err().field, "query");
    }
}
