//! `egress-sandbox watchdog --owner STAMP` (hidden): the helper's watchdog
//! ([`egress_sandbox_helper::watchdog`]), so this binary is a helper as well.

use std::process::ExitCode;

use crate::cli::WatchdogArgs;

pub fn run(args: WatchdogArgs) -> anyhow::Result<ExitCode> {
    Ok(egress_sandbox_helper::watchdog::run(&args.owner)?)
}
