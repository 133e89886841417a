//! A run against the real engine: output relayed, the command's exit status, the report,
//! the time limit and SIGTERM — and nothing left behind afterwards.

mod run_support;

use std::time::{Duration, Instant};

use run_support::*;

#[test]
fn run_relays_output_and_exits_with_the_commands_status() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let output = run(&[
        "--report",
        report.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo out-line; echo err-line >&2; exit 7",
    ]);
    assert_eq!(code(&output), 7, "stderr: {}", stderr(&output));
    assert_eq!(stdout(&output), "out-line\n");
    let err = stderr(&output);
    assert!(err.contains("err-line\n"), "{err}");
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with("egress-sandbox: exit 7 after "),
        "{err}"
    );
    let report = read_report(&report);
    assert_eq!(report["status"], "exited");
    assert_eq!(report["exit_code"], 7);
    assert_eq!(report["output"]["stdout_bytes"], 9);
    assert_eq!(report["output"]["stderr_bytes"], 9);
    assert_nothing_left(report["run"].as_str().unwrap());
}

#[test]
fn time_limit_kills_the_whole_container_with_124() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let started = Instant::now();
    // A double-forked child that ignores SIGTERM, and a parent that never ends.
    let output = run(&[
        "--timeout",
        "2s",
        "--report",
        report.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "(trap '' TERM; sh -c 'trap \"\" TERM; sleep 600' &) ; echo started; sleep 600",
    ]);
    assert_eq!(code(&output), 124, "stderr: {}", stderr(&output));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "hang-catching bound"
    );
    assert_eq!(stdout(&output), "started\n");
    let report = read_report(&report);
    assert_eq!(report["status"], "timeout");
    assert_eq!(report["exit_code"], 124);
    // The container (and with it every process in it) is gone.
    assert_nothing_left(report["run"].as_str().unwrap());
}

#[test]
fn sigterm_tears_down_and_exits_143() {
    signal_tears_down_and_exits_143("TERM");
}

/// A hangup (the terminal or SSH session went away) ends the run as SIGTERM does; it killed
/// `run` and left the sandbox running past its time limit.
#[test]
fn sighup_tears_down_and_exits_143() {
    signal_tears_down_and_exits_143("HUP");
}

fn signal_tears_down_and_exits_143(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let mut child = start_long_run(&report);
    let pid = child.id();
    send_signal(pid, signal);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "SIG{signal}");
    let report = read_report(&report);
    assert_eq!(report["status"], "interrupted");
    assert_nothing_left(report["run"].as_str().unwrap());
    assert_nothing_left_by(pid);
}

#[test]
fn output_past_the_limit_is_dropped_with_one_marker() {
    let output = run(&[
        "--output-limit",
        "1KiB",
        "--",
        "sh",
        "-c",
        "head -c 100000 /dev/zero | tr '\\0' x; echo; echo tail-line",
    ]);
    assert_eq!(code(&output), 0, "stderr: {}", stderr(&output));
    assert_eq!(output.stdout.len(), 1024);
    let err = stderr(&output);
    assert_eq!(
        err.matches("[egress-sandbox: output truncated after 1024 bytes]")
            .count(),
        1,
        "{err}"
    );
    assert!(!stdout(&output).contains("tail-line"));
}
