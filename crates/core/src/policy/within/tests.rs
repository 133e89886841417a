use super::*;

const UPPER: &str = r#"version: 1
allow:
  - host: api.example.com
    ports: [443, 8443]
  - host: "*.github.com"
  - cidr: 203.0.113.0/25
  - cidr: 203.0.113.128/25
deny:
  - host: gist.github.com
  - cidr: 203.0.113.7/32
    ports: [443]
"#;

/// The diagnostics of `child` (its rules from line 3) checked within [`UPPER`].
fn within(child: &str) -> Vec<String> {
    let (upper, _) = Policy::from_yaml("upper.yaml", UPPER).unwrap();
    let (policy, _) = Policy::from_yaml("child.yaml", child).unwrap();
    check_within("child.yaml", &policy, "upper.yaml", &upper)
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn allow(rule: &str) -> String {
    format!("version: 1\nallow:\n  - {rule}\n")
}

#[track_caller]
fn assert_within(child: &str) {
    assert_eq!(within(child), Vec::<String>::new(), "{child}");
}

#[track_caller]
fn assert_refused(child: &str, expected: &str) {
    let found = within(child);
    assert!(
        found.iter().any(|d| d.contains(expected)),
        "{child}\nexpected `{expected}` in {found:#?}"
    );
}

#[test]
fn exact_host_within_exact_on_a_subset_of_its_ports() {
    assert_within(&allow("host: api.example.com"));
    assert_within(&allow("host: API.example.com.\n    ports: [8443, 443]"));
}

#[test]
fn exact_host_on_a_port_upper_does_not_allow_is_refused_at_its_line_and_column() {
    assert_refused(
        &allow("host: api.example.com\n    ports: [80]"),
        "child.yaml:3:5: error: allow[0] (host: api.example.com, ports: [80]) is not within upper.yaml: no allow rule there covers it",
    );
    assert_refused(
        &allow("host: api.example.com\n    ports: [443, 80, 8443, 22]"),
        "child.yaml:3:5: error: allow[0] (host: api.example.com, ports: [22, 80, 443, 8443]) is not within upper.yaml: no allow rule there covers ports 22, 80",
    );
    assert_refused(
        &allow("host: other.example.com"),
        "child.yaml:3:5: error: allow[0] (host: other.example.com, ports: [443]) is not within upper.yaml: no allow rule there covers it",
    );
}

#[test]
fn exact_host_within_a_wildcard_but_not_its_apex() {
    assert_within(&allow("host: raw.github.com"));
    assert_within(&allow("host: a.b.github.com"));
    assert_refused(
        &allow("host: github.com"),
        "child.yaml:3:5: error: allow[0] (host: github.com",
    );
}

#[test]
fn wildcard_within_the_same_or_a_parent_wildcard_only() {
    assert_within(&allow(r#"host: "*.api.github.com""#));
    assert_refused(
        &allow(r#"host: "*.example.com""#),
        "child.yaml:3:5: error: allow[0] (host: *.example.com, ports: [443]) is not within upper.yaml: no allow rule there covers it",
    );
    // An exact rule in UPPER never covers a wildcard.
    assert_refused(
        &allow(r#"host: "*.api.example.com""#),
        "no allow rule there covers it",
    );
}

#[test]
fn upper_deny_rules_count_unless_the_child_denies_the_same() {
    assert_refused(
        &allow("host: gist.github.com"),
        "child.yaml:3:5: error: allow[0] (host: gist.github.com, ports: [443]) is not within upper.yaml: it allows gist.github.com on port 443, which upper.yaml denies (deny[0], line 9)",
    );
    assert_refused(
        &allow(r#"host: "*.github.com""#),
        "it allows gist.github.com on port 443, which upper.yaml denies (deny[0], line 9)",
    );
    assert_within(&format!(
        "{}deny:\n  - host: gist.github.com\n",
        allow(r#"host: "*.github.com""#)
    ));
    // The child's deny must cover the port too.
    assert_refused(
        &format!(
            "{}deny:\n  - host: gist.github.com\n    ports: [80]\n",
            allow(r#"host: "*.github.com""#)
        ),
        "which upper.yaml denies",
    );
}

#[test]
fn cidr_within_the_union_of_upper_cidrs() {
    assert_within(&allow("cidr: 203.0.113.128/26"));
    // Two /25s cover the /24; the /32 UPPER denies on 443 is denied by the child too.
    assert_within(&format!(
        "{}deny:\n  - cidr: 203.0.113.0/29\n",
        allow("cidr: 203.0.113.0/24")
    ));
    assert_refused(
        &allow("cidr: 203.0.113.0/24"),
        "child.yaml:3:5: error: allow[0] (cidr: 203.0.113.0/24, ports: [443]) is not within upper.yaml: it allows 203.0.113.7/32 on port 443, which upper.yaml denies (deny[1], line 10)",
    );
    assert_refused(
        &allow("cidr: 203.0.112.0/23"),
        "child.yaml:3:5: error: allow[0] (cidr: 203.0.112.0/23, ports: [443]) is not within upper.yaml: no allow rule there covers it",
    );
    assert_refused(
        &allow("cidr: 198.51.100.0/24"),
        "no allow rule there covers it",
    );
    assert_refused(
        &allow("cidr: 203.0.113.128/26\n    ports: [443, 8443]"),
        "no allow rule there covers port 8443",
    );
    // A name never falls under a cidr rule, nor an address under a host rule.
    assert_refused(
        &allow("cidr: 2001:db8::/64"),
        "no allow rule there covers it",
    );
}

#[test]
fn every_rule_beyond_upper_is_reported_at_its_own_position() {
    let child = "version: 1\nallow:\n  - host: api.example.com\n  - host: evil.example.net\n  -   cidr: 198.51.100.0/24\n";
    let found = within(child);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].starts_with("child.yaml:4:5: error: allow[1]"));
    assert!(found[1].starts_with("child.yaml:5:7: error: allow[2]"));
}

#[test]
fn report_mode_and_sni_off_reach_beyond_an_enforcing_upper() {
    assert_refused(
        "version: 1\nmode: report\n",
        "child.yaml:1:1: error: `mode: report` lets through what the allowlist refuses",
    );
    assert_refused(
        "version: 1\ntls:\n  sni: off\n",
        "child.yaml:1:1: error: `tls: {sni: off}`",
    );
}

#[test]
fn a_runtime_upper_requires_is_a_ceiling() {
    let upper = "version: 1\nlimits:\n  runtime: runsc\n";
    let check = |child: &str| {
        let (upper, _) = Policy::from_yaml("upper.yaml", upper).unwrap();
        let (policy, _) = Policy::from_yaml("child.yaml", child).unwrap();
        check_within("child.yaml", &policy, "upper.yaml", &upper)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        check("version: 1\nlimits:\n  runtime: runsc\n"),
        Vec::<String>::new()
    );
    let none = check("version: 1\n");
    assert_eq!(none.len(), 1, "{none:?}");
    assert!(
        none[0].starts_with(
            "child.yaml:1:1: error: no `limits: {runtime: …}` lets runs use any runtime"
        ) && none[0].ends_with("upper.yaml does not allow; it requires `runtime: runsc`"),
        "{none:?}"
    );
    let other = check("version: 1\nlimits:\n  runtime: runc\n");
    assert!(
        other.len() == 1 && other[0].contains("`limits: {runtime: runc}` lets runs use a runtime"),
        "{other:?}"
    );
    // An UPPER that requires nothing lets a child require what it likes.
    assert_within("version: 1\nlimits:\n  runtime: runc\n");
}

#[test]
fn union_coverage_of_nets() {
    let net = |s: &str| s.parse::<IpNet>().unwrap();
    let quarters = [
        net("10.0.0.0/26"),
        net("10.0.0.64/26"),
        net("10.0.0.128/25"),
    ];
    assert!(net_covered_by_union(net("10.0.0.0/24"), &quarters));
    assert!(!net_covered_by_union(net("10.0.0.0/24"), &quarters[1..]));
    assert!(!net_covered_by_union(net("10.0.0.0/23"), &quarters));
    assert!(net_covered_by_union(net("10.0.0.5/32"), &quarters));
    assert!(!net_covered_by_union(net("::/0"), &quarters));
}

#[test]
fn request_rules_of_upper_bound_the_child() {
    let upper = "version: 1\nallow:\n  - host: api.example.com\n    methods: [GET, POST]\n    paths: [/v1/**, /health]\n";
    let check = |child: &str| {
        let (upper, _) = Policy::from_yaml("upper.yaml", upper).unwrap();
        let (policy, _) = Policy::from_yaml("child.yaml", child).unwrap();
        check_within("child.yaml", &policy, "upper.yaml", &upper).len()
    };
    let rule = |extra: &str| format!("version: 1\nallow:\n  - host: api.example.com\n{extra}");
    assert_eq!(
        check(&rule(
            "    methods: [GET]\n    paths: [/v1/models/*, /health]\n"
        )),
        0
    );
    assert_eq!(check(&rule("    methods: [GET]\n    paths: [/v1/**]\n")), 0);
    assert_eq!(
        check(&rule("")),
        1,
        "unrestricted is more than UPPER allows"
    );
    assert_eq!(
        check(&rule("    methods: [GET, DELETE]\n    paths: [/v1/**]\n")),
        1
    );
    assert_eq!(check(&rule("    methods: [GET]\n    paths: [/**]\n")), 1);
    assert_eq!(
        check(&rule("    methods: [GET]\n")),
        1,
        "paths unrestricted"
    );
}

/// The diagnostics of `child` checked within `upper`.
fn within_of(upper: &str, child: &str) -> Vec<String> {
    let (upper, _) = Policy::from_yaml("upper.yaml", upper).unwrap();
    let (policy, _) = Policy::from_yaml("child.yaml", child).unwrap();
    check_within("child.yaml", &policy, "upper.yaml", &upper)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// The engine judges api.x-corp.com's requests by UPPER's exact rule (GET only), never by
/// the wildcard that also covers it: a child allowing any method there is wider.
#[test]
fn an_upper_exact_rule_narrows_its_name_even_under_an_upper_wildcard() {
    let upper = "version: 1\nallow:\n  - host: api.x-corp.com\n    methods: [GET]\n  - host: \"*.x-corp.com\"\n";
    assert_eq!(
        within_of(upper, &allow("host: api.x-corp.com")),
        [
            "child.yaml:3:5: error: allow[0] (host: api.x-corp.com, ports: [443]) is not within upper.yaml: on port 443 the engine judges requests to api.x-corp.com by the exact rule allow[0] there (host: api.x-corp.com, ports: [443], methods: [GET]), which admits fewer of them"
        ]
    );
    assert_within_of(upper, &allow("host: api.x-corp.com\n    methods: [GET]"));
    assert_within_of(upper, &allow("host: other.x-corp.com"));
    // A child wildcard reaches api.x-corp.com unrestricted too, unless the child narrows
    // that name with an exact rule of its own (which is then checked itself).
    let wildcard = allow(r#"host: "*.x-corp.com""#);
    assert_eq!(within_of(upper, &wildcard).len(), 1, "{wildcard}");
    assert!(within_of(upper, &wildcard)[0].contains("requests to api.x-corp.com"));
    assert_within_of(
        upper,
        &format!("{wildcard}  - host: api.x-corp.com\n    methods: [GET]\n"),
    );
    // On a port where UPPER has no exact rule, its wildcard decides.
    let upper_8443 = "version: 1\nallow:\n  - host: api.x-corp.com\n    methods: [GET]\n  - host: \"*.x-corp.com\"\n    ports: [443, 8443]\n";
    assert_within_of(
        upper_8443,
        &allow("host: api.x-corp.com\n    ports: [8443]"),
    );
    // Another unrestricted exact rule for the name admits every request.
    assert_within_of(
        &format!("{upper}  - host: api.x-corp.com\n"),
        &allow("host: api.x-corp.com"),
    );
}

#[track_caller]
fn assert_within_of(upper: &str, child: &str) {
    assert_eq!(within_of(upper, child), Vec::<String>::new(), "{child}");
}

/// Leaving a port out of `tls.ports` lets a tunnel there carry anything, as `sni: off`.
#[test]
fn dropping_a_tls_port_upper_requires_is_an_error_naming_it() {
    let upper = "version: 1\ntls:\n  ports: [443, 8443]\nallow:\n  - host: a.example.com\n";
    let child = |tls: &str| format!("version: 1\ntls:\n  {tls}\nallow:\n  - host: a.example.com\n");
    assert_eq!(
        within_of(upper, &child("ports: []")),
        [
            "child.yaml:1:1: error: `tls: {ports: []}` leaves out ports 443, 8443, where upper.yaml requires TLS whose SNI is the allowed name: a tunnel there could carry plain traffic or TLS for any other name"
        ]
    );
    assert!(within_of(upper, &child("ports: [443]"))[0].contains("leaves out port 8443,"));
    assert!(within_of(upper, "version: 1\n")[0].contains("leaves out port 8443,"));
    assert_within_of(upper, &child("ports: [8443, 443, 993]"));
    // Under an UPPER that checks no SNI, its ports do nothing.
    assert_within_of(
        "version: 1\ntls:\n  sni: off\nallow:\n  - host: a.example.com\n",
        &child("ports: []"),
    );
}

/// The engine's deny cidrs judge an IPv6 address by the IPv4 address it carries: a child
/// allowing NAT64 (or 6to4 …) reaches what UPPER denies as IPv4.
#[test]
fn upper_ipv4_denies_hold_for_the_ipv4_an_allowed_ipv6_block_carries() {
    let upper = "version: 1\nallow:\n  - cidr: 64:ff9b::/96\n  - cidr: 2002::/16\n  - cidr: 198.51.100.0/24\ndeny:\n  - cidr: 10.0.0.0/8\n";
    assert_eq!(
        within_of(upper, &allow("cidr: 64:ff9b::/96")),
        [
            "child.yaml:3:5: error: allow[0] (cidr: 64:ff9b::/96, ports: [443]) is not within upper.yaml: it allows 64:ff9b::/96 (IPv4 10.0.0.0/8 in NAT64 form) on port 443, which upper.yaml denies (deny[0], line 7)"
        ]
    );
    assert!(
        within_of(upper, &allow("cidr: 2002:a00::/24"))[0]
            .contains("it allows 2002:a00::/24 (IPv4 10.0.0.0/8 in 6to4 form)")
    );
    // A block carrying only other IPv4 addresses is within.
    assert_within_of(upper, &allow("cidr: 64:ff9b::c633:6400/120"));
    assert_within_of(upper, &allow("cidr: 2002:c633:6400::/40"));
    // The child's own IPv4 deny holds for the carried addresses too.
    assert_within_of(
        upper,
        &format!(
            "{}deny:\n  - cidr: 10.0.0.0/8\n",
            allow("cidr: 64:ff9b::/96")
        ),
    );
}

mod reference;

/// Rules found only through the index: UPPER deny blocks holding the checked block, inside
/// it, or carried by it; names under a wildcard; coverage by several blocks inside one.
/// The first UPPER deny rule in file order is named, whichever lookup found it.
#[test]
fn indexed_lookups_find_every_rule_that_bears_on_a_rule() {
    let upper = "version: 1\nallow:\n  - cidr: 10.0.0.0/8\n  - cidr: 64:ff9b::/96\n  - cidr: 198.51.100.0/25\n  - cidr: 198.51.100.128/26\n  - cidr: 198.51.100.192/26\n  - host: \"*.x-corp.com\"\ndeny:\n  - cidr: 10.9.0.0/16\n  - cidr: 10.1.2.0/24\n  - cidr: 10.1.0.0/16\n  - cidr: 10.5.5.5/32\n  - host: a.b.x-corp.com\n";
    let child = "version: 1\nallow:\n  - cidr: 10.1.2.3/32\n  - cidr: 10.5.0.0/16\n  - cidr: 10.0.0.0/8\n  - cidr: 64:ff9b::a05:500/120\n  - cidr: 198.51.100.0/24\n  - cidr: 198.51.99.0/24\n  - host: \"*.x-corp.com\"\n  - host: \"*.b.x-corp.com\"\n  - host: c.x-corp.com\n";
    let head = |n: usize, rule: &str| {
        format!(
            "child.yaml:{}:5: error: allow[{n}] ({rule}, ports: [443]) is not within upper.yaml: ",
            n + 3
        )
    };
    assert_eq!(
        within_of(upper, child),
        [
            // Inside two deny blocks: the earlier one (deny[1]) is named.
            format!(
                "{}it allows 10.1.2.3/32 on port 443, which upper.yaml denies (deny[1], line 11)",
                head(0, "cidr: 10.1.2.3/32")
            ),
            // Holding a deny block.
            format!(
                "{}it allows 10.5.5.5/32 on port 443, which upper.yaml denies (deny[3], line 13)",
                head(1, "cidr: 10.5.0.0/16")
            ),
            format!(
                "{}it allows 10.9.0.0/16 on port 443, which upper.yaml denies (deny[0], line 10)",
                head(2, "cidr: 10.0.0.0/8")
            ),
            // Carrying a denied IPv4 address.
            format!(
                "{}it allows 64:ff9b::a05:500/120 (IPv4 10.5.5.5/32 in NAT64 form) on port 443, which upper.yaml denies (deny[3], line 13)",
                head(3, "cidr: 64:ff9b::a05:500/120")
            ),
            // 198.51.100.0/24 is covered by three blocks inside it; 198.51.99.0/24 by none.
            format!(
                "{}no allow rule there covers it",
                head(5, "cidr: 198.51.99.0/24")
            ),
            format!(
                "{}it allows a.b.x-corp.com on port 443, which upper.yaml denies (deny[4], line 14)",
                head(6, "host: *.x-corp.com")
            ),
            format!(
                "{}it allows a.b.x-corp.com on port 443, which upper.yaml denies (deny[4], line 14)",
                head(7, "host: *.b.x-corp.com")
            ),
        ]
    );
    // The child's own deny rules hold wherever the index finds them: a supernet, a block.
    let (upper_policy, _) = Policy::from_yaml("upper.yaml", upper).unwrap();
    let (policy, _) = Policy::from_yaml("child.yaml", child).unwrap();
    assert_eq!(
        check_within("child.yaml", &policy, "upper.yaml", &upper_policy),
        reference::check_within_reference("child.yaml", &policy, "upper.yaml", &upper_policy)
    );
    let denying = format!(
        "{child}deny:\n  - cidr: 10.0.0.0/9\n  - cidr: 10.5.5.0/24\n  - host: \"*.b.x-corp.com\"\n"
    );
    assert_eq!(
        within_of(upper, &denying),
        [format!(
            "{}no allow rule there covers it",
            head(5, "cidr: 198.51.99.0/24")
        )]
    );
}

/// A small seeded generator (xorshift64*), enough to draw rules without a dependency.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// A block of 10.0.0.0/22 (or the whole /8, or a NAT64/6to4 block): few addresses, so
    /// that blocks nest and repeat often.
    fn cidr(&mut self) -> String {
        match self.below(12) {
            0 => self
                .pick(&[
                    "10.0.0.0/8",
                    "64:ff9b::/96",
                    "64:ff9b::a00:0/118",
                    "2002:a00::/30",
                ])
                .to_owned(),
            _ => {
                let prefix = 22 + self.below(11);
                let address = self.below(1 << 10) as u32 & !((1u32 << (32 - prefix)) - 1);
                format!("10.0.{}.{}/{prefix}", address >> 8, address & 0xff)
            }
        }
    }

    fn host(&mut self) -> String {
        let name = format!(
            "{}{}x-corp.com",
            self.pick(&["", "", "a.", "b."]),
            self.pick(&["", "api.", "c.a."])
        );
        match self.below(3) {
            0 if name != "x-corp.com" || self.below(2) == 0 => format!("\"*.{name}\""),
            _ => name,
        }
    }

    /// One rule as YAML lines; `allow` rules may restrict methods and paths.
    fn rule(&mut self, allow: bool) -> String {
        let host = (self.below(2) == 0).then(|| self.host());
        let mut rule = match &host {
            Some(host) => format!("  - host: {host}\n"),
            None => format!("  - cidr: {}\n", self.cidr()),
        };
        let ports = [
            "",
            "",
            "    ports: [80]\n",
            "    ports: [443, 80]\n",
            "    ports: [8443, 443]\n",
        ];
        rule.push_str(self.pick(&ports));
        // Only exact names may restrict requests.
        let exact = host.is_some_and(|host| !host.starts_with('"'));
        if allow && exact && self.below(4) == 0 {
            rule.push_str(self.pick(&[
                "    methods: [GET]\n",
                "    paths: [/v1/**]\n",
                "    methods: [GET, POST]\n    paths: [/v1/*, /health]\n",
            ]));
        }
        rule
    }

    fn policy(&mut self, allows: usize, denies: usize) -> String {
        let mut text = "version: 1\nallow:\n".to_owned();
        (0..allows).for_each(|_| text.push_str(&self.rule(true)));
        text.push_str("deny:\n");
        (0..denies).for_each(|_| text.push_str(&self.rule(false)));
        text
    }
}

/// The indexed check says exactly what the plain one (every rule against every rule) said,
/// in the same order, on random policies dense in nested names and blocks.
#[test]
fn indexed_check_agrees_with_the_plain_one_on_random_policies() {
    let mut draw = Draw(0x5eed_cafe_f00d_0001);
    let mut errors = 0;
    for round in 0..60 {
        let (allows, denies) = if round == 0 { (300, 120) } else { (20, 8) };
        let upper_text = draw.policy(allows, denies);
        let child_text = draw.policy(allows, denies / 2);
        let load = |file, text: &str| match Policy::from_yaml(file, text) {
            Ok((policy, _)) => policy,
            Err(error) => panic!(
                "{text}\n{:?}",
                error.diagnostics.iter().find(|d| d.is_error())
            ),
        };
        let (upper, policy) = (
            load("upper.yaml", &upper_text),
            load("child.yaml", &child_text),
        );
        let found = check_within("child.yaml", &policy, "upper.yaml", &upper);
        let expected =
            reference::check_within_reference("child.yaml", &policy, "upper.yaml", &upper);
        let shown = |list: &[Diagnostic]| list.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(
            shown(&found),
            shown(&expected),
            "UPPER:\n{upper_text}\nchild:\n{child_text}"
        );
        errors += found.len();
    }
    // The policies must reach beyond UPPER often enough for the comparison to mean something.
    assert!(errors > 300, "{errors} errors only");
}
