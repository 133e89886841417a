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

use egress_sandbox::options::TimeLimit;
use egress_serve::request::RunRequest;

/// The longest `code`: it is one argument of the interpreter, and Linux takes at most
/// 128 KiB in one argument (`MAX_ARG_STRLEN`).
pub const MAX_CODE: usize = 120 * 1024;

/// What bounds every run: the operator's command line as a request, its time limit (the
/// most a call may ask for), and the bytes of output a result holds.
#[derive(Clone, Debug)]
pub struct RunTemplate {
    pub request: RunRequest,
    pub timeout: Duration,
    pub result_limit: usize,
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

/// A file a call writes under /task.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFile {
    path: String,
    content: String,
}

// Each tool's fields in full (serde's `flatten` cannot be combined with
// `deny_unknown_fields`). Every optional field takes `null` as absent: a host in strict
// mode sends every field.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunCodeArguments {
    language: Language,
    code: String,
    stdin: Option<String>,
    files: Option<Vec<TaskFile>>,
    timeout: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunCommandArguments {
    argv: Vec<String>,
    stdin: Option<String>,
    files: Option<Vec<TaskFile>>,
    timeout: Option<f64>,
}

/// A call's arguments, checked: what it asks to run.
#[derive(Debug)]
pub struct Call {
    argv: Vec<String>,
    stdin: Option<String>,
    /// Relative path under /task → its text.
    files: BTreeMap<String, String>,
    timeout: Option<f64>,
}

/// Arguments that cannot be run: the message goes back as an error result.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidArguments(pub String);

/// The call a tool's arguments amount to, or why they cannot be run (naming the field).
pub fn parse_call(tool: &str, arguments: Option<JsonObject>) -> Result<Call, InvalidArguments> {
    let arguments = serde_json::Value::Object(arguments.unwrap_or_default());
    let (argv, stdin, files, timeout) = match tool {
        "run_code" => {
            let parsed: RunCodeArguments = parse(arguments)?;
            if parsed.code.len() > MAX_CODE {
                return Err(InvalidArguments(format!(
                    "code is {} bytes, more than the {MAX_CODE} one argument holds: write it to \
                     a file with files and run that with run_command",
                    parsed.code.len()
                )));
            }
            let argv = parsed.language.argv(parsed.code);
            (argv, parsed.stdin, parsed.files, parsed.timeout)
        }
        "run_command" => {
            let parsed: RunCommandArguments = parse(arguments)?;
            if parsed.argv.is_empty() {
                return Err(InvalidArguments("argv is empty: name a program".into()));
            }
            (parsed.argv, parsed.stdin, parsed.files, parsed.timeout)
        }
        other => return Err(InvalidArguments(format!("no tool {other:?}"))),
    };
    Ok(Call {
        argv,
        stdin: stdin.filter(|stdin| !stdin.is_empty()),
        files: task_files(files.unwrap_or_default())?,
        timeout,
    })
}

/// The run a call amounts to: the operator's request, with the call's command, stdin,
/// files and (lower) time limit.
pub fn request_for(call: Call, template: &RunTemplate) -> Result<RunRequest, InvalidArguments> {
    let mut request = template.request.clone();
    request.argv = call.argv;
    if let Some(seconds) = call.timeout {
        let seconds = lower_timeout(seconds, template.timeout)?;
        request.options.timeout = Some(TimeLimit::Seconds(seconds));
    }
    for (path, text) in call.files {
        request.files.insert(path, STANDARD.encode(text));
    }
    request.stdin = call.stdin.map(|stdin| STANDARD.encode(stdin));
    Ok(request)
}

/// Deserialises a tool's arguments; an error names the field at fault (`files[0].path`).
fn parse<T: serde::de::DeserializeOwned>(
    arguments: serde_json::Value,
) -> Result<T, InvalidArguments> {
    serde_path_to_error::deserialize(arguments)
        .map_err(|error| InvalidArguments(format!("invalid arguments: {error}")))
}

/// The files by path, each path checked and given once.
fn task_files(files: Vec<TaskFile>) -> Result<BTreeMap<String, String>, InvalidArguments> {
    let mut by_path = BTreeMap::new();
    for TaskFile { path, content } in files {
        check_file_path(&path)?;
        if by_path.contains_key(&path) {
            return Err(InvalidArguments(format!(
                "files: the path {path:?} is given twice"
            )));
        }
        by_path.insert(path, content);
    }
    Ok(by_path)
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
    // Strict-mode function calling (OpenAI's, and the hosts that convert to it) takes a
    // schema whose every property is required and every object closed: an optional field
    // is one that may be `null`.
    let common_properties = |ceiling: &str| {
        json!({
            "stdin": {
                "type": ["string", "null"],
                "description": "The command's whole stdin (UTF-8 text); null: none.",
            },
            "files": {
                "type": ["array", "null"],
                "description": "Files written under /task before the command runs (the working directory then); null: none.",
                "items": closed_object(json!({
                    "path": {"type": "string", "description": "Relative to /task, without `..`."},
                    "content": {"type": "string", "description": "The file's UTF-8 text."},
                })),
            },
            "timeout": {
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "description": format!("Time limit in seconds; at most {ceiling}; null: {ceiling}. The command is killed at it (exit 124)."),
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
            object(closed_object(code_properties)),
        )
        .with_raw_output_schema(output_schema())
        .with_annotations(annotations.clone()),
        Tool::new(
            "run_command",
            format!(
                "Run a command (argv, no shell) {note}. Returns stdout, stderr and the exit code."
            ),
            object(closed_object(command_properties)),
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
            "truncated": {"type": "boolean", "description": "Output was cut to the result's size: a cut stream keeps its head and tail around a marker saying how many bytes were cut."},
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

/// An object schema as strict mode takes it: every property required (an optional one is
/// nullable), no other property.
fn closed_object(properties: serde_json::Value) -> serde_json::Value {
    let required: Vec<String> = properties
        .as_object()
        .expect("properties are an object")
        .keys()
        .cloned()
        .collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
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
        let mut request = RunRequest {
            argv: vec!["true".into()],
            ..RunRequest::default()
        };
        request.options.allow = vec!["api.example.com".into()];
        RunTemplate {
            request,
            timeout: Duration::from_secs(30),
            result_limit: 32 * 1024,
        }
    }

    fn call(tool: &str, arguments: serde_json::Value) -> Result<RunRequest, InvalidArguments> {
        let serde_json::Value::Object(map) = arguments else {
            panic!("arguments are an object")
        };
        parse_call(tool, Some(map)).and_then(|call| request_for(call, &template()))
    }

    #[test]
    fn code_runs_through_its_interpreter_inside_the_operators_bounds() {
        let request = call(
            "run_code",
            json!({"language": "node", "code": "console.log(1)", "stdin": "hi", "files": [{"path": "a/b.txt", "content": "x"}], "timeout": 2}),
        )
        .unwrap();
        assert_eq!(request.argv, ["node", "-e", "console.log(1)"]);
        assert_eq!(request.options.allow, ["api.example.com"]);
        assert_eq!(request.stdin.as_deref(), Some("aGk="));
        assert_eq!(request.files["a/b.txt"], "eA==");
        assert_eq!(request.options.timeout, Some(TimeLimit::Seconds(2.0)));
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
                json!({"argv": ["true"], "files": [{"path": "/etc/passwd", "content": ""}]}),
                "relative",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "files": [{"path": "a/../../x", "content": ""}]}),
                "`..`",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "files": [{"path": "a", "content": 1}]}),
                "invalid arguments: files[0].content: invalid type",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "files": [{"path": "a", "content": "", "mode": 7}]}),
                "files[0].mode: unknown field `mode`",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "files": [{"path": "a", "content": ""}, {"path": "a", "content": ""}]}),
                "given twice",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "files": {"a": "x"}}),
                "invalid arguments: files: invalid type: map",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "stdin": 3}),
                "invalid arguments: stdin: invalid type",
            ),
            (
                "run_command",
                json!({"argv": ["true"], "timeout": "5"}),
                "invalid arguments: timeout: invalid type",
            ),
            (
                "run_command",
                json!({"argv": [1]}),
                "invalid arguments: argv[0]: invalid type",
            ),
            (
                "run_code",
                json!({"language": "sh"}),
                "missing field `code`",
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
    fn null_is_absent_for_every_optional_field() {
        let request = call(
            "run_code",
            json!({"language": "sh", "code": "true", "stdin": null, "files": null, "timeout": null}),
        )
        .unwrap();
        assert_eq!(request.argv, ["sh", "-c", "true"]);
        assert_eq!(request.stdin, None);
        assert!(request.files.is_empty());
        assert_eq!(request.options.timeout, None);
        let request = call(
            "run_command",
            json!({"argv": ["true"], "stdin": null, "files": null, "timeout": null}),
        )
        .unwrap();
        assert_eq!(request.argv, ["true"]);
    }

    /// Strict mode's rules, as OpenAI's function calling and the hosts that convert to it
    /// apply them: every object closed with every property required, no open maps.
    fn assert_strict(schema: &serde_json::Value, at: &str) {
        let Some(object) = schema.as_object() else {
            return;
        };
        if let Some(properties) = object.get("properties").and_then(|p| p.as_object()) {
            let mut required: Vec<&str> = object["required"]
                .as_array()
                .unwrap_or_else(|| panic!("{at}: no required"))
                .iter()
                .map(|name| name.as_str().unwrap())
                .collect();
            required.sort_unstable();
            let mut names: Vec<&str> = properties.keys().map(String::as_str).collect();
            names.sort_unstable();
            assert_eq!(required, names, "{at}: every property is required");
            assert_eq!(object["additionalProperties"], json!(false), "{at}");
            for (name, property) in properties {
                assert_strict(property, &format!("{at}.{name}"));
            }
        }
        let is_object = object["type"] == "object"
            || object["type"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("object")));
        assert!(
            !is_object || object.contains_key("properties"),
            "{at}: an open map"
        );
        if let Some(items) = object.get("items") {
            assert_strict(items, &format!("{at}[]"));
        }
    }

    #[test]
    fn every_input_schema_is_strict_with_its_optional_fields_nullable() {
        for tool in tools(&template()) {
            let schema = serde_json::Value::Object(tool.input_schema.as_ref().clone());
            assert_strict(&schema, &tool.name);
            for optional in ["stdin", "files", "timeout"] {
                let types = &schema["properties"][optional]["type"];
                assert!(
                    types.as_array().is_some_and(|t| t.contains(&json!("null"))),
                    "{}.{optional}: {types}",
                    tool.name
                );
            }
        }
    }

    #[test]
    fn the_reference_shows_the_schemas_the_tools_list() {
        let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs/src/reference/mcp-tools.md");
        let page = std::fs::read_to_string(page).unwrap();
        for tool in tools(&template()) {
            let heading = format!("## `{}`\n\n```json\n", tool.name);
            let (_, rest) = page.split_once(&heading).expect("a section per tool");
            let (shown, _) = rest.split_once("\n```").expect("a closed block");
            let shown: serde_json::Value = serde_json::from_str(shown).unwrap();
            let listed = serde_json::Value::Object(tool.input_schema.as_ref().clone());
            assert_eq!(shown, listed, "{}", tool.name);
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
