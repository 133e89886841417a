//! A run that cannot be set up exits 125, says why, and leaves nothing behind.

use crate::support::{
    Finished, GoSignal, Run, TestNetwork, docker_ok, objects_owned_by, random_hex,
};

fn assert_refused_before_running(run: &Finished, why: &str) {
    run.assert_code(125);
    assert!(
        run.stderr.contains(why),
        "stderr does not say {why:?}\n{}",
        run.describe()
    );
    assert!(
        !run.stdout.contains("SHOULD-NOT-RUN"),
        "the command ran\n{}",
        run.describe()
    );
    let (left, _) = objects_owned_by(run.pid);
    left.remove();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Several at once: a run that fails its image check while its network is being created
/// must still remove that network.
#[test]
fn missing_image_exits_125_and_leaves_nothing() {
    const RUNS: usize = 8;
    let network = TestNetwork::create();
    let image = format!("egress-e2e-missing-{}:none", random_hex());
    let running: Vec<_> = (0..RUNS)
        .map(|_| {
            Run::new(&network)
                .option("--image", &image)
                .spawn(&["echo", "SHOULD-NOT-RUN"])
        })
        .collect();
    let finished: Vec<Finished> = running.into_iter().map(|run| run.wait()).collect();
    // A create request already sent when a run gave up completes in the daemon anyway;
    // the run's teardown waits for it and removes what it made, so look right away.
    for run in &finished {
        assert_refused_before_running(run, &image);
    }
}

#[test]
fn invalid_policy_exits_125_with_file_line_column_and_leaves_nothing() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .policy("version: 1\nallow:\n  - host: \"*\"\n")
        .run(&["echo", "SHOULD-NOT-RUN"]);
    // The policy is written as policy-1.yaml; the error points into it, line 3.
    assert_refused_before_running(&run, "policy-1.yaml:3:");
}

#[test]
fn unknown_runtime_exits_125_naming_the_engines_runtimes_and_creates_nothing() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .option("--runtime", "no-such-runtime")
        .run(&["echo", "SHOULD-NOT-RUN"]);
    assert_refused_before_running(&run, "no runtime \"no-such-runtime\"");
    assert!(run.stderr.contains("runc"), "{}", run.describe());
}

#[test]
fn runtime_named_explicitly_runs_the_sandbox_with_it() {
    let network = TestNetwork::create();
    let signal = GoSignal::new();
    let mut running = Run::new(&network)
        .option("--runtime", "runc")
        .option("--mount", signal.mount())
        .timeout("60s")
        .spawn(&["sh", "-c", &format!("echo LIVE; {}", GoSignal::WAIT)]);
    running.wait_for_stdout("LIVE");
    let (owned, _) = objects_owned_by(running.pid);
    let sandbox = owned
        .containers
        .iter()
        .find(|name| name.ends_with("-sandbox"))
        .expect("a sandbox container")
        .clone();
    let runtime = docker_ok(&["inspect", "-f", "{{.HostConfig.Runtime}}", &sandbox]);
    signal.go();
    let run = running.wait();

    run.assert_code(0);
    assert_eq!(runtime, "runc", "{}", run.describe());
    run.assert_nothing_left();
}
