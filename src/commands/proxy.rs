//! TODO(helper): `egress-sandbox proxy`.

use std::process::ExitCode;

pub fn run(args: crate::cli::ProxyArgs) -> anyhow::Result<ExitCode> {
    let _ = args;
    anyhow::bail!("not built yet")
}
