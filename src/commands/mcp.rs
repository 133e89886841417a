//! `egress-sandbox mcp`: the MCP server on stdio ([`crate::mcp`]) until the client closes
//! stdin (or SIGTERM/SIGINT), then every live run is interrupted and its objects removed,
//! and the process exits 0. Stdout carries the protocol only; everything else goes to
//! stderr.

use std::process::ExitCode;

use anyhow::Context;
use rmcp::ServiceExt;
use tokio::signal::unix::{SignalKind, signal};

use super::run::{SETUP_FAILED, build_spec, refuse, say};
use crate::cli::McpArgs;
use crate::mcp::{McpServer, RunTemplate};
use egress_sandbox::options::parse_size;
use egress_sandbox::{Field, RunSpec};
use egress_serve::client::{Client, ClientError};
use egress_serve::{PoolState, ServeOptions, serve};

/// The longest the server waits for its pool to be warm before it answers the host.
const POOL_WARM_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long the end waits for calls to say their runs' end to a daemon named with
/// `--server` (an own daemon interrupts them itself).
const CALLS_END_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

pub fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let run_args = args.run_args();
    // Checked as `run` checks them, before anything starts: a server whose every call would
    // be refused must not start up.
    let spec = match build_spec(run_args.clone()) {
        Ok(spec) => spec,
        Err(error) => return Ok(refuse(&error)),
    };
    for warning in spec.warnings() {
        say(warning);
    }
    let mut request = super::run_client::request_from(&run_args, spec.credentials(), Vec::new())?;
    // The run relays more than a result holds, so that a result can keep the output's tail.
    request.options.output_limit = Some(RELAY_LIMIT.into());
    let template = RunTemplate {
        request,
        timeout: spec.limits().timeout,
        result_limit: result_limit(&args)?,
    };
    let slot_shape = slot_shape(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(serve_mcp(args, template, slot_shape));
    // A blocking read of stdin may still be pending in a runtime thread: do not wait for it.
    runtime.shutdown_background();
    result
}

/// The output a call's run relays to this server: a result keeps its head and tail
/// within the result limit; past this, the run drops the rest (with a marker on stderr).
const RELAY_LIMIT: &str = "16MiB";

/// Bytes of stdout and stderr a result holds: `--output-limit`, or one sized for a model.
fn result_limit(args: &McpArgs) -> anyhow::Result<usize> {
    match &args.bounds.options.output_limit {
        Some(raw) => {
            let bytes = parse_size(Field::OutputLimit, raw)?;
            Ok(usize::try_from(bytes).unwrap_or(usize::MAX))
        }
        None => Ok(crate::mcp::DEFAULT_RESULT_LIMIT),
    }
}

/// The runs' shape the pool's slots take: the operator's image, runtime and tmp size.
fn slot_shape(args: &McpArgs) -> anyhow::Result<RunSpec> {
    let bounds = &args.bounds.options;
    let mut shape = RunSpec::builder(["true"]);
    if let Some(image) = &bounds.image {
        shape = shape.image(image);
    }
    if let Some(runtime) = &bounds.runtime {
        shape = shape.runtime(runtime);
    }
    if let Some(raw) = &bounds.tmp {
        shape = shape.tmp(parse_size(Field::Tmp, raw)?);
    }
    Ok(shape.build()?)
}

/// Waits until every slot of the pool is ready (at most [`POOL_WARM_WAIT`]: a pool that
/// cannot prepare its slots says why on stderr, and calls then take the cold path).
async fn wait_for_warm_pool(mut pool: tokio::sync::watch::Receiver<PoolState>) {
    let warm = tokio::time::timeout(POOL_WARM_WAIT, pool.wait_for(PoolState::warm))
        .await
        .is_ok();
    if !warm {
        let state = *pool.borrow();
        say(format_args!(
            "egress-sandbox: warning: {} of the pool's {} slots ready after {}; serving, the first calls may be cold",
            state.ready,
            state.size,
            humantime::format_duration(POOL_WARM_WAIT)
        ));
    }
}

async fn serve_mcp(
    args: McpArgs,
    template: RunTemplate,
    slot_shape: RunSpec,
) -> anyhow::Result<ExitCode> {
    let mut interrupt =
        signal(SignalKind::interrupt()).context("cannot install signal handlers")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("cannot install signal handlers")?;
    let (stop_daemon, daemon_stopped) = tokio::sync::oneshot::channel::<()>();
    // The daemon this server runs through: its own on a private socket, or `--server`'s.
    let (socket, own_daemon, _socket_dir, _watchdog) = match args.server.clone() {
        Some(socket) => {
            // Calls would be refused one by one; a server that can serve none must not start.
            if let Err(error @ ClientError::UntrustedSocket { .. }) =
                Client::new(&socket).check_owner()
            {
                say(format_args!("egress-sandbox: error: {error}"));
                return Ok(ExitCode::from(SETUP_FAILED));
            }
            (socket, None, None, None)
        }
        None => {
            let dir = tempfile::Builder::new()
                .prefix("egress-sandbox-mcp.")
                .tempdir()
                .context("cannot make the private socket's directory")?;
            let socket = dir.path().join("api.sock");
            let sandbox = super::run::connect_sandbox()
                .await
                .and_then(|sandbox| sandbox.keep_binary())
                .context("cannot start")?;
            // Held until every run and slot is removed; if this process is killed, it does.
            let watchdog = super::run::start_watchdog(&sandbox);
            let mut options = ServeOptions::new(socket.clone());
            options.pool = args.pool;
            options.egress_network = args.bounds.options.egress_network.clone();
            options.max_runs = args.max_runs;
            options.slot_shape = Some(slot_shape);
            let (pool_state, pool) = tokio::sync::watch::channel(PoolState::default());
            options.pool_state = Some(pool_state);
            let (ready_tx, ready) = tokio::sync::oneshot::channel();
            let mut daemon = tokio::spawn(serve(
                sandbox,
                options,
                async move {
                    let _ = daemon_stopped.await;
                },
                move |_| {
                    let _ = ready_tx.send(());
                },
            ));
            tokio::select! {
                _ = ready => {}
                ended = &mut daemon => {
                    return Err(match ended {
                        Ok(Err(error)) => anyhow::Error::new(error),
                        Ok(Ok(())) => anyhow::anyhow!("the sandbox pool ended at its start"),
                        Err(error) => anyhow::Error::new(error),
                    })
                    .context("cannot start");
                }
            }
            // Ready only once warm: a host's first call takes a warm slot.
            wait_for_warm_pool(pool).await;
            (socket, Some(daemon), Some(dir), watchdog)
        }
    };
    let server = McpServer::new(Client::new(socket), template, args.max_runs);
    eprintln!("egress-sandbox: MCP server ready on stdio");
    let served = server.clone().serve(rmcp::transport::stdio_pipes()).await;
    match served {
        Ok(running) => {
            let cancel = running.cancellation_token();
            tokio::select! {
                ended = running.waiting() => {
                    if let Err(error) = ended {
                        tracing::warn!(%error, "the MCP session ended with an error");
                    }
                }
                _ = interrupt.recv() => cancel.cancel(),
                _ = terminate.recv() => cancel.cancel(),
            }
        }
        // The client went away before the handshake: nothing was asked, nothing to do.
        Err(error) => tracing::debug!(%error, "the client left before initializing"),
    }
    eprintln!("egress-sandbox: the client has gone; ending live runs and removing their objects");
    // Each live call was cancelled with the session: it asks for its run's end.
    if tokio::time::timeout(CALLS_END_WAIT, server.idle())
        .await
        .is_err()
    {
        tracing::warn!("calls still live at the end");
    }
    if let Some(daemon) = own_daemon {
        let _ = stop_daemon.send(());
        daemon
            .await
            .context("the sandbox pool failed")?
            .context("the sandbox pool failed")?;
    }
    eprintln!("egress-sandbox: stopped; every run's objects are removed");
    Ok(ExitCode::SUCCESS)
}
