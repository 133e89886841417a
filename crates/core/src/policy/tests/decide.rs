//! Matching: normalisation, wildcard label boundaries, ports, deny, IP targets, the floor,
//! DNS names, merging and report mode.

use super::*;

#[test]
fn exact_rules_match_only_that_name() {
    let set = set("version: 1\nname: t\nallow:\n  - host: API.X.com.\n");
    assert_eq!(
        decide(&set, "api.x.com", 443),
        (Verdict::Allow, Reason::Rule, Some("t:allow[0]".into()))
    );
    assert!(allowed(&set, "API.X.COM.", 443));
    for other in [
        "evilapi.x.com",
        "api.x.com.evil.net",
        "x.com",
        "a.api.x.com",
        "api-x.com",
    ] {
        assert_eq!(
            decide(&set, other, 443),
            (Verdict::Block, Reason::NotAllowed, None),
            "{other}"
        );
    }
}

#[test]
fn idn_rules_match_their_punycode() {
    let set = set("version: 1\nallow:\n  - host: bücher.de\n");
    assert!(allowed(&set, "xn--bcher-kva.de", 443));
    assert!(allowed(&set, "BÜCHER.de", 443));
}

#[test]
fn wildcards_match_one_or_more_labels_at_boundaries() {
    let set = set("version: 1\nallow:\n  - host: \"*.x.com\"\n");
    assert!(allowed(&set, "a.x.com", 443));
    assert!(allowed(&set, "a.b.x.com", 443));
    assert!(allowed(&set, "A.B.X.COM.", 443));
    assert!(!allowed(&set, "x.com", 443));
    assert!(!allowed(&set, "evilx.com", 443));
    assert!(!allowed(&set, "a.x.com.evil.net", 443));
    assert!(!allowed(&set, "x.com.a", 443));
}

#[test]
fn ports_default_to_443_and_are_checked() {
    let set = set(
        "version: 1\nname: t\nallow:\n  - host: a.com\n  - host: b.com\n    ports: [80, 8080]\n",
    );
    assert!(allowed(&set, "a.com", 443));
    assert_eq!(
        decide(&set, "a.com", 80),
        (
            Verdict::Block,
            Reason::PortNotAllowed,
            Some("t:allow[0]".into())
        )
    );
    assert!(allowed(&set, "b.com", 8080));
    assert!(!allowed(&set, "b.com", 443));
}

#[test]
fn exact_rule_decides_before_wildcard_and_ports_combine() {
    let set = set(
        "version: 1\nname: t\nallow:\n  - host: \"*.x.com\"\n    ports: [8443]\n  - host: a.x.com\n",
    );
    assert_eq!(
        decide(&set, "a.x.com", 443).2.as_deref(),
        Some("t:allow[1]")
    );
    assert_eq!(
        decide(&set, "a.x.com", 8443).2.as_deref(),
        Some("t:allow[0]")
    );
    assert_eq!(decide(&set, "b.x.com", 443).1, Reason::PortNotAllowed);
}

#[test]
fn deny_beats_allow() {
    let set = set(
        "version: 1\nname: t\nallow:\n  - host: \"*.github.com\"\n    ports: [443, 22]\n  - host: gist.github.com\ndeny:\n  - host: gist.github.com\n  - host: \"*.internal.github.com\"\n    ports: [22]\n",
    );
    // A deny host rule without ports denies every port.
    assert_eq!(
        decide(&set, "gist.github.com", 443),
        (Verdict::Block, Reason::Denied, Some("t:deny[0]".into()))
    );
    assert_eq!(decide(&set, "gist.github.com", 1).1, Reason::Denied);
    assert_eq!(decide(&set, "a.internal.github.com", 22).1, Reason::Denied);
    assert!(allowed(&set, "a.internal.github.com", 443));
    assert!(allowed(&set, "api.github.com", 22));
}

#[test]
fn ip_targets_need_a_cidr_rule() {
    let set = set(
        "version: 1\nname: t\nallow:\n  - host: a.com\n  - cidr: 203.0.113.0/24\n    ports: [8443]\n  - cidr: 2001:db8::/32\ndeny:\n  - cidr: 203.0.113.7/32\n",
    );
    assert_eq!(
        decide(&set, "8.8.8.8", 443),
        (Verdict::Block, Reason::IpLiteral, None)
    );
    // Every spelling of the same address is the same address.
    for spelling in [
        "127.0.0.1",
        "127.1",
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "[::ffff:127.0.0.1]",
    ] {
        assert_eq!(
            decide(&set, spelling, 443).1,
            Reason::IpLiteral,
            "{spelling}"
        );
    }
    assert_eq!(
        decide(&set, "203.0.113.5", 8443),
        (Verdict::Allow, Reason::Rule, Some("t:allow[1]".into()))
    );
    assert_eq!(decide(&set, "0xcb007105", 8443).0, Verdict::Allow);
    assert_eq!(decide(&set, "[::ffff:203.0.113.5]", 8443).0, Verdict::Allow);
    assert_eq!(
        decide(&set, "203.0.113.5", 443),
        (
            Verdict::Block,
            Reason::PortNotAllowed,
            Some("t:allow[1]".into())
        )
    );
    assert_eq!(
        decide(&set, "203.0.113.7", 8443),
        (Verdict::Block, Reason::Denied, Some("t:deny[0]".into()))
    );
    assert!(allowed(&set, "[2001:db8::5]", 443));
}

#[test]
fn check_address_applies_the_floor_unless_a_cidr_rule_covers_it() {
    let set = set(
        "version: 1\nname: t\nallow:\n  - host: a.com\n  - cidr: 127.0.0.0/8\n    ports: [8080]\ndeny:\n  - cidr: 93.184.216.0/24\n",
    );
    assert_eq!(
        address(&set, "93.184.215.1", 443),
        (Verdict::Allow, Reason::Rule, None)
    );
    assert_eq!(
        address(&set, "93.184.216.34", 443),
        (Verdict::Block, Reason::Denied, Some("t:deny[0]".into()))
    );
    assert_eq!(
        address(&set, "169.254.169.254", 80),
        (Verdict::Block, Reason::PrivateAddress, None)
    );
    assert_eq!(
        address(&set, "::ffff:169.254.169.254", 80).1,
        Reason::PrivateAddress
    );
    assert_eq!(
        address(&set, "64:ff9b::a9fe:a9fe", 80).1,
        Reason::PrivateAddress
    );
    assert_eq!(
        address(&set, "127.0.0.1", 8080),
        (Verdict::Allow, Reason::Rule, Some("t:allow[1]".into()))
    );
    assert_eq!(address(&set, "::ffff:127.0.0.1", 8080).0, Verdict::Allow);
    // The exemption is per port.
    assert_eq!(address(&set, "127.0.0.1", 443).1, Reason::PrivateAddress);
}

#[test]
fn dns_names_allowed_on_any_port() {
    let set = set(
        "version: 1\nallow:\n  - host: a.com\n    ports: [8443]\n  - host: \"*.b.com\"\n  - host: c.com\n    ports: [22]\ndeny:\n  - host: x.b.com\n  - host: c.com\n    ports: [22]\n",
    );
    assert_eq!(name_decision(&set, "a.com"), (Verdict::Allow, Reason::Rule));
    assert_eq!(
        name_decision(&set, "y.b.com"),
        (Verdict::Allow, Reason::Rule)
    );
    assert_eq!(
        name_decision(&set, "x.b.com"),
        (Verdict::Block, Reason::Denied)
    );
    assert_eq!(
        name_decision(&set, "b.com"),
        (Verdict::Block, Reason::NotAllowed)
    );
    // Allowed only on a port a deny rule takes: nothing left to reach.
    assert_eq!(
        name_decision(&set, "c.com"),
        (Verdict::Block, Reason::Denied)
    );
    assert_eq!(
        name_decision(&set, "evil.com"),
        (Verdict::Block, Reason::NotAllowed)
    );
}

#[test]
fn report_mode_lets_allowlist_refusals_through_but_not_deny_or_floor() {
    let set = set("version: 1\nmode: report\nallow:\n  - host: a.com\ndeny:\n  - host: evil.com\n");
    assert_eq!(set.mode(), Mode::Report);
    assert_eq!(decide(&set, "b.com", 443).0, Verdict::WouldBlock);
    assert_eq!(decide(&set, "b.com", 443).1, Reason::NotAllowed);
    assert_eq!(decide(&set, "a.com", 80).0, Verdict::WouldBlock);
    assert_eq!(decide(&set, "a.com", 80).1, Reason::PortNotAllowed);
    assert_eq!(decide(&set, "1.2.3.4", 443).0, Verdict::WouldBlock);
    assert_eq!(decide(&set, "1.2.3.4", 443).1, Reason::IpLiteral);
    assert_eq!(decide(&set, "evil.com", 443).0, Verdict::Block);
    assert_eq!(
        name_decision(&set, "b.com"),
        (Verdict::WouldBlock, Reason::NotAllowed)
    );
    assert_eq!(
        name_decision(&set, "evil.com"),
        (Verdict::Block, Reason::Denied)
    );
    assert_eq!(address(&set, "10.0.0.1", 443).1, Reason::PrivateAddress);
    assert_eq!(address(&set, "10.0.0.1", 443).0, Verdict::Block);
}

#[test]
fn merged_runtime_requirements_keep_what_all_allow() {
    let gvisor = policy("version: 1\nname: a\nlimits:\n  runtime: runsc\n");
    let also_gvisor = policy("version: 1\nname: b\nlimits:\n  runtime: runsc\n");
    let kata = policy("version: 1\nname: c\nlimits:\n  runtime: kata\n");
    let free = policy("version: 1\nname: d\n");
    let runtime =
        |policies: Vec<Policy>| PolicySet::merge(policies).unwrap().limits().runtime.clone();
    assert_eq!(
        runtime(vec![gvisor.clone(), free.clone()]),
        Some(vec!["runsc".to_string()])
    );
    assert_eq!(
        runtime(vec![gvisor.clone(), also_gvisor]),
        Some(vec!["runsc".to_string()])
    );
    assert_eq!(
        runtime(vec![gvisor, kata]),
        Some(Vec::new()),
        "no runtime satisfies both"
    );
    assert_eq!(runtime(vec![free]), None);
}

#[test]
fn merging_unions_rules_and_takes_the_strictest() {
    let openai = policy(
        "version: 1\nname: openai-agent\nmode: report\nallow:\n  - host: api.openai.com\nlimits:\n  timeout: 30s\n  memory: 512MiB\ntls:\n  ports: [443]\n  sni: off\n",
    );
    let github = policy(
        "version: 1\nname: gh\nmode: report\nallow:\n  - host: api.github.com\ndeny:\n  - host: api.openai.com\n    ports: [8443]\nlimits:\n  timeout: 1m\n  memory: 256MiB\n  pids: 10\ntls:\n  ports: [8443]\n  sni: off\n",
    );
    let cli = Policy::from_allow_flags(&["example.org".into()]).unwrap();
    let set = PolicySet::merge(vec![openai.clone(), github.clone(), cli]).unwrap();
    assert_eq!(set.name(), "openai-agent+gh+cli");
    assert_eq!(set.mode(), Mode::Enforce, "cli is enforce");
    assert_eq!(set.limits().timeout, Some(Duration::from_secs(30)));
    assert_eq!(set.limits().memory, Some(256 * 1024 * 1024));
    assert_eq!(set.limits().pids, Some(10));
    assert_eq!(set.limits().cpus, None);
    assert_eq!(set.tls().ports, vec![443, 8443]);
    assert_eq!(
        set.tls().sni,
        SniCheck::Strict,
        "cli keeps the default strict check"
    );
    assert_eq!(
        decide(&set, "api.openai.com", 443).2.as_deref(),
        Some("openai-agent:allow[0]")
    );
    assert_eq!(
        decide(&set, "api.github.com", 443).2.as_deref(),
        Some("gh:allow[0]")
    );
    assert_eq!(
        decide(&set, "example.org", 443).2.as_deref(),
        Some("cli:allow[0]")
    );
    assert_eq!(decide(&set, "api.openai.com", 8443).1, Reason::Denied);

    let reports = PolicySet::merge(vec![openai, github]).unwrap();
    assert_eq!(reports.mode(), Mode::Report);
    assert_eq!(reports.tls().sni, SniCheck::Off);
}

#[test]
fn an_empty_set_denies_everything() {
    let set = PolicySet::merge(Vec::new()).unwrap();
    assert_eq!(set.name(), "none");
    assert_eq!(set.mode(), Mode::Enforce);
    assert_eq!(
        decide(&set, "a.com", 443),
        (Verdict::Block, Reason::NotAllowed, None)
    );
    assert_eq!(decide(&set, "1.1.1.1", 443).1, Reason::IpLiteral);
    assert_eq!(name_decision(&set, "a.com").1, Reason::NotAllowed);
    assert_eq!(address(&set, "10.0.0.1", 443).1, Reason::PrivateAddress);
}

#[test]
fn describe_rule_shows_the_rule_as_written() {
    let set = set(
        "version: 1\nname: t\nallow:\n  - host: \"*.X.com\"\n    ports: [443, 80]\ndeny:\n  - cidr: 10.0.0.0/8\n",
    );
    let rule = set
        .decide(&Target::parse_host("a.x.com").unwrap(), 80)
        .rule
        .unwrap();
    assert_eq!(
        set.describe_rule(&rule).as_deref(),
        Some("host: *.x.com, ports: [80, 443]")
    );
    let deny = set
        .check_address("10.1.1.1".parse().unwrap(), 1)
        .rule
        .unwrap();
    assert_eq!(
        set.describe_rule(&deny).as_deref(),
        Some("cidr: 10.0.0.0/8, ports: any")
    );
}

#[test]
fn policy_set_is_shareable() {
    fn assert_shareable<T: Clone + Send + Sync + 'static>() {}
    assert_shareable::<PolicySet>();
}

#[test]
fn lookups_skip_only_label_counts_no_rule_has() {
    let set = set(
        "version: 1\nallow:\n  - host: \"*.b.c\"\n  - host: \"*.d.e.f.g\"\n  - host: x.y\ndeny:\n  - host: \"*.q.b.c\"\n",
    );
    assert!(allowed(&set, "a.b.c", 443));
    assert!(allowed(&set, "z.z.z.z.z.z.z.z.b.c", 443));
    assert!(allowed(&set, "a.d.e.f.g", 443));
    assert!(allowed(&set, "x.y", 443));
    assert!(!allowed(&set, "a.x.y", 443));
    assert_eq!(decide(&set, "p.q.b.c", 443).1, Reason::Denied);
    assert_eq!(decide(&set, "q.b.c", 443).1, Reason::Rule);
    // The longest possible name: 127 one-letter labels.
    let longest = vec!["a"; 125].join(".") + ".b.c";
    assert_eq!(longest.len(), 253);
    assert!(allowed(&set, &longest, 443));
}

#[test]
fn deny_cidrs_hold_for_ipv4_embedded_in_ipv6() {
    let set = set(
        "version: 1\nname: t\nallow:\n  - cidr: 64:ff9b::/96\n  - cidr: 2002::/16\n  - cidr: 2001::/32\n  - cidr: ::/96\ndeny:\n  - cidr: 93.184.216.34/32\n",
    );
    for spelling in [
        "[64:ff9b::5db8:d822]",
        "[2002:5db8:d822::1]",
        "[::93.184.216.34]",
        "[::ffff:93.184.216.34]",
        "[2001:0:808:808::a247:27dd]",
    ] {
        assert_eq!(
            decide(&set, spelling, 443),
            (Verdict::Block, Reason::Denied, Some("t:deny[0]".into())),
            "{spelling}"
        );
        let addr = spelling.trim_matches(['[', ']']);
        assert_eq!(address(&set, addr, 443).1, Reason::Denied, "{addr}");
    }
    assert_eq!(decide(&set, "[64:ff9b::5db8:d823]", 443).0, Verdict::Allow);
}
