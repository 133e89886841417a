//! The two tools' arguments, schemas and results. The arguments a model may give are only
//! the command, its stdin, files under /task and a lower time limit: everything else is the
//! operator's ([`RunTemplate`]), and an argument not in the schema is refused.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde::Deserialize;
use serde_json::json;

use egress_serve::request::{self, RunRequest};

/// The longest `code`: it is one argument of the interpreter, and Linux takes at most
/// 128 KiB in one argument (`MAX_ARG_STRLEN`).
pub const MAX_CODE: usize = 120 * 1024;

/// What bounds every run: the operator's command line as a request, and its time limit
/// (the most a call may ask for).
#[derive(Clone, Debug)]
pub struct RunTemplate {
    pub request: RunRequest,
    pub timeout: Duration,
}

/// `run_code`'s languages and the interpreter each runs with.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Language {
    Python,
    Node,
    Sh,
}

impl Language {
    fn argv(self, code: String) -> Vec<String> {
        let (program, flag) = match self {
            Language::Python => ("python3", "-c"),
            Language::Node => ("node", "-e"),
            Language::Sh => ("sh", "-c"),
        };
        vec![program.into(), flag.into(), code]
    }
}

// Each tool's fields in full (serde's `flatten` cannot be combined with
// `deny_unknown_fields`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunCodeArguments {
    language: Language,
    code: String,
    stdin: Option<String>,
    #[serde(default)]
    files: BTreeMap<String, String>,
    timeout: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunCommandArguments {
    argv: Vec<String>,
    stdin: Option<String>,
    #[serde(default)]
    files: BTreeMap<String, String>,
    timeout: Option<f64>,
}

/// What both tools take besides the command.
struct Common {
    stdin: Option<String>,
    files: BTreeMap<String, String>,
    timeout: Option<f64>,
}

/// Arguments that cannot be run: the message goes back as an error result.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidArguments(pub String);

/// The request a call amounts to: the operator's, with the call's command, stdin, files
/// and (lower) time limit.
pub fn request_for(
    tool: &str,
    arguments: Option<JsonObject>,
    template: &RunTemplate,
) -> Result<RunRequest, InvalidArguments> {
    let arguments = serde_json::Value::Object(arguments.unwrap_or_default());
    let (argv, common) = match tool {
        "run_code" => {
            let parsed: RunCodeArguments = parse(arguments)?;
            if parsed.code.len() > MAX_CODE {
                return Err(InvalidArguments(format!(
                    "code is {} bytes, more than the {MAX_CODE} one argument holds: write it to \
                     a file with files and run that with run_command",
                    parsed.code.len()
                )));
            }
            let common = Common {
                stdin: parsed.stdin,
                files: parsed.files,
                timeout: parsed.timeout,
            };
            (parsed.language.argv(parsed.code), common)
        }
        "run_command" => {
            let parsed: RunCommandArguments = parse(arguments)?;
            if parsed.argv.is_empty() {
                return Err(InvalidArguments("argv is empty: name a program".into()));
            }
            let common = Common {
                stdin: parsed.stdin,
                files: parsed.files,
                timeout: parsed.timeout,
            };
            (parsed.argv, common)
        }
        other => return Err(InvalidArguments(format!("no tool {other:?}"))),
    };
    let mut request = template.request.clone();
    request.argv = argv;
    if let Some(seconds) = common.timeout {
        request.timeout = Some(request::Duration::Seconds(lower_timeout(
            seconds,
            template.timeout,
        )?));
    }
    for (path, text) in common.files {
        check_file_path(&path)?;
        request.files.insert(path, STANDARD.encode(text));
    }
    request.stdin = common
        .stdin
        .filter(|stdin| !stdin.is_empty())
        .map(|stdin| STANDARD.encode(stdin));
    Ok(request)
}

fn parse<T: serde::de::DeserializeOwned>(
    arguments: serde_json::Value,
) -> Result<T, InvalidArguments> {
    serde_json::from_value(arguments)
        .map_err(|error| InvalidArguments(format!("invalid arguments: {error}")))
}

/// A call's time limit: at most the operator's.
fn lower_timeout(seconds: f64, ceiling: Duration) -> Result<f64, InvalidArguments> {
    if !(seconds > 0.0 && seconds.is_finite()) {
        return Err(InvalidArguments(format!(
            "timeout {seconds} is not a number of seconds more than 0"
        )));
    }
    if seconds > ceiling.as_secs_f64() {
        return Err(InvalidArguments(format!(
            "timeout {seconds}s is above the ceiling of {} this server was started with; ask \
             for at most that",
            humantime::format_duration(ceiling)
        )));
    }
    Ok(seconds)
}

/// A file's path: relative, under /task, no `..`.
fn check_file_path(path: &str) -> Result<(), InvalidArguments> {
    if path.starts_with('/') {
        return Err(InvalidArguments(format!(
            "file {path:?}: give a path relative to /task, not an absolute one"
        )));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(InvalidArguments(format!(
            "file {path:?}: the path must not contain `..`"
        )));
    }
    Ok(())
}

/// The two tools, with the operator's ceiling in their descriptions.
pub fn tools(template: &RunTemplate) -> Vec<Tool> {
    let ceiling = humantime::format_duration(template.timeout).to_string();
    let common_properties = |ceiling: &str| {
        json!({
            "stdin": {"type": "string", "description": "The command's whole stdin (UTF-8 text)."},
            "files": {
                "type": "object",
                "description": "Files written under /task before the command runs (the working directory then): relative path → UTF-8 text.",
                "additionalProperties": {"type": "string"},
            },
            "timeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": format!("Time limit in seconds; at most {ceiling} (the default). The command is killed at it (exit 124)."),
            },
        })
    };
    let mut code_properties = common_properties(&ceiling);
    let code_map = code_properties.as_object_mut().expect("an object");
    code_map.insert(
        "language".into(),
        json!({"type": "string", "enum": ["python", "node", "sh"], "description": "python: python3 -c CODE; node: node -e CODE; sh: sh -c CODE."}),
    );
    code_map.insert(
        "code".into(),
        json!({"type": "string", "description": "The program's source."}),
    );
    let mut command_properties = common_properties(&ceiling);
    command_properties.as_object_mut().expect("an object").insert(
        "argv".into(),
        json!({"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "The program and its arguments (no shell)."}),
    );
    let schema = |properties: serde_json::Value, required: &[&str]| {
        object(json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        }))
    };
    let annotations = ToolAnnotations::new()
        .read_only(false)
        .destructive(false)
        .idempotent(false)
        .open_world(true);
    let note = "in a throwaway sandbox whose only way out is an allowlisting proxy (hosts \
                outside the operator's policy are refused and listed in `blocked`)";
    vec![
        Tool::new(
            "run_code",
            format!(
                "Run python, node or sh code {note}. Returns stdout, stderr and the exit code."
            ),
            schema(code_properties, &["language", "code"]),
        )
        .with_raw_output_schema(output_schema())
        .with_annotations(annotations.clone()),
        Tool::new(
            "run_command",
            format!(
                "Run a command (argv, no shell) {note}. Returns stdout, stderr and the exit code."
            ),
            schema(command_properties, &["argv"]),
        )
        .with_raw_output_schema(output_schema())
        .with_annotations(annotations),
    ]
}

/// The schema of every result's `structuredContent`.
fn output_schema() -> Arc<JsonObject> {
    object(json!({
        "type": "object",
        "properties": {
            "run": {"type": "string", "description": "The run's id (its audit records carry it)."},
            "status": {"type": "string", "enum": ["exited", "timeout", "oom", "interrupted", "proxy_failed"]},
            "exit_code": {"type": "integer", "description": "The command's exit status; 124 at the time limit, 137 killed for memory."},
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "truncated": {"type": "boolean", "description": "Output past the operator's limit was dropped (stderr ends with a marker)."},
            "blocked": {
                "type": "array",
                "description": "Connections the proxy refused, grouped.",
                "items": {
                    "type": "object",
                    "properties": {
                        "host": {"type": "string"},
                        "port": {"type": ["integer", "null"]},
                        "reason": {"type": "string"},
                        "count": {"type": "integer"},
                    },
                    "required": ["host", "port", "reason", "count"],
                },
            },
            "duration_ms": {"type": "integer"},
        },
        "required": ["run", "status", "exit_code", "stdout", "stderr", "truncated", "blocked", "duration_ms"],
    }))
}

fn object(value: serde_json::Value) -> Arc<JsonObject> {
    match value {
        serde_json::Value::Object(map) => Arc::new(map),
        _ => unreachable!("schemas are objects"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> RunTemplate {
        RunTemplate {
            request: RunRequest {
                argv: vec!["true".into()],
                allow: vec!["api.example.com".into()],
                ..RunRequest::default()
            },
            timeout: Duration::from_secs(30),
        }
    }

    fn call(tool: &str, arguments: serde_json::Value) -> Result<RunRequest, InvalidArguments> {
        let serde_json::Value::Object(map) = arguments else {
            panic!("arguments are an object")
        };
        request_for(tool, Some(map), &template())
    }

    #[test]
    fn code_runs_through_its_interpreter_inside_the_operators_bounds() {
        let request = call(
            "run_code",
            json!({"language": "node", "code": "console.log(1)", "stdin": "hi", "files": {"a/b.txt": "x"}, "timeout": 2}),
        )
        .unwrap();
        assert_eq!(request.argv, ["node", "-e", "console.log(1)"]);
        assert_eq!(request.allow, ["api.example.com"]);
        assert_eq!(request.stdin.as_deref(), Some("aGk="));
        assert_eq!(request.files["a/b.txt"], "eA==");
        assert_eq!(request.timeout, Some(request::Duration::Seconds(2.0)));
    }

    #[test]
    fn nothing_beyond_the_schema_is_taken() {
        for (tool, arguments, says) in [
            (
                "run_command",
                json!({"argv": ["true"], "allow": ["evil.example"]}),
                "unknown field `allow`",
            ),
            (
                "run_code",
                json!({"language": "python", "code": "1", "image": "x"}),
                "unknown field `image`",
            ),
            (
                "run_code",
                json!({"language": "ruby", "code": "1"}),
                "unknown variant `ruby`",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "timeout": 31}),
                "ceiling of 30s",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "timeout": 0}),
                "more than 0",
            ),
            ("run_command", json!({"argv": []}), "argv is empty"),
            (
                "run_command",
                json!({"argv": ["true"], "files": {"/etc/passwd": ""}}),
                "relative",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "files": {"a/../../x": ""}}),
                "`..`",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "files": {"a": 1}}),
                "invalid arguments",
            ),
            (
                "run_code",
                json!({"language": "sh", "code": "x".repeat(MAX_CODE + 1)}),
                "more than",
            ),
            ("other", json!({}), "no tool"),
        ] {
            let refused = call(tool, arguments.clone()).unwrap_err().0;
            assert!(refused.contains(says), "{arguments}: {refused}");
        }
    }

    #[test]
    fn every_schema_refuses_other_properties() {
        for tool in tools(&template()) {
            assert_eq!(tool.input_schema["additionalProperties"], json!(false));
            assert!(tool.output_schema.is_some());
        }
    }
}
