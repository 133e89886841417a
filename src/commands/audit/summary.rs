//! `egress-sandbox audit summary FILE...`: refused attempts grouped by host, port and reason.

use std::io::BufRead;
use std::process::ExitCode;

use anyhow::Context;
use egress_proxy::audit::AuditLine;

use crate::report::AuditTally;

pub fn summary(files: &[std::path::PathBuf]) -> anyhow::Result<ExitCode> {
    let mut tally = AuditTally::default();
    for path in files {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.with_context(|| format!("cannot read {}", path.display()))?;
            if line.trim().is_empty() {
                continue;
            }
            match AuditLine::parse(line.as_bytes()) {
                Ok(AuditLine::Attempt(record)) => tally.add(&record),
                // The chain's limit and end lines are not attempts.
                Ok(AuditLine::Limit(_) | AuditLine::End(_)) => {}
                Err(error) => eprintln!(
                    "egress-sandbox: warning: {}:{}: not an audit record ({error}); skipped",
                    path.display(),
                    index + 1
                ),
            }
        }
    }
    let attempts = tally.attempts;
    println!(
        "{} attempts: {} allowed, {} blocked, {} would_block, {} failed",
        attempts.allowed + attempts.blocked + attempts.would_block + attempts.failed,
        attempts.allowed,
        attempts.blocked,
        attempts.would_block,
        attempts.failed
    );
    let groups = tally.refusals();
    if groups.is_empty() {
        println!("no refused attempts");
        return Ok(ExitCode::SUCCESS);
    }
    let host_width = groups
        .iter()
        .map(|g| g.host.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:>6}  {:<host_width$}  {:>5}  REASON",
        "COUNT", "HOST", "PORT"
    );
    for group in &groups {
        let port = group
            .port
            .map_or_else(|| "-".to_string(), |port| port.to_string());
        println!(
            "{:>6}  {:<host_width$}  {:>5}  {}",
            group.count, group.host, port, group.reason
        );
    }
    Ok(ExitCode::SUCCESS)
}
