//! Audit logs summarised (`egress-sandbox audit summary`): refused attempts grouped by
//! decision (`blocked`: refused; `would_block`: let through by report mode), host, port and
//! reason, then the allowed hosts with how many attempts each.
//!
//! Logs are read line by line into the bounded [`AuditTally`], so a log of any size is
//! summarised in bounded memory. Hosts come from sandboxes and a log may be old (from
//! before the proxy escaped them at the source) or forged: everything rendered goes through
//! `text::visible`.
//!
//! Lines are read as every other log reader reads them (core's
//! [`read_log`](egress_core::audit::read_log)): a newer proxy
//! may add fields and reasons, and an auditor with an older tool must still get a summary.
//! Refusals with a reason this version does not know are grouped under the reason as
//! written, and how many records had one is said once
//! ([`AuditSummary::unknown_reasons_warning`]).

use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

use egress_core::audit::{AuditLine, DroppedByDecision, EndRecord, Outcome, read_log};
use egress_core::tally::{AuditTally, REPORT_GROUPS};
use egress_core::text::visible;

use crate::log::LoggedAttempt;

/// What the logs read so far amount to: feed it every log ([`read`](Self::read)), then
/// [`render`](Self::render) the table.
#[derive(Default)]
pub struct AuditSummary {
    /// Every attempt: the totals.
    tally: AuditTally,
    /// Groups of `blocked` attempts.
    blocked: AuditTally,
    /// Groups of `would_block` attempts (report mode let them through).
    would_block: AuditTally,
    /// Allowed attempts by host and port (the reason column is unused).
    allowed: AuditTally,
    /// Attempts the proxies counted but did not write, from every `end` record.
    dropped: u64,
    /// `dropped` by decision, from the `end` records that say it.
    dropped_by_decision: DroppedByDecision,
    /// `limit` records: runs that reached their audit limit.
    limits: u64,
    /// Attempt records whose reason this version does not know (from a newer proxy).
    unknown_reasons: u64,
}

impl AuditSummary {
    /// Reads one log at `path` (the name warnings give); lines that are not records are
    /// reported through `warn` and skipped. An error is the reader's.
    pub fn read(
        &mut self,
        path: &Path,
        reader: impl BufRead,
        warn: &mut dyn FnMut(String),
    ) -> std::io::Result<()> {
        let shown = path.display().to_string();
        let shown = visible(&shown);
        for line in read_log(reader) {
            let line = line?;
            // The proxy's own lines besides attempts (docs/src/reference/audit-record.md): `limit`
            // once the audit limit is reached, `end` last with what was dropped.
            match line.record {
                Ok(AuditLine::Attempt(attempt)) => self.add(&attempt),
                Ok(AuditLine::End(end)) => self.add_end(&end),
                Ok(AuditLine::Limit(_)) => {
                    self.limits += 1;
                    self.tally.add_limit();
                }
                // A kind of line the reader yields only once this version counts it.
                Ok(_) => {}
                // The reason may quote the line's own (hostile) text.
                Err(why) => warn(format!(
                    "{shown}:{}: {}; skipped",
                    line.number,
                    visible(&why.to_string())
                )),
            }
        }
        Ok(())
    }

    /// A run's `end`: what it dropped joins the totals, by decision where it says so.
    fn add_end(&mut self, end: &EndRecord) {
        self.dropped += end.dropped;
        if let Some(by_decision) = end.dropped_by_decision {
            self.tally.add_dropped(by_decision);
            let sum = &mut self.dropped_by_decision;
            sum.allowed += by_decision.allowed;
            sum.blocked += by_decision.blocked;
            sum.would_block += by_decision.would_block;
            sum.failed += by_decision.failed;
        }
    }

    fn add(&mut self, attempt: &LoggedAttempt) {
        if attempt.reason.known().is_none() {
            self.unknown_reasons += 1;
        }
        let reason = attempt.reason.as_str();
        self.tally
            .add_attempt(attempt.decision, &attempt.host, attempt.port, reason);
        let by_decision = match attempt.decision {
            Outcome::Blocked => &mut self.blocked,
            Outcome::WouldBlock => &mut self.would_block,
            Outcome::Allowed => &mut self.allowed,
            // Failures, and outcomes this version does not know, list no host.
            _ => return,
        };
        by_decision.add_to_group(&attempt.host, attempt.port, reason);
    }

    /// Said once, after every file: the counts are right, but some refusals are grouped
    /// under reasons this version cannot explain.
    pub fn unknown_reasons_warning(&self) -> Option<String> {
        (self.unknown_reasons > 0).then(|| {
            format!(
                "{} records had reasons this version does not know; they are counted under the reason as written",
                self.unknown_reasons
            )
        })
    }

    /// The summary as `audit summary` prints it: totals, the refused attempts' table, the
    /// allowed hosts.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let attempts = self.tally.attempts;
        let _ = writeln!(
            out,
            "{} attempts: {} allowed, {} blocked, {} would_block, {} failed",
            attempts.total(),
            attempts.allowed,
            attempts.blocked,
            attempts.would_block,
            attempts.failed
        );
        if self.dropped > 0 || self.limits > 0 {
            let by = self.dropped_by_decision;
            let _ = writeln!(
                out,
                "{} attempts dropped, not written ({} allowed, {} blocked, {} would_block, {} failed; {} runs reached their audit limit)",
                self.dropped, by.allowed, by.blocked, by.would_block, by.failed, self.limits
            );
        }
        let blocked = self.blocked.refusals_at_most(REPORT_GROUPS);
        let would_block = self.would_block.refusals_at_most(REPORT_GROUPS);
        if blocked.groups.is_empty() && would_block.groups.is_empty() {
            if blocked.more == 0 && would_block.more == 0 {
                out.push_str("no refused attempts\n");
            }
        } else {
            let mut rows: Vec<[String; 5]> = Vec::new();
            for (decision, refusals) in [("blocked", &blocked), ("would_block", &would_block)] {
                rows.extend(refusals.groups.iter().map(|group| {
                    [
                        group.count.to_string(),
                        decision.to_owned(),
                        visible(&group.host).into_owned(),
                        port_text(group.port),
                        visible(&group.reason).into_owned(),
                    ]
                }));
            }
            // Most attempts first across both decisions; ties keep blocked before would_block.
            rows.sort_by_key(|row| std::cmp::Reverse(row[0].parse::<u64>().unwrap_or(0)));
            let host_width = column_width(rows.iter().map(|row| &row[2]));
            let _ = writeln!(
                out,
                "{:>6}  {:<11}  {:<host_width$}  {:>5}  REASON",
                "COUNT", "DECISION", "HOST", "PORT"
            );
            for [count, decision, host, port, reason] in &rows {
                let _ = writeln!(
                    out,
                    "{count:>6}  {decision:<11}  {host:<host_width$}  {port:>5}  {reason}"
                );
            }
        }
        let unlisted = blocked.more + would_block.more;
        if unlisted > 0 {
            let _ = writeln!(
                out,
                "{unlisted:>6}  (refused attempts in groups not listed)"
            );
        }
        let allowed = self.allowed.refusals_at_most(REPORT_GROUPS);
        if !allowed.groups.is_empty() {
            let rows: Vec<(u64, String, String)> = allowed
                .groups
                .iter()
                .map(|group| {
                    (
                        group.count,
                        visible(&group.host).into_owned(),
                        port_text(group.port),
                    )
                })
                .collect();
            let host_width = column_width(rows.iter().map(|(_, host, _)| host));
            let _ = writeln!(out, "\nallowed hosts:");
            let _ = writeln!(
                out,
                "{:>6}  {:<host_width$}  {:>5}",
                "COUNT", "HOST", "PORT"
            );
            for (count, host, port) in &rows {
                let _ = writeln!(out, "{count:>6}  {host:<host_width$}  {port:>5}");
            }
            if allowed.more > 0 {
                let _ = writeln!(
                    out,
                    "{:>6}  (allowed attempts to hosts not listed)",
                    allowed.more
                );
            }
        }
        out
    }
}

/// `-` for an attempt with no port (a DNS query).
fn port_text(port: Option<u16>) -> String {
    port.map_or_else(|| "-".to_string(), |port| port.to_string())
}

/// The width of a column holding `cells`, at least that of its heading (`HOST`).
fn column_width<'a>(cells: impl Iterator<Item = &'a String>) -> usize {
    cells
        .map(|cell| cell.chars().count())
        .max()
        .unwrap_or(4)
        .max(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_core::audit::RecordedReason;
    use egress_core::text::must_escape;

    fn is_known_reason(reason: &str) -> bool {
        RecordedReason::from(reason.to_owned()).known().is_some()
    }

    const RECORD: &str = r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"dns","client":"10.213.0.3:5","host":"HOST","port":null,"decision":"blocked","reason":"not_allowed","rule":null,"addr":null,"bytes_up":0,"bytes_down":0,"duration_ms":0}"#;

    fn summarise(log: &str) -> (String, Vec<String>) {
        let mut summary = AuditSummary::default();
        let mut warnings = Vec::new();
        summary
            .read(Path::new("audit.jsonl"), log.as_bytes(), &mut |w| {
                warnings.push(w)
            })
            .unwrap();
        warnings.extend(summary.unknown_reasons_warning());
        (summary.render(), warnings)
    }

    /// A log from before escaping at the source: JSON escapes that every reader undoes.
    #[test]
    fn raw_controls_in_an_old_log_are_printed_as_visible_escapes() {
        let log = [
            RECORD.replace("HOST", r"\u001b[2K\rall-clear"),
            RECORD.replace("HOST", "evil\u{202e}txt.test"),
            RECORD.replace("HOST", r"nel\u0085line\u2028sep"),
        ]
        .join("\n");
        let (text, warnings) = summarise(&log);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(
            !text.chars().any(|c| must_escape(c) && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains(r"\x1b[2K\x0dall-clear"), "{text}");
        assert!(text.contains(r"evil\u202etxt.test"), "{text}");
        assert!(text.contains(r"nel\u0085line\u2028sep"), "{text}");
    }

    #[test]
    fn a_hostile_line_that_is_no_record_is_warned_about_visibly() {
        let line = RECORD.replace(r#""decision":"blocked""#, r#""decision":"\u001b[2Kok""#);
        let (_, warnings) = summarise(&line);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with("audit.jsonl:1: not an audit record"));
        assert!(!warnings[0].chars().any(must_escape), "{:?}", warnings[0]);
    }

    #[test]
    fn limit_and_end_lines_are_counted_not_warned_about() {
        let log = [
            RECORD.replace("HOST", "a.test"),
            r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"limit","reason":"audit_limit","limit":1,"seq":1,"prev":"00"}"#.to_string(),
            r#"{"v":1,"ts":"2026-11-29T18:40:44.123Z","run":"r-1","policy":"p","kind":"end","records":2,"dropped":40,"dropped_by_decision":{"allowed":0,"blocked":40,"would_block":0,"failed":0},"seq":2,"prev":"00"}"#.to_string(),
        ]
        .join("\n");
        let (text, warnings) = summarise(&log);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(
            text.starts_with("41 attempts: 0 allowed, 41 blocked"),
            "{text}"
        );
        assert!(
            text.contains("40 attempts dropped, not written (0 allowed, 40 blocked, 0 would_block, 0 failed; 1 runs reached their audit limit)"),
            "{text}"
        );
    }

    #[test]
    fn records_with_extra_fields_are_read() {
        let line = RECORD.replace("HOST", "a.test").replace(
            r#""duration_ms":0"#,
            r#""duration_ms":0,"seq":0,"prev":"ab","method":"GET""#,
        );
        let (text, warnings) = summarise(&line);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(text.contains("a.test"), "{text}");
    }

    /// A newer proxy's reason: counted under its text (shown visibly), said once.
    #[test]
    fn reasons_this_version_does_not_know_are_counted_as_written_and_said_once() {
        let future =
            |host: &str, reason: &str| RECORD.replace("HOST", host).replace("not_allowed", reason);
        let log = [
            future("a.test", "future_reason"),
            future("a.test", "future_reason"),
            future("b.test", r"odd\u001b[2Jreason"),
            RECORD.replace("HOST", "c.test"),
        ]
        .join("\n");
        let (text, warnings) = summarise(&log);
        assert!(
            text.starts_with("4 attempts: 0 allowed, 4 blocked"),
            "{text}"
        );
        assert!(text.contains("a.test      -  future_reason\n"), "{text}");
        assert!(text.contains(r"b.test      -  odd\x1b[2Jreason"), "{text}");
        assert!(text.contains("c.test      -  not_allowed\n"), "{text}");
        assert!(
            !text.chars().any(|c| must_escape(c) && c != '\n'),
            "{text:?}"
        );
        assert_eq!(
            warnings,
            [
                "3 records had reasons this version does not know; they are counted under the reason as written"
            ]
        );
    }

    /// Blocked and would_block rows are told apart, and allowed hosts are listed with counts.
    #[test]
    fn rows_say_their_decision_and_allowed_hosts_are_counted() {
        let with = |host: &str, decision: &str| {
            RECORD.replace("HOST", host).replace(
                r#""decision":"blocked""#,
                &format!(r#""decision":"{decision}""#),
            )
        };
        let log = [
            with("a.test", "blocked"),
            with("a.test", "would_block"),
            with("a.test", "would_block"),
            with("ok.test", "allowed"),
            with("ok.test", "allowed"),
            with("ok.test", "allowed"),
        ]
        .join("\n");
        let (text, warnings) = summarise(&log);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(text.contains("COUNT  DECISION     HOST"), "{text}");
        assert!(
            text.contains("     2  would_block  a.test      -  not_allowed\n"),
            "{text}"
        );
        assert!(
            text.contains("     1  blocked      a.test      -  not_allowed\n"),
            "{text}"
        );
        assert!(text.contains("allowed hosts:\n"), "{text}");
        assert!(text.contains("     3  ok.test      -\n"), "{text}");
    }

    #[test]
    fn every_reason_of_this_version_is_known() {
        for reason in ["rule", "not_allowed", "credential_misuse", "upstream_tls"] {
            assert!(is_known_reason(reason), "{reason}");
        }
        assert!(!is_known_reason("future_reason"));
        assert!(!is_known_reason("Rule"));
    }
}
