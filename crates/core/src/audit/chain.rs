//! The tamper-evident chain of one run's audit lines (`docs/src/reference/audit-record.md`).
//!
//! Every line the writer emits gains, after all its other fields, `"seq":N` (0, 1, 2, … per
//! run) and `"prev":"<hex sha256>"`: the SHA-256 of the previous line of the same run, exact
//! bytes without the newline; for `seq` 0, the SHA-256 of the run id (of "" without one). An
//! edited, removed, reordered or appended line breaks the chain at that line, and the `end`
//! record closes it so a cut-off tail shows too. Only the single writer thread seals lines,
//! so concurrent doors can never interleave within a chain.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{AUDIT_VERSION, AuditRecord, OnAuditLimit, Reason, reserve_for, timestamp};

/// Hex SHA-256 of `bytes`: how `prev` and a report's `audit_head` name a line.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(64);
    push_hex(&mut hex, &Sha256::digest(bytes));
    hex
}

/// `bytes` in lower-case hex, appended to `out`: the audit writer hashes every line, and
/// `{:02x}` per byte took the formatting machinery 32 times a line.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for &byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
}

/// The `prev` of a run's first line: the hash of its run id (of "" without one).
pub fn genesis(run: Option<&str>) -> String {
    sha256_hex(run.unwrap_or("").as_bytes())
}

/// The writer's position in one run's chain.
#[derive(Clone, Debug)]
pub struct Chain {
    seq: u64,
    prev: String,
}

impl Chain {
    /// A chain at its start, for the lines of `run` (of no run when `None`).
    pub fn new(run: Option<&str>) -> Chain {
        Chain {
            seq: 0,
            prev: genesis(run),
        }
    }

    /// Lines sealed so far: the next line's `seq`.
    pub fn len(&self) -> u64 {
        self.seq
    }

    /// Whether no line is sealed yet.
    pub fn is_empty(&self) -> bool {
        self.seq == 0
    }

    /// Appends `"seq"` and `"prev"` to one serialised JSON object (which must end in `}`)
    /// and advances the chain past it.
    pub fn seal(&mut self, mut line: String) -> String {
        debug_assert!(line.ends_with('}'), "{line}");
        line.pop();
        if !line.ends_with('{') {
            line.push(',');
        }
        use std::fmt::Write;
        // Written in place: no second string for the tail.
        let _ = write!(line, "\"seq\":{},\"prev\":\"{}\"}}", self.seq, self.prev);
        self.seq += 1;
        self.prev.clear();
        push_hex(&mut self.prev, &Sha256::digest(line.as_bytes()));
        line
    }
}

/// `kind` of the record written once when the audit limit is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LimitKind {
    /// `limit`.
    Limit,
}

/// `kind` of the record that closes a run's chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EndKind {
    /// `end`.
    End,
}

/// Written once, when the first attempt past `--audit-limit` arrives: after it refusals are
/// counted (the end record's `dropped`), not written, and only attempts that held their
/// place before they acted (egress, from the reserve) are written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LimitRecord {
    /// The schema version.
    pub v: u32,
    /// RFC 3339 UTC with milliseconds, as an attempt record's `ts`.
    pub ts: String,
    /// The run id, or null without one.
    pub run: Option<String>,
    /// The run's policy name, or null without one.
    pub policy: Option<String>,
    /// Always `limit`.
    pub kind: LimitKind,
    /// Always `audit_limit`.
    pub reason: String,
    /// The run's `--audit-limit`.
    pub limit: u64,
    /// What new egress gets past the limit (`--on-audit-limit`): `reserve` or `refuse`.
    /// Absent in logs of proxies before the option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_audit_limit: Option<String>,
    /// Records egress may still take past the limit: `limit` under `reserve`, 0 under
    /// `refuse`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<u64>,
    /// The line's place in its run's chain, added by [`Chain::seal`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Hex SHA-256 of the run's previous line, added by [`Chain::seal`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<String>,
}

/// The last line of a run, written at proxy shutdown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EndRecord {
    /// The schema version.
    pub v: u32,
    /// RFC 3339 UTC with milliseconds, as an attempt record's `ts`.
    pub ts: String,
    /// The run id, or null without one.
    pub run: Option<String>,
    /// The run's policy name, or null without one.
    pub policy: Option<String>,
    /// Always `end`.
    pub kind: EndKind,
    /// Lines of this run before this one (attempts and the limit record).
    pub records: u64,
    /// Attempts counted but not written: past the audit limit, DNS queries over the rate.
    pub dropped: u64,
    /// `dropped` by decision. Absent in logs of proxies before the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_by_decision: Option<DroppedByDecision>,
    /// The line's place in its run's chain, added by [`Chain::seal`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Hex SHA-256 of the run's previous line, added by [`Chain::seal`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<String>,
}

impl LimitRecord {
    /// The record of `run` (under `policy`) reaching its audit limit of `limit` records,
    /// stamped now, with what new egress gets past it (`on_limit`) and the reserve that
    /// leaves. The chain adds `seq` and `prev` as it seals the line.
    pub fn new(
        run: Option<String>,
        policy: Option<String>,
        limit: u64,
        on_limit: OnAuditLimit,
    ) -> Self {
        LimitRecord {
            v: AUDIT_VERSION,
            ts: timestamp(std::time::SystemTime::now()),
            run,
            policy,
            kind: LimitKind::Limit,
            reason: Reason::AuditLimit.as_str().to_owned(),
            limit,
            on_audit_limit: Some(on_limit.as_str().to_owned()),
            reserve: Some(reserve_for(limit, on_limit)),
            seq: None,
            prev: None,
        }
    }
}

impl EndRecord {
    /// The record closing `run` (under `policy`), stamped now: `records` lines written
    /// before it, and the attempts only counted, by decision. The chain adds `seq` and
    /// `prev` as it seals the line.
    pub fn new(
        run: Option<String>,
        policy: Option<String>,
        records: u64,
        dropped: DroppedByDecision,
    ) -> Self {
        EndRecord {
            v: AUDIT_VERSION,
            ts: timestamp(std::time::SystemTime::now()),
            run,
            policy,
            kind: EndKind::End,
            records,
            dropped: dropped.total(),
            dropped_by_decision: Some(dropped),
            seq: None,
            prev: None,
        }
    }
}

/// Attempts counted but not written, by the decision they got. Only refusals are ever
/// dropped (an attempt that reaches anything holds its record's place first), so
/// `allowed`, `would_block` and `failed` stay 0; they are written all the same, so that a
/// reader adds the four to the written attempts of each decision and needs no rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct DroppedByDecision {
    /// Allowed attempts not written (always 0: see above).
    pub allowed: u64,
    /// Refused attempts not written: past the audit budget.
    pub blocked: u64,
    /// Report-mode attempts not written (always 0).
    pub would_block: u64,
    /// Failed attempts not written (always 0).
    pub failed: u64,
}

impl DroppedByDecision {
    /// Counts one attempt of `decision`.
    pub fn add(&mut self, decision: super::Outcome) {
        use super::Outcome;
        match decision {
            Outcome::Allowed => self.allowed += 1,
            Outcome::Blocked => self.blocked += 1,
            Outcome::WouldBlock => self.would_block += 1,
            Outcome::Failed => self.failed += 1,
        }
    }

    /// Every attempt counted, whatever its decision.
    pub fn total(&self) -> u64 {
        self.allowed + self.blocked + self.would_block + self.failed
    }
}

/// One line of an audit log, whichever kind it is. Readers that only want attempts take
/// [`AuditLine::Attempt`] and skip the rest; unknown extra fields are accepted everywhere.
/// `R` is the attempts' reason type, as for [`AuditRecord`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditLine<R = Reason> {
    /// An attempt's record.
    Attempt(Box<AuditRecord<R>>),
    /// The record written when the run reaches its audit limit.
    Limit(LimitRecord),
    /// The record that closes the run's chain.
    End(EndRecord),
}

impl AuditLine {
    /// Parses one line (without its newline) as this version writes it: a reason it does
    /// not know is an error. Logs of any version are read with [`read_log`](super::read_log).
    pub fn parse(line: &[u8]) -> Result<AuditLine, serde_json::Error> {
        #[derive(Deserialize)]
        struct Probe {
            #[serde(default)]
            kind: Option<String>,
        }
        let probe: Probe = serde_json::from_slice(line)?;
        AuditLine::parse_kind(probe.kind.as_deref(), line)
    }
}

impl<R: DeserializeOwned> AuditLine<R> {
    /// Parses one line whose `kind` field is already known to say `kind`: `limit`, `end`,
    /// or else an attempt's record.
    pub(super) fn parse_kind(
        kind: Option<&str>,
        line: &[u8],
    ) -> Result<AuditLine<R>, serde_json::Error> {
        Ok(match kind {
            Some("limit") => AuditLine::Limit(serde_json::from_slice(line)?),
            Some("end") => AuditLine::End(serde_json::from_slice(line)?),
            _ => AuditLine::Attempt(Box::new(serde_json::from_slice(line)?)),
        })
    }
}

impl<R> AuditLine<R> {
    /// The run the line belongs to (`None` for a proxy started without a run id).
    pub fn run(&self) -> Option<&str> {
        match self {
            AuditLine::Attempt(record) => record.run.as_deref(),
            AuditLine::Limit(limit) => limit.run.as_deref(),
            AuditLine::End(end) => end.run.as_deref(),
        }
    }

    /// When the line was written, as its `ts` says.
    pub fn ts(&self) -> &str {
        match self {
            AuditLine::Attempt(record) => &record.ts,
            AuditLine::Limit(limit) => &limit.ts,
            AuditLine::End(end) => &end.ts,
        }
    }

    /// The line's place in its run's chain, when it was read back from a log.
    pub fn seq(&self) -> Option<u64> {
        match self {
            AuditLine::Attempt(record) => record.seq,
            AuditLine::Limit(limit) => limit.seq,
            AuditLine::End(end) => end.seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealing_appends_seq_and_prev_and_links_lines() {
        let mut chain = Chain::new(Some("r-1"));
        let first = chain.seal(r#"{"v":1,"kind":"dns"}"#.to_owned());
        assert_eq!(
            first,
            format!(
                r#"{{"v":1,"kind":"dns","seq":0,"prev":"{}"}}"#,
                sha256_hex(b"r-1")
            )
        );
        let second = chain.seal(r#"{"v":1}"#.to_owned());
        assert!(
            second.ends_with(&format!(
                r#""seq":1,"prev":"{}"}}"#,
                sha256_hex(first.as_bytes())
            )),
            "{second}"
        );
        assert_eq!(chain.len(), 2);
    }

    #[test]
    fn the_genesis_without_a_run_id_is_the_hash_of_nothing() {
        assert_eq!(
            genesis(None),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn lines_parse_by_kind() {
        let end = r#"{"v":1,"ts":"t","run":"r","policy":"p","kind":"end","records":3,"dropped":1,"seq":3,"prev":"x"}"#;
        assert!(matches!(
            AuditLine::parse(end.as_bytes()).unwrap(),
            AuditLine::End(EndRecord {
                records: 3,
                dropped: 1,
                seq: Some(3),
                ..
            })
        ));
        let limit = r#"{"v":1,"ts":"t","run":"r","policy":"p","kind":"limit","reason":"audit_limit","limit":2,"seq":2,"prev":"x"}"#;
        assert!(matches!(
            AuditLine::parse(limit.as_bytes()).unwrap(),
            AuditLine::Limit(LimitRecord { limit: 2, .. })
        ));
        let attempt = r#"{"v":1,"ts":"t","run":"r","policy":"p","kind":"dns","client":null,"host":"a.test","port":null,"decision":"blocked","reason":"not_allowed","rule":null,"addr":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"seq":0,"prev":"x","method":"GET"}"#;
        assert!(matches!(
            AuditLine::parse(attempt.as_bytes()).unwrap(),
            AuditLine::Attempt(_)
        ));
        assert!(AuditLine::parse(b"{\"kind\":\"end\"}").is_err());
        assert!(AuditLine::parse(b"not json").is_err());
    }
}
