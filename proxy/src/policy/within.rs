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
//! - and UPPER denies none of it, unless the checked policy denies that part itself (a
//!   child that repeats the ceiling's `deny: gist.github.com` under `*.github.com` is within).
//!
//! Host rules and CIDR rules are separate worlds here, as in the engine: host rules match
//! names, CIDR rules match IP-literal targets. UPPER's deny CIDRs also refuse names that
//! resolve into them at connect time, which no static check can know; they are compared
//! with the checked policy's CIDR rules only.
//!
//! An UPPER host rule restricted to some `methods:`/`paths:` covers only a rule restricted
//! to a subset of them.
//!
//! Beyond rules: a policy in `mode: report` lets through what its allowlist refuses, and
//! `tls: {sni: off}` stops checking that a tunnel's SNI is the name allowed; under an UPPER
//! that does neither, both are errors (at line 1: the policy does not keep their position).

use ipnet::IpNet;

use super::request::{PathPattern, PathTail};
use super::{Diagnostic, Mode, Policy, PortSet, RequestRules, Rule, RuleTarget, SniCheck};

/// Every way `policy` reaches beyond `upper`, as error diagnostics in `file` (the checked
/// policy's name as shown), in rule order. `upper_file` names UPPER in the messages.
pub fn check_within(
    file: &str,
    policy: &Policy,
    upper_file: &str,
    upper: &Policy,
) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    if policy.mode == Mode::Report && upper.mode == Mode::Enforce {
        errors.push(Diagnostic::error(
            file,
            1,
            1,
            format!(
                "`mode: report` lets through what the allowlist refuses; {upper_file} enforces its allowlist"
            ),
        ));
    }
    if policy.tls.sni == SniCheck::Off && upper.tls.sni == SniCheck::Strict {
        errors.push(Diagnostic::error(
            file,
            1,
            1,
            format!(
                "`tls: {{sni: off}}` lets a tunnel to an allowed name carry TLS for any other name; {upper_file} checks SNI"
            ),
        ));
    }
    for (index, rule) in policy.allow.iter().enumerate() {
        let PortSet::List(ports) = &rule.ports else {
            continue;
        };
        let uncovered: Vec<u16> = ports
            .iter()
            .copied()
            .filter(|&port| !allowed_by(upper, &rule.target, &rule.request, port))
            .collect();
        if !uncovered.is_empty() {
            let what = if uncovered.len() == ports.len() {
                "it".to_owned()
            } else {
                format!("port{} {}", plural_s(uncovered.len()), join(&uncovered))
            };
            errors.push(Diagnostic::error(
                file,
                rule.line,
                rule.column,
                format!("allow[{index}] ({rule}) is not within {upper_file}: no allow rule there covers {what}"),
            ));
        }
        if let Some(message) = denied_part(policy, rule, upper, upper_file) {
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

/// UPPER's allow rules together cover all of `target` on `port`.
fn allowed_by(upper: &Policy, target: &RuleTarget, request: &RequestRules, port: u16) -> bool {
    let on_port = upper.allow.iter().filter(|rule| rule.ports.contains(port));
    match target {
        RuleTarget::Host(pattern) => on_port.into_iter().any(|theirs| match &theirs.target {
            RuleTarget::Host(their_pattern) => {
                pattern.is_covered_by(their_pattern) && requests_within(request, &theirs.request)
            }
            RuleTarget::Cidr(_) => false,
        }),
        RuleTarget::Cidr(net) => {
            let nets: Vec<IpNet> = on_port
                .filter_map(|rule| match rule.target {
                    RuleTarget::Cidr(net) => Some(net),
                    RuleTarget::Host(_) => None,
                })
                .collect();
            net_covered_by_union(*net, &nets)
        }
    }
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
            let Some(overlap) = intersection(&rule.target, &deny.target) else {
                continue;
            };
            if denied_by_own_rule(policy, &overlap, port) {
                continue;
            }
            return Some(format!(
                "it allows {} on port {port}, which {upper_file} denies (deny[{deny_index}], line {})",
                describe(&overlap),
                deny.line
            ));
        }
    }
    None
}

fn describe(target: &RuleTarget) -> String {
    match target {
        RuleTarget::Host(pattern) => pattern.to_string(),
        RuleTarget::Cidr(net) => net.to_string(),
    }
}

/// What two rule targets both match, when they overlap (host with host, CIDR with CIDR).
fn intersection(a: &RuleTarget, b: &RuleTarget) -> Option<RuleTarget> {
    match (a, b) {
        (RuleTarget::Host(a), RuleTarget::Host(b)) => {
            if a.is_covered_by(b) {
                Some(RuleTarget::Host(a.clone()))
            } else if b.is_covered_by(a) {
                Some(RuleTarget::Host(b.clone()))
            } else {
                None
            }
        }
        (RuleTarget::Cidr(a), RuleTarget::Cidr(b)) => {
            if b.contains(a) {
                Some(RuleTarget::Cidr(*a))
            } else if a.contains(b) {
                Some(RuleTarget::Cidr(*b))
            } else {
                None
            }
        }
        _ => None,
    }
}

fn denied_by_own_rule(policy: &Policy, target: &RuleTarget, port: u16) -> bool {
    policy
        .deny
        .iter()
        .filter(|rule| rule.ports.contains(port))
        .any(|rule| match (target, &rule.target) {
            (RuleTarget::Host(pattern), RuleTarget::Host(own)) => pattern.is_covered_by(own),
            (RuleTarget::Cidr(net), RuleTarget::Cidr(own)) => own.contains(net),
            _ => false,
        })
}

#[cfg(test)]
mod tests;
