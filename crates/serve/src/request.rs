//! `POST /v1/runs` bodies: the JSON request and its checks, which are exactly `run`'s: the
//! request's settings are a [`RunOptions`], the same type `run`'s flags parse into, checked
//! by the same code, so a request `run` would refuse is a 400 that creates nothing, naming
//! the field at fault. What only a request has — the command as `argv`, `files` and
//! `stdin` — is read here.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize};

use egress_sandbox::options::RunOptions;
use egress_sandbox::{Field, Names};
use egress_sandbox::{RunSpec, SpecError};

/// The request body; only `argv` is required.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunRequest {
    /// The command and its arguments, run in the sandbox.
    pub argv: Vec<String>,
    /// Every setting `run` takes as a flag, by its field name (`output_limit`).
    #[serde(flatten)]
    pub options: RunOptions,
    /// Relative path → base64 contents; written under /task.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// Base64; the command's whole stdin, closed after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
}

/// A refused request: the 400 body.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct BadRequest {
    /// Why the request is refused.
    pub error: String,
    /// The request field at fault.
    pub field: String,
    /// Policy diagnostics (`FILE:LINE:COL: error: …`), when the policy was refused.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<String>,
}

impl BadRequest {
    /// A refusal of `field` for `error`, without diagnostics.
    pub fn new(field: &str, error: impl Into<String>) -> BadRequest {
        BadRequest {
            error: error.into(),
            field: field.to_string(),
            diagnostics: Vec::new(),
        }
    }

    /// A refusal of `field` for `error`.
    pub fn of(field: Field, error: impl Into<String>) -> BadRequest {
        BadRequest::new(field.name(), error)
    }

    /// A body that is not a valid request: the field at fault is the first step of the
    /// path to the error (`pids` for `"pids": -1`, the unknown field itself), or `body`.
    fn from_json_error(path: &serde_path_to_error::Path, error: &serde_json::Error) -> BadRequest {
        let field = match path.iter().next() {
            Some(serde_path_to_error::Segment::Map { key }) => key.as_str(),
            _ => "body",
        };
        BadRequest::new(field, format!("the request is not valid: {error}"))
    }

    /// A refused run, in the request's terms ([`Names::Fields`]).
    fn from_spec(error: SpecError) -> BadRequest {
        let field = error.field().name();
        match error {
            SpecError::Policy(policy) => BadRequest {
                error: "the policy was refused; nothing was run".into(),
                field: field.into(),
                diagnostics: policy.diagnostics.iter().map(|d| d.to_string()).collect(),
            },
            other => BadRequest::new(field, other.message(Names::Fields)),
        }
    }
}

/// A checked request: the run and its stdin.
pub struct Checked {
    /// The run, built as `run` builds it from its flags.
    pub spec: RunSpec,
    /// The command's whole stdin, decoded (empty when the request has none).
    pub stdin: Vec<u8>,
}

/// A JSON object's entries in order, duplicates kept (to be refused, as a derived
/// `Deserialize` refuses a field given twice).
struct Entries(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Entries, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

impl<'de> Deserialize<'de> for RunRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RunRequest, D::Error> {
        let entries = Entries::deserialize(deserializer)?;
        RunRequest::from_entries(entries).map_err(|refused| serde::de::Error::custom(refused.error))
    }
}

impl RunRequest {
    /// The request from its JSON body.
    pub fn parse(body: &[u8]) -> Result<RunRequest, BadRequest> {
        let entries: Entries = serde_json::from_slice(body).map_err(|error| {
            BadRequest::new("body", format!("the request is not valid: {error}"))
        })?;
        RunRequest::from_entries(entries)
    }

    /// The request's own fields read, the rest read as [`RunOptions`].
    fn from_entries(Entries(entries): Entries) -> Result<RunRequest, BadRequest> {
        let mut seen = BTreeSet::new();
        let mut argv = None;
        let mut request = RunRequest::default();
        let mut options = serde_json::Map::new();
        for (key, value) in entries {
            if !seen.insert(key.clone()) {
                return Err(BadRequest::new(
                    &key,
                    format!("the request is not valid: duplicate field `{key}`"),
                ));
            }
            match key.as_str() {
                "argv" => argv = Some(own_field(&key, value)?),
                "files" => request.files = own_field(&key, value)?,
                "stdin" => request.stdin = own_field(&key, value)?,
                _ => {
                    options.insert(key, value);
                }
            }
        }
        request.argv = argv.ok_or_else(|| {
            BadRequest::of(
                Field::Argv,
                "the request is not valid: missing field `argv`",
            )
        })?;
        request.options = serde_path_to_error::deserialize(serde_json::Value::Object(options))
            .map_err(|error| BadRequest::from_json_error(error.path(), error.inner()))?;
        Ok(request)
    }

    /// Checks every field as `run` checks its flags and builds the run; a refusal names
    /// the field at fault.
    pub fn check(self) -> Result<Checked, BadRequest> {
        let mut builder = self
            .options
            .builder(self.argv)
            .map_err(BadRequest::from_spec)?;
        for (path, b64) in self.files {
            let contents = STANDARD.decode(b64.as_bytes()).map_err(|error| {
                BadRequest::of(
                    Field::Files,
                    format!("file {path:?} is not base64: {error}"),
                )
            })?;
            builder = builder.file(path, contents);
        }
        let stdin = match self.stdin {
            Some(b64) => STANDARD.decode(b64.as_bytes()).map_err(|error| {
                BadRequest::of(Field::Stdin, format!("stdin is not base64: {error}"))
            })?,
            None => Vec::new(),
        };
        let spec = builder.build().map_err(BadRequest::from_spec)?;
        Ok(Checked { spec, stdin })
    }
}

/// One of the request's own fields, of type `T`.
fn own_field<T: serde::de::DeserializeOwned>(
    key: &str,
    value: serde_json::Value,
) -> Result<T, BadRequest> {
    serde_json::from_value(value)
        .map_err(|error| BadRequest::new(key, format!("the request is not valid: {key}: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_core::units;

    fn check(json: &str) -> Result<Checked, BadRequest> {
        RunRequest::parse(json.as_bytes())?.check()
    }

    /// A request with every field set: each is a [`Field`]'s name, and each field a request
    /// carries is in it, so `run`'s settings and a request's are one list.
    #[test]
    fn the_request_fields_are_the_run_options_and_the_requests_own() {
        let json = r#"{"argv":["x"],"policies":["version: 1\n"],"allow":["a.example"],
            "image":"i","timeout":5,"memory":"64MiB","cpus":0.5,"pids":9,"tmp":"8MiB",
            "output_limit":"1KiB","mounts":["/a:/b"],"env":{"K":"V"},"workdir":"/w",
            "audit_limit":3,"on_audit_limit":"refuse","resolve":{"a.example":"127.0.0.5"},
            "egress_network":"n","runtime":"r","secrets":{"S":"sk-123456"},
            "upstream_ca":["pem"],"files":{"f":"AA=="},"stdin":"AA=="}"#;
        let request = RunRequest::parse(json.as_bytes()).unwrap();
        let written = serde_json::to_value(&request).unwrap();
        let keys: BTreeSet<&str> = written
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let carried: BTreeSet<&str> = [
            Field::Argv,
            Field::Policies,
            Field::Allow,
            Field::Image,
            Field::Timeout,
            Field::Memory,
            Field::Cpus,
            Field::Pids,
            Field::Tmp,
            Field::OutputLimit,
            Field::Mounts,
            Field::Env,
            Field::Workdir,
            Field::AuditLimit,
            Field::OnAuditLimit,
            Field::Resolve,
            Field::EgressNetwork,
            Field::Runtime,
            Field::Secrets,
            Field::UpstreamCa,
            Field::Files,
            Field::Stdin,
        ]
        .into_iter()
        .map(Field::name)
        .collect();
        assert_eq!(keys, carried);
        let again = RunRequest::parse(&serde_json::to_vec(&written).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(&again).unwrap(),
            written,
            "written as read"
        );
    }

    /// A field given twice is refused, naming it, as a derived `Deserialize` would: not the
    /// last one silently taken.
    #[test]
    fn a_field_given_twice_is_refused() {
        for (json, field) in [
            (r#"{"argv":["a"],"argv":["b"]}"#, "argv"),
            (r#"{"argv":["a"],"image":"i","image":"j"}"#, "image"),
        ] {
            let refused = check(json).err().unwrap();
            assert_eq!(refused.field, field, "{json}");
            assert!(
                refused.error.contains("duplicate field"),
                "{}",
                refused.error
            );
        }
    }

    #[test]
    fn a_body_that_does_not_parse_names_the_field_at_fault() {
        for (json, field) in [
            (r#"{"argv":"true"}"#, "argv"),
            (r#"{"argv":["true"],"pids":-1}"#, "pids"),
            (r#"{"argv":["true"],"env":{"A":1}}"#, "env"),
            (r#"{"argv":["true"],"surprise":1}"#, "surprise"),
            (r#"{"argv":["true"]"#, "body"),
            ("[]", "body"),
        ] {
            let refused = check(json)
                .err()
                .unwrap_or_else(|| panic!("{json} was accepted"));
            assert_eq!(refused.field, field, "{json}: {}", refused.error);
        }
    }

    #[test]
    fn runtime_and_audit_limit_are_taken_and_checked_as_their_flags() {
        let checked = check(r#"{"argv":["true"],"runtime":"runsc","audit_limit":5}"#)
            .ok()
            .unwrap();
        assert_eq!(checked.spec.runtime(), Some("runsc"));
        assert_eq!(checked.spec.audit_limit(), 5);
        let checked = check(r#"{"argv":["true"],"on_audit_limit":"refuse"}"#)
            .ok()
            .unwrap();
        assert_eq!(
            checked.spec.on_audit_limit(),
            egress_core::audit::OnAuditLimit::Refuse
        );
        let refused = check(r#"{"argv":["true"],"on_audit_limit":"never"}"#)
            .err()
            .unwrap();
        assert_eq!(refused.field, "on_audit_limit");
        assert_eq!(
            check(r#"{"argv":["true"],"audit_limit":0}"#)
                .err()
                .unwrap()
                .field,
            "audit_limit"
        );
        assert_eq!(
            check(r#"{"argv":["true"],"runtime":"run c"}"#)
                .err()
                .unwrap()
                .field,
            "runtime"
        );
    }

    #[test]
    fn only_argv_is_required() {
        let checked = check(r#"{"argv":["true"]}"#).ok().unwrap();
        assert!(checked.stdin.is_empty());
        assert_eq!(check(r#"{}"#).err().unwrap().field, "argv");
        assert_eq!(check(r#"{"argv":[]}"#).err().unwrap().field, "argv");
    }

    #[test]
    fn each_refusal_names_its_field() {
        for (json, field) in [
            (r#"{"argv":["x"],"timeout":"soon"}"#, "timeout"),
            (r#"{"argv":["x"],"memory":"lots"}"#, "memory"),
            (r#"{"argv":["x"],"output_limit":"-1"}"#, "output_limit"),
            (r#"{"argv":["x"],"allow":["http://x/"]}"#, "allow"),
            (r#"{"argv":["x"],"policies":["version: 2\n"]}"#, "policies"),
            (r#"{"argv":["x"],"files":{"../x":"AA=="}}"#, "files"),
            (r#"{"argv":["x"],"files":{"x":"%%%"}}"#, "files"),
            (r#"{"argv":["x"],"stdin":"%%%"}"#, "stdin"),
            (
                r#"{"argv":["x"],"resolve":{"a.example":"nope"}}"#,
                "resolve",
            ),
            (r#"{"argv":["x"],"workdir":"rel"}"#, "workdir"),
            (r#"{"argv":["x"],"env":{"A=B":"c"}}"#, "env"),
            (r#"{"argv":["x"],"mounts":["/nonexistent-x:/y"]}"#, "mounts"),
            (r#"{"argv":["x"],"tmp":"512KiB"}"#, "tmp"),
            (r#"{"argv":["x"],"timeout":0}"#, "timeout"),
            (r#"{"argv":["x"],"colour":"red"}"#, "colour"),
        ] {
            let refused = check(json)
                .err()
                .unwrap_or_else(|| panic!("{json} accepted"));
            assert_eq!(refused.field, field, "{json}: {refused:?}");
        }
    }

    #[test]
    fn a_refused_policy_carries_its_diagnostics() {
        let refused = check(r#"{"argv":["x"],"policies":[{"file":"p.yaml","yaml":"version: 1\nallow:\n  - host: \"*\"\n"}]}"#)
            .err()
            .unwrap();
        assert_eq!(refused.field, "policies");
        assert!(
            refused.diagnostics[0].starts_with("p.yaml:3:"),
            "{refused:?}"
        );
    }

    const CREDENTIAL_POLICY: &str = "version: 1\nallow:\n  - host: api.example.com\ncredentials:\n  - host: api.example.com\n    secret: API_KEY\n";

    fn with_policy(extra: &str) -> String {
        format!(
            r#"{{"argv":["x"],"policies":[{}]{extra}}}"#,
            serde_json::to_string(CREDENTIAL_POLICY).unwrap()
        )
    }

    #[test]
    fn secrets_are_checked_like_the_secret_flag_and_never_shown() {
        let json = with_policy(r#","secrets":{"API_KEY":"sk-request-1"}"#);
        let request: RunRequest = serde_json::from_str(&json).unwrap();
        assert!(!format!("{request:?}").contains("sk-request-1"));
        let checked = request.check().ok().unwrap();
        let secrets: Vec<_> = checked.spec.credentials().secret_values().collect();
        assert_eq!(secrets.len(), 1);
        assert_eq!(
            (secrets[0].0, secrets[0].1.expose()),
            ("API_KEY", "sk-request-1")
        );
        assert!(!format!("{:?}", checked.spec).contains("sk-request-1"));

        for (extra, field) in [
            ("", "secrets"),
            (
                r#","secrets":{"API_KEY":"sk-key-1","OTHER":"v"}"#,
                "secrets",
            ),
            (r#","secrets":{"API_KEY":""}"#, "secrets"),
            (r#","secrets":{"API_KEY":"sk-bad\nvalue"}"#, "secrets"),
            (
                r#","secrets":{"API_KEY":"sk-key-1"},"env":{"API_KEY":"v"}"#,
                "env",
            ),
            (
                r#","secrets":{"API_KEY":"sk-key-1"},"upstream_ca":["not a certificate"]"#,
                "upstream_ca",
            ),
            (
                r#","secrets":{"API_KEY":"sk-key-1"},"upstream_ca":[{"file":"ca.pem","pem":"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}]"#,
                "upstream_ca",
            ),
        ] {
            let refused = check(&with_policy(extra))
                .err()
                .unwrap_or_else(|| panic!("{extra} accepted"));
            assert_eq!(refused.field, field, "{extra}: {refused:?}");
            assert!(!refused.error.contains("sk-bad"), "{refused:?}");
        }
    }

    #[test]
    fn files_make_task_the_default_workdir_and_stdin_is_decoded() {
        let checked = check(r#"{"argv":["x"],"files":{"main.py":"cHJpbnQoNDIp"},"stdin":"aGk="}"#)
            .ok()
            .unwrap();
        assert_eq!(checked.stdin, b"hi");
        assert_eq!(checked.spec.workdir(), Some("/task"));
        assert_eq!(checked.spec.files()[0].contents, b"print(42)");
    }

    #[test]
    fn a_timeout_is_a_duration_text_or_a_number_of_seconds() {
        let checked = check(r#"{"argv":["x"],"timeout":2.5}"#).ok().unwrap();
        assert_eq!(
            checked.spec.limits().timeout,
            std::time::Duration::from_millis(2500)
        );
        let checked = check(r#"{"argv":["x"],"timeout":"1m"}"#).ok().unwrap();
        assert_eq!(
            checked.spec.limits().timeout,
            std::time::Duration::from_secs(60)
        );
        for json in [
            r#"{"argv":["x"],"timeout":0}"#,
            r#"{"argv":["x"],"timeout":-1}"#,
            r#"{"argv":["x"],"timeout":"soon"}"#,
            r#"{"argv":["x"],"timeout":true}"#,
        ] {
            assert_eq!(check(json).err().unwrap().field, "timeout", "{json}");
        }
    }

    /// Past 7 days, in seconds or as text, a timeout is a 400 naming the field; so is a
    /// size past 1PiB.
    #[test]
    fn durations_and_sizes_past_their_bounds_name_the_field() {
        let checked = check(r#"{"argv":["x"],"timeout":604800}"#).ok().unwrap();
        assert_eq!(checked.spec.limits().timeout, units::MAX_DURATION);
        for (json, field) in [
            (r#"{"argv":["x"],"timeout":604800.5}"#, "timeout"),
            (r#"{"argv":["x"],"timeout":1e300}"#, "timeout"),
            (
                r#"{"argv":["x"],"timeout":18446744073709551615}"#,
                "timeout",
            ),
            (r#"{"argv":["x"],"timeout":"100000000000000h"}"#, "timeout"),
            (r#"{"argv":["x"],"memory":"2PiB"}"#, "memory"),
            (r#"{"argv":["x"],"tmp":"16EiB"}"#, "tmp"),
            (
                r#"{"argv":["x"],"output_limit":"1048577GiB"}"#,
                "output_limit",
            ),
        ] {
            let refused = check(json).err().unwrap();
            assert_eq!(refused.field, field, "{json}");
            assert!(refused.error.contains(field), "{json}: {}", refused.error);
        }
        let refused = check(r#"{"argv":["x"],"timeout":604800.5}"#).err().unwrap();
        assert_eq!(
            refused.error,
            "invalid timeout 604800.5: a number of seconds more than 0 and at most 604800"
        );
    }

    #[test]
    fn refusals_name_the_request_fields_never_the_flags() {
        for json in [
            r#"{"argv":["x"],"timeout":"soon"}"#,
            r#"{"argv":["x"],"memory":"lots"}"#,
            r#"{"argv":["x"],"output_limit":"-1"}"#,
            r#"{"argv":["x"],"workdir":"rel"}"#,
            r#"{"argv":["x"],"mounts":["/nonexistent-x:/y"]}"#,
            r#"{"argv":["x"],"egress_network":""}"#,
            r#"{"argv":["x"],"audit_limit":0}"#,
            r#"{"argv":["x"],"resolve":{"a.example":"127.1"}}"#,
            r#"{"argv":["x"],"resolve":{"a b":"127.0.0.1"}}"#,
        ] {
            let refused = check(json).err().unwrap();
            assert!(!refused.error.contains("--"), "{json}: {}", refused.error);
            assert!(
                refused.error.contains(&refused.field),
                "{json}: {}",
                refused.error
            );
        }
        let refused = check(&with_policy("")).err().unwrap();
        assert!(!refused.error.contains("--"), "{}", refused.error);
        assert!(refused.error.contains("secrets"), "{}", refused.error);
    }

    #[test]
    fn a_workdir_that_climbs_is_refused_as_a_mount_target_is() {
        for json in [
            r#"{"argv":["x"],"workdir":"/task/../etc"}"#,
            r#"{"argv":["x"],"workdir":"/.."}"#,
        ] {
            assert_eq!(check(json).err().unwrap().field, "workdir", "{json}");
        }
        assert!(check(r#"{"argv":["x"],"workdir":"/task/..x"}"#).is_ok());
    }

    #[test]
    fn a_nul_in_argv_is_escaped_once() {
        let refused = check(r#"{"argv":["a\u0000b"]}"#).err().unwrap();
        assert_eq!(refused.field, "argv");
        assert!(
            refused.error.contains(r#"invalid argv "a\0b""#),
            "{}",
            refused.error
        );
    }

    #[test]
    fn an_image_that_reads_as_a_flag_is_the_image_fields_fault() {
        let refused = check(r#"{"argv":["x"],"image":"--privileged"}"#)
            .err()
            .unwrap();
        assert_eq!(refused.field, "image", "{refused:?}");
    }
}
