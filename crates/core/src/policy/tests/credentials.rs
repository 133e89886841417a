//! `credentials:` and `methods`/`paths`: validation with positions, which targets are
//! inspected, and the per-request verdict.

use super::*;

const OPENAI: &str = "\
version: 1
name: openai
allow:
  - host: api.openai.com
    methods: [POST, GET]
    paths: [\"/v1/chat/completions\", \"/v1/models/*\", \"/v1/files/**\"]
  - host: pypi.org
credentials:
  - host: api.openai.com
    secret: OPENAI_API_KEY
";

fn target(host: &str) -> Target {
    Target::parse_host(host).expect("valid target")
}

fn request(set: &PolicySet, host: &str, method: &str, path: &str) -> (Verdict, Reason) {
    let decision = set.decide_request(&target(host), 443, method, path);
    (decision.verdict, decision.reason)
}

#[test]
fn a_credential_and_request_rules_parse_with_their_defaults() {
    let policy = policy(OPENAI);
    let [credential] = policy.credentials() else {
        panic!("one credential");
    };
    assert_eq!(credential.host.as_str(), "api.openai.com");
    assert_eq!(credential.port, 443);
    assert_eq!(credential.secret, "OPENAI_API_KEY");
    assert_eq!(credential.header, "authorization");
    assert_eq!(credential.header_value("sk-x"), "Bearer sk-x");
    let set = PolicySet::from(policy);
    let rule = set.decide(&target("api.openai.com"), 443).rule.unwrap();
    assert_eq!(
        set.describe_rule(&rule).unwrap(),
        "host: api.openai.com, ports: [443], methods: [POST, GET], paths: [/v1/chat/completions, /v1/models/*, /v1/files/**]"
    );
}

#[test]
fn unknown_header_names_are_fine() {
    let policy = policy(
        "version: 1\nallow:\n  - host: api.anthropic.com\ncredentials:\n  - host: api.anthropic.com\n    secret: ANTHROPIC_API_KEY\n    header: X-Api-Key\n    value: \"{secret}\"\n",
    );
    assert_eq!(policy.credentials()[0].header, "x-api-key");
    assert_eq!(policy.credentials()[0].header_value("k"), "k");
}

#[test]
fn credential_errors_point_at_the_line_and_column() {
    let head = "version: 1\nallow:\n  - host: api.x.com\ncredentials:\n";
    for (body, expected) in [
        (
            "  - host: other.x.com\n    secret: K\n",
            "test.yaml:5:5: error: credential for other.x.com:443: no allow rule of this policy admits it (not_allowed)",
        ),
        (
            "  - host: api.x.com\n    port: 8443\n    secret: K\n",
            "test.yaml:5:5: error: credential for api.x.com:8443: no allow rule of this policy admits it (port_not_allowed)",
        ),
        (
            "  - host: \"*.x.com\"\n    secret: K\n",
            "test.yaml:5:11: error: credentials[0]: a credential goes to one exact host, never a wildcard",
        ),
        (
            "  - host: api.x.com\n    secret: K\n    value: \"Bearer {key}{secret}\"\n",
            "test.yaml:7:12: error: `value`: `{secret}` is the only placeholder; `Bearer {key}{secret}` holds another `{` or `}`",
        ),
        (
            "  - host: api.x.com\n    secret: K\n    value: \"Bearer token\"\n",
            "test.yaml:7:12: error: `value` must hold `{secret}` where the secret goes (e.g. `Bearer {secret}`)",
        ),
        (
            "  - host: api.x.com\n",
            "test.yaml:5:5: error: credentials[0] needs a `secret` (the secret's name)",
        ),
        (
            "  - host: api.x.com\n    secret: 1BAD\n",
            "test.yaml:6:13: error: secret name `1BAD` must be an environment variable name (letters, digits, `_`; not starting with a digit)",
        ),
        (
            "  - host: api.x.com\n    secret: K\n    header: Host\n",
            "test.yaml:7:13: error: a credential cannot be sent in `Host`: that header frames, routes or belongs to one hop of the request",
        ),
        (
            "  - host: api.x.com\n    secret: K\n  - host: api.x.com\n    secret: L\n",
            "test.yaml:7:5: error: credentials[1]: api.x.com:443 already has a credential (line 5); one host and port take one credential",
        ),
        (
            "  - host: api.x.com\n    secret: K\n    token: x\n",
            "test.yaml:7:5: error: YAML: unknown field `token`, expected one of host, port, secret, header, value",
        ),
    ] {
        assert_eq!(error(&format!("{head}{body}")), expected, "{body}");
    }
    // A deny rule of the same policy refusing the host: not admitted either.
    assert_eq!(
        error(
            "version: 1\nallow:\n  - host: \"*.x.com\"\ndeny:\n  - host: api.x.com\ncredentials:\n  - host: api.x.com\n    secret: K\n"
        ),
        "test.yaml:7:5: error: credential for api.x.com:443: no allow rule of this policy admits it (denied)"
    );
    // A wildcard allow rule admits an exact credential host.
    policy(
        "version: 1\nallow:\n  - host: \"*.x.com\"\ncredentials:\n  - host: api.x.com\n    secret: K\n",
    );
}

#[test]
fn method_and_path_errors_point_at_the_entry() {
    for (rule, expected) in [
        (
            "  - host: a.com\n    methods: [post]\n",
            "test.yaml:4:15: error: HTTP methods are case-sensitive and upper case: write `POST`",
        ),
        (
            "  - host: a.com\n    methods: [GET, CONNECT]\n",
            "test.yaml:4:20: error: `CONNECT` opens a tunnel; it is never a request to an inspected host",
        ),
        (
            "  - host: a.com\n    methods: []\n",
            "test.yaml:4:14: error: allow[0]: `methods` is empty; omit it to allow every method",
        ),
        (
            "  - host: a.com\n    paths: [\"/v1/*/x\"]\n",
            "test.yaml:4:13: error: path pattern `/v1/*/x`: `*` and `**` may only be the whole last segment (`/v1/models/*`, `/v1/files/**`)",
        ),
        (
            "  - host: a.com\n    paths: [\"/v1/../x\"]\n",
            "test.yaml:4:13: error: path pattern `/v1/../x`: it holds a dot segment (`.` or `..`, maybe percent-encoded or with `;parameters`)",
        ),
        (
            "  - host: \"*.a.com\"\n    paths: [\"/x\"]\n",
            "test.yaml:4:12: error: allow[0]: `methods` and `paths` need an exact host (the proxy inspects exact names only)",
        ),
        (
            "  - cidr: 203.0.113.0/24\n    methods: [GET]\n",
            "test.yaml:4:14: error: allow[0]: `methods` and `paths` need a `host` rule, not a `cidr` rule",
        ),
    ] {
        assert_eq!(
            error(&format!("version: 1\nallow:\n{rule}")),
            expected,
            "{rule}"
        );
    }
    assert_eq!(
        error("version: 1\ndeny:\n  - host: a.com\n    methods: [GET]\n"),
        "test.yaml:4:14: error: deny[0]: `methods` and `paths` narrow allow rules; a deny rule refuses the whole host"
    );
}

#[test]
fn only_credential_hosts_and_restricted_hosts_are_inspected() {
    let set = set(
        "version: 1\nallow:\n  - host: api.openai.com\n  - host: files.x.com\n    ports: [443, 8443]\n    methods: [GET]\n  - host: pypi.org\n  - host: \"*.x.com\"\ncredentials:\n  - host: api.openai.com\n    secret: OPENAI_API_KEY\n",
    );
    let names: Vec<&str> = set.inspected_hosts().iter().map(HostName::as_str).collect();
    assert_eq!(names, ["api.openai.com", "files.x.com"]);
    let openai = set.inspection(&target("api.openai.com"), 443).unwrap();
    assert_eq!(openai.credential.unwrap().secret, "OPENAI_API_KEY");
    assert!(!openai.restricted);
    let files = set.inspection(&target("files.x.com"), 8443).unwrap();
    assert!(files.credential.is_none() && files.restricted);
    assert_eq!(set.inspection(&target("pypi.org"), 443), None);
    assert_eq!(set.inspection(&target("other.x.com"), 443), None);
    assert_eq!(set.inspection(&target("api.openai.com"), 80), None);
    assert_eq!(set.inspection(&target("203.0.113.7"), 443), None);
}

#[test]
fn requests_are_judged_by_method_and_path() {
    let set = set(OPENAI);
    let allowed = (Verdict::Allow, Reason::Rule);
    assert_eq!(
        request(&set, "api.openai.com", "POST", "/v1/chat/completions"),
        allowed
    );
    assert_eq!(
        request(&set, "api.openai.com", "GET", "/v1/models/gpt-4o"),
        allowed
    );
    assert_eq!(
        request(&set, "api.openai.com", "GET", "/v1/files/a/b"),
        allowed
    );
    assert_eq!(
        request(&set, "api.openai.com", "DELETE", "/v1/chat/completions"),
        (Verdict::Block, Reason::MethodNotAllowed)
    );
    assert_eq!(
        request(&set, "api.openai.com", "POST", "/v1/admin"),
        (Verdict::Block, Reason::PathNotAllowed)
    );
    assert_eq!(
        request(&set, "api.openai.com", "GET", "/v1/models/a/b"),
        (Verdict::Block, Reason::PathNotAllowed)
    );
    for ambiguous in [
        "/v1/files/../admin",
        "/v1/files/%2e%2e/admin",
        "/v1/files/a%2Fb",
        "/v1/files/a%5cb",
        "/v1/files//a",
    ] {
        assert_eq!(
            request(&set, "api.openai.com", "GET", ambiguous),
            (Verdict::Block, Reason::BadRequest),
            "{ambiguous}"
        );
    }
    // An unrestricted host: any method, any (unambiguous) path.
    assert_eq!(request(&set, "pypi.org", "DELETE", "/anything"), allowed);
    assert_eq!(
        request(&set, "pypi.org", "GET", "/a/../b"),
        (Verdict::Block, Reason::BadRequest)
    );
}

#[test]
fn a_wildcard_never_widens_an_exact_rule_with_methods() {
    let set =
        set("version: 1\nallow:\n  - host: \"*.x.com\"\n  - host: api.x.com\n    methods: [GET]\n");
    assert_eq!(
        request(&set, "api.x.com", "POST", "/"),
        (Verdict::Block, Reason::MethodNotAllowed)
    );
    assert_eq!(
        request(&set, "other.x.com", "POST", "/"),
        (Verdict::Allow, Reason::Rule)
    );
    // The exact rule is not reported as covered by the wildcard.
    assert!(
        warnings(
            "version: 1\nallow:\n  - host: \"*.x.com\"\n  - host: api.x.com\n    methods: [GET]\n"
        )
        .is_empty()
    );
}

#[test]
fn merged_rules_for_one_host_are_a_union() {
    let narrow = policy("version: 1\nname: a\nallow:\n  - host: api.x.com\n    methods: [GET]\n");
    let other = policy(
        "version: 1\nname: b\nallow:\n  - host: api.x.com\n    methods: [POST]\n    paths: [\"/v1/*\"]\n",
    );
    let set = PolicySet::merge(vec![narrow, other]).unwrap();
    assert_eq!(
        request(&set, "api.x.com", "GET", "/any"),
        (Verdict::Allow, Reason::Rule)
    );
    assert_eq!(
        request(&set, "api.x.com", "POST", "/v1/a"),
        (Verdict::Allow, Reason::Rule)
    );
    assert_eq!(
        request(&set, "api.x.com", "POST", "/v2/a"),
        (Verdict::Block, Reason::PathNotAllowed)
    );
}

#[test]
fn report_mode_lets_method_and_path_refusals_through_but_not_bad_paths() {
    let set = set("version: 1\nmode: report\nallow:\n  - host: api.x.com\n    methods: [GET]\n");
    assert_eq!(
        request(&set, "api.x.com", "POST", "/"),
        (Verdict::WouldBlock, Reason::MethodNotAllowed)
    );
    assert_eq!(
        request(&set, "api.x.com", "GET", "/a/../b"),
        (Verdict::Block, Reason::BadRequest)
    );
}

#[test]
fn disagreeing_credentials_of_merged_policies_are_a_conflict() {
    let a = policy(
        "version: 1\nname: a\nallow:\n  - host: api.x.com\ncredentials:\n  - host: api.x.com\n    secret: K\n",
    );
    let same = policy(
        "version: 1\nname: b\nallow:\n  - host: api.x.com\ncredentials:\n  - host: api.x.com\n    secret: K\n",
    );
    let other = policy(
        "version: 1\nname: c\nallow:\n  - host: api.x.com\ncredentials:\n  - host: api.x.com\n    secret: L\n",
    );
    assert!(PolicySet::merge(vec![a.clone(), same]).is_ok());
    let conflicts = PolicySet::merge(vec![a, other]).unwrap_err();
    let messages: Vec<String> = conflicts
        .conflicts()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        messages,
        ["policy c: the credential for api.x.com:443 differs from another policy's (L vs K)"]
    );
    assert_eq!(conflicts.to_string(), messages[0]);
    // Taken past its conflicts, the set still holds them: a proxy refuses it.
    let set = conflicts.into_set_refused_by_proxy();
    assert_eq!(set.credential_conflicts().len(), 1);
}
