//! What a run amounts to: the JSON run report (`--report`, documented in README.md), the
//! one-line summary on stderr, and the tally of refused attempts that both share with
//! `audit summary`.

use std::borrow::Cow;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::outcome::{Interruption, RunOutcome, RunStatus};
pub use egress_core::tally::{
    AttemptCounts, AuditCounts, AuditTally, REPORT_GROUPS, RefusalGroup, Refusals,
};

/// The `--report` file: borrowed from a [`RunOutcome`] when written, owned when read back
/// (`run --server` reads the daemon's and completes it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport<'a> {
    /// The report's schema version, 1.
    pub v: u32,
    /// The run's id.
    pub run: Cow<'a, str>,
    /// How the run ended.
    pub status: RunStatus,
    /// The exit status for the caller, as [`RunOutcome::exit_code`].
    pub exit_code: i32,
    /// From the sandbox's start to its end, in milliseconds.
    pub duration_ms: u64,
    /// The image the command ran in.
    pub image: Cow<'a, str>,
    /// The name of the policy the run's egress was judged by.
    pub policy: Cow<'a, str>,
    /// What the command wrote to stdout and stderr.
    pub output: crate::output::OutputStats,
    /// The run's egress attempts by decision.
    pub attempts: AttemptCounts,
    /// At most [`REPORT_GROUPS`] groups, most attempts first.
    pub blocked: Cow<'a, [RefusalGroup]>,
    /// Refused attempts counted in no group of `blocked`.
    pub blocked_more: u64,
    /// Records the proxy wrote and attempts it only counted.
    pub audit: AuditCounts,
    /// Hex SHA-256 of the run's `end` audit line (null when the proxy never wrote it).
    pub audit_head: Option<Cow<'a, str>>,
    /// Present only when the `--audit-log` file could not take every record: why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_log_error: Option<Cow<'a, str>>,
}

impl<'a> RunReport<'a> {
    /// The report of `outcome`, borrowing its text, with at most [`REPORT_GROUPS`] refusal
    /// groups; the attempts of groups past them join `blocked_more`.
    pub fn new(outcome: &'a RunOutcome) -> RunReport<'a> {
        RunReport {
            v: 1,
            run: Cow::Borrowed(&outcome.run_id),
            status: outcome.status,
            exit_code: outcome.exit_code,
            duration_ms: u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
            image: Cow::Borrowed(&outcome.image),
            policy: Cow::Borrowed(&outcome.policy),
            output: outcome.output,
            attempts: outcome.attempts,
            // RunOutcome holds at most REPORT_GROUPS already; an embedder's may not.
            blocked: Cow::Borrowed(&outcome.blocked[..outcome.blocked.len().min(REPORT_GROUPS)]),
            blocked_more: outcome.blocked_more
                + outcome
                    .blocked
                    .iter()
                    .skip(REPORT_GROUPS)
                    .map(|group| group.count)
                    .sum::<u64>(),
            audit: outcome.audit,
            audit_head: outcome.audit_head.as_deref().map(Cow::Borrowed),
            audit_log_error: outcome.audit_log_error.as_deref().map(Cow::Borrowed),
        }
    }

    /// The report as `--report` writes it: pretty JSON (without the final newline).
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
/// Hosts come from the sandbox: they are shown through [`RefusalGroup::describe`], which
/// escapes every control, bidi and separator character.
pub fn summary_line(outcome: &RunOutcome) -> String {
    let after = seconds(outcome.duration);
    let mut line = match outcome.status {
        RunStatus::Exited => format!("egress-sandbox: exit {} after {after}", outcome.exit_code),
        RunStatus::Timeout => format!(
            "egress-sandbox: time limit of {} reached, killed (exit 124) after {after}",
            humantime::format_duration(outcome.timeout)
        ),
        RunStatus::Oom => format!("egress-sandbox: killed for memory (exit 137) after {after}"),
        RunStatus::Interrupted if outcome.exit_code == Interruption::OutputClosed.exit_code() => {
            format!(
                "egress-sandbox: the output's reader went away; the sandbox was killed (exit {}) \
                 after {after}",
                outcome.exit_code
            )
        }
        RunStatus::Interrupted => format!(
            "egress-sandbox: interrupted (exit {}) after {after}",
            outcome.exit_code
        ),
        RunStatus::ProxyFailed => format!(
            "egress-sandbox: the proxy stopped during the run; the sandbox was killed (exit {}) \
             after {after}; attempts after the proxy stopped were not recorded",
            outcome.exit_code
        ),
    };
    let refused = outcome.attempts.refused();
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
        if outcome.blocked_more > 0 {
            line.push_str(&format!(
                " (+{} in groups not listed)",
                outcome.blocked_more
            ));
        }
    }
    if outcome.audit.dropped > 0 {
        line.push_str(&format!(
            "; {} audit records dropped",
            outcome.audit.dropped
        ));
    }
    if let Some(error) = &outcome.audit_log_error {
        line.push_str(&audit_log_incomplete(error));
    }
    line
}

/// What the summary line adds when the `--audit-log` file could not take every record.
pub fn audit_log_incomplete(error: &str) -> String {
    format!(
        "; the audit log is incomplete ({})",
        egress_core::text::visible(error)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::OutputStats;
    use egress_core::audit::{AuditRecord, DroppedByDecision, Kind, Outcome};
    use egress_core::policy::Reason;
    use egress_core::text::must_escape;

    fn record(host: &str, port: Option<u16>, decision: Outcome, reason: Reason) -> AuditRecord {
        let kind = if port.is_some() {
            Kind::Connect
        } else {
            Kind::Dns
        };
        let mut record = AuditRecord::new(kind, host, decision, reason);
        record.port = port;
        record
    }

    fn outcome(tally: &AuditTally) -> RunOutcome {
        let refusals = tally.refusals();
        RunOutcome {
            run_id: "r-5f2c9a1b".into(),
            status: RunStatus::Exited,
            exit_code: 0,
            duration: Duration::from_millis(1400),
            timeout: Duration::from_secs(30),
            image: "egress-sandbox-base:bookworm-2".into(),
            policy: "openai-agent+cli".into(),
            output: OutputStats {
                stdout_bytes: 12,
                stderr_bytes: 0,
                truncated: false,
            },
            attempts: tally.attempts,
            blocked: refusals.groups,
            blocked_more: refusals.more,
            audit: tally.audit(),
            audit_head: None,
            teardown_errors: Vec::new(),
            audit_log_error: None,
        }
    }

    /// A log that could not take every record says so in the summary and the report;
    /// a complete one adds nothing to either.
    #[test]
    fn an_incomplete_audit_log_is_said_in_the_summary_and_the_report() {
        let mut outcome = outcome(&AuditTally::default());
        let complete = RunReport::new(&outcome).to_json();
        assert!(!complete.contains("audit_log_error"), "{complete}");
        outcome.audit_log_error = Some("No space left on device (os error 28)".into());
        assert_eq!(
            summary_line(&outcome),
            "egress-sandbox: exit 0 after 1.4s; 0 blocked; the audit log is incomplete \
             (No space left on device (os error 28))"
        );
        let report: serde_json::Value =
            serde_json::from_str(&RunReport::new(&outcome).to_json()).unwrap();
        assert_eq!(
            report["audit_log_error"],
            "No space left on device (os error 28)"
        );
    }

    /// A report read back is the report written: what `run --server` relies on when it
    /// completes the daemon's.
    #[test]
    fn a_report_reads_back_as_written() {
        let mut tally = AuditTally::default();
        tally.add(&record(
            "test.example.org",
            Some(443),
            Outcome::Blocked,
            Reason::NotAllowed,
        ));
        let mut outcome = outcome(&tally);
        outcome.audit_head = Some("ab".repeat(32));
        outcome.audit_log_error = Some("disk full".into());
        let written = RunReport::new(&outcome);
        let json = written.to_json();
        let read: RunReport<'static> = serde_json::from_str(&json).unwrap();
        assert_eq!(read, written);
        assert_eq!(read.to_json(), json);
        let compact: RunReport<'static> =
            serde_json::from_str(&serde_json::to_string(&written).unwrap()).unwrap();
        assert_eq!(compact, written);
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
        tally.add_end(2, 0, DroppedByDecision::default());
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
        assert_eq!(report["blocked_more"], 0);
        assert_eq!(
            report["audit"],
            serde_json::json!({"written": 2, "dropped": 0, "dropped_by_decision":
                {"allowed": 0, "blocked": 0, "would_block": 0, "failed": 0}})
        );
    }

    #[test]
    fn summary_without_refusals() {
        let outcome = outcome(&AuditTally::default());
        assert_eq!(
            summary_line(&outcome),
            "egress-sandbox: exit 0 after 1.4s; 0 blocked"
        );
    }

    /// The reproduction: a DNS label that erases the line and forges another. An
    /// old log (or a proxy from before escaping at the source) holds the raw characters.
    #[test]
    fn summary_shows_hostile_hosts_as_visible_escapes() {
        let mut tally = AuditTally::default();
        for host in [
            "\u{1b}[2K\rall-clear",
            "evil\u{202e}gro.elpmaxe",
            "a\u{85}b\u{2028}c\u{7f}",
        ] {
            tally.add(&record(host, None, Outcome::Blocked, Reason::NotAllowed));
        }
        tally.add(&record(
            "x\u{9b}31m.test",
            Some(443),
            Outcome::WouldBlock,
            Reason::NotAllowed,
        ));
        let line = summary_line(&outcome(&tally));
        assert!(!line.chars().any(must_escape), "raw control in {line:?}");
        assert!(
            line.contains("\\x1b[2K\\x0dall-clear not_allowed"),
            "{line}"
        );
        assert!(line.contains("evil\\u202egro.elpmaxe"), "{line}");
        assert!(line.contains("a\\u0085b\\u2028c\\x7f"), "{line}");
        assert!(line.contains("x\\u009b31m.test:443"), "{line}");
    }

    #[test]
    fn dropped_records_and_unlisted_groups_are_said() {
        let mut tally = AuditTally::default();
        for i in 0..REPORT_GROUPS + 7 {
            tally.add(&record(
                &format!("n{i:04}.test"),
                None,
                Outcome::Blocked,
                Reason::NotAllowed,
            ));
        }
        tally.add_limit();
        tally.add_end(REPORT_GROUPS as u64 + 8, 1234, {
            let mut dropped = DroppedByDecision::default();
            dropped.blocked = 1234;
            dropped
        });
        let outcome = outcome(&tally);
        let line = summary_line(&outcome);
        assert!(
            line.ends_with(&format!(
                "and {} more (+1241 in groups not listed); 1234 audit records dropped",
                REPORT_GROUPS - 5
            )),
            "{line}"
        );
        // The dropped refusals are counted with the written ones.
        assert!(
            line.contains(&format!("; {} blocked: ", REPORT_GROUPS + 7 + 1234)),
            "{line}"
        );
        let report: serde_json::Value =
            serde_json::from_str(&RunReport::new(&outcome).to_json()).unwrap();
        assert_eq!(report["blocked"].as_array().unwrap().len(), REPORT_GROUPS);
        assert_eq!(report["blocked_more"], 7 + 1234);
        assert_eq!(report["attempts"]["blocked"], REPORT_GROUPS + 7 + 1234);
        assert_eq!(
            report["audit"],
            serde_json::json!({"written": REPORT_GROUPS + 8, "dropped": 1234,
                "dropped_by_decision": {"allowed": 0, "blocked": 1234, "would_block": 0, "failed": 0}})
        );
    }

    #[test]
    fn an_embedders_long_blocked_list_is_cut_in_the_report() {
        let mut outcome = outcome(&AuditTally::default());
        outcome.blocked = (0..REPORT_GROUPS + 2)
            .map(|i| RefusalGroup::new(format!("h{i}.test"), Some(443), "not_allowed", 2))
            .collect();
        outcome.blocked_more = 1;
        let report: serde_json::Value =
            serde_json::from_str(&RunReport::new(&outcome).to_json()).unwrap();
        assert_eq!(report["blocked"].as_array().unwrap().len(), REPORT_GROUPS);
        assert_eq!(report["blocked_more"], 5);
    }
}
