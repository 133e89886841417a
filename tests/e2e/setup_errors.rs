//! A run that cannot be set up exits 125, says why, and leaves nothing behind.

use crate::support::{Finished, Run, TestNetwork, objects_owned_by, random_hex};

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

#[test]
fn missing_image_exits_125_and_leaves_nothing() {
    let network = TestNetwork::create();
    let image = format!("egress-e2e-missing-{}:none", random_hex());
    let run = Run::new(&network)
        .option("--image", &image)
        .run(&["echo", "SHOULD-NOT-RUN"]);
    assert_refused_before_running(&run, &image);
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
