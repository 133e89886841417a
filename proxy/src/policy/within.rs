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
//! Beyond rules: a policy in `mode: report` lets through what its allowlist refuses, and
//! `tls: {sni: off}` or a `tls.ports` list without a port UPPER lists stops checking that a
//! tunnel there carries TLS for the name allowed; under an UPPER that does neither, each is
//! an error (at line 1: the policy does not keep their position).

use std::fmt;

use ipnet::IpNet;

use super::host_pattern::HostPattern;
use super::request::{PathPattern, PathTail};
use super::{Diagnostic, Mode, Policy, PortSet, RequestRules, Rule, RuleTarget, SniCheck};
use crate::floor::{CarriedIpv4, ipv4_carried_by};

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
    for (index, rule) in policy.allow.iter().enumerate() {
        for message in rule_gaps(policy, rule, upper, upper_file) {
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
fn rule_gaps(policy: &Policy, rule: &Rule, upper: &Policy, upper_file: &str) -> Vec<String> {
    let PortSet::List(ports) = &rule.ports else {
        return Vec::new();
    };
    let mut uncovered = Vec::new();
    let mut narrowed: Vec<(Narrowing, Vec<u16>)> = Vec::new();
    for &port in ports {
        match port_gap(policy, rule, upper, port) {
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
        let upper_rule = &upper.allow[narrowing.upper_index];
        messages.push(format!(
            "on port{} {} the engine judges requests to {} by the exact rule allow[{}] there ({upper_rule}), which admits fewer of them",
            plural_s(on.len()),
            join(&on),
            narrowing.name,
            narrowing.upper_index,
        ));
    }
    messages.extend(denied_part(policy, rule, upper, upper_file));
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
fn port_gap(policy: &Policy, rule: &Rule, upper: &Policy, port: u16) -> Option<Gap> {
    let on_port: Vec<(usize, &Rule)> = upper
        .allow
        .iter()
        .enumerate()
        .filter(|(_, theirs)| theirs.ports.contains(port))
        .collect();
    match &rule.target {
        RuleTarget::Host(pattern) => host_gap(policy, &on_port, pattern, &rule.request, port),
        RuleTarget::Cidr(net) => {
            let nets: Vec<IpNet> = on_port
                .iter()
                .filter_map(|(_, theirs)| match theirs.target {
                    RuleTarget::Cidr(net) => Some(net),
                    RuleTarget::Host(_) => None,
                })
                .collect();
            (!net_covered_by_union(*net, &nets)).then_some(Gap::Uncovered)
        }
    }
}

/// A host pattern needs an UPPER rule over it on the port, and every name UPPER narrows
/// with an exact rule must stay narrowed: the pattern's own name if it is exact, the names
/// under it if it is a wildcard (except those the checked policy decides by its own exact
/// rule, which is checked in turn).
fn host_gap(
    policy: &Policy,
    on_port: &[(usize, &Rule)],
    pattern: &HostPattern,
    request: &RequestRules,
    port: u16,
) -> Option<Gap> {
    let covered = on_port.iter().any(|(_, theirs)| {
        matches!(&theirs.target, RuleTarget::Host(their_pattern) if pattern.is_covered_by(their_pattern))
    });
    if !covered {
        return Some(Gap::Uncovered);
    }
    let names: Vec<&str> = match pattern {
        HostPattern::Exact(name) => vec![name.as_str()],
        HostPattern::Wildcard(_) => on_port
            .iter()
            .filter_map(|(_, theirs)| exact_name(theirs))
            .filter(|name| HostPattern::Exact((*name).to_owned()).is_covered_by(pattern))
            .filter(|name| !has_exact_rule(policy, name, port))
            .collect(),
    };
    names
        .into_iter()
        .find_map(|name| narrowing(on_port, name, request))
        .map(Gap::Narrowed)
}

fn exact_name(rule: &Rule) -> Option<&str> {
    match &rule.target {
        RuleTarget::Host(HostPattern::Exact(name)) => Some(name),
        _ => None,
    }
}

fn has_exact_rule(policy: &Policy, name: &str, port: u16) -> bool {
    policy
        .allow
        .iter()
        .any(|rule| exact_name(rule) == Some(name) && rule.ports.contains(port))
}

/// UPPER's exact rules for `name` decide its requests when there are any; Some when none of
/// them admits all of `request`.
fn narrowing(on_port: &[(usize, &Rule)], name: &str, request: &RequestRules) -> Option<Narrowing> {
    let mut deciding = on_port
        .iter()
        .filter(|(_, theirs)| exact_name(theirs) == Some(name));
    let first = deciding.clone().next()?;
    if deciding.any(|(_, theirs)| requests_within(request, &theirs.request)) {
        return None;
    }
    Some(Narrowing {
        name: name.to_owned(),
        upper_index: first.0,
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

/// `net` lies inside the union of `nets`. CIDR blocks are nested or disjoint, so a block is
/// covered when one net contains it, or when it has a net inside it and both its halves
/// are covered.
pub(crate) fn net_covered_by_union(net: IpNet, nets: &[IpNet]) -> bool {
    if nets.iter().any(|other| other.contains(&net)) {
        return true;
    }
    if !nets.iter().any(|other| net.contains(other)) {
        return false;
    }
    match net.subnets(net.prefix_len() + 1) {
        Ok(halves) => halves
            .into_iter()
            .all(|half| net_covered_by_union(half, nets)),
        Err(_) => false,
    }
}

/// What UPPER denies of `rule` that `policy` does not deny itself, as a message.
fn denied_part(policy: &Policy, rule: &Rule, upper: &Policy, upper_file: &str) -> Option<String> {
    let PortSet::List(ports) = &rule.ports else {
        return None;
    };
    for (deny_index, deny) in upper.deny.iter().enumerate() {
        for &port in ports.iter().filter(|&&port| deny.ports.contains(port)) {
            let overlaps = overlaps(&rule.target, &deny.target);
            let Some(overlap) = overlaps
                .iter()
                .find(|overlap| !denied_by_own_rule(policy, overlap, port))
            else {
                continue;
            };
            return Some(format!(
                "it allows {overlap} on port {port}, which {upper_file} denies (deny[{deny_index}], line {})",
                deny.line
            ));
        }
    }
    None
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
fn denied_by_own_rule(policy: &Policy, overlap: &Overlap, port: u16) -> bool {
    policy
        .deny
        .iter()
        .filter(|rule| rule.ports.contains(port))
        .any(|rule| match (overlap, &rule.target) {
            (Overlap::Target(RuleTarget::Host(pattern)), RuleTarget::Host(own)) => {
                pattern.is_covered_by(own)
            }
            (Overlap::Target(RuleTarget::Cidr(net)), RuleTarget::Cidr(own)) => own.contains(net),
            (Overlap::Carried(carried), RuleTarget::Cidr(own)) => {
                own.contains(&IpNet::V4(carried.ipv4)) || own.contains(&IpNet::V6(carried.part))
            }
            _ => false,
        })
}

#[cfg(test)]
mod tests;
