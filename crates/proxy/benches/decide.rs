//! How fast the policy engine decides: a policy of 10,000 host rules (8,000 exact names,
//! 2,000 wildcards) and lookups that hit an exact rule, hit a wildcard, or miss. The index
//! is keyed by name and suffix, so the cost depends on the number of labels in the name, not
//! on the number of rules.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use egress_core::policy::{Policy, PolicySet, Verdict};
use egress_core::target::{HostName, Target};

const EXACT_RULES: usize = 8_000;
const WILDCARD_RULES: usize = 2_000;

fn ten_thousand_rules() -> PolicySet {
    let mut yaml = String::from("version: 1\nname: bench\nallow:\n");
    for i in 0..EXACT_RULES {
        yaml.push_str(&format!("  - host: api{i}.service{}.example.com\n", i % 97));
    }
    for i in 0..WILDCARD_RULES {
        yaml.push_str(&format!(
            "  - host: \"*.tenant{i}.example.net\"\n    ports: [443, 8443]\n"
        ));
    }
    yaml.push_str("deny:\n  - host: blocked.tenant7.example.net\n");
    let (policy, _warnings) = Policy::from_yaml("bench.yaml", &yaml).expect("bench policy");
    assert_eq!(policy.allow_count(), EXACT_RULES + WILDCARD_RULES);
    PolicySet::from(policy)
}

fn target(raw: &str) -> Target {
    Target::parse_host(raw).expect("bench target")
}

fn bench_decide(c: &mut Criterion) {
    let set = ten_thousand_rules();
    let exact_hit = target("api4321.service53.example.com");
    let wildcard_hit = target("a.b.tenant1234.example.net");
    let miss = target("api4321.service54.example.com");
    let deep_miss = target("a.b.c.d.e.f.g.h.example.org");
    let ip = target("203.0.113.9");
    assert_eq!(set.decide(&exact_hit, 443).verdict, Verdict::Allow);
    assert_eq!(set.decide(&wildcard_hit, 8443).verdict, Verdict::Allow);
    assert_eq!(set.decide(&miss, 443).verdict, Verdict::Block);
    assert_eq!(set.decide(&deep_miss, 443).verdict, Verdict::Block);

    let mut group = c.benchmark_group("decide_10k_rules");
    group.bench_function("exact_hit", |b| {
        b.iter(|| set.decide(black_box(&exact_hit), black_box(443)))
    });
    group.bench_function("wildcard_hit", |b| {
        b.iter(|| set.decide(black_box(&wildcard_hit), black_box(8443)))
    });
    group.bench_function("miss", |b| {
        b.iter(|| set.decide(black_box(&miss), black_box(443)))
    });
    group.bench_function("miss_9_labels", |b| {
        b.iter(|| set.decide(black_box(&deep_miss), black_box(443)))
    });
    group.bench_function("port_miss", |b| {
        b.iter(|| set.decide(black_box(&exact_hit), black_box(80)))
    });
    group.bench_function("ip_literal", |b| {
        b.iter(|| set.decide(black_box(&ip), black_box(443)))
    });
    let name = HostName::parse("x.tenant99.example.net").expect("bench name");
    group.bench_function("decide_name_wildcard_hit", |b| {
        b.iter(|| set.decide_name(black_box(&name)))
    });
    group.finish();

    // What every door pays before deciding: classifying the raw host.
    let mut parse = c.benchmark_group("parse");
    parse.bench_function("parse_host_name", |b| {
        b.iter(|| Target::parse_host(black_box("API4321.Service53.example.com.")))
    });
    parse.bench_function("parse_host_idn", |b| {
        b.iter(|| Target::parse_host(black_box("bücher.example.de")))
    });
    parse.finish();
}

criterion_group!(benches, bench_decide);
criterion_main!(benches);
