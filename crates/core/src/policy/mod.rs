//! The policy engine: YAML in, [`Decision`] out. Pure: no I/O, no async, no clock.
//!
//! The schema is `docs/src/reference/policy.md`. Several policies (and `--allow` flags, which
//! become a policy named `cli`) merge into one [`PolicySet`]: union of allow rules, union of
//! deny rules, strictest limits. The proxy only ever asks the set.
//!
//! "Pure" has one exception: [`Policy::load`] reads the file (bounded) and hands the text
//! to [`Policy::from_yaml`].
//!
//! # Layout
//!
//! - `parse`: YAML → [`Policy`] with serde-saphyr under a tight budget, one file per section
//!   (`rules` for `allow:`/`deny:`, `limits`, `tls`, `credentials` with every credential
//!   check).
//! - `credential`: [`Credential`], a validated `credentials:` entry.
//! - `request`: `methods:`/`paths:` of a rule and the path syntax of a request.
//! - `host_pattern`: what a `host:` may be (exact or `*.suffix`), public-suffix and
//!   shared-hosting checks.
//! - `shadow`: warnings for rules that cannot change a decision.
//! - `flags`: `--allow HOST[:PORT]` → a policy named `cli`.
//! - `set`: [`PolicySet`], the merged, suffix-indexed matcher: merging in `set` (credential
//!   conflicts in `set::credentials`), decisions in `set::lookup`.
//! - `diagnostic`: `FILE:LINE:COL: error: message`.
//! - `within`: `policy check --within UPPER`: allow rules that reach beyond an upper policy.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

mod block_index;
mod credential;
mod diagnostic;
mod flags;
mod host_pattern;
mod parse;
mod request;
mod set;
mod shadow;
#[cfg(test)]
mod tests;
mod within;

pub use credential::{Credential, SECRET_PLACEHOLDER};
pub use diagnostic::{Diagnostic, PolicyError, Severity};
pub use host_pattern::{
    CheckedPattern, HostPattern, PatternUse, SHARED_HOSTING, parse_host_pattern, registrable_domain,
};
pub use parse::{MAX_POLICY_BYTES, check_secret_name};
pub(crate) use request::RequestRules;
pub use request::split_path;
pub use set::{CredentialConflict, CredentialConflicts, Inspection, PolicySet};
pub use within::check_within;

/// Why an attempt ended the way it did: the stable reason vocabulary
/// (`docs/src/reference/reasons.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// Allowed by a rule.
    Rule,
    /// The host is not on the allowlist.
    NotAllowed,
    /// A deny rule matches.
    Denied,
    /// The host is allowed, but not on this port.
    PortNotAllowed,
    /// An IP address was asked for and no `cidr` rule allows it.
    IpLiteral,
    /// The address is private, loopback or link-local (the floor).
    PrivateAddress,
    /// The TLS server name does not match the `CONNECT` host.
    SniMismatch,
    /// The request is malformed.
    BadRequest,
    /// The proxy does not support this kind of request.
    Unsupported,
    /// The proxy is at its connection limit.
    Limit,
    /// The host name could not be resolved.
    ResolveFailed,
    /// The upstream could not be reached.
    ConnectFailed,
    /// The upstream did not answer in time.
    Timeout,
    /// An inspected request whose method no rule for its host allows.
    MethodNotAllowed,
    /// An inspected request whose path no rule for its host allows.
    PathNotAllowed,
    /// A run's real secret sent anywhere, or a run placeholder sent anywhere but its
    /// credential's host.
    CredentialMisuse,
    /// The upstream of an inspected host presented a certificate that does not verify.
    UpstreamTls,
    /// An inspected upstream answered in an encoding the proxy cannot scrub of the run's
    /// secrets (compressed although `identity` was asked for).
    UpstreamEncoding,
    /// The run's audit budget is spent: the attempt would have gone ahead, but its record
    /// could not be written, so it was refused (`--on-audit-limit`).
    AuditLimit,
}

impl Reason {
    /// A sentence for the client, the same for every door that refuses with this reason.
    pub fn explain(self) -> &'static str {
        match self {
            Reason::Rule => "allowed by a rule",
            Reason::NotAllowed => "the host is not on the allowlist",
            Reason::Denied => "a deny rule matches",
            Reason::PortNotAllowed => "the host is allowed, but not on this port",
            Reason::IpLiteral => "IP addresses are refused unless a cidr rule allows them",
            Reason::PrivateAddress => "private, loopback and link-local addresses are refused",
            Reason::SniMismatch => "the TLS server name does not match the requested host",
            Reason::BadRequest => "the request is malformed",
            Reason::Unsupported => "the proxy does not support this kind of request",
            Reason::Limit => "the proxy is at its connection limit",
            Reason::ResolveFailed => "the host name could not be resolved",
            Reason::ConnectFailed => "the upstream could not be reached",
            Reason::Timeout => "the upstream did not answer in time",
            Reason::MethodNotAllowed => "the host is allowed, but not this request method",
            Reason::PathNotAllowed => "the host is allowed, but not this path",
            Reason::CredentialMisuse => {
                "the request carries a run secret, or a credential placeholder meant for another host"
            }
            Reason::UpstreamTls => "the upstream's TLS certificate does not verify",
            Reason::UpstreamEncoding => {
                "the upstream's answer is encoded (compressed), so it cannot be checked for the run's secrets"
            }
            Reason::AuditLimit => {
                "the run's audit records are spent, and nothing leaves without its record"
            }
        }
    }

    /// The reason's stable name, as audit records and `reasons.md` write it.
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
            Reason::MethodNotAllowed => "method_not_allowed",
            Reason::PathNotAllowed => "path_not_allowed",
            Reason::CredentialMisuse => "credential_misuse",
            Reason::UpstreamTls => "upstream_tls",
            Reason::UpstreamEncoding => "upstream_encoding",
            Reason::AuditLimit => "audit_limit",
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
#[non_exhaustive]
pub enum Verdict {
    /// Let through.
    Allow,
    /// Refused.
    Block,
    /// Report mode: only the allowlist refused it, so it goes through and is logged.
    WouldBlock,
}

impl Verdict {
    /// The decision an audit record gives this verdict (`allowed`, `blocked`,
    /// `would_block`), as `policy test` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allowed",
            Verdict::Block => "blocked",
            Verdict::WouldBlock => "would_block",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which list a rule is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RuleList {
    /// An `allow` rule.
    Allow,
    /// A `deny` rule.
    Deny,
}

/// The rule that decided, for the audit record and `policy test`: displayed as
/// `POLICY:allow[N]` / `POLICY:deny[N]`, N counting from 0 in that policy's file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RuleRef {
    /// The name of the policy holding the rule.
    pub policy: Arc<str>,
    /// The list the rule is in.
    pub list: RuleList,
    /// The rule's position in that list, from 0.
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

/// What the policies say of one attempt: let it through, refuse it, or (report mode) let it
/// through and record that it would have been refused; why; and the rule that decided.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Through, refused, or through only because the deciding policy only reports.
    pub verdict: Verdict,
    /// Why, as the audit record names it.
    pub reason: Reason,
    /// The rule that decided; `None` when no rule did (nothing matched, the floor, …).
    pub rule: Option<RuleRef>,
}

impl Decision {
    /// A decision of `verdict` for `reason`, by `rule` if a rule made it.
    pub fn new(verdict: Verdict, reason: Reason, rule: Option<RuleRef>) -> Decision {
        Decision {
            verdict,
            reason,
            rule,
        }
    }
}

/// `enforce` (default) or `report`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// Refuse what the policy does not allow.
    #[default]
    Enforce,
    /// Let everything through and record what would have been refused.
    Report,
}

/// Ceilings for runs under a policy. `None` = the policy sets no ceiling.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Limits {
    /// The longest a run may take.
    pub timeout: Option<Duration>,
    /// The most memory a run may use, in bytes.
    pub memory: Option<u64>,
    /// The most CPUs a run may use.
    pub cpus: Option<f64>,
    /// The most processes a run may hold at once.
    pub pids: Option<u64>,
    /// The largest the run's `/tmp` may grow, in bytes.
    pub tmp: Option<u64>,
    /// The most output a run may write, in bytes.
    pub output: Option<u64>,
    /// The OCI runtimes a run may use (`runtime: NAME`, as `--runtime` and the engine name
    /// them): one name per policy; merged policies keep the names all of them allow, so an
    /// empty list means no runtime satisfies them all.
    pub runtime: Option<Vec<String>>,
}

/// How the proxy checks the TLS ClientHello of a `CONNECT` tunnel on a TLS port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SniCheck {
    /// SNI must be present (when the CONNECT host is a name) and equal the CONNECT host;
    /// non-TLS bytes and ECH are refused.
    #[default]
    Strict,
    /// The ClientHello is not inspected.
    Off,
}

/// `tls:` section of a policy (extension of the schema): which CONNECT ports must carry TLS
/// whose SNI equals the CONNECT host, and how strictly. Defaults: ports `[443]`, Strict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    /// The `CONNECT` ports whose traffic must be TLS.
    pub ports: Vec<u16>,
    /// How strictly the ClientHello on those ports is checked.
    pub sni: SniCheck,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            ports: vec![443],
            sni: SniCheck::Strict,
        }
    }
}

/// Which ports a rule applies to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PortSet {
    /// Every port: a deny rule without `ports`.
    Any,
    /// These ports, sorted and without repeats.
    List(Vec<u16>),
}

impl PortSet {
    pub(crate) fn contains(&self, port: u16) -> bool {
        match self {
            PortSet::Any => true,
            PortSet::List(ports) => ports.contains(&port),
        }
    }

    /// True when every port in `self` is in `other`.
    pub(crate) fn is_subset_of(&self, other: &PortSet) -> bool {
        match (self, other) {
            (_, PortSet::Any) => true,
            (PortSet::Any, PortSet::List(_)) => false,
            (PortSet::List(mine), PortSet::List(theirs)) => {
                mine.iter().all(|port| theirs.contains(port))
            }
        }
    }
}

impl fmt::Display for PortSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSet::Any => f.write_str("any"),
            PortSet::List(ports) => {
                f.write_str("[")?;
                for (index, port) in ports.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{port}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// What a rule matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RuleTarget {
    Host(HostPattern),
    Cidr(IpNet),
}

/// One allow or deny rule, with where it was written (for shadowing warnings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) target: RuleTarget,
    pub(crate) ports: PortSet,
    /// `methods`/`paths` (allow rules on exact hosts only).
    pub(crate) request: RequestRules,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl fmt::Display for Rule {
    /// The rule as a reviewer would write it: `host: api.x.com, ports: [443]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            RuleTarget::Host(pattern) => write!(f, "host: {pattern}")?,
            RuleTarget::Cidr(net) => write!(f, "cidr: {net}")?,
        }
        write!(f, ", ports: {}", self.ports)?;
        if let Some(methods) = &self.request.methods {
            write!(f, ", methods: [{}]", methods.join(", "))?;
        }
        if let Some(paths) = &self.request.paths {
            let paths: Vec<String> = paths.iter().map(ToString::to_string).collect();
            write!(f, ", paths: [{}]", paths.join(", "))?;
        }
        Ok(())
    }
}

/// One validated policy file (or the `--allow` flags). Combine policies with
/// [`PolicySet::merge`]; only a set decides.
#[derive(Clone, Debug)]
pub struct Policy {
    pub(crate) name: Arc<str>,
    pub(crate) mode: Mode,
    pub(crate) limits: Limits,
    pub(crate) tls: TlsSettings,
    pub(crate) allow: Vec<Rule>,
    pub(crate) deny: Vec<Rule>,
    pub(crate) credentials: Vec<Credential>,
}

impl Policy {
    /// The `host:` patterns of the allow and deny rules, in file order.
    pub fn host_patterns(&self) -> Vec<HostPattern> {
        self.allow
            .iter()
            .chain(&self.deny)
            .filter_map(|rule| match &rule.target {
                RuleTarget::Host(pattern) => Some(pattern.clone()),
                RuleTarget::Cidr(_) => None,
            })
            .collect()
    }

    /// The policy's name (its `name:`, or its file's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ceilings the policy sets for a run.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether the policy enforces or only reports.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The policy's `tls:` settings.
    pub fn tls(&self) -> &TlsSettings {
        &self.tls
    }

    /// Number of allow rules (for `policy check`'s summary line).
    pub fn allow_count(&self) -> usize {
        self.allow.len()
    }

    /// Number of deny rules.
    pub fn deny_count(&self) -> usize {
        self.deny.len()
    }

    /// The `credentials:` entries.
    pub fn credentials(&self) -> &[Credential] {
        &self.credentials
    }
}
