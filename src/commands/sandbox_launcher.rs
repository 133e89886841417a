//! `egress-sandbox sandbox-launcher -- [PREFIX...]` (hidden): the sandbox's entrypoint when the
//! engine is local.
//!
//! Starting a container takes a few hundred milliseconds, and so does starting the proxy.
//! Rather than start the sandbox only after the proxy is ready, `run` starts both at once
//! with this launcher in front of the command: it blocks on stdin until `run` writes one byte,
//! which it does once the proxy has printed its ready line. So the command never runs
//! before its only way out exists, and the two starts overlap. If `run` gives up, stdin
//! ends without that byte and the command never runs. The signal carries the command (run
//! after PREFIX, the image's entrypoint), its environment (over the container's, as Docker
//! merges `Env`), its working directory and the task files (`sandbox::launch_signal`),
//! written under /task first: so a sandbox can be started before its command is known (a
//! warm pool slot of `serve`). After the signal, stdin carries the caller's input to the
//! command, and ends when it does.

use std::os::fd::AsFd;
use std::path::Path;

use anyhow::Context;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use crate::cli::SandboxLauncherArgs;
use egress_proxy::passed_listeners::PassedListeners;

use egress_sandbox::launch_signal;
use egress_sandbox::loopback_doors;
use egress_sandbox::task_files::{self, TASK_DIR, TaskFile};

pub fn run(args: SandboxLauncherArgs) -> anyhow::Result<ExitCode> {
    // Read straight from fd 0, not through std's buffered stdin: whatever follows the go
    // byte is the caller's input and must stay in the pipe for the command.
    let mut stdin = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let setup = match launch_signal::read(&mut stdin) {
        Ok(Some(setup)) => setup,
        Ok(None) | Err(_) => {
            eprintln!("egress-sandbox: the proxy never became ready; the command was not run");
            return Ok(ExitCode::from(125));
        }
    };
    if let Err(error) = write_task_files(&setup.files) {
        eprintln!("egress-sandbox: cannot write the task files: {error:#}");
        return Ok(ExitCode::from(125));
    }
    // The doors, bound on this sandbox's loopback (it has no other network) and passed to
    // the proxy before the command exists: the command can neither pre-empt nor forge the
    // pass, and inherits none of the sockets (close-on-exec, and dropped here).
    if let Some(socket) = &args.pass_listeners
        && let Err(error) = pass_listeners(socket, &setup.raw_ports)
    {
        eprintln!(
            "egress-sandbox: cannot hand the proxy its doors in the sandbox: {error}; the command was not run"
        );
        return Ok(ExitCode::from(125));
    }
    if let Some(tasks) = setup.task_limit
        && let Err(error) = limit_tasks(tasks)
    {
        eprintln!(
            "egress-sandbox: cannot set the task limit in the sandbox: {error}; the command was not run"
        );
        return Ok(ExitCode::from(125));
    }
    let mut command_line = args.command;
    command_line.extend(setup.argv);
    let Some((program, arguments)) = command_line.split_first() else {
        eprintln!("egress-sandbox: the sandbox was given no command");
        return Ok(ExitCode::from(125));
    };
    let mut command = std::process::Command::new(program);
    command.args(arguments);
    // In order: a later entry replaces an earlier one of the same name, as with `Env`.
    for entry in &setup.env {
        match entry.split_once('=') {
            Some((key, value)) if !key.is_empty() => command.env(key, value),
            _ => command.env_remove(entry),
        };
    }
    if let Some(dir) = &setup.workdir
        && let Err(error) = std::env::set_current_dir(dir)
    {
        eprintln!("egress-sandbox: cannot enter the working directory {dir}: {error}");
        return Ok(ExitCode::from(125));
    }
    // `exec` replaces this process (std resets SIGPIPE and the signal mask for the new
    // program); it only returns on failure, with the codes a shell would use.
    let error = command.exec();
    eprintln!("egress-sandbox: cannot run {program}: {error}");
    let code = if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Ok(ExitCode::from(code))
}

/// Lowers this user's task limit (`RLIMIT_NPROC`, soft and hard: the command cannot raise
/// it again). Sent only where the sandbox's kernel is its own (gVisor), so the count is
/// this sandbox's tasks; on the host kernel it would count every sandbox of the same user.
fn limit_tasks(tasks: u64) -> std::io::Result<()> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let limit = Rlimit {
        current: Some(tasks),
        maximum: Some(tasks),
    };
    setrlimit(Resource::Nproc, limit).map_err(std::io::Error::from)
}

fn pass_listeners(socket: &Path, raw_ports: &[u16]) -> std::io::Result<()> {
    let listeners = PassedListeners::bind(&loopback_doors(raw_ports))?;
    if listeners.closed_sockets.is_none() {
        eprintln!(
            "egress-sandbox: warning: this kernel gives no notice of closed sockets (NETLINK_SOCK_DIAG): connections to ports without a door are refused but not recorded"
        );
    }
    listeners.send(socket)
}

/// Writes each file under /task (a tmpfs of this sandbox), creating directories; paths are
/// checked again here, the launcher trusts nothing it reads.
fn write_task_files(files: &[TaskFile]) -> anyhow::Result<()> {
    for file in files {
        task_files::check_path(&file.path)
            .map_err(|reason| anyhow::anyhow!("{:?}: {reason}", file.path))?;
        let path = Path::new(TASK_DIR).join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, &file.contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
