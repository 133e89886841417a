//! The policy engine: YAML in, [`Decision`] out. Pure: no I/O, no async, no clock.
//!
//! The schema is INTERFACE.md's "Policy file". Several policies (and `--allow` flags, which
//! become a policy named `cli`) merge into one [`PolicySet`]: union of allow rules, union of
//! deny rules, strictest limits. The proxy only ever asks the set.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::target::Target;

/// Why an attempt ended the way it did: INTERFACE.md's stable reason vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Allowed by a rule.
    Rule,
    NotAllowed,
    Denied,
    PortNotAllowed,
    IpLiteral,
    PrivateAddress,
    SniMismatch,
    BadRequest,
    Unsupported,
    Limit,
    ResolveFailed,
    ConnectFailed,
    Timeout,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Rule => "rule",
            Reason::NotAllowed => "not_allowed",
            Reason::Denied => "denied",
            Reason::PortNotAllowed => "port_not_allowed",
            Reason::IpLiteral => "ip_literal",
            Reason::PrivateAddress => "private_address",
            Reason::SniMismatch => "sni_mismatch",
            Reason::BadRequest => "bad_request",
            Reason::Unsupported => "unsupported",
            Reason::Limit => "limit",
            Reason::ResolveFailed => "resolve_failed",
            Reason::ConnectFailed => "connect_failed",
            Reason::Timeout => "timeout",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The policy's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    Allow,
    Block,
    /// Report mode: only the allowlist refused it, so it goes through and is logged.
    WouldBlock,
}

/// Which list a rule is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleList {
    Allow,
    Deny,
}

/// The rule that decided, for the audit record and `policy test`: displayed as
/// `POLICY:allow[N]` / `POLICY:deny[N]`, N counting from 0 in that policy's file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RuleRef {
    pub policy: Arc<str>,
    pub list: RuleList,
    pub index: usize,
}

impl fmt::Display for RuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = match self.list {
            RuleList::Allow => "allow",
            RuleList::Deny => "deny",
        };
        write!(f, "{}:{list}[{}]", self.policy, self.index)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: Reason,
    pub rule: Option<RuleRef>,
}

/// `enforce` (default) or `report`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Enforce,
    Report,
}

/// Ceilings for runs under a policy. `None` = the policy sets no ceiling.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    pub timeout: Option<Duration>,
    pub memory: Option<u64>,
    pub cpus: Option<f64>,
    pub pids: Option<u64>,
    pub tmp: Option<u64>,
    pub output: Option<u64>,
}
