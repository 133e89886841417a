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
