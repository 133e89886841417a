//! TODO(helper): `egress-sandbox gc`.

use std::process::ExitCode;

pub fn run(args: crate::cli::GcArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("not built yet")
}
