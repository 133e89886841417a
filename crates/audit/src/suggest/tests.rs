use std::path::Path;

use egress_core::policy::{Policy, PolicySet, Verdict};
use egress_core::target::Target;
use serde_json::json;

use super::*;
use crate::log::read_into;

fn record(kind: &str, host: &str, port: Option<u16>, decision: &str, reason: &str) -> String {
    json!({
        "v": 1, "ts": "2026-11-29T18:40:43.123Z", "run": "r-1", "policy": "report-all",
        "kind": kind, "client": "10.0.0.3:4000", "host": host, "port": port,
        "decision": decision, "reason": reason, "rule": null, "addr": null,
        "bytes_up": 0, "bytes_down": 0, "duration_ms": 0, "seq": 0, "prev": "",
    })
    .to_string()
}

fn draft(lines: &[String], wildcard_after: usize) -> String {
    let mut log = AuditLog::default();
    read_into(Path::new("a.log"), lines.join("\n").as_bytes(), &mut log).unwrap();
    suggest(
        &log,
        &SuggestOptions {
            name: "drafted".to_owned(),
            wildcard_after,
            sources: vec!["a.log".to_owned()],
        },
    )
}

/// The draft as the engine reads it: no errors, no warnings.
fn load(yaml: &str) -> PolicySet {
    let (policy, warnings) = Policy::from_yaml("draft.yaml", yaml)
        .unwrap_or_else(|error| panic!("draft refused:\n{error}\n{yaml}"));
    assert!(warnings.is_empty(), "{warnings:?}\n{yaml}");
    PolicySet::from(policy)
}

fn allows(set: &PolicySet, host: &str, port: u16) -> bool {
    let target = Target::parse_host(host).unwrap();
    set.decide(&target, port).verdict == Verdict::Allow
}

/// One would_block `connect` record to port 443 per name.
fn lines_for(names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|name| record("connect", name, Some(443), "would_block", "not_allowed"))
        .collect()
}

fn allow_lines(yaml: &str) -> Vec<&str> {
    yaml.lines()
        .filter(|l| l.trim_start().starts_with("- host:"))
        .collect()
}

#[test]
fn names_the_program_wanted_become_exact_rules_with_their_ports() {
    let yaml = draft(
        &[
            record(
                "connect",
                "api.example.org",
                Some(443),
                "would_block",
                "not_allowed",
            ),
            record("connect", "api.example.org", Some(443), "allowed", "rule"),
            record(
                "http",
                "API.example.org.",
                Some(8080),
                "would_block",
                "not_allowed",
            ),
            record(
                "connect",
                "pypi.example.net",
                Some(443),
                "blocked",
                "port_not_allowed",
            ),
            record(
                "tls",
                "cdn.example.com",
                Some(443),
                "failed",
                "connect_failed",
            ),
            record("dns", "api.example.org", None, "would_block", "not_allowed"),
        ],
        DEFAULT_WILDCARD_AFTER,
    );
    assert_eq!(
        allow_lines(&yaml),
        [
            "  - host: \"api.example.org\"",
            "  - host: \"cdn.example.com\"",
            "  - host: \"pypi.example.net\""
        ],
        "{yaml}"
    );
    assert!(yaml.contains("  # 443 x2, 8080 x1; allowed 1, would_block 2\n  - host: \"api.example.org\"\n    ports: [443, 8080]"), "{yaml}");
    let set = load(&yaml);
    assert!(allows(&set, "api.example.org", 443));
    assert!(allows(&set, "api.example.org", 8080));
    assert!(allows(&set, "pypi.example.net", 443));
    assert!(!allows(&set, "api.example.org", 80));
}

#[test]
fn literals_floor_addresses_and_failed_names_are_comments_with_their_reason() {
    let yaml = draft(
        &[
            record(
                "connect",
                "169.254.169.254",
                Some(80),
                "blocked",
                "private_address",
            ),
            record("http", "192.0.2.1", Some(80), "would_block", "ip_literal"),
            record("http", "9.9.9.9", Some(80), "would_block", "ip_literal"),
            record(
                "connect",
                "[2001:db8::1]",
                Some(443),
                "would_block",
                "ip_literal",
            ),
            record(
                "connect",
                "internal.example.org",
                Some(443),
                "blocked",
                "private_address",
            ),
            record(
                "connect",
                "nx.example.org",
                Some(443),
                "failed",
                "resolve_failed",
            ),
            record(
                "dns",
                "looked-up.example.org",
                None,
                "would_block",
                "not_allowed",
            ),
            record(
                "connect",
                "gist.example.org",
                Some(443),
                "blocked",
                "denied",
            ),
            record(
                "connect",
                "fronted.example.org",
                Some(443),
                "blocked",
                "sni_mismatch",
            ),
        ],
        DEFAULT_WILDCARD_AFTER,
    );
    assert!(allow_lines(&yaml).is_empty(), "{yaml}");
    assert!(yaml.contains("allow: []"));
    for expected in [
        "#   169.254.169.254 ports [80] x1: IP literal in the private-address floor",
        "#   9.9.9.9 ports [80] x1: IP literal: an address is allowed only by a `cidr` rule",
        "#   192.0.2.1 ports [80] x1: IP literal in the private-address floor",
        "#   [2001:db8::1] ports [443] x1: IP literal in the private-address floor",
        "#   internal.example.org x1: resolved into the private-address floor",
        "#   nx.example.org x1: only failed to resolve (resolve_failed)",
        "#   looked-up.example.org x1: only looked up over DNS",
        "#   gist.example.org x1: refused by a deny rule (denied)",
        "#   fronted.example.org x1: refused for how it was asked, not where: sni_mismatch x1",
    ] {
        assert!(yaml.contains(expected), "missing `{expected}` in:\n{yaml}");
    }
    load(&yaml);
}

#[test]
fn a_wildcard_only_after_enough_siblings_and_never_over_shared_hosting() {
    let under = |suffix: &str, n: usize| -> Vec<String> {
        (0..n)
            .map(|i| {
                record(
                    "connect",
                    &format!("n{i}.{suffix}"),
                    Some(443),
                    "would_block",
                    "not_allowed",
                )
            })
            .collect()
    };
    let four = draft(&under("example.org", 4), 5);
    assert_eq!(allow_lines(&four).len(), 4, "{four}");
    let five = draft(&under("example.org", 5), 5);
    assert_eq!(
        allow_lines(&five),
        ["  - host: \"*.example.org\""],
        "{five}"
    );
    assert!(five.contains("#   n3.example.org: 443 x1; would_block 1"));
    let set = load(&five);
    assert!(allows(&set, "n0.example.org", 443));
    // Under a multi-label public suffix the registrable domain is what groups names, and
    // the wildcard is their narrowest common parent.
    let uk = draft(&under("shop.example.co.uk", 6), 5);
    assert_eq!(
        allow_lines(&uk),
        ["  - host: \"*.shop.example.co.uk\""],
        "{uk}"
    );
    // Shared hosting: the engine would warn, so each name stays exact.
    for shared in ["googleapis.com", "s3.amazonaws.com", "github.io", "co.uk"] {
        let yaml = draft(&under(shared, 7), 5);
        assert_eq!(allow_lines(&yaml).len(), 7, "{shared}:\n{yaml}");
        load(&yaml);
    }
    // 0 turns widening off.
    assert_eq!(allow_lines(&draft(&under("example.org", 9), 0)).len(), 9);
}

#[test]
fn hostile_hosts_cannot_break_the_yaml_or_the_comment() {
    let hostile = [
        "evil.example.org\n  - host: attacker.example.net\n    ports: [22]",
        "x\r# y\u{2028}- host: z.example.net\u{202e}",
        "\u{feff}zero\u{200b}width\u{fffe}",
        "\"quoted\": {a: [1]}",
    ];
    let mut lines: Vec<String> = hostile
        .iter()
        .map(|host| record("connect", host, Some(443), "would_block", "bad_request"))
        .collect();
    lines.push(record(
        "connect",
        "ok.example.org",
        Some(443),
        "would_block",
        "not_allowed",
    ));
    let yaml = draft(&lines, 5);
    assert_eq!(
        allow_lines(&yaml),
        ["  - host: \"ok.example.org\""],
        "{yaml}"
    );
    for line in yaml.lines() {
        assert!(
            line.chars().all(|c| c == ' ' || c.is_ascii_graphic()),
            "only printable ASCII: {line:?}"
        );
    }
    assert!(
        yaml.contains("evil.example.org\\x0a  - host: attacker.example.net"),
        "{yaml}"
    );
    let set = load(&yaml);
    assert!(!allows(&set, "attacker.example.net", 22));
    assert!(!allows(&set, "z.example.net", 443));
}

#[test]
fn comment_text_keeps_printable_ascii_only() {
    assert_eq!(comment_text("a.b"), "a.b");
    assert_eq!(comment_text("é\u{1b}"), "\\u{e9}\\x1b");
}

fn would_block(host: &str) -> String {
    record("connect", host, Some(443), "would_block", "not_allowed")
}

/// Five siblings ask for `*.example.com`, but the same logs show one name under it refused
/// by a deny rule and one resolving into the floor: the wildcard would allow both, so the
/// names stay exact and the comment says why.
#[test]
fn a_wildcard_never_covers_a_name_refused_by_a_deny_rule_or_the_floor() {
    let mut lines: Vec<String> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|label| would_block(&format!("{label}.example.com")))
        .collect();
    let refused = [
        record(
            "connect",
            "gist.example.com",
            Some(443),
            "blocked",
            "denied",
        ),
        record(
            "connect",
            "meta.example.com",
            Some(80),
            "blocked",
            "private_address",
        ),
    ];
    for one in [&refused[..1], &refused[1..], &refused[..]] {
        let mut with = lines.clone();
        with.extend(one.iter().cloned());
        let yaml = draft(&with, 5);
        assert_eq!(allow_lines(&yaml).len(), 5, "{yaml}");
        assert!(
            yaml.contains("  # Not widened to *.example.com, though 5 names were seen under it (--wildcard-after 5):"),
            "{yaml}"
        );
        let set = load(&yaml);
        assert!(allows(&set, "a.example.com", 443));
        assert!(!allows(&set, "gist.example.com", 443));
        assert!(!allows(&set, "meta.example.com", 443));
    }
    let yaml = draft(&[lines.clone(), refused.to_vec()].concat(), 5);
    assert!(
        yaml.contains("  #   it would also allow gist.example.com (denied), meta.example.com (private_address), refused in these logs."),
        "{yaml}"
    );
    // Refused for how it was asked, or the apex (which a wildcard does not match): widened.
    lines.push(record(
        "connect",
        "f.example.com",
        Some(443),
        "blocked",
        "sni_mismatch",
    ));
    lines.push(record(
        "connect",
        "example.com",
        Some(443),
        "blocked",
        "denied",
    ));
    assert_eq!(
        allow_lines(&draft(&lines, 5)),
        ["  - host: \"*.example.com\""]
    );
}

/// A name the program asked for that also resolved into the floor is still a rule, but its
/// comment says so: the reviewer decides with every refusal in view.
#[test]
fn a_suggested_name_also_refused_says_so_in_its_comment() {
    let yaml = draft(
        &[
            would_block("internal.example.org"),
            record(
                "connect",
                "internal.example.org",
                Some(443),
                "blocked",
                "private_address",
            ),
            would_block("gist.example.org"),
            record("connect", "gist.example.org", Some(22), "blocked", "denied"),
        ],
        5,
    );
    assert!(
        yaml.contains("  # 443 x1; would_block 1; ALSO REFUSED: private_address x1 (resolved into the private-address floor: an internal name, or DNS rebinding? the floor still holds under this rule)\n  - host: \"internal.example.org\""),
        "{yaml}"
    );
    assert!(
        yaml.contains("; ALSO REFUSED: denied x1 (by a deny rule of the logged policy; this draft has no deny rules)\n  - host: \"gist.example.org\""),
        "{yaml}"
    );
    load(&yaml);
}

/// Names YAML would read as another value, or as a different string, are quoted in the
/// draft; a record with port 0 (no rule can name it) is skipped. The draft always passes the
/// engine's check, and every suggested name is allowed as itself.
#[test]
fn no_host_breaks_the_draft() {
    let words = [
        "null",
        "Null",
        "NULL",
        "~",
        "true",
        "True",
        "false",
        "yes",
        "no",
        "on",
        "off",
        "y",
        "n",
        "nan",
        ".nan",
        "inf",
        ".inf",
        "-.inf",
        "0",
        "123",
        "0x1f",
        "0o17",
        "1e3",
        "1_000",
        "12:30",
        "2001-12-14",
        "=",
        "<<",
        "-",
        "?",
        "!",
        "&a",
        "*a",
        "|",
        ">",
        "#",
        "%",
        "@",
        "`",
        "'",
        "\"",
        "{}",
        "[]",
        ",",
        ":",
        "xn--bcher-kva",
        "a-",
        "-a",
        "_a",
        "0b1",
    ];
    let mut hosts: Vec<String> = Vec::new();
    for a in words {
        hosts.push(a.to_owned());
        hosts.push(format!("{a}."));
        for b in ["example", "com", "null", "1e3", "true"] {
            hosts.push(format!("{a}.{b}"));
            hosts.push(format!("{b}.{a}"));
        }
    }
    let mut lines: Vec<String> = hosts.iter().map(|host| would_block(host)).collect();
    lines.push(record(
        "connect",
        "zero.example.net",
        Some(0),
        "would_block",
        "not_allowed",
    ));
    for wildcard_after in [0, 5] {
        let yaml = draft(&lines, wildcard_after);
        let set = load(&yaml);
        assert!(!yaml.contains("zero.example.net"), "{yaml}");
        for host in &hosts {
            let Ok(checked) = parse_host_pattern(host, PatternUse::Allow) else {
                continue;
            };
            let HostPattern::Exact(name) = checked.pattern else {
                continue;
            };
            assert!(
                allows(&set, &name, 443),
                "{host:?} ({name}) not allowed by:\n{yaml}"
            );
        }
    }
}

/// Five names under `svc.example.com` give `*.svc.example.com`: the narrowest parent that
/// covers them, not the whole registrable domain.
#[test]
fn a_wildcard_is_the_narrowest_common_parent_of_its_names() {
    let names: Vec<String> = (1..=5).map(|n| format!("n{n}.svc.example.com")).collect();
    let deep = draft(&lines_for(&names), 5);
    assert_eq!(
        allow_lines(&deep),
        ["  - host: \"*.svc.example.com\""],
        "{deep}"
    );
    // A name that is the common parent itself is not below it: one label up.
    let mut with_parent = names.clone();
    with_parent.push("svc.example.com".to_owned());
    let up = draft(&lines_for(&with_parent), 5);
    assert!(
        allow_lines(&up).contains(&"  - host: \"*.example.com\""),
        "{up}"
    );
    // Names under different subdomains share only the registrable domain.
    let mixed: Vec<String> = (1..=5).map(|n| format!("a.s{n}.example.com")).collect();
    let wide = draft(&lines_for(&mixed), 5);
    assert_eq!(
        allow_lines(&wide),
        ["  - host: \"*.example.com\""],
        "{wide}"
    );
}
