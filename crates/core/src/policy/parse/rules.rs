//! The `allow:` and `deny:` sections: each rule's `host` or `cidr`, its `ports`, and the
//! `methods` and `paths` that narrow an allow rule on an exact host.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::super::host_pattern::{HostPattern, PatternUse, parse_host_pattern};
use super::super::request::{RequestRules, parse_method, parse_path_pattern};
use super::super::{PortSet, Rule, RuleTarget};
use super::Findings;
use super::ports::parse_port_list;
use super::yaml::position;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    host: Option<Spanned<String>>,
    cidr: Option<Spanned<String>>,
    ports: Option<Spanned<Vec<Spanned<String>>>>,
    methods: Option<Spanned<Vec<Spanned<String>>>>,
    paths: Option<Spanned<Vec<Spanned<String>>>>,
}

pub(super) fn build_rules(
    findings: &mut Findings<'_>,
    raw_rules: Vec<Spanned<RawRule>>,
    used_in: PatternUse,
) -> Vec<Rule> {
    let list = match used_in {
        PatternUse::Allow => "allow",
        PatternUse::Deny => "deny",
    };
    let mut rules = Vec::with_capacity(raw_rules.len());
    for (index, raw_rule) in raw_rules.into_iter().enumerate() {
        let rule_location = raw_rule.referenced;
        let raw = raw_rule.value;
        let target = match (raw.host, raw.cidr) {
            (Some(_), Some(cidr)) => {
                findings.error_at(
                    &cidr.referenced,
                    format!("{list}[{index}] has both `host` and `cidr`; write two rules"),
                );
                None
            }
            (None, None) => {
                findings.error_at(
                    &rule_location,
                    format!("{list}[{index}] needs a `host` or a `cidr`"),
                );
                None
            }
            (Some(host), None) => match parse_host_pattern(&host.value, used_in) {
                Ok(checked) => {
                    for warning in checked.warnings {
                        findings.warning_at(&host.referenced, warning);
                    }
                    Some(RuleTarget::Host(checked.pattern))
                }
                Err(message) => {
                    findings.error_at(&host.referenced, message);
                    None
                }
            },
            (None, Some(cidr)) => match parse_cidr(&cidr.value) {
                Ok(net) => {
                    if used_in == PatternUse::Allow
                        && let Some(warning) = private_cidr_warning(net)
                    {
                        findings.warning_at(&cidr.referenced, warning);
                    }
                    Some(RuleTarget::Cidr(net))
                }
                Err(message) => {
                    findings.error_at(&cidr.referenced, message);
                    None
                }
            },
        };
        let default_ports = match used_in {
            PatternUse::Allow => PortSet::List(vec![443]),
            PatternUse::Deny => PortSet::Any,
        };
        let ports = match raw.ports {
            None => Some(default_ports),
            Some(ports) => parse_port_list(findings, &ports, "ports").map(PortSet::List),
        };
        let request = build_request_rules(
            findings,
            &format!("{list}[{index}]"),
            raw.methods,
            raw.paths,
            used_in,
            target.as_ref(),
        );
        if let (Some(target), Some(ports), Some(request)) = (target, ports, request) {
            let (line, column) = position(&rule_location);
            rules.push(Rule {
                target,
                ports,
                request,
                line,
                column,
            });
        }
    }
    rules
}

/// `methods:` and `paths:` of a rule: allow rules on an exact host only (the run CA signs
/// exact names, and a deny rule refuses whole hosts). None after an error.
fn build_request_rules(
    findings: &mut Findings<'_>,
    rule_name: &str,
    methods: Option<Spanned<Vec<Spanned<String>>>>,
    paths: Option<Spanned<Vec<Spanned<String>>>>,
    used_in: PatternUse,
    target: Option<&RuleTarget>,
) -> Option<RequestRules> {
    let first = match (&methods, &paths) {
        (Some(methods), _) => methods.referenced,
        (None, Some(paths)) => paths.referenced,
        (None, None) => return Some(RequestRules::default()),
    };
    if used_in == PatternUse::Deny {
        findings.error_at(
            &first,
            format!("{rule_name}: `methods` and `paths` narrow allow rules; a deny rule refuses the whole host"),
        );
        return None;
    }
    match target {
        Some(RuleTarget::Host(HostPattern::Exact(_))) => {}
        Some(RuleTarget::Host(HostPattern::Wildcard(_))) => {
            findings.error_at(
                &first,
                format!("{rule_name}: `methods` and `paths` need an exact host (the proxy inspects exact names only)"),
            );
            return None;
        }
        Some(RuleTarget::Cidr(_)) => {
            findings.error_at(
                &first,
                format!("{rule_name}: `methods` and `paths` need a `host` rule, not a `cidr` rule"),
            );
            return None;
        }
        // The target's own error is already reported.
        None => return None,
    }
    let mut ok = true;
    let mut rules = RequestRules::default();
    for (key, list, parse) in [
        (
            "methods",
            methods,
            parse_method as fn(&str) -> Result<String, String>,
        ),
        ("paths", paths, |raw: &str| {
            parse_path_pattern(raw).map(|p| p.to_string())
        }),
    ] {
        let Some(list) = list else { continue };
        if list.value.is_empty() {
            findings.error_at(
                &list.referenced,
                format!(
                    "{rule_name}: `{key}` is empty; omit it to allow every {}",
                    &key[..key.len() - 1]
                ),
            );
            ok = false;
            continue;
        }
        let mut seen: Vec<String> = Vec::new();
        for item in &list.value {
            match parse(&item.value) {
                Ok(value) if seen.contains(&value) => {
                    findings.warning_at(&item.referenced, format!("`{value}` is listed twice"))
                }
                Ok(value) => seen.push(value),
                Err(message) => {
                    findings.error_at(&item.referenced, message);
                    ok = false;
                }
            }
        }
        if key == "methods" {
            rules.methods = Some(seen);
        } else {
            rules.paths = Some(
                seen.iter()
                    .map(|p| parse_path_pattern(p).expect("checked above"))
                    .collect(),
            );
        }
    }
    ok.then_some(rules)
}

/// `a.b.c.d/len` or an IPv6 prefix; a bare address is a single host (/32 or /128). A prefix
/// with host bits set (`10.0.0.1/8`) is refused: it usually means a typo in either half. So
/// is an IPv4-mapped block (`::ffff:198.51.100.0/120`): it would match nothing.
fn parse_cidr(raw: &str) -> Result<ipnet::IpNet, String> {
    let raw = raw.trim();
    let not_cidr =
        || format!("`{raw}` is not a CIDR block (e.g. `203.0.113.0/24` or `2001:db8::/32`)");
    let (address, prefix) = match raw.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (raw, None),
    };
    // std's parser refuses leading zeros (`010.0.0.0`, octal to inet_aton): ambiguous.
    let address: std::net::IpAddr = address.parse().map_err(|_| not_cidr())?;
    let net = match prefix {
        None => ipnet::IpNet::from(address),
        Some(prefix) => {
            if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(not_cidr());
            }
            let len: u8 = prefix.parse().map_err(|_| not_cidr())?;
            ipnet::IpNet::new(address, len).map_err(|_| {
                format!("`{raw}`: the prefix length /{len} is too long for this address")
            })?
        }
    };
    if net.trunc() != net {
        return Err(format!(
            "`{raw}` has host bits set; did you mean `{}`?",
            net.trunc()
        ));
    }
    if let Some(ipv4) = mapped_ipv4(net) {
        return Err(format!(
            "`{raw}` is IPv4 written as IPv4-mapped IPv6, which the proxy matches as IPv4, so this rule would match nothing; write `{ipv4}`"
        ));
    }
    Ok(net)
}

/// The IPv4 block an IPv6 block inside `::ffff:0:0/96` spells. The engine turns every
/// `::ffff:a.b.c.d` target into `a.b.c.d` before matching, so such a rule matches nothing.
fn mapped_ipv4(net: ipnet::IpNet) -> Option<ipnet::Ipv4Net> {
    let ipnet::IpNet::V6(net) = net else {
        return None;
    };
    let ipv4 = net.network().to_ipv4_mapped()?;
    ipnet::Ipv4Net::new(ipv4, net.prefix_len().checked_sub(96)?).ok()
}

fn private_cidr_warning(net: ipnet::IpNet) -> Option<String> {
    crate::floor::overlaps_private(net).then(|| {
        format!(
            "cidr `{net}` covers private or special addresses; allowed names resolving there pass the private-address floor"
        )
    })
}
