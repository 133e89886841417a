//! Embedding egress-sandbox as a library, the way another program (an agent framework, say)
//! would: one [`Sandbox`] handle, a [`RunSpec`] with an allow rule, the command's output on
//! this program's stdout and stderr, and the proxy's audit records streamed back live.
//!
//! A run needs one binary besides this program: `egress-sandbox-helper` (the proxy in its
//! container, the sandbox's launcher, the watchdog), which the handle finds beside this
//! program, in the directory above it, or on `PATH` (or where `EGRESS_SANDBOX_HELPER` names
//! it), and checks by its version before anything starts:
//!
//! ```text
//! cargo build -p egress-sandbox-helper
//! cargo build -p egress-sandbox --example embed
//! target/$(rustc --print host-tuple)/debug/examples/embed
//! ```
//!
//! The command tries a host the policy does not allow: the proxy refuses it, so nothing
//! leaves the machine, and the refusal comes back as a typed audit record, its decision and
//! reason read as fields.
//! Exits non-zero if the run does not go as expected (CI runs it).

use std::process::ExitCode;
use std::time::Duration;

use egress_sandbox::Watchdog;
use egress_sandbox::events::{AuditRecord, Outcome, Reason};
use egress_sandbox::{OutputSinks, RunEvent, RunSpec, RunStatus, Sandbox};

/// Prints a line, then asks for a host outside the allowlist through the proxy
/// (`HTTP_PROXY` is set in the sandbox): the proxy answers 403.
const CODE: &str = r#"
import urllib.error, urllib.request
print("hello from the sandbox")
try:
    urllib.request.urlopen("http://not-allowed.example.net/", timeout=20)
    print("not-allowed.example.net answered")
except urllib.error.HTTPError as error:
    print("not-allowed.example.net refused:", error.code)
"#;

#[tokio::main]
async fn main() -> ExitCode {
    match embed().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let mut message = format!("embed: error: {error}");
            let mut source = error.source();
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

async fn embed() -> Result<(), Box<dyn std::error::Error>> {
    // Finds the helper and checks its version, then connects to Docker (DOCKER_HOST, else
    // the local socket) once; runs share the handle.
    let sandbox = Sandbox::connect_with_helper()
        .await?
        .on_progress(|progress| eprintln!("embed: {progress}"));
    eprintln!("embed: helper {}", sandbox.proxy_binary().display());
    // If this program is killed (kill -9) while a run is live, the watchdog (the helper,
    // as a child process) removes the run's containers and network.
    let _watchdog = Watchdog::spawn(&sandbox)?;

    let spec = RunSpec::builder(["python3", "-c", CODE])
        .allow("example.com")
        .timeout(Duration::from_secs(60))
        .build()?;

    // The run's events (its id, start, end and each audit record) arrive while it runs.
    // The channel is bounded: a full one makes the run wait, so it is read as it fills.
    let (events, mut received) = tokio::sync::mpsc::channel(64);
    let follower = tokio::spawn(async move {
        let mut records: Vec<AuditRecord> = Vec::new();
        while let Some(event) = received.recv().await {
            match event {
                RunEvent::Id(id) => eprintln!("embed: run {id}"),
                RunEvent::Audit(entry) => match entry.attempt() {
                    Some(record) => {
                        println!(
                            "embed: audit record: {:?} {}:{} {} ({})",
                            record.kind,
                            record.host,
                            record.port.map_or("-".to_string(), |port| port.to_string()),
                            record.decision.as_str(),
                            record.reason.as_str(),
                        );
                        records.push(record.clone());
                    }
                    // The chain's `limit` and `end` lines: no attempt.
                    None => println!(
                        "embed: audit line: {}",
                        String::from_utf8_lossy(entry.bytes())
                    ),
                },
                RunEvent::UnparsedLine(line) => eprintln!(
                    "embed: the proxy wrote a line that is no record: {}",
                    String::from_utf8_lossy(&line)
                ),
                _ => {}
            }
        }
        records
    });
    let sinks = OutputSinks::new(tokio::io::stdout(), tokio::io::stderr()).with_events(events);
    let outcome = sandbox.run(spec, sinks).await?;
    // The channel closes once every event is delivered: the follower has seen them all.
    let records = follower.await?;

    println!(
        "embed: run {} ended {:?}, exit {}, policy {}, {} attempts ({} blocked), {} attempt records",
        outcome.run_id,
        outcome.status,
        outcome.exit_code,
        outcome.policy,
        outcome.attempts.total(),
        outcome.attempts.blocked,
        records.len()
    );
    for group in &outcome.blocked {
        println!("embed: refused: {}", group.describe());
    }

    if outcome.status != RunStatus::Exited || outcome.exit_code != 0 {
        return Err(format!(
            "the command did not exit 0 (status {:?}, exit {})",
            outcome.status, outcome.exit_code
        )
        .into());
    }
    let refusal_recorded = records.iter().any(|record| {
        record.host == "not-allowed.example.net"
            && record.decision == Outcome::Blocked
            && record.reason == Reason::NotAllowed
    });
    if outcome.attempts.blocked == 0 || !refusal_recorded {
        return Err("the refused request is missing from the audit records".into());
    }
    Ok(())
}
