//! [`PolicySet`]: merged policies, indexed so a decision costs a handful of hash lookups.
//!
//! Every exact name and every wildcard suffix is a key of one `HashMap`. To judge
//! `a.b.example.com` the set looks up the name itself (exact rules) and then each proper
//! suffix `b.example.com`, `example.com`, `com` (wildcard rules): at most one lookup per
//! label, whatever the number of rules. Two bitmasks record how many labels the keys have,
//! so a suffix whose label count no key has is not even hashed (a 9-label name under a policy
//! whose wildcards all have 3-label suffixes costs two lookups). The hash is `rustc-hash`'s
//! FxHash, fast on short strings, rather than the keyed SipHash: keys come from the policy,
//! and lookups never insert, so a client cannot degrade the table. `cidr` rules are few and
//! scanned.
//!
//! This file merges policies into the set; `lookup` answers the proxy's questions with it,
//! and `credentials` merges the policies' credentials and finds where they conflict.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxBuildHasher;

use super::block_index::BlockIndex;
use super::host_pattern::HostPattern;
use super::{
    Credential, Limits, Mode, Policy, PortSet, RequestRules, Rule, RuleList, RuleRef, RuleTarget,
    SniCheck, TlsSettings,
};
use crate::target::HostName;
use credentials::merge_credentials;

mod credentials;
mod lookup;

pub use credentials::{CredentialConflict, CredentialConflicts};
pub use lookup::Inspection;

/// A rule in the index: its ports, its global order (earlier policies and earlier rules
/// first; the lowest order wins among equals) and how the audit record names it.
#[derive(Debug)]
struct IndexedRule {
    order: u32,
    ports: PortSet,
    rule: RuleRef,
    /// `methods`/`paths`; unrestricted for most rules.
    request: RequestRules,
}

/// The rules keyed by one name or suffix.
#[derive(Debug, Default)]
struct NameRules {
    allow_exact: Vec<IndexedRule>,
    allow_wildcard: Vec<IndexedRule>,
    deny_exact: Vec<IndexedRule>,
    deny_wildcard: Vec<IndexedRule>,
}

/// One list's `cidr` rules, found by the address they hold.
type CidrIndex = BlockIndex<IndexedRule>;

/// Every exact name and wildcard suffix of the rules, with the rules it keys.
type NameMap = HashMap<Box<str>, NameRules, FxBuildHasher>;

/// Bit n set: some key has n labels (names have at most 127).
fn label_bit(labels: usize) -> u128 {
    if labels < 128 { 1u128 << labels } else { 0 }
}

fn label_count(name: &str) -> usize {
    name.bytes().filter(|&b| b == b'.').count() + 1
}

#[derive(Debug)]
struct Index {
    name: String,
    mode: Mode,
    limits: Limits,
    tls: TlsSettings,
    names: NameMap,
    /// Label counts of keys with exact rules / with wildcard rules.
    exact_labels: u128,
    wildcard_labels: u128,
    allow_cidrs: CidrIndex,
    deny_cidrs: CidrIndex,
    /// The policies as given, to describe a rule for `policy test`.
    policies: Vec<Policy>,
    /// One credential per (host, port): the first policy's, when several agree.
    credentials: HashMap<(String, u16), Credential>,
    /// Exact names inspected on some port (a credential or a restricting rule), sorted.
    inspected: Vec<HostName>,
    /// Credentials of different policies that disagree for one host and port.
    conflicts: Vec<CredentialConflict>,
}

/// Merged, indexed policies: what the proxy asks. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct PolicySet {
    index: Arc<Index>,
}

impl PolicySet {
    /// Union of allow rules, union of deny rules, strictest limits, report mode only if
    /// every policy is report, TLS ports union and strictest SNI check. Empty = deny all.
    ///
    /// Policies whose credentials for one host and port differ do not merge: the error
    /// names every such conflict.
    pub fn merge(policies: Vec<Policy>) -> Result<PolicySet, CredentialConflicts> {
        let set = PolicySet::build(policies);
        if set.index.conflicts.is_empty() {
            Ok(set)
        } else {
            Err(CredentialConflicts::new(set))
        }
    }

    /// The merged index, conflicts included.
    fn build(policies: Vec<Policy>) -> PolicySet {
        let name = if policies.is_empty() {
            "none".to_owned()
        } else {
            policies
                .iter()
                .map(|policy| policy.name())
                .collect::<Vec<_>>()
                .join("+")
        };
        let mode = if !policies.is_empty() && policies.iter().all(|p| p.mode == Mode::Report) {
            Mode::Report
        } else {
            Mode::Enforce
        };
        let limits = policies.iter().fold(Limits::default(), |acc, policy| {
            strictest(&acc, &policy.limits)
        });
        let tls = merge_tls(&policies);
        let mut names = NameMap::default();
        let mut exact_labels = 0u128;
        let mut wildcard_labels = 0u128;
        let mut allow_cidrs = CidrIndex::default();
        let mut deny_cidrs = CidrIndex::default();
        let mut order: u32 = 0;
        for policy in &policies {
            for (list, rules) in [
                (RuleList::Allow, &policy.allow),
                (RuleList::Deny, &policy.deny),
            ] {
                for (index, rule) in rules.iter().enumerate() {
                    let indexed = IndexedRule {
                        order,
                        ports: rule.ports.clone(),
                        request: rule.request.clone(),
                        rule: RuleRef {
                            policy: Arc::clone(&policy.name),
                            list,
                            index,
                        },
                    };
                    order = order.saturating_add(1);
                    match &rule.target {
                        RuleTarget::Host(pattern) => {
                            let (key, exact) = match pattern {
                                HostPattern::Exact(name) => (name, true),
                                HostPattern::Wildcard(suffix) => (suffix, false),
                            };
                            if exact {
                                exact_labels |= label_bit(label_count(key));
                            } else {
                                wildcard_labels |= label_bit(label_count(key));
                            }
                            let entry = names.entry(Box::from(key.as_str())).or_default();
                            let bucket = match (list, exact) {
                                (RuleList::Allow, true) => &mut entry.allow_exact,
                                (RuleList::Allow, false) => &mut entry.allow_wildcard,
                                (RuleList::Deny, true) => &mut entry.deny_exact,
                                (RuleList::Deny, false) => &mut entry.deny_wildcard,
                            };
                            bucket.push(indexed);
                        }
                        RuleTarget::Cidr(net) => match list {
                            RuleList::Allow => allow_cidrs.push(*net, indexed),
                            RuleList::Deny => deny_cidrs.push(*net, indexed),
                        },
                    }
                }
            }
        }
        names.shrink_to_fit();
        let credentials = merge_credentials(&policies);
        let mut inspected: Vec<HostName> = Vec::new();
        for policy in &policies {
            inspected.extend(policy.credentials.iter().map(|c| c.host.clone()));
            for rule in &policy.allow {
                if let (RuleTarget::Host(HostPattern::Exact(name)), true) =
                    (&rule.target, rule.request.restricts())
                    && let Ok(name) = HostName::parse(name)
                {
                    inspected.push(name);
                }
            }
        }
        inspected.sort();
        inspected.dedup();
        PolicySet {
            index: Arc::new(Index {
                name,
                mode,
                limits,
                tls,
                names,
                exact_labels,
                wildcard_labels,
                allow_cidrs,
                deny_cidrs,
                policies,
                credentials: credentials.by_target,
                inspected,
                conflicts: credentials.conflicts,
            }),
        }
    }

    /// Every port some allow rule names for a host (`cidr` rules not counted), sorted and
    /// without repeats: where a sandbox needs doors for programs that ignore the proxy
    /// variables. A rule without `ports:` counts with its default, 443.
    pub fn host_ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .index
            .policies
            .iter()
            .flat_map(|policy| &policy.allow)
            .filter(|rule| matches!(rule.target, RuleTarget::Host(_)))
            .flat_map(|rule| match &rule.ports {
                PortSet::List(ports) => ports.clone(),
                PortSet::Any => Vec::new(),
            })
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// Exact names whose requests the proxy reads (on some port): what the run CA may sign.
    pub fn inspected_hosts(&self) -> &[HostName] {
        &self.index.inspected
    }

    /// Every credential of the set, one per host and port, in no particular order.
    pub fn credentials(&self) -> impl Iterator<Item = &Credential> {
        self.index.credentials.values()
    }

    /// Credentials of merged policies that disagree: empty but for a set taken past its
    /// conflicts ([`CredentialConflicts::into_set_refused_by_proxy`]), which a proxy refuses.
    pub fn credential_conflicts(&self) -> &[CredentialConflict] {
        &self.index.conflicts
    }

    /// Names joined with `+` (e.g. `openai-agent+cli`): the audit record's `policy` field.
    pub fn name(&self) -> &str {
        &self.index.name
    }

    /// Report only when every policy in the set reports; enforce otherwise.
    pub fn mode(&self) -> Mode {
        self.index.mode
    }

    /// The strictest of the set's limits, ceiling by ceiling.
    pub fn limits(&self) -> &Limits {
        &self.index.limits
    }

    /// The set's `tls:` settings: the union of its TLS ports, strict unless every policy is off.
    pub fn tls(&self) -> &TlsSettings {
        &self.index.tls
    }

    /// The rule as written, e.g. `host: api.openai.com, ports: [443]`, for `policy test`
    /// and messages. None for a rule not in this set.
    pub fn describe_rule(&self, rule: &RuleRef) -> Option<String> {
        let policy = self
            .index
            .policies
            .iter()
            .find(|policy| policy.name == rule.policy)?;
        let rules = match rule.list {
            RuleList::Allow => &policy.allow,
            RuleList::Deny => &policy.deny,
        };
        rules.get(rule.index).map(Rule::to_string)
    }
}

impl From<Policy> for PolicySet {
    /// One policy alone: it never conflicts with itself, since a policy gives each host and
    /// port at most one credential.
    fn from(policy: Policy) -> PolicySet {
        PolicySet::build(vec![policy])
    }
}

/// Each limit: the smaller of the two where both are set; the runtimes both allow.
fn strictest(a: &Limits, b: &Limits) -> Limits {
    fn min<T: PartialOrd + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
        match (a, b) {
            (Some(x), Some(y)) => Some(if y < x { y } else { x }),
            (x, None) => x,
            (None, y) => y,
        }
    }
    Limits {
        timeout: min(a.timeout, b.timeout),
        memory: min(a.memory, b.memory),
        cpus: min(a.cpus, b.cpus),
        pids: min(a.pids, b.pids),
        tmp: min(a.tmp, b.tmp),
        output: min(a.output, b.output),
        runtime: match (&a.runtime, &b.runtime) {
            (Some(x), Some(y)) => Some(x.iter().filter(|name| y.contains(name)).cloned().collect()),
            (x, None) => x.clone(),
            (None, y) => y.clone(),
        },
    }
}

fn merge_tls(policies: &[Policy]) -> TlsSettings {
    if policies.is_empty() {
        return TlsSettings::default();
    }
    let mut ports: Vec<u16> = policies
        .iter()
        .flat_map(|policy| policy.tls.ports.iter().copied())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    let sni = if policies
        .iter()
        .all(|policy| policy.tls.sni == SniCheck::Off)
    {
        SniCheck::Off
    } else {
        SniCheck::Strict
    };
    TlsSettings { ports, sni }
}
