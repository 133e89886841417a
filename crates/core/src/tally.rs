//! The tally of a run's audit records: attempts by decision, refusals grouped by host, port
//! and reason, and how many records the proxy wrote and dropped. The run outcome, the run
//! report, the summary line and `audit summary` all read it.
//!
//! The sandbox decides what goes into it, so its memory is bounded whatever the sandbox
//! sends: at most [`TALLY_GROUPS`] groups are held, each host at most
//! [`MAX_HOST_BYTES`]. When a new group arrives and the tally is full, the half with the
//! fewest attempts is set aside: their attempts still count, in
//! [`Refusals::more`], but no longer under a name. Groups that recur survive a flood of
//! unique names; a flood can only push out groups seen as rarely as its own.

use std::collections::HashMap;

use crate::audit::{AuditRecord, DroppedByDecision, Outcome};
use serde::{Deserialize, Serialize};

/// How many refusal groups a report lists at most; the rest is counted in `blocked_more`.
pub const REPORT_GROUPS: usize = 1000;
/// How many refusal groups the tally holds: twice what is listed, so that every listed
/// group's count is exact unless more than this many distinct groups were seen.
pub const TALLY_GROUPS: usize = 2 * REPORT_GROUPS;
/// A group's host is cut to this many bytes (the audit record's own bound for raw hosts;
/// valid names are at most 253), so an old or forged log cannot make one key huge.
pub const MAX_HOST_BYTES: usize = crate::audit::MAX_RAW_HOST_BYTES;

/// Attempts by decision: those written and, once the proxy's `end` record came, those it
/// only counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttemptCounts {
    /// Attempts let through.
    pub allowed: u64,
    /// Attempts refused.
    pub blocked: u64,
    /// Attempts let through in report mode that enforce mode would refuse.
    pub would_block: u64,
    /// Attempts allowed whose upstream could not be resolved or reached.
    pub failed: u64,
}

impl AttemptCounts {
    /// Every attempt counted.
    pub fn total(&self) -> u64 {
        self.allowed + self.blocked + self.would_block + self.failed
    }

    /// Blocked and would-block attempts: what the refusal groups count.
    pub fn refused(&self) -> u64 {
        self.blocked + self.would_block
    }
}

/// Refused attempts of one host, port and reason (kinds merged; port `None` for DNS).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RefusalGroup {
    /// As the audit record carries it (escaped at the source by the proxy); shown to a
    /// person only through [`describe`](Self::describe) or `text::visible`.
    pub host: String,
    /// The port refused; `None` for a DNS query.
    pub port: Option<u16>,
    /// The record's reason as written (`not_allowed`, …). Text, not
    /// [`Reason`](crate::policy::Reason): a log written by a newer proxy may hold a
    /// reason this version does not know, and its refusals still count. Shown to a person
    /// only through `describe` or `text::visible`, as the host is.
    pub reason: String,
    /// How many refusals the group holds.
    pub count: u64,
}

impl RefusalGroup {
    /// `count` refusals of `host` (on `port`; `None` for DNS) for `reason`, as written.
    pub fn new(
        host: impl Into<String>,
        port: Option<u16>,
        reason: impl Into<String>,
        count: u64,
    ) -> Self {
        RefusalGroup {
            host: host.into(),
            port,
            reason: reason.into(),
            count,
        }
    }

    /// `host:port reason` (IPv6 hosts in brackets), `host reason` for DNS; control, bidi
    /// and separator characters in the host shown as visible escapes (`\x1b`), since the
    /// host comes from the sandbox.
    pub fn describe(&self) -> String {
        let shown = crate::text::visible(&self.host);
        let host = if shown.contains(':') && !shown.starts_with('[') {
            format!("[{shown}]")
        } else {
            shown.into_owned()
        };
        let reason = crate::text::visible(&self.reason);
        let mut text = match self.port {
            Some(port) => format!("{host}:{port} {reason}"),
            None => format!("{host} {reason}"),
        };
        if self.count > 1 {
            text.push_str(&format!(" x{}", self.count));
        }
        text
    }
}

/// The refusal groups to list, most attempts first, and what is not listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// At most [`REPORT_GROUPS`], sorted by count (most first), then host, port, reason.
    pub groups: Vec<RefusalGroup>,
    /// Refused attempts (blocked and would_block) counted in no listed group: those of
    /// groups beyond the first [`REPORT_GROUPS`], of groups the tally set aside, and those
    /// the proxy only counted (no record says their host). `sum(groups.count) + more` is
    /// every refused attempt.
    pub more: u64,
}

/// How many records the proxy wrote for the run, and how many attempts it only counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditCounts {
    /// Lines written for the run before its `end` record (attempts and the `limit` record).
    pub written: u64,
    /// Attempts counted but not written: past `--audit-limit`, DNS over the rate limit.
    pub dropped: u64,
    /// `dropped` by decision, as the proxy's `end` record says (all 0 when it does not:
    /// the proxy never wrote it, or a log from before the field).
    pub dropped_by_decision: DroppedByDecision,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct GroupKey {
    host: String,
    port: Option<u16>,
    reason: String,
}

/// Counts audit records; bounded in memory (module docs).
#[derive(Clone, Debug, Default)]
pub struct AuditTally {
    /// Attempts counted by decision.
    pub attempts: AttemptCounts,
    groups: HashMap<GroupKey, u64>,
    /// Refused attempts of groups set aside when the tally was full.
    set_aside: u64,
    /// Lines of the run seen: attempt records and the `limit` record.
    lines: u64,
    /// What the proxy's `end` record said, when it came.
    end: Option<AuditCounts>,
}

impl AuditTally {
    /// Counts one attempt record.
    pub fn add(&mut self, record: &AuditRecord) {
        self.add_attempt(
            record.decision,
            &record.host,
            record.port,
            record.reason.as_str(),
        );
    }

    /// Counts one attempt read back from a log, whose reason may be one this version does
    /// not know (written by a newer proxy): it is grouped under its text.
    pub fn add_attempt(&mut self, decision: Outcome, host: &str, port: Option<u16>, reason: &str) {
        self.lines += 1;
        match decision {
            Outcome::Allowed => self.attempts.allowed += 1,
            Outcome::Failed => self.attempts.failed += 1,
            Outcome::Blocked => self.attempts.blocked += 1,
            Outcome::WouldBlock => self.attempts.would_block += 1,
        }
        if matches!(decision, Outcome::Blocked | Outcome::WouldBlock) {
            self.add_refusal(host, port, reason);
        }
    }

    /// Counts one attempt in the group `host`, `port`, `label` only (no decision counted,
    /// no line): for listings grouped otherwise than refusals, such as `audit summary`'s
    /// allowed hosts, with the same bound on memory.
    pub fn add_to_group(&mut self, host: &str, port: Option<u16>, label: &str) {
        self.add_refusal(host, port, label);
    }

    /// Counts the proxy's `limit` record: a line written, not an attempt.
    pub fn add_limit(&mut self) {
        self.lines += 1;
    }

    /// The proxy's `end` record: `records` lines written before it, `dropped` attempts
    /// counted but not written, `by_decision` the same by decision. It is the authority on
    /// all three, and the dropped attempts join [`attempts`](Self::attempts).
    pub fn add_end(&mut self, records: u64, dropped: u64, by_decision: DroppedByDecision) {
        if self.end.is_some() {
            return;
        }
        self.add_dropped(by_decision);
        self.end = Some(AuditCounts {
            written: records,
            dropped,
            dropped_by_decision: by_decision,
        });
    }

    /// Counts attempts a proxy counted but did not write, by decision (an `end` record's
    /// `dropped_by_decision`), with the written ones.
    pub fn add_dropped(&mut self, by_decision: DroppedByDecision) {
        self.attempts.allowed += by_decision.allowed;
        self.attempts.blocked += by_decision.blocked;
        self.attempts.would_block += by_decision.would_block;
        self.attempts.failed += by_decision.failed;
    }

    /// From the `end` record; without one (the proxy died first), the lines seen here and
    /// nothing known dropped.
    pub fn audit(&self) -> AuditCounts {
        self.end.unwrap_or(AuditCounts {
            written: self.lines,
            dropped: 0,
            dropped_by_decision: DroppedByDecision::default(),
        })
    }

    /// Whether the proxy's `end` record was seen.
    pub fn ended(&self) -> bool {
        self.end.is_some()
    }

    fn add_refusal(&mut self, host: &str, port: Option<u16>, reason: &str) {
        let key = GroupKey {
            host: cut(host, MAX_HOST_BYTES).to_owned(),
            port,
            // Cut as hosts are: a forged log cannot make one key huge with a reason either.
            reason: cut(reason, MAX_HOST_BYTES).to_owned(),
        };
        if let Some(count) = self.groups.get_mut(&key) {
            *count += 1;
            return;
        }
        if self.groups.len() >= TALLY_GROUPS {
            self.set_aside_the_rarer_half();
        }
        self.groups.insert(key, 1);
    }

    /// Sets aside the `TALLY_GROUPS / 2` groups with the fewest attempts (ties: the
    /// greatest key, so the choice does not depend on hash order).
    fn set_aside_the_rarer_half(&mut self) {
        let mut entries: Vec<(GroupKey, u64)> = self.groups.drain().collect();
        let keep = TALLY_GROUPS / 2;
        entries.select_nth_unstable_by(keep, most_first);
        for (_, count) in entries.drain(keep..) {
            self.set_aside += count;
        }
        self.groups.extend(entries);
    }

    /// The groups to list (at most [`REPORT_GROUPS`]) and the attempts not listed.
    pub fn refusals(&self) -> Refusals {
        self.refusals_at_most(REPORT_GROUPS)
    }

    /// As [`refusals`](Self::refusals), listing at most `limit` groups.
    pub fn refusals_at_most(&self, limit: usize) -> Refusals {
        let mut entries: Vec<(&GroupKey, u64)> = self
            .groups
            .iter()
            .map(|(key, count)| (key, *count))
            .collect();
        entries.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let unlisted: u64 = entries.iter().skip(limit).map(|(_, count)| count).sum();
        let groups = entries
            .into_iter()
            .take(limit)
            .map(|(key, count)| RefusalGroup {
                host: key.host.clone(),
                port: key.port,
                reason: key.reason.clone(),
                count,
            })
            .collect();
        let dropped = self.audit().dropped_by_decision;
        Refusals {
            groups,
            more: self.set_aside + unlisted + dropped.blocked + dropped.would_block,
        }
    }
}

fn most_first(a: &(GroupKey, u64), b: &(GroupKey, u64)) -> std::cmp::Ordering {
    b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0))
}

/// `text` cut to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::audit::Kind;
    use crate::policy::Reason;

    pub(crate) fn record(
        host: &str,
        port: Option<u16>,
        decision: Outcome,
        reason: Reason,
    ) -> AuditRecord {
        let kind = if port.is_some() {
            Kind::Connect
        } else {
            Kind::Dns
        };
        let mut record = AuditRecord::new(kind, host, decision, reason);
        record.ts = "2026-11-29T18:40:43.123Z".into();
        record.run = Some("r-00000001".into());
        record.policy = Some("p".into());
        record.port = port;
        record
    }

    fn blocked_dns(host: &str) -> AuditRecord {
        record(host, None, Outcome::Blocked, Reason::NotAllowed)
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
        tally.add(&blocked_dns("test.example.org"));
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
        let refusals = tally.refusals();
        assert_eq!(refusals.more, 0);
        let groups = refusals.groups;
        assert_eq!(groups[0].describe(), "test.example.org:443 not_allowed x2");
        assert_eq!(groups[1].describe(), "169.254.169.254:80 private_address");
        assert_eq!(groups[2].describe(), "test.example.org not_allowed");
    }

    #[test]
    fn describe_shows_controls_in_hosts_as_visible_escapes() {
        let group = RefusalGroup {
            host: "\u{1b}[2K\rall-clear\u{202e}.test".into(),
            port: None,
            reason: "not_allowed".into(),
            count: 1,
        };
        let shown = group.describe();
        assert_eq!(shown, "\\x1b[2K\\x0dall-clear\\u202e.test not_allowed");
        assert!(!shown.chars().any(crate::text::must_escape));
    }

    #[test]
    fn the_report_lists_at_most_report_groups_and_counts_the_rest() {
        let mut tally = AuditTally::default();
        for i in 0..REPORT_GROUPS + 10 {
            tally.add(&blocked_dns(&format!("n{i}.test")));
        }
        // One group that recurs is listed first.
        for _ in 0..3 {
            tally.add(&blocked_dns("again.test"));
        }
        let refusals = tally.refusals();
        assert_eq!(refusals.groups.len(), REPORT_GROUPS);
        assert_eq!(refusals.groups[0].host, "again.test");
        assert_eq!(refusals.groups[0].count, 3);
        let listed: u64 = refusals.groups.iter().map(|g| g.count).sum();
        // 1,011 groups: the 11 with the fewest attempts (then the greatest hosts) are not listed.
        assert_eq!(refusals.more, 11);
        assert_eq!(listed + refusals.more, tally.attempts.refused());
    }

    #[test]
    fn a_million_unique_names_keep_the_tally_bounded_and_the_sums_exact() {
        let mut tally = AuditTally::default();
        for round in 0..1_000_000u32 {
            tally.add(&blocked_dns(&format!("x{round:07}.flood.test")));
            if round % 1000 == 0 {
                // A group that recurs throughout the flood survives it.
                tally.add(&record(
                    "169.254.169.254",
                    Some(80),
                    Outcome::Blocked,
                    Reason::PrivateAddress,
                ));
            }
            assert!(tally.groups.len() <= TALLY_GROUPS);
        }
        assert_eq!(tally.attempts.blocked, 1_001_000);
        let refusals = tally.refusals();
        assert!(refusals.groups.len() <= REPORT_GROUPS);
        assert_eq!(refusals.groups[0].host, "169.254.169.254");
        assert_eq!(refusals.groups[0].count, 1000);
        let listed: u64 = refusals.groups.iter().map(|g| g.count).sum();
        assert_eq!(listed + refusals.more, 1_001_000);
        let held: usize = tally.groups.keys().map(|key| key.host.len()).sum();
        assert!(held <= TALLY_GROUPS * MAX_HOST_BYTES);
    }

    #[test]
    fn huge_hosts_are_cut_before_they_are_held() {
        let mut tally = AuditTally::default();
        let huge = "é".repeat(100_000);
        tally.add(&blocked_dns(&huge));
        tally.add(&blocked_dns(&format!("{huge}x")));
        let groups = tally.refusals().groups;
        assert_eq!(groups.len(), 1, "both cut to the same prefix");
        assert!(groups[0].host.len() <= MAX_HOST_BYTES);
        assert_eq!(groups[0].count, 2);
    }

    #[test]
    fn audit_counts_come_from_the_end_record_or_what_was_seen() {
        let mut tally = AuditTally::default();
        tally.add(&blocked_dns("a.test"));
        tally.add_limit();
        assert_eq!(
            tally.audit(),
            AuditCounts {
                written: 2,
                dropped: 0,
                dropped_by_decision: DroppedByDecision::default(),
            }
        );
        assert!(!tally.ended());
        let by_decision = DroppedByDecision {
            blocked: 40,
            would_block: 1,
            ..DroppedByDecision::default()
        };
        tally.add_end(2, 41, by_decision);
        assert_eq!(
            tally.audit(),
            AuditCounts {
                written: 2,
                dropped: 41,
                dropped_by_decision: by_decision,
            }
        );
        // The dropped attempts count with the written one, and as refusals in no group.
        assert_eq!(
            (tally.attempts.blocked, tally.attempts.would_block),
            (41, 1)
        );
        assert_eq!(tally.refusals().more, 41);
    }

    #[test]
    fn a_reason_this_version_does_not_know_is_grouped_under_its_text() {
        let mut tally = AuditTally::default();
        for _ in 0..2 {
            tally.add_attempt(Outcome::Blocked, "a.test", Some(443), "future\u{1b}[2J");
        }
        let groups = tally.refusals().groups;
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].reason, "future\u{1b}[2J");
        assert_eq!(groups[0].describe(), "a.test:443 future\\x1b[2J x2");
    }
}
