//! `policy check --within UPPER`: is everything a policy allows also allowed by an upper
//! policy (an organisation's ceiling)? Each allow rule that reaches beyond UPPER is an error
//! at that rule's line and column.
//!
//! An allow rule (a host pattern or a CIDR, and its ports) is within UPPER when, on each of
//! its ports:
//! - UPPER allows all of it: an exact name is covered by an UPPER exact or wildcard rule, a
//!   wildcard only by an UPPER wildcard over the same or a parent suffix (no set of exact
//!   names can cover a wildcard), a CIDR by UPPER CIDR rules (together: two /25s cover a
//!   /24);
//! - the UPPER rule the engine would pick admits all its requests: an UPPER exact rule
//!   restricted to some `methods:`/`paths:` decides that name's requests even where an
//!   UPPER wildcard also covers it, so it covers only a rule restricted to a subset — and a
//!   wildcard over that name only if the checked policy narrows the name itself;
//! - and UPPER denies none of it, unless the checked policy denies that part itself (a
//!   child that repeats the ceiling's `deny: gist.github.com` under `*.github.com` is within).
//!
//! Host rules and CIDR rules are separate worlds here, as in the engine: host rules match
//! names, CIDR rules match IP-literal targets. UPPER's deny CIDRs also refuse names that
//! resolve into them at connect time, which no static check can know; they are compared
//! with the checked policy's CIDR rules only — including the IPv4 addresses an allowed IPv6
//! block carries (NAT64, 6to4, Teredo …), which the engine's deny CIDRs judge as IPv4.
//!
//! Beyond rules: a policy that lets runs use a runtime UPPER's `limits: {runtime: …}` does
//! not name (or any runtime) would take away the wall UPPER requires; a policy in
//! `mode: report` lets through what its allowlist refuses, and
//! `tls: {sni: off}` or a `tls.ports` list without a port UPPER lists stops checking that a
//! tunnel there carries TLS for the name allowed; under an UPPER that does neither, each is
//! an error (at line 1: the policy does not keep their position).

use std::fmt;

use ipnet::IpNet;

use super::host_pattern::HostPattern;
use super::request::{PathPattern, PathTail};
use super::{Diagnostic, Mode, Policy, PortSet, RequestRules, Rule, RuleTarget, SniCheck};
use crate::floor::{CarriedIpv4, ipv4_carried_by};
use index::RuleIndex;

mod index;

/// Every way `policy` reaches beyond `upper`, as error diagnostics in `file` (the checked
/// policy's name as shown), in rule order. `upper_file` names UPPER in the messages.
pub fn check_within(
    file: &str,
    policy: &Policy,
    upper_file: &str,
    upper: &Policy,
) -> Vec<Diagnostic> {
    let mut errors: Vec<Diagnostic> = loosened_settings(policy, upper, upper_file)
        .into_iter()
        .map(|message| Diagnostic::error(file, 1, 1, message))
        .collect();
    let lists = Lists::new(policy, upper, upper_file);
    for (index, rule) in policy.allow.iter().enumerate() {
        for message in rule_gaps(&lists, rule) {
            errors.push(Diagnostic::error(
                file,
                rule.line,
                rule.column,
                format!("allow[{index}] ({rule}) is not within {upper_file}: {message}"),
            ));
        }
    }
    errors
}

/// Both policies' rule lists, each indexed once: a rule's check looks up the rules that
/// may bear on it rather than scanning every rule of both policies (quadratic: 43,000 rules
/// checked within an UPPER as long took a minute of CPU).
struct Lists<'a> {
    policy: &'a Policy,
    upper: &'a Policy,
    upper_file: &'a str,
    upper_allow: RuleIndex<'a>,
    upper_deny: RuleIndex<'a>,
    own_allow: RuleIndex<'a>,
    own_deny: RuleIndex<'a>,
}

impl<'a> Lists<'a> {
    fn new(policy: &'a Policy, upper: &'a Policy, upper_file: &'a str) -> Self {
        Lists {
            policy,
            upper,
            upper_file,
            upper_allow: RuleIndex::new(&upper.allow),
            upper_deny: RuleIndex::new(&upper.deny),
            own_allow: RuleIndex::new(&policy.allow),
            own_deny: RuleIndex::new(&policy.deny),
        }
    }

    /// UPPER's allow rule `index` holds on `port`.
    fn upper_allows_on(&self, index: usize, port: u16) -> bool {
        self.upper.allow[index].ports.contains(port)
    }
}

/// Settings that loosen every rule at once: report mode, no SNI check, or fewer ports
/// where TLS with the allowed name is required (plain bytes or another name pass there, as
/// with `sni: off`).
fn loosened_settings(policy: &Policy, upper: &Policy, upper_file: &str) -> Vec<String> {
    let mut messages = Vec::new();
    if policy.mode == Mode::Report && upper.mode == Mode::Enforce {
        messages.push(format!(
            "`mode: report` lets through what the allowlist refuses; {upper_file} enforces its allowlist"
        ));
    }
    if let Some(required) = &upper.limits.runtime {
        let allowed = match &policy.limits.runtime {
            Some(own) => own.iter().all(|name| required.contains(name)),
            None => false,
        };
        if !allowed {
            let own = match &policy.limits.runtime {
                Some(own) => format!("`limits: {{runtime: {}}}` lets runs use", own.join(", ")),
                None => "no `limits: {runtime: …}` lets runs use any runtime, such as".into(),
            };
            messages.push(format!(
                "{own} a runtime {upper_file} does not allow; it requires `runtime: {}`",
                required.join(", ")
            ));
        }
    }
    if upper.tls.sni == SniCheck::Off {
        return messages;
    }
    if policy.tls.sni == SniCheck::Off {
        messages.push(format!(
            "`tls: {{sni: off}}` lets a tunnel to an allowed name carry TLS for any other name; {upper_file} checks SNI"
        ));
    }
    let dropped: Vec<u16> = upper
        .tls
        .ports
        .iter()
        .copied()
        .filter(|port| !policy.tls.ports.contains(port))
        .collect();
    if !dropped.is_empty() {
        messages.push(format!(
            "`tls: {{ports: {}}}` leaves out port{} {}, where {upper_file} requires TLS whose SNI is the allowed name: a tunnel there could carry plain traffic or TLS for any other name",
            PortSet::List(policy.tls.ports.clone()),
            plural_s(dropped.len()),
            join(&dropped)
        ));
    }
    messages
}

/// Why `rule` is not within `upper`, one message per way: ports no UPPER rule covers,
/// requests an UPPER exact rule narrows, parts UPPER denies.
fn rule_gaps(lists: &Lists, rule: &Rule) -> Vec<String> {
    let PortSet::List(ports) = &rule.ports else {
        return Vec::new();
    };
    let mut uncovered = Vec::new();
    let mut narrowed: Vec<(Narrowing, Vec<u16>)> = Vec::new();
    for &port in ports {
        match port_gap(lists, rule, port) {
            None => {}
            Some(Gap::Uncovered) => uncovered.push(port),
            Some(Gap::Narrowed(narrowing)) => {
                match narrowed.iter_mut().find(|(seen, _)| *seen == narrowing) {
                    Some((_, on)) => on.push(port),
                    None => narrowed.push((narrowing, vec![port])),
                }
            }
        }
    }
    let mut messages = Vec::new();
    if !uncovered.is_empty() {
        let what = if uncovered.len() == ports.len() {
            "it".to_owned()
        } else {
            format!("port{} {}", plural_s(uncovered.len()), join(&uncovered))
        };
        messages.push(format!("no allow rule there covers {what}"));
    }
    for (narrowing, on) in narrowed {
        let upper_rule = &lists.upper.allow[narrowing.upper_index];
        messages.push(format!(
            "on port{} {} the engine judges requests to {} by the exact rule allow[{}] there ({upper_rule}), which admits fewer of them",
            plural_s(on.len()),
            join(&on),
            narrowing.name,
            narrowing.upper_index,
        ));
    }
    messages.extend(denied_part(lists, rule));
    messages
}

fn plural_s(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn join(ports: &[u16]) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// How UPPER's allow rules fall short of a rule on one port.
enum Gap {
    /// No UPPER allow rule (or union of CIDR rules) covers the target on the port.
    Uncovered,
    /// A covering rule exists, but the rule the engine would pick admits fewer requests.
    Narrowed(Narrowing),
}

/// An UPPER exact rule that decides a name's requests and admits fewer than the checked
/// rule: the engine lets no wildcard widen what an exact rule narrows (see
/// `PolicySet::decide_request`), so a covering wildcard does not help.
#[derive(PartialEq)]
struct Narrowing {
    name: String,
    upper_index: usize,
}

/// Where UPPER falls short of `rule` on `port`; None when it allows all of it there.
fn port_gap(lists: &Lists, rule: &Rule, port: u16) -> Option<Gap> {
    match &rule.target {
        RuleTarget::Host(pattern) => host_gap(lists, pattern, &rule.request, port),
        RuleTarget::Cidr(net) => (!cidr_covered(lists, *net, port)).then_some(Gap::Uncovered),
    }
}

/// `net` lies inside the union of UPPER's cidr allow rules on `port`.
fn cidr_covered(lists: &Lists, net: IpNet, port: u16) -> bool {
    let index = &lists.upper_allow;
    covered_by_union(
        net,
        &|net| {
            index
                .cidr_containing(net)
                .any(|at| lists.upper_allows_on(at, port))
        },
        &|net| {
            index
                .cidr_inside(net)
                .any(|at| lists.upper_allows_on(at, port))
        },
    )
}

/// A host pattern needs an UPPER rule over it on the port, and every name UPPER narrows
/// with an exact rule must stay narrowed: the pattern's own name if it is exact, the names
/// under it if it is a wildcard (except those the checked policy decides by its own exact
/// rule, which is checked in turn).
fn host_gap(
    lists: &Lists,
    pattern: &HostPattern,
    request: &RequestRules,
    port: u16,
) -> Option<Gap> {
    let upper = &lists.upper.allow;
    let covered = lists
        .upper_allow
        .hosts_covering(pattern)
        .into_iter()
        .filter(|&at| lists.upper_allows_on(at, port))
        .any(|at| {
            matches!(&upper[at].target, RuleTarget::Host(their_pattern) if pattern.is_covered_by(their_pattern))
        });
    if !covered {
        return Some(Gap::Uncovered);
    }
    let names: Vec<&str> = match pattern {
        HostPattern::Exact(name) => vec![name.as_str()],
        HostPattern::Wildcard(suffix) => lists
            .upper_allow
            .hosts_under(suffix)
            .iter()
            .filter(|&&at| lists.upper_allows_on(at, port))
            .filter_map(|&at| exact_name(&upper[at]))
            .filter(|name| HostPattern::Exact((*name).to_owned()).is_covered_by(pattern))
            .filter(|name| !has_exact_rule(lists, name, port))
            .collect(),
    };
    names
        .into_iter()
        .find_map(|name| narrowing(lists, name, request, port))
        .map(Gap::Narrowed)
}

fn exact_name(rule: &Rule) -> Option<&str> {
    match &rule.target {
        RuleTarget::Host(HostPattern::Exact(name)) => Some(name),
        _ => None,
    }
}

/// The checked policy has an exact allow rule for `name` on `port`.
fn has_exact_rule(lists: &Lists, name: &str, port: u16) -> bool {
    lists
        .own_allow
        .exact(name)
        .iter()
        .any(|&at| lists.policy.allow[at].ports.contains(port))
}

/// UPPER's exact rules for `name` on `port` decide its requests when there are any; Some
/// when none of them admits all of `request`.
fn narrowing(lists: &Lists, name: &str, request: &RequestRules, port: u16) -> Option<Narrowing> {
    let mut deciding = lists
        .upper_allow
        .exact(name)
        .iter()
        .copied()
        .filter(|&at| lists.upper_allows_on(at, port));
    let first = deciding.clone().next()?;
    if deciding.any(|at| requests_within(request, &lists.upper.allow[at].request)) {
        return None;
    }
    Some(Narrowing {
        name: name.to_owned(),
        upper_index: first,
    })
}

/// Every request `mine` admits, `theirs` admits too (`methods:` and `paths:` of an allow
/// rule; not restricted = everything).
fn requests_within(mine: &RequestRules, theirs: &RequestRules) -> bool {
    let methods = match (&mine.methods, &theirs.methods) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(mine), Some(theirs)) => mine.iter().all(|m| theirs.contains(m)),
    };
    let paths = match (&mine.paths, &theirs.paths) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(mine), Some(theirs)) => mine
            .iter()
            .all(|path| theirs.iter().any(|their| path_within(path, their))),
    };
    methods && paths
}

/// Every path `mine` matches, `theirs` matches.
fn path_within(mine: &PathPattern, theirs: &PathPattern) -> bool {
    match (&mine.tail, &theirs.tail) {
        (PathTail::Exact, _) => theirs.matches(&mine.prefix),
        (PathTail::OneSegment, PathTail::OneSegment) => mine.prefix == theirs.prefix,
        (PathTail::OneSegment | PathTail::AnyDepth, PathTail::AnyDepth) => {
            mine.prefix.starts_with(theirs.prefix.as_str())
        }
        (PathTail::AnyDepth, _) | (PathTail::OneSegment, PathTail::Exact) => false,
    }
}

/// `net` lies inside the union of `nets` (the slice form of [`covered_by_union`]).
#[cfg(test)]
pub(crate) fn net_covered_by_union(net: IpNet, nets: &[IpNet]) -> bool {
    covered_by_union(
        net,
        &|net| nets.iter().any(|other| other.contains(&net)),
        &|net| nets.iter().any(|other| net.contains(other)),
    )
}

/// `net` lies inside the union of some blocks, told by whether one of them holds a block
/// (`holds`) and whether one lies inside it (`inside`). CIDR blocks are nested or
/// disjoint, so a block is covered when one block holds it, or when it has a block inside
/// it and both its halves are covered.
fn covered_by_union(
    net: IpNet,
    holds: &dyn Fn(IpNet) -> bool,
    inside: &dyn Fn(IpNet) -> bool,
) -> bool {
    if holds(net) {
        return true;
    }
    if !inside(net) {
        return false;
    }
    match net.subnets(net.prefix_len() + 1) {
        Ok(halves) => halves
            .into_iter()
            .all(|half| covered_by_union(half, holds, inside)),
        Err(_) => false,
    }
}

/// What UPPER denies of `rule` that `policy` does not deny itself, as a message: the first
/// UPPER deny rule (in file order) that overlaps it on one of its ports.
fn denied_part(lists: &Lists, rule: &Rule) -> Option<String> {
    let PortSet::List(ports) = &rule.ports else {
        return None;
    };
    for deny_index in deny_candidates(lists, &rule.target) {
        let deny = &lists.upper.deny[deny_index];
        for &port in ports.iter().filter(|&&port| deny.ports.contains(port)) {
            let overlaps = overlaps(&rule.target, &deny.target);
            let Some(overlap) = overlaps
                .iter()
                .find(|overlap| !denied_by_own_rule(lists, overlap, port))
            else {
                continue;
            };
            return Some(format!(
                "it allows {overlap} on port {port}, which {} denies (deny[{deny_index}], line {})",
                lists.upper_file, deny.line
            ));
        }
    }
    None
}

/// UPPER's deny rules that may overlap `allowed` (ascending): nested names or blocks, and
/// for an IPv6 block the IPv4 blocks nested with the IPv4 it carries.
fn deny_candidates(lists: &Lists, allowed: &RuleTarget) -> Vec<usize> {
    let mut found = lists.upper_deny.overlapping(allowed);
    if let RuleTarget::Cidr(IpNet::V6(allowed)) = allowed {
        for carried in ipv4_carried_by(*allowed) {
            let ipv4 = RuleTarget::Cidr(IpNet::V4(carried.ipv4));
            found.extend(lists.upper_deny.overlapping(&ipv4));
        }
        found.sort_unstable();
        found.dedup();
    }
    found
}

/// What an allow rule and a deny rule both match.
enum Overlap {
    /// Names or addresses both match.
    Target(RuleTarget),
    /// IPv4 addresses carried by addresses of an allowed IPv6 block (NAT64, 6to4, …):
    /// the engine's deny cidrs judge those addresses by the IPv4 address inside.
    Carried(CarriedIpv4),
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Overlap::Target(RuleTarget::Host(pattern)) => write!(f, "{pattern}"),
            Overlap::Target(RuleTarget::Cidr(net)) => write!(f, "{net}"),
            Overlap::Carried(carried) => write!(
                f,
                "{} (IPv4 {} in {} form)",
                carried.part, carried.ipv4, carried.form
            ),
        }
    }
}

/// What two rule targets both match: host with host, CIDR with CIDR, and the IPv4 a
/// checked IPv6 block carries with an IPv4 deny block.
fn overlaps(allowed: &RuleTarget, denied: &RuleTarget) -> Vec<Overlap> {
    match (allowed, denied) {
        (RuleTarget::Host(a), RuleTarget::Host(b)) => narrower(a, b, HostPattern::is_covered_by)
            .map(|pattern| Overlap::Target(RuleTarget::Host(pattern.clone())))
            .into_iter()
            .collect(),
        (RuleTarget::Cidr(IpNet::V6(allowed)), RuleTarget::Cidr(IpNet::V4(denied))) => {
            ipv4_carried_by(*allowed)
                .into_iter()
                .filter_map(|carried| {
                    let ipv4 = *narrower(&carried.ipv4, denied, |a, b| b.contains(a))?;
                    Some(Overlap::Carried(CarriedIpv4 { ipv4, ..carried }))
                })
                .collect()
        }
        (RuleTarget::Cidr(a), RuleTarget::Cidr(b)) => narrower(a, b, |a, b| b.contains(a))
            .map(|net| Overlap::Target(RuleTarget::Cidr(*net)))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

/// Of two nested sets (`within(x, y)`: x lies inside y), the inner one; None when neither
/// holds the other (names and CIDR blocks are nested or disjoint).
fn narrower<'a, T>(a: &'a T, b: &'a T, within: impl Fn(&T, &T) -> bool) -> Option<&'a T> {
    if within(a, b) {
        Some(a)
    } else if within(b, a) {
        Some(b)
    } else {
        None
    }
}

/// The checked policy refuses `overlap` on `port` itself: a deny rule of its own covers it
/// (for carried IPv4: an IPv4 deny block over it, or an IPv6 one over the block).
fn denied_by_own_rule(lists: &Lists, overlap: &Overlap, port: u16) -> bool {
    own_deny_candidates(lists, overlap)
        .into_iter()
        .map(|at| &lists.policy.deny[at])
        .filter(|rule| rule.ports.contains(port))
        .any(|rule| own_rule_covers(rule, overlap))
}

/// The checked policy's deny rules that may cover `overlap`, in no particular order.
fn own_deny_candidates(lists: &Lists, overlap: &Overlap) -> Vec<usize> {
    let index = &lists.own_deny;
    match overlap {
        Overlap::Target(target) => index.covering(target),
        Overlap::Carried(carried) => index
            .cidr_containing(IpNet::V4(carried.ipv4))
            .chain(index.cidr_containing(IpNet::V6(carried.part)))
            .collect(),
    }
}

/// A deny rule of the checked policy covers `overlap` (ports aside).
fn own_rule_covers(rule: &Rule, overlap: &Overlap) -> bool {
    match (overlap, &rule.target) {
        (Overlap::Target(RuleTarget::Host(pattern)), RuleTarget::Host(own)) => {
            pattern.is_covered_by(own)
        }
        (Overlap::Target(RuleTarget::Cidr(net)), RuleTarget::Cidr(own)) => own.contains(net),
        (Overlap::Carried(carried), RuleTarget::Cidr(own)) => {
            own.contains(&IpNet::V4(carried.ipv4)) || own.contains(&IpNet::V6(carried.part))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
