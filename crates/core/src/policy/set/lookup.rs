//! Looking things up in a [`PolicySet`]: the verdict on a target and port, on a resolved
//! address, on a name for the DNS responder and on one inspected request, and whether a
//! target is inspected. Every answer walks the name index (the name, then each proper
//! suffix) or the `cidr` blocks; nothing here changes the set.

use std::net::IpAddr;

use ipnet::IpNet;

use super::super::request::check_request_path;
use super::super::{Credential, Decision, Mode, PortSet, Reason, RuleRef, SniCheck, Verdict};
use super::{CidrIndex, IndexedRule, NameRules, PolicySet, label_bit, label_count};
use crate::floor;
use crate::target::{HostName, Target};

/// Why the proxy reads an inspected target's requests in clear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inspection<'a> {
    /// The credential added to every request, if any.
    pub credential: Option<&'a Credential>,
    /// Some allow rule for this host and port has `methods` or `paths`.
    pub restricted: bool,
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
