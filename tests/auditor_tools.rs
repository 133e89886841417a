//! `audit export --format ocsf` validated against the OCSF schema, and `audit report --html`
//! rendered by a real browser. Needs `python3` with `ocsf-json-schema` and `jsonschema`,
//! and `chromium` (Debian package): `.ci/run` installs them; without them these tests fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

const KINDS: [&str; 5] = ["connect", "tls", "tcp", "http", "dns"];
const DECISIONS: [&str; 4] = ["allowed", "blocked", "would_block", "failed"];

fn egress_sandbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
        .args(args)
        .output()
        .expect("egress-sandbox runs")
}

fn reason(decision: &str) -> &'static str {
    match decision {
        "allowed" => "rule",
        "blocked" => "not_allowed",
        "would_block" => "private_address",
        _ => "connect_failed",
    }
}

/// One record per kind and decision, a hostile host, IPv6, the chain fields, inspected
/// `http` extras, and a run's `limit` and `end` lines: every shape a log holds.
fn every_record_shape() -> Vec<Value> {
    let mut lines = Vec::new();
    let mut seq = 0;
    for (k, kind) in KINDS.iter().enumerate() {
        for (d, decision) in DECISIONS.iter().enumerate() {
            let host = match (k + d) % 3 {
                0 => "api.example.org".to_owned(),
                1 => "203.0.113.9".to_owned(),
                _ => "[2001:db8::7]".to_owned(),
            };
            let mut record = json!({
                "v": 1, "ts": format!("2026-11-29T18:40:{:02}.{:03}Z", 10 + k, d * 100),
                "run": "r-export", "policy": "agent", "kind": kind,
                "client": "10.213.0.3:51234", "sandbox_hostname": "sandbox-1a2b3c", "host": host,
                "port": if *kind == "dns" { Value::Null } else { json!(443) },
                "decision": decision, "reason": reason(decision),
                "rule": if *decision == "allowed" { json!("agent:allow[0]") } else { Value::Null },
                "addr": if *decision == "allowed" { json!("198.51.100.4:443") } else { Value::Null },
                "bytes_up": 10 * d, "bytes_down": 20 * d, "duration_ms": 5 * d,
                "seq": seq, "prev": "00".repeat(32),
            });
            if *kind == "http" {
                record["method"] = json!(["GET", "POST", "PATCH", "DELETE"][d]);
                record["path"] = json!("/v1/x?y=1");
                record["status"] = json!(200);
            }
            lines.push(record);
            seq += 1;
        }
    }
    lines.push(json!({
        "v": 1, "ts": "2026-11-29T18:40:20.000Z", "run": "r-export", "policy": "agent",
        "kind": "connect", "client": null, "host": "<script>alert(1)</script>\u{1b}[2J\u{202e}",
        "port": 443, "decision": "blocked", "reason": "bad_request", "rule": null, "addr": null,
        "bytes_up": 0, "bytes_down": 0, "duration_ms": 0, "seq": seq, "prev": "00".repeat(32),
    }));
    lines.push(json!({
        "v": 1, "ts": "2026-11-29T18:40:21.000Z", "run": "r-export", "policy": "agent",
        "kind": "limit", "reason": "audit_limit", "limit": 22, "seq": seq + 1,
        "prev": "00".repeat(32),
    }));
    lines.push(json!({
        "v": 1, "ts": "2026-11-29T18:40:22.000Z", "run": "r-export", "policy": "agent",
        "kind": "end", "records": seq + 2, "dropped": 3, "seq": seq + 2, "prev": "00".repeat(32),
    }));
    lines
}

fn write_log(dir: &Path, name: &str, records: &[Value]) -> PathBuf {
    let path = dir.join(name);
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

/// OCSF is the one format: `--format` may be left out.
#[test]
fn export_defaults_to_ocsf() {
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), "audit.log", &every_record_shape());
    let log = log.to_str().unwrap();
    let default = egress_sandbox(&["audit", "export", log]);
    assert!(
        default.status.success(),
        "{}",
        String::from_utf8_lossy(&default.stderr)
    );
    let explicit = egress_sandbox(&["audit", "export", "--format", "ocsf", log]);
    assert_eq!(default.stdout, explicit.stdout);
}

#[test]
fn ocsf_export_of_every_record_kind_and_decision_validates_against_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let records = every_record_shape();
    let log = write_log(dir.path(), "audit.log", &records);
    let out = egress_sandbox(&["audit", "export", "--format", "ocsf", log.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), records.len(), "one event per line");

    for (record, event) in records.iter().zip(&events) {
        let class = match record["kind"].as_str().unwrap() {
            "connect" | "tls" | "tcp" => 4001,
            "http" => 4002,
            "dns" => 4003,
            _ => 1008,
        };
        assert_eq!(event["class_uid"], class, "{record}");
        assert_eq!(
            event["type_uid"].as_u64().unwrap(),
            class * 100 + event["activity_id"].as_u64().unwrap()
        );
        assert_eq!(event["metadata"]["correlation_uid"], "r-export");
        assert_eq!(event["metadata"]["product"]["name"], "egress-sandbox");
        assert_eq!(event["metadata"]["sequence"], record["seq"]);
        if class == 1008 {
            continue;
        }
        let (action, disposition) = match record["decision"].as_str().unwrap() {
            "allowed" | "failed" => (1, 1),
            "blocked" => (2, 2),
            _ => (2, 17),
        };
        assert_eq!(event["action_id"], action, "{record}");
        assert_eq!(event["disposition_id"], disposition, "{record}");
        assert_eq!(event["status_detail"], record["reason"]);
        assert_eq!(event["policy"]["name"], "agent");
        if record["client"].is_string() {
            assert_eq!(event["src_endpoint"]["ip"], "10.213.0.3");
        }
        if record["sandbox_hostname"].is_string() {
            assert_eq!(event["src_endpoint"]["hostname"], "sandbox-1a2b3c");
        }
        if class == 4002 {
            let activity = match record["method"].as_str().unwrap() {
                "GET" => 3,
                "POST" => 6,
                "DELETE" => 2,
                _ => 99,
            };
            assert_eq!(event["activity_id"], activity, "{record}");
        }
        let host = record["host"].as_str().unwrap();
        let dst = &event["dst_endpoint"];
        if record["addr"].is_string() {
            assert_eq!(dst["ip"], "198.51.100.4");
        }
        if !host.starts_with(|c: char| c.is_ascii_digit() || c == '[') {
            assert_eq!(dst["hostname"], host);
        }
        if record["decision"] == "allowed" {
            assert_eq!(event["firewall_rule"]["uid"], "agent:allow[0]");
        }
        if class == 4003 {
            assert_eq!(event["query"]["hostname"], host);
        }
    }
    let end = events.last().unwrap();
    assert_eq!(end["activity_id"], 7);
    assert_eq!(end["unmapped"]["egress_sandbox"]["dropped"], 3);

    let exported = dir.path().join("events.jsonl");
    std::fs::write(&exported, &stdout).unwrap();
    let validation = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ocsf/validate.py"))
        .arg(&exported)
        .output()
        .expect("python3 runs (CI installs ocsf-json-schema and jsonschema)");
    let report = String::from_utf8_lossy(&validation.stdout);
    assert!(
        validation.status.success(),
        "OCSF validation failed:\n{report}{}",
        String::from_utf8_lossy(&validation.stderr)
    );
    assert!(report.contains(&format!("{} passed, 0 failed", records.len())));
}

/// A plain-HTTP run end to end: the proxy writes the audit log of one plain `GET` from a
/// sandbox named `sandbox-1a2b3c`, and its OCSF export is an HTTP Activity "Get" from that
/// host, valid against the schema.
#[test]
fn ocsf_export_of_a_plain_http_run_has_the_method_and_the_sandbox_host() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(plain_http_run(&log));
    let out = egress_sandbox(&["audit", "export", log.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let http = events
        .iter()
        .find(|event| event["class_uid"] == 4002)
        .unwrap_or_else(|| panic!("an HTTP Activity in {stdout}"));
    assert_eq!(
        (&http["activity_id"], &http["activity_name"]),
        (&json!(3), &json!("Get"))
    );
    assert_eq!(http["http_request"]["http_method"], "GET");
    assert_eq!(http["http_request"]["url"]["path"], "/status");
    assert_eq!(http["http_response"]["code"], 200);
    assert_eq!(http["src_endpoint"]["hostname"], "sandbox-1a2b3c");
    assert_eq!(http["src_endpoint"]["ip"], "127.0.0.1");

    let exported = dir.path().join("events.jsonl");
    std::fs::write(&exported, &stdout).unwrap();
    let validation = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ocsf/validate.py"))
        .arg(&exported)
        .output()
        .expect("python3 runs (CI installs ocsf-json-schema and jsonschema)");
    assert!(
        validation.status.success(),
        "OCSF validation failed:\n{}{}",
        String::from_utf8_lossy(&validation.stdout),
        String::from_utf8_lossy(&validation.stderr)
    );
}

/// One plain `GET http://a.test:PORT/status?token=x` through a proxy on loopback to an
/// upstream on loopback, the audit log written to `log`.
async fn plain_http_run(log: &Path) {
    use egress_core::policy::{Policy, PolicySet};
    use egress_core::target::HostName;
    use egress_proxy::AuditDestination;
    use egress_proxy::NameServers;
    use egress_proxy::{Proxy, ProxyConfig};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = upstream.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = upstream.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the head ends before the connection");
            head.extend_from_slice(&buf[..n]);
        }
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        stream.write_all(answer).await.unwrap();
    });
    let yaml = format!(
        "version: 1\nname: plain\nallow:\n  - host: a.test\n    ports: [{port}]\n  - cidr: 127.0.0.0/8\n    ports: [{port}]\n"
    );
    let (policy, _) = Policy::from_yaml("plain.yaml", &yaml).unwrap();
    let mut config = ProxyConfig::new(PolicySet::from(policy), "127.0.0.1:0".parse().unwrap());
    config.audit = AuditDestination::File(log.to_owned());
    config.run_id = Some("r-plain".into());
    config.name_servers = NameServers::None;
    config.pins = vec![(
        HostName::parse("a.test").unwrap(),
        "127.0.0.1".parse().unwrap(),
    )];
    config.sandbox_hostname = Some(HostName::parse("sandbox-1a2b3c").unwrap());
    let proxy = Proxy::bind(config).await.unwrap();
    let mut client = TcpStream::connect(proxy.local_addrs().listen)
        .await
        .unwrap();
    let request =
        format!("GET http://a.test:{port}/status?token=x HTTP/1.1\r\nConnection: close\r\n\r\n");
    client.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    client.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    tokio::time::timeout(std::time::Duration::from_secs(30), proxy.shutdown())
        .await
        .expect("the proxy shuts down");
}

#[test]
fn the_schema_validator_refuses_an_event_the_schema_does_not_allow() {
    // Proves the validation above can fail: one attribute the class does not have, one
    // action outside its enum.
    let dir = tempfile::tempdir().unwrap();
    let log = write_log(dir.path(), "audit.log", &every_record_shape()[..1]);
    let out = egress_sandbox(&["audit", "export", "--format", "ocsf", log.to_str().unwrap()]);
    let mut event: Value = serde_json::from_slice(&out.stdout).unwrap();
    event["action_id"] = json!(7);
    event["exfiltrated"] = json!(true);
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{event}\n")).unwrap();
    let validation = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ocsf/validate.py"))
        .arg(&bad)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&validation.stdout);
    assert!(!validation.status.success(), "{report}");
    assert!(report.contains("action_id"), "{report}");
    assert!(report.contains("exfiltrated"), "{report}");
}

fn chromium(args: &[&str]) -> Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-dev-shm-usage",
        ])
        .args(args)
        .output()
        .expect("chromium runs (Debian package `chromium`; .ci/run installs it)")
}

#[test]
fn html_report_renders_in_a_real_browser_and_shows_the_refused_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = every_record_shape();
    // A second run in the same file.
    records.push(json!({
        "v": 1, "ts": "2026-11-29T18:41:00.000Z", "run": "r-second", "policy": "agent",
        "kind": "connect", "client": null, "host": "refused-in-second-run.example.net",
        "port": 8443, "decision": "blocked", "reason": "port_not_allowed", "rule": null,
        "addr": null, "bytes_up": 0, "bytes_down": 0, "duration_ms": 0,
    }));
    let log = write_log(dir.path(), "audit.log", &records);
    let page = dir.path().join("report.html");
    let out = egress_sandbox(&[
        "audit",
        "report",
        "--html",
        page.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script"), "no script, hostile or ours");
    assert!(
        !html.contains("src=") && !html.contains("href="),
        "nothing fetched"
    );

    let png = dir.path().join("report.png");
    let url = format!("file://{}", page.display());
    let shot = chromium(&[
        &format!("--screenshot={}", png.display()),
        "--window-size=1100,1400",
        &url,
    ]);
    assert!(
        shot.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let image = std::fs::read(&png).expect("chromium wrote the screenshot");
    assert!(image.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    assert!(image.len() > 10_000, "a page, not a blank image");
    if let Ok(keep) = std::env::var("EGRESS_SANDBOX_KEEP_SCREENSHOT") {
        std::fs::copy(&png, keep).unwrap();
    }

    let dom = chromium(&["--dump-dom", &url]);
    assert!(dom.status.success());
    let dom = String::from_utf8_lossy(&dom.stdout);
    for refused in [
        "api.example.org",
        "203.0.113.9",
        "[2001:db8::7]",
        "refused-in-second-run.example.net",
        // The hostile host, as text: escaped, and its control characters made visible.
        "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[2J\\u202e",
    ] {
        assert!(dom.contains(refused), "the page shows {refused}");
    }
    assert!(dom.contains("r-second") && dom.contains("r-export"));
    // The browser parsed no script element out of the hostile host.
    assert!(!dom.contains("<script"));
}
