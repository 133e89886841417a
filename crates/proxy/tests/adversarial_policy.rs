//! Red-team cases for the pure engine: host classification, the private-address floor,
//! rule matching, merging, report mode and policy validation — what a hostile client or a
//! sloppy policy author would try. Each case asserts the safe outcome.

use std::net::IpAddr;

use egress_core::audit::{AuditRecord, Kind, Outcome, raw_host_for_log};
use egress_core::floor::is_private;
use egress_core::policy::{Decision, Policy, PolicySet, Reason, Verdict};
use egress_core::target::{HostName, Target};

fn policy(yaml: &str) -> Policy {
    Policy::from_yaml("red.yaml", yaml)
        .unwrap_or_else(|error| panic!("policy refused: {error}"))
        .0
}

fn set(yaml: &str) -> PolicySet {
    PolicySet::from(policy(yaml))
}

fn target(raw: &str) -> Target {
    Target::parse_host(raw).unwrap_or_else(|error| panic!("{raw}: {error}"))
}

fn decide(set: &PolicySet, host: &str, port: u16) -> Decision {
    set.decide(&target(host), port)
}

fn ip(raw: &str) -> IpAddr {
    raw.parse().unwrap()
}

fn refused_yaml(yaml: &str) -> String {
    match Policy::from_yaml("red.yaml", yaml) {
        Ok(_) => panic!("accepted: {yaml}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn every_spelling_of_an_address_is_an_ip_literal_never_a_name() {
    for (raw, expected) in [
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F.0.0.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("127.000.000.001", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("2852039166", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("169.16689662", "169.254.169.254"),
        ("0", "0.0.0.0"),
        ("0x", "0.0.0.0"),
        ("[::ffff:127.0.0.1]", "127.0.0.1"),
        ("::ffff:7f00:1", "127.0.0.1"),
        ("[0:0:0:0:0:ffff:a9fe:a9fe]", "169.254.169.254"),
        ("[::1]", "::1"),
        ("::", "::"),
        ("[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"),
        // Fullwidth digits and the ideographic full stop are IDNA-mapped to ASCII first.
        ("１２７。０。０。１", "127.0.0.1"),
        ("１６９．２５４．１６９．２５４", "169.254.169.254"),
    ] {
        assert_eq!(target(raw), Target::Ip(ip(expected)), "{raw}");
        assert!(HostName::parse(raw).is_err(), "{raw} parsed as a name");
    }
}

#[test]
fn numeric_looking_non_addresses_are_refused_not_treated_as_names() {
    for raw in [
        "256.0.0.1",
        "1.2.3.4.5",
        "08.0.0.1",
        "0x100000000",
        "4294967296",
        "example.123",
        "example.0x1f",
        "127.0.0.1..",
        "99999999999999999999",
    ] {
        assert!(Target::parse_host(raw).is_err(), "{raw} was accepted");
    }
}

#[test]
fn hostile_bytes_in_hosts_are_refused() {
    for raw in [
        "",
        ".",
        "..",
        "site.test\0",
        "site.test\r\nHost: evil.test",
        "site.test evil.test",
        "site.test/evil",
        "site.test\\evil",
        "site.test@evil.test",
        "%73ite.test",
        "site%2etest",
        "site.test#@evil.test",
        "\"site.test\"",
        "site..test",
        ".site.test",
        "[fe80::1%25eth0]",
        "[fe80::1%eth0]",
        "fe80::1%eth0",
        "[::1",
        "site.test:443",
        "ｓｉｔｅ．ｔｅｓｔ＠evil.test",
    ] {
        assert!(Target::parse_host(raw).is_err(), "{raw:?} was accepted");
    }
    let long_label = format!("{}.test", "a".repeat(64));
    assert!(Target::parse_host(&long_label).is_err());
    let long_name = format!("{}test", "abcdefghi.".repeat(25));
    assert!(long_name.len() > 253);
    assert!(Target::parse_host(&long_name).is_err());
    let huge = "a.".repeat(100_000);
    assert!(Target::parse_host(&huge).is_err());
}

#[test]
fn authorities_carry_exactly_one_valid_port() {
    for raw in [
        "site.test:443.evil.test",
        "site.test:0",
        "site.test:65536",
        "site.test:-1",
        "site.test:+443",
        "site.test: 443",
        "site.test:",
        ":443",
        "site.test:443:80",
        "::1:443",
        "[::1]443",
        "[::1]:",
        "http://site.test:443",
        "user@site.test:443",
        "site.test:443/path",
        "site.test:0443x",
        "site.test:000000443",
    ] {
        assert!(
            Target::parse_authority(raw, None).is_err(),
            "{raw:?} was accepted"
        );
    }
    assert_eq!(
        Target::parse_authority("SITE.Test.:0443", None).unwrap(),
        (target("site.test"), 443)
    );
    assert!(Target::parse_authority("site.test", None).is_err());
    assert_eq!(
        Target::parse_authority("site.test", Some(80)).unwrap().1,
        80
    );
}

#[test]
fn confusables_never_match_the_ascii_rule() {
    let set = set("version: 1\nallow:\n  - host: api.openai.com\n");
    // Cyrillic а (U+0430), Greek ο (U+03BF), dotless ı (U+0131).
    for confusable in ["аpi.openai.com", "api.οpenai.com", "apı.openai.com"] {
        let parsed = target(confusable);
        let Target::Name(name) = &parsed else {
            panic!("{confusable} is not a name")
        };
        assert!(name.as_str().contains("xn--"), "{name}");
        assert_eq!(
            set.decide(&parsed, 443).verdict,
            Verdict::Block,
            "{confusable}"
        );
        assert_eq!(
            set.decide_name(name).verdict,
            Verdict::Block,
            "{confusable}"
        );
    }
    // Case and width variants of the same name are the same name.
    assert_eq!(decide(&set, "API.OPENAI.COM.", 443).verdict, Verdict::Allow);
    assert_eq!(
        decide(&set, "ａｐｉ.openai.com", 443).verdict,
        Verdict::Allow
    );
    // And the other way round: a rule written with a confusable does not allow ASCII.
    let set = PolicySet::from(policy("version: 1\nallow:\n  - host: аpi.openai.com\n"));
    assert_eq!(decide(&set, "api.openai.com", 443).verdict, Verdict::Block);
}

#[test]
fn wildcards_stop_at_label_boundaries() {
    let set = set("version: 1\nallow:\n  - host: \"*.x.com\"\n  - host: y.com\n");
    for refused in [
        "x.com",
        "evilx.com",
        "a-x.com",
        "x.com.evil.test",
        "a.x.com.evil.test",
        "a.x.co",
        "a.y.com",
        "xy.com",
        "y.com.x.net",
    ] {
        assert_eq!(
            decide(&set, refused, 443).verdict,
            Verdict::Block,
            "{refused}"
        );
    }
    for allowed in ["a.x.com", "a.b.c.x.com", "A.X.COM.", "_srv.x.com", "y.com"] {
        assert_eq!(
            decide(&set, allowed, 443).verdict,
            Verdict::Allow,
            "{allowed}"
        );
    }
}

#[test]
fn deny_beats_allow_across_merged_policies_whatever_the_order() {
    let allow = "version: 1\nname: a\nallow:\n  - host: \"*.x.com\"\n    ports: [443, 8443]\n  - host: meta.x.com\n";
    let deny = "version: 1\nname: d\ndeny:\n  - host: meta.x.com\n  - host: \"*.internal.x.com\"\n    ports: [8443]\n";
    for policies in [
        vec![policy(allow), policy(deny)],
        vec![policy(deny), policy(allow)],
    ] {
        let set = PolicySet::merge(policies).unwrap();
        for port in [443, 8443] {
            let decision = decide(&set, "META.x.com.", port);
            assert_eq!(
                (decision.verdict, decision.reason),
                (Verdict::Block, Reason::Denied)
            );
            assert_eq!(decision.rule.unwrap().to_string(), "d:deny[0]");
        }
        assert_eq!(
            decide(&set, "db.internal.x.com", 8443).reason,
            Reason::Denied
        );
        assert_eq!(
            decide(&set, "db.internal.x.com", 443).verdict,
            Verdict::Allow
        );
        // The wildcard deny does not cover its own suffix: documented semantics.
        assert_eq!(decide(&set, "internal.x.com", 8443).verdict, Verdict::Allow);
        let name = HostName::parse("meta.x.com").unwrap();
        assert_eq!(set.decide_name(&name).reason, Reason::Denied);
    }
}

#[test]
fn ports_are_matched_exactly() {
    let set =
        set("version: 1\nallow:\n  - host: a.test\n    ports: [443, 8443]\n  - host: b.test\n");
    assert_eq!(decide(&set, "a.test", 8443).verdict, Verdict::Allow);
    for port in [1, 80, 442, 444, 8080, 8444, 65535] {
        assert_eq!(
            decide(&set, "a.test", port).reason,
            Reason::PortNotAllowed,
            "{port}"
        );
    }
    assert_eq!(decide(&set, "b.test", 443).verdict, Verdict::Allow);
    assert_eq!(decide(&set, "b.test", 80).reason, Reason::PortNotAllowed);
}

#[test]
fn report_mode_never_lets_deny_rules_or_the_floor_through() {
    let report = set(
        "version: 1\nmode: report\nallow:\n  - host: a.test\ndeny:\n  - host: evil.test\n  - cidr: 192.0.2.0/24\n",
    );
    assert_eq!(
        decide(&report, "other.test", 443).verdict,
        Verdict::WouldBlock
    );
    assert_eq!(decide(&report, "a.test", 80).verdict, Verdict::WouldBlock);
    let denied = decide(&report, "evil.test", 443);
    assert_eq!(
        (denied.verdict, denied.reason),
        (Verdict::Block, Reason::Denied)
    );
    let denied_ip = decide(&report, "192.0.2.7", 443);
    assert_eq!(
        (denied_ip.verdict, denied_ip.reason),
        (Verdict::Block, Reason::Denied)
    );
    // An IP literal would only be would_block; the floor then stops it.
    assert_eq!(
        decide(&report, "169.254.169.254", 80).verdict,
        Verdict::WouldBlock
    );
    for private in ["127.0.0.1", "169.254.169.254", "10.0.0.1", "::1", "fe80::1"] {
        let decision = report.check_address(ip(private), 80);
        assert_eq!(
            (decision.verdict, decision.reason),
            (Verdict::Block, Reason::PrivateAddress),
            "{private}"
        );
    }
    let denied_addr = report.check_address(ip("192.0.2.7"), 443);
    assert_eq!(denied_addr.verdict, Verdict::Block);
    // One enforcing policy in the merge makes the whole set enforce.
    let merged = PolicySet::merge(vec![
        policy("version: 1\nmode: report\nallow:\n  - host: a.test\n"),
        policy("version: 1\nallow:\n  - host: b.test\n"),
    ])
    .unwrap();
    assert_eq!(decide(&merged, "other.test", 443).verdict, Verdict::Block);
}

/// Addresses an allowed name must never lead to (the private-address floor of
/// `docs/src/security/model.md`), in many spellings.
const PRIVATE: &[&str] = &[
    "127.0.0.1",
    "127.255.255.254",
    "10.0.0.1",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",
    "169.254.0.1",
    "100.64.0.1",
    "100.127.255.255",
    "0.0.0.0",
    "0.1.2.3",
    "224.0.0.1",
    "239.255.255.250",
    "255.255.255.255",
    "240.0.0.1",
    "192.0.0.8",
    "192.0.2.1",
    "198.18.0.1",
    "198.51.100.1",
    "203.0.113.1",
    "::",
    "::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:10.0.0.1",
    "::127.0.0.1",
    "::169.254.169.254",
    "::ffff:0:a9fe:a9fe",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b::7f00:1",
    "64:ff9b::a00:1",
    "64:ff9b:1::1",
    "2002:a9fe:a9fe::",
    "2002:7f00:1::1",
    "2002:a00:1::",
    // Teredo with client 169.254.169.254 (stored inverted) and a public server.
    "2001:0:808:808:0:0:5601:5601",
    "fe80::1",
    "febf::1",
    "fec0::1",
    "fc00::1",
    "fd12:3456::1",
    "ff02::1",
    "ff05::1:3",
    "100::1",
    "2001:db8::1",
];

#[test]
fn the_floor_refuses_every_private_spelling_without_a_cidr_exemption() {
    let set =
        set("version: 1\nallow:\n  - host: a.test\n  - cidr: 198.51.100.0/24\n    ports: [8443]\n");
    for raw in PRIVATE {
        let addr = ip(raw);
        assert!(is_private(addr), "{raw} is not behind the floor");
        for port in [80, 443] {
            let decision = set.check_address(addr, port);
            assert_eq!(
                (decision.verdict, decision.reason),
                (Verdict::Block, Reason::PrivateAddress),
                "{raw}:{port}"
            );
        }
    }
    // The exemption holds only for its own range and port.
    assert_eq!(
        set.check_address(ip("198.51.100.7"), 8443).verdict,
        Verdict::Allow
    );
    assert_eq!(
        set.check_address(ip("198.51.100.7"), 443).verdict,
        Verdict::Block
    );
    assert_eq!(
        set.check_address(ip("::ffff:198.51.100.7"), 8443).verdict,
        Verdict::Allow
    );
    // Public addresses pass (pure check; nothing is contacted).
    for public in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
        assert!(!is_private(ip(public)), "{public}");
    }
}

#[test]
fn a_loopback_cidr_exemption_does_not_open_other_embeddings_of_loopback() {
    let set =
        set("version: 1\nallow:\n  - host: a.test\n  - cidr: 127.0.0.2/32\n    ports: [443]\n");
    assert_eq!(
        set.check_address(ip("127.0.0.2"), 443).verdict,
        Verdict::Allow
    );
    assert_eq!(
        set.check_address(ip("::ffff:127.0.0.2"), 443).verdict,
        Verdict::Allow
    );
    for other in [
        "127.0.0.3",
        "64:ff9b::7f00:3",
        "2002:7f00:3::",
        "::127.0.0.3",
    ] {
        assert_eq!(
            set.check_address(ip(other), 443).verdict,
            Verdict::Block,
            "{other}"
        );
    }
}

/// A sloppy author opens an IPv6 translation prefix (NAT64 or 6to4) to reach IPv4 hosts
/// and denies the metadata address (an allow `::ffff:0:0/96` is refused: the mapped
/// spelling is matched as IPv4, which `0.0.0.0/0` opens here). "A deny rule beats any allow rule" must hold for every
/// spelling of the denied address, not only the IPv4 one.
#[test]
fn deny_cidrs_cover_ipv4_addresses_embedded_in_ipv6() {
    let set = set(
        "version: 1\nallow:\n  - host: a.test\n    ports: [80]\n  - cidr: 64:ff9b::/96\n    ports: [80]\n  - cidr: 2002::/16\n    ports: [80]\n  - cidr: 0.0.0.0/0\n    ports: [80]\ndeny:\n  - cidr: 169.254.169.254/32\n",
    );
    for spelling in [
        "169.254.169.254",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
    ] {
        let literal = set.decide(&Target::Ip(ip(spelling)), 80);
        assert_eq!(
            (literal.verdict, literal.reason),
            (Verdict::Block, Reason::Denied),
            "IP target {spelling}"
        );
        let resolved = set.check_address(ip(spelling), 80);
        assert_eq!(
            (resolved.verdict, resolved.reason),
            (Verdict::Block, Reason::Denied),
            "resolved address {spelling}"
        );
    }
}

#[test]
fn ip_targets_need_a_cidr_rule_and_names_cannot_stand_in_for_one() {
    let set = set("version: 1\nallow:\n  - host: a.test\n  - cidr: 198.51.100.0/24\n");
    assert_eq!(decide(&set, "198.51.100.7", 443).verdict, Verdict::Allow);
    for literal in [
        "127.0.0.1",
        "0x7f000001",
        "[::ffff:127.0.0.1]",
        "8.8.8.8",
        "2130706433",
    ] {
        assert_eq!(
            decide(&set, literal, 443).reason,
            Reason::IpLiteral,
            "{literal}"
        );
    }
    assert_eq!(
        decide(&set, "198.51.100.7", 80).reason,
        Reason::PortNotAllowed
    );
}

#[test]
fn hostile_policies_are_refused_with_a_position() {
    for (yaml, needle) in [
        ("version: 1\nallow:\n  - host: \"*\"\n", "`*` alone"),
        ("version: 1\nallow:\n  - host: \"*.\"\n", "`*` alone"),
        ("version: 1\nallow:\n  - host: \"*.com\"\n", "top-level"),
        (
            "version: 1\nallow:\n  - host: \"*.co.uk\"\n",
            "public suffix",
        ),
        (
            "version: 1\nallow:\n  - host: \"*.CO.UK.\"\n",
            "public suffix",
        ),
        ("version: 1\nallow:\n  - host: \"*.рф\"\n", "top-level"),
        (
            "version: 1\nallow:\n  - host: \"**.x.com\"\n",
            "first label",
        ),
        ("version: 1\nallow:\n  - host: \"*x.com\"\n", "first label"),
        ("version: 1\nallow:\n  - host: \"x.*.com\"\n", "first label"),
        (
            "version: 1\nallow:\n  - host: \"*.*.x.com\"\n",
            "first label",
        ),
        ("version: 1\nallow:\n  - host: a.com:443\n", "port"),
        ("version: 1\nallow:\n  - host: http://a.com\n", "scheme"),
        ("version: 1\nallow:\n  - host: a.com/path\n", "path"),
        ("version: 1\nallow:\n  - host: user@a.com\n", "userinfo"),
        ("version: 1\nallow:\n  - host: 127.0.0.1\n", "IP address"),
        (
            "version: 1\nallow:\n  - host: \"2130706433\"\n",
            "IP address",
        ),
        ("version: 1\nallow:\n  - host: \"[::1]\"\n", "IP address"),
        ("version: 1\nallow:\n  - host: \" a.com\"\n", "spaces"),
        ("version: 1\nallow:\n  - host: a..com\n", "empty label"),
        (
            "version: 1\nallow:\n  - host: \"a.com\\0\"\n",
            "not a valid host",
        ),
        (
            "version: 1\nallow:\n  - host: a.com\n    ports: [0]\n",
            "outside",
        ),
        (
            "version: 1\nallow:\n  - host: a.com\n    ports: [65536]\n",
            "outside",
        ),
        (
            "version: 1\nallow:\n  - host: a.com\n    ports: [\"0x1bb\"]\n",
            "not a number",
        ),
        (
            "version: 1\nallow:\n  - host: a.com\n    ports: []\n",
            "empty",
        ),
        ("version: 1\nallow:\n  - cidr: 10.0.0.1/8\n", "host bits"),
        ("version: 1\nallow:\n  - cidr: 010.0.0.0/8\n", "not a CIDR"),
        ("version: 1\nallow:\n  - cidr: 10.0.0.0/33\n", "too long"),
        (
            "version: 1\nallow:\n  - host: a.com\n    cidr: 10.0.0.0/8\n",
            "both",
        ),
        (
            "version: 1\nallow:\n  - host: a.com\n  - host: b.com\n    hosts: c.com\n",
            "unknown field",
        ),
        ("version: 1\nversion: 1\n", "duplicate"),
        ("version: 2\n", "unsupported version"),
        ("allow:\n  - host: a.com\n", "missing `version"),
        ("version: 1\nmode: Report\n", "unknown mode"),
        ("version: 1\nname: \"a\\nb\"\n", "`name`"),
        (
            "version: 1\nname: \"x\\\",\\\"decision\\\":\\\"allowed\"\n",
            "`name`",
        ),
    ] {
        let message = refused_yaml(yaml);
        assert!(message.contains(needle), "{yaml:?}: {message}");
        assert!(message.starts_with("red.yaml:"), "{message}");
    }
}

#[test]
fn hostile_allow_flags_are_refused() {
    for flag in [
        "*",
        "*.com",
        "*.co.uk",
        "1.2.3.4",
        "127.1",
        "[::1]:443",
        "::1",
        "a.com:0",
        "a.com:65536",
        "a.com:443:80",
        "a.com:",
        "http://a.com",
        "a.com/x",
        "user@a.com",
        " a.com",
        "a.com ",
        "a.com\n",
    ] {
        assert!(
            Policy::from_allow_flags(&[flag.to_owned()]).is_err(),
            "--allow {flag:?} was accepted"
        );
    }
}

#[test]
fn an_empty_merge_denies_everything_and_the_dns_view_agrees() {
    let empty = PolicySet::merge(Vec::new()).unwrap();
    assert_eq!(decide(&empty, "a.test", 443).verdict, Verdict::Block);
    assert_eq!(
        empty
            .decide_name(&HostName::parse("a.test").unwrap())
            .verdict,
        Verdict::Block
    );
    let empty_lists = set("version: 1\nallow: []\ndeny: []\n");
    assert_eq!(decide(&empty_lists, "a.test", 443).verdict, Verdict::Block);
}

#[test]
fn audit_records_stay_one_well_formed_line_whatever_the_host() {
    let hostile: &[&[u8]] = &[
        b"evil\r\n{\"v\":1,\"decision\":\"allowed\"}",
        b"x\",\"decision\":\"allowed\",\"host\":\"y",
        b"\xff\xfe\xc0\x80\xed\xa0\x80",
        b"\x00\x1b[31m\x7f\x08",
        "\u{2028}\u{2029}\u{85}".as_bytes(),
        "\u{202e}lmth.exe\u{2066}".as_bytes(),
        b"\\\"\\u0000",
    ];
    for raw in hostile {
        let host = raw_host_for_log(raw);
        assert!(host.len() <= 256);
        let mut record = AuditRecord::new(Kind::Http, host, Outcome::Blocked, Reason::BadRequest);
        record.run = Some("r".into());
        record.policy = Some("p".into());
        let line = record.to_line();
        // Python's str.splitlines() and JavaScript split there too: a record must stay
        // one line for every reader, so C1 controls and the Unicode separators are escaped.
        assert!(
            !line.contains([
                '\n', '\r', '\u{85}', '\u{2028}', '\u{2029}', '\u{202e}', '\u{2066}'
            ]),
            "{line:?}"
        );
        assert_eq!(line.matches("\"decision\":").count(), 1, "{line}");
        let back: AuditRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, record);
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["decision"], "blocked");
    }
    let long = vec![b'a'; 10_000];
    assert_eq!(raw_host_for_log(&long).len(), 256);
}

/// A hostile policy file must fail fast and cleanly, never hang or overflow the stack.
#[test]
fn yaml_bombs_and_oddities_are_refused_quickly() {
    let started = std::time::Instant::now();
    let mut laughs = String::from("version: 1\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..12 {
        let previous = level - 1;
        laughs.push_str(&format!(
            "a{level}: &a{level} [*a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}]\n"
        ));
    }
    let deep = format!(
        "version: 1\nallow: {}{}\n",
        "[".repeat(50_000),
        "]".repeat(50_000)
    );
    let deep_block = {
        let mut text = String::from("version: 1\nallow:\n");
        for depth in 0..5_000 {
            text.push_str(&" ".repeat(depth * 2 + 2));
            text.push_str("- \n");
        }
        text
    };
    let huge = format!("version: 1\n#{}\n", "x".repeat(2 * 1024 * 1024));
    let many_docs = "version: 1\n---\nversion: 1\nallow:\n  - host: evil.test\n".to_owned();
    let merge_key = "version: 1\nbase: &b\n  host: a.test\nallow:\n  - <<: *b\n".to_owned();
    let null_host = "version: 1\nallow:\n  - host: ~\n".to_owned();
    let bool_port = "version: 1\nallow:\n  - host: a.test\n    ports: [true]\n".to_owned();
    let float_port = "version: 1\nallow:\n  - host: a.test\n    ports: [443.0]\n".to_owned();
    let scalar_ports = "version: 1\nallow:\n  - host: a.test\n    ports: 443\n".to_owned();
    let bom_and_nul = "\u{feff}version: 1\nallow:\n  - host: \"a.test\\0b\"\n".to_owned();
    for (label, yaml) in [
        ("billion laughs", laughs),
        ("deep flow nesting", deep),
        ("deep block nesting", deep_block),
        ("over 1 MiB", huge),
        ("two documents", many_docs),
        ("merge key", merge_key),
        ("null host", null_host),
        ("boolean port", bool_port),
        ("float port", float_port),
        ("scalar ports", scalar_ports),
        ("NUL in host", bom_and_nul),
    ] {
        let result = Policy::from_yaml("bomb.yaml", &yaml);
        assert!(result.is_err(), "{label}: accepted");
        let message = result.err().unwrap().to_string();
        assert!(message.starts_with("bomb.yaml:"), "{label}: {message}");
        assert!(!message.contains('\n') || message.lines().all(|l| l.starts_with("bomb.yaml:")));
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "hostile policies took {:?}",
        started.elapsed()
    );
}

/// Reviewers read policies like code: a host must be the text they see. A YAML `!!binary`
/// tag would otherwise decode `ZXZpbC50ZXN0` into an allowed `evil.test`.
#[test]
fn encoded_scalars_cannot_hide_a_host_from_a_reviewer() {
    for yaml in [
        "version: 1\nallow:\n  - host: !!binary ZXZpbC50ZXN0\n",
        "version: 1\nallow:\n  - host: !!binary |\n      ZXZpbC50ZXN0\n",
        "version: 1\ndeny: []\nallow:\n  - host: a.test\n    ports: [!!binary NDQz]\n  - host: !!binary ZXZpbC50ZXN0\n",
    ] {
        if let Ok((policy, _)) = Policy::from_yaml("red.yaml", yaml) {
            let set = PolicySet::from(policy);
            assert_eq!(
                decide(&set, "evil.test", 443).verdict,
                Verdict::Block,
                "{yaml:?} allows a host its text does not show"
            );
        }
    }
    let hidden_version = Policy::from_yaml("red.yaml", "version: !!binary MQ==\n");
    assert!(hidden_version.is_err(), "an encoded `version` was accepted");
}

#[test]
fn merging_never_weakens_the_tls_check_and_wide_cidrs_are_flagged() {
    use egress_core::policy::SniCheck;
    let lax =
        policy("version: 1\nname: lax\nallow:\n  - host: a.test\ntls:\n  ports: []\n  sni: off\n");
    let strict = policy("version: 1\nname: strict\nallow:\n  - host: b.test\n");
    for policies in [vec![lax.clone(), strict.clone()], vec![strict, lax]] {
        let set = PolicySet::merge(policies).unwrap();
        assert_eq!(set.tls().sni, SniCheck::Strict);
        assert!(set.tls().ports.contains(&443));
    }
    for wide in [
        "0.0.0.0/0",
        "::/0",
        "169.254.0.0/16",
        // (`::ffff:0:0/96` is refused outright: mapped addresses are matched as IPv4.)
        "64:ff9b::/96",
        "2002::/16",
    ] {
        let yaml = format!("version: 1\nallow:\n  - cidr: \"{wide}\"\n");
        let (_, warnings) = Policy::from_yaml("red.yaml", &yaml).unwrap();
        assert!(
            warnings.iter().any(|w| w.message.contains("private")),
            "{wide}: no warning that it opens the private-address floor: {warnings:?}"
        );
    }
}
