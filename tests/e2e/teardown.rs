//! Teardown when egress-sandbox itself is stopped: SIGTERM tears the run down; after a
//! SIGKILL its watchdog does, and without the watchdog too `egress-sandbox gc` does. A caller that reads no
//! output does not hold up a time-limit kill.

use std::time::Duration;

use crate::support::run::binary;
use crate::support::{Run, RunningRun, TestNetwork, leftovers, objects_owned_by};

/// The host directories (resolv.conf, doors, trust bundle) of runs of process `pid`: their
/// names are neutral; the owner's stamp, which begins with its pid, is in their `owner` file.
fn host_dirs_of(pid: u32) -> Vec<String> {
    host_dirs_in(&std::env::temp_dir(), pid)
}

/// The run directories in `temp_dir` whose owner stamp names `pid`.
fn host_dirs_in(temp_dir: &std::path::Path, pid: u32) -> Vec<String> {
    let entries = std::fs::read_dir(temp_dir).expect("the temp directory lists");
    entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("egress-sandbox-run-"))
        .filter(|name| {
            std::fs::read_to_string(temp_dir.join(name).join("owner"))
                .is_ok_and(|stamp| stamp.starts_with(&format!("{pid}:")))
        })
        .collect()
}

/// Starts a run that prints STARTED and then sleeps, waits for STARTED, and returns it
/// with its run id (read from the labels of the objects it owns, which must exist).
fn started_run(network: &TestNetwork) -> (RunningRun, String) {
    started_run_with(Run::new(network))
}

fn started_run_with(run: Run) -> (RunningRun, String) {
    let mut running = run
        .timeout("100s")
        .hang_bound(Duration::from_secs(120))
        .spawn(&["sh", "-c", "echo STARTED; exec sleep 1000"]);
    running.wait_for_stdout("STARTED");
    let (owned, run_ids) = objects_owned_by(running.pid);
    assert!(
        owned.containers.len() == 2 && owned.networks.is_empty(),
        "a running run owns other than its two containers (and no network): {owned:?}"
    );
    assert_eq!(run_ids.len(), 1, "one run, several run ids: {run_ids:?}");
    let run_id = run_ids.into_iter().next().expect("one run id");
    (running, run_id)
}

/// Interrupts a run with `signal` and checks it tears down, reports and exits with `code`.
fn interrupted_run_tears_down(signal: &str, code: i32) {
    let network = TestNetwork::create();
    let (running, run_id) = started_run(&network);
    running.signal(signal);
    let run = running.wait();

    run.assert_code(code);
    assert_eq!(run.report()["status"], "interrupted", "{}", run.describe());
    assert_eq!(run.run_id(), run_id);
    run.assert_nothing_left();
}

#[test]
fn sigterm_mid_run_tears_down_and_exits_143() {
    interrupted_run_tears_down("TERM", 143);
}

#[test]
fn sigint_mid_run_tears_down_and_exits_130() {
    interrupted_run_tears_down("INT", 130);
}

/// SIGKILL (or the OOM killer, or a crash) gives `run` no chance to tear down; before the
/// watchdog, the sandbox ran on past its time limit, unaudited, until someone ran `gc`. The
/// watchdog sees `run` end without standing down and removes the run's objects at once.
/// `run`'s stderr stays open until the watchdog is done: its end is the event waited for
/// (and `run` is reaped only then, so no sweep elsewhere beats the watchdog to it).
#[test]
fn sigkill_mid_run_is_torn_down_by_the_watchdog() {
    let network = TestNetwork::create();
    let (running, run_id) = started_run(&network);
    running.signal("KILL");
    let run = running.wait_killed();
    assert_eq!(run.status.code(), None, "not killed: {}", run.status);
    let said = format!(
        "egress-sandbox: process {} ended without removing its runs; removed container \
         egress-run-{run_id}-sandbox (run {run_id})",
        run.pid
    );
    assert!(run.stderr.contains(&said), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("ended without removing its runs; removed directory "),
        "{}",
        run.stderr
    );
    let dirs = host_dirs_of(run.pid);
    assert!(
        dirs.is_empty(),
        "the watchdog left host directories {dirs:?}"
    );
    let left = leftovers(&run_id);
    assert!(left.is_empty(), "the watchdog left {left:?}");
    let (owned, _) = objects_owned_by(run.pid);
    assert!(owned.is_empty(), "the watchdog left {owned:?}");
}

/// With the watchdog killed as well (or the machine down), the objects stay; they carry
/// their owner's stamp, so `gc` proves the owner dead and removes them.
///
/// The run and its `gc` share a temporary directory of their own: a `serve` daemon that
/// starts meanwhile in another test sweeps the dead owner's leftovers in the usual one, and
/// would take the directories this `gc` is to remove.
#[test]
fn sigkill_of_run_and_its_watchdog_leaves_objects_that_gc_removes() {
    let network = TestNetwork::create();
    let temp_dir = tempfile::tempdir().expect("a temporary directory");
    let (running, run_id) = started_run_with(
        Run::new(&network).caller_env("TMPDIR", temp_dir.path().to_str().unwrap()),
    );
    let host_dirs_of = |pid| host_dirs_in(temp_dir.path(), pid);
    let dirs = host_dirs_of(running.pid);
    assert_eq!(
        dirs.len(),
        2,
        "a run's resolv.conf and doors directories: {dirs:?}"
    );
    crate::support::kill_watchdog_of(running.pid);
    running.signal("KILL");
    let run = running.wait();
    assert_eq!(
        run.status.code(),
        None,
        "SIGKILL did not kill it: {}",
        run.status
    );

    let left = leftovers(&run_id);
    assert!(
        left.containers.len() == 2,
        "expected the killed run's objects to remain until gc, found {left:?}"
    );
    assert_eq!(
        host_dirs_of(run.pid),
        dirs,
        "the killed run's host directories"
    );
    let gc = binary()
        .arg("gc")
        .env("TMPDIR", temp_dir.path())
        .output()
        .expect("run egress-sandbox gc");
    assert!(
        gc.status.success(),
        "gc failed ({}): {}",
        gc.status,
        String::from_utf8_lossy(&gc.stderr)
    );
    let said = String::from_utf8_lossy(&gc.stdout);
    for dir in &dirs {
        assert!(
            said.contains("removed directory ") && said.contains(dir.as_str()),
            "{said}"
        );
    }
    let left_dirs = host_dirs_of(run.pid);
    assert!(
        left_dirs.is_empty(),
        "gc left host directories {left_dirs:?}"
    );
    // Removes whatever gc missed (after reporting it) so the next tests start clean.
    crate::support::assert_nothing_left(&run_id, run.pid);
}

/// A run cannot keep its promise that every attempt is recorded once its proxy is gone: the
/// sandbox is killed at once, the run says why (status `proxy_failed`, exit 125), and
/// nothing is left.
#[test]
fn a_proxy_killed_mid_run_kills_the_sandbox_and_the_run_fails_with_125() {
    let network = TestNetwork::create();
    // The time limit is far above the hang bound: only the proxy's death can end this run
    // in time.
    let mut running = Run::new(&network)
        .timeout("600s")
        .hang_bound(Duration::from_secs(90))
        .spawn(&["sh", "-c", "echo LOOPING; while true; do sleep 0.2; done"]);
    running.wait_for_stdout("LOOPING");
    let proxy = running.proxy_container();
    crate::support::docker_ok(&["kill", &proxy]);
    let run = running.wait();

    run.assert_code(125);
    assert_eq!(run.report()["status"], "proxy_failed", "{}", run.describe());
    let summary = run.summary_line();
    assert!(
        summary.contains("the proxy stopped during the run")
            && summary.contains("killed (exit 125)"),
        "{summary}"
    );
    run.assert_nothing_left();
}

/// A time-limit kill is not held up by a caller that reads no output (found in review:
/// `run --timeout 3s -- yes | sleep 25` said "killed after 3.0s" but returned, and left its
/// containers running, only when `sleep` ended: the engine does not finish a kill while
/// the container's attached output is not read, and the relay was waiting on the full
/// pipe). The bound catches that hang; it is no timing.
#[test]
fn a_time_limit_kill_is_not_held_up_by_a_caller_that_reads_no_output() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .timeout("2s")
        .option("--output-limit", "1GiB")
        .stdout_unread()
        .hang_bound(Duration::from_secs(30))
        .run(&["yes"]);

    run.assert_code(124);
    assert_eq!(run.report()["status"], "timeout", "{}", run.describe());
    run.assert_nothing_left();
}
