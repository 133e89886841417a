//! The algorithm of `check_within` before its rules were indexed, kept word for word as
//! the reference the indexed one must agree with: every rule compared with every rule of
//! both policies, quadratic but plainly right.

use ipnet::IpNet;

use super::super::{
    Gap, Narrowing, Overlap, exact_name, join, loosened_settings, overlaps, plural_s,
    requests_within,
};
use crate::policy::host_pattern::HostPattern;
use crate::policy::{Diagnostic, Policy, PortSet, RequestRules, Rule, RuleTarget};

/// Every way `policy` reaches beyond `upper`, as error diagnostics in `file` (the checked
/// policy's name as shown), in rule order. `upper_file` names UPPER in the messages.
pub(super) fn check_within_reference(
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

/// `net` lies inside the union of `nets`. CIDR blocks are nested or disjoint, so a block is
/// covered when one net contains it, or when it has a net inside it and both its halves
/// are covered.
fn net_covered_by_union(net: IpNet, nets: &[IpNet]) -> bool {
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
