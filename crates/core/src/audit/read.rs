//! Audit logs read back, line by line: each line's number, its exact bytes, where it sits in
//! its run's chain, and the record it holds or why it holds none.
//!
//! The reader is tolerant of other versions, as a reader of logs must be: a record's reason
//! this version does not know is kept as its text ([`RecordedReason`]), and fields it does
//! not know are ignored. Lines that are not records (truncated, another program's output, a
//! kind of line this version does not know) are each a [`LineError`], never the end of the
//! log. Lines are split on bytes, not read as text: a line that is not UTF-8 is one such
//! error, and the records around it still read. Blank lines are passed over.
//!
//! What a line says about the chain ([`ChainLink`]) is read from every line that is a JSON
//! object, whatever its kind: a line a newer writer added, of a kind or with a decision this
//! version does not know, is still a link of its run's chain.

use std::io::{self, BufRead};

use serde::Deserialize;
use serde::de::IntoDeserializer as _;
use serde::de::value::StrDeserializer;

use super::{AuditLine, Kind, RecordedReason};

/// Reads a log line by line (module docs). Nothing is held beyond the line being read, so
/// a log of any size reads in bounded memory.
pub fn read_log<B: BufRead>(log: B) -> LogReader<B> {
    LogReader {
        lines: log.split(b'\n'),
        number: 0,
    }
}

/// The lines of one log, as [`read_log`] yields them: an error is the log's reader's (the
/// file could not be read), never a line's.
pub struct LogReader<B> {
    lines: io::Split<B>,
    number: usize,
}

impl<B: BufRead> Iterator for LogReader<B> {
    type Item = io::Result<LogLine>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let bytes = match self.lines.next()? {
                Ok(bytes) => bytes,
                Err(error) => return Some(Err(error)),
            };
            self.number += 1;
            if !bytes.iter().all(u8::is_ascii_whitespace) {
                return Some(Ok(LogLine::read(self.number, bytes)));
            }
        }
    }
}

/// One line of a log that is not blank.
#[derive(Debug)]
#[non_exhaustive]
pub struct LogLine {
    /// From 1, blank lines counted.
    pub number: usize,
    /// The line exactly as written, without its newline: what the chain's hashes cover.
    pub bytes: Vec<u8>,
    /// Where the line sits in its run's chain; `None` when it is no JSON object (its
    /// [`record`](Self::record) then says why).
    pub link: Option<ChainLink>,
    /// The record, or why the line is not one.
    pub record: Result<AuditLine<RecordedReason>, LineError>,
}

/// The fields of a line that make it a link of its run's chain, read whatever the line's
/// kind; every other field is covered by the hash of the line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct ChainLink {
    /// The line's run id, which names the chain it belongs to; `None` without one.
    #[serde(default)]
    pub run: Option<String>,
    /// The line's `kind`, as written.
    #[serde(default)]
    pub kind: Option<String>,
    /// The line's place in its run's chain.
    #[serde(default)]
    pub seq: Option<u64>,
    /// Hex SHA-256 of the run's previous line.
    #[serde(default)]
    pub prev: Option<String>,
    /// An `end` line's count of the run's lines before it, which closes the chain.
    #[serde(default)]
    pub records: Option<u64>,
}

/// Why a line is not an audit record. The text may quote the line: it is shown to a person
/// only through `text::visible`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// Bytes that are not UTF-8.
    #[error("not an audit record (not UTF-8)")]
    NotUtf8,
    /// A JSON object whose `kind` is none this version writes.
    #[error("unknown record kind `{}`", .0.escape_debug())]
    UnknownKind(String),
    /// Not JSON, or not the fields of its kind of record.
    #[error("not an audit record ({0})")]
    NotRecord(serde_json::Error),
}

impl LogLine {
    fn read(number: usize, bytes: Vec<u8>) -> LogLine {
        let (link, record) = match parse(&bytes) {
            Ok((link, record)) => (Some(link), record),
            Err(error) => (None, Err(error)),
        };
        LogLine {
            number,
            bytes,
            link,
            record,
        }
    }
}

/// The line's link, then its record: a line whose link does not read is no record either.
/// A line that is not UTF-8 is no record, but still a link when the fields of its link read:
/// its bytes are in the chain all the same.
fn parse(
    bytes: &[u8],
) -> Result<(ChainLink, Result<AuditLine<RecordedReason>, LineError>), LineError> {
    let utf8 = std::str::from_utf8(bytes).is_ok();
    let link: ChainLink = serde_json::from_slice(bytes).map_err(|error| match utf8 {
        true => LineError::NotRecord(error),
        false => LineError::NotUtf8,
    })?;
    if !utf8 {
        return Ok((link, Err(LineError::NotUtf8)));
    }
    let record = match link.kind.as_deref() {
        Some(kind) if !is_known_kind(kind) => Err(LineError::UnknownKind(kind.to_owned())),
        kind => AuditLine::parse_kind(kind, bytes).map_err(LineError::NotRecord),
    };
    Ok((link, record))
}

/// `limit`, `end`, or the kind of an attempt's record, as this version spells them.
fn is_known_kind(kind: &str) -> bool {
    let spelled: StrDeserializer<'_, serde::de::value::Error> = kind.into_deserializer();
    matches!(kind, "limit" | "end") || Kind::deserialize(spelled).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{EndRecord, LimitRecord};
    use crate::policy::Reason;

    const ATTEMPT: &str = r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"connect","client":"10.0.0.3:5","host":"a.example.org","port":443,"decision":"blocked","reason":"not_allowed","rule":null,"addr":null,"bytes_up":0,"bytes_down":0,"duration_ms":0,"seq":3,"prev":"ab","future":true}"#;

    fn lines(log: &[u8]) -> Vec<LogLine> {
        read_log(log).map(Result::unwrap).collect()
    }

    fn attempt(line: &LogLine) -> &crate::audit::AuditRecord<RecordedReason> {
        match &line.record {
            Ok(AuditLine::Attempt(record)) => record,
            other => panic!("not an attempt: {other:?}"),
        }
    }

    #[test]
    fn an_attempt_with_chain_and_unknown_fields_reads() {
        let read = lines(ATTEMPT.as_bytes());
        let record = attempt(&read[0]);
        assert_eq!(record.host, "a.example.org");
        assert_eq!((record.seq, record.prev.as_deref()), (Some(3), Some("ab")));
        assert_eq!(record.reason, Reason::NotAllowed);
        assert!(record.is_refusal());
        assert_eq!(read[0].bytes, ATTEMPT.as_bytes());
        let link = read[0].link.as_ref().unwrap();
        assert_eq!((link.run.as_deref(), link.seq), (Some("r-1"), Some(3)));
    }

    /// A newer writer's reason: the record reads, its reason kept as written.
    #[test]
    fn a_reason_this_version_does_not_know_is_kept_as_written() {
        let line = ATTEMPT.replace("not_allowed", "future_reason");
        let read = lines(line.as_bytes());
        let record = attempt(&read[0]);
        assert_eq!(
            record.reason,
            RecordedReason::Unknown("future_reason".to_owned())
        );
        assert_eq!(record.reason.as_str(), "future_reason");
        assert_eq!(record.reason.known(), None);
        assert!(AuditLine::parse(line.as_bytes()).is_err(), "strict parse");
        let misspelt = lines(ATTEMPT.replace("not_allowed", "Not_Allowed").as_bytes());
        assert!(matches!(
            &attempt(&misspelt[0]).reason,
            RecordedReason::Unknown(text) if text == "Not_Allowed"
        ));
    }

    #[test]
    fn limit_and_end_lines_read_as_their_own_records() {
        let limit = r#"{"v":1,"ts":"2026-11-29T18:40:43.123Z","run":"r-1","policy":"p","kind":"limit","reason":"audit_limit","limit":5,"seq":5,"prev":"x"}"#;
        let end = r#"{"v":1,"ts":"2026-11-29T18:40:44.000Z","run":"r-1","policy":"p","kind":"end","records":6,"dropped":9,"seq":6,"prev":"y"}"#;
        let read = lines(format!("{limit}\n{end}\n").as_bytes());
        assert!(matches!(
            read[0].record,
            Ok(AuditLine::Limit(LimitRecord { limit: 5, .. }))
        ));
        assert!(matches!(
            read[1].record,
            Ok(AuditLine::End(EndRecord {
                records: 6,
                dropped: 9,
                ..
            }))
        ));
        assert_eq!(read[1].link.as_ref().unwrap().records, Some(6));
    }

    #[test]
    fn lines_that_are_not_records_are_errors_with_their_line_number() {
        let text = format!("{ATTEMPT}\n\n  \nnot json\n{{\"kind\":\"smoke\",\"seq\":4}}\n");
        let read = lines(text.as_bytes());
        let numbers: Vec<usize> = read.iter().map(|line| line.number).collect();
        assert_eq!(numbers, [1, 4, 5]);
        assert!(matches!(read[1].record, Err(LineError::NotRecord(_))));
        assert!(read[1].link.is_none());
        let unknown = read[2].record.as_ref().unwrap_err();
        assert_eq!(unknown.to_string(), "unknown record kind `smoke`");
        assert_eq!(read[2].link.as_ref().unwrap().seq, Some(4), "still a link");
    }

    /// A decision this version does not know: no record, but a link of its chain.
    #[test]
    fn a_line_that_is_no_record_of_its_kind_is_still_a_link() {
        let line = ATTEMPT.replace(r#""blocked""#, r#""exploded""#);
        let read = lines(line.as_bytes());
        assert!(read[0].record.is_err());
        assert_eq!(read[0].link.as_ref().unwrap().prev.as_deref(), Some("ab"));
    }

    #[test]
    fn a_line_that_is_not_utf8_is_an_error_and_the_records_around_it_read() {
        let mut text = format!("{ATTEMPT}\n").into_bytes();
        text.extend_from_slice(b"{\"kind\":\"\xff\xfe\"}\r\n");
        text.extend_from_slice(format!("{ATTEMPT}\r\n").as_bytes());
        let read = lines(&text);
        assert_eq!(read.len(), 3);
        assert!(read[0].record.is_ok() && read[2].record.is_ok());
        assert_eq!(
            read[1].record.as_ref().unwrap_err().to_string(),
            "not an audit record (not UTF-8)"
        );
        assert!(read[2].bytes.ends_with(b"}\r"), "exact bytes");
    }

    /// Bytes that are not UTF-8 outside the link's fields: no record, still a link.
    #[test]
    fn a_line_that_is_not_utf8_is_still_a_link_when_its_link_reads() {
        let mut line = ATTEMPT.as_bytes().to_vec();
        let host = line.windows(9).position(|w| w == b"a.example").unwrap();
        line[host] = 0xff;
        let read = lines(&line);
        assert!(matches!(read[0].record, Err(LineError::NotUtf8)));
        let link = read[0].link.as_ref().expect("a link");
        assert_eq!((link.seq, link.prev.as_deref()), (Some(3), Some("ab")));
    }

    #[test]
    fn an_error_reading_the_log_is_the_readers() {
        struct Broken;
        impl io::Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("gone"))
            }
        }
        let mut read = read_log(io::BufReader::new(Broken));
        assert!(read.next().unwrap().is_err());
    }
}
