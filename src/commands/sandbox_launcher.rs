//! `egress-sandbox sandbox-launcher -- [PREFIX...]` (hidden): the sandbox's entrypoint when the
//! engine is local, the helper's launcher ([`egress_sandbox_helper::launcher`]), so this binary
//! is a helper as well.

use std::process::ExitCode;

use egress_sandbox_helper::launcher::LauncherOptions;

use crate::cli::SandboxLauncherArgs;

pub fn run(args: SandboxLauncherArgs) -> anyhow::Result<ExitCode> {
    Ok(egress_sandbox_helper::launcher::run(LauncherOptions {
        pass_listeners: args.pass_listeners,
        command: args.command,
    }))
}
