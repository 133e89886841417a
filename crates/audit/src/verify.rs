//! Audit log chains checked (`egress-sandbox audit verify`): every run's chain in the logs
//! (`docs/src/reference/audit-record.md`), each break named with its file and line: an
//! edited record, a removed one, a reordered pair, a run cut off before its `end` record, an
//! `end` record whose count does not match the chain, a run report whose `audit_head` is not
//! the hash of the run's `end` line.
//!
//! What the chain proves: the lines of a run are the ones the proxy wrote, in its order,
//! none missing or added up to the `end` record. Anyone can recompute SHA-256, so a forger
//! who rewrites a whole run consistently is caught only by an anchor kept elsewhere: the run
//! report's `audit_head` ([`ChainVerifier::check_report`]).

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use egress_core::audit::{LogLine, genesis, read_log, sha256_hex};
use egress_core::text::visible;
use serde::Deserialize;

/// What a run report contributes to the check (`--report`): the run and the hash of its
/// `end` line.
#[derive(Deserialize)]
pub struct ReportHead {
    run: String,
    #[serde(default)]
    audit_head: Option<String>,
}

impl ReportHead {
    /// The fields of a run report (`report::RunReport`'s JSON) the check needs.
    pub fn parse(report: &[u8]) -> Result<ReportHead, serde_json::Error> {
        serde_json::from_slice(report)
    }
}

/// One run's chain in one file, as read so far.
struct Chain {
    /// The `seq` the next line must carry.
    next_seq: u64,
    /// Hash of the line with the highest `seq` so far: the next line's `prev`.
    prev: String,
    /// Line number of that line.
    prev_line: usize,
    /// The `end` line: its number and hash.
    end: Option<(usize, String)>,
    /// The last line of this run in the file, for a missing `end`.
    last_line: usize,
}

/// The chains of the logs read so far, and the breaks found in them. Feed it every log
/// ([`read`](Self::read)), then the reports ([`check_report`](Self::check_report)), then
/// [`finish`](Self::finish) it: a run is cut off only once every log has been read.
#[derive(Default)]
pub struct ChainVerifier {
    /// Chains by (file, run), in the order they were first seen.
    chains: Vec<((PathBuf, Option<String>), Chain)>,
    index: HashMap<(PathBuf, Option<String>), usize>,
    breaks: Vec<String>,
    lines: u64,
}

/// What the logs and reports amount to.
pub struct Verification {
    /// One line per break, `FILE:LINE: run ID: what` (hostile text shown visibly), in the
    /// order found.
    pub breaks: Vec<String>,
    /// Chains read: one per run and file (per proxy start for a log without run ids).
    pub runs: usize,
    /// Lines read, blank lines not counted.
    pub lines: u64,
}

fn shown_run(run: Option<&str>) -> String {
    match run {
        Some(run) => format!("run {}", visible(run)),
        None => "run (none)".to_owned(),
    }
}

impl ChainVerifier {
    /// Reads one log at `path` (the name every break of it is reported under).
    pub fn read(&mut self, path: &Path, reader: impl BufRead) -> std::io::Result<()> {
        let mut any = false;
        for line in read_log(reader) {
            any = true;
            self.lines += 1;
            self.line(path, &line?);
        }
        if !any {
            self.breaks.push(format!(
                "{}: no audit records",
                visible(&path.display().to_string())
            ));
        }
        Ok(())
    }

    fn report(&mut self, path: &Path, line: usize, run: Option<&str>, what: impl AsRef<str>) {
        self.breaks.push(format!(
            "{}:{line}: {}: {}",
            visible(&path.display().to_string()),
            shown_run(run),
            what.as_ref()
        ));
    }

    fn line(&mut self, path: &Path, line: &LogLine) {
        let number = line.number;
        let Some(fields) = &line.link else {
            let why = line.record.as_ref().err().map(ToString::to_string);
            self.breaks.push(format!(
                "{}:{number}: {}",
                visible(&path.display().to_string()),
                visible(why.as_deref().unwrap_or("not an audit record"))
            ));
            return;
        };
        let run = fields.run.as_deref();
        let (Some(seq), Some(prev)) = (fields.seq, fields.prev.as_deref()) else {
            self.report(
                path,
                number,
                run,
                "no seq and prev: the record is not chained",
            );
            return;
        };
        let key = (path.to_path_buf(), fields.run.clone());
        // Without a run id (`egress-sandbox proxy` with no `--run-id`), each start of the
        // proxy appends a chain of its own to the same file: seq 0 after an ended chain
        // begins the next one. A run id is unique, so for a run this stays a break.
        let next_session =
            |slot: &usize| run.is_none() && seq == 0 && self.chains[*slot].1.end.is_some();
        let slot = match self.index.get(&key).filter(|slot| !next_session(slot)) {
            Some(slot) => *slot,
            None => {
                self.index.insert(key.clone(), self.chains.len());
                self.chains.push((
                    key,
                    Chain {
                        next_seq: 0,
                        prev: genesis(run),
                        prev_line: 0,
                        end: None,
                        last_line: number,
                    },
                ));
                self.chains.len() - 1
            }
        };
        let hash = sha256_hex(&line.bytes);
        let mut found = Vec::new();
        {
            let chain = &mut self.chains[slot].1;
            chain.last_line = number;
            if let Some((end_line, _)) = &chain.end {
                found.push((
                    number,
                    format!("a record after the run's end record (line {end_line})"),
                ));
            } else if seq < chain.next_seq {
                found.push((
                    number,
                    format!(
                        "seq {seq} comes after seq {}: records out of order, or repeated",
                        chain.next_seq - 1
                    ),
                ));
            } else {
                if seq > chain.next_seq {
                    let missing = seq - chain.next_seq;
                    found.push((
                        number,
                        format!(
                            "seq {seq} where seq {} was expected: {missing} record(s) missing before this line (removed or moved)",
                            chain.next_seq
                        ),
                    ));
                } else if prev != chain.prev {
                    if seq == 0 {
                        found.push((
                            number,
                            "the first record's prev is not the hash of its run id (run id or prev altered)"
                                .to_owned(),
                        ));
                    } else {
                        found.push((
                            chain.prev_line,
                            format!(
                                "record altered: its hash is not the prev of seq {seq} (line {number})"
                            ),
                        ));
                    }
                }
                if fields.kind.as_deref() == Some("end") {
                    match fields.records {
                        Some(records) if records == seq => {}
                        Some(records) => found.push((
                            number,
                            format!(
                                "the end record counts {records} record(s), but {seq} came before it in the chain (forged or altered end)"
                            ),
                        )),
                        None => found.push((number, "an end record without its count".to_owned())),
                    }
                    chain.end = Some((number, hash.clone()));
                }
                chain.next_seq = seq + 1;
                chain.prev = hash;
                chain.prev_line = number;
            }
        }
        for (at, what) in found {
            self.report(path, at, run, what);
        }
    }

    /// The report's `audit_head` must be the hash of its run's `end` line.
    pub fn check_report(&mut self, path: &Path, report: &ReportHead) {
        let shown = visible(&path.display().to_string()).into_owned();
        let Some(head) = report.audit_head.as_deref() else {
            self.breaks.push(format!(
                "{shown}: {}: the report has no audit_head (the proxy never closed its chain)",
                shown_run(Some(&report.run))
            ));
            return;
        };
        let mut seen = false;
        let mut findings = Vec::new();
        for ((file, run), chain) in &self.chains {
            if run.as_deref() != Some(report.run.as_str()) {
                continue;
            }
            seen = true;
            match &chain.end {
                Some((_, hash)) if hash == head => {}
                Some((line, _)) => findings.push((
                    file.clone(),
                    *line,
                    format!("the end record is not the one the report {shown} names (audit_head differs)"),
                )),
                // Already reported as a missing end.
                None => {}
            }
        }
        for (file, line, what) in findings {
            self.report(&file, line, Some(&report.run), what);
        }
        if !seen {
            self.breaks.push(format!(
                "{shown}: {}: not in the logs given",
                shown_run(Some(&report.run))
            ));
        }
    }

    /// The verdict: every chain still without its `end` record is reported as cut off.
    pub fn finish(mut self) -> Verification {
        let unended: Vec<(PathBuf, Option<String>, usize, u64)> = self
            .chains
            .iter()
            .filter(|(_, chain)| chain.end.is_none())
            .map(|((file, run), chain)| {
                (file.clone(), run.clone(), chain.last_line, chain.next_seq)
            })
            .collect();
        for (file, run, line, next) in unended {
            self.report(
                &file,
                line,
                run.as_deref(),
                format!(
                    "no end record after seq {}: the run is cut off (truncated, or its proxy did not shut down)",
                    next.saturating_sub(1)
                ),
            );
        }
        Verification {
            runs: self.chains.len(),
            breaks: self.breaks,
            lines: self.lines,
        }
    }
}
