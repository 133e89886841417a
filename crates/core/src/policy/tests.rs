//! Unit tests of the policy engine: parsing with positions, validation, warnings,
//! matching, merging, report mode.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::*;
use crate::target::{HostName, Target};

mod credentials;
mod decide;
mod validate;

fn policy(yaml: &str) -> Policy {
    match Policy::from_yaml("test.yaml", yaml) {
        Ok((policy, _)) => policy,
        Err(error) => panic!("policy refused:\n{error}"),
    }
}

fn warnings(yaml: &str) -> Vec<String> {
    match Policy::from_yaml("test.yaml", yaml) {
        Ok((_, warnings)) => warnings.iter().map(ToString::to_string).collect(),
        Err(error) => panic!("policy refused:\n{error}"),
    }
}

/// The diagnostics of a refused policy, one string per line.
fn errors(yaml: &str) -> Vec<String> {
    match Policy::from_yaml("test.yaml", yaml) {
        Ok(_) => panic!("policy accepted:\n{yaml}"),
        Err(error) => error.diagnostics.iter().map(ToString::to_string).collect(),
    }
}

/// The single error of a refused policy.
fn error(yaml: &str) -> String {
    let errors = errors(yaml);
    let only_errors: Vec<_> = errors.iter().filter(|e| e.contains(": error: ")).collect();
    assert_eq!(only_errors.len(), 1, "expected one error, got {errors:#?}");
    only_errors[0].clone()
}

fn set(yaml: &str) -> PolicySet {
    PolicySet::from(policy(yaml))
}

fn decide(set: &PolicySet, host: &str, port: u16) -> (Verdict, Reason, Option<String>) {
    let target = Target::parse_host(host).expect("valid target");
    let decision = set.decide(&target, port);
    (
        decision.verdict,
        decision.reason,
        decision.rule.map(|rule| rule.to_string()),
    )
}

fn allowed(set: &PolicySet, host: &str, port: u16) -> bool {
    decide(set, host, port).0 == Verdict::Allow
}

fn name_decision(set: &PolicySet, name: &str) -> (Verdict, Reason) {
    let decision = set.decide_name(&HostName::parse(name).expect("valid name"));
    (decision.verdict, decision.reason)
}

fn address(set: &PolicySet, addr: &str, port: u16) -> (Verdict, Reason, Option<String>) {
    let addr: IpAddr = addr.parse().expect("address");
    let decision = set.check_address(addr, port);
    (
        decision.verdict,
        decision.reason,
        decision.rule.map(|rule| rule.to_string()),
    )
}

#[test]
fn parse_budget_refuses_oversize_text_before_parsing() {
    let mut yaml = String::from("version: 1\nallow:\n");
    while yaml.len() <= 1024 * 1024 {
        yaml.push_str("  - host: a.example.com\n");
    }
    let started = Instant::now();
    let message = error(&yaml);
    assert!(
        message.starts_with("test.yaml:1:1: error: the policy is "),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn parse_budget_refuses_an_alias_bomb_quickly() {
    // Billion laughs: 10 levels of 10 aliases, under a key that takes a list.
    let mut yaml = String::from(
        "version: 1\nallow:\n  - host: a.example.com\n    ports: &l0 [\"1\",\"1\",\"1\",\"1\",\"1\",\"1\",\"1\",\"1\",\"1\",\"1\"]\n",
    );
    for level in 1..10 {
        let prev = level - 1;
        let refs = vec![format!("*l{prev}"); 10].join(",");
        yaml.push_str(&format!(
            "  - host: b{level}.example.com\n    ports: &l{level} [{refs}]\n"
        ));
    }
    let started = Instant::now();
    let refused = Policy::from_yaml("bomb.yaml", &yaml)
        .unwrap_err()
        .to_string();
    // Typed parsing stops at the first alias that expands to a list where a port belongs.
    assert_eq!(
        refused,
        "bomb.yaml:6:17: error: YAML: expected a single value here (through an alias of the anchor at 4:16)"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn parse_budget_caps_alias_count() {
    // Flat aliases type-check (a port list of strings) but exceed the alias budget.
    let refs = vec!["*p"; 20_000].join(",");
    let yaml = format!(
        "version: 1\nallow:\n  - host: a.example.com\n    ports: [&p \"443\"]\n  - host: b.example.com\n    ports: [{refs}]\n"
    );
    let started = Instant::now();
    let message = error(&yaml);
    assert!(message.starts_with("test.yaml:"), "{message}");
    assert!(message.contains("parser budget exceeded"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn parse_budget_refuses_deep_nesting() {
    let yaml = format!(
        "version: 1\nallow: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let started = Instant::now();
    let message = error(&yaml);
    assert!(message.starts_with("test.yaml:2:"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn host_ports_are_the_ports_of_host_allow_rules_only() {
    let merged = PolicySet::merge(vec![
        policy(
            "version: 1\nallow:\n  - host: api.test\n    ports: [8443, 18080]\n  - host: \"*.db.test\"\n    ports: [5432]\n  - host: plain.test\n  - cidr: 10.0.0.0/8\n    ports: [9000]\ndeny:\n  - host: bad.test\n    ports: [7000]\n",
        ),
        policy("version: 1\nallow:\n  - host: other.test\n    ports: [18080, 6379]\n"),
    ]).unwrap();
    assert_eq!(merged.host_ports(), [443, 5432, 6379, 8443, 18080]);
    assert!(
        PolicySet::merge(Vec::new())
            .unwrap()
            .host_ports()
            .is_empty()
    );
}
