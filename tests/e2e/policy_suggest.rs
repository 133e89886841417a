//! `policy suggest` from a real report-mode run: the draft names exactly the hosts the
//! program reached by name, lists IP literals and the metadata address as comments, passes
//! `policy check`, and an enforce run under it reaches the same hosts and no others. The
//! same real log also exports to OCSF events the schema accepts.

use std::collections::BTreeSet;

use crate::support::run::binary;
use crate::support::{Run, TestNetwork, Upstream, random_hex};

/// The test's servers live on the test network's gateway, a private address: the floor
/// refuses it unless a `cidr` rule names it. This policy is that plumbing, for both runs;
/// it allows the gateway on the HTTPS port only (so the IP-literal request on the plain
/// HTTP port stays refused).
fn gateway_floor(gateway: std::net::Ipv4Addr, port: u16) -> String {
    format!("version: 1\nname: gateway\nallow:\n  - cidr: {gateway}/32\n    ports: [{port}]\n")
}

/// Paths the upstream served, sorted.
fn served(upstream: &Upstream) -> BTreeSet<String> {
    upstream
        .requests()
        .iter()
        .filter_map(|r| r.head.split(' ').nth(1).map(str::to_owned))
        .collect()
}

#[test]
fn a_draft_from_a_report_run_reaches_the_same_hosts_and_no_others() {
    let network = TestNetwork::create();
    let names = ["api.alpha.test", "files.beta.test"];
    let https = Upstream::https((network.gateway, 0), &names, &format!("s-{}", random_hex()));
    let port = https.port();
    let plain = Upstream::http((network.gateway, 0), &format!("p-{}", random_hex()));
    let script = format!(
        "for url in https://api.alpha.test:{port}/alpha https://files.beta.test:{port}/beta \
         https://api.alpha.test:{port}/alpha-again http://{gateway}:{plain}/literal \
         http://169.254.169.254/latest/meta-data/ https://[2001:db8::5]:{port}/v6; do \
         curl -sSk --max-time 20 \"$url\" >/dev/null 2>&1; echo \"$url $?\"; done; true",
        gateway = network.gateway,
        plain = plain.port(),
    );
    // Merged policies take the strictest mode, so the report run's plumbing lives in its
    // own (report-mode) policy.
    let report_policy = format!(
        "{}mode: report\n",
        gateway_floor(network.gateway, port).replace("name: gateway", "name: watch")
    );
    let pins = |run: Run| {
        run.resolve("api.alpha.test", network.gateway)
            .resolve("files.beta.test", network.gateway)
            .timeout("90s")
    };

    let observed = pins(Run::new(&network).policy(&report_policy)).run(&["sh", "-c", &script]);
    observed.assert_code(0);
    assert_eq!(
        served(&https),
        BTreeSet::from(["/alpha".into(), "/alpha-again".into(), "/beta".into()]),
        "{}",
        observed.describe()
    );
    assert!(plain.requests().is_empty(), "{}", observed.describe());
    observed.assert_nothing_left();

    // The real log exports to OCSF events that the schema accepts, its `end` line included.
    let events = binary()
        .args(["audit", "export", "--format", "ocsf"])
        .arg(observed.audit_log_path())
        .output()
        .unwrap();
    assert!(events.status.success());
    let exported = String::from_utf8(events.stdout).unwrap();
    assert_eq!(
        exported.lines().count(),
        observed.audit_text.lines().count(),
        "one event per line"
    );
    assert!(
        exported.contains("\"class_uid\":1008"),
        "the end line: {exported}"
    );
    let events_path = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(events_path.path(), &exported).unwrap();
    let validation = std::process::Command::new("python3")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ocsf/validate.py"))
        .arg(events_path.path())
        .output()
        .unwrap();
    assert!(
        validation.status.success(),
        "{}{}",
        String::from_utf8_lossy(&validation.stdout),
        String::from_utf8_lossy(&validation.stderr)
    );

    // The draft, from the report run's audit log.
    let dir = tempfile::tempdir().unwrap();
    let draft_path = dir.path().join("draft.yaml");
    let suggest = binary()
        .args(["policy", "suggest", "--name", "drafted"])
        .arg(observed.audit_log_path())
        .output()
        .unwrap();
    let draft = String::from_utf8(suggest.stdout).unwrap();
    assert!(
        suggest.status.success(),
        "{draft}{}",
        String::from_utf8_lossy(&suggest.stderr)
    );
    std::fs::write(&draft_path, &draft).unwrap();
    let rules: Vec<&str> = draft
        .lines()
        .filter(|l| l.trim_start().starts_with("- host:") || l.trim_start().starts_with("- cidr:"))
        .collect();
    assert_eq!(
        rules,
        [
            "  - host: \"api.alpha.test\"",
            "  - host: \"files.beta.test\""
        ],
        "{draft}"
    );
    assert!(
        draft.contains(&format!(
            "  # {port} x2; would_block 2\n  - host: \"api.alpha.test\"\n    ports: [{port}]"
        )),
        "{draft}"
    );
    for comment in [
        format!("#   {}", network.gateway),
        "#   169.254.169.254 ports [80] x".to_owned(),
        "#   [2001:db8::5]".to_owned(),
    ] {
        assert!(draft.contains(&comment), "missing `{comment}` in:\n{draft}");
    }

    let check = binary()
        .args(["policy", "check"])
        .arg(&draft_path)
        .output()
        .unwrap();
    let checked = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{checked}");
    assert!(
        checked.contains("ok (2 allow rules, 0 deny rules, 0 warnings)"),
        "{checked}"
    );
    for name in names {
        let test = binary()
            .args(["policy", "test", "-p"])
            .arg(&draft_path)
            .arg(format!("{name}:{port}"))
            .output()
            .unwrap();
        assert!(
            test.status.success(),
            "{}",
            String::from_utf8_lossy(&test.stdout)
        );
    }

    // Enforce under the draft: the same program reaches the same hosts, and nothing else.
    let before = served(&https).len();
    let enforced = pins(
        Run::new(&network)
            .option("--policy", &draft_path)
            .policy(&gateway_floor(network.gateway, port)),
    )
    .run(&["sh", "-c", &script]);
    enforced.assert_code(0);
    assert_eq!(
        served(&https).len(),
        before,
        "paths are the same set; each was served again:\n{}",
        enforced.describe()
    );
    assert_eq!(
        https.requests().len(),
        6,
        "3 requests in each run\n{}",
        enforced.describe()
    );
    assert!(plain.requests().is_empty(), "{}", enforced.describe());
    let allowed: BTreeSet<&str> = enforced
        .audit_where(|r| r["decision"] == "allowed" && r["kind"] != "dns")
        .iter()
        .filter_map(|r| r["host"].as_str())
        .collect();
    assert_eq!(allowed, BTreeSet::from(names), "{}", enforced.describe());
    for refused in [
        network.gateway.to_string(),
        "169.254.169.254".to_owned(),
        "[2001:db8::5]".to_owned(),
    ] {
        assert!(
            !enforced
                .audit_where(|r| r["host"] == refused.as_str() && r["decision"] == "blocked")
                .is_empty(),
            "{refused} refused\n{}",
            enforced.describe()
        );
    }
    assert!(
        enforced
            .stdout
            .contains(&format!("https://api.alpha.test:{port}/alpha 0")),
        "{}",
        enforced.describe()
    );
    enforced.assert_nothing_left();
}
