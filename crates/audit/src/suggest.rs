//! A first policy drafted from audit logs (`policy suggest`): what the sandbox reached or
//! tried to reach, as exact allow rules with the ports seen, for a person to review.
//!
//! Only names are suggested, and only the engine's own validation decides what a name is
//! (`parse_host_pattern`, the one `policy check` runs). Listed as comments with the reason,
//! never as rules:
//! - IP literals (a `cidr` rule is a deliberate decision, not a draft), all the more those
//!   in the private-address floor (cloud metadata, the host's own services);
//! - names refused because they resolved into the floor, or by a deny rule, or for how they
//!   were asked (`sni_mismatch`, `bad_request`, …);
//! - names that only failed to resolve, and names only looked up over DNS (no port seen);
//! - hosts that are not valid names.
//!
//! A wildcard replaces exact names only when at least `wildcard_after` sibling names under
//! one registrable domain were seen (it is `*.P` for P the narrowest parent they are all
//! below), and only when the engine accepts it without a warning:
//! never over a public suffix, never over shared hosting, and never over a name the same
//! logs show refused by a deny rule or the private-address floor (the wildcard would allow
//! what was refused for where it is). Every comment is made safe first: hosts come from the
//! hostile sandbox, so a comment holds only printable ASCII and the escapes of everything
//! else — a name cannot end the comment line or hide text. Every host in a rule is a quoted
//! string, so no name (`null`, `true`, `123` …) reads as another YAML value.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;

use egress_core::audit::{Kind, Outcome};
use egress_core::policy::{HostPattern, PatternUse, parse_host_pattern, registrable_domain};

use egress_core::audit::AuditLine;

use super::log::{AuditLog, LoggedAttempt};

/// `--wildcard-after` default: sibling names under one registrable domain before a
/// wildcard is suggested instead.
pub const DEFAULT_WILDCARD_AFTER: usize = 5;

/// How a draft is made and named.
#[derive(Clone, Debug)]
pub struct SuggestOptions {
    /// `name:` of the draft.
    pub name: String,
    /// Sibling names under one registrable domain before a wildcard stands for them
    /// (`--wildcard-after`; 0: never).
    pub wildcard_after: usize,
    /// Shown in the header comment.
    pub sources: Vec<String>,
}

/// What one valid name was seen doing.
#[derive(Debug, Default)]
struct NameSeen {
    /// Port → attempts that make the name a candidate.
    ports: BTreeMap<u16, u64>,
    /// Decision → attempts that make the name a candidate.
    decisions: BTreeMap<&'static str, u64>,
    /// Candidate DNS lookups (no port).
    lookups: u64,
    /// Why other attempts of this name are not a reason to allow it: reason → attempts.
    refused_for: BTreeMap<String, u64>,
}

/// A host that is not suggested, and why.
#[derive(Debug)]
struct Excluded {
    host: String,
    ports: BTreeSet<u16>,
    attempts: u64,
    why: String,
}

/// The draft policy YAML for everything in `log`.
pub fn suggest(log: &AuditLog, options: &SuggestOptions) -> String {
    let mut names: BTreeMap<String, NameSeen> = BTreeMap::new();
    let mut excluded: BTreeMap<String, Excluded> = BTreeMap::new();
    for attempt in log.attempts() {
        classify(attempt, &mut names, &mut excluded);
    }
    let refused = refused_for_where(&names);
    let mut suggested: BTreeMap<String, NameSeen> = BTreeMap::new();
    for (name, seen) in names {
        if !seen.ports.is_empty() {
            suggested.insert(name, seen);
            continue;
        }
        let why = if seen.lookups > 0 {
            "only looked up over DNS, never connected to: no port seen".to_owned()
        } else {
            refusal_words(&seen.refused_for)
        };
        let attempts = seen.lookups + seen.refused_for.values().sum::<u64>();
        excluded.insert(
            name.clone(),
            Excluded {
                host: name,
                ports: BTreeSet::new(),
                attempts,
                why,
            },
        );
    }
    let widened = widen(suggested, options.wildcard_after, &refused);
    render(log, options, &widened, &excluded)
}

/// Refusals that say "not this host": a deny rule, or the private-address floor. A wildcard
/// over such a name would allow it; a name refused only for how it was asked does not count.
const WHERE_REFUSALS: [&str; 2] = ["denied", "private_address"];

/// Each name refused for where it is, with those reasons (in `WHERE_REFUSALS` order).
fn refused_for_where(names: &BTreeMap<String, NameSeen>) -> BTreeMap<String, Vec<&'static str>> {
    names
        .iter()
        .filter_map(|(name, seen)| {
            let reasons: Vec<&'static str> = WHERE_REFUSALS
                .into_iter()
                .filter(|reason| seen.refused_for.contains_key(*reason))
                .collect();
            (!reasons.is_empty()).then(|| (name.clone(), reasons))
        })
        .collect()
}

fn classify(
    attempt: &LoggedAttempt,
    names: &mut BTreeMap<String, NameSeen>,
    excluded: &mut BTreeMap<String, Excluded>,
) {
    // No connection uses port 0 and no rule can name it: a forged or broken record, which
    // would otherwise make a rule the engine refuses.
    if attempt.port == Some(0) {
        return;
    }
    let mut exclude = |host: &str, why: String| {
        let entry = excluded.entry(host.to_owned()).or_insert_with(|| Excluded {
            host: host.to_owned(),
            ports: BTreeSet::new(),
            attempts: 0,
            why,
        });
        entry.attempts += 1;
        entry.ports.extend(attempt.port);
    };
    if let Ok(ip) = attempt
        .host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        let why = if egress_core::floor::is_private(ip) {
            "IP literal in the private-address floor (loopback, private, link-local such as cloud metadata): never suggested"
        } else {
            "IP literal: an address is allowed only by a `cidr` rule, written after review"
        };
        exclude(&attempt.host, why.to_owned());
        return;
    }
    let name = match parse_host_pattern(&attempt.host, PatternUse::Allow) {
        Ok(checked) => match checked.pattern {
            HostPattern::Exact(name) => name,
            HostPattern::Wildcard(_) => {
                exclude(&attempt.host, "not a host name".to_owned());
                return;
            }
        },
        Err(message) => {
            exclude(&attempt.host, format!("not a valid host name: {message}"));
            return;
        }
    };
    let seen = names.entry(name).or_default();
    if is_candidate(attempt) {
        match (attempt.kind, attempt.port) {
            (Kind::Dns, _) | (_, None) => seen.lookups += 1,
            (_, Some(port)) => {
                *seen.ports.entry(port).or_default() += 1;
                *seen.decisions.entry(attempt.decision.as_str()).or_default() += 1;
            }
        }
    } else {
        *seen
            .refused_for
            .entry(attempt.reason.to_string())
            .or_default() += 1;
    }
}

/// An attempt that says "the program wanted this host on this port": it went through, would
/// have been refused only by the allowlist, or was refused only by the allowlist.
fn is_candidate(attempt: &LoggedAttempt) -> bool {
    match attempt.decision {
        Outcome::Allowed => true,
        Outcome::WouldBlock | Outcome::Blocked => {
            matches!(attempt.reason.as_str(), "not_allowed" | "port_not_allowed")
        }
        // Allowed, then the upstream did not answer: still a host the program wanted.
        Outcome::Failed => matches!(attempt.reason.as_str(), "connect_failed" | "timeout"),
        // An outcome this version does not know: nothing to suggest from it.
        _ => false,
    }
}

fn refusal_words(reasons: &BTreeMap<String, u64>) -> String {
    let only = |reason: &str| reasons.len() == 1 && reasons.contains_key(reason);
    if only("resolve_failed") {
        return "only failed to resolve (resolve_failed)".to_owned();
    }
    if only("private_address") {
        return "resolved into the private-address floor (private_address): never suggested"
            .to_owned();
    }
    if only("denied") {
        return "refused by a deny rule (denied)".to_owned();
    }
    let list: Vec<String> = reasons
        .iter()
        .map(|(reason, count)| format!("{reason} x{count}"))
        .collect();
    format!(
        "refused for how it was asked, not where: {}",
        list.join(", ")
    )
}

/// A suggested wildcard and the names it stands for.
struct Wildcard {
    suffix: String,
    names: BTreeMap<String, NameSeen>,
}

/// A wildcard that enough names asked for, kept as exact rules because it would also cover
/// names the logs show refused for where they are.
struct Unwidened {
    suffix: String,
    names: usize,
    refused: Vec<(String, Vec<&'static str>)>,
}

/// The rules of a draft: wildcards, the wildcards refused, and the remaining exact names.
struct Widened {
    wildcards: Vec<Wildcard>,
    unwidened: Vec<Unwidened>,
    exact: BTreeMap<String, NameSeen>,
}

/// Replaces the names under one registrable domain by `*.domain` when there are at least
/// `threshold` of them (apex excluded: a wildcard does not match it), the engine accepts
/// that wildcard with no warning, and it covers no name in `refused`.
fn widen(
    mut names: BTreeMap<String, NameSeen>,
    threshold: usize,
    refused: &BTreeMap<String, Vec<&'static str>>,
) -> Widened {
    let mut wildcards = Vec::new();
    let mut unwidened = Vec::new();
    for (domain, members) in siblings(names.keys()) {
        if threshold == 0 || members.len() < threshold {
            continue;
        }
        let domain = narrowest_parent(&domain, &members);
        let Ok(checked) = parse_host_pattern(&format!("*.{domain}"), PatternUse::Allow) else {
            continue;
        };
        if !checked.warnings.is_empty() {
            continue;
        }
        let wildcard = HostPattern::Wildcard(domain.clone());
        let covered: Vec<(String, Vec<&'static str>)> = refused
            .iter()
            .filter(|(name, _)| HostPattern::Exact((*name).clone()).is_covered_by(&wildcard))
            .map(|(name, reasons)| (name.clone(), reasons.clone()))
            .collect();
        if !covered.is_empty() {
            unwidened.push(Unwidened {
                suffix: domain,
                names: members.len(),
                refused: covered,
            });
            continue;
        }
        let names = members
            .into_iter()
            .filter_map(|name| names.remove_entry(&name))
            .collect();
        wildcards.push(Wildcard {
            suffix: domain,
            names,
        });
    }
    Widened {
        wildcards,
        unwidened,
        exact: names,
    }
}

/// The longest parent of every name in `members` that each name is strictly below (so
/// `*.parent` matches them all), never above their registrable `domain`: five names under
/// `svc.example.com` give `svc.example.com`, not `example.com`.
fn narrowest_parent(domain: &str, members: &[String]) -> String {
    let labels: Vec<Vec<&str>> = members
        .iter()
        .map(|name| name.split('.').rev().collect())
        .collect();
    let shortest = labels.iter().map(Vec::len).min().unwrap_or(0);
    let mut common = 0;
    while common < shortest && labels.iter().all(|name| name[common] == labels[0][common]) {
        common += 1;
    }
    // A name that is the common suffix itself is not below it: go up one label.
    if labels.iter().any(|name| name.len() == common) {
        common -= 1;
    }
    let parent: Vec<&str> = labels[0][..common].iter().rev().copied().collect();
    let parent = parent.join(".");
    if parent.len() > domain.len() {
        parent
    } else {
        domain.to_owned()
    }
}

/// Names grouped by registrable domain, apex left out (a wildcard does not match it).
fn siblings<'a>(names: impl Iterator<Item = &'a String>) -> BTreeMap<String, Vec<String>> {
    let mut siblings: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in names {
        if let Some(domain) = registrable_domain(name)
            && domain != name
        {
            siblings
                .entry(domain.to_owned())
                .or_default()
                .push(name.clone());
        }
    }
    siblings
}

/// Untrusted text → safe inside a YAML comment: printable ASCII kept, control and bidi
/// characters as `text::visible` escapes, anything else non-ASCII as `\u{…}`.
pub fn comment_text(raw: &str) -> String {
    let visible = egress_core::text::visible(raw);
    let mut out = String::with_capacity(visible.len());
    for c in visible.chars() {
        if c == ' ' || c.is_ascii_graphic() {
            out.push(c);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
    }
    out
}

/// A host as a YAML double-quoted string (JSON string syntax is valid YAML): whatever the
/// name, it is read back as that string, never as `null`, a boolean or a number.
fn yaml_string(host: &str) -> String {
    serde_json::to_string(host).expect("a string serialises")
}

fn ports_list(ports: impl IntoIterator<Item = u16>) -> String {
    let ports: Vec<String> = ports.into_iter().map(|p| p.to_string()).collect();
    format!("[{}]", ports.join(", "))
}

/// `443 x5, 80 x1; allowed 2, would_block 4`, and the name's other refusals (see
/// [`also_refused`]).
fn seen_words(seen: &NameSeen) -> String {
    let ports: Vec<String> = seen
        .ports
        .iter()
        .map(|(port, count)| format!("{port} x{count}"))
        .collect();
    let decisions: Vec<String> = seen
        .decisions
        .iter()
        .map(|(decision, count)| format!("{decision} {count}"))
        .collect();
    format!(
        "{}; {}{}",
        ports.join(", "),
        decisions.join(", "),
        also_refused(&seen.refused_for)
    )
}

/// `; ALSO REFUSED: private_address x1 (…)`: refusals of a name that is still suggested
/// because the program also asked for it on a port. The rule stays — the floor still holds
/// under it, and dropping it would hide that the program wanted the name — but a reviewer
/// must see that the name resolved into the floor (an internal name, or DNS rebinding) or hit
/// a deny rule the draft does not carry.
fn also_refused(reasons: &BTreeMap<String, u64>) -> String {
    if reasons.is_empty() {
        return String::new();
    }
    let list: Vec<String> = reasons
        .iter()
        .map(|(reason, count)| {
            let why = match reason.as_str() {
                "private_address" => " (resolved into the private-address floor: an internal name, or DNS rebinding? the floor still holds under this rule)",
                "denied" => " (by a deny rule of the logged policy; this draft has no deny rules)",
                _ => "",
            };
            format!("{} x{count}{why}", comment_text(reason))
        })
        .collect();
    format!("; ALSO REFUSED: {}", list.join(", "))
}

fn render(
    log: &AuditLog,
    options: &SuggestOptions,
    widened: &Widened,
    excluded: &BTreeMap<String, Excluded>,
) -> String {
    let Widened {
        wildcards,
        unwidened,
        exact,
    } = widened;
    let mut out = String::new();
    let runs: BTreeSet<&str> = log.entries.iter().filter_map(|e| e.record.run()).collect();
    let attempts = log
        .entries
        .iter()
        .filter(|e| matches!(e.record, AuditLine::Attempt(_)))
        .count();
    out.push_str("# Draft policy from `egress-sandbox policy suggest`: REVIEW EVERY RULE.\n");
    out.push_str(
        "# A rule here only says the sandbox tried to reach that host, not that it should.\n",
    );
    let _ = writeln!(
        out,
        "# From {attempts} attempts in {} run(s): {}",
        runs.len(),
        comment_text(&options.sources.join(", "))
    );
    out.push_str("# Next: egress-sandbox policy check [--within ORG.yaml] THIS.yaml\n");
    out.push_str("#       egress-sandbox policy test -p THIS.yaml HOST[:PORT]\n");
    out.push_str("version: 1\n");
    let _ = writeln!(
        out,
        "name: {}",
        serde_json::to_string(&options.name).expect("a string serialises")
    );
    out.push_str("mode: enforce\n");
    if wildcards.is_empty() && exact.is_empty() {
        out.push_str("allow: []   # nothing in these logs qualifies for a rule\n");
    } else {
        out.push_str("allow:\n");
    }
    for wildcard in wildcards {
        let ports: BTreeSet<u16> = wildcard
            .names
            .values()
            .flat_map(|seen| seen.ports.keys().copied())
            .collect();
        let _ = writeln!(
            out,
            "  # {} names seen under {} (--wildcard-after {}):",
            wildcard.names.len(),
            wildcard.suffix,
            options.wildcard_after
        );
        for (name, seen) in &wildcard.names {
            let _ = writeln!(out, "  #   {name}: {}", seen_words(seen));
        }
        let _ = writeln!(
            out,
            "  - host: {}\n    ports: {}",
            yaml_string(&format!("*.{}", wildcard.suffix)),
            ports_list(ports)
        );
    }
    for item in unwidened {
        let refused: Vec<String> = item
            .refused
            .iter()
            .map(|(name, reasons)| format!("{} ({})", comment_text(name), reasons.join(", ")))
            .collect();
        let _ = writeln!(
            out,
            "  # Not widened to *.{}, though {} names were seen under it (--wildcard-after {}):\n  #   it would also allow {}, refused in these logs.",
            comment_text(&item.suffix),
            item.names,
            options.wildcard_after,
            refused.join(", ")
        );
    }
    for (name, seen) in exact {
        let _ = writeln!(
            out,
            "  # {}\n  - host: {}\n    ports: {}",
            seen_words(seen),
            yaml_string(name),
            ports_list(seen.ports.keys().copied())
        );
    }
    if !excluded.is_empty() {
        out.push_str("\n# Seen but not suggested:\n");
        for item in excluded.values() {
            let ports = if item.ports.is_empty() {
                String::new()
            } else {
                format!(" ports {}", ports_list(item.ports.iter().copied()))
            };
            let _ = writeln!(
                out,
                "#   {}{ports} x{}: {}",
                comment_text(&item.host),
                item.attempts,
                comment_text(&item.why)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests;
