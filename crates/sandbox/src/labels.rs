//! Names and labels of a run's Docker objects, and the owner stamp `gc` reads.
//!
//! Every object a run creates carries `egress-sandbox.run=<id>` and
//! `egress-sandbox.owner=<pid>:<start time>:<boot id>:<pid namespace>`. A pid alone is
//! reused; with the process start time (field 22 of `/proc/<pid>/stat`, clock ticks since
//! boot) it names one process for good — but only on one host and in one PID namespace.
//! The engine may be shared by several hosts, or by a container and its host, each with
//! its own pids; the boot id (`/proc/sys/kernel/random/boot_id`) and the PID namespace's
//! inode (`/proc/self/ns/pid`) say where the pid means something, so `gc` judges only
//! owners of its own host identity.

use std::collections::HashMap;
use std::fmt;

/// The label holding the id of the run an object belongs to.
pub const RUN_LABEL: &str = "egress-sandbox.run";
/// The label holding the owner stamp of the process that made an object, which `gc` reads.
pub const OWNER_LABEL: &str = "egress-sandbox.owner";
/// Marks the shared outside network; it belongs to no run and `gc` leaves it alone.
pub const SHARED_LABEL: &str = "egress-sandbox.shared";

/// The names of one run's objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunNames {
    /// `r-` + 8 hex digits.
    pub id: String,
    /// The run's network: `egress-run-<id>`.
    pub network: String,
    /// The proxy container: `egress-run-<id>-proxy`.
    pub proxy: String,
    /// The sandbox container: `egress-run-<id>-sandbox`.
    pub sandbox: String,
}

impl RunNames {
    /// A fresh run id and the object names derived from it.
    pub fn generate() -> RunNames {
        let id = format!("r-{:08x}", rand::random::<u32>());
        RunNames::for_id(&id)
    }

    /// The object names of the run `id`.
    pub fn for_id(id: &str) -> RunNames {
        RunNames {
            id: id.to_string(),
            network: format!("egress-run-{id}"),
            proxy: format!("egress-run-{id}-proxy"),
            sandbox: format!("egress-run-{id}-sandbox"),
        }
    }
}

/// Where a pid means something: one boot of one machine, one PID namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostIdentity {
    /// The kernel's random id of this boot (a UUID), the same for every namespace.
    pub boot_id: String,
    /// The inode of the PID namespace, as `/proc/self/ns/pid` names it (`pid:[N]`).
    pub pid_namespace: u64,
}

impl HostIdentity {
    /// The identity of this process's host and PID namespace.
    pub fn current() -> std::io::Result<HostIdentity> {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?
            .trim()
            .to_string();
        if boot_id.is_empty() || boot_id.contains(':') {
            return Err(std::io::Error::other("unexpected boot id in /proc"));
        }
        let link = std::fs::read_link("/proc/self/ns/pid")?;
        let pid_namespace = parse_namespace_link(&link.to_string_lossy()).ok_or_else(|| {
            std::io::Error::other(format!("unexpected /proc/self/ns/pid: {}", link.display()))
        })?;
        Ok(HostIdentity {
            boot_id,
            pid_namespace,
        })
    }
}

impl fmt::Display for HostIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "boot {}, pid namespace {}",
            self.boot_id, self.pid_namespace
        )
    }
}

/// `pid:[4026531836]` → 4026531836.
fn parse_namespace_link(link: &str) -> Option<u64> {
    link.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// One process, for good: pid plus start time, on one host identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The owner's process id.
    pub pid: u32,
    /// The process's start time, in clock ticks since boot, so a reused pid is another owner.
    pub start_time: u64,
    /// Where the pid means something.
    pub host: HostIdentity,
}

/// What an owner label says, as `gc` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OwnerLabel {
    /// The current format, with a host identity.
    Owner(Owner),
    /// `<pid>:<start time>` alone, without a host identity: the pid may belong to another
    /// host or PID namespace, so nothing can be proved about it.
    WithoutHost {
        /// The pid the label names.
        pid: u32,
        /// The start time the label names.
        start_time: u64,
    },
    /// Not a label egress-sandbox writes.
    Unreadable,
}

impl Owner {
    /// This process.
    pub fn current() -> std::io::Result<Owner> {
        let pid = std::process::id();
        let start_time = process_start_time(pid)?.ok_or_else(|| {
            std::io::Error::other("cannot read this process's start time from /proc")
        })?;
        Ok(Owner {
            pid,
            start_time,
            host: HostIdentity::current()?,
        })
    }

    /// Reads an owner label value in any format egress-sandbox has written.
    pub fn parse(label: &str) -> OwnerLabel {
        let fields: Vec<&str> = label.split(':').collect();
        let pid_and_start = |pid: &str, start: &str| Some((pid.parse().ok()?, start.parse().ok()?));
        match fields[..] {
            [pid, start, boot_id, namespace] if !boot_id.is_empty() => {
                match (pid_and_start(pid, start), namespace.parse()) {
                    (Some((pid, start_time)), Ok(pid_namespace)) => OwnerLabel::Owner(Owner {
                        pid,
                        start_time,
                        host: HostIdentity {
                            boot_id: boot_id.to_string(),
                            pid_namespace,
                        },
                    }),
                    _ => OwnerLabel::Unreadable,
                }
            }
            [pid, start] => match pid_and_start(pid, start) {
                Some((pid, start_time)) => OwnerLabel::WithoutHost { pid, start_time },
                None => OwnerLabel::Unreadable,
            },
            _ => OwnerLabel::Unreadable,
        }
    }

    /// Whether that very process still runs. Meaningful only where `host` is the current
    /// host identity: a pid is looked up in this PID namespace.
    ///
    /// A process missing from `/proc` is not proof of its end: with `hidepid` another
    /// user's processes are hidden there. Then the kernel is asked (a signal 0): only "no
    /// such process" is an end; a process that exists but cannot be looked at may be the
    /// owner (or a process that took its pid), and is taken for alive — `gc` removed live
    /// runs of other users.
    pub fn is_alive_here(&self) -> bool {
        match process_start_time(self.pid) {
            Ok(Some(start)) => start == self.start_time,
            Ok(None) | Err(_) => process_exists(self.pid),
        }
    }

    /// The labels every object of run `id` carries.
    pub fn labels(&self, run_id: &str) -> HashMap<String, String> {
        HashMap::from([
            (RUN_LABEL.to_string(), run_id.to_string()),
            (OWNER_LABEL.to_string(), self.to_string()),
        ])
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.pid, self.start_time, self.host.boot_id, self.host.pid_namespace
        )
    }
}

/// Whether the kernel knows a process `pid` in this PID namespace (signal 0: it exists
/// unless the answer is "no such process", even where it may not be signalled).
fn process_exists(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

/// Start time of `pid` in clock ticks since boot; `None` when `/proc` shows no such process.
fn process_start_time(pid: u32) -> std::io::Result<Option<u64>> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    Ok(parse_start_time(&stat))
}

/// Field 22 of `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may
/// itself contain spaces and parentheses, so count from the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields 3.. follow; start time is field 22, the 20th after the name.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// A random host name for the sandbox: Docker's default would be the container id.
pub(crate) fn random_hostname() -> String {
    format!("sandbox-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_survives_odd_command_names() {
        let stat = "1234 (we (ird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_time(stat), Some(987654));
    }

    #[test]
    fn current_owner_is_alive_and_round_trips() {
        let owner = Owner::current().unwrap();
        assert!(owner.is_alive_here());
        assert_eq!(
            Owner::parse(&owner.to_string()),
            OwnerLabel::Owner(owner.clone())
        );
        let restarted = Owner {
            start_time: owner.start_time + 1,
            ..owner
        };
        assert!(!restarted.is_alive_here());
    }

    #[test]
    fn owner_labels_of_every_format_are_told_apart() {
        assert_eq!(
            Owner::parse("12:34"),
            OwnerLabel::WithoutHost {
                pid: 12,
                start_time: 34
            }
        );
        assert_eq!(
            Owner::parse("12:34:bd74293b-9a7d-4009-98de-c952f25ca926:4026531836"),
            OwnerLabel::Owner(Owner {
                pid: 12,
                start_time: 34,
                host: HostIdentity {
                    boot_id: "bd74293b-9a7d-4009-98de-c952f25ca926".into(),
                    pid_namespace: 4026531836,
                },
            })
        );
        for bad in [
            "",
            "12",
            "x:34",
            "12:34:boot",
            "12:34::5",
            "12:34:b:ns",
            "1:2:3:4:5",
        ] {
            assert_eq!(Owner::parse(bad), OwnerLabel::Unreadable, "{bad:?}");
        }
        assert_eq!(parse_namespace_link("pid:[4026531836]"), Some(4026531836));
        assert_eq!(parse_namespace_link("net:[4026531836]"), None);
    }

    #[test]
    fn run_names_follow_the_contract() {
        let names = RunNames::generate();
        assert!(names.id.starts_with("r-") && names.id.len() == 10);
        assert_eq!(names.proxy, format!("egress-run-{}-proxy", names.id));
        assert_eq!(Owner::parse("garbage"), OwnerLabel::Unreadable);
    }
}
