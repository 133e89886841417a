//! TODO(helper): `egress-sandbox policy`.

use std::process::ExitCode;

pub fn run(args: crate::cli::PolicyArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("not built yet")
}
