//! Audit log files read back for review through core's reader
//! ([`read_log`](egress_core::audit::read_log)): every line that is a record, with its file
//! and line, and every line that is not one ([`Skipped`]) instead of failing the whole review.
//! Checking that a log is complete and untouched is `audit verify`'s job, not this module's.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use egress_core::audit::{AuditLine, AuditRecord, RecordedReason, read_log};

/// A line of a log as read back: its reason is kept as written, whatever the version.
pub type LoggedLine = AuditLine<RecordedReason>;

/// An attempt's record as read back.
pub type LoggedAttempt = AuditRecord<RecordedReason>;

/// A record and where it was read.
#[derive(Clone, Debug, PartialEq)]
pub struct Located {
    /// The file it was read from.
    pub file: PathBuf,
    /// From 1.
    pub line: usize,
    /// The record the line holds.
    pub record: LoggedLine,
}

/// A line that is not an audit record.
#[derive(Clone, Debug, PartialEq)]
pub struct Skipped {
    /// The file it was read from.
    pub file: PathBuf,
    /// From 1.
    pub line: usize,
    /// Why it is not a record; may quote the line.
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
    /// Every line that is a record.
    pub entries: Vec<Located>,
    /// Every line that is not.
    pub skipped: Vec<Skipped>,
}

impl AuditLog {
    /// The attempts' records, `limit` and `end` lines left out.
    pub fn attempts(&self) -> impl Iterator<Item = &LoggedAttempt> {
        self.entries
            .iter()
            .filter_map(|located| match &located.record {
                AuditLine::Attempt(attempt) => Some(&**attempt),
                _ => None,
            })
    }
}

/// A log file that could not be opened or read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}", path.display())]
pub struct ReadError {
    /// The file.
    pub path: PathBuf,
    /// Why.
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

/// Reads one stream of lines (a file, or text in tests) into `log`, under the name `path`.
pub fn read_into(path: &Path, reader: impl BufRead, log: &mut AuditLog) -> io::Result<()> {
    for line in read_log(reader) {
        let line = line?;
        match line.record {
            Ok(record) => log.entries.push(Located {
                file: path.to_owned(),
                line: line.number,
                record,
            }),
            Err(why) => log.skipped.push(Skipped {
                file: path.to_owned(),
                line: line.number,
                why: why.to_string(),
            }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_core::audit::{EndRecord, LimitRecord, epoch_millis};

    const ATTEMPT: &str = r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"connect","client":"10.0.0.3:5","host":"a.example.org","port":443,"decision":"blocked","reason":"not_allowed","rule":null,"addr":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"seq":3,"prev":"ab","method":"GET","path":"/","future":true}"#;

    fn read(text: &[u8]) -> AuditLog {
        let mut log = AuditLog::default();
        read_into(Path::new("a.log"), text, &mut log).unwrap();
        log
    }

    #[test]
    fn an_attempt_with_chain_and_unknown_fields_reads() {
        let log = read(ATTEMPT.as_bytes());
        let attempt = log.attempts().next().expect("an attempt");
        assert_eq!(attempt.host, "a.example.org");
        assert_eq!(attempt.seq, Some(3));
        let request = attempt.request.as_ref().expect("method and path");
        assert_eq!(request.method, "GET");
        assert_eq!(epoch_millis(&attempt.ts), Some(1_795_977_643_123));
        assert!(attempt.is_refusal());
    }

    #[test]
    fn limit_and_end_lines_read_as_their_own_entries() {
        let limit = r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"limit","reason":"audit_limit","limit":5,"seq":5,"prev":"x"}"#;
        let end = r#"{"v":1,"ts":"2026-11-29T18:40:44.000Z","run":"r-1","policy":"p","kind":"end","records":6,"dropped":9,"seq":6,"prev":"y"}"#;
        let log = read(format!("{limit}\n{end}\n").as_bytes());
        assert!(matches!(
            log.entries[0].record,
            AuditLine::Limit(LimitRecord { limit: 5, .. })
        ));
        assert!(matches!(
            log.entries[1].record,
            AuditLine::End(EndRecord {
                records: 6,
                dropped: 9,
                ..
            })
        ));
    }

    #[test]
    fn lines_that_are_not_records_are_skipped_with_their_line() {
        let text = format!("{ATTEMPT}\n\nnot json\n{{\"kind\":\"smoke\",\"ts\":\"x\"}}\n");
        let log = read(text.as_bytes());
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
        let log = read(&text);
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
