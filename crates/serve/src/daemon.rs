//! The daemon's life, in the steps [`serve`](super::serve) takes: [`Daemon::start`] (sweep
//! what an earlier daemon left, check the engine, bind the listeners, start the pool), then
//! [`Daemon::accept_until`] the stop, then [`Daemon::stop`] (interrupt the runs, wait for
//! their teardown and the pool's, remove the socket).
//!
//! Every step that can fail comes before the socket is bound and the pool started: a daemon
//! that cannot start leaves no socket file and no slot behind.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use super::live_runs::LiveRuns;
use super::metrics::Metrics;
use super::request::BadRequest;
use super::socket::{self, BoundSocket};
use super::{PoolState, ServeError, ServeOptions, Shared, handle, json_response, metrics_response};
use egress_sandbox::{ContainerEngine, Pool, RunSpec, Sandbox, check_runtime};

#[cfg(test)]
mod tests;

/// How long stopping waits for connections to deliver their runs' last events.
const DRAIN_CONNECTIONS: Duration = Duration::from_secs(5);

/// A started daemon: its listening socket and what its connections and runs share.
pub(super) struct Daemon {
    shared: Arc<Shared>,
    socket: BoundSocket,
}

impl Daemon {
    /// Sweeps leftovers, checks the engine and the options against it, binds the metrics
    /// listener and the socket, starts the pool and the metrics listener's server.
    pub(super) async fn start(
        sandbox: Sandbox,
        options: &ServeOptions,
    ) -> Result<Daemon, ServeError> {
        sweep_leftovers(sandbox.engine()).await;
        let template = slot_template(options)?;
        check_engine(&sandbox, options).await?;
        let pool_size = pool_size(sandbox.engine(), options.pool);
        // The metrics listener before the socket: failing here leaves no socket file.
        let metrics_listener = bind_metrics(options).await?;
        let socket = socket::bind(&options.socket, options.socket_group.as_deref()).await?;
        let shared = start_shared(sandbox, options, template, pool_size);
        if let Some(listener) = metrics_listener {
            tokio::spawn(serve_metrics(shared.clone(), listener));
        }
        Ok(Daemon { shared, socket })
    }

    /// Serves each connection to the socket until `stop` resolves.
    pub(super) async fn accept_until(&self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            let stream = tokio::select! {
                accepted = self.socket.listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        continue;
                    }
                },
                () = &mut stop => return,
            };
            tokio::spawn(serve_connection(self.shared.clone(), stream));
        }
    }

    /// Stops accepting (the socket file goes), interrupts every run, and returns once each
    /// has removed its objects and the pool its slots; connections get a bounded time to
    /// deliver their runs' last events.
    pub(super) async fn stop(self) {
        tracing::info!("stopping: interrupting runs and removing their objects");
        let Daemon { shared, socket } = self;
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
    }
}

/// Removes what a crashed daemon (or run) of this host left; a failure is only logged (the
/// daemon serves without the sweep, `egress-sandbox gc` does it later).
async fn sweep_leftovers(engine: &dyn ContainerEngine) {
    let here = match egress_sandbox::HostIdentity::current() {
        Ok(here) => here,
        Err(error) => {
            tracing::warn!(%error, "cannot sweep leftovers: no host identity");
            return;
        }
    };
    match egress_sandbox::sweep(engine, &here).await {
        Ok(report) if !report.removed.is_empty() => tracing::info!(
            objects = report.removed.len(),
            "removed leftovers of earlier runs"
        ),
        Ok(_) => {}
        Err(error) => tracing::warn!(
            error = %egress_sandbox::with_causes(&error),
            "cannot sweep leftovers of earlier runs"
        ),
    }
}

/// The shape of the pool's slots: `slot_shape` on the daemon's egress network, else a
/// default run on the daemon's egress network and runtime.
fn slot_template(options: &ServeOptions) -> Result<RunSpec, ServeError> {
    if let Some(shape) = &options.slot_shape {
        return Ok(shape
            .clone()
            .with_egress_network(options.egress_network.clone()));
    }
    let mut template = RunSpec::builder(["true"]);
    if let Some(network) = &options.egress_network {
        template = template.egress_network(network.clone());
    }
    if let Some(runtime) = &options.runtime {
        template = template.runtime(runtime.clone());
    }
    template
        .build()
        .map_err(|error| ServeError::Runtime(error.to_string()))
}

/// Whether the engine answers, has the egress network and the runtime named: checked as a
/// cold run checks them, before the socket, so that a daemon whose every run would fail
/// does not start up healthy.
async fn check_engine(sandbox: &Sandbox, options: &ServeOptions) -> Result<(), ServeError> {
    let offer = check_runtime(sandbox.engine(), options.runtime.as_deref()).await?;
    if let Some(network) = &options.egress_network {
        sandbox.check_egress_network(network).await?;
    }
    offer
        .runtime
        .map_err(|unknown| ServeError::Runtime(unknown.to_string()))
}

/// The slots kept warm: `asked` on a local engine, none on a remote one (the slots'
/// launcher needs a local engine).
fn pool_size(engine: &dyn ContainerEngine, asked: usize) -> usize {
    if engine.is_local() {
        return asked;
    }
    if asked > 0 {
        tracing::warn!("the engine is remote: no warm pool (its launcher needs a local engine)");
    }
    0
}

async fn bind_metrics(options: &ServeOptions) -> Result<Option<TcpListener>, ServeError> {
    let Some(addr) = options.metrics_listen else {
        return Ok(None);
    };
    TcpListener::bind(addr)
        .await
        .map(Some)
        .map_err(|source| ServeError::MetricsListen { addr, source })
}

/// What connections and runs share, with the pool started (it fills in the background).
fn start_shared(
    sandbox: Sandbox,
    options: &ServeOptions,
    template: RunSpec,
    pool_size: usize,
) -> Arc<Shared> {
    let metrics = Metrics::new();
    let ready_gauge = metrics.pool_ready().clone();
    let pool_state = options.pool_state.clone();
    if let Some(state) = &pool_state {
        state.send_replace(PoolState {
            ready: 0,
            size: pool_size,
        });
    }
    let pool = Pool::start(
        sandbox.clone(),
        template,
        pool_size,
        Box::new(move |ready| {
            ready_gauge.set(i64::try_from(ready).unwrap_or(i64::MAX));
            tracing::info!("pool: {ready} of {pool_size} warm slots ready");
            if let Some(state) = &pool_state {
                state.send_replace(PoolState {
                    ready,
                    size: pool_size,
                });
            }
        }),
    );
    Arc::new(Shared {
        sandbox,
        metrics,
        pool,
        egress_network: options.egress_network.clone(),
        runtime: options.runtime.clone(),
        runs: Mutex::new(HashMap::new()),
        live_runs: Arc::new(LiveRuns::new(options.max_runs)),
        tracker: TaskTracker::new(),
        connections: TaskTracker::new(),
        shutdown: watch::channel(false).0,
    })
}

/// One API connection, counted until it ends so that stopping lets it finish (bounded).
async fn serve_connection(shared: Arc<Shared>, stream: tokio::net::UnixStream) {
    let _connection = shared.connections.token();
    let service = service_fn(move |request| handle(shared.clone(), request));
    if let Err(error) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%error, "connection ended with an error");
    }
}

/// `GET /metrics` on `--metrics-listen`, until the daemon stops.
async fn serve_metrics(shared: Arc<Shared>, listener: TcpListener) {
    let mut stopping = shared.shutdown.subscribe();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            _ = stopping.wait_for(|stopping| *stopping) => return,
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
}
