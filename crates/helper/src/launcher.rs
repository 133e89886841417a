//! `sandbox-launcher [--pass-listeners PATH] -- [PREFIX…]`: the sandbox's entrypoint when
//! the engine is local.
//!
//! Starting a container takes a few hundred milliseconds, and so does starting the proxy.
//! Rather than start the sandbox only after the proxy is ready, a run starts both at once
//! with this launcher in front of the command: it blocks on stdin until the run writes the
//! launch signal, which it does once the proxy has printed its ready line. So the command
//! never runs before its only way out exists, and the two starts overlap. If the run gives
//! up, stdin ends without the signal and the command never runs. The signal carries the
//! command (run after PREFIX, the image's entrypoint), its environment (over the
//! container's, as Docker merges `Env`), its working directory and the task files
//! (`egress_sandbox::launch_signal`), written under /task first: so a sandbox can be started
//! before its command is known (a warm pool slot of `serve`). After the signal, stdin
//! carries the caller's input to the command, and ends when it does.

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use egress_proxy::PassedListeners;
use egress_sandbox::launch_signal::{self, SignalError};
use egress_sandbox::loopback_doors;
use egress_sandbox::task_files::{self, TASK_DIR, TaskFile};

/// Exit status when the command was not run: the sandbox could not be set up.
const NOT_RUN: u8 = 125;

/// The launcher's arguments.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LauncherOptions {
    /// Bind the proxy's doors on the sandbox's loopback and pass them to the proxy's Unix
    /// socket at this path before the command runs (a sandbox with no network).
    pub pass_listeners: Option<PathBuf>,
    /// What goes before the signal's command (the image's entrypoint; may be empty).
    pub command: Vec<String>,
}

/// Waits for the signal, sets the sandbox up, then executes the command in this process's
/// place; returns only when the command cannot be run, with the status that says why.
pub fn run(options: LauncherOptions) -> ExitCode {
    let setup = match read_signal() {
        Ok(Some(setup)) => setup,
        Err(SignalError::Version { found, expected }) => {
            eprintln!(
                "egress-sandbox: {}; this launcher is {}: run the helper built with the library that runs it; the command was not run",
                SignalError::Version { found, expected },
                crate::version_line()
            );
            return ExitCode::from(NOT_RUN);
        }
        Ok(None) | Err(_) => {
            eprintln!("egress-sandbox: the proxy never became ready; the command was not run");
            return ExitCode::from(NOT_RUN);
        }
    };
    if let Err(error) = write_task_files(&setup.files) {
        eprintln!("egress-sandbox: cannot write the task files: {error}");
        return ExitCode::from(NOT_RUN);
    }
    // The doors, bound on this sandbox's loopback (it has no other network) and passed to
    // the proxy before the command exists: the command can neither pre-empt nor forge the
    // pass, and inherits none of the sockets (close-on-exec, and dropped here).
    if let Some(socket) = &options.pass_listeners
        && let Err(error) = pass_listeners(socket, &setup.raw_ports)
    {
        eprintln!(
            "egress-sandbox: cannot hand the proxy its doors in the sandbox: {error}; the command was not run"
        );
        return ExitCode::from(NOT_RUN);
    }
    if let Some(tasks) = setup.task_limit
        && let Err(error) = limit_tasks(tasks)
    {
        eprintln!(
            "egress-sandbox: cannot set the task limit in the sandbox: {error}; the command was not run"
        );
        return ExitCode::from(NOT_RUN);
    }
    let mut command_line = options.command;
    command_line.extend(setup.argv);
    let Some((program, arguments)) = command_line.split_first() else {
        eprintln!("egress-sandbox: the sandbox was given no command");
        return ExitCode::from(NOT_RUN);
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
        return ExitCode::from(NOT_RUN);
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
    ExitCode::from(code)
}

/// The signal, read straight from fd 0, not through std's buffered stdin: whatever follows
/// it is the caller's input and must stay in the pipe for the command.
fn read_signal() -> Result<Option<launch_signal::LaunchSetup>, SignalError> {
    let mut stdin = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    launch_signal::read(&mut stdin)
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
fn write_task_files(files: &[TaskFile]) -> Result<(), String> {
    write_task_files_under(Path::new(TASK_DIR), files)
}

fn write_task_files_under(dir: &Path, files: &[TaskFile]) -> Result<(), String> {
    for file in files {
        task_files::check_path(&file.path)
            .map_err(|reason| format!("{:?}: {reason}", file.path))?;
        let path = dir.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|error| format!("cannot create {}: {error}", parent.display()))?;
        }
        std::fs::write(&path, &file.contents)
            .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_files_land_under_the_directory_and_bad_paths_are_refused_again() {
        let dir = tempfile::tempdir().unwrap();
        let files = [TaskFile {
            path: "a/b.py".into(),
            contents: b"print(1)\n".to_vec(),
        }];
        write_task_files_under(dir.path(), &files).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("a/b.py")).unwrap(),
            b"print(1)\n"
        );
        let climbing = [TaskFile {
            path: "../out".into(),
            contents: Vec::new(),
        }];
        let error = write_task_files_under(dir.path(), &climbing).unwrap_err();
        assert!(error.starts_with("\"../out\": "), "{error}");
        assert!(!dir.path().parent().unwrap().join("out").exists());
    }
}
