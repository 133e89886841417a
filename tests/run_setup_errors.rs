//! Runs that cannot be set up: exit 125, a clear message, and no Docker object left.

mod run_support;

use std::process::Stdio;

use run_support::*;

fn run_as_child(args: &[&str]) -> (i32, String, u32) {
    let child = binary()
        .arg("run")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    (code(&output), stderr(&output), pid)
}

#[test]
fn bad_policy_is_refused_with_its_location() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("bad.yaml");
    std::fs::write(
        &policy,
        "version: 1\nallow:\n  - host: https://api.example.com/\n",
    )
    .unwrap();
    let (code, err, pid) = run_as_child(&["-p", policy.to_str().unwrap(), "--", "true"]);
    assert_eq!(code, 125, "{err}");
    let location = format!("{}:3:", policy.display());
    assert!(err.contains(&location) && err.contains("error"), "{err}");
    assert_nothing_left_by(pid);
}

#[test]
fn flag_above_the_policy_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("strict.yaml");
    std::fs::write(
        &policy,
        "version: 1\nname: strict\nlimits:\n  timeout: 30s\n",
    )
    .unwrap();
    let (code, err, pid) = run_as_child(&[
        "-p",
        policy.to_str().unwrap(),
        "--timeout",
        "10m",
        "--",
        "true",
    ]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("--timeout 10m is above the limit of policy strict (timeout: 30s)"),
        "{err}"
    );
    assert_nothing_left_by(pid);
}

#[test]
fn missing_image_is_refused_and_the_run_network_removed() {
    let (code, err, pid) = run_as_child(&[
        "--image",
        "egress-sandbox-test-no-such-image:never",
        "--",
        "true",
    ]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("egress-sandbox-test-no-such-image:never not found locally"),
        "{err}"
    );
    assert_nothing_left_by(pid);
}

/// An image reference the engine cannot parse is the flag's fault, said so, not a hint
/// that the Docker daemon may be down (what the engine's 400 was reported as).
#[test]
fn an_invalid_image_reference_is_refused_as_such() {
    for image in ["UPPER/bad", "a@sha256:zz"] {
        let (code, err, pid) = run_as_child(&["--image", image, "--", "true"]);
        assert_eq!(code, 125, "{err}");
        assert!(
            err.contains(&format!("--image {image:?} is not a valid image reference")),
            "{err}"
        );
        assert!(!err.contains("is the Docker daemon running"), "{err}");
        assert_nothing_left_by(pid);
    }
}

#[test]
fn missing_egress_network_is_refused() {
    let image = any_local_image();
    let (code, err, pid) = run_as_child(&[
        "--image",
        &image,
        "--egress-network",
        "egress-sandbox-test-no-such-network",
        "--",
        "true",
    ]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("egress-sandbox-test-no-such-network"), "{err}");
    assert_nothing_left_by(pid);
}

#[test]
fn unreachable_engine_is_a_clear_125() {
    let output = binary()
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 125);
    assert!(
        stderr(&output)
            .contains("cannot reach the Docker engine at unix:///nonexistent/docker.sock"),
        "{}",
        stderr(&output)
    );
}

/// One parser each for pins, durations and sizes: `run`, its proxy and a policy agree on
/// `127.1` (a shorthand, refused by both with the address it stands for) and on zero
/// (refused by both the flags and the policy).
#[test]
fn run_proxy_and_policy_parse_pins_and_limits_alike() {
    let shorthand = "--resolve \"api.test=127.1\": `127.1` is a shorthand of 127.0.0.1; write the address in full";
    let (status, err, pid) = run_as_child(&["--resolve", "api.test=127.1", "--", "true"]);
    assert_eq!(status, 125, "{err}");
    assert!(err.contains(shorthand), "{err}");
    assert_nothing_left_by(pid);
    let proxy = binary()
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--resolve",
            "api.test=127.1",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&proxy), 125, "{}", stderr(&proxy));
    assert!(stderr(&proxy).contains(shorthand), "{}", stderr(&proxy));

    for (flag, value) in [
        ("--output-limit", "0"),
        ("--tmp", "0KiB"),
        ("--timeout", "0s"),
    ] {
        let (status, err, pid) = run_as_child(&[flag, value, "--", "true"]);
        assert_eq!(status, 125, "{flag} {value}: {err}");
        assert!(err.contains(&format!("`{value}` is zero")), "{err}");
        assert_nothing_left_by(pid);
    }
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("zero.yaml");
    std::fs::write(&policy, "version: 1\nlimits:\n  output: 0\n").unwrap();
    let (status, err, _) = run_as_child(&["-p", policy.to_str().unwrap(), "--", "true"]);
    assert_eq!(status, 125, "{err}");
    assert!(err.contains("`output`: `0` is zero"), "{err}");
}

/// A `--report` that cannot be written is refused before anything else happens (the
/// engine here is unreachable, and never asked), cold and through a daemon alike; a
/// writable new path is not left behind by the check.
#[test]
fn an_unwritable_report_path_is_refused_before_docker_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let unwritable = dir.path().join("missing-directory/report.json");
    // A valid policy with a warning: refused before it is said, cold and through a daemon
    // (through one, the warning came first).
    let warned = dir.path().join("warned.yaml");
    std::fs::write(
        &warned,
        "version: 1\nallow:\n  - host: \"*.x.com\"\n  - host: a.x.com\n",
    )
    .unwrap();
    let mut said = Vec::new();
    for server in [None, Some(dir.path().join("no-daemon.sock"))] {
        let mut command = binary();
        command
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            .arg("run")
            .arg("-p")
            .arg(&warned)
            .arg("--report")
            .arg(&unwritable);
        if let Some(socket) = &server {
            command.arg("--server").arg(socket);
        }
        let output = command.args(["--", "true"]).output().unwrap();
        assert_eq!(code(&output), 125, "{}", stderr(&output));
        assert!(
            stderr(&output).contains("cannot write the report"),
            "{}",
            stderr(&output)
        );
        said.push(stderr(&output));
    }
    assert_eq!(said[0], said[1], "cold and through a daemon");
    assert!(!said[0].contains("warning"), "{}", said[0]);
    let writable = dir.path().join("report.json");
    let output = binary()
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .arg("run")
        .arg("--report")
        .arg(&writable)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 125);
    assert!(
        stderr(&output).contains("cannot reach the Docker engine"),
        "{}",
        stderr(&output)
    );
    assert!(!writable.exists(), "the check left the report file behind");
}

/// `run --server` sends stdin whole in its request, so it reads at most 64 MiB of it and
/// says why it stops there; it read without end (`yes | run --server …` grew until the
/// daemon refused the request with "length limit exceeded"). The writer here never ends.
#[test]
fn stdin_beyond_what_a_server_run_takes_is_refused_with_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = binary()
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .arg("run")
        .arg("--server")
        .arg(dir.path().join("no-daemon.sock"))
        .args(["--", "true"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'y'; 1 << 20];
        // Until the reader stops reading (EPIPE).
        while std::io::Write::write_all(&mut stdin, &chunk).is_ok() {}
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_eq!(code(&output), 125, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("stdin is larger than 64 MiB"),
        "{}",
        stderr(&output)
    );
}

/// `EGRESS_SANDBOX_SERVER=` (set, empty) means no daemon: the run is cold (here it stops at
/// the unreachable engine). It was a usage error, "a value is required for '--server'",
/// naming a flag nobody typed.
#[test]
fn an_empty_server_variable_is_the_same_as_none() {
    let output = binary()
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .env("EGRESS_SANDBOX_SERVER", "")
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 125, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("cannot reach the Docker engine"),
        "{}",
        stderr(&output)
    );
}

/// `run true` (the command without `--`) is a usage error that says where the command goes.
#[test]
fn a_command_without_dashes_gets_the_hint_to_put_it_after_them() {
    let (code, err, _) = run_as_child(&["true"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("put the command after --: egress-sandbox run -- true"),
        "{err}"
    );
    let (code, err, _) = run_as_child(&["--timeout", "5s", "python3", "-c", "print(1)"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "put the command after --: egress-sandbox run --timeout 5s -- python3 -c 'print(1)'"
        ),
        "{err}"
    );
}

/// A `--memory` too small for Docker is refused quoting what was typed, not the bytes.
#[test]
fn a_memory_limit_too_small_is_refused_as_typed() {
    let (code, err, pid) = run_as_child(&["--memory", "10", "--", "true"]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("invalid --memory \"10\": Docker needs at least 6MiB"),
        "{err}"
    );
    assert_nothing_left_by(pid);
}

/// A time limit past the longest run (7 days) is refused naming the flag, before anything
/// is created: with an inspected host it would otherwise reach the run CA's dates.
#[test]
fn a_time_limit_past_the_longest_run_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("inspected.yaml");
    std::fs::write(
        &policy,
        "version: 1\nallow:\n  - host: api.example.com\n    methods: [GET]\n",
    )
    .unwrap();
    let (code, err, pid) = run_as_child(&[
        "-p",
        policy.to_str().unwrap(),
        "--timeout",
        "100000000000000h",
        "--",
        "true",
    ]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains(
            "invalid --timeout \"100000000000000h\": `100000000000000h` is longer than any \
             duration this tool takes (at most 7days)"
        ),
        "{err}"
    );
    assert_nothing_left_by(pid);
}
