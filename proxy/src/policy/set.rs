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

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use rustc_hash::FxBuildHasher;

use super::block_index::BlockIndex;
use super::host_pattern::HostPattern;
use super::request::check_request_path;
use super::{
    Credential, Decision, Limits, Mode, Policy, PortSet, Reason, RequestRules, Rule, RuleList,
    RuleRef, RuleTarget, SniCheck, TlsSettings, Verdict,
};
use crate::floor;
use crate::target::{HostName, Target};

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

/// The first (lowest order) rule of `rules` whose block holds `addr` and that `accepts`.
fn first_holding(
    rules: &CidrIndex,
    addr: IpAddr,
    accepts: impl Fn(&IndexedRule) -> bool,
) -> Option<&IndexedRule> {
    rules
        .containing(IpNet::from(addr))
        .filter(|rule| accepts(rule))
        .min_by_key(|rule| rule.order)
}

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
    conflicts: Vec<String>,
}

/// Why the proxy reads an inspected target's requests in clear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inspection<'a> {
    /// The credential added to every request, if any.
    pub credential: Option<&'a Credential>,
    /// Some allow rule for this host and port has `methods` or `paths`.
    pub restricted: bool,
}

/// Merged, indexed policies: what the proxy asks. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct PolicySet {
    index: Arc<Index>,
}

/// The best matching rule seen so far in one list.
#[derive(Default)]
struct Best<'a> {
    /// Matches name and port: (exactness rank, order).
    hit: Option<(&'a IndexedRule, u8)>,
    /// Matches the name but not the port (allow list only).
    port_miss: Option<&'a IndexedRule>,
}

impl<'a> Best<'a> {
    /// Best rule regardless of port (for DNS: a name allowed on some port).
    fn consider_any_port(&mut self, rules: &'a [IndexedRule], rank: u8) {
        for rule in rules {
            let better = match self.hit {
                None => true,
                Some((best, best_rank)) => {
                    rank < best_rank || (rank == best_rank && rule.order < best.order)
                }
            };
            if better {
                self.hit = Some((rule, rank));
            }
        }
    }

    fn consider(&mut self, rules: &'a [IndexedRule], port: Option<u16>, rank: u8) {
        for rule in rules {
            let port_ok = match port {
                Some(port) => rule.ports.contains(port),
                None => rule.ports == PortSet::Any,
            };
            if port_ok {
                let better = match self.hit {
                    None => true,
                    Some((best, best_rank)) => {
                        rank < best_rank || (rank == best_rank && rule.order < best.order)
                    }
                };
                if better {
                    self.hit = Some((rule, rank));
                }
            } else if self.port_miss.is_none_or(|miss| rule.order < miss.order) {
                self.port_miss = Some(rule);
            }
        }
    }
}

impl PolicySet {
    /// Union of allow rules, union of deny rules, strictest limits, report mode only if
    /// every policy is report, TLS ports union and strictest SNI check. Empty = deny all.
    pub fn merge(policies: Vec<Policy>) -> PolicySet {
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
        let mut credentials: HashMap<(String, u16), Credential> = HashMap::new();
        let mut conflicts = Vec::new();
        let mut inspected: Vec<HostName> = Vec::new();
        for policy in &policies {
            for credential in &policy.credentials {
                let key = (credential.host.as_str().to_owned(), credential.port);
                match credentials.get(&key) {
                    Some(first)
                        if (&first.secret, &first.header, &first.value)
                            != (&credential.secret, &credential.header, &credential.value) =>
                    {
                        conflicts.push(format!(
                            "policy {}: the credential for {}:{} differs from another policy's ({} vs {})",
                            policy.name, credential.host, credential.port, credential.secret, first.secret
                        ));
                    }
                    Some(_) => {}
                    None => {
                        credentials.insert(key, credential.clone());
                    }
                }
                inspected.push(credential.host.clone());
            }
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
                credentials,
                inspected,
                conflicts,
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

    /// Credentials of merged policies that disagree (a run refuses to start with any).
    pub fn credential_conflicts(&self) -> &[String] {
        &self.index.conflicts
    }

    /// Whether requests to `target:port` are read in clear, and which credential they get.
    /// None: the target is tunnelled untouched. IP targets are never inspected.
    pub fn inspection(&self, target: &Target, port: u16) -> Option<Inspection<'_>> {
        let Target::Name(name) = target else {
            return None;
        };
        if self.index.inspected.binary_search(name).is_err() {
            return None;
        }
        let credential = self
            .index
            .credentials
            .get(&(name.as_str().to_owned(), port));
        let restricted = self.index.names.get(name.as_str()).is_some_and(|rules| {
            rules
                .allow_exact
                .iter()
                .any(|rule| rule.ports.contains(port) && rule.request.restricts())
        });
        (credential.is_some() || restricted).then_some(Inspection {
            credential,
            restricted,
        })
    }

    /// The verdict on one request to an allowed `target:port`: its `path` (without the
    /// query) must have one reading, then some allow rule for the target must admit the
    /// method and path. Exact-host rules decide when there are any (a wildcard rule never
    /// widens what an exact rule narrows). Call after [`PolicySet::decide`] allowed the
    /// target; returns that kind of decision, with the admitting rule.
    pub fn decide_request(&self, target: &Target, port: u16, method: &str, path: &str) -> Decision {
        if check_request_path(path).is_err() {
            return block(Reason::BadRequest, None);
        }
        let Target::Name(name) = target else {
            return self.decide(target, port);
        };
        let mut exact: Vec<&IndexedRule> = Vec::new();
        let mut wildcard: Vec<&IndexedRule> = Vec::new();
        self.walk(name.as_str(), |rules, is_exact| {
            let (list, into) = if is_exact {
                (&rules.allow_exact, &mut exact)
            } else {
                (&rules.allow_wildcard, &mut wildcard)
            };
            into.extend(list.iter().filter(|rule| rule.ports.contains(port)));
        });
        let mut candidates = if exact.is_empty() { wildcard } else { exact };
        if candidates.is_empty() {
            return self.decide(target, port);
        }
        candidates.sort_by_key(|rule| rule.order);
        if let Some(open) = candidates.iter().find(|rule| !rule.request.restricts()) {
            return allow(&open.rule);
        }
        if let Some(admitting) = candidates
            .iter()
            .find(|rule| rule.request.admits_method(method) && rule.request.admits_path(path))
        {
            return allow(&admitting.rule);
        }
        match candidates
            .iter()
            .find(|rule| rule.request.admits_method(method))
        {
            Some(rule) => self.refuse(Reason::PathNotAllowed, Some(&rule.rule)),
            None => self.refuse(Reason::MethodNotAllowed, Some(&candidates[0].rule)),
        }
    }

    /// Names joined with `+` (e.g. `openai-agent+cli`): the audit record's `policy` field.
    pub fn name(&self) -> &str {
        &self.index.name
    }

    pub fn mode(&self) -> Mode {
        self.index.mode
    }

    pub fn limits(&self) -> &Limits {
        &self.index.limits
    }

    pub fn tls(&self) -> &TlsSettings {
        &self.index.tls
    }

    /// Whether plain HTTP to `port` is refused as not TLS (`sni_mismatch`): the strict SNI
    /// check reserves `tls.ports` for TLS. The proxy's doors and `policy test` both ask this.
    pub fn reserves_for_tls(&self, port: u16) -> bool {
        self.index.tls.sni == SniCheck::Strict && self.index.tls.ports.contains(&port)
    }

    /// The port a plain request to `target:port` goes to over TLS the proxy originates,
    /// because a credential applies: the credential's own port, or 443 for `http://HOST/`
    /// (port 80) when the credential is on 443. A credential only ever travels over TLS.
    pub fn credential_tls_port(&self, target: &Target, port: u16) -> Option<u16> {
        let credential_on = |port: u16| {
            self.inspection(target, port)
                .is_some_and(|inspection| inspection.credential.is_some())
        };
        if credential_on(port) {
            Some(port)
        } else if port == 80 && credential_on(443) {
            Some(443)
        } else {
            None
        }
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

    /// The policy's verdict on target+port, before any resolution. Order: IP literal →
    /// deny rules → allow rules and port. IP targets: allowed only by a `cidr` allow rule
    /// (else `ip_literal`); deny cidr beats it. Report mode turns allowlist refusals
    /// (not_allowed, port_not_allowed, ip_literal) into WouldBlock; deny stays Block.
    pub fn decide(&self, target: &Target, port: u16) -> Decision {
        match target {
            Target::Ip(addr) => self.decide_ip(canonical(*addr), port),
            Target::Name(name) => self.decide_name_port(name.as_str(), port),
        }
    }

    /// After resolving an allowed name: may we connect to this exact address? deny cidr →
    /// Block/denied; private floor → Block/private_address unless a `cidr` allow rule
    /// covering it (and the port) exempts it; else Allow. The floor holds in report mode.
    /// An Allow names the covering `cidr` allow rule if there is one, else no rule.
    pub fn check_address(&self, addr: IpAddr, port: u16) -> Decision {
        self.check_address_against(&floor::Floor::default(), addr, port)
    }

    /// [`PolicySet::check_address`] with `floor` in place of the private ranges alone (the
    /// proxy's floor, with its `--floor-extra` ranges).
    pub fn check_address_against(&self, floor: &floor::Floor, addr: IpAddr, port: u16) -> Decision {
        let addr = canonical(addr);
        if let Some(deny) = find_deny_cidr(&self.index.deny_cidrs, addr, port) {
            return block(Reason::Denied, Some(&deny.rule));
        }
        let exempting = find_cidr(&self.index.allow_cidrs, addr, port);
        if floor.holds(addr) && exempting.is_none() {
            return block(Reason::PrivateAddress, None);
        }
        Decision {
            verdict: Verdict::Allow,
            reason: Reason::Rule,
            rule: exempting.map(|rule| rule.rule.clone()),
        }
    }

    /// For the DNS responder: is the name allowed on any port (and not denied)?
    pub fn decide_name(&self, name: &HostName) -> Decision {
        // One walk without allocating: the common case (no port-specific deny rule on this
        // name) is decided here.
        let mut deny_all = Best::default();
        let mut best_allow = Best::default();
        let mut port_specific_deny = false;
        self.walk(name.as_str(), |rules, exact| {
            let rank = u8::from(!exact);
            let (allow, deny) = if exact {
                (&rules.allow_exact, &rules.deny_exact)
            } else {
                (&rules.allow_wildcard, &rules.deny_wildcard)
            };
            deny_all.consider(deny, None, rank);
            port_specific_deny |= deny.iter().any(|rule| rule.ports != PortSet::Any);
            best_allow.consider_any_port(allow, rank);
        });
        if let Some((deny, _)) = deny_all.hit {
            return block(Reason::Denied, Some(&deny.rule));
        }
        match best_allow.hit {
            None => return self.refuse(Reason::NotAllowed, None),
            Some((rule, _)) if !port_specific_deny => return allow(&rule.rule),
            Some(_) => {}
        }
        let mut candidates: Vec<(&IndexedRule, u8)> = Vec::new();
        let mut denies: Vec<&IndexedRule> = Vec::new();
        self.walk(name.as_str(), |rules, exact| {
            let rank = u8::from(!exact);
            let (allow, deny) = if exact {
                (&rules.allow_exact, &rules.deny_exact)
            } else {
                (&rules.allow_wildcard, &rules.deny_wildcard)
            };
            candidates.extend(allow.iter().map(|rule| (rule, rank)));
            denies.extend(deny.iter());
        });
        // Allowed when some allow rule matches on a port no port-specific deny rule takes.
        candidates.sort_by_key(|(rule, rank)| (*rank, rule.order));
        let denied = |port: u16| denies.iter().find(|deny| deny.ports.contains(port));
        let mut first_denial = None;
        for (rule, _) in &candidates {
            let PortSet::List(ports) = &rule.ports else {
                return allow(&rule.rule);
            };
            for &port in ports {
                match denied(port) {
                    None => return allow(&rule.rule),
                    Some(deny) => {
                        first_denial.get_or_insert(*deny);
                    }
                }
            }
        }
        match first_denial {
            Some(deny) => block(Reason::Denied, Some(&deny.rule)),
            None => self.refuse(Reason::NotAllowed, None),
        }
    }

    fn decide_ip(&self, addr: IpAddr, port: u16) -> Decision {
        if let Some(deny) = find_deny_cidr(&self.index.deny_cidrs, addr, port) {
            return block(Reason::Denied, Some(&deny.rule));
        }
        if let Some(rule) = find_cidr(&self.index.allow_cidrs, addr, port) {
            return allow(&rule.rule);
        }
        let port_miss = first_holding(&self.index.allow_cidrs, addr, |_| true);
        match port_miss {
            Some(rule) => self.refuse(Reason::PortNotAllowed, Some(&rule.rule)),
            None => self.refuse(Reason::IpLiteral, None),
        }
    }

    fn decide_name_port(&self, name: &str, port: u16) -> Decision {
        let mut deny = Best::default();
        let mut allowed = Best::default();
        self.walk(name, |rules, exact| {
            let rank = u8::from(!exact);
            if exact {
                deny.consider(&rules.deny_exact, Some(port), rank);
                allowed.consider(&rules.allow_exact, Some(port), rank);
            } else {
                deny.consider(&rules.deny_wildcard, Some(port), rank);
                allowed.consider(&rules.allow_wildcard, Some(port), rank);
            }
        });
        if let Some((rule, _)) = deny.hit {
            return block(Reason::Denied, Some(&rule.rule));
        }
        if let Some((rule, _)) = allowed.hit {
            return allow(&rule.rule);
        }
        match allowed.port_miss {
            Some(rule) => self.refuse(Reason::PortNotAllowed, Some(&rule.rule)),
            None => self.refuse(Reason::NotAllowed, None),
        }
    }

    /// Calls `visit` with the rules keyed by `name` itself (exact = true) and then by each
    /// proper suffix of it (exact = false), longest first.
    fn walk<'a>(&'a self, name: &str, mut visit: impl FnMut(&'a NameRules, bool)) {
        let index = &*self.index;
        if index.names.is_empty() {
            return;
        }
        let mut labels = label_count(name);
        if index.exact_labels & label_bit(labels) != 0
            && let Some(rules) = index.names.get(name)
        {
            visit(rules, true);
        }
        let mut rest = name;
        while let Some(dot) = rest.find('.') {
            rest = &rest[dot + 1..];
            labels -= 1;
            if index.wildcard_labels & label_bit(labels) != 0
                && let Some(rules) = index.names.get(rest)
            {
                visit(rules, false);
            }
        }
    }

    /// An allowlist refusal: Block, or WouldBlock in report mode.
    fn refuse(&self, reason: Reason, rule: Option<&RuleRef>) -> Decision {
        let verdict = match self.index.mode {
            Mode::Enforce => Verdict::Block,
            Mode::Report => Verdict::WouldBlock,
        };
        Decision {
            verdict,
            reason,
            rule: rule.cloned(),
        }
    }
}

fn allow(rule: &RuleRef) -> Decision {
    Decision {
        verdict: Verdict::Allow,
        reason: Reason::Rule,
        rule: Some(rule.clone()),
    }
}

fn block(reason: Reason, rule: Option<&RuleRef>) -> Decision {
    Decision {
        verdict: Verdict::Block,
        reason,
        rule: rule.cloned(),
    }
}

/// The deny cidr rule refusing `addr`: matched on the address and, for IPv6 forms that
/// carry an IPv4 address (NAT64, 6to4, compatible, Teredo …), on that IPv4 address too —
/// a deny rule holds for every spelling of the address it names.
fn find_deny_cidr(rules: &CidrIndex, addr: IpAddr, port: u16) -> Option<&IndexedRule> {
    if rules.is_empty() {
        return None;
    }
    let direct = find_cidr(rules, addr, port);
    let embedded = match addr {
        IpAddr::V6(v6) => floor::embedded_ipv4_of(v6).and_then(|carried| {
            carried
                .iter()
                .filter_map(|&v4| find_cidr(rules, IpAddr::V4(v4), port))
                .min_by_key(|rule| rule.order)
        }),
        IpAddr::V4(_) => None,
    };
    match (direct, embedded) {
        (Some(a), Some(b)) => Some(if b.order < a.order { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The first (lowest order) cidr rule containing `addr` and taking `port`.
fn find_cidr(rules: &CidrIndex, addr: IpAddr, port: u16) -> Option<&IndexedRule> {
    first_holding(rules, addr, |rule| rule.ports.contains(port))
}

/// `::ffff:a.b.c.d` is matched as `a.b.c.d`, so IPv4 `cidr` rules cover it.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        IpAddr::V4(_) => addr,
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
