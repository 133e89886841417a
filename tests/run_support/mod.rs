//! Shared helpers of the `run_*` tests: the real binary, real Docker, no mocks.

#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// The binary under test.
pub fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
}

/// Starts `egress-sandbox run --report REPORT` with a command that prints `running` and then
/// sleeps, and returns once that line arrived: the command is running inside the sandbox.
pub fn start_long_run(report: &Path) -> Child {
    let mut child = binary()
        .args(["run", "--timeout", "120s", "--report"])
        .arg(report)
        .args(["--", "sh", "-c", "echo running; exec sleep 600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start egress-sandbox");
    let mut first = [0u8; 8];
    let stdout = child.stdout.as_mut().expect("piped stdout");
    stdout
        .read_exact(&mut first)
        .expect("the command's first line");
    assert_eq!(&first, b"running\n");
    child
}

/// Sends `signal` (`TERM`, `INT`, …) to `pid` with kill(1).
pub fn send_signal(pid: u32, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{signal} {pid} failed");
}

/// `egress-sandbox run ARGS...`, waited for.
pub fn run(args: &[&str]) -> Output {
    binary()
        .arg("run")
        .args(args)
        .output()
        .expect("start egress-sandbox")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

fn docker(args: &[&str]) -> String {
    let output = Command::new("docker")
        .args(args)
        .output()
        .expect("run the docker CLI");
    assert!(
        output.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Names of containers and networks with label `key=value`.
pub fn objects_labelled(key: &str, value: &str) -> Vec<String> {
    let filter = format!("label={key}={value}");
    let mut found: Vec<String> =
        docker(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"])
            .lines()
            .map(|name| format!("container {name}"))
            .collect();
    found.extend(
        docker(&[
            "network",
            "ls",
            "--filter",
            &filter,
            "--format",
            "{{.Name}}",
        ])
        .lines()
        .map(|name| format!("network {name}")),
    );
    found
}

/// Objects of run `run_id`; must be none once the run has returned.
pub fn assert_nothing_left(run_id: &str) {
    let left = objects_labelled("egress-sandbox.run", run_id);
    assert!(left.is_empty(), "run {run_id} left {left:?}");
}

/// Objects whose owner is process `pid` (any start time): for runs whose id we never saw.
pub fn assert_nothing_left_by(pid: u32) {
    let filter = "label=egress-sandbox.owner";
    let listing = format!(
        "{}{}",
        docker(&[
            "ps",
            "-a",
            "--filter",
            filter,
            "--format",
            "{{.Names}} {{.Label \"egress-sandbox.owner\"}}\n"
        ]),
        docker(&[
            "network",
            "ls",
            "--filter",
            filter,
            "--format",
            "{{.Name}} {{.Label \"egress-sandbox.owner\"}}\n"
        ]),
    );
    let prefix = format!(" {pid}:");
    let left: Vec<&str> = listing
        .lines()
        .filter(|line| line.contains(&prefix))
        .collect();
    assert!(left.is_empty(), "process {pid} left {left:?}");
}

/// The report a run wrote.
pub fn read_report(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("the run wrote a report");
    serde_json::from_str(&text).expect("the report is JSON")
}

/// Creates a container and a network labelled as run `run_id` owned by `owner`, the way a
/// run that crashed would leave them.
pub fn make_leftovers(run_id: &str, owner: &str, image: &str) -> (String, String) {
    let network = format!("egress-run-{run_id}");
    let container = format!("egress-run-{run_id}-sandbox");
    let run_label = format!("egress-sandbox.run={run_id}");
    let owner_label = format!("egress-sandbox.owner={owner}");
    docker(&[
        "network",
        "create",
        "--internal",
        "--label",
        &run_label,
        "--label",
        &owner_label,
        &network,
    ]);
    docker(&[
        "create",
        "--name",
        &container,
        "--network",
        &network,
        "--label",
        &run_label,
        "--label",
        &owner_label,
        image,
        "true",
    ]);
    (container, network)
}

pub fn remove_leftovers(container: &str, network: &str) {
    let _ = Command::new("docker")
        .args(["rm", "-f", container])
        .output();
    let _ = Command::new("docker")
        .args(["network", "rm", network])
        .output();
}

/// An image that exists locally for `docker create`, whatever the machine has built;
/// not a proxy image, which `gc` may sweep as stale while a test uses it.
pub fn any_local_image() -> String {
    let images = docker(&["images", "--format", "{{.Repository}}:{{.Tag}}"]);
    let usable: Vec<&str> = images
        .lines()
        .filter(|name| !name.contains("<none>"))
        .collect();
    usable
        .iter()
        .find(|name| !name.starts_with("egress-sandbox-proxy:"))
        .or_else(|| usable.first())
        .expect("at least one local image")
        .to_string()
}

/// `<pid>:<start time>:<boot id>:<pid namespace>` of this test process, as the owner
/// label spells it.
pub fn own_owner_label() -> String {
    let pid = std::process::id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    let start = after.split_whitespace().nth(19).unwrap();
    format!("{pid}:{start}:{}", host_identity())
}

/// `<boot id>:<pid namespace inode>` of this host and PID namespace, as owner labels end.
pub fn host_identity() -> String {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let namespace = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let inode = namespace
        .to_string_lossy()
        .trim_start_matches("pid:[")
        .trim_end_matches(']')
        .to_string();
    format!("{}:{inode}", boot_id.trim())
}
