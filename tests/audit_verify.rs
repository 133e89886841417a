//! `egress-sandbox audit verify` on real logs written by `egress-sandbox proxy` processes
//! (the proxy-alone path): a clean log passes, interleaved concurrent runs pass, and every
//! kind of tampering is found at the right line. The same on a log from a real `run` is in
//! tests/e2e/audit_chain.rs.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

const HANG: Duration = Duration::from_secs(10);

/// A running `egress-sandbox proxy` with a DNS responder, appending to an audit log.
struct ProxyProcess {
    child: Child,
    dns: SocketAddr,
    socket: UdpSocket,
    next_id: u16,
}

impl ProxyProcess {
    fn start(log: &Path, run: &str) -> ProxyProcess {
        ProxyProcess::launch(log, Some(run))
    }

    /// With no `--run-id` when `run` is None: its records carry `"run":null`.
    fn launch(log: &Path, run: Option<&str>) -> ProxyProcess {
        let run_id: &[&str] = match &run {
            Some(run) => &["--run-id", run],
            None => &[],
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--dns-listen",
                "127.0.0.1:0",
            ])
            .args(["--allow", "allowed.test", "--allow", "*.allowed.test"])
            .args(run_id)
            .arg("--audit-log")
            .arg(log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        let ready: serde_json::Value = serde_json::from_str(&ready).expect("the ready line");
        let dns = ready["dns"].as_str().unwrap().parse().unwrap();
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_read_timeout(Some(HANG)).unwrap();
        ProxyProcess {
            child,
            dns,
            socket,
            next_id: 1,
        }
    }

    /// One DNS query for `name`, answered (so its record is written).
    fn ask(&mut self, name: &str) {
        let id = self.next_id;
        self.next_id += 1;
        let mut query = id.to_be_bytes().to_vec();
        query.extend([0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name.split('.') {
            query.push(label.len() as u8);
            query.extend(label.as_bytes());
        }
        query.extend([0, 0, 1, 0, 1]);
        self.socket.send_to(&query, self.dns).unwrap();
        let mut answer = [0u8; 512];
        let (n, _) = self.socket.recv_from(&mut answer).expect("a DNS answer");
        assert!(n >= 12 && answer[..2] == id.to_be_bytes());
    }

    /// SIGTERM, then wait for a clean exit (the end record is written by then).
    fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{status:?}");
                return;
            }
            assert!(started.elapsed() < HANG, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn verify(args: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
        .args(["audit", "verify"])
        .args(args)
        .output()
        .unwrap()
}

/// The breaks `audit verify` printed, as (file name, line, text) — or none with exit 0.
fn breaks(output: &Output) -> Vec<(String, usize, String)> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    if output.status.code() == Some(0) {
        assert!(stdout.contains("intact"), "{stdout}");
        return Vec::new();
    }
    assert_eq!(
        output.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| {
            let mut parts = line.splitn(3, ':');
            let file = parts.next().unwrap();
            let number = parts.next().unwrap().parse().unwrap_or(0);
            let rest = parts.next().unwrap_or("").trim().to_owned();
            let name = Path::new(file)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (name, number, rest)
        })
        .collect()
}

/// A log of one run, `r-one`: `n` refused queries then the end record.
fn one_run(dir: &Path, n: usize) -> (PathBuf, Vec<String>) {
    let log = dir.join("one.jsonl");
    let mut proxy = ProxyProcess::start(&log, "r-one");
    for i in 0..n {
        proxy.ask(&format!("n{i}.blocked.test"));
    }
    proxy.stop();
    let lines = read_lines(&log);
    assert_eq!(lines.len(), n + 1);
    (log, lines)
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn a_clean_log_is_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = one_run(dir.path(), 4);
    assert_eq!(breaks(&verify(&[&log])), vec![]);
}

#[test]
fn interleaved_concurrent_runs_keep_their_own_chains() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("shared.jsonl");
    let mut a = ProxyProcess::start(&log, "r-a");
    let mut b = ProxyProcess::start(&log, "r-b");
    for i in 0..6 {
        a.ask(&format!("a{i}.blocked.test"));
        b.ask(&format!("b{i}.blocked.test"));
        // A distinct allowed name each time: a repeated lookup of one is not recorded again.
        a.ask(&format!("n{i}.allowed.test"));
    }
    a.stop();
    b.stop();
    let lines = read_lines(&log);
    assert_eq!(lines.len(), 18 + 2);
    let runs: Vec<bool> = lines
        .iter()
        .map(|l| l.contains("\"run\":\"r-a\""))
        .collect();
    assert!(
        runs.windows(2).filter(|w| w[0] != w[1]).count() > 4,
        "the runs' lines are interleaved"
    );
    assert_eq!(breaks(&verify(&[&log])), vec![]);
}

#[test]
fn an_edited_record_is_found_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let (log, mut lines) = one_run(dir.path(), 5);
    lines[2] = lines[2].replace("\"decision\":\"blocked\"", "\"decision\":\"allowed\"");
    write_lines(&log, &lines);
    let found = breaks(&verify(&[&log]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, 3, "{found:?}");
    assert!(
        found[0].2.starts_with("run r-one: record altered"),
        "{found:?}"
    );
}

#[test]
fn a_removed_record_is_found_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let (log, mut lines) = one_run(dir.path(), 5);
    lines.remove(2);
    write_lines(&log, &lines);
    let found = breaks(&verify(&[&log]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, 3, "{found:?}");
    assert!(
        found[0]
            .2
            .contains("seq 3 where seq 2 was expected: 1 record(s) missing"),
        "{found:?}"
    );
}

#[test]
fn a_reordered_pair_is_found_at_both_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (log, mut lines) = one_run(dir.path(), 5);
    lines.swap(1, 2);
    write_lines(&log, &lines);
    let found = breaks(&verify(&[&log]));
    let at: Vec<usize> = found.iter().map(|b| b.1).collect();
    assert_eq!(at, vec![2, 3], "{found:?}");
    assert!(found[1].2.contains("seq 1 comes after seq 2"), "{found:?}");
}

/// The proxy alone without `--run-id`, started twice on one log: each start's records are
/// a chain of their own, and the log is intact (the second start's were reported as records
/// after the first's end). A record added after an end is still found.
#[test]
fn proxy_starts_without_a_run_id_each_append_a_chain_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("norun.jsonl");
    for start in 0..2 {
        let mut proxy = ProxyProcess::launch(&log, None);
        proxy.ask(&format!("s{start}.blocked.test"));
        proxy.stop();
    }
    let output = verify(&[&log]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let mut lines = read_lines(&log);
    assert_eq!(lines.len(), 4);
    // The second start's first record moved behind its end: no longer a chain start.
    lines.swap(2, 3);
    write_lines(&log, &lines);
    let output = verify(&[&log]);
    assert_eq!(output.status.code(), Some(1));
    assert!(!breaks(&output).is_empty());
}

#[test]
fn a_truncated_run_has_no_end() {
    let dir = tempfile::tempdir().unwrap();
    let (log, mut lines) = one_run(dir.path(), 5);
    lines.truncate(4);
    write_lines(&log, &lines);
    let found = breaks(&verify(&[&log]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, 4, "{found:?}");
    assert!(
        found[0].2.contains("no end record after seq 3"),
        "{found:?}"
    );
}

#[test]
fn a_forged_end_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let (log, mut lines) = one_run(dir.path(), 5);
    // Drop the last attempt and re-chain a new end that claims the original count.
    let end: serde_json::Value = serde_json::from_str(&lines[5]).unwrap();
    lines.truncate(4);
    let forged = format!(
        r#"{{"v":1,"ts":{},"run":"r-one","policy":{},"kind":"end","records":5,"dropped":0,"seq":4,"prev":"{}"}}"#,
        end["ts"],
        end["policy"],
        sha256_hex(&lines[3])
    );
    lines.push(forged);
    write_lines(&log, &lines);
    let found = breaks(&verify(&[&log]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, 5, "{found:?}");
    assert!(
        found[0]
            .2
            .contains("the end record counts 5 record(s), but 4 came before it"),
        "{found:?}"
    );
}

#[test]
fn a_report_whose_head_does_not_match_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let (log, lines) = one_run(dir.path(), 3);
    let report = dir.path().join("report.json");
    let head = sha256_hex(&lines[3]);
    std::fs::write(
        &report,
        serde_json::json!({"run": "r-one", "audit_head": head}).to_string(),
    )
    .unwrap();
    let output = verify(&[Path::new("--report"), &report, &log]);
    assert_eq!(breaks(&output), vec![]);

    // A consistent rewrite of the end (another `dropped`) keeps the chain, not the head.
    let mut rewritten = lines.clone();
    rewritten[3] = rewritten[3].replace("\"dropped\":0", "\"dropped\":7");
    assert_ne!(rewritten[3], lines[3]);
    write_lines(&log, &rewritten);
    assert_eq!(
        breaks(&verify(&[&log])),
        vec![],
        "the chain alone cannot tell"
    );
    let found = breaks(&verify(&[Path::new("--report"), &report, &log]));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].0.as_str(), found[0].1),
        ("one.jsonl", 4),
        "{found:?}"
    );
    assert!(found[0].2.contains("audit_head differs"), "{found:?}");

    // A report for a run that is not in the logs.
    std::fs::write(
        &report,
        serde_json::json!({"run": "r-other", "audit_head": head}).to_string(),
    )
    .unwrap();
    write_lines(&log, &lines);
    let output = verify(&[Path::new("--report"), &report, &log]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stdout).contains("r-other: not in the logs"));
}

#[test]
fn unreadable_inputs_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jsonl");
    assert_eq!(verify(&[&missing]).status.code(), Some(2));
    assert_eq!(verify(&[]).status.code(), Some(2));
    let (log, _) = one_run(dir.path(), 1);
    let not_a_report = dir.path().join("r.json");
    std::fs::write(&not_a_report, "[]").unwrap();
    let output = verify(&[Path::new("--report"), &not_a_report, &log]);
    assert_eq!(output.status.code(), Some(2));
}

/// Every command that reads audit logs treats one it cannot read as `verify` does: exit 2
/// (a usage error; 125 is for a sandbox that could not be set up), and the reason is said
/// once.
/// Every command besides `verify` that reads a log, run on `log` (an HTML report goes to
/// `dir`): each one's arguments and output.
fn run_every_log_reader(dir: &Path, log: &str) -> Vec<(Vec<String>, Output)> {
    let html = dir.join("out.html");
    let commands: [&[&str]; 4] = [
        &["audit", "summary", log],
        &["audit", "export", "--format", "ocsf", log],
        &["audit", "report", "--html", html.to_str().unwrap(), log],
        &["policy", "suggest", log],
    ];
    commands
        .into_iter()
        .map(|args| {
            let output = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
                .args(args)
                .output()
                .expect("the binary runs");
            (args.iter().map(|a| a.to_string()).collect(), output)
        })
        .collect()
}

#[test]
fn every_log_reader_refuses_an_unreadable_log_as_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jsonl");
    let missing = missing.to_str().unwrap();
    for (args, output) in run_every_log_reader(dir.path(), missing) {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(missing), "{args:?}: {stderr}");
        assert_eq!(
            stderr.matches("No such file or directory").count(),
            1,
            "{args:?}: the reason said once: {stderr}"
        );
    }
}

/// A reader that goes away (`… | head`) is no error: the commands that print a report do not
/// panic on the closed pipe (exit 101 with a backtrace hint, as `println!` did), and their
/// exit status is still what they found — `verify` of a tampered log still exits 1.
#[test]
fn a_closed_stdout_pipe_neither_panics_nor_changes_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let (log, lines) = one_run(dir.path(), 3);
    let tampered = dir.path().join("tampered.jsonl");
    write_lines(&tampered, &lines[1..]);
    let policy = concat!(env!("CARGO_MANIFEST_DIR"), "/policies/openai.yaml");
    let log = log.to_str().unwrap();
    let cases: [(&[&str], i32); 7] = [
        (&["audit", "summary", log], 0),
        (&["audit", "verify", log], 0),
        (&["audit", "verify", tampered.to_str().unwrap()], 1),
        (&["audit", "export", "--format", "ocsf", log], 0),
        (&["policy", "suggest", log], 0),
        (&["policy", "check", policy], 0),
        (&["policy", "test", "-p", policy, "evil.test:443"], 1),
    ];
    for (args, expected) in cases {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(output.status.code(), Some(expected), "{args:?}: {stderr}");
    }
}

/// A line that is not UTF-8 (a corrupted or forged log) is skipped with a warning by every
/// command that reads logs, like any other line that is not a record; the records around it
/// are still read. `export`, `report` and `policy suggest` refused the whole file (exit 2,
/// "stream did not contain valid UTF-8"), so one bad line hid every attempt from an auditor.
#[test]
fn a_line_that_is_not_utf8_is_skipped_by_every_log_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (_, lines) = one_run(dir.path(), 2);
    let damaged = dir.path().join("damaged.jsonl");
    let mut bytes = format!("{}\n", lines[0]).into_bytes();
    bytes.extend_from_slice(b"{\"kind\":\"\xff\xfe\"}\n");
    bytes.extend_from_slice(format!("{}\n", lines[1..].join("\n")).as_bytes());
    std::fs::write(&damaged, bytes).unwrap();
    let damaged = damaged.to_str().unwrap();
    for (args, output) in run_every_log_reader(dir.path(), damaged) {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        let warning = format!("{damaged}:2: not an audit record");
        assert_eq!(stderr.matches(&warning).count(), 1, "{args:?}: {stderr}");
    }
    // Every record but the damaged line is exported: two attempts and the end.
    let export = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
        .args(["audit", "export", "--format", "ocsf", damaged])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&export.stdout).lines().count(), 3);
}

/// A newer proxy may write reasons this version does not know. Every log reader still reads
/// the record (`audit summary` counts it under the reason as written, escaped, and says once
/// how many records had one), and `verify` checks the chain whatever the reason says.
/// `audit summary` skipped such a record as "not an audit record" (unknown variant).
#[test]
fn a_reason_this_version_does_not_know_is_read_by_every_log_reader() {
    let dir = tempfile::tempdir().unwrap();
    let (log, mut lines) = one_run(dir.path(), 3);
    for (index, reason) in [(0, "future_reason"), (1, r"odd\u001b[2Jreason")] {
        let edited = lines[index].replace(
            r#""reason":"not_allowed""#,
            &format!(r#""reason":"{reason}""#),
        );
        assert_ne!(edited, lines[index], "a refused record: {}", lines[index]);
        lines[index] = edited;
    }
    rechain(&mut lines, 1);
    write_lines(&log, &lines);
    assert_eq!(breaks(&verify(&[&log])), []);
    let log = log.to_str().unwrap();
    for (args, output) in run_every_log_reader(dir.path(), log) {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("skipped"), "{args:?}: {stderr}");
        if args[1] != "summary" {
            continue;
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.starts_with("3 attempts: 0 allowed, 3 blocked"),
            "{stdout}"
        );
        assert!(stdout.contains("  future_reason\n"), "{stdout}");
        assert!(stdout.contains(r"  odd\x1b[2Jreason"), "{stdout}");
        assert!(!stdout.contains('\x1b'), "{stdout:?}");
        assert_eq!(
            stderr
                .matches("2 records had reasons this version does not know")
                .count(),
            1,
            "{stderr}"
        );
    }
}

/// Re-seals `lines[from..]` after an edit, as a newer proxy would have written them: each
/// line's `prev` is the hash of the line before it.
fn rechain(lines: &mut [String], from: usize) {
    for index in from..lines.len() {
        let prev = sha256_hex(&lines[index - 1]);
        let line = &lines[index];
        let cut = line.rfind(r#""prev":""#).expect("a chained line");
        lines[index] = format!(r#"{}"prev":"{prev}"}}"#, &line[..cut]);
    }
}
