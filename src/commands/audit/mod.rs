//! `egress-sandbox audit …`: commands that read audit logs. One module per subcommand.

mod summary;

use std::process::ExitCode;

use crate::cli::{AuditArgs, AuditCommand};

pub fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        AuditCommand::Summary { files } => summary::summary(&files),
    }
}
