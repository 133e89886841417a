//! One module per subcommand. Each `run` returns the process exit code; an `Err` is a
//! set-up failure and exits 125 (`audit` turns its own into usage errors, 2: it sets up
//! nothing).

use std::process::ExitCode;

/// Exit status of a usage error: a bad flag or target, a log or policy that cannot be read,
/// output that cannot be written. (125 means a sandbox could not be set up.)
pub const USAGE: u8 = 2;

pub mod audit;
pub mod doctor;
pub mod gc;
pub mod mcp;
pub mod policy;
pub mod proxy;
pub mod run;
pub mod run_client;
pub mod sandbox_launcher;
pub mod serve;
mod tool_lines;
pub mod usage;
pub mod watchdog;

/// `egress-sandbox run`: through the daemon when one is named (`run_client`), else cold.
pub fn run(args: crate::cli::RunArgs) -> anyhow::Result<ExitCode> {
    match run_client::server_socket(&args) {
        Some(socket) => run_client::run(args, socket),
        None => run::run(args),
    }
}

/// Prints `error` as one line on stderr, `egress-sandbox: error: …` with its causes, and
/// returns `code`. Errors quote paths, hosts and policy text: their controls are never
/// printed raw.
pub fn report_error(error: &anyhow::Error, code: u8) -> ExitCode {
    tool_lines::print_line(&egress_core::text::visible(&format!(
        "egress-sandbox: error: {}",
        error_line(error)
    )));
    ExitCode::from(code)
}

/// `error` and its causes joined with `: `, each said once: every error says only its own
/// part and leaves its cause to `source()` ([`egress_core::text::with_causes`]).
pub fn error_line(error: &anyhow::Error) -> String {
    egress_core::text::with_causes(error.as_ref())
}

/// Writes `text` on stdout, for the commands that print a report (`policy`, `audit`).
/// `print!` panics when the reader has gone (`… | head`); here a closed pipe drops the rest
/// of the output quietly and the command goes on, so its exit status still says what it
/// found. Any other write error (a full disk under `> FILE`) is said on stderr and ends the
/// process with 2: a report cut short must not look whole.
pub fn print_out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(error) => {
            eprintln!("egress-sandbox: error: cannot write to stdout: {error}");
            std::process::exit(USAGE.into());
        }
    }
}

/// One warning on stderr per line of the logs that is not an audit record, for every
/// command that reads logs through `audit_tools::log`.
pub fn warn_skipped(log: &egress_audit::log::AuditLog) {
    for skipped in &log.skipped {
        eprintln!("egress-sandbox: warning: {skipped}; skipped");
    }
}

#[cfg(test)]
mod tests {
    use super::error_line;

    /// The line walks the causes and says each once; nothing is matched by its text, so
    /// an error whose message quoted its cause would show here twice.
    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone (os error 2)");
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read x")]
        struct Step(#[source] std::io::Error);
        let error = anyhow::Error::from(Step(io)).context("cannot serve");
        assert_eq!(
            error_line(&error),
            "cannot serve: cannot read x: gone (os error 2)"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_line(&plain), "outer: inner");
        let repeated = anyhow::anyhow!("same").context("same");
        assert_eq!(error_line(&repeated), "same: same");
    }
}
