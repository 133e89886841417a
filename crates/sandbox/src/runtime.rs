//! What an OCI runtime the engine offers is, read from its registration (`docker info`:
//! the executable and the arguments the engine passes it), never from its name alone: an
//! administrator may register gVisor as `gvisor` or runc as `secure`.
//!
//! What a run needs to know of its runtime:
//!
//! - **How the sandbox can reach its proxy** ([`RuntimeKind::wiring`]). runc (and crun,
//!   youki) run the sandbox on the host kernel: a socket its launcher binds is a host socket,
//!   which can be passed to the proxy. gVisor (`runsc`) runs it on a kernel of its own, and
//!   even with `--network=host` (hostinet: host sockets in the container's namespace) and
//!   `--host-uds=all` it refuses to send a descriptor over a host Unix socket (`sendmsg`
//!   with `SCM_RIGHTS`: `EINVAL`, runsc release 20221219), so its sandbox gets a network of
//!   its own. gVisor with `--network=none` has no way out at all.
//! - **How its task limit is enforced** (`RuntimeKind::counts_tasks_itself`). Under
//!   gVisor the host's pids cgroup holds the gVisor kernel's own threads (ptrace stubs,
//!   Go threads: about 40 idle, up to fifty per guest task under a fork bomb), not the
//!   guest's tasks; a limit meant for the command starves that kernel, which then dies with
//!   the run. gVisor's kernel enforces `RLIMIT_NPROC` per sandbox, so that carries the limit
//!   there, and the cgroup is only a backstop (`host_pids_for`).

/// A runtime as the engine registers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// The name the engine registers it under, which `--runtime` and a policy's `runtime:` use.
    pub name: String,
    /// The executable (`runsc`, `/usr/bin/runsc`); the name when the engine gives none.
    pub path: String,
    /// The arguments the engine passes the executable (gVisor's `--network=…` among them).
    pub args: Vec<String>,
    /// What kind of runtime it is, judged from its path and arguments.
    pub kind: RuntimeKind,
}

/// What a runtime is, as far as a run is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuntimeKind {
    /// runc, crun, youki: containers on the host kernel.
    HostKernel,
    /// gVisor's `runsc`, with the network mode it was registered with.
    Gvisor {
        /// The `--network` mode it was registered with.
        network: GvisorNetwork,
    },
    /// Anything else (Kata, Firecracker shims): a kernel of its own, nothing known.
    Other,
}

/// gVisor's `--network` mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GvisorNetwork {
    /// gVisor's own network stack on the container's interfaces (the default).
    Sandbox,
    /// The host kernel's network stack in the container's namespace (hostinet).
    Host,
    /// Loopback only.
    None,
}

/// How a run's sandbox reaches its proxy under a runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WiringChoice {
    /// No network for the sandbox; its launcher passes the doors on its loopback.
    PassedListeners,
    /// A per-run internal network shared with the proxy.
    RunNetwork,
    /// No wiring reaches the proxy from this runtime.
    Unusable,
}

impl WiringChoice {
    /// The wiring for a person, as `doctor` shows it.
    pub fn describe(self) -> &'static str {
        match self {
            WiringChoice::PassedListeners => "passed listeners (no network for the sandbox)",
            WiringChoice::RunNetwork => "a per-run network",
            WiringChoice::Unusable => "none (the sandbox could not reach its proxy)",
        }
    }
}

impl RuntimeKind {
    /// What the registration `path` + `args` is.
    pub fn classify(path: &str, args: &[String]) -> RuntimeKind {
        let program = path.rsplit('/').next().unwrap_or(path);
        match program {
            "runc"
            | "crun"
            | "youki"
            | "io.containerd.runc.v2"
            | "io.containerd.runtime.v1.linux" => RuntimeKind::HostKernel,
            "runsc" => {
                let network = match flag_value(args, "network") {
                    Some("host") => GvisorNetwork::Host,
                    Some("none") => GvisorNetwork::None,
                    _ => GvisorNetwork::Sandbox,
                };
                RuntimeKind::Gvisor { network }
            }
            _ => RuntimeKind::Other,
        }
    }

    /// The wiring a run would get under this runtime; `local`: the engine is on this host
    /// (a remote one can pass nothing).
    pub fn wiring(self, local: bool) -> WiringChoice {
        match self {
            RuntimeKind::HostKernel if local => WiringChoice::PassedListeners,
            RuntimeKind::Gvisor {
                network: GvisorNetwork::None,
            } => WiringChoice::Unusable,
            _ => WiringChoice::RunNetwork,
        }
    }

    /// Whether the host's pids cgroup counts the runtime's own threads rather than the
    /// command's tasks, so the task limit is carried by `RLIMIT_NPROC` inside instead.
    pub(crate) fn counts_tasks_itself(self) -> bool {
        matches!(self, RuntimeKind::Gvisor { .. })
    }

    /// Whether the engine can change a live container's limits under this runtime
    /// (`docker update`): gVisor's `runsc` has no `update` command.
    pub(crate) fn updates_live_limits(self) -> bool {
        !matches!(self, RuntimeKind::Gvisor { .. })
    }

    /// The kind for a person, as `doctor` and run errors show it.
    pub fn describe(self) -> String {
        match self {
            RuntimeKind::HostKernel => "host kernel".into(),
            RuntimeKind::Gvisor { network } => {
                let network = match network {
                    GvisorNetwork::Sandbox => "its own network stack",
                    GvisorNetwork::Host => "the host's network stack",
                    GvisorNetwork::None => "no network",
                };
                format!("gVisor, {network}")
            }
            RuntimeKind::Other => "unknown kind (a kernel of its own?)".into(),
        }
    }
}

/// The value of `--NAME=VALUE`, `-NAME=VALUE`, `--NAME VALUE` or a bare `--NAME` (`""`);
/// the last one given wins, as with Go's flag package.
fn flag_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let mut found = None;
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            continue;
        };
        if let Some(value) = flag
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('='))
        {
            found = Some(value);
        } else if flag == name {
            found = match iter.peek() {
                Some(next) if !next.starts_with('-') => iter.next().map(String::as_str),
                _ => Some(""),
            };
        }
    }
    found
}

impl RuntimeInfo {
    /// A runtime the engine registers as `name`, with its executable `path` (`None`: the
    /// engine looks `name` up on its PATH) and its `args`.
    pub fn new(name: String, path: Option<String>, args: Vec<String>) -> RuntimeInfo {
        let path = path.unwrap_or_else(|| name.clone());
        let kind = RuntimeKind::classify(&path, &args);
        RuntimeInfo {
            name,
            path,
            args,
            kind,
        }
    }
}

/// The host pids cgroup limit of a sandbox whose runtime counts tasks itself: a backstop
/// against a runaway runtime, not the task limit (the launcher's `RLIMIT_NPROC` is). gVisor's
/// ptrace platform keeps stub threads per address space and per thread of its own that ran
/// there, so its host tasks grow much faster than the guest's: measured at the peak of a
/// fork bomb (every child retrying fork), 1,757 host tasks for 32 guest tasks and 3,012 for
/// 128. A cgroup limit below that kills gVisor's kernel, and the run with it.
pub(crate) fn host_pids_for(tasks: u64) -> u64 {
    1024 + tasks.saturating_mul(48)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| arg.to_string()).collect()
    }

    #[test]
    fn a_runtime_is_known_by_its_executable_and_arguments_not_its_name() {
        let gvisor = |network| RuntimeKind::Gvisor { network };
        assert_eq!(RuntimeKind::classify("runc", &[]), RuntimeKind::HostKernel);
        assert_eq!(
            RuntimeKind::classify("/usr/local/bin/crun", &[]),
            RuntimeKind::HostKernel
        );
        assert_eq!(
            RuntimeKind::classify("/usr/bin/runsc", &[]),
            gvisor(GvisorNetwork::Sandbox)
        );
        assert_eq!(
            RuntimeKind::classify("/usr/bin/runsc", &args(&["--network=host", "--debug"])),
            gvisor(GvisorNetwork::Host)
        );
        assert_eq!(
            RuntimeKind::classify("runsc", &args(&["-network", "none", "--host-uds=all"])),
            gvisor(GvisorNetwork::None)
        );
        assert_eq!(
            RuntimeKind::classify("runsc", &args(&["--network=none", "--network=host"])),
            gvisor(GvisorNetwork::Host),
            "the last one given wins"
        );
        assert_eq!(
            RuntimeKind::classify("/opt/kata/bin/containerd-shim-kata-v2", &[]),
            RuntimeKind::Other
        );
    }

    #[test]
    fn listeners_are_passed_only_where_the_sandbox_is_on_the_host_kernel() {
        let gvisor = |network| RuntimeKind::Gvisor { network };
        assert_eq!(
            RuntimeKind::HostKernel.wiring(true),
            WiringChoice::PassedListeners
        );
        assert_eq!(
            RuntimeKind::HostKernel.wiring(false),
            WiringChoice::RunNetwork
        );
        assert_eq!(
            gvisor(GvisorNetwork::Host).wiring(true),
            WiringChoice::RunNetwork
        );
        assert_eq!(
            gvisor(GvisorNetwork::Sandbox).wiring(true),
            WiringChoice::RunNetwork
        );
        assert_eq!(
            gvisor(GvisorNetwork::None).wiring(true),
            WiringChoice::Unusable
        );
        assert_eq!(RuntimeKind::Other.wiring(true), WiringChoice::RunNetwork);
    }

    #[test]
    fn only_gvisor_moves_the_task_limit_inside_and_keeps_its_limits_from_create() {
        assert!(!RuntimeKind::HostKernel.counts_tasks_itself());
        assert!(RuntimeKind::classify("runsc", &[]).counts_tasks_itself());
        assert!(RuntimeKind::HostKernel.updates_live_limits());
        assert!(!RuntimeKind::classify("runsc", &[]).updates_live_limits());
        assert!(host_pids_for(32) > 1757 * 5 / 4);
        assert!(host_pids_for(128) > 3012 * 5 / 4);
    }
}
