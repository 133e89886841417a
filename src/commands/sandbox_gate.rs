//! `egress-sandbox sandbox-gate -- COMMAND...` (hidden): the sandbox's entrypoint when the
//! engine is local.
//!
//! Starting a container takes a few hundred milliseconds, and so does starting the proxy.
//! Rather than start the sandbox only after the proxy is ready, `run` starts both at once
//! with this gate in front of the command: it blocks on stdin until `run` writes one byte,
//! which it does once the proxy has printed its ready line. So the command never runs
//! before its only way out exists, and the two starts overlap. If `run` gives up, stdin
//! ends without that byte and the command never runs.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use crate::cli::SandboxGateArgs;

pub fn run(args: SandboxGateArgs) -> anyhow::Result<ExitCode> {
    let mut go = [0u8; 1];
    if !matches!(std::io::stdin().lock().read(&mut go), Ok(1)) {
        eprintln!("egress-sandbox: the proxy never became ready; the command was not run");
        return Ok(ExitCode::from(125));
    }
    let (program, arguments) = args.command.split_first().expect("clap requires a command");
    // `exec` replaces this process (std resets SIGPIPE and the signal mask for the new
    // program); it only returns on failure, with the codes a shell would use.
    let error = std::process::Command::new(program).args(arguments).exec();
    eprintln!("egress-sandbox: cannot run {program}: {error}");
    let code = if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Ok(ExitCode::from(code))
}
