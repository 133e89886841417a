//! `egress-sandbox run`: flags → [`RunSpec`], then the library's run lifecycle, then the
//! report and the summary line.

use std::process::ExitCode;

use anyhow::Context;
use egress_core::text::visible;
use tokio::signal::unix::{SignalKind, signal};

use super::tool_lines::{self, Stream, Tracked};
use crate::cli::RunArgs;
use egress_sandbox::Watchdog;
use egress_sandbox::{Interruption, OutputSinks, RunError, Sandbox};
use egress_sandbox::{RunReport, summary_line};
use egress_sandbox::{RunSpec, SpecError};

/// Set-up failed: bad flags or policy, no Docker, image missing
/// (`docs/src/reference/exit-codes.md`).
pub(crate) const SETUP_FAILED: u8 = 125;

/// A cold run: this process sets up, runs and removes the sandbox itself.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let report_path = args.report.clone();
    let spec = match build_spec(args) {
        Ok(spec) => spec,
        Err(error) => return Ok(refuse(&error)),
    };
    if let Some(refused) = check_report_path(report_path.as_deref()) {
        return Ok(refused);
    }
    for warning in spec.warnings() {
        say(warning);
    }
    for notice in spec.notices() {
        say(notice);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let outcome = runtime.block_on(async {
        // Registered before anything is created, so Ctrl-C always means "tear down".
        let interrupt = interruption().context("cannot install signal handlers")?;
        let sandbox = match connect_sandbox().await {
            Ok(sandbox) => sandbox,
            Err(error) => return anyhow::Ok(Err(error)),
        };
        // Held until the run's objects are removed; if this process is killed first, it
        // removes them.
        let _watchdog = start_watchdog(&sandbox);
        anyhow::Ok(sandbox.run_until(spec, tracked_stdio(), interrupt).await)
    })?;
    // A read of a terminal's stdin may still be blocked in a runtime thread: do not wait
    // for it (dropping the runtime would, until the user pressed Enter).
    runtime.shutdown_background();
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            report_setup_failure(&error);
            return Ok(ExitCode::from(SETUP_FAILED));
        }
    };
    for failure in &outcome.teardown_errors {
        say(format_args!(
            "egress-sandbox: could not remove {failure}; `egress-sandbox gc` will"
        ));
    }
    if let Some(path) = report_path {
        let json = RunReport::new(&outcome).to_json();
        if let Err(error) = std::fs::write(&path, json + "\n") {
            say(format_args!(
                "egress-sandbox: cannot write the report {}: {error}",
                path.display()
            ));
        }
    }
    tool_lines::print_line(&summary_line(&outcome));
    Ok(ExitCode::from(
        u8::try_from(outcome.exit_code).unwrap_or(SETUP_FAILED),
    ))
}

/// The watchdog that removes this process's runs if it is killed (`sandbox::watchdog`);
/// without one (it could not start), `gc` is what is left, and the user is told so.
pub(crate) fn start_watchdog(sandbox: &Sandbox) -> Option<Watchdog> {
    Watchdog::spawn(sandbox)
        .map_err(|error| {
            say(format_args!(
                "egress-sandbox: warning: cannot start the watchdog ({error}): if this process \
                 is killed, `egress-sandbox gc` removes what it leaves"
            ))
        })
        .ok()
}

/// The handle `run` and `serve` run through: this very binary is the proxy binary, and
/// progress of long steps (the base image's first build) goes to stderr.
pub(crate) async fn connect_sandbox() -> Result<Sandbox, RunError> {
    let binary = std::env::current_exe().map_err(|source| RunError::ProxyBinary {
        path: "/proc/self/exe".into(),
        source,
    })?;
    Ok(Sandbox::connect(binary)
        .await?
        .on_progress(|progress| say(format_args!("egress-sandbox: {progress}"))))
}

/// The run `run`'s flags describe, checked: the settings through the library's own code
/// (`RunOptions::builder`), the same a `serve` request goes through.
pub(crate) fn build_spec(args: RunArgs) -> Result<RunSpec, SpecError> {
    let mut builder = args.options.builder(args.command)?;
    if let Some(path) = args.audit_log {
        builder = builder.audit_log(path);
    }
    builder.build()
}

/// Prints why the spec was refused; policy diagnostics verbatim (`FILE:LINE:COL: error: …`).
/// A `--report` path that cannot be written is a bad flag, refused before anything is
/// created (as `--audit-log` is): found only at the end, the run would be lost to the
/// caller that asked for it. An existing file is left as it is until then; a new one is
/// created to prove the directory takes it, and removed again.
pub(crate) fn check_report_path(path: Option<&std::path::Path>) -> Option<ExitCode> {
    let path = path?;
    let existed = std::fs::symlink_metadata(path).is_ok();
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(!existed)
        .truncate(false)
        .open(path);
    match opened {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            None
        }
        Err(error) => {
            say(format_args!(
                "egress-sandbox: error: cannot write the report {}: {error}",
                path.display()
            ));
            Some(ExitCode::from(SETUP_FAILED))
        }
    }
}

pub(crate) fn refuse(error: &SpecError) -> ExitCode {
    match error {
        SpecError::Policy(policy) => {
            for diagnostic in &policy.diagnostics {
                say(diagnostic);
            }
            say("egress-sandbox: error: the policy was refused; nothing was run");
        }
        other => say(format_args!("egress-sandbox: error: {other}")),
    }
    ExitCode::from(SETUP_FAILED)
}

fn report_setup_failure(error: &RunError) {
    say(format_args!(
        "egress-sandbox: error: {}",
        error.message_with_causes()
    ));
}

/// One line on stderr, starting a line of its own, attributes reset on a terminal
/// (`tool_lines`). Messages quote hosts, paths, names and policy text that may come from
/// the sandbox or a hostile file: control, bidi and separator characters are shown as
/// visible escapes (`text::visible`), never raw.
pub(crate) fn say(message: impl std::fmt::Display) {
    tool_lines::print_line(&visible(&message.to_string()));
}

/// This process's stdio, with the command's output tracked so the tool's own lines start
/// on a line of their own.
fn tracked_stdio() -> OutputSinks {
    let mut sinks = OutputSinks::stdio();
    sinks.stdout = Box::new(Tracked::new(sinks.stdout, Stream::Stdout));
    sinks.stderr = Box::new(Tracked::new(sinks.stderr, Stream::Stderr));
    sinks
}

/// Resolves with the first SIGINT, SIGTERM or SIGHUP. A hangup (the terminal or SSH session
/// that started the run went away) ends the run as SIGTERM does (143): by default it would
/// kill this process and leave the sandbox running past its time limit, its proxy's records
/// read by nobody.
fn interruption() -> std::io::Result<impl std::future::Future<Output = Interruption>> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => Interruption::Interrupt,
            _ = terminate.recv() => Interruption::Terminate,
            _ = hangup.recv() => Interruption::Terminate,
        }
    })
}
