//! The seed check from the design, verbatim in spirit: code that prints its environment,
//! reads /etc/hostname, calls https://test.example.org and loops forever.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::docker::docker;
use crate::support::{Canary, Run, TestNetwork, gateway_policy, objects_owned_by, random_hex};

const SEED_PROGRAM: &str = r#"
import os, sys, urllib.request
print("ENVIRONMENT", dict(os.environ), flush=True)
print("HOSTNAME", open("/etc/hostname").read().strip(), flush=True)
try:
    urllib.request.urlopen("https://test.example.org", timeout=10)
    print("FETCHED", flush=True)
except Exception as error:
    print("REFUSED", error, flush=True)
while True:
    pass
"#;

#[test]
fn seed_check_keeps_the_secret_refuses_the_call_and_stops_the_loop() {
    let network = TestNetwork::create();
    // Where test.example.org would land if the proxy ever let it through; the cidr rule
    // lets that address pass the floor, so only the allowlist stands in the way.
    let canary = Canary::bind((network.gateway, 443));
    let secret = format!("s3cr3t-{}", random_hex());

    let running = Run::new(&network)
        .policy(&gateway_policy("seed", network.gateway, &[443], &[]))
        .resolve("test.example.org", network.gateway)
        .timeout("5s")
        .caller_env("EGRESS_TEST_SECRET", &secret)
        .spawn(&["python3", "-c", SEED_PROGRAM]);
    // While it runs, the configuration of both containers (env, command, labels) as Docker
    // holds it: the secret must not be there either.
    let pid = running.pid;
    let mut inspected = BTreeMap::new();
    let mut last_look = Instant::now();
    let run = running.wait_with(|| {
        if inspected.len() == 2 || last_look.elapsed() < Duration::from_millis(250) {
            return;
        }
        last_look = Instant::now();
        for container in objects_owned_by(pid).0.containers {
            if let (true, config, _) = docker(&["inspect", &container]) {
                inspected.entry(container).or_insert(config);
            }
        }
    });

    run.assert_code(124);
    assert!(
        run.stdout.contains("ENVIRONMENT {") && run.stdout.contains("HOSTNAME "),
        "the program did not print its environment and hostname\n{}",
        run.describe()
    );
    assert!(
        run.stdout.contains("REFUSED") && !run.stdout.contains("FETCHED"),
        "the call was not refused\n{}",
        run.describe()
    );
    for (place, text) in [
        ("stdout", run.stdout.as_str()),
        ("stderr", run.stderr.as_str()),
        ("audit log", run.audit_text.as_str()),
        ("report", run.report_text.as_deref().unwrap_or_default()),
    ] {
        assert!(!text.contains(&secret), "the secret leaked into {place}");
        assert!(
            !text.contains("EGRESS_TEST_SECRET"),
            "the secret's variable name leaked into {place}"
        );
    }
    assert_eq!(
        inspected.len(),
        2,
        "could not inspect the proxy and sandbox containers during the run: {:?}",
        inspected.keys()
    );
    for (container, config) in &inspected {
        assert!(
            !config.contains(&secret),
            "the secret is in the configuration of {container}"
        );
    }
    let host_hostname = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    assert!(
        !run.stdout
            .contains(&format!("HOSTNAME {}\n", host_hostname.trim())),
        "the sandbox has the host's hostname\n{}",
        run.describe()
    );
    canary.assert_untouched();

    let refusals = run.audit_where(|record| {
        record["host"] == "test.example.org"
            && record["port"] == 443
            && record["decision"] == "blocked"
            && record["reason"] == "not_allowed"
    });
    assert!(
        !refusals.is_empty(),
        "no not_allowed record for test.example.org:443\n{}",
        run.describe()
    );
    let summary = run.summary_line();
    assert!(
        summary.contains("test.example.org:443 not_allowed"),
        "summary line lacks the refusal: {summary}"
    );
    let report = run.report();
    assert_eq!(report["status"], "timeout", "{}", run.describe());
    assert_eq!(report["exit_code"], 124, "{}", run.describe());
    let blocked = report["blocked"]
        .as_array()
        .expect("report.blocked is a list");
    assert!(
        blocked
            .iter()
            .any(|entry| entry["host"] == "test.example.org"
                && entry["port"] == 443
                && entry["reason"] == "not_allowed"
                && entry["count"].as_u64() >= Some(1)),
        "report.blocked lacks test.example.org:443 not_allowed\n{}",
        run.describe()
    );
    run.assert_nothing_left();
}
