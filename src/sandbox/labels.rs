//! Names and labels of a run's Docker objects, and the owner stamp `gc` reads.
//!
//! Every object a run creates carries `egress-sandbox.run=<id>` and
//! `egress-sandbox.owner=<pid>:<start time>`. A pid alone is reused; together with the
//! process start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot) it names one
//! process for good, so `gc` can tell a live run from the leftovers of a dead one.

use std::collections::HashMap;
use std::fmt;

use rand::Rng;

pub const RUN_LABEL: &str = "egress-sandbox.run";
pub const OWNER_LABEL: &str = "egress-sandbox.owner";
/// Marks the shared outside network; it belongs to no run and `gc` leaves it alone.
pub const SHARED_LABEL: &str = "egress-sandbox.shared";

/// The names of one run's objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunNames {
    /// `r-` + 8 hex digits.
    pub id: String,
    pub network: String,
    pub proxy: String,
    pub sandbox: String,
}

impl RunNames {
    /// A fresh run id and the object names derived from it.
    pub fn generate() -> RunNames {
        let id = format!("r-{:08x}", rand::rng().random::<u32>());
        RunNames::for_id(&id)
    }

    pub fn for_id(id: &str) -> RunNames {
        RunNames {
            id: id.to_string(),
            network: format!("egress-run-{id}"),
            proxy: format!("egress-run-{id}-proxy"),
            sandbox: format!("egress-run-{id}-sandbox"),
        }
    }
}

/// One process, for good: pid plus start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    pub start_time: u64,
}

impl Owner {
    /// This process.
    pub fn current() -> std::io::Result<Owner> {
        let pid = std::process::id();
        let start_time = process_start_time(pid)?.ok_or_else(|| {
            std::io::Error::other("cannot read this process's start time from /proc")
        })?;
        Ok(Owner { pid, start_time })
    }

    /// Parses the label value `<pid>:<start time>`.
    pub fn parse(label: &str) -> Option<Owner> {
        let (pid, start) = label.split_once(':')?;
        Some(Owner {
            pid: pid.parse().ok()?,
            start_time: start.parse().ok()?,
        })
    }

    /// Whether that very process still runs (on this machine: the label is a local pid).
    pub fn is_alive(&self) -> bool {
        matches!(process_start_time(self.pid), Ok(Some(start)) if start == self.start_time)
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
        write!(f, "{}:{}", self.pid, self.start_time)
    }
}

/// Start time of `pid` in clock ticks since boot; `None` when there is no such process.
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
pub fn random_hostname() -> String {
    format!("sandbox-{:06x}", rand::rng().random::<u32>() & 0xff_ffff)
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
        assert!(owner.is_alive());
        assert_eq!(Owner::parse(&owner.to_string()), Some(owner));
        let restarted = Owner {
            start_time: owner.start_time + 1,
            ..owner
        };
        assert!(!restarted.is_alive());
    }

    #[test]
    fn run_names_follow_the_contract() {
        let names = RunNames::generate();
        assert!(names.id.starts_with("r-") && names.id.len() == 10);
        assert_eq!(names.proxy, format!("egress-run-{}-proxy", names.id));
        assert!(Owner::parse("garbage").is_none());
    }
}
