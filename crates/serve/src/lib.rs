//! `egress-sandbox serve`: runs over a local API — HTTP/1.1 + JSON on a Unix socket.
//!
//! - `GET /v1/health` → `{"ok":true,"version":…,"pool":{"ready":R,"size":N}}`
//! - `POST /v1/runs` → 400 `{"error","field"}` (nothing created) or 200 NDJSON events:
//!   `started`, `output`, `audit`, then `exit` with the report ([`run_task`]).
//! - `DELETE /v1/runs/{id}[?signal=TERM]` cancels a run.
//! - `GET /metrics` → Prometheus text ([`metrics`]), also on `--metrics-listen`.
//!
//! Each run goes through the library's lifecycle (`sandbox::Sandbox`), the same code as
//! `egress-sandbox run`: in a warm slot of the warm pool (`egress_sandbox::pool`) when the request fits one, else cold. The
//! `exit` event goes out as soon as the outcome is known; the run's objects (its containers, its
//! host directories, and its network when it has one: remote engines and runtimes other than runc)
//! are removed after it, in the background. On SIGTERM/SIGINT the daemon stops accepting,
//! interrupts every run, waits until each has removed its objects, removes every pool slot, and
//! removes its socket; at start it sweeps what a crashed daemon (or run) left.

pub mod client;

mod metrics;
pub mod request;
pub mod run_flags;
mod run_task;
pub mod secret_flags;
pub mod socket;

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
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::sync::{Notify, watch};

use egress_sandbox::{Interruption, Pool, RunSpec, Sandbox};
use metrics::Metrics;
use request::{BadRequest, RunRequest};
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// The largest request body (files and stdin travel in it, base64).
const MAX_REQUEST: usize = 96 << 20;

/// The largest stdin `run --server` sends: base64 makes it 4/3 as large, and the rest of
/// the request must fit beside it in [`MAX_REQUEST`].
pub const MAX_STDIN: usize = 64 << 20;

pub use socket::default_socket;

/// How the daemon is asked to run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServeOptions {
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
    /// Runs at most live at once (from the request to their objects' removal); a request
    /// beyond is refused with 503 and `Retry-After`. 0 is taken as 1.
    pub max_runs: usize,
    /// The shape of the pool's slots (image, runtime, tmp size; the egress network is
    /// `egress_network`'s), for a caller whose runs all take one that is not the default
    /// (`mcp --image …`). Default: a default run.
    pub slot_shape: Option<RunSpec>,
}

/// Warm slots kept ready by default.
pub const DEFAULT_POOL: usize = 2;

/// Runs live at once by default: each is two containers on one engine (and a network of its
/// own for a run on a remote engine or another runtime).
pub const DEFAULT_MAX_RUNS: usize = 32;

impl ServeOptions {
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
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Socket(#[from] socket::SocketError),
    #[error("cannot listen for metrics on {addr}: {source}")]
    MetricsListen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    EgressNetwork(#[from] egress_sandbox::NetworkError),
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
    /// One permit per live run (`ServeOptions::max_runs`), held until its objects are
    /// removed: the engine never holds more runs' objects than that (besides the pool).
    run_permits: Arc<tokio::sync::Semaphore>,
    max_runs: usize,
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

/// How long stopping waits for connections to deliver their runs' last events.
const DRAIN_CONNECTIONS: std::time::Duration = std::time::Duration::from_secs(5);

type Body = BoxBody<Bytes, Infallible>;

/// Serves until `stop` resolves, then interrupts every run, waits for their teardown and
/// removes the socket.
pub async fn serve(
    sandbox: Sandbox,
    options: ServeOptions,
    stop: impl Future<Output = ()>,
    ready: impl FnOnce(&ServeOptions),
) -> Result<(), ServeError> {
    let engine = sandbox.engine();
    match egress_sandbox::labels::HostIdentity::current() {
        Ok(here) => match egress_sandbox::gc::sweep(engine, &here).await {
            Ok(report) if !report.removed.is_empty() => {
                tracing::info!(
                    objects = report.removed.len(),
                    "removed leftovers of earlier runs"
                )
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cannot sweep leftovers of earlier runs"),
        },
        Err(error) => tracing::warn!(%error, "cannot sweep leftovers: no host identity"),
    }
    let template = match &options.slot_shape {
        Some(shape) => shape
            .clone()
            .with_egress_network(options.egress_network.clone()),
        None => {
            let mut template = RunSpec::builder(["true"]);
            if let Some(network) = &options.egress_network {
                template = template.egress_network(network.clone());
            }
            if let Some(runtime) = &options.runtime {
                template = template.runtime(runtime.clone());
            }
            template
                .build()
                .map_err(|error| ServeError::Runtime(error.to_string()))?
        }
    };
    // Checked as a cold run checks it, before the socket: a daemon whose every run would
    // fail must not start up healthy.
    if let Some(network) = &options.egress_network {
        sandbox.check_egress_network(network).await?;
    }
    if let Some(name) = &options.runtime {
        let available = engine
            .runtimes()
            .await
            .map_err(|error| ServeError::Runtime(egress_sandbox::outcome::with_causes(&error)))?;
        if !available.contains(name) {
            return Err(ServeError::Runtime(format!(
                "the engine has no runtime {name:?} (it has: {})",
                available.join(", ")
            )));
        }
    }
    let pool_size = if engine.is_local() {
        options.pool
    } else {
        if options.pool > 0 {
            tracing::warn!(
                "the engine is remote: no warm pool (its launcher needs a local engine)"
            );
        }
        0
    };
    // Bound before the socket and the pool: failing here leaves no socket file and no slot.
    let metrics_listener = match options.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::MetricsListen { addr, source })?,
        ),
        None => None,
    };
    let socket = socket::bind(&options.socket, options.socket_group.as_deref()).await?;
    let (shutdown, _) = watch::channel(false);
    let metrics = Metrics::new();
    let ready_gauge = metrics.pool_ready().clone();
    let pool = Pool::start(
        sandbox.clone(),
        template,
        pool_size,
        Box::new(move |ready| {
            ready_gauge.set(i64::try_from(ready).unwrap_or(i64::MAX));
        }),
    );
    let shared = Arc::new(Shared {
        sandbox,
        metrics,
        pool,
        egress_network: options.egress_network.clone(),
        runtime: options.runtime.clone(),
        runs: Mutex::new(HashMap::new()),
        run_permits: Arc::new(tokio::sync::Semaphore::new(options.max_runs.max(1))),
        max_runs: options.max_runs.max(1),
        tracker: TaskTracker::new(),
        connections: TaskTracker::new(),
        shutdown,
    });
    if let Some(listener) = metrics_listener {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut stopping = shared.shutdown.subscribe();
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = stopping.wait_for(|s| *s) => return,
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let shared = shared.clone();
                        async move {
                            Ok::<_, Infallible>(match request.uri().path() {
                                "/metrics" => metrics_response(&shared),
                                _ => json_response(
                                    StatusCode::NOT_FOUND,
                                    &BadRequest::new("path", "not found"),
                                ),
                            })
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }
    ready(&options);
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = socket.listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let shared = shared.clone();
        let connection = shared.connections.token();
        tokio::spawn(async move {
            let _connection = connection;
            let service = service_fn(move |request| handle(shared.clone(), request));
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    tracing::info!("stopping: interrupting runs and removing their objects");
    socket.close();
    shared.shutdown.send_replace(true);
    shared.tracker.close();
    shared.connections.close();
    tokio::join!(shared.tracker.wait(), shared.pool.shutdown());
    if tokio::time::timeout(DRAIN_CONNECTIONS, shared.connections.wait())
        .await
        .is_err()
    {
        tracing::debug!("connections still open at exit");
    }
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

/// What the request asks of the engine (egress network, runtime), checked before
/// anything is created: a 400 naming the field it lacks, a 503 when the engine does not
/// answer.
async fn check_fit(shared: &Shared, spec: &egress_sandbox::RunSpec) -> Result<(), Response<Body>> {
    use egress_sandbox::fit::Unfit;
    let unfit = match egress_sandbox::fit::check_fit(shared.sandbox.engine(), spec).await {
        Ok(()) => return Ok(()),
        Err(unfit) => unfit,
    };
    let field = match &unfit {
        Unfit::EgressNetwork { .. } => "egress_network",
        Unfit::Runtime { .. } => "runtime",
        _ => {
            return Err(json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &BadRequest::new("", egress_sandbox::outcome::with_causes(&unfit)),
            ));
        }
    };
    Err(json_response(
        StatusCode::BAD_REQUEST,
        &BadRequest::new(field, unfit.to_string()),
    ))
}

async fn post_run(shared: Arc<Shared>, request: Request<Incoming>) -> Response<Body> {
    if *shared.shutdown.borrow() {
        return json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &BadRequest::new("", "the daemon is stopping"),
        );
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
            if request.egress_network.is_none() {
                request.egress_network = shared.egress_network.clone();
            }
            if request.runtime.is_none() {
                request.runtime = shared.runtime.clone();
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
        match egress_sandbox::images::require_local_image(shared.sandbox.engine(), &image).await {
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
            Err(error) => {
                return json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &BadRequest::new("", error.to_string()),
                );
            }
        }
    }
    // Again, now that the body is in: a stop that came while it was read must not meet a
    // run that starts after the daemon stopped waiting for runs.
    if *shared.shutdown.borrow() {
        return json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &BadRequest::new("", "the daemon is stopping"),
        );
    }
    let Ok(permit) = shared.run_permits.clone().try_acquire_owned() else {
        shared.metrics.refused_busy().inc();
        let mut busy = json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &BadRequest::new(
                "",
                format!(
                    "the daemon has its limit of {} runs live (serve --max-runs); try again \
                     when one has ended",
                    shared.max_runs
                ),
            ),
        );
        busy.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return busy;
    };
    let lines = run_task::start(shared, checked.spec, checked.stdin, permit);
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
