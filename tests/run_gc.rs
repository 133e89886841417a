//! `gc` removes what dead runs left and leaves live runs alone.

mod run_support;

use run_support::*;

fn random_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("r-{:08x}", nanos ^ std::process::id().rotate_left(16))
}

#[test]
fn gc_removes_leftovers_of_a_dead_owner_and_keeps_live_ones() {
    let image = any_local_image();
    // A pid that cannot exist (above pid_max) stands for an owner that is gone.
    let dead_run = random_id();
    let (dead_container, dead_network) = make_leftovers(&dead_run, "4294967294:1", &image);
    let live_run = random_id();
    let (live_container, live_network) = make_leftovers(&live_run, &own_owner_label(), &image);

    let output = binary().arg("gc").output().unwrap();
    let listed = stdout(&output);
    let left_dead = objects_labelled("egress-sandbox.run", &dead_run);
    let left_live = objects_labelled("egress-sandbox.run", &live_run);
    remove_leftovers(&live_container, &live_network);
    remove_leftovers(&dead_container, &dead_network);

    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(left_dead.is_empty(), "gc left {left_dead:?}");
    assert!(
        listed.contains(&format!("container {dead_container}")),
        "{listed}"
    );
    assert!(
        listed.contains(&format!("network {dead_network}")),
        "{listed}"
    );
    assert_eq!(left_live.len(), 2, "gc touched a live run: {left_live:?}");
    assert_nothing_left(&live_run);
}

#[test]
fn gc_leaves_a_running_run_alone() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let mut child = start_long_run(&report);

    let gc = binary().arg("gc").output().unwrap();
    let owner_filter = format!("{}:", child.id());
    let still_there = {
        let listing = std::process::Command::new("docker")
            .args([
                "ps",
                "--filter",
                "label=egress-sandbox.owner",
                "--format",
                "{{.Label \"egress-sandbox.owner\"}}",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&listing.stdout)
            .lines()
            .filter(|owner| owner.starts_with(&owner_filter))
            .count()
    };
    send_signal(child.id(), "INT");
    let status = child.wait().unwrap();

    assert_eq!(code(&gc), 0);
    assert_eq!(still_there, 2, "gc removed parts of a live run");
    assert_eq!(status.code(), Some(130));
    assert_nothing_left(read_report(&report)["run"].as_str().unwrap());
}
