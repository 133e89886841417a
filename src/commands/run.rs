//! TODO(helper): `egress-sandbox run`.

use std::process::ExitCode;

pub fn run(args: crate::cli::RunArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("not built yet")
}
