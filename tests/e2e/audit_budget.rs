//! A program cannot spend the audit budget to hide its egress: it fills `--audit-limit` with
//! cheap refused lookups, then makes an allowed request. Under `--on-audit-limit reserve`
//! (the default) the request goes out and has its record; under `refuse` it is refused
//! before anything leaves, and the upstream never sees it. Either way the report counts
//! every attempt by decision and says what was dropped. Cold runs and a warm `serve` slot.

use serde_json::{Value, json};

use crate::serve::{Daemon, post, with_network};
use crate::support::{Run, TestNetwork, Upstream, gateway_policy, random_hex};

/// Records the run may write before refusals are only counted.
const LIMIT: &str = "5";
/// Refused lookups the program makes first: more than [`LIMIT`].
const REFUSALS: u64 = 8;

/// `REFUSALS` lookups of blocked names, each answer awaited (through the proxy's DNS
/// responder, as the sandbox's resolver is), then one plain request for
/// `http://upstream.test:PORT/after` through the proxy; prints the status it got.
const ATTACK: &str = r#"
import os, socket, struct, sys, urllib.request, urllib.error
proxy = os.environ["HTTP_PROXY"].split("//")[1].rsplit(":", 1)[0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
for i in range(int(sys.argv[1])):
    label = b"flood%d" % i
    s.sendto(struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) + bytes([len(label)])
             + label + b"\x07blocked\x04test\x00\x00\x01\x00\x01", (proxy, 53))
    s.recv(4096)
try:
    answer = urllib.request.urlopen("http://upstream.test:%s/after" % sys.argv[2], timeout=20)
    print("status", answer.status, flush=True)
except urllib.error.HTTPError as error:
    print("status", error.code, error.read().decode(errors="replace").strip(), flush=True)
"#;

fn attack_run(network: &TestNetwork, upstream: &Upstream) -> Run {
    let port = upstream.port();
    Run::new(network)
        .policy(&gateway_policy(
            "budget",
            network.gateway,
            &[port],
            &[("upstream.test", port)],
        ))
        .resolve("upstream.test", network.gateway)
        .option("--audit-limit", LIMIT)
        .timeout("60s")
}

fn attack_argv(upstream: &Upstream) -> Vec<String> {
    [
        "python3".to_owned(),
        "-c".to_owned(),
        ATTACK.to_owned(),
        REFUSALS.to_string(),
        upstream.port().to_string(),
    ]
    .into()
}

fn kinds<'a>(lines: impl IntoIterator<Item = &'a Value>) -> Vec<&'a str> {
    lines
        .into_iter()
        .map(|line| line["kind"].as_str().unwrap_or("?"))
        .collect()
}

/// What the run report must say once the allowed request went out from the reserve.
fn assert_reserve_report(report: &Value, context: &str) {
    assert_eq!(report["attempts"]["allowed"], 1, "{context}");
    assert_eq!(report["attempts"]["blocked"], REFUSALS, "{context}");
    assert_eq!(
        report["audit"],
        json!({"written": 7, "dropped": 3, "dropped_by_decision":
            {"allowed": 0, "blocked": 3, "would_block": 0, "failed": 0}}),
        "{context}"
    );
}

#[test]
fn an_allowed_request_after_the_budget_is_spent_on_refusals_is_recorded() {
    let network = TestNetwork::create();
    let upstream = Upstream::http((network.gateway, 0), &format!("budget-{}", random_hex()));
    let argv = attack_argv(&upstream);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = attack_run(&network, &upstream).run(&argv);
    run.assert_code(0);
    let context = run.describe();
    assert!(run.stdout.contains("status 200"), "{context}");
    assert_eq!(upstream.requests().len(), 1, "{context}");

    assert_eq!(
        kinds(&run.audit),
        ["dns", "dns", "dns", "dns", "dns", "limit", "http", "end"],
        "{context}"
    );
    let allowed = run.audit_where(|record| record["decision"] == "allowed");
    assert_eq!(allowed.len(), 1, "{context}");
    assert_eq!(allowed[0]["host"], "upstream.test");
    assert_eq!(allowed[0]["path"], "/after");
    assert_reserve_report(run.report(), &context);
    assert!(
        run.summary_line()
            .contains(&format!("; {REFUSALS} blocked: ")),
        "{context}"
    );
    run.assert_nothing_left();
}

#[test]
fn under_refuse_the_allowed_request_after_a_spent_budget_never_reaches_the_upstream() {
    let network = TestNetwork::create();
    // A canary that answers: were the request let through, the program would print 200.
    let canary = Upstream::http((network.gateway, 0), "must not be reached");
    let argv = attack_argv(&canary);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let run = attack_run(&network, &canary)
        .option("--on-audit-limit", "refuse")
        .run(&argv);
    run.assert_code(0);
    let context = run.describe();
    assert!(run.stdout.contains("status 503"), "{context}");
    assert!(run.stdout.contains("audit_limit"), "{context}");
    assert!(canary.requests().is_empty(), "{context}");

    assert_eq!(
        kinds(&run.audit),
        ["dns", "dns", "dns", "dns", "dns", "limit", "end"],
        "{context}"
    );
    let report = run.report();
    assert_eq!(report["attempts"]["allowed"], 0, "{context}");
    assert_eq!(report["attempts"]["blocked"], REFUSALS + 1, "{context}");
    assert_eq!(
        report["audit"]["dropped_by_decision"],
        json!({"allowed": 0, "blocked": 4, "would_block": 0, "failed": 0}),
        "{context}"
    );
    run.assert_nothing_left();
}

/// The same attack through a warm slot, under each option: the slot's proxy started before
/// the request, and gets the run's limit and option in the handoff at claim.
#[test]
fn through_a_warm_slot_the_allowed_request_is_recorded_or_refused_as_asked() {
    let network = TestNetwork::create();
    let upstream = Upstream::http((network.gateway, 0), &format!("warm-{}", random_hex()));
    let port = upstream.port();
    let daemon = Daemon::with_pool(1, &network);
    let request = |on_limit: &str| {
        with_network(
            &network,
            json!({
                "argv": attack_argv(&upstream),
                "policies": [gateway_policy("budget", network.gateway, &[port], &[("upstream.test", port)])],
                "resolve": {"upstream.test": network.gateway.to_string()},
                "audit_limit": 5,
                "on_audit_limit": on_limit,
            }),
        )
    };

    let run = post(&daemon, request("reserve")).unwrap();
    let context = format!("{:#?}", run.events);
    assert!(run.stream("stdout").contains("status 200"), "{context}");
    assert_eq!(upstream.requests().len(), 1, "{context}");
    assert_eq!(
        kinds(run.audit()),
        ["dns", "dns", "dns", "dns", "dns", "limit", "http", "end"],
        "{context}"
    );
    assert_reserve_report(run.report(), &context);

    // The slot's proxy was started with the default, `reserve`: `refuse` comes at claim.
    daemon.wait_pool_ready(1);
    let run = post(&daemon, request("refuse")).unwrap();
    let context = format!("{:#?}", run.events);
    assert!(run.stream("stdout").contains("status 503"), "{context}");
    assert_eq!(
        upstream.requests().len(),
        1,
        "reached under refuse: {context}"
    );
    assert_eq!(run.report()["attempts"]["allowed"], 0, "{context}");
    assert_eq!(
        run.report()["attempts"]["blocked"],
        REFUSALS + 1,
        "{context}"
    );
    assert!(
        daemon
            .metrics()
            .contains("egress_sandbox_run_starts_total{path=\"warm\"} 2"),
        "not both served warm: {context}"
    );
    daemon.stop();
}
