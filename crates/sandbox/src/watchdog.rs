//! A guard that removes a process's sandboxes when the process dies without doing so.
//!
//! A run removes its objects on every path it controls, signals included; `kill -9`, the
//! kernel's OOM killer or a crash of the process that runs it are not such paths. Before
//! this guard, the sandbox then ran on past its time limit — its proxy's records read by
//! nobody — until someone ran `gc`. [`Watchdog::spawn`] starts a small child (this tool's
//! binary, `watchdog` subcommand) in a process group of its own, so a signal to the
//! caller's group does not reach it, holding the read end of a pipe. Dropping the guard
//! writes [`STAND_DOWN`] and the child exits; if the owner dies instead, the kernel closes
//! the pipe without it, and the child removes every object carrying the owner's label at
//! once (removing a container kills it: the command ends, and so does its way out).

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};

use std::os::unix::process::CommandExt;

use crate::Sandbox;

/// What the owner writes when it is done with its runs: the watchdog leaves everything be.
pub const STAND_DOWN: &[u8] = b"stand down\n";

/// While held, this process's runs are removed if it dies; drop it once they are removed.
pub struct Watchdog {
    stand_down: Option<ChildStdin>,
    child: Child,
}

impl Watchdog {
    /// Starts the watchdog for `sandbox`'s owner (this process), from the handle's binary.
    pub fn spawn(sandbox: &Sandbox) -> std::io::Result<Watchdog> {
        let mut child = Command::new(sandbox.proxy_binary())
            .args(["watchdog", "--owner", &sandbox.owner().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            // What it removed is told where this process's errors went.
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()?;
        let stand_down = child.stdin.take();
        Ok(Watchdog { stand_down, child })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(mut pipe) = self.stand_down.take()
            && let Err(error) = pipe.write_all(STAND_DOWN)
        {
            tracing::debug!(%error, "the watchdog is gone already");
        }
        // It exits as soon as it reads the pipe's end: reaped here, not left a zombie.
        let _ = self.child.wait();
    }
}
