//! One call's run as a tool result: the daemon's events gathered into
//! `structuredContent` (`{run, status, exit_code, stdout, stderr, truncated, blocked,
//! duration_ms}`) and a text for hosts that read only text.
//!
//! A result is sized for a model: its stdout and stderr together hold at most the
//! server's result limit. A stream over its share keeps its head and its tail with a
//! marker between that says how many bytes were cut; stderr's share is a quarter, and
//! what one stream leaves of its share goes to the other. Nothing of the operator's is in
//! a result: the daemon's warnings about the policy were said on the server's stderr at
//! its start.

use std::collections::VecDeque;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use egress_core::text::with_causes;
use egress_serve::client::{ClientError, Event};

/// The result limit when the operator gives no `--output-limit`: about 8,000 tokens of
/// output, which a model's context takes call after call.
pub const DEFAULT_RESULT_LIMIT: usize = 32 * 1024;

/// What a call has seen of its run so far.
pub struct Gathered {
    pub run: Option<String>,
    /// Bytes of stdout and stderr the result holds, markers included.
    limit: usize,
    stdout: Retained,
    stderr: Retained,
    end: Option<End>,
}

/// One stream as it comes: its first and its last bytes (up to the result limit each,
/// what any share of it may keep) and how many there were in all.
struct Retained {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: usize,
    keep: usize,
}

impl Retained {
    fn new(keep: usize) -> Retained {
        Retained {
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            keep,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len();
        let room = self.keep.saturating_sub(self.head.len()).min(bytes.len());
        let (head, rest) = bytes.split_at(room);
        self.head.extend_from_slice(head);
        self.tail.extend(rest);
        let excess = self.tail.len().saturating_sub(self.keep);
        self.tail.drain(..excess);
    }

    /// The stream in at most `share` bytes: whole, or its head and tail around a marker.
    /// Returns the text and whether bytes were cut.
    fn sized(&self, name: &str, share: usize) -> (String, bool) {
        let retained: Vec<u8> = self.head.iter().chain(&self.tail).copied().collect();
        if self.total <= share {
            return (String::from_utf8_lossy(&retained).into_owned(), false);
        }
        // The marker's digits are at most the total's.
        let marker_room = marker(name, self.total).len();
        let room = share.saturating_sub(marker_room);
        let head = char_start(&retained, room / 2, Direction::Back);
        let tail = char_start(
            &retained,
            retained.len() - (room - room / 2),
            Direction::Forward,
        );
        let cut = self.total - head - (retained.len() - tail);
        let mut text = String::from_utf8_lossy(&retained[..head]).into_owned();
        text.push_str(&marker(name, cut));
        text.push_str(&String::from_utf8_lossy(&retained[tail..]));
        (text, true)
    }
}

/// The line that stands for the bytes cut out of a stream.
fn marker(name: &str, cut: usize) -> String {
    format!("\n[egress-sandbox: {cut} bytes of {name} cut here]\n")
}

enum Direction {
    Back,
    Forward,
}

/// `at`, moved off the middle of a UTF-8 character (back or forward to its start), so a
/// cut does not split one.
fn char_start(bytes: &[u8], mut at: usize, direction: Direction) -> usize {
    let inside = |at: usize| bytes.get(at).is_some_and(|byte| byte & 0xC0 == 0x80);
    let mut steps = 0;
    while inside(at) && steps < 3 {
        match direction {
            Direction::Back => at -= 1,
            Direction::Forward => at += 1,
        }
        steps += 1;
    }
    at
}

/// The bytes each stream may keep of `limit`: stderr a quarter and stdout the rest, and
/// a stream that needs less than its share gives the rest to the other.
fn shares(limit: usize, stdout: usize, stderr: usize) -> (usize, usize) {
    let stderr_share = limit / 4;
    let stdout_share = limit - stderr_share;
    if stderr <= stderr_share {
        (limit - stderr, stderr)
    } else if stdout <= stdout_share {
        (stdout, limit - stdout)
    } else {
        (stdout_share, stderr_share)
    }
}

enum End {
    Exit {
        report: serde_json::Value,
        summary: String,
    },
    SetupFailed(String),
}

impl Gathered {
    /// Nothing seen yet; the result will hold at most `limit` bytes of output.
    pub fn new(limit: usize) -> Gathered {
        Gathered {
            run: None,
            limit,
            stdout: Retained::new(limit),
            stderr: Retained::new(limit),
            end: None,
        }
    }

    /// Takes one event of the run's stream.
    pub fn take(&mut self, event: Event) {
        match event {
            // The operator's: said on the server's stderr at its start.
            Event::Warning { text } => tracing::debug!(warning = %text, "the run's warning"),
            Event::Started { run } => self.run = Some(run),
            Event::Output { stream, b64 } => {
                let bytes = STANDARD.decode(b64).unwrap_or_default();
                match stream.as_str() {
                    "stderr" => self.stderr.push(&bytes),
                    _ => self.stdout.push(&bytes),
                }
            }
            Event::Audit { .. } => {}
            Event::Exit {
                report, summary, ..
            } => {
                let report = serde_json::from_str(report.get()).unwrap_or_default();
                self.end = Some(End::Exit { report, summary });
            }
            Event::Error { error, .. } => self.end = Some(End::SetupFailed(error)),
            // An event of a newer daemon: nothing a call's result holds.
            _ => {}
        }
    }

    /// The result: a completed run (any exit) is a result, a set-up failure an error.
    pub fn result(self) -> CallToolResult {
        match self.end {
            Some(End::Exit { report, summary }) => {
                let (stdout_share, stderr_share) =
                    shares(self.limit, self.stdout.total, self.stderr.total);
                let (stdout, stdout_cut) = self.stdout.sized("stdout", stdout_share);
                let (stderr, stderr_cut) = self.stderr.sized("stderr", stderr_share);
                let dropped = report["output"]["truncated"].as_bool().unwrap_or(false);
                let text = text(&stdout, &stderr, &summary);
                let structured = json!({
                    "run": report["run"],
                    "status": report["status"],
                    "exit_code": report["exit_code"],
                    "stdout": stdout,
                    "stderr": stderr,
                    "truncated": dropped || stdout_cut || stderr_cut,
                    "blocked": report["blocked"].as_array().map(|groups| groups.iter().map(|group| json!({
                        "host": group["host"],
                        "port": group["port"],
                        "reason": group["reason"],
                        "count": group["count"],
                    })).collect::<Vec<_>>()).unwrap_or_default(),
                    "duration_ms": report["duration_ms"],
                });
                let mut result = CallToolResult::structured(structured);
                result.content = vec![ContentBlock::text(text)];
                result.is_error = Some(false);
                result
            }
            Some(End::SetupFailed(error)) => failure(format!("egress-sandbox: error: {error}")),
            None => failure("egress-sandbox: error: the run's stream ended before its end"),
        }
    }
}

/// What a host that reads only text is shown: stdout, stderr, then the summary line.
fn text(stdout: &str, stderr: &str, summary: &str) -> String {
    let mut text = String::new();
    for (name, output) in [("stdout", stdout), ("stderr", stderr)] {
        if output.is_empty() {
            continue;
        }
        text.push_str(&format!("--- {name} ---\n{output}"));
        if !output.ends_with('\n') {
            text.push('\n');
        }
    }
    text.push_str(summary);
    text
}

/// An error result: the message `run` would print.
pub fn failure(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// A request the daemon refused (bad operator configuration, or a stopping daemon): its
/// error, as `run` would print it; the diagnostics about the operator's configuration go
/// to the server's stderr.
pub fn refusal(error: &ClientError) -> CallToolResult {
    match error {
        ClientError::Refused { refusal, .. } => {
            for diagnostic in &refusal.diagnostics {
                eprintln!("{diagnostic}");
            }
            failure(format!("egress-sandbox: error: {}", refusal.error))
        }
        other => failure(format!("egress-sandbox: error: {}", with_causes(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn exit(report: serde_json::Value, summary: &str) -> Event {
        Event::Exit {
            report: RawValue::from_string(report.to_string()).unwrap(),
            summary: summary.into(),
            teardown_errors: Vec::new(),
        }
    }

    #[test]
    fn a_run_that_ended_is_a_result_with_its_output_and_refusals() {
        let mut gathered = Gathered::new(DEFAULT_RESULT_LIMIT);
        gathered.take(Event::Started { run: "r-1".into() });
        gathered.take(Event::Output {
            stream: "stdout".into(),
            b64: STANDARD.encode("out\n"),
        });
        gathered.take(Event::Output {
            stream: "stderr".into(),
            b64: STANDARD.encode("err"),
        });
        gathered.take(exit(
            json!({"run": "r-1", "status": "timeout", "exit_code": 124, "duration_ms": 1000,
                   "output": {"stdout_bytes": 4, "stderr_bytes": 3, "truncated": true},
                   "blocked": [{"host": "x.example", "port": 443, "reason": "not_allowed", "count": 2}]}),
            "egress-sandbox: time limit of 1s reached",
        ));
        let result = gathered.result();
        assert_eq!(result.is_error, Some(false));
        assert_eq!(
            result.structured_content.unwrap(),
            json!({"run": "r-1", "status": "timeout", "exit_code": 124, "stdout": "out\n",
                   "stderr": "err", "truncated": true, "duration_ms": 1000,
                   "blocked": [{"host": "x.example", "port": 443, "reason": "not_allowed", "count": 2}]})
        );
        let text = result.content[0].as_text().unwrap().text.clone();
        assert_eq!(
            text,
            "--- stdout ---\nout\n--- stderr ---\nerr\negress-sandbox: time limit of 1s reached"
        );
    }

    fn ended(limit: usize, stdout: &[u8], stderr: &[u8]) -> CallToolResult {
        let mut gathered = Gathered::new(limit);
        gathered.take(Event::Warning {
            text: "policy /etc/op/policy.yaml:4:11: cidr `10.0.0.0/8` covers private addresses"
                .into(),
        });
        for (stream, bytes) in [("stdout", stdout), ("stderr", stderr)] {
            // In frames, as the daemon sends them.
            for frame in bytes.chunks(1000) {
                gathered.take(Event::Output {
                    stream: stream.into(),
                    b64: STANDARD.encode(frame),
                });
            }
        }
        gathered.take(exit(
            json!({"run": "r-1", "status": "exited", "exit_code": 0, "duration_ms": 1,
                   "output": {"truncated": false}, "blocked": []}),
            "egress-sandbox: exit 0",
        ));
        gathered.result()
    }

    fn streams(result: &CallToolResult) -> (String, String, bool) {
        let structured = result.structured_content.as_ref().unwrap();
        (
            structured["stdout"].as_str().unwrap().to_owned(),
            structured["stderr"].as_str().unwrap().to_owned(),
            structured["truncated"].as_bool().unwrap(),
        )
    }

    #[test]
    fn the_operators_warnings_are_not_in_a_result() {
        let result = ended(1024, b"out\n", b"");
        let text = &result.content[0].as_text().unwrap().text;
        assert_eq!(text, "--- stdout ---\nout\negress-sandbox: exit 0");
        assert!(
            !result
                .structured_content
                .unwrap()
                .to_string()
                .contains("policy")
        );
    }

    #[test]
    fn a_long_output_keeps_its_head_and_tail_around_a_marker() {
        let mut stdout = String::from("the first line\n");
        for line in 0..20_000 {
            stdout.push_str(&format!("line {line}\n"));
        }
        stdout.push_str("the last line\n");
        let result = ended(4096, stdout.as_bytes(), b"an error at the end\n");
        let (out, err, truncated) = streams(&result);
        assert!(truncated);
        assert!(out.starts_with("the first line\nline 0\n"), "{out}");
        assert!(out.ends_with("line 19999\nthe last line\n"), "{out}");
        let cut: usize = out
            .split_once("[egress-sandbox: ")
            .and_then(|(_, rest)| rest.split_once(" bytes of stdout cut here]"))
            .and_then(|(digits, _)| digits.parse().ok())
            .unwrap_or_else(|| panic!("no marker: {out}"));
        assert_eq!(
            out.len() - marker("stdout", cut).len() + cut,
            stdout.len(),
            "the marker counts the bytes cut"
        );
        assert_eq!(
            err, "an error at the end\n",
            "stderr keeps what fits its share"
        );
        assert!(out.len() + err.len() <= 4096);
        let text = &result.content[0].as_text().unwrap().text;
        assert!(text.contains("bytes of stdout cut here") && text.contains("the last line"));
    }

    #[test]
    fn stderr_has_a_share_of_its_own() {
        let result = ended(4096, &[b'o'; 10_000], &[b'e'; 10_000]);
        let (out, err, _) = streams(&result);
        assert!(err.contains("bytes of stderr cut here"), "{err}");
        assert!(err.len() <= 1024 && err.len() > 900, "{}", err.len());
        assert!(out.len() <= 3072 && out.len() > 2900, "{}", out.len());
    }

    #[test]
    fn output_within_the_limit_is_whole_and_a_cut_splits_no_character() {
        let (out, err, truncated) = streams(&ended(4096, b"short\n", b"also short\n"));
        assert_eq!(
            (out.as_str(), err.as_str(), truncated),
            ("short\n", "also short\n", false)
        );
        let wide = "é".repeat(5000);
        let (out, _, truncated) = streams(&ended(1001, wide.as_bytes(), b""));
        assert!(truncated);
        assert!(!out.contains('\u{FFFD}'), "{out}");
        assert!(out.starts_with('é') && out.ends_with('é'));
    }

    #[test]
    fn a_set_up_failure_or_a_cut_stream_is_an_error_result() {
        let mut gathered = Gathered::new(DEFAULT_RESULT_LIMIT);
        gathered.take(Event::Error {
            error: "image x not found locally".into(),
            field: Some("image".into()),
        });
        let result = gathered.result();
        assert_eq!(result.is_error, Some(true));
        assert_eq!(
            result.content[0].as_text().unwrap().text,
            "egress-sandbox: error: image x not found locally"
        );
        assert_eq!(
            Gathered::new(DEFAULT_RESULT_LIMIT).result().is_error,
            Some(true)
        );
    }
}
