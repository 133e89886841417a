//! `egress-sandbox run --server SOCKET` (or `EGRESS_SANDBOX_SERVER`): the same run through
//! the `serve` daemon. Flags are checked here with `run`'s own code first, so a refusal
//! reads exactly as a cold run's; then the daemon's events become this process's stdout,
//! stderr, `--audit-log` lines, `--report`, summary line and exit code, byte for byte.
//!
//! The difference: stdin is read to its end before the run starts (unless it is a
//! terminal, which gives the command an empty stdin), since the request carries it whole.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use tokio::signal::unix::{SignalKind, signal};

use super::run::{SETUP_FAILED, build_spec, refuse, say};
use super::tool_lines::{self, Stream};
use crate::cli::RunArgs;
use egress_core::text::with_causes;
use egress_sandbox::Interruption;
use egress_sandbox::RunReport;
use egress_serve::client::{Client, ClientError, Event};

use egress_sandbox::RunCredentials;
use egress_serve::request::RunRequest;

/// Where `--server` defaults from; empty is the same as unset.
const SERVER_VARIABLE: &str = "EGRESS_SANDBOX_SERVER";

/// The daemon's socket `run` is to use: `--server`, else `EGRESS_SANDBOX_SERVER`; `None`
/// for a cold run.
///
/// The variable is read here, not by clap's `env`: clap takes an empty variable for a
/// missing value ("a value is required for '--server'") where unset is meant.
pub fn server_socket(args: &RunArgs) -> Option<PathBuf> {
    args.server.clone().or_else(|| {
        std::env::var_os(SERVER_VARIABLE)
            .filter(|socket| !socket.is_empty())
            .map(PathBuf::from)
    })
}

pub fn run(args: RunArgs, socket: PathBuf) -> anyhow::Result<ExitCode> {
    let spec = match build_spec(args.clone()) {
        Ok(spec) => spec,
        Err(error) => return Ok(refuse(&error)),
    };
    // In a cold run's order: a refused report path first, and then no policy warnings.
    if let Some(refused) = super::run::check_report_path(args.report.as_deref()) {
        return Ok(refused);
    }
    for warning in spec.warnings() {
        say(warning);
    }
    for notice in spec.notices() {
        say(notice);
    }
    // Secrets and upstream CAs as read and checked here: the daemon may not see this
    // process's environment or files. The values go over the socket only, never in a log.
    let credentials = spec.credentials().clone();
    drop(spec);
    let mut audit_log = match &args.audit_log {
        Some(path) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(file) => Some(file),
            Err(error) => {
                say(format_args!(
                    "egress-sandbox: error: cannot open the audit log {}: {error}",
                    path.display()
                ));
                return Ok(ExitCode::from(SETUP_FAILED));
            }
        },
        None => None,
    };
    let mut audit_log_error = None;
    let request = request_from(&args, &credentials, read_stdin()?)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let client = Client::new(socket);
    let code = runtime.block_on(async {
        let mut interrupt =
            signal(SignalKind::interrupt()).context("cannot install signal handlers")?;
        let mut terminate =
            signal(SignalKind::terminate()).context("cannot install signal handlers")?;
        // A hangup is taken as SIGTERM, as by a cold run (`run::interruption`).
        let mut hangup = signal(SignalKind::hangup()).context("cannot install signal handlers")?;
        let run_id = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
        let exit_code = std::cell::Cell::new(None::<i32>);
        // Told when writing the output met a broken pipe (`run --server … | head`).
        let output_closed = tokio::sync::Notify::new();
        let streamed = {
            let output_closed = &output_closed;
            let run_id = run_id.clone();
            let exit_code = &exit_code;
            let audit_log = &mut audit_log;
            let audit_log_error = &mut audit_log_error;
            let report_path = args.report.clone();
            client.run(&request, move |event| {
                handle(
                    event,
                    &run_id,
                    exit_code,
                    output_closed,
                    AuditFile {
                        file: audit_log,
                        error: audit_log_error,
                    },
                    report_path.as_deref(),
                )
            })
        };
        tokio::pin!(streamed);
        // A signal cancels the run on the daemon, which then tears it down and answers
        // with its end, as a cold run does for its own signals. A second signal stops
        // waiting for that answer (a daemon that does not give it must not hold the
        // caller's terminal).
        let mut cancelled = false;
        let mut pipe_closed = false;
        let result = loop {
            tokio::select! {
                result = &mut streamed => break result,
                // As a cold run ends when its output's reader went away (SIGPIPE's way).
                () = output_closed.notified(), if !pipe_closed => {
                    pipe_closed = true;
                    if !cancelled {
                        cancelled = cancel(&client, &run_id, Interruption::OutputClosed).await;
                    }
                }
                _ = interrupt.recv() => {
                    if cancelled {
                        return anyhow::Ok(given_up(false));
                    }
                    cancelled = cancel(&client, &run_id, Interruption::Interrupt).await;
                }
                _ = async { tokio::select! { _ = terminate.recv() => {}, _ = hangup.recv() => {} } } => {
                    if cancelled {
                        return anyhow::Ok(given_up(true));
                    }
                    cancelled = cancel(&client, &run_id, Interruption::Terminate).await;
                }
            }
        };
        anyhow::Ok(match result {
            Ok(()) => exit_code.get().unwrap_or(i32::from(SETUP_FAILED)),
            Err(ClientError::Refused { refusal, .. }) => {
                for diagnostic in &refusal.diagnostics {
                    say(diagnostic);
                }
                say(format_args!("egress-sandbox: error: {}", refusal.error));
                i32::from(SETUP_FAILED)
            }
            Err(error) => {
                say(format_args!("egress-sandbox: error: {}", with_causes(&error)));
                i32::from(SETUP_FAILED)
            }
        })
    })?;
    runtime.shutdown_background();
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(SETUP_FAILED)))
}

/// The exit status when a second signal ends the wait for a cancelled run's answer.
fn given_up(terminate: bool) -> i32 {
    say("egress-sandbox: stopped waiting for the daemon; the run was cancelled there");
    if terminate { 143 } else { 130 }
}

async fn cancel(
    client: &Client,
    run_id: &std::sync::Mutex<Option<String>>,
    signal: Interruption,
) -> bool {
    let Some(id) = run_id.lock().expect("run id lock").clone() else {
        return false;
    };
    match client.cancel(&id, signal).await {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(error = %with_causes(&error), "cannot cancel the run");
            false
        }
    }
}

/// The `--audit-log` file this client appends the run's records to, and why it stopped
/// (the daemon cannot know: the report and summary line are completed here, as a cold run
/// writes them).
struct AuditFile<'a> {
    file: &'a mut Option<std::fs::File>,
    error: &'a mut Option<String>,
}

fn handle(
    event: Event,
    run_id: &std::sync::Mutex<Option<String>>,
    exit_code: &std::cell::Cell<Option<i32>>,
    output_closed: &tokio::sync::Notify,
    audit_log: AuditFile<'_>,
    report_path: Option<&std::path::Path>,
) {
    match event {
        // Printed from the local check already, with `run`'s own code.
        Event::Warning { .. } => {}
        Event::Started { run } => *run_id.lock().expect("run id lock") = Some(run),
        Event::Output { stream, b64 } => {
            let bytes = STANDARD.decode(b64).unwrap_or_default();
            let (written, stream) = if stream == "stderr" {
                (std::io::stderr().write_all(&bytes), Stream::Stderr)
            } else {
                let mut stdout = std::io::stdout();
                (
                    stdout.write_all(&bytes).and_then(|()| stdout.flush()),
                    Stream::Stdout,
                )
            };
            if written.is_ok() {
                tool_lines::note_output(stream, &bytes, tool_lines::is_terminal(stream));
            }
            if written.is_err_and(|error| error.kind() == std::io::ErrorKind::BrokenPipe) {
                output_closed.notify_one();
            }
        }
        Event::Audit { record } => {
            if let Some(file) = audit_log.file {
                let mut line = record.get().as_bytes().to_vec();
                line.push(b'\n');
                if let Err(error) = file.write_all(&line) {
                    tracing::error!(%error, "cannot append to the audit log; no further records are written there");
                    *audit_log.error = Some(error.to_string());
                    *audit_log.file = None;
                }
            }
        }
        Event::Exit {
            report,
            summary,
            teardown_errors,
        } => {
            for failure in &teardown_errors {
                say(format_args!(
                    "egress-sandbox: could not remove {failure}; `egress-sandbox gc` will"
                ));
            }
            let mut report = match serde_json::from_str::<RunReport<'static>>(report.get()) {
                Ok(report) => report,
                Err(error) => {
                    say(format_args!(
                        "egress-sandbox: error: the daemon's report cannot be read: {error}"
                    ));
                    exit_code.set(Some(i32::from(SETUP_FAILED)));
                    return;
                }
            };
            let mut summary = summary;
            if let Some(error) = audit_log.error.as_deref() {
                report.audit_log_error = Some(error.to_owned().into());
                summary += &egress_sandbox::audit_log_incomplete(error);
            }
            if let Some(path) = report_path
                && let Err(error) = std::fs::write(path, report.to_json() + "\n")
            {
                say(format_args!(
                    "egress-sandbox: cannot write the report {}: {error}",
                    path.display()
                ));
            }
            tool_lines::print_line(&summary);
            exit_code.set(Some(report.exit_code));
        }
        Event::Error { error, .. } => {
            say(format_args!("egress-sandbox: error: {error}"));
            exit_code.set(Some(i32::from(SETUP_FAILED)));
        }
        // An event of a newer daemon: nothing this client has to act on.
        _ => {}
    }
}

/// The request `run`'s flags amount to, with `stdin`: the same settings, in the forms a
/// request carries (`RunOptions::carried`): policy files read here (the daemon may not see
/// the same files) and sent with their names, relative mount sources made absolute, secrets
/// and upstream CAs as `credentials` read them.
pub(crate) fn request_from(
    args: &RunArgs,
    credentials: &RunCredentials,
    stdin: Vec<u8>,
) -> anyhow::Result<RunRequest> {
    let options = args
        .options
        .clone()
        .carried(credentials)
        .context("cannot make the request")?;
    Ok(RunRequest {
        argv: args.command.clone(),
        options,
        files: Default::default(),
        stdin: (!stdin.is_empty()).then(|| STANDARD.encode(&stdin)),
    })
}

/// `run --server`'s stdin, read to its end (empty for a terminal): the request carries it
/// whole.
fn read_stdin() -> anyhow::Result<Vec<u8>> {
    Ok(if std::io::stdin().is_terminal() {
        Vec::new()
    } else {
        // Bounded: the request carries stdin whole (`yes | run --server …` grew without end).
        let mut input = Vec::new();
        std::io::stdin()
            .take(egress_serve::MAX_STDIN as u64 + 1)
            .read_to_end(&mut input)
            .context("cannot read stdin")?;
        if input.len() > egress_serve::MAX_STDIN {
            anyhow::bail!(
                "stdin is larger than {} MiB, the most a run through --server takes (the daemon \
                 gets it whole before the run starts); run without --server to stream it",
                egress_serve::MAX_STDIN >> 20
            );
        }
        input
    })
}
