//! The run hands its proxy the policies, allow flags, pins and run id over the proxy
//! container's stdin: nothing of it is in the container's arguments, and a policy file
//! name may hold any character (`a=b.yaml` once broke the run after Docker objects existed).

use crate::support::{GoSignal, Run, TestNetwork, Upstream, docker_ok, gateway_policy, random_hex};

#[test]
fn policy_named_a_equals_b_works_and_the_proxy_arguments_hold_no_policy() {
    let network = TestNetwork::create();
    let https = Upstream::https(
        (network.gateway, 0),
        &["handoff.test"],
        &format!("tls-{}", random_hex()),
    );
    let port = https.port();
    // A marker that appears in the policy text only: if it shows up in the proxy's
    // arguments, the policy travelled there.
    let marker = format!("marker-{}.test", random_hex());
    let mut yaml = gateway_policy(
        "handoff",
        network.gateway,
        &[port],
        &[("handoff.test", port)],
    );
    yaml += &format!("  - host: {marker}\n    ports: [443]\n");
    let signal = GoSignal::new();
    let script = format!(
        "curl -sSk --max-time 20 https://handoff.test:{port}/x; echo; echo REACHED; {}",
        GoSignal::WAIT
    );

    let mut running = Run::new(&network)
        .policy_named("a=b.yaml", &yaml)
        .resolve("handoff.test", network.gateway)
        .option("--mount", signal.mount())
        .timeout("60s")
        .spawn(&["sh", "-c", &script]);
    running.wait_for_stdout("REACHED");
    let proxy = running.proxy_container();
    let args = docker_ok(&[
        "inspect",
        "-f",
        "{{json .Path}} {{json .Args}} {{json .Config.Cmd}} {{json .Config.Entrypoint}}",
        &proxy,
    ]);
    signal.go();
    let run = running.wait();

    run.assert_code(0);
    assert!(run.stdout.contains(&https.body), "{}", run.describe());
    assert!(args.contains("--config-stdin"), "{args}");
    for secret in [marker.as_str(), "handoff.test", "version", "a=b.yaml"] {
        assert!(
            !args.contains(secret),
            "{secret:?} in the proxy's arguments: {args}"
        );
    }
    assert!(
        !args.contains(&run.run_id()),
        "run id in the arguments: {args}"
    );
    assert!(
        !run.audit_where(
            |record| record["host"] == "handoff.test" && record["decision"] == "allowed"
        )
        .is_empty(),
        "{}",
        run.describe()
    );
    run.assert_nothing_left();
}
