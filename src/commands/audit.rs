//! TODO(helper): `egress-sandbox audit`.

use std::process::ExitCode;

pub fn run(args: crate::cli::AuditArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("not built yet")
}
