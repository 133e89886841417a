//! `egress-sandbox audit …`: commands that read audit logs. One module per subcommand.

mod export;
mod html;
mod summary;
mod verify;

use std::process::ExitCode;

use super::USAGE;
use crate::cli::{AuditArgs, AuditCommand};

pub fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    let result = match args.command {
        AuditCommand::Summary { files } => summary::summary(&files),
        AuditCommand::Verify { reports, files } => verify::verify(&reports, &files),
        AuditCommand::Export { format, files } => export::export(format, &files),
        AuditCommand::Report { html, files } => html::report(&html, &files),
    };
    Ok(result.unwrap_or_else(|error| super::report_error(&error, USAGE)))
}

/// One warning on stderr per line of the logs that is not an audit record.
fn warn_skipped(log: &crate::audit_tools::log::AuditLog) {
    for skipped in &log.skipped {
        eprintln!(
            "egress-sandbox: warning: {}:{}: {}; skipped",
            skipped.file.display(),
            skipped.line,
            egress_proxy::text::visible(&skipped.why)
        );
    }
}
