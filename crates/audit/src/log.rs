//! Audit log files read back for review: one [`Entry`] per line the proxy wrote.
//!
//! The reader is deliberately tolerant: records gain fields over time (`seq`, `prev`, and
//! `method`/`path`/`status` on inspected `http` records), so unknown fields are ignored and
//! a reason this build does not know is kept as text. Lines that are not audit records
//! (blank, truncated, another program's output) are reported as [`Skipped`] with their
//! file and line instead of failing the whole review. Checking that a log is complete and
//! untouched is `audit verify`'s job, not this module's.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use egress_core::audit::{DroppedByDecision, Kind, Outcome, epoch_millis};
use serde::Deserialize;

/// One attempt's record as read back from a log: a CONNECT tunnel, a plain HTTP request, a
/// DNS query or a transparent connection (`docs/src/reference/audit-record.md`). Not the proxy's
/// attempt in flight, which writes the line: this is the line parsed again.
#[derive(Clone, Debug, PartialEq)]
pub struct LoggedAttempt {
    pub ts: String,
    /// `ts` as milliseconds since the Unix epoch, when it parses.
    pub time_ms: Option<i64>,
    pub run: Option<String>,
    pub policy: Option<String>,
    pub kind: Kind,
    pub client: Option<String>,
    /// The sandbox's host name, when the run had one.
    pub sandbox_hostname: Option<String>,
    pub host: String,
    pub port: Option<u16>,
    pub decision: Outcome,
    /// The reason vocabulary as written (`not_allowed`, `rule`, …), kept as text so a newer
    /// proxy's reason still reads.
    pub reason: String,
    pub rule: Option<String>,
    pub addr: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
    pub seq: Option<u64>,
    /// `http` records of requests read in clear (plain or inspected) only.
    pub method: Option<String>,
    pub path: Option<String>,
    pub status: Option<u16>,
}

impl LoggedAttempt {
    /// Refused, or would have been refused under enforce (report mode).
    pub fn is_refusal(&self) -> bool {
        matches!(self.decision, Outcome::Blocked | Outcome::WouldBlock)
    }
}

/// `{"kind":"limit",…}`: the run reached its audit limit; later attempts were counted,
/// not written.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitReached {
    pub ts: String,
    pub time_ms: Option<i64>,
    pub run: Option<String>,
    pub policy: Option<String>,
    pub limit: u64,
    pub seq: Option<u64>,
}

/// `{"kind":"end",…}`: the last line of a run, written at proxy shutdown.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEnd {
    pub ts: String,
    pub time_ms: Option<i64>,
    pub run: Option<String>,
    pub policy: Option<String>,
    /// Lines of this run before the end line.
    pub records: u64,
    /// Attempts counted but not written (past the limit, DNS over the rate).
    pub dropped: u64,
    /// `dropped` by decision; `None` in logs from before the field.
    pub dropped_by_decision: Option<DroppedByDecision>,
    pub seq: Option<u64>,
}

/// Nearly every line of a log is an attempt, so boxing the large variant would cost an
/// allocation per line to shrink only the rare `limit` and `end` entries.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    Attempt(LoggedAttempt),
    Limit(LimitReached),
    End(RunEnd),
}

impl Entry {
    pub fn run(&self) -> Option<&str> {
        match self {
            Entry::Attempt(a) => a.run.as_deref(),
            Entry::Limit(l) => l.run.as_deref(),
            Entry::End(e) => e.run.as_deref(),
        }
    }
}

/// An entry and where it was read.
#[derive(Clone, Debug, PartialEq)]
pub struct Located {
    pub file: PathBuf,
    /// From 1.
    pub line: usize,
    pub entry: Entry,
}

/// A line that is not an audit record.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    pub file: PathBuf,
    pub line: usize,
    pub why: String,
}

/// `FILE:LINE: why`, ready for a terminal: the file name and the reason (which may quote
/// the line's own text) have their controls made visible.
impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let file = self.file.display().to_string();
        write!(
            f,
            "{}:{}: {}",
            egress_core::text::visible(&file),
            self.line,
            egress_core::text::visible(&self.why)
        )
    }
}

/// Everything read from a set of files, in file order then line order.
#[derive(Debug, Default)]
pub struct AuditLog {
    pub entries: Vec<Located>,
    pub skipped: Vec<Skipped>,
}

impl AuditLog {
    pub fn attempts(&self) -> impl Iterator<Item = &LoggedAttempt> {
        self.entries
            .iter()
            .filter_map(|located| match &located.entry {
                Entry::Attempt(attempt) => Some(attempt),
                _ => None,
            })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read {}", path.display())]
pub struct ReadError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// Reads every file whole. A file that cannot be opened or read is an error; a line that
/// is not a record is [`Skipped`].
pub fn read_files(paths: &[PathBuf]) -> Result<AuditLog, ReadError> {
    let mut log = AuditLog::default();
    for path in paths {
        let error = |source| ReadError {
            path: path.clone(),
            source,
        };
        let file = File::open(path).map_err(error)?;
        read_into(path, BufReader::new(file), &mut log).map_err(error)?;
    }
    Ok(log)
}

/// Reads one stream of lines (a file, or text in tests) into `log`.
///
/// Lines are split on bytes, not read as text: a line that is not UTF-8 (a corrupted or
/// forged log) is [`Skipped`] like any other line that is not a record, instead of making
/// the whole file unreadable — an auditor still sees every record around it.
pub fn read_into(path: &Path, reader: impl BufRead, log: &mut AuditLog) -> io::Result<()> {
    for (index, line) in reader.split(b'\n').enumerate() {
        let line = line?;
        let parsed = match std::str::from_utf8(&line) {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => parse_line(line),
            Err(_) => Err("not an audit record (not UTF-8)".to_owned()),
        };
        match parsed {
            Ok(entry) => log.entries.push(Located {
                file: path.to_owned(),
                line: index + 1,
                entry,
            }),
            Err(why) => log.skipped.push(Skipped {
                file: path.to_owned(),
                line: index + 1,
                why,
            }),
        }
    }
    Ok(())
}

/// Every field any kind of line may carry; which are required depends on `kind`.
#[derive(Deserialize)]
struct RawLine {
    ts: Option<String>,
    run: Option<String>,
    policy: Option<String>,
    kind: String,
    client: Option<String>,
    sandbox_hostname: Option<String>,
    host: Option<String>,
    port: Option<u16>,
    decision: Option<Outcome>,
    reason: Option<String>,
    rule: Option<String>,
    addr: Option<String>,
    #[serde(default)]
    bytes_up: u64,
    #[serde(default)]
    bytes_down: u64,
    #[serde(default)]
    duration_ms: u64,
    seq: Option<u64>,
    limit: Option<u64>,
    records: Option<u64>,
    dropped: Option<u64>,
    dropped_by_decision: Option<DroppedByDecision>,
    method: Option<String>,
    path: Option<String>,
    status: Option<u16>,
}

/// One line → one entry, or why it is not one.
pub fn parse_line(line: &str) -> Result<Entry, String> {
    let raw: RawLine =
        serde_json::from_str(line).map_err(|error| format!("not an audit record ({error})"))?;
    let ts = raw.ts.ok_or("no `ts`")?;
    let time_ms = epoch_millis(&ts);
    match raw.kind.as_str() {
        "limit" => Ok(Entry::Limit(LimitReached {
            ts,
            time_ms,
            run: raw.run,
            policy: raw.policy,
            limit: raw.limit.unwrap_or(0),
            seq: raw.seq,
        })),
        "end" => Ok(Entry::End(RunEnd {
            ts,
            time_ms,
            run: raw.run,
            policy: raw.policy,
            records: raw.records.ok_or("`end` line without `records`")?,
            dropped: raw.dropped.unwrap_or(0),
            dropped_by_decision: raw.dropped_by_decision,
            seq: raw.seq,
        })),
        other => {
            let kind: Kind = serde_json::from_value(serde_json::Value::String(other.to_owned()))
                .map_err(|_| format!("unknown record kind `{}`", other.escape_debug()))?;
            Ok(Entry::Attempt(LoggedAttempt {
                ts,
                time_ms,
                run: raw.run,
                policy: raw.policy,
                kind,
                client: raw.client,
                sandbox_hostname: raw.sandbox_hostname,
                host: raw.host.ok_or("no `host`")?,
                port: raw.port,
                decision: raw.decision.ok_or("no `decision`")?,
                reason: raw.reason.ok_or("no `reason`")?,
                rule: raw.rule,
                addr: raw.addr,
                bytes_up: raw.bytes_up,
                bytes_down: raw.bytes_down,
                duration_ms: raw.duration_ms,
                seq: raw.seq,
                method: raw.method,
                path: raw.path,
                status: raw.status,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ATTEMPT: &str = r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"connect","client":"10.0.0.3:5","host":"a.example.org","port":443,"decision":"blocked","reason":"not_allowed","rule":null,"addr":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"seq":3,"prev":"ab","method":"GET","future":true}"#;

    #[test]
    fn an_attempt_with_chain_and_unknown_fields_reads() {
        let Entry::Attempt(attempt) = parse_line(ATTEMPT).unwrap() else {
            panic!("not an attempt")
        };
        assert_eq!(attempt.host, "a.example.org");
        assert_eq!(attempt.seq, Some(3));
        assert_eq!(attempt.method.as_deref(), Some("GET"));
        assert_eq!(attempt.time_ms, Some(1_795_977_643_123));
        assert!(attempt.is_refusal());
    }

    #[test]
    fn limit_and_end_lines_read_as_their_own_entries() {
        let limit = r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"limit","reason":"audit_limit","limit":5,"seq":5,"prev":"x"}"#;
        let end = r#"{"v":1,"ts":"2026-11-29T18:40:44.000Z","run":"r-1","policy":"p","kind":"end","records":6,"dropped":9,"seq":6,"prev":"y"}"#;
        assert!(matches!(
            parse_line(limit),
            Ok(Entry::Limit(LimitReached { limit: 5, .. }))
        ));
        assert!(matches!(
            parse_line(end),
            Ok(Entry::End(RunEnd {
                records: 6,
                dropped: 9,
                ..
            }))
        ));
    }

    #[test]
    fn lines_that_are_not_records_are_skipped_with_their_line() {
        let text = format!("{ATTEMPT}\n\nnot json\n{{\"kind\":\"smoke\",\"ts\":\"x\"}}\n");
        let mut log = AuditLog::default();
        read_into(Path::new("a.log"), text.as_bytes(), &mut log).unwrap();
        assert_eq!(log.entries.len(), 1);
        let lines: Vec<usize> = log.skipped.iter().map(|s| s.line).collect();
        assert_eq!(lines, [3, 4]);
        assert!(log.skipped[1].why.contains("unknown record kind"));
    }

    #[test]
    fn a_line_that_is_not_utf8_is_skipped_and_the_records_around_it_kept() {
        let mut text = format!("{ATTEMPT}\n").into_bytes();
        text.extend_from_slice(b"{\"kind\":\"\xff\xfe\"}\r\n");
        text.extend_from_slice(format!("{ATTEMPT}\r\n").as_bytes());
        let mut log = AuditLog::default();
        read_into(Path::new("a.log"), &text[..], &mut log).unwrap();
        assert_eq!(log.entries.len(), 2, "{:?}", log.skipped);
        let skipped: Vec<String> = log.skipped.iter().map(ToString::to_string).collect();
        assert_eq!(skipped, ["a.log:2: not an audit record (not UTF-8)"]);
    }

    #[test]
    fn a_skipped_line_is_shown_with_its_controls_visible() {
        let skipped = Skipped {
            file: PathBuf::from("\x1b[2Jx.log"),
            line: 7,
            why: "bad \x07".to_owned(),
        };
        let shown = skipped.to_string();
        assert!(
            !shown.contains('\x1b') && !shown.contains('\x07'),
            "{shown:?}"
        );
        assert!(shown.contains(":7: bad "), "{shown:?}");
    }
}
