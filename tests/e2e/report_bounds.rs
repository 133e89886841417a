//! What the sandbox sends never reaches the operator raw, and never grows the caller:
//! a DNS label holding terminal controls is shown escaped in the summary line, and a flood
//! of unique made-up names leaves the caller's memory and the report bounded.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::run::{binary, wait_bounded, warm_up};
use crate::support::{Run, TestNetwork, assert_nothing_left};

/// Sends one DNS query for `ESC[2K CR all-clear.test` straight to the run's resolver (the
/// proxy, whose address the sandbox knows from HTTP_PROXY) and prints the answer's size.
const HOSTILE_LABEL_QUERY: &str = r#"
import os, socket, struct
proxy = os.environ["HTTP_PROXY"].split("//")[1].rsplit(":", 1)[0]
label = b"\x1b[2K\rall-clear"
query = (struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
         + bytes([len(label)]) + label + b"\x04test\x00" + struct.pack(">HH", 1, 1))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
s.sendto(query, (proxy, 53))
print("answered", len(s.recv(4096)), flush=True)
"#;

/// The issue's reproduction: before, `cat -v` showed `^[[2K^Mall-clear…` in the summary.
#[test]
fn a_dns_label_with_terminal_controls_is_shown_escaped_in_the_summary() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .timeout("60s")
        .run(&["python3", "-c", HOSTILE_LABEL_QUERY]);
    run.assert_code(0);
    let context = run.describe();
    assert!(run.stdout.contains("answered"), "{context}");
    assert!(
        !run.stderr.contains('\u{1b}') && !run.stderr.contains('\r'),
        "raw ESC or CR on stderr:\n{:?}",
        run.stderr
    );
    let summary = run.summary_line();
    eprintln!("summary line: {summary}");
    assert!(
        summary.contains(r"\x1b[2K") && summary.contains("all-clear"),
        "the refused label is not shown escaped in the summary: {summary:?}\n{context}"
    );
    assert!(summary.contains("1 blocked"), "{summary:?}");
    run.assert_nothing_left();
}

/// Queries NAMES made-up names one after the other, each answer awaited.
const QUERIES: &str = r#"
import os, socket, struct, sys
proxy = os.environ["HTTP_PROXY"].split("//")[1].rsplit(":", 1)[0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
for i in range(int(sys.argv[1])):
    label = b"q%d" % i
    s.sendto(struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) + bytes([len(label)])
             + label + b"\x04test\x00\x00\x01\x00\x01", (proxy, 53))
    s.recv(4096)
print("answered all", flush=True)
"#;

/// `run --audit-limit N` reaches the proxy: N attempt records and the `limit` record are
/// written, the rest counted; the report counts every attempt, and it and the summary line
/// say how many were dropped, by decision.
#[test]
fn the_audit_limit_reaches_the_proxy_and_the_report_counts_what_was_dropped() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .option("--audit-limit", "3")
        .timeout("60s")
        .run(&["python3", "-c", QUERIES, "10"]);
    run.assert_code(0);
    let context = run.describe();
    let report = run.report();
    assert_eq!(
        report["audit"],
        serde_json::json!({"written": 4, "dropped": 7, "dropped_by_decision":
            {"allowed": 0, "blocked": 7, "would_block": 0, "failed": 0}}),
        "{context}"
    );
    assert_eq!(report["attempts"]["blocked"], 10, "{context}");
    assert_eq!(report["blocked_more"], 7, "{context}");
    assert!(
        run.summary_line()
            .ends_with("; 10 blocked: q0.test not_allowed, q1.test not_allowed, q2.test not_allowed (+7 in groups not listed); 7 audit records dropped"),
        "{context}"
    );
    let kinds: Vec<&str> = run
        .audit
        .iter()
        .map(|line| line["kind"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(kinds, ["dns", "dns", "dns", "limit", "end"], "{context}");
    run.assert_nothing_left();
}

/// Queries NAMES unique made-up names as fast as the sandbox can send them (answers are
/// not waited for), then says how many it sent.
const FLOOD: &str = r#"
import os, socket, struct, sys
names = int(sys.argv[1])
proxy = os.environ["HTTP_PROXY"].split("//")[1].rsplit(":", 1)[0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
tail = b"\x05flood\x04test\x00\x00\x01\x00\x01"
for i in range(names):
    label = b"n%07d" % i
    query = struct.pack(">HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0) + bytes([len(label)]) + label + tail
    s.sendto(query, (proxy, 53))
print("sent", names, flush=True)
"#;

/// Peak resident memory (VmHWM, kB) of process `pid`, if it is still running.
fn peak_resident_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The issue's proof: 1,000,000 unique names from the sandbox. The caller's memory, the
/// report and the run's duration stay bounded; whatever got past the proxy's DNS rate
/// limit and audit limit is counted, and the report lists at most 1000 groups.
#[test]
fn a_million_unique_names_leave_the_caller_and_the_report_bounded() {
    const NAMES: &str = "1000000";
    const TIMEOUT_S: u64 = 240;
    let network = TestNetwork::create();
    warm_up(Some(&network.name));
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let audit_path = dir.path().join("audit.jsonl");
    let stderr_path = dir.path().join("stderr.txt");
    let started = Instant::now();
    let mut child = binary()
        .args(["run", "--egress-network", &network.name, "--timeout"])
        .arg(format!("{TIMEOUT_S}s"))
        .arg("--report")
        .arg(&report_path)
        .arg("--audit-log")
        .arg(&audit_path)
        .args(["--", "python3", "-c", FLOOD, NAMES])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("start egress-sandbox");
    let pid = child.id();
    let mut peak_kb = 0;
    let status = wait_bounded(&mut child, Duration::from_secs(TIMEOUT_S + 120), || {
        peak_kb = peak_kb.max(peak_resident_kb(pid).unwrap_or(0))
    });
    let duration = started.elapsed();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    let report_text = std::fs::read_to_string(&report_path)
        .unwrap_or_else(|_| panic!("no report ({status})\n{stderr}"));
    let report: serde_json::Value = serde_json::from_str(&report_text).unwrap();
    let audit_bytes = std::fs::metadata(&audit_path).map_or(0, |m| m.len());
    let context = format!(
        "status {status}\n--- stderr:\n{stderr}\n--- report (head):\n{}",
        &report_text[..report_text.len().min(2000)]
    );
    eprintln!(
        "flood of {NAMES} names: caller peak RSS {peak_kb} kB, report {} bytes, audit log {audit_bytes} bytes, run {:.1}s; attempts {}, audit {}, blocked_more {}",
        report_text.len(),
        duration.as_secs_f64(),
        report["attempts"],
        report["audit"],
        report["blocked_more"],
    );

    assert!(
        report["status"] == "exited" || report["status"] == "timeout",
        "{context}"
    );
    assert!(peak_kb > 0, "never measured the caller's memory");
    assert!(
        peak_kb < 100 * 1024,
        "egress-sandbox peaked at {peak_kb} kB under the flood\n{context}"
    );
    assert!(
        report_text.len() < 256 * 1024,
        "the report is {} bytes\n{context}",
        report_text.len()
    );
    let groups = report["blocked"].as_array().expect("blocked is a list");
    assert!(groups.len() <= 1000, "{} groups listed", groups.len());
    let refused = report["attempts"]["blocked"].as_u64().unwrap()
        + report["attempts"]["would_block"].as_u64().unwrap();
    let listed: u64 = groups.iter().map(|g| g["count"].as_u64().unwrap()).sum();
    assert_eq!(
        listed + report["blocked_more"].as_u64().unwrap(),
        refused,
        "listed groups and blocked_more must add up to every refused attempt\n{context}"
    );
    let written = report["audit"]["written"].as_u64().unwrap();
    let dropped = report["audit"]["dropped"].as_u64().unwrap();
    assert!(
        // The proxy's DNS rate limit (per client per second) refuses most of a flood, so how
        // much gets through depends on how fast the sandbox sends: only ask for enough to
        // have exercised the caller (the tally's bound itself is proved with 1,000,000
        // synthetic records in `sandbox::tally`).
        refused >= 100,
        "too little of the flood got through to prove anything ({refused} refused)\n{context}"
    );
    // The audit limit (default 100000 records) bounds the log, and the caller's reading.
    assert!(written <= 100_001, "{written} records written\n{context}");
    assert!(
        audit_bytes < 64 << 20,
        "the audit log is {audit_bytes} bytes\n{context}"
    );
    if dropped > 0 {
        assert!(
            stderr.contains(&format!("{dropped} audit records dropped")),
            "{context}"
        );
    }
    assert!(
        duration < Duration::from_secs(TIMEOUT_S + 90),
        "the run took {duration:?} under a {TIMEOUT_S}s limit\n{context}"
    );
    assert_nothing_left(report["run"].as_str().unwrap(), pid);
}
