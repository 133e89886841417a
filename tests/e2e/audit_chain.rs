//! The audit chain on a log from a real `run`: the report's `audit_head` names the end
//! record, `audit verify` passes the log as written and finds an edit at its line; a DNS
//! label from the sandbox carrying terminal controls reaches neither the log nor the
//! operator's terminal raw.

use std::process::Output;

use crate::support::run::binary;
use crate::support::{Run, TestNetwork};

/// Raw DNS queries from inside the sandbox to its resolver: one whose first label is
/// `ESC[2K\rall-clear`, one ordinary refused name. Prints each answer's rcode.
const QUERIES: &str = r#"
import socket
ns = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]
for n, labels in enumerate([[b'\x1b[2K\rall-clear', b'test'], [b'blocked', b'test']]):
    q = bytes([0x12, n, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0])
    for label in labels:
        q += bytes([len(label)]) + label
    q += b'\x00\x00\x01\x00\x01'
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    s.sendto(q, (ns, 53))
    print('rcode', s.recv(512)[3] & 15)
"#;

fn verify(args: &[&std::ffi::OsStr]) -> Output {
    binary()
        .args(["audit", "verify"])
        .args(args)
        .output()
        .expect("run egress-sandbox audit verify")
}

#[test]
fn a_real_runs_log_verifies_against_its_report_and_edits_are_found() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .timeout("60s")
        .run(&["python3", "-c", QUERIES]);
    run.assert_code(0);
    assert_eq!(run.stdout, "rcode 3\nrcode 3\n", "{}", run.describe());

    // Defect 1: the label is escaped at the source, and nothing raw reaches stderr.
    let hostile = run.audit_where(|r| {
        r["kind"] == "dns" && r["host"].as_str().is_some_and(|h| h.contains("all-clear"))
    });
    assert_eq!(hostile.len(), 1, "{}", run.describe());
    assert_eq!(hostile[0]["host"], r"\x1b[2K\x0dall-clear.test");
    assert!(
        !run.stderr.contains(['\u{1b}', '\r']),
        "a raw control character on the operator's terminal: {:?}",
        run.stderr
    );

    // The chain: the last line is the end record, and the report names it.
    let lines: Vec<&str> = run.audit_text.lines().collect();
    let end: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(end["kind"], "end", "{}", run.describe());
    assert_eq!(end["records"], lines.len() - 1);
    assert_eq!(end["run"], run.run_id().as_str());
    let head = run.report()["audit_head"]
        .as_str()
        .expect("audit_head in the report");
    assert_eq!(
        head,
        <sha2::Sha256 as sha2::Digest>::digest(lines.last().unwrap().as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    std::fs::write(&report, run.report_text.as_deref().unwrap()).unwrap();
    let log = run.audit_log_path();
    let output = verify(&["--report".as_ref(), report.as_os_str(), log.as_os_str()]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    // An edited first record is found at line 1.
    let edited = dir.path().join("edited.jsonl");
    let mut text: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    text[0] = text[0].replace("\"decision\":\"blocked\"", "\"decision\":\"allowed\"");
    assert_ne!(text[0], lines[0]);
    std::fs::write(&edited, text.join("\n") + "\n").unwrap();
    let output = verify(&[edited.as_os_str()]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.starts_with(&format!(
            "{}:1: run {}: record altered",
            edited.display(),
            run.run_id()
        )),
        "{stdout}"
    );
    run.assert_nothing_left();
}
