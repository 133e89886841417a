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
