//! What a run amounts to: the JSON run report (`--report`, schema in api-run.md), the
//! one-line summary on stderr, and the tally of refused attempts that both share with
//! `audit summary`.

use std::collections::HashMap;
use std::time::Duration;

use egress_proxy::audit::{AuditRecord, Outcome};
use egress_proxy::policy::Reason;
use serde::Serialize;

use crate::sandbox::run::{RunOutcome, RunStatus};

/// Attempts by decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AttemptCounts {
    pub allowed: u64,
    pub blocked: u64,
    pub would_block: u64,
    pub failed: u64,
}

/// Refused attempts of one host, port and reason (kinds merged; port `None` for DNS).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RefusalGroup {
    pub host: String,
    pub port: Option<u16>,
    pub reason: Reason,
    pub count: u64,
}

impl RefusalGroup {
    /// `host:port reason` (IPv6 hosts in brackets), `host reason` for DNS.
    pub fn describe(&self) -> String {
        let host = if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let mut text = match self.port {
            Some(port) => format!("{host}:{port} {}", self.reason),
            None => format!("{host} {}", self.reason),
        };
        if self.count > 1 {
            text.push_str(&format!(" x{}", self.count));
        }
        text
    }
}

/// Counts audit records: attempts by decision, refusals (blocked and would_block) grouped.
#[derive(Clone, Debug, Default)]
pub struct AuditTally {
    pub attempts: AttemptCounts,
    refusals: HashMap<(String, Option<u16>, Reason), u64>,
}

impl AuditTally {
    pub fn add(&mut self, record: &AuditRecord) {
        match record.decision {
            Outcome::Allowed => self.attempts.allowed += 1,
            Outcome::Failed => self.attempts.failed += 1,
            Outcome::Blocked => self.attempts.blocked += 1,
            Outcome::WouldBlock => self.attempts.would_block += 1,
        }
        if matches!(record.decision, Outcome::Blocked | Outcome::WouldBlock) {
            *self
                .refusals
                .entry((record.host.clone(), record.port, record.reason))
                .or_default() += 1;
        }
    }

    /// Groups sorted by count (most first), then host, port, reason.
    pub fn refusals(&self) -> Vec<RefusalGroup> {
        let mut groups: Vec<RefusalGroup> = self
            .refusals
            .iter()
            .map(|((host, port, reason), count)| RefusalGroup {
                host: host.clone(),
                port: *port,
                reason: *reason,
                count: *count,
            })
            .collect();
        groups.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| a.host.cmp(&b.host))
                .then_with(|| a.port.cmp(&b.port))
                .then_with(|| a.reason.cmp(&b.reason))
        });
        groups
    }
}

/// The `--report` file.
#[derive(Debug, Serialize)]
pub struct RunReport<'a> {
    pub v: u32,
    pub run: &'a str,
    pub status: RunStatus,
    pub exit_code: i32,
    pub duration_ms: u64,
    pub image: &'a str,
    pub policy: &'a str,
    pub output: crate::sandbox::output::OutputStats,
    pub attempts: AttemptCounts,
    pub blocked: &'a [RefusalGroup],
    /// Hex SHA-256 of the run's `end` audit line (null when the proxy never wrote it).
    pub audit_head: Option<&'a str>,
}

impl<'a> RunReport<'a> {
    pub fn new(outcome: &'a RunOutcome) -> RunReport<'a> {
        RunReport {
            v: 1,
            run: &outcome.run_id,
            status: outcome.status,
            exit_code: outcome.exit_code,
            duration_ms: u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
            image: &outcome.image,
            policy: &outcome.policy,
            output: outcome.output,
            attempts: outcome.attempts,
            blocked: &outcome.blocked,
            audit_head: outcome.audit_head.as_deref(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serialises")
    }
}

/// How many refusal groups the summary line names before "and N more".
const SUMMARY_GROUPS: usize = 5;

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}

/// The line printed on stderr at the end of a run, e.g.
/// `egress-sandbox: exit 0 after 1.4s; 2 blocked: test.example.org:443 not_allowed, …`.
pub fn summary_line(outcome: &RunOutcome) -> String {
    let after = seconds(outcome.duration);
    let mut line = match outcome.status {
        RunStatus::Exited => format!("egress-sandbox: exit {} after {after}", outcome.exit_code),
        RunStatus::Timeout => format!(
            "egress-sandbox: time limit of {} reached, killed (exit 124) after {after}",
            humantime::format_duration(outcome.timeout)
        ),
        RunStatus::Oom => format!("egress-sandbox: killed for memory (exit 137) after {after}"),
        RunStatus::Interrupted => format!(
            "egress-sandbox: interrupted (exit {}) after {after}",
            outcome.exit_code
        ),
    };
    let refused = outcome.attempts.blocked + outcome.attempts.would_block;
    let label = match (outcome.attempts.blocked, outcome.attempts.would_block) {
        (_, 0) => "blocked",
        (0, _) => "would be blocked",
        _ => "blocked or would be",
    };
    line.push_str(&format!("; {refused} {label}"));
    if !outcome.blocked.is_empty() {
        let named: Vec<String> = outcome
            .blocked
            .iter()
            .take(SUMMARY_GROUPS)
            .map(RefusalGroup::describe)
            .collect();
        line.push_str(": ");
        line.push_str(&named.join(", "));
        if outcome.blocked.len() > SUMMARY_GROUPS {
            line.push_str(&format!(
                " and {} more",
                outcome.blocked.len() - SUMMARY_GROUPS
            ));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::output::OutputStats;
    use egress_proxy::audit::Kind;

    fn record(host: &str, port: Option<u16>, decision: Outcome, reason: Reason) -> AuditRecord {
        AuditRecord {
            v: 1,
            ts: "2026-11-29T18:40:43.123Z".into(),
            run: Some("r-00000001".into()),
            policy: Some("p".into()),
            kind: if port.is_some() {
                Kind::Connect
            } else {
                Kind::Dns
            },
            client: None,
            host: host.into(),
            port,
            decision,
            reason,
            rule: None,
            addr: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
        }
    }

    fn outcome(tally: &AuditTally) -> RunOutcome {
        RunOutcome {
            run_id: "r-5f2c9a1b".into(),
            status: RunStatus::Exited,
            exit_code: 0,
            duration: Duration::from_millis(1400),
            timeout: Duration::from_secs(30),
            image: "egress-sandbox-base:bookworm-1".into(),
            policy: "openai-agent+cli".into(),
            output: OutputStats {
                stdout_bytes: 12,
                stderr_bytes: 0,
                truncated: false,
            },
            attempts: tally.attempts,
            blocked: tally.refusals(),
            audit_head: None,
            teardown_errors: Vec::new(),
        }
    }

    #[test]
    fn tally_groups_refusals_and_counts_decisions() {
        let mut tally = AuditTally::default();
        tally.add(&record(
            "api.openai.com",
            Some(443),
            Outcome::Allowed,
            Reason::Rule,
        ));
        for _ in 0..2 {
            tally.add(&record(
                "test.example.org",
                Some(443),
                Outcome::Blocked,
                Reason::NotAllowed,
            ));
        }
        tally.add(&record(
            "169.254.169.254",
            Some(80),
            Outcome::Blocked,
            Reason::PrivateAddress,
        ));
        tally.add(&record(
            "test.example.org",
            None,
            Outcome::Blocked,
            Reason::NotAllowed,
        ));
        tally.add(&record(
            "down.example",
            Some(443),
            Outcome::Failed,
            Reason::ConnectFailed,
        ));
        assert_eq!(
            tally.attempts,
            AttemptCounts {
                allowed: 1,
                blocked: 4,
                would_block: 0,
                failed: 1
            }
        );
        let groups = tally.refusals();
        assert_eq!(groups[0].describe(), "test.example.org:443 not_allowed x2");
        assert_eq!(groups[1].describe(), "169.254.169.254:80 private_address");
        assert_eq!(groups[2].describe(), "test.example.org not_allowed");
    }

    #[test]
    fn summary_and_report_follow_the_contract() {
        let mut tally = AuditTally::default();
        tally.add(&record(
            "test.example.org",
            Some(443),
            Outcome::Blocked,
            Reason::NotAllowed,
        ));
        tally.add(&record(
            "169.254.169.254",
            Some(80),
            Outcome::Blocked,
            Reason::PrivateAddress,
        ));
        let outcome = outcome(&tally);
        assert_eq!(
            summary_line(&outcome),
            "egress-sandbox: exit 0 after 1.4s; 2 blocked: 169.254.169.254:80 private_address, test.example.org:443 not_allowed"
        );
        let report: serde_json::Value =
            serde_json::from_str(&RunReport::new(&outcome).to_json()).unwrap();
        assert_eq!(report["v"], 1);
        assert_eq!(report["status"], "exited");
        assert_eq!(report["duration_ms"], 1400);
        assert_eq!(report["output"]["stdout_bytes"], 12);
        assert_eq!(report["attempts"]["blocked"], 2);
        assert_eq!(report["blocked"][1]["host"], "test.example.org");
        assert_eq!(report["blocked"][1]["port"], 443);
        assert_eq!(report["blocked"][1]["reason"], "not_allowed");
        assert_eq!(report["blocked"][1]["count"], 1);
    }

    #[test]
    fn summary_without_refusals() {
        let outcome = outcome(&AuditTally::default());
        assert_eq!(
            summary_line(&outcome),
            "egress-sandbox: exit 0 after 1.4s; 0 blocked"
        );
    }
}
