//! One call's run as a tool result: the daemon's events gathered into
//! `structuredContent` (`{run, status, exit_code, stdout, stderr, truncated, blocked,
//! duration_ms}`) and a text for hosts that read only text.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use egress_serve::client::{ClientError, Event};

/// What a call has seen of its run so far.
#[derive(Default)]
pub struct Gathered {
    pub run: Option<String>,
    warnings: Vec<String>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    end: Option<End>,
}

enum End {
    Exit {
        report: serde_json::Value,
        summary: String,
    },
    SetupFailed(String),
}

impl Gathered {
    /// Takes one event of the run's stream.
    pub fn take(&mut self, event: Event) {
        match event {
            Event::Warning { text } => self.warnings.push(text),
            Event::Started { run } => self.run = Some(run),
            Event::Output { stream, b64 } => {
                let bytes = STANDARD.decode(b64).unwrap_or_default();
                match stream.as_str() {
                    "stderr" => self.stderr.extend_from_slice(&bytes),
                    _ => self.stdout.extend_from_slice(&bytes),
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
                let stdout = String::from_utf8_lossy(&self.stdout).into_owned();
                let stderr = String::from_utf8_lossy(&self.stderr).into_owned();
                let text = text(&self.warnings, &stdout, &stderr, &summary);
                let structured = json!({
                    "run": report["run"],
                    "status": report["status"],
                    "exit_code": report["exit_code"],
                    "stdout": stdout,
                    "stderr": stderr,
                    "truncated": report["output"]["truncated"],
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
fn text(warnings: &[String], stdout: &str, stderr: &str, summary: &str) -> String {
    let mut text = String::new();
    for warning in warnings {
        text.push_str(&format!("egress-sandbox: warning: {warning}\n"));
    }
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

/// A request the daemon refused (bad operator configuration, or a stopping daemon), as
/// `run` would print it.
pub fn refusal(error: &ClientError) -> CallToolResult {
    match error {
        ClientError::Refused { refusal, .. } => {
            let mut lines: Vec<String> = refusal.diagnostics.clone();
            lines.push(format!("egress-sandbox: error: {}", refusal.error));
            failure(lines.join("\n"))
        }
        other => failure(format!("egress-sandbox: error: {other}")),
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
        let mut gathered = Gathered::default();
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

    #[test]
    fn a_set_up_failure_or_a_cut_stream_is_an_error_result() {
        let mut gathered = Gathered::default();
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
        assert_eq!(Gathered::default().result().is_error, Some(true));
    }
}
