//! A policy in report mode lets through what only the allowlist would refuse (and logs it
//! as would_block), while deny rules and the private-address floor still hold.

use crate::support::docker::docker0_address;
use crate::support::{Canary, Run, TestNetwork, Upstream, random_hex};

#[test]
fn report_mode_lets_unlisted_hosts_through_but_keeps_deny_rules_and_the_floor() {
    let network = TestNetwork::create();
    let upstream = Upstream::https(
        (network.gateway, 0),
        &["other.test", "denied.test"],
        &format!("tls-{}", random_hex()),
    );
    let port = upstream.port();
    // A host address no cidr rule names: the floor must keep it out even in report mode.
    let private = Canary::bind((docker0_address(), 0));
    let policy = format!(
        "version: 1\nname: watch\nmode: report\n\
         allow:\n  - cidr: {gateway}/32\n    ports: [{port}]\n\
         deny:\n  - host: denied.test\n",
        gateway = network.gateway
    );
    let script = format!(
        "for url in https://other.test:{port}/listed-nowhere https://denied.test:{port}/denied \
         https://private.test:{private_port}/floor; do \
         curl -sSk --max-time 20 \"$url\" && echo; done; true",
        private_port = private.addr.port()
    );

    let run = Run::new(&network)
        .policy(&policy)
        .resolve("other.test", network.gateway)
        .resolve("denied.test", network.gateway)
        .resolve("private.test", docker0_address())
        .timeout("60s")
        .run(&["sh", "-c", &script]);

    run.assert_code(0);
    let requests = upstream.requests();
    assert!(
        requests.len() == 1 && requests[0].head.starts_with("GET /listed-nowhere "),
        "the upstream served {requests:?}\n{}",
        run.describe()
    );
    assert!(run.stdout.contains(&upstream.body), "{}", run.describe());
    private.assert_untouched();
    let decided = |host: &str, decision: &str, reason: &str| {
        !run.audit_where(|record| {
            record["host"] == host && record["decision"] == decision && record["reason"] == reason
        })
        .is_empty()
    };
    assert!(
        decided("other.test", "would_block", "not_allowed"),
        "{}",
        run.describe()
    );
    assert!(
        decided("denied.test", "blocked", "denied"),
        "{}",
        run.describe()
    );
    assert!(
        decided("private.test", "blocked", "private_address"),
        "{}",
        run.describe()
    );
    let report = run.report();
    assert!(
        report["attempts"]["would_block"].as_u64() >= Some(1),
        "{}",
        run.describe()
    );
    run.assert_nothing_left();
}

const REPORT_LINE: &str = "egress-sandbox: report mode: egress is open to every public host \
     (policy watch); only deny rules and the private-address floor refuse anything";
const MERGE_WARNING: &str = "egress-sandbox: warning: policy watch is in report mode, but merged \
     with cli (enforce) the run enforces";
const WATCH: &str = "version: 1\nname: watch\nmode: report\nallow:\n  - host: a.test\n";

/// A report-mode run says what report mode means before the command's output, once; a
/// `--allow` merged into it turns it to enforce and says so, naming the policy. Cold and
/// through `run --server` alike.
#[test]
fn report_mode_is_said_at_the_start_and_a_merge_into_enforce_is_warned() {
    let network = TestNetwork::create();
    let daemon = crate::serve::Daemon::start();
    for server in [None, Some(&daemon.socket)] {
        let with_server = |run: Run| match server {
            Some(socket) => run.option("--server", socket),
            None => run,
        };
        let run = with_server(Run::new(&network).policy(WATCH).timeout("60s")).run(&[
            "sh",
            "-c",
            "echo command-output >&2",
        ]);
        run.assert_code(0);
        let said = run.stderr.find(REPORT_LINE);
        let output = run.stderr.find("command-output");
        assert!(
            said.is_some() && said < output && run.stderr.matches(REPORT_LINE).count() == 1,
            "server {server:?}: {}",
            run.describe()
        );
        assert!(
            !run.stderr.contains("warning: policy"),
            "{}",
            run.describe()
        );

        let run = with_server(
            Run::new(&network)
                .policy(WATCH)
                .allow("b.test")
                .timeout("60s"),
        )
        .run(&["true"]);
        run.assert_code(0);
        assert!(
            run.stderr.contains(MERGE_WARNING),
            "server {server:?}: {}",
            run.describe()
        );
        assert!(!run.stderr.contains("report mode:"), "{}", run.describe());
    }
}

/// The API sends the same lines as `warning` events, before the run starts.
#[test]
fn the_api_sends_report_mode_and_the_merge_warning_as_warning_events() {
    use crate::serve::{Daemon, post, with_network};
    use serde_json::json;

    let network = TestNetwork::create();
    let daemon = Daemon::start();
    let report = post(
        &daemon,
        with_network(&network, json!({"argv": ["true"], "policies": [WATCH]})),
    )
    .unwrap();
    let merged = post(
        &daemon,
        with_network(
            &network,
            json!({"argv": ["true"], "policies": [WATCH], "allow": ["b.test"]}),
        ),
    )
    .unwrap();
    for (run, expected) in [(&report, REPORT_LINE), (&merged, MERGE_WARNING)] {
        assert_eq!(run.events[0]["event"], "warning", "{:#?}", run.events);
        assert!(
            run.events[0]["text"]
                .as_str()
                .is_some_and(|text| text.starts_with(expected)),
            "{:#?}",
            run.events
        );
        assert_eq!(run.report()["exit_code"], 0, "{:#?}", run.events);
    }
}
