//! The Python and Node clients (`clients/`) against a real daemon: each runs a program with
//! a file, stdin and env, sees its output live and its blocked attempt, gets a 400 as an
//! InvalidRequest naming the field, refuses a string as the command itself, cancels a run,
//! and asks a daemon at its `--max-runs` again after its Retry-After within the call's
//! timeout.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::serve::{Daemon, assert_run_removed};
use crate::support::TestNetwork;

const PYTHON_SCENARIO: &str = r#"
import json, sys, threading
sys.path.insert(0, sys.argv[1])
from egress_sandbox import Client, InvalidRequest
client = Client(sys.argv[2])
network = sys.argv[3]
seen = []
result = client.run(
    ["python3", "-c", "import os, sys, urllib.request\nprint(open('main.py').read(), os.environ['GREETING'], sys.stdin.read())\ntry:\n    urllib.request.urlopen('https://blocked.example.org', timeout=10)\nexcept Exception:\n    sys.exit(3)"],
    files={"main.py": "print(42)"}, stdin=b"piped", env={"GREETING": "hi"},
    allow=["api.example.com"], timeout=60, egress_network=network,
    on_output=lambda stream, data: seen.append(stream))
try:
    client.run([], egress_network=network)
    refused = None
except InvalidRequest as error:
    refused = error.field
try:
    client.run("ls -la", egress_network=network)
    string_command = "accepted"
except InvalidRequest as error:
    string_command = error.field
tiny = client.run(["sleep", "5"], egress_network=network, timeout=0.0001)
try:
    client.run(["true"], egress_network=network, timeout=0)
    zero_timeout = "accepted"
except InvalidRequest as error:
    zero_timeout = "refused" if error.field == "timeout" else error.field
refused_flags = []
for flag in ({"audit_limit": 0}, {"runtime": "run c"}):
    try:
        client.run(["true"], egress_network=network, **flag)
    except InvalidRequest as error:
        refused_flags.append(error.field)
started = []
def cancel_when_started(run_id):
    started.append(run_id)
    threading.Thread(target=client.cancel, args=(run_id,)).start()
cancelled = client.run(["sleep", "60"], egress_network=network, on_started=cancel_when_started)
print(json.dumps({
    "exit_code": result.exit_code, "status": result.status,
    "stdout": result.stdout.decode(), "stderr": result.stderr.decode(),
    "blocked": result.blocked, "records": result.records, "run_id": result.run_id,
    "seen": sorted(set(seen)), "refused": refused, "refused_flags": refused_flags,
    "string_command": string_command,
    "tiny_timeout": [tiny.status, tiny.exit_code], "zero_timeout": zero_timeout,
    "cancelled": [cancelled.status, cancelled.exit_code, cancelled.run_id],
}))
"#;

const NODE_SCENARIO: &str = r#"
const [clientPath, socket, network] = process.argv.slice(1);
const { Client, InvalidRequest } = await import(clientPath);
const client = new Client(socket);
const seen = new Set();
const result = await client.run(
  ["node", "-e", "const fs = require('fs'); process.stdout.write(fs.readFileSync('main.js', 'utf8') + ' ' + process.env.GREETING + ' ' + fs.readFileSync(0, 'utf8') + '\\n'); require('https').get('https://blocked.example.org', () => {}).on('error', () => process.exit(3));"],
  { files: { "main.js": "console.log(42)" }, stdin: "piped", env: { GREETING: "hi" },
    allow: ["api.example.com"], timeout: 60, egressNetwork: network,
    onOutput: (stream) => seen.add(stream) });
let refused = null;
try { await client.run([], { egressNetwork: network }); } catch (error) {
  if (error instanceof InvalidRequest) refused = error.field; else throw error;
}
let stringCommand = "accepted";
try { await client.run("ls -la", { egressNetwork: network }); } catch (error) {
  if (error instanceof InvalidRequest) stringCommand = error.field; else throw error;
}
const tiny = await client.run(["sleep", "5"], { egressNetwork: network, timeout: 0.0001 });
let zeroTimeout = "accepted";
try { await client.run(["true"], { egressNetwork: network, timeout: 0 }); } catch (error) {
  if (error instanceof InvalidRequest && error.field === "timeout") zeroTimeout = "refused"; else throw error;
}
const refusedFlags = [];
for (const flag of [{ auditLimit: 0 }, { runtime: "run c" }]) {
  try { await client.run(["true"], { egressNetwork: network, stdin: null, ...flag }); } catch (error) {
    if (error instanceof InvalidRequest) refusedFlags.push(error.field); else throw error;
  }
}
const cancelled = await client.run(["sleep", "60"], {
  egressNetwork: network, onStarted: (runId) => { client.cancel(runId); } });
console.log(JSON.stringify({
  exit_code: result.exitCode, status: result.status,
  stdout: result.stdout.toString(), stderr: result.stderr.toString(),
  blocked: result.blocked, records: result.records, run_id: result.runId,
  seen: [...seen].sort(), refused, refused_flags: refusedFlags, string_command: stringCommand,
  tiny_timeout: [tiny.status, tiny.exitCode], zero_timeout: zeroTimeout,
  cancelled: [cancelled.status, cancelled.exitCode, cancelled.runId],
}));
"#;

/// With `--max-runs 1` and a run live: a call whose timeout ends before the daemon's
/// Retry-After is DaemonBusy at once; one with time enough is asked again until it runs.
const PYTHON_RETRY: &str = r#"
import json, sys, threading
sys.path.insert(0, sys.argv[1])
from egress_sandbox import Client, DaemonBusy
client = Client(sys.argv[2])
network = sys.argv[3]
started = threading.Event()
outcome = {}
def first():
    outcome["first"] = client.run(["sleep", "4"], egress_network=network, timeout=60,
                                  on_started=lambda run_id: started.set()).status
thread = threading.Thread(target=first)
thread.start()
if not started.wait(120):
    sys.exit("the first run did not start")
try:
    client.run(["true"], egress_network=network, timeout=1)
    outcome["short"] = "accepted"
except DaemonBusy as error:
    outcome["short"] = [error.status, error.retry_after, error.attempts]
second = client.run(["echo", "after"], egress_network=network, timeout=120)
outcome["waited"] = [second.status, second.exit_code, second.stdout.decode()]
thread.join()
print(json.dumps(outcome))
"#;

const NODE_RETRY: &str = r#"
const [clientPath, socket, network] = process.argv.slice(1);
const { Client, DaemonBusy } = await import(clientPath);
const client = new Client(socket);
let started;
const running = new Promise((resolve) => { started = resolve; });
const first = client.run(["sleep", "4"], { egressNetwork: network, timeout: 60, onStarted: started });
await running;
let short = "accepted";
try { await client.run(["true"], { egressNetwork: network, timeout: 1 }); } catch (error) {
  if (error instanceof DaemonBusy) short = [error.status, error.retryAfter, error.attempts]; else throw error;
}
const second = await client.run(["echo", "after"], { egressNetwork: network, timeout: 120 });
console.log(JSON.stringify({
  first: (await first).status, short,
  waited: [second.status, second.exitCode, second.stdout.toString()],
}));
"#;

fn check_retry(outcome: &Value) {
    assert_eq!(outcome["first"], "exited", "{outcome:#}");
    assert_eq!(
        outcome["short"],
        // The first run's time limit is a minute away: the daemon's wait is capped at 5 s.
        serde_json::json!([503, 5, 1]),
        "{outcome:#}"
    );
    assert_eq!(
        outcome["waited"],
        serde_json::json!(["exited", 0, "after\n"]),
        "{outcome:#}"
    );
}

fn clients_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/clients"))
}

fn check(outcome: &Value, expected_stdout: &str) {
    assert_eq!(outcome["exit_code"], 3, "{outcome:#}");
    assert_eq!(outcome["status"], "exited");
    assert_eq!(outcome["stdout"], expected_stdout, "{outcome:#}");
    assert_eq!(
        outcome["blocked"][0]["host"], "blocked.example.org",
        "{outcome:#}"
    );
    assert!(
        outcome["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["host"] == "blocked.example.org" && r["decision"] == "blocked"),
        "{outcome:#}"
    );
    assert_eq!(outcome["seen"][0], "stdout", "{outcome:#}");
    assert_eq!(outcome["refused"], "argv");
    // A string as the command is refused by the client itself, before anything is sent.
    assert_eq!(outcome["string_command"], "argv", "{outcome:#}");
    // A timeout in seconds below a millisecond is 1ms, not "0ms" (which the daemon would
    // refuse); zero is refused by the client itself.
    assert_eq!(
        outcome["tiny_timeout"],
        serde_json::json!(["timeout", 124]),
        "{outcome:#}"
    );
    assert_eq!(outcome["zero_timeout"], "refused", "{outcome:#}");
    // The clients send `audit_limit` and `runtime` (each refused here for its value).
    assert_eq!(
        outcome["refused_flags"],
        serde_json::json!(["audit_limit", "runtime"]),
        "{outcome:#}"
    );
    assert_eq!(outcome["cancelled"][0], "interrupted", "{outcome:#}");
    assert_eq!(outcome["cancelled"][1], 130);
    for run in [&outcome["run_id"], &outcome["cancelled"][2]] {
        assert_run_removed(run.as_str().unwrap());
    }
}

fn scenario_output(output: std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the client scenario failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn the_python_client_runs_streams_refuses_and_cancels() {
    let network = TestNetwork::create();
    let daemon = Daemon::start();
    let output = Command::new("python3")
        .arg("-c")
        .arg(PYTHON_SCENARIO)
        .arg(clients_dir().join("python"))
        .arg(&daemon.socket)
        .arg(&network.name)
        .output()
        .expect("python3 runs");
    check(&scenario_output(output), "print(42) hi piped\n");
    daemon.stop();
}

#[test]
fn the_node_client_runs_streams_refuses_and_cancels() {
    let network = TestNetwork::create();
    let daemon = Daemon::start();
    let output = Command::new("node")
        .arg("--input-type=module")
        .arg("-e")
        .arg(NODE_SCENARIO)
        .arg(clients_dir().join("node/egress-sandbox.mjs"))
        .arg(&daemon.socket)
        .arg(&network.name)
        .output()
        .expect("node runs");
    check(&scenario_output(output), "console.log(42) hi piped\n");
    daemon.stop();
}

#[test]
fn the_python_client_asks_a_busy_daemon_again_within_its_timeout() {
    let network = TestNetwork::create();
    let daemon = Daemon::start_with(&["--pool", "0", "--max-runs", "1"]);
    let output = Command::new("python3")
        .arg("-c")
        .arg(PYTHON_RETRY)
        .arg(clients_dir().join("python"))
        .arg(&daemon.socket)
        .arg(&network.name)
        .output()
        .expect("python3 runs");
    check_retry(&scenario_output(output));
    daemon.stop();
}

#[test]
fn the_node_client_asks_a_busy_daemon_again_within_its_timeout() {
    let network = TestNetwork::create();
    let daemon = Daemon::start_with(&["--pool", "0", "--max-runs", "1"]);
    let output = Command::new("node")
        .arg("--input-type=module")
        .arg("-e")
        .arg(NODE_RETRY)
        .arg(clients_dir().join("node/egress-sandbox.mjs"))
        .arg(&daemon.socket)
        .arg(&network.name)
        .output()
        .expect("node runs");
    check_retry(&scenario_output(output));
    daemon.stop();
}

/// A daemon that is not there: both clients' DaemonUnreachable names the socket they tried.
#[test]
fn the_clients_name_the_socket_they_cannot_reach() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("no-daemon.sock");
    let python = Command::new("python3")
        .arg("-c")
        .arg("import sys; sys.path.insert(0, sys.argv[1]); from egress_sandbox import Client; Client(sys.argv[2]).health()")
        .arg(clients_dir().join("python"))
        .arg(&socket)
        .output()
        .expect("python3 runs");
    let node = Command::new("node")
        .arg("--input-type=module")
        .arg("-e")
        .arg("const { Client } = await import(process.argv[1]); await new Client(process.argv[2]).health();")
        .arg(clients_dir().join("node/egress-sandbox.mjs"))
        .arg(&socket)
        .output()
        .expect("node runs");
    for (client, output) in [("python", python), ("node", node)] {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{client}: {stderr}");
        assert!(
            stderr.contains(socket.to_str().unwrap()),
            "{client} does not name the socket: {stderr}"
        );
        assert!(stderr.contains("DaemonUnreachable"), "{client}: {stderr}");
    }
}
