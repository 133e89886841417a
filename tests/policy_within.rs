//! `egress-sandbox policy check --within UPPER.yaml FILE...` from the command line: exit
//! status and `FILE:LINE:COL: error:` lines. The containment rules themselves are unit-tested
//! in `proxy/src/policy/within/tests.rs`.

use std::path::Path;
use std::process::{Command, Output};

fn check_within(dir: &Path, upper: &str, files: &[(&str, &str)]) -> Output {
    std::fs::write(dir.join("upper.yaml"), upper).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"));
    command
        .current_dir(dir)
        .args(["policy", "check", "--within", "upper.yaml"]);
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
        command.arg(name);
    }
    command.output().unwrap()
}

const UPPER: &str = "version: 1\nallow:\n  - host: \"*.example.com\"\n    ports: [443]\n  - cidr: 203.0.113.0/24\ndeny:\n  - host: secrets.example.com\n";

#[test]
fn a_policy_within_upper_passes() {
    let dir = tempfile::tempdir().unwrap();
    let out = check_within(
        dir.path(),
        UPPER,
        &[(
            "team.yaml",
            "version: 1\nallow:\n  - host: api.example.com\n  - cidr: 203.0.113.8/29\n",
        )],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("team.yaml: ok (2 allow rules"), "{stdout}");
}

#[test]
fn rules_beyond_upper_fail_with_their_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let out = check_within(
        dir.path(),
        UPPER,
        &[
            (
                "team.yaml",
                "version: 1\nallow:\n  - host: api.example.com\n  - host: api.example.net\n  - host: \"*.example.com\"\n  - cidr: 203.0.113.0/24\n    ports: [22]\n",
            ),
            ("fine.yaml", "version: 1\nallow:\n  - host: a.example.com\n"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for expected in [
        "team.yaml:4:5: error: allow[1] (host: api.example.net, ports: [443]) is not within upper.yaml: no allow rule there covers it",
        "team.yaml:5:5: error: allow[2] (host: *.example.com, ports: [443]) is not within upper.yaml: it allows secrets.example.com on port 443, which upper.yaml denies (deny[0], line 7)",
        "team.yaml:6:5: error: allow[3] (cidr: 203.0.113.0/24, ports: [22]) is not within upper.yaml: no allow rule there covers it",
        "team.yaml: invalid (3 errors, 2 warnings)",
        "fine.yaml: ok (1 allow rule",
    ] {
        assert!(
            stdout.contains(expected),
            "missing `{expected}` in:\n{stdout}"
        );
    }
    assert!(
        !stdout.contains("team.yaml:3:5: error"),
        "allow[0] is within: {stdout}"
    );
}

#[test]
fn an_invalid_upper_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let out = check_within(
        dir.path(),
        "version: 1\nallow:\n  - host: \"*.com\"\n",
        &[("team.yaml", "version: 1\n")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("upper.yaml:3:11: error:"), "{stdout}");
    assert!(stdout.contains("upper.yaml: invalid, so it cannot serve as --within"));
}
