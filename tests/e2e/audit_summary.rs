//! `egress-sandbox audit summary` over an audit log a real run produced.

use crate::support::run::binary;
use crate::support::{Run, TestNetwork, Upstream, gateway_policy, random_hex};

#[test]
fn audit_summary_groups_refusals_by_host_port_and_reason() {
    let network = TestNetwork::create();
    let upstream = Upstream::https(
        (network.gateway, 0),
        &["upstream.test"],
        &format!("ok-{}", random_hex()),
    );
    let port = upstream.port();
    let script = format!(
        "for url in https://blocked-a.test/ https://blocked-a.test/again \
         https://blocked-b.test:8443/ https://upstream.test:{port}/; do \
         curl -sk -o /dev/null --max-time 20 -w \"$url %{{http_code}}\\n\" \"$url\"; done; true"
    );
    let run = Run::new(&network)
        .policy(&gateway_policy(
            "summary",
            network.gateway,
            &[port],
            &[("upstream.test", port)],
        ))
        .resolve("upstream.test", network.gateway)
        .timeout("60s")
        .run(&["sh", "-c", &script]);
    run.assert_code(0);
    assert_eq!(upstream.requests().len(), 1, "{}", run.describe());

    let blocked = run.report()["blocked"].clone();
    let expected = serde_json::json!([
        {"host": "blocked-a.test", "port": 443, "reason": "not_allowed", "count": 2},
        {"host": "blocked-b.test", "port": 8443, "reason": "not_allowed", "count": 1},
    ]);
    let without_extra_keys: Vec<_> = blocked
        .as_array()
        .expect("report.blocked is a list")
        .iter()
        .map(|entry| {
            serde_json::json!({"host": entry["host"], "port": entry["port"],
                "reason": entry["reason"], "count": entry["count"]})
        })
        .collect();
    assert_eq!(
        serde_json::Value::from(without_extra_keys),
        expected,
        "{}",
        run.describe()
    );

    let summary = binary()
        .args(["audit", "summary"])
        .arg(run.audit_log_path())
        .output()
        .expect("run egress-sandbox audit summary");
    let text = String::from_utf8_lossy(&summary.stdout);
    assert!(
        summary.status.success(),
        "audit summary failed ({}): {}",
        summary.status,
        String::from_utf8_lossy(&summary.stderr)
    );
    let line_for = |host: &str| -> Vec<String> {
        let found: Vec<&str> = text.lines().filter(|line| line.contains(host)).collect();
        assert!(
            found.iter().all(|line| line.contains("blocked")),
            "a refused row without its decision:\n{text}"
        );
        assert_eq!(found.len(), 1, "expected one line for {host}:\n{text}");
        found[0]
            // Tokens are runs of name characters, so any layout ("host:port reason 2",
            // "2x host port reason", a table) works as long as the values are there.
            .split(|c: char| !(c.is_ascii_alphanumeric() || "._-".contains(c)))
            .filter(|token| !token.is_empty())
            .map(str::to_owned)
            .collect()
    };
    for (host, port, count) in [
        ("blocked-a.test", "443", "2"),
        ("blocked-b.test", "8443", "1"),
    ] {
        let tokens = line_for(host);
        for expected in [host, port, "not_allowed", count] {
            assert!(
                tokens.iter().any(|token| token == expected),
                "summary line for {host} lacks {expected:?}: {tokens:?}\n{text}"
            );
        }
    }
    let (refusals, allowed) = text
        .split_once("allowed hosts:\n")
        .unwrap_or_else(|| panic!("no allowed hosts section:\n{text}"));
    assert!(
        !refusals.contains("upstream.test"),
        "an allowed host is in the refusals:\n{text}"
    );
    assert!(
        allowed.lines().any(|line| line.contains("upstream.test")),
        "the allowed host is not listed:\n{text}"
    );
    run.assert_nothing_left();
}
