//! Every validation error with its exact line and column, and the warnings.

use super::*;

#[test]
fn positions_of_yaml_errors() {
    assert_eq!(
        error("version: 1\nallow:\n  - host: a.com\n    bogus: 3\n"),
        "test.yaml:4:5: error: YAML: unknown field `bogus`, expected one of host, cidr, ports, methods, paths"
    );
    assert_eq!(
        error("version: 1\nversion: 1\n"),
        "test.yaml:2:1: error: YAML: duplicate mapping key: version"
    );
    assert_eq!(
        error("version: 1\nallow:\n  - host: [a.com]\n"),
        "test.yaml:3:11: error: YAML: expected a single value here"
    );
    assert_eq!(
        error("version: 1\nallow: {\n"),
        "test.yaml:2:8: error: YAML: expected a list (`- item` lines, or `[a, b]`) here"
    );
    assert_eq!(
        error("version: 1\nfoo: bar\n"),
        "test.yaml:2:1: error: YAML: unknown field `foo`, expected one of version, name, mode, allow, deny, limits, tls, credentials"
    );
}

/// Found by the `policy_yaml` fuzz target: a host holding a bidi override (or ESC, CR) was
/// quoted raw in the diagnostic `policy check` prints.
#[test]
fn diagnostics_escape_control_characters_they_quote() {
    assert_eq!(
        error("version: 1\nallow:\n  - host: \"a\u{202e}b.example\"\n"),
        "test.yaml:3:11: error: `a\\u202eb.example` is not a valid host name: the host is not a valid internationalised domain name (IDNA)"
    );
    let message = error("version: 1\nallow:\n  - host: \"a\\e[2K\\rb.example\"\n");
    assert!(message.contains("a\\x1b[2K\\x0db.example"), "{message}");
    let flags = Policy::from_allow_flags(&["a\u{1b}[2K.example".to_owned()]).unwrap_err();
    assert!(flags.to_string().contains("a\\x1b[2K.example"), "{flags}");
    assert!(
        !flags.to_string().chars().any(crate::text::must_escape),
        "{flags}"
    );
}

#[test]
fn nested_duplicates_tags_and_documents_are_errors() {
    assert_eq!(
        error("version: 1\nallow:\n  - host: a.com\n    host: b.com\n"),
        "test.yaml:4:5: error: YAML: duplicate mapping key: host"
    );
    assert!(error("version: 1\nallow:\n  - host: !secret a.com\n").starts_with("test.yaml:3:"));
    assert!(error("version: 1\n---\nversion: 1\n").starts_with("test.yaml:"));
    assert!(error("- version: 1\n").starts_with("test.yaml:1:1: error: YAML: "));
}

/// Merging keeps the first of a list of mappings and lets a key written next to `<<` win:
/// a deny list read as four hosts refused two. Every form of `<<` is refused at its place.
#[test]
fn merge_keys_are_errors_and_anchors_of_values_are_not() {
    let refused = "test.yaml:4:5: error: YAML: merge keys (`<<`) are not accepted in a policy (what they merge is easy to misread); write each rule and key out";
    assert_eq!(
        error(
            "version: 1\nallow: []\ndeny:\n  - <<: [{host: secrets.example.com}, {host: admin.example.com}]\n"
        ),
        refused
    );
    assert_eq!(
        error(
            "version: 1\ndeny:\n  - host: gist.example.com\n    <<: {host: internal.example.com}\n"
        ),
        refused
    );
    assert_eq!(
        error(
            "version: 1\nallow:\n  - &rule {host: a.example.com}\n  - !!merge <<: *rule\n    ports: [80]\n"
        ),
        refused.replace(":4:5:", ":4:13:")
    );
    // An anchored ports list reused by several rules stays fine.
    let reused = policy(
        "version: 1\nallow:\n  - host: a.example.com\n    ports: &web [80, 443]\n  - host: b.example.com\n    ports: *web\n",
    );
    assert_eq!(reused.allow[1].ports, PortSet::List(vec![80, 443]));
}

#[test]
fn a_rule_must_be_a_mapping() {
    assert_eq!(
        error("version: 1\nallow:\n  - api.openai.com\n"),
        "test.yaml:3:5: error: YAML: expected a mapping (`key: value` lines, e.g. `host: api.example.com`) here"
    );
}

#[test]
fn version_is_required_and_must_be_1() {
    assert_eq!(error(""), "test.yaml:1:1: error: missing `version: 1`");
    assert_eq!(
        error("allow: []\n"),
        "test.yaml:1:1: error: missing `version: 1`"
    );
    assert_eq!(
        error("# a policy\nversion: 2\n"),
        "test.yaml:2:10: error: unsupported version `2`; this tool reads `version: 1`"
    );
}

fn host_error(host: &str) -> String {
    error(&format!("version: 1\nallow:\n  - host: \"{host}\"\n"))
}

#[test]
fn unsafe_or_meaningless_hosts_are_errors_at_the_host() {
    for host in [
        "*",
        "*.com",
        "*.co.uk",
        "*.internal",
        "api.*.x.com",
        "*x.com",
        "*.*.x.com",
        "x.*",
        "https://api.x.com",
        "api.x.com/v1",
        "api.x.com:443",
        "user@api.x.com",
        "a..x.com",
        ".x.com",
        "10.0.0.1",
        "2852039166",
        "[::1]",
        "::1",
        "x.123",
        "",
        " api.x.com",
        "a b.com",
    ] {
        let message = host_error(host);
        assert!(
            message.starts_with("test.yaml:3:11: error: "),
            "{host:?}: {message}"
        );
    }
    assert!(host_error("10.0.0.1").contains("use a `cidr` rule"));
    assert!(host_error("*.co.uk").contains("public suffix `co.uk`"));
    assert!(host_error("api.x.com:443").contains("ports: [N]"));
    assert!(host_error("https://api.x.com").contains("scheme"));
    let long_label = format!("{}.com", "a".repeat(64));
    assert!(host_error(&long_label).contains("63"));
    let long_name = [&"a".repeat(63)[..]; 4].join(".");
    assert!(host_error(&long_name).contains("253"));
}

#[test]
fn rule_shape_errors() {
    assert_eq!(
        error("version: 1\nallow:\n  - host: a.com\n    cidr: 8.8.8.0/24\n"),
        "test.yaml:4:11: error: allow[0] has both `host` and `cidr`; write two rules"
    );
    assert_eq!(
        error("version: 1\nallow:\n  - ports: [443]\n"),
        "test.yaml:3:5: error: allow[0] needs a `host` or a `cidr`"
    );
    assert_eq!(
        error("version: 1\nallow:\n  - host: a.com\n    ports: []\n"),
        "test.yaml:4:12: error: `ports` is empty; omit it for the default, or list ports"
    );
    assert_eq!(
        error("version: 1\nallow:\n  - host: a.com\n    ports: [443, 70000]\n"),
        "test.yaml:4:18: error: port 70000 is outside 1–65535"
    );
    assert_eq!(
        error("version: 1\nallow:\n  - host: a.com\n    ports: [0]\n"),
        "test.yaml:4:13: error: port 0 is outside 1–65535"
    );
    assert_eq!(
        error("version: 1\nallow:\n  - host: a.com\n    ports: [-1]\n"),
        "test.yaml:4:13: error: port `-1` is not a number in 1–65535"
    );
    assert_eq!(
        error("version: 1\nallow:\n  - host: a.com\n    ports: [https]\n"),
        "test.yaml:4:13: error: port `https` is not a number in 1–65535"
    );
}

#[test]
fn cidr_errors() {
    let cidr_error = |cidr: &str| error(&format!("version: 1\ndeny:\n  - cidr: \"{cidr}\"\n"));
    assert_eq!(
        cidr_error("10.0.0.1/8"),
        "test.yaml:3:11: error: `10.0.0.1/8` has host bits set; did you mean `10.0.0.0/8`?"
    );
    for bad in [
        "10.0.0.0/33",
        "10.0.0/8",
        "example.com/8",
        "::1/129",
        "",
        "010.0.0.0/8",
    ] {
        assert!(
            cidr_error(bad).starts_with("test.yaml:3:11: error: "),
            "{bad}"
        );
    }
}

/// The engine matches `::ffff:a.b.c.d` as `a.b.c.d`: a mapped block, allow or deny, would
/// match nothing, so it is refused with the IPv4 block to write instead.
#[test]
fn ipv4_mapped_cidrs_are_errors_naming_the_ipv4_block() {
    for list in ["allow", "deny"] {
        assert_eq!(
            error(&format!(
                "version: 1\n{list}:\n  - cidr: \"::ffff:198.51.100.0/120\"\n"
            )),
            "test.yaml:3:11: error: `::ffff:198.51.100.0/120` is IPv4 written as IPv4-mapped IPv6, which the proxy matches as IPv4, so this rule would match nothing; write `198.51.100.0/24`"
        );
    }
    assert!(
        error("version: 1\ndeny:\n  - cidr: \"::ffff:0:0/96\"\n").ends_with("write `0.0.0.0/0`")
    );
    assert!(
        error("version: 1\ndeny:\n  - cidr: \"::ffff:10.0.0.1\"\n")
            .ends_with("write `10.0.0.1/32`")
    );
    // Other forms that carry IPv4 are matched as written.
    policy("version: 1\ndeny:\n  - cidr: \"64:ff9b::a00:0/104\"\n  - cidr: \"::/0\"\n");
}

#[test]
fn limit_errors_point_at_the_value() {
    let limit_error = |line: &str| error(&format!("version: 1\nlimits:\n  {line}\n"));
    assert!(limit_error("timeout: forever").starts_with("test.yaml:3:12: error: `timeout`: "));
    assert!(limit_error("timeout: 0s").contains("is zero"));
    assert!(limit_error("memory: lots").starts_with("test.yaml:3:11: error: `memory`: "));
    assert!(limit_error("memory: 0").contains("is zero"));
    assert!(limit_error("tmp: -5MiB").starts_with("test.yaml:3:8: error: `tmp`: "));
    assert!(limit_error("output: 1 parsec").starts_with("test.yaml:3:11: error: `output`: "));
    assert!(limit_error("cpus: 0").starts_with("test.yaml:3:9: error: `cpus`: "));
    assert!(limit_error("cpus: -1").contains("positive"));
    assert!(limit_error("cpus: .nan").contains("positive"));
    assert!(limit_error("pids: 1.5").starts_with("test.yaml:3:9: error: `pids`: "));
    assert!(limit_error("pids: 0").contains("positive"));
    assert!(limit_error("swap: 1GiB").contains("unknown field `swap`"));
    assert!(limit_error("runtime: \"run sc\"").starts_with("test.yaml:3:12: error: `runtime`: "));
    assert!(limit_error("runtime: \"\"").contains("not a runtime name"));
}

#[test]
fn a_runtime_requirement_is_one_name() {
    let required = policy("version: 1\nlimits:\n  runtime: runsc\n");
    assert_eq!(required.limits().runtime, Some(vec!["runsc".to_string()]));
    let free = policy("version: 1\nlimits:\n  pids: 8\n");
    assert_eq!(free.limits().runtime, None);
    assert!(
        error("version: 1\nlimits:\n  runtime: [runsc, kata]\n").starts_with("test.yaml:3:"),
        "a list is refused where it stands"
    );
}

#[test]
fn limits_parse() {
    let policy = policy(
        "version: 1\nlimits:\n  timeout: 30s\n  memory: 256MiB\n  cpus: 1.5\n  pids: 64\n  tmp: 64MiB\n  output: 1MiB\n",
    );
    let limits = policy.limits();
    assert_eq!(limits.timeout, Some(Duration::from_secs(30)));
    assert_eq!(limits.memory, Some(256 * 1024 * 1024));
    assert_eq!(limits.cpus, Some(1.5));
    assert_eq!(limits.pids, Some(64));
    assert_eq!(limits.tmp, Some(64 * 1024 * 1024));
    assert_eq!(limits.output, Some(1024 * 1024));
    let short = super::policy("version: 1\nlimits:\n  timeout: 500ms\n");
    assert_eq!(short.limits().timeout, Some(Duration::from_millis(500)));
    let minutes = super::policy("version: 1\nlimits:\n  timeout: 2m\n");
    assert_eq!(minutes.limits().timeout, Some(Duration::from_secs(120)));
}

#[test]
fn name_mode_and_tls_errors() {
    assert_eq!(
        error("version: 1\nname: \"a b\"\n"),
        "test.yaml:2:7: error: `name` `a b` may only contain letters, digits, `.`, `_` and `-`"
    );
    assert_eq!(
        error("version: 1\nmode: audit\n"),
        "test.yaml:2:7: error: unknown mode `audit`; use `enforce` or `report`"
    );
    assert_eq!(
        error("version: 1\ntls:\n  sni: loose\n"),
        "test.yaml:3:8: error: unknown `sni` check `loose`; use `strict` or `off`"
    );
    assert_eq!(
        error("version: 1\ntls:\n  ports: [443, 0]\n"),
        "test.yaml:3:16: error: port 0 is outside 1–65535"
    );
}

#[test]
fn all_errors_are_reported_at_once() {
    let all = errors(
        "version: 1\nallow:\n  - host: \"*.com\"\n  - host: a.com\n    ports: [0]\n  - cidr: 10.0.0.1/8\n",
    );
    let lines: Vec<&str> = all
        .iter()
        .map(|d| d.split(": error").next().unwrap())
        .collect();
    assert_eq!(
        lines,
        ["test.yaml:3:11", "test.yaml:5:13", "test.yaml:6:11"]
    );
}

#[test]
fn defaults() {
    let policy = Policy::from_yaml("dir/openai-agent.yaml", "version: 1\n")
        .unwrap()
        .0;
    assert_eq!(policy.name(), "openai-agent");
    assert_eq!(policy.mode(), Mode::Enforce);
    assert_eq!(policy.limits(), &Limits::default());
    assert_eq!(
        policy.tls(),
        &TlsSettings {
            ports: vec![443],
            sni: SniCheck::Strict
        }
    );
    assert_eq!((policy.allow_count(), policy.deny_count()), (0, 0));
    let named = super::policy(
        "version: 1\nname: agent-1\nmode: report\ntls:\n  ports: [443, 8443]\n  sni: off\n",
    );
    assert_eq!(named.name(), "agent-1");
    assert_eq!(named.mode(), Mode::Report);
    assert_eq!(
        named.tls(),
        &TlsSettings {
            ports: vec![443, 8443],
            sni: SniCheck::Off
        }
    );
    let odd_file = Policy::from_yaml("my policy+v2.yml", "version: 1\n")
        .unwrap()
        .0;
    assert_eq!(odd_file.name(), "my-policy-v2");
}

#[test]
fn wildcards_over_shared_hosting_warn() {
    for host in [
        "*.githubusercontent.com",
        "*.s3.amazonaws.com",
        "*.amazonaws.com",
        "*.blob.core.windows.net",
        "*.storage.googleapis.com",
        "*.cloudfront.net",
        "*.herokuapp.com",
        "*.vercel.app",
        "*.pages.dev",
        "*.workers.dev",
        "*.ngrok.io",
        "*.ngrok-free.app",
        "*.github.io",
    ] {
        let found = warnings(&format!("version: 1\nallow:\n  - host: \"{host}\"\n"));
        assert_eq!(found.len(), 1, "{host}: {found:?}");
        assert!(
            found[0].starts_with("test.yaml:3:11: warning: "),
            "{}",
            found[0]
        );
        assert!(found[0].contains("anyone can host"), "{}", found[0]);
    }
    // A single tenant under shared hosting is fine, and so are deny wildcards.
    assert!(warnings("version: 1\nallow:\n  - host: \"*.mybucket.s3.amazonaws.com\"\n").is_empty());
    assert!(warnings("version: 1\ndeny:\n  - host: \"*.githubusercontent.com\"\n").is_empty());
    assert!(warnings("version: 1\nallow:\n  - host: \"*.example.com\"\n").is_empty());
}

#[test]
fn deny_wildcards_may_cover_public_suffixes() {
    let set = set("version: 1\nallow:\n  - host: a.example.ru\ndeny:\n  - host: \"*.ru\"\n");
    assert_eq!(decide(&set, "a.example.ru", 443).1, Reason::Denied);
}

#[test]
fn shadowed_rules_warn() {
    let found = warnings(
        "version: 1\nallow:\n  - host: \"*.x.com\"\n  - host: a.x.com\n  - host: b.x.com\n    ports: [443, 80]\n  - host: \"*.x.com\"\n  - host: \"*.a.x.com\"\n",
    );
    assert_eq!(
        found,
        [
            "test.yaml:4:5: warning: allow[1] (host: a.x.com, ports: [443]) is already covered by allow[0] (host: *.x.com, ports: [443], line 3)",
            "test.yaml:7:5: warning: allow[3] repeats allow[0] (line 3)",
            "test.yaml:8:5: warning: allow[4] (host: *.a.x.com, ports: [443]) is already covered by allow[0] (host: *.x.com, ports: [443], line 3)",
        ]
    );
    let denied =
        warnings("version: 1\nallow:\n  - host: api.x.com\ndeny:\n  - host: \"*.x.com\"\n");
    assert_eq!(denied.len(), 1);
    assert!(
        denied[0].contains("can never match: deny[0]"),
        "{}",
        denied[0]
    );
    let cidrs = warnings("version: 1\nallow:\n  - cidr: 8.8.0.0/16\n  - cidr: 8.8.8.0/24\n");
    assert_eq!(cidrs.len(), 1);
    assert!(
        cidrs[0].starts_with("test.yaml:4:5: warning: allow[1]"),
        "{}",
        cidrs[0]
    );
}

#[test]
fn covered_cidrs_are_found_at_any_prefix_in_both_families() {
    let found = warnings(
        "version: 1\nallow:\n  - cidr: 8.8.8.8/32\n  - cidr: 8.0.0.0/8\n    ports: [443, 80]\n  - cidr: 2a00:1450::/32\n  - cidr: 2a00:1450:1::/48\n  - cidr: 8.8.8.0/24\n    ports: [80]\n  - cidr: 9.0.0.0/8\n  - cidr: 2a00:1450::/32\n",
    );
    let at = |line: usize| {
        found
            .iter()
            .filter(|w| w.starts_with(&format!("test.yaml:{line}:")))
            .count()
    };
    // 8.8.8.8/32 and 8.8.8.0/24 (port 80) by 8.0.0.0/8; 2a00:1450:1::/48 by 2a00:1450::/32,
    // which is repeated; 9.0.0.0/8 by nothing.
    assert_eq!(
        (at(3), at(7), at(8), at(11), at(10)),
        (1, 1, 1, 1, 0),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|w| w.contains("allow[6] repeats allow[2]")),
        "{found:#?}"
    );
    assert_eq!(found.len(), 4, "{found:#?}");
}

/// A large blocklist loads in linear time: every cidr rule was compared with every other
/// (43,000 rules took 12 s in a release build). The bound only catches that coming back.
#[test]
fn many_cidr_rules_are_checked_in_linear_time() {
    let mut yaml = String::from("version: 1\ndeny:\n");
    for a in 1..=160u32 {
        for b in 0..=255u32 {
            yaml.push_str(&format!(" - cidr: {a}.{b}.0.0/24\n"));
        }
    }
    yaml.push_str(" - cidr: 1.0.0.0/8\n");
    let started = std::time::Instant::now();
    let found = warnings(&yaml);
    assert_eq!(found.len(), 256, "the /24s under 1.0.0.0/8");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_names_records_give_no_policy_and_the_allow_flags_are_reserved() {
    for name in ["none", "cli"] {
        let yaml = format!("version: 1\nname: {name}\nallow:\n  - host: a.com\n");
        let error = Policy::from_yaml("test.yaml", &yaml)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!(
                "test.yaml:2:7: error: `name` `{name}` is reserved"
            )),
            "{error}"
        );
    }
    assert!(Policy::from_yaml("test.yaml", "version: 1\nname: cli-tools\n").is_ok());
}

/// A second YAML document is named as such, not as the parser's budget.
#[test]
fn a_second_document_is_refused_in_plain_words() {
    let error = Policy::from_yaml("test.yaml", "version: 1\n---\nversion: 1\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("a policy is one YAML document"), "{error}");
    assert!(!error.contains("budget"), "{error}");
}

#[test]
fn private_cidr_allow_rules_warn() {
    let found = warnings("version: 1\nallow:\n  - cidr: 10.0.0.0/8\n    ports: [8080]\n");
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("test.yaml:3:11: warning: cidr `10.0.0.0/8` covers private"),
        "{}",
        found[0]
    );
    assert!(warnings("version: 1\ndeny:\n  - cidr: 10.0.0.0/8\n").is_empty());
    assert!(warnings("version: 1\nallow:\n  - cidr: 8.8.8.0/24\n").is_empty());
}

#[test]
fn duplicate_ports_warn() {
    let found = warnings("version: 1\nallow:\n  - host: a.com\n    ports: [443, 443]\n");
    assert_eq!(found, ["test.yaml:4:18: warning: port 443 is listed twice"]);
}

#[test]
fn allow_flags() {
    let cli = Policy::from_allow_flags(&["API.openai.com".into(), "*.x.com:8443".into()]).unwrap();
    assert_eq!(cli.name(), "cli");
    let set = PolicySet::from(cli);
    assert_eq!(
        decide(&set, "api.openai.com", 443),
        (Verdict::Allow, Reason::Rule, Some("cli:allow[0]".into()))
    );
    assert_eq!(decide(&set, "api.openai.com", 80).1, Reason::PortNotAllowed);
    assert!(allowed(&set, "a.x.com", 8443));
    let bad = Policy::from_allow_flags(&[
        "ok.com".into(),
        "10.0.0.1".into(),
        "x.com:0".into(),
        "https://x.com/".into(),
        "[::1]:443".into(),
        "*.com".into(),
    ])
    .unwrap_err();
    let lines: Vec<String> = bad.diagnostics.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 5, "{lines:#?}");
    assert!(
        lines[0].starts_with("--allow:2:1: error: `--allow 10.0.0.1`: "),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with("--allow:3:7: error: `--allow x.com:0`: port 0"),
        "{}",
        lines[1]
    );
    assert!(lines[2].contains("scheme"), "{}", lines[2]);
    assert!(lines[3].contains("IP address"), "{}", lines[3]);
    assert!(lines[4].contains("top-level domain"), "{}", lines[4]);
}
