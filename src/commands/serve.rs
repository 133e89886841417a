//! `egress-sandbox serve`: the daemon (see `serve`), until SIGTERM or SIGINT.

use std::process::ExitCode;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::ServeArgs;
use egress_serve::{ServeOptions, default_socket, serve};

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut options = ServeOptions::new(args.socket.unwrap_or_else(default_socket));
    options.socket_group = args.socket_group;
    options.metrics_listen = args.metrics_listen;
    options.pool = args.pool;
    options.egress_network = args.egress_network.clone();
    options.runtime = args.runtime.clone();
    options.max_runs = args.max_runs;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let mut interrupt =
            signal(SignalKind::interrupt()).context("cannot install signal handlers")?;
        let mut terminate =
            signal(SignalKind::terminate()).context("cannot install signal handlers")?;
        let stop = async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        };
        // The daemon outlives upgrades and rebuilds of its binary: it keeps its own.
        let sandbox = super::run::connect_sandbox()
            .await
            .and_then(|sandbox| sandbox.keep_binary())
            .context("cannot serve")?;
        // Held until the daemon has removed every run and slot; if it is killed, it does.
        let _watchdog = super::run::start_watchdog(&sandbox);
        serve(sandbox, options, stop, |options| {
            // The line scripts and tests wait for: the socket accepts connections now.
            eprintln!("egress-sandbox: serving on {}", options.socket.display());
        })
        .await
        .context("cannot serve")?;
        eprintln!("egress-sandbox: stopped; every run's objects are removed");
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
