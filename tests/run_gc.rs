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
    let (dead_container, dead_network) = make_leftovers(
        &dead_run,
        &format!("4294967294:1:{}", host_identity()),
        &image,
    );
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

/// Owners gc cannot judge — another host or PID namespace sharing the engine, or a label
/// without a host identity — are left alone and reported with the reason, even when their
/// pid means nothing here.
#[test]
fn gc_skips_and_reports_owners_of_another_host_identity() {
    let image = any_local_image();
    let here = host_identity();
    let (boot_id, namespace) = here.split_once(':').unwrap();
    let namespace: u64 = namespace.parse().unwrap();
    let owners = [
        "4294967294:1:00000000-0000-4000-8000-000000000000:1".to_string(),
        format!("4294967294:1:{boot_id}:{}", namespace + 1),
        "4294967294:1".to_string(),
    ];
    let runs: Vec<(String, (String, String))> = owners
        .iter()
        .map(|owner| {
            let run = random_id();
            let objects = make_leftovers(&run, owner, &image);
            (run, objects)
        })
        .collect();

    let output = binary().arg("gc").output().unwrap();
    let left: Vec<Vec<String>> = runs
        .iter()
        .map(|(run, _)| objects_labelled("egress-sandbox.run", run))
        .collect();
    for (_, (container, network)) in &runs {
        remove_leftovers(container, network);
    }

    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let said = stderr(&output);
    for ((run, (container, network)), left) in runs.iter().zip(&left) {
        assert_eq!(left.len(), 2, "gc removed objects of run {run}: {left:?}");
        assert!(
            said.contains(&format!("skipped container {container} (run {run})")),
            "{said}"
        );
        assert!(
            said.contains(&format!("skipped network {network} (run {run})")),
            "{said}"
        );
        assert_nothing_left(run);
    }
    assert!(said.contains("another host or PID namespace"), "{said}");
    assert!(said.contains("has no host identity"), "{said}");
    // Only skipping is still something done: the last line says how much.
    let last = said.lines().last().unwrap_or_default();
    let skipped: usize = last
        .split_once(", skipped ")
        .and_then(|(_, rest)| rest.split(',').next())
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or_else(|| panic!("no summary line: {said}"));
    assert!(last.starts_with("egress-sandbox: gc: removed "), "{said}");
    assert!(skipped >= 2 * runs.len(), "{said}");
}

/// Where `/proc` hides other users' processes (`hidepid=2`, common on shared hosts), an
/// owner missing from `/proc` is not gone: `gc` run by another member of the docker group
/// asks the kernel, and keeps the live run (it removed it, taking "not in /proc" for dead).
#[test]
fn gc_keeps_a_live_run_whose_owner_proc_hides() {
    let docker_gid = std::process::Command::new("getent")
        .args(["group", "docker"])
        .output()
        .ok()
        .and_then(|output| {
            String::from_utf8(output.stdout)
                .ok()?
                .split(':')
                .nth(2)
                .map(str::to_owned)
        })
        .expect("a docker group (the socket's group) to run gc as another member of");
    let image = any_local_image();
    let live_run = random_id();
    let (live_container, live_network) = make_leftovers(&live_run, &own_owner_label(), &image);
    let dead_run = random_id();
    let (dead_container, dead_network) = make_leftovers(
        &dead_run,
        &format!("4294967294:1:{}", host_identity()),
        &image,
    );
    let script = format!(
        "mount -t proc -o hidepid=2 proc /proc && exec setpriv --reuid=65534 --regid={docker_gid} --clear-groups {} gc",
        env!("CARGO_BIN_EXE_egress-sandbox")
    );
    let output = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    let left_live = objects_labelled("egress-sandbox.run", &live_run);
    let left_dead = objects_labelled("egress-sandbox.run", &dead_run);
    remove_leftovers(&live_container, &live_network);
    remove_leftovers(&dead_container, &dead_network);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(
        left_live.len(),
        2,
        "gc removed a live run: {}",
        stdout(&output)
    );
    assert!(
        left_dead.is_empty(),
        "gc left a dead owner's run: {left_dead:?}"
    );
}

/// A directory named as a run's in the temporary directory, stamped with a dead owner, but
/// made by another user (uid 65534): not this user's run, so `gc` leaves it; this user's
/// own goes.
#[test]
fn gc_removes_only_the_run_directories_of_its_own_user() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let dead_owner = format!("4294967294:1:{}", host_identity());
    let theirs = tmp.path().join("egress-sandbox-run-Theirs");
    let planted = std::process::Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .args([
            "sh",
            "-euc",
            "mkdir \"$1\"; printf %s \"$2\" > \"$1/owner\"",
            "sh",
        ])
        .arg(&theirs)
        .arg(&dead_owner)
        .status()
        .unwrap();
    assert!(planted.success());
    let ours = tmp.path().join("egress-sandbox-run-Ours");
    std::fs::create_dir(&ours).unwrap();
    std::fs::write(ours.join("owner"), &dead_owner).unwrap();

    let output = binary()
        .env("TMPDIR", tmp.path())
        .arg("gc")
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        theirs.join("owner").exists(),
        "gc removed another user's directory"
    );
    assert!(!ours.exists(), "gc left its own user's dead run directory");
}
