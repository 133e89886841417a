//! `egress-sandbox policy check|test` with the real binary, on good and bad files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"));
    command.env_remove("EGRESS_SANDBOX_LOG");
    command
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Run {
    let output: Output = binary().args(args).output().expect("run egress-sandbox");
    Run {
        code: output.status.code().expect("exit code"),
        stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write policy");
    path
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn repo_policies() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("policies/ exists")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_policy_passes_check_without_errors() {
    let files = repo_policies();
    assert!(files.len() >= 5, "{files:?}");
    for file in &files {
        let result = run(&["policy", "check", path_str(file)]);
        assert_eq!(
            result.code,
            0,
            "{}:\n{}{}",
            file.display(),
            result.stdout,
            result.stderr
        );
        assert!(!result.stdout.contains(": error: "), "{}", result.stdout);
        let summary = result.stdout.lines().last().expect("summary line");
        assert!(
            summary.starts_with(&format!("{}: ok (", file.display())),
            "{summary}"
        );
    }
}

#[test]
fn check_good_file_prints_summary_with_counts_and_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "openai.yaml",
        "version: 1\nname: openai-agent\nallow:\n  - host: api.openai.com\n  - host: \"*.githubusercontent.com\"\n",
    );
    let result = run(&["policy", "check", path_str(&file)]);
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
    let lines: Vec<&str> = result.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with(&format!("{}:5:11: warning: ", file.display())),
        "{}",
        lines[0]
    );
    assert_eq!(
        lines[1],
        format!(
            "{}: ok (2 allow rules, 0 deny rules, 1 warning)",
            file.display()
        )
    );
}

#[test]
fn check_bad_file_prints_located_errors_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(
        dir.path(),
        "good.yaml",
        "version: 1\nallow:\n  - host: a.com\n",
    );
    let bad = write(
        dir.path(),
        "bad.yaml",
        "version: 1\nallow:\n  - host: \"*.co.uk\"\n  - host: a.com\n    ports: [99999]\n",
    );
    let result = run(&["policy", "check", path_str(&good), path_str(&bad)]);
    assert_eq!(result.code, 1, "{}{}", result.stdout, result.stderr);
    let bad_name = bad.display().to_string();
    let lines: Vec<&str> = result.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            format!("{}: ok (1 allow rule, 0 deny rules, 0 warnings)", good.display()).as_str(),
            format!("{bad_name}:3:11: error: `*.co.uk` covers the public suffix `co.uk`, under which anyone can register names; list the hosts you need").as_str(),
            format!("{bad_name}:5:13: error: port 99999 is outside 1–65535").as_str(),
            format!("{bad_name}: invalid (2 errors, 0 warnings)").as_str(),
        ]
    );
}

/// A limit past the bounds every duration and size is held to is an error at its value.
#[test]
fn check_limits_past_their_bounds_are_located_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "huge.yaml",
        "version: 1\nlimits:\n  timeout: 100000000000000h\n  memory: 2PiB\n  output: 1PiB\n",
    );
    let result = run(&["policy", "check", path_str(&file)]);
    assert_eq!(result.code, 1, "{}{}", result.stdout, result.stderr);
    let name = file.display();
    let lines: Vec<&str> = result.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            format!("{name}:3:12: error: `timeout`: `100000000000000h` is longer than any duration this tool takes (at most 7days)").as_str(),
            format!("{name}:4:11: error: `memory`: `2PiB` is larger than any size this tool takes (at most 1PiB)").as_str(),
            format!("{name}: invalid (2 errors, 0 warnings)").as_str(),
        ]
    );
}

#[test]
fn check_yaml_errors_are_located() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "dup.yaml", "version: 1\nallow: []\nallow: []\n");
    let result = run(&["policy", "check", path_str(&file)]);
    assert_eq!(result.code, 1);
    assert!(
        result.stdout.starts_with(&format!(
            "{}:3:1: error: YAML: duplicate mapping key: allow\n",
            file.display()
        )),
        "{}",
        result.stdout
    );
}

#[test]
fn check_unreadable_or_huge_file_exits_1_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml");
    let result = run(&["policy", "check", path_str(&missing)]);
    assert_eq!(result.code, 1);
    assert!(result.stdout.contains("cannot read: "), "{}", result.stdout);
    assert!(
        result.stdout.contains(path_str(&missing)),
        "{}",
        result.stdout
    );

    let huge = dir.path().join("huge.yaml");
    std::fs::write(&huge, "#".repeat(2 * 1024 * 1024)).unwrap();
    let result = run(&["policy", "check", path_str(&huge)]);
    assert_eq!(result.code, 1);
    assert!(
        result.stdout.contains("the limit is 1048576 (1 MiB)"),
        "{}",
        result.stdout
    );

    let binary_file = write(dir.path(), "bin.yaml", "");
    std::fs::write(&binary_file, [0xff, 0xfe, 0x00]).unwrap();
    let result = run(&["policy", "check", path_str(&binary_file)]);
    assert_eq!(result.code, 1);
    assert!(result.stdout.contains("not UTF-8"), "{}", result.stdout);
}

fn openai(dir: &Path) -> PathBuf {
    write(
        dir,
        "openai.yaml",
        "version: 1\nname: openai-agent\nallow:\n  - host: api.openai.com\n  - cidr: 127.0.0.0/8\n    ports: [8080]\ndeny:\n  - host: files.openai.com\n",
    )
}

#[test]
fn test_allowed_target_exits_0_and_says_the_name_was_not_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let policy = openai(dir.path());
    for target in [
        "api.openai.com",
        "API.OpenAI.com.:443",
        "https://api.openai.com/v1/chat?x=1",
    ] {
        let result = run(&["policy", "test", "-p", path_str(&policy), target]);
        assert_eq!(
            result.code, 0,
            "{target}: {}{}",
            result.stdout, result.stderr
        );
        let lines: Vec<&str> = result.stdout.lines().collect();
        assert_eq!(
            lines[0],
            "allowed  api.openai.com:443  reason=rule  rule=openai-agent:allow[0]  policy=openai-agent"
        );
        assert_eq!(
            lines[1],
            "  openai-agent:allow[0]: host: api.openai.com, ports: [443]"
        );
        assert!(lines[2].contains("not resolved"), "{}", lines[2]);
    }
}

#[test]
fn test_blocked_targets_exit_1_with_reason_and_rule() {
    let dir = tempfile::tempdir().unwrap();
    let policy = openai(dir.path());
    let cases = [
        (
            "evil.com",
            "blocked  evil.com:443  reason=not_allowed  rule=-  policy=openai-agent",
        ),
        (
            "http://api.openai.com/",
            "blocked  api.openai.com:80  reason=port_not_allowed  rule=openai-agent:allow[0]  policy=openai-agent",
        ),
        (
            "files.openai.com",
            "blocked  files.openai.com:443  reason=denied  rule=openai-agent:deny[0]  policy=openai-agent",
        ),
        (
            "2852039166",
            "blocked  169.254.169.254:443  reason=ip_literal  rule=-  policy=openai-agent",
        ),
        (
            "[::1]:443",
            "blocked  [::1]:443  reason=ip_literal  rule=-  policy=openai-agent",
        ),
    ];
    for (target, expected) in cases {
        let result = run(&["policy", "test", "-p", path_str(&policy), target]);
        assert_eq!(
            result.code, 1,
            "{target}: {}{}",
            result.stdout, result.stderr
        );
        assert_eq!(result.stdout.lines().next(), Some(expected), "{target}");
    }
}

#[test]
fn test_ip_literal_goes_through_the_floor_and_cidr_rules() {
    let dir = tempfile::tempdir().unwrap();
    let policy = openai(dir.path());
    let result = run(&["policy", "test", "-p", path_str(&policy), "127.1:8080"]);
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
    assert!(result.stdout.starts_with(
        "allowed  127.0.0.1:8080  reason=rule  rule=openai-agent:allow[1]  policy=openai-agent\n"
    ));
    assert!(
        result.stdout.contains("private-address floor"),
        "{}",
        result.stdout
    );
}

#[test]
fn test_merges_policies_and_allow_flags() {
    let dir = tempfile::tempdir().unwrap();
    let policy = openai(dir.path());
    let result = run(&[
        "policy",
        "test",
        "-p",
        path_str(&policy),
        "--allow",
        "pypi.org",
        "pypi.org",
    ]);
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
    assert!(result.stdout.starts_with(
        "allowed  pypi.org:443  reason=rule  rule=cli:allow[0]  policy=openai-agent+cli\n"
    ));
}

#[test]
fn test_report_mode_says_would_block_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write(
        dir.path(),
        "trial.yaml",
        "version: 1\nmode: report\nallow:\n  - host: a.com\n",
    );
    let result = run(&["policy", "test", "-p", path_str(&policy), "b.com"]);
    assert_eq!(result.code, 1);
    assert!(
        result
            .stdout
            .starts_with("would_block  b.com:443  reason=not_allowed  rule=-  policy=trial\n")
    );
    assert!(result.stdout.contains("report mode"), "{}", result.stdout);
}

/// Invalid input is not an answer: 2, never the 1 of "blocked".
#[test]
fn test_bad_policy_exits_2_with_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.yaml",
        "version: 1\nallow:\n  - host: \"*\"\n",
    );
    let result = run(&["policy", "test", "-p", path_str(&bad), "a.com"]);
    assert_eq!(result.code, 2);
    assert!(result.stdout.is_empty(), "{}", result.stdout);
    assert!(
        result
            .stderr
            .starts_with(&format!("{}:3:11: error: ", bad.display())),
        "{}",
        result.stderr
    );
    let result = run(&["policy", "test", "--allow", "10.0.0.1", "a.com"]);
    assert_eq!(result.code, 2);
    assert!(
        result.stderr.starts_with("--allow:1:1: error: "),
        "{}",
        result.stderr
    );
}

#[test]
fn test_usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let policy = openai(dir.path());
    let no_policy = run(&["policy", "test", "a.com"]);
    assert_eq!(no_policy.code, 2);
    assert!(
        no_policy.stderr.contains("at least one policy"),
        "{}",
        no_policy.stderr
    );
    for target in [
        "a b.com",
        "ftp://a.com/",
        "a.com:0",
        "user@a.com",
        "[fe80::1%eth0]:443",
        "::1:443",
    ] {
        let result = run(&["policy", "test", "-p", path_str(&policy), target]);
        assert_eq!(
            result.code, 2,
            "{target}: {}{}",
            result.stdout, result.stderr
        );
        assert!(result.stderr.contains("TARGET"), "{}", result.stderr);
    }
}

const CREDENTIAL_POLICY: &str = "\
version: 1
name: openai
allow:
  - host: api.openai.com
    methods: [POST, GET]
    paths: [\"/v1/chat/completions\", \"/v1/models/*\"]
  - host: pypi.org
credentials:
  - host: api.openai.com
    secret: OPENAI_API_KEY
";

/// `http://` to a port `tls.ports` reserves for TLS is refused as the proxy refuses it
/// (`sni_mismatch`); it was answered `allowed`. A credential host's `http://` is upgraded to
/// TLS by the proxy, so it stays allowed; with `sni: off` nothing is reserved.
#[test]
fn test_plain_http_to_a_tls_port_is_judged_as_the_proxy_judges_it() {
    let dir = tempfile::tempdir().unwrap();
    let openai = openai(dir.path());
    for target in ["http://api.openai.com:443/", "ws://api.openai.com:443/"] {
        let result = run(&["policy", "test", "-p", path_str(&openai), target]);
        assert_eq!(
            result.code, 1,
            "{target}: {}{}",
            result.stdout, result.stderr
        );
        assert!(
            result.stdout.starts_with(
                "blocked  api.openai.com:443  reason=sni_mismatch  rule=-  policy=openai-agent\n"
            ),
            "{target}: {}",
            result.stdout
        );
        assert!(
            result.stdout.contains("reserved for TLS"),
            "{}",
            result.stdout
        );
    }
    let result = run(&[
        "policy",
        "test",
        "-p",
        path_str(&openai),
        "GET",
        "http://api.openai.com:443/",
    ]);
    assert_eq!(result.code, 1, "{}{}", result.stdout, result.stderr);
    assert!(
        !result.stdout.contains("request: allowed"),
        "{}",
        result.stdout
    );
    // Still allowed: https:// to the port, a port not reserved, a credential (upgraded),
    // and a policy that checks no SNI.
    let credential = write(dir.path(), "credential.yaml", CREDENTIAL_POLICY);
    let no_sni = write(
        dir.path(),
        "no-sni.yaml",
        "version: 1\nname: no-sni\ntls:\n  sni: off\nallow:\n  - host: api.openai.com\n",
    );
    for (policy, target) in [
        (&openai, "https://api.openai.com:443/"),
        (&credential, "http://api.openai.com:443/v1/models/x"),
        (&no_sni, "http://api.openai.com:443/"),
    ] {
        let result = run(&["policy", "test", "-p", path_str(policy), target]);
        assert_eq!(
            result.code, 0,
            "{target}: {}{}",
            result.stdout, result.stderr
        );
        assert!(
            !result.stdout.contains("reserved for TLS"),
            "{}",
            result.stdout
        );
    }
}

#[test]
fn test_with_a_method_judges_the_request_and_shows_inspection_and_credential() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write(dir.path(), "openai.yaml", CREDENTIAL_POLICY);
    let result = run(&[
        "policy",
        "test",
        "-p",
        path_str(&policy),
        "POST",
        "https://api.openai.com/v1/chat/completions?key=x",
    ]);
    assert_eq!(result.code, 0, "{}{}", result.stdout, result.stderr);
    assert!(
        result
            .stdout
            .contains("  inspected: yes (a credential and method/path rules apply)"),
        "{}",
        result.stdout
    );
    assert!(
        result.stdout.contains(
            "  credential: secret OPENAI_API_KEY sent as `authorization: Bearer {secret}`"
        ),
        "{}",
        result.stdout
    );
    assert!(
        result.stdout.contains(
            "request: allowed  POST /v1/chat/completions  reason=rule  rule=openai:allow[0]\n"
        ),
        "{}",
        result.stdout
    );
    assert!(!result.stdout.contains("key=x"), "the query is never shown");

    for (method, url, expected) in [
        (
            "DELETE",
            "https://api.openai.com/v1/chat/completions",
            "request: blocked  DELETE /v1/chat/completions  reason=method_not_allowed",
        ),
        (
            "GET",
            "https://api.openai.com/v1/files",
            "request: blocked  GET /v1/files  reason=path_not_allowed",
        ),
        (
            "GET",
            "https://api.openai.com/v1/models/%2e%2e/x",
            "request: blocked  GET /v1/models/%2e%2e/x  reason=bad_request",
        ),
    ] {
        let result = run(&["policy", "test", "-p", path_str(&policy), method, url]);
        assert_eq!(result.code, 1, "{url}: {}{}", result.stdout, result.stderr);
        assert!(result.stdout.contains(expected), "{url}: {}", result.stdout);
    }

    let plain = run(&["policy", "test", "-p", path_str(&policy), "pypi.org"]);
    assert_eq!(plain.code, 0);
    assert!(
        plain.stdout.contains("  inspected: no (tunnelled as is"),
        "{}",
        plain.stdout
    );
    let bad = run(&[
        "policy",
        "test",
        "-p",
        path_str(&policy),
        "G\u{1b}T",
        "pypi.org",
    ]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("METHOD `G\\x1bT`"), "{}", bad.stderr);
    // As in a policy's `methods:`, a lower-case method is a mistake, not a method.
    let lower = run(&[
        "policy",
        "test",
        "-p",
        path_str(&policy),
        "post",
        "https://api.openai.com/v1/chat/completions",
    ]);
    assert_eq!(lower.code, 2);
    assert!(lower.stderr.contains("write `POST`"), "{}", lower.stderr);
    assert!(lower.stdout.is_empty(), "{}", lower.stdout);
}

/// Nothing a policy file, its name or a pasted target holds reaches the terminal raw:
/// control, bidi and separator characters are printed as visible escapes.
#[test]
fn hostile_text_in_policies_names_and_targets_is_shown_escaped() {
    let raw = |text: &str| {
        text.chars()
            .any(|c| c != '\n' && egress_core::text::must_escape(c))
    };
    let dir = tempfile::tempdir().unwrap();
    let hostile = write(
        dir.path(),
        "evil\u{1b}[2K\u{202e}.yaml",
        "version: 1\nallow:\n  - host: \"ok\\e[2K\\rall-clear.test\"\n",
    );
    let check = run(&["policy", "check", path_str(&hostile)]);
    assert_eq!(check.code, 1, "{}{}", check.stdout, check.stderr);
    assert!(!raw(&check.stdout) && !raw(&check.stderr), "{check:?}");
    assert!(
        check.stdout.contains(r"evil\x1b[2K\u202e.yaml"),
        "{}",
        check.stdout
    );
    assert!(
        check.stdout.contains(r"\x1b[2K\x0dall-clear"),
        "{}",
        check.stdout
    );

    let test = run(&["policy", "test", "-p", path_str(&hostile), "a.test"]);
    assert_eq!(test.code, 2);
    assert!(!raw(&test.stdout) && !raw(&test.stderr), "{test:?}");
    assert!(
        test.stderr.contains(r"\x1b[2K\x0dall-clear"),
        "{}",
        test.stderr
    );

    let good = openai(dir.path());
    let test = run(&[
        "policy",
        "test",
        "-p",
        path_str(&good),
        "\u{1b}[2K\rall-clear\u{2028}",
    ]);
    assert_eq!(test.code, 2);
    assert!(!raw(&test.stdout) && !raw(&test.stderr), "{test:?}");
    assert!(
        test.stderr.contains(r"\x1b[2K\x0dall-clear\u2028"),
        "{}",
        test.stderr
    );
}

/// An `EGRESS_SANDBOX_LOG` that is not a valid filter is said once on stderr, and the command
/// goes on at the `-v` level; it was ignored without a word.
#[test]
fn an_invalid_log_variable_is_warned_about_once() {
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/openai.yaml");
    let output = binary()
        .env("EGRESS_SANDBOX_LOG", "egress=notalevel")
        .args(["policy", "check", path_str(&policy)])
        .output()
        .expect("run egress-sandbox");
    let stderr = String::from_utf8(output.stderr).expect("utf-8 stderr");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0]
            .starts_with("egress-sandbox: warning: ignoring EGRESS_SANDBOX_LOG=egress=notalevel: "),
        "{stderr}"
    );
}

/// Every flag of `policy test` says what it is, and the exit statuses are in the help.
#[test]
fn test_help_describes_every_flag_and_the_exit_statuses() {
    let result = run(&["policy", "test", "--help"]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    let line_of = |flag: &str| {
        result
            .stdout
            .lines()
            .find(|line| line.trim_start().starts_with(flag))
            .unwrap_or_else(|| panic!("{flag} in {}", result.stdout))
            .to_owned()
    };
    assert!(
        line_of("-p, --policy <FILE>").contains("Policy file"),
        "{}",
        result.stdout
    );
    assert!(
        line_of("--allow <HOST[:PORT]>").contains("Allow HOST"),
        "{}",
        result.stdout
    );
    assert!(
        result.stdout.contains("2 invalid input"),
        "{}",
        result.stdout
    );
}

/// A file that cannot be read has no line or column: none is made up.
#[test]
fn check_a_missing_file_names_no_position() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml");
    let result = run(&["policy", "check", path_str(&missing)]);
    assert_eq!(result.code, 1);
    assert!(
        result
            .stdout
            .starts_with(&format!("{}: error: cannot read: ", missing.display())),
        "{}",
        result.stdout
    );
}

/// `version: "1"` (a string) is read as the number, and `check` says so with a warning.
#[test]
fn check_warns_that_a_quoted_version_is_read_as_the_number() {
    let dir = tempfile::tempdir().unwrap();
    let quoted = write(
        dir.path(),
        "quoted.yaml",
        "version: \"1\"\nallow:\n  - host: a.com\n",
    );
    let result = run(&["policy", "check", path_str(&quoted)]);
    assert_eq!(result.code, 0, "{}", result.stdout);
    assert!(
        result.stdout.starts_with(&format!(
            "{}:1:10: warning: `version` is the number 1",
            quoted.display()
        )),
        "{}",
        result.stdout
    );
    assert!(
        result
            .stdout
            .contains("ok (1 allow rule, 0 deny rules, 1 warning)")
    );
    let plain = write(
        dir.path(),
        "plain.yaml",
        "version: 1\nallow:\n  - host: a.com\n",
    );
    let result = run(&["policy", "check", path_str(&plain)]);
    assert!(result.stdout.contains("0 warnings"), "{}", result.stdout);
}
