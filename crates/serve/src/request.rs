//! `POST /v1/runs` bodies: the JSON request and its checks, which are exactly `run`'s (the
//! same [`RunSpec`] builder), so a request `run` would refuse is a 400 that creates nothing.
//!
//! A field that carries a run flag's value as the flag takes it ([`RequestField::Same`] in
//! `run_flags::table`) is checked through that flag's own code; the others (policy text,
//! `env` as an object, secret values …) have code of their own here.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use egress_core::handoff::{InlineCertificate, Secrets};

use crate::run_flags;
use crate::run_flags::given::FlagValues;
use crate::run_flags::table::{RUN_FLAGS, RequestField, field_of_flag};
use crate::run_flags::value::{FlagValue, ValueKind};
use crate::secret_flags::check_secret_value;
use egress_core::units;
use egress_sandbox::CredentialError;
use egress_sandbox::spec::{RunSpec, SpecError};

/// A policy as text: bare YAML (named `policy-N.yaml`), or with the file name that names it
/// in diagnostics and gives its default name (what `run --server` sends for `--policy`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum PolicyText {
    /// The YAML alone.
    Yaml(String),
    /// The YAML and the file name that shows in its diagnostics.
    File {
        /// The policy's file name.
        file: String,
        /// The policy's YAML.
        yaml: String,
    },
}

/// A duration: text as the flags take it (`"1m30s"`), or a number of seconds (`90`, `0.5`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Duration {
    /// A number of seconds, more than 0 and at most [`units::MAX_DURATION`].
    Seconds(f64),
    /// Text as `--timeout` takes it.
    Text(String),
}

impl Duration {
    fn check(&self, field: &str) -> Result<std::time::Duration, BadRequest> {
        match self {
            Duration::Seconds(seconds) => {
                units::duration_from_seconds(&seconds.to_string(), *seconds).map_err(|_| {
                    BadRequest::new(
                        field,
                        format!(
                            "invalid {field} {seconds}: a number of seconds more than 0 and at \
                             most {}",
                            units::MAX_DURATION.as_secs()
                        ),
                    )
                })
            }
            Duration::Text(text) => units::parse_duration(text).map_err(|reason| {
                BadRequest::new(field, format!("invalid {field} {text:?}: {reason}"))
            }),
        }
    }
}

/// The request body; only `argv` is required.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The command and its arguments, run in the sandbox.
    pub argv: Vec<String>,
    /// `HOST[:PORT]` destinations allowed, as `--allow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Policies as text, as `--policy` (merged, in order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyText>,
    /// A duration as `--timeout` takes it (`"10s"`, `"500ms"`), or a number of seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// The memory limit, a size as `--memory` takes it (`"256MiB"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The CPU limit, as `--cpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// The process limit, as `--pids`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// The size of `/tmp` (and of `/task`), as `--tmp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<String>,
    /// The bytes of stdout and stderr relayed, as `--output-limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_limit: Option<String>,
    /// In order, as `--env` flags (a list of pairs keeps the order `run` would have).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<EnvVars>,
    /// The working directory inside the sandbox, as `--workdir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// The sandbox image, as `--image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Relative path → base64 contents; written under /task.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// Base64; the command's whole stdin, closed after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// NAME → IP the proxy uses instead of DNS, as `--resolve`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resolve: BTreeMap<String, String>,
    /// `SRC:DST[:rw]`, as `--mount` (paths on the daemon's host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<String>,
    /// The Docker network the proxy reaches the outside through, as `--egress-network`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_network: Option<String>,
    /// Secret values by name, as `--secret` (`docs/src/guide/credentials.md`): handed to the run's
    /// proxy only. `Debug` hides the values.
    #[serde(default, skip_serializing_if = "Secrets::is_empty")]
    pub secrets: Secrets,
    /// PEM CA certificates the proxy trusts for upstream TLS, as `--upstream-ca`: bare PEM
    /// text or `{"file":"…","pem":"…"}` (the name shows in errors).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_ca: Vec<UpstreamCa>,
    /// The sandbox container's OCI runtime, as `--runtime` (one the engine has, e.g. runsc);
    /// takes the cold path unless it is the slots' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Audit records written before the rest are only counted, as `--audit-limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_limit: Option<u64>,
    /// `reserve` or `refuse`, as `--on-audit-limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_audit_limit: Option<String>,
}

/// One `upstream_ca` entry.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum UpstreamCa {
    /// Bare PEM text.
    Pem(String),
    /// PEM text with the file name that shows in errors.
    File(InlineCertificate),
}

/// `env` as an object (`{"K":"V"}`) or as a list of `["K","V"]` pairs.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum EnvVars {
    /// An object, set in the order of its keys.
    Map(BTreeMap<String, String>),
    /// A list of pairs, set in its order.
    Pairs(Vec<(String, String)>),
}

impl EnvVars {
    fn pairs(self) -> Vec<(String, String)> {
        match self {
            EnvVars::Map(map) => map.into_iter().collect(),
            EnvVars::Pairs(pairs) => pairs,
        }
    }
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

    /// A body that is not a valid request, naming the field at fault: the first step of
    /// the path to the error (`argv` for `"argv": "true"`), or the unknown field serde
    /// names, or `body`.
    fn from_json_error(path: &serde_path_to_error::Path, error: &serde_json::Error) -> BadRequest {
        let text = error.to_string();
        let named = text.split('`').nth(1).filter(|_| text.contains("field"));
        let field = match path.iter().next() {
            Some(serde_path_to_error::Segment::Map { key }) => key.as_str(),
            _ => named.unwrap_or("body"),
        };
        BadRequest::new(field, format!("the request is not valid: {text}"))
    }

    fn from_spec(error: SpecError) -> BadRequest {
        match error {
            SpecError::Policy(policy) => {
                let diagnostics: Vec<String> =
                    policy.diagnostics.iter().map(|d| d.to_string()).collect();
                let field = if diagnostics.iter().all(|d| d.starts_with("--allow")) {
                    "allow"
                } else {
                    "policies"
                };
                BadRequest {
                    error: "the policy was refused; nothing was run".into(),
                    field: field.into(),
                    diagnostics,
                }
            }
            SpecError::Invalid {
                flag,
                value,
                reason,
            } => {
                let field = field_of_flag(flag);
                BadRequest::new(field, format!("invalid {field} {value:?}: {reason}"))
            }
            SpecError::AboveLimit {
                flag,
                value,
                policy,
                key,
                limit,
            } => {
                let field = field_of_flag(flag);
                BadRequest::new(
                    field,
                    format!(
                        "{field} {value} is above the limit of policy {policy} ({key}: {limit})"
                    ),
                )
            }
            SpecError::RuntimeNotAllowed { .. } => BadRequest::new("runtime", error.to_string()),
            SpecError::NoCommand => BadRequest::new("argv", error.to_string()),
            SpecError::Pin(_) => BadRequest::new("resolve", error.to_string()),
            SpecError::Credentials(ref credential) => {
                BadRequest::new(credential.field(), credential_message(credential))
            }
            other => BadRequest::new("policies", other.to_string()),
        }
    }
}

/// A credential refusal in the request's terms (`secrets`, `env`, `upstream_ca`), where a
/// run's names the flags.
fn credential_message(error: &CredentialError) -> String {
    match error {
        CredentialError::MissingSecret { name, host } => {
            format!("the credential for {host} needs the secret {name}: give it in secrets")
        }
        CredentialError::UnusedSecret(name) => {
            format!("secrets has {name}, but no credential of the policy uses it")
        }
        CredentialError::DuplicateSecret(name) => format!("secrets has {name} twice"),
        CredentialError::EnvShadowsSecret(name) => format!(
            "env {name} would replace the placeholder of the secret {name}; the sandbox gets \
             {name} from secrets"
        ),
        other => other
            .to_string()
            .replacen("--upstream-ca", "upstream_ca", 1),
    }
}

/// A checked request: the run and its stdin.
pub struct Checked {
    /// The run, built as `run` builds it from its flags.
    pub spec: RunSpec,
    /// The command's whole stdin, decoded (empty when the request has none).
    pub stdin: Vec<u8>,
}

impl RunRequest {
    /// The request from its JSON body.
    pub fn parse(body: &[u8]) -> Result<RunRequest, BadRequest> {
        let mut deserializer = serde_json::Deserializer::from_slice(body);
        serde_path_to_error::deserialize(&mut deserializer)
            .map_err(|error| BadRequest::from_json_error(error.path(), error.inner()))
    }

    /// A request of `argv` with the fields that carry `flags` as the flags take them
    /// ([`RequestField::Same`]); the others are the caller's to fill in (`run --server`).
    pub fn with_flags(
        argv: Vec<String>,
        flags: &FlagValues,
    ) -> Result<RunRequest, serde_json::Error> {
        let mut body = serde_json::Map::new();
        body.insert("argv".into(), argv.into());
        for flag in RUN_FLAGS {
            let RequestField::Same(field) = flag.request else {
                continue;
            };
            let values: Vec<serde_json::Value> = flags.all(flag).iter().map(json_of).collect();
            let value = if flag.repeatable {
                serde_json::Value::Array(values)
            } else {
                match values.into_iter().last() {
                    Some(value) => value,
                    None => continue,
                }
            };
            body.insert(field.into(), value);
        }
        serde_json::from_value(serde_json::Value::Object(body))
    }

    /// The values of the fields that carry a flag's value as the flag takes it.
    fn same_fields(&self) -> Result<FlagValues, BadRequest> {
        let body = serde_json::to_value(self).map_err(|error| {
            BadRequest::new("body", format!("the request is not valid: {error}"))
        })?;
        let mut flags = FlagValues::default();
        for flag in RUN_FLAGS {
            let RequestField::Same(field) = flag.request else {
                continue;
            };
            let values = match body.get(field) {
                None | Some(serde_json::Value::Null) => continue,
                Some(serde_json::Value::Array(items)) if flag.repeatable => items.clone(),
                Some(value) => vec![value.clone()],
            };
            for value in values {
                let value = flag_value_of(flag.value, &value)
                    .ok_or_else(|| BadRequest::new(field, format!("invalid {field} {value}")))?;
                flags.push(flag, value);
            }
        }
        Ok(flags)
    }

    /// Checks every field as `run` checks its flags and builds the run; a refusal names
    /// the field at fault.
    pub fn check(mut self) -> Result<Checked, BadRequest> {
        // Taken out first: handled here, and not copied to read the flags' fields.
        let policies = std::mem::take(&mut self.policies);
        let files = std::mem::take(&mut self.files);
        let stdin = self.stdin.take();
        let secrets = std::mem::take(&mut self.secrets);
        let upstream_ca = std::mem::take(&mut self.upstream_ca);
        let mut builder = RunSpec::builder(std::mem::take(&mut self.argv));
        for (index, policy) in policies.into_iter().enumerate() {
            builder = match policy {
                PolicyText::Yaml(yaml) => {
                    builder.policy_yaml(format!("policy-{}.yaml", index + 1), yaml)
                }
                PolicyText::File { file, yaml } => builder.policy_yaml(file, yaml),
            };
        }
        let spec_error = BadRequest::from_spec;
        if let Some(timeout) = &self.timeout {
            builder = builder.timeout(timeout.check("timeout")?);
        }
        builder = self.same_fields()?.apply(builder).map_err(spec_error)?;
        for raw in self.mounts {
            let (source, target, writable) = run_flags::mount(&raw).map_err(spec_error)?;
            builder = builder.mount(source, target, writable);
        }
        for (key, value) in self.env.map(EnvVars::pairs).unwrap_or_default() {
            builder = builder.env(key, value);
        }
        for (name, ip) in &self.resolve {
            let (name, ip) = pin(name, ip)?;
            builder = builder.resolve(name.as_str(), ip);
        }
        for (path, b64) in files {
            let contents = STANDARD.decode(b64.as_bytes()).map_err(|error| {
                BadRequest::new("files", format!("file {path:?} is not base64: {error}"))
            })?;
            builder = builder.file(path, contents);
        }
        for (name, value) in secrets.0 {
            egress_core::policy::check_secret_name(&name)
                .map_err(|message| BadRequest::new("secrets", message))?;
            let value = check_secret_value(value).map_err(|problem| {
                BadRequest::new("secrets", format!("secret {name}: {problem}"))
            })?;
            builder = builder.secret(name, value);
        }
        for (index, ca) in upstream_ca.into_iter().enumerate() {
            builder = match ca {
                UpstreamCa::Pem(pem) => {
                    builder.upstream_ca_pem(format!("upstream_ca[{index}]"), pem)
                }
                UpstreamCa::File(InlineCertificate { file, pem }) => {
                    builder.upstream_ca_pem(file, pem)
                }
            };
        }
        let stdin = match stdin {
            Some(b64) => STANDARD.decode(b64.as_bytes()).map_err(|error| {
                BadRequest::new("stdin", format!("stdin is not base64: {error}"))
            })?,
            None => Vec::new(),
        };
        let spec = builder.build().map_err(spec_error)?;
        Ok(Checked { spec, stdin })
    }
}

/// One `resolve` entry, NAME → IP, checked as the proxy checks a pin (the name normalised
/// like any target, the address written in full) and refused in the field's terms.
fn pin(
    name: &str,
    ip: &str,
) -> Result<(egress_core::target::HostName, std::net::IpAddr), BadRequest> {
    let refused = |reason: String| {
        BadRequest::new(
            "resolve",
            format!("invalid resolve {name:?}: {ip:?}: {reason}"),
        )
    };
    let host =
        egress_core::target::HostName::parse(name).map_err(|error| refused(error.to_string()))?;
    let ip = egress_core::pin::parse_pin_address(ip).map_err(|error| refused(error.to_string()))?;
    Ok((host, ip))
}

/// A flag's value as a request field holds it.
fn json_of(value: &FlagValue) -> serde_json::Value {
    match value {
        FlagValue::Text(text) => text.clone().into(),
        FlagValue::Path(path) => path.display().to_string().into(),
        FlagValue::Count(count) => (*count).into(),
        FlagValue::Decimal(decimal) => (*decimal).into(),
    }
}

/// A request field's value as the flag of `kind` takes it; `None` when it is of another
/// kind.
fn flag_value_of(kind: ValueKind, value: &serde_json::Value) -> Option<FlagValue> {
    match kind {
        ValueKind::Text => value.as_str().map(|text| FlagValue::Text(text.to_owned())),
        ValueKind::Path => value.as_str().map(|text| FlagValue::Path(text.into())),
        ValueKind::Count => value.as_u64().map(FlagValue::Count),
        ValueKind::Decimal => value.as_f64().map(FlagValue::Decimal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str) -> Result<Checked, BadRequest> {
        RunRequest::parse(json.as_bytes())?.check()
    }

    /// Every field of the request is a run flag's (from the table) or the API's own, and
    /// every flag the table gives a field has it: a flag cannot be added to one without the
    /// other.
    #[test]
    fn the_request_fields_are_the_flag_tables_and_the_apis_own() {
        const API_ONLY: [&str; 3] = ["argv", "files", "stdin"];
        let refused = check(r#"{"argv":["x"],"no_such_field":1}"#).err().unwrap();
        let (_, expected) = refused.error.split_once("expected one of ").unwrap();
        let fields: Vec<&str> = expected
            .split(", ")
            .map(|field| field.split('`').nth(1).unwrap())
            .collect();
        let flag_fields: Vec<&str> = RUN_FLAGS.iter().filter_map(|flag| flag.field()).collect();
        for field in &fields {
            assert!(
                API_ONLY.contains(field) || flag_fields.contains(field),
                "{field} is in the request but no flag of the table names it"
            );
        }
        for field in &flag_fields {
            assert!(
                fields.contains(field),
                "{field} is in the table but not the request"
            );
        }
    }

    /// The fields that carry a flag as it is go into a request and back out as the flags'
    /// values, through each flag's own code.
    #[test]
    fn fields_that_carry_a_flag_as_it_is_are_read_as_the_flag() {
        use crate::run_flags::table;
        let mut flags = FlagValues::default();
        flags.push(&table::ALLOW, FlagValue::Text("a.example".into()));
        flags.push(&table::ALLOW, FlagValue::Text("b.example:8443".into()));
        flags.push(&table::CPUS, FlagValue::Decimal(1.5));
        flags.push(&table::PIDS, FlagValue::Count(64));
        flags.push(&table::MEMORY, FlagValue::Text("64MiB".into()));
        flags.push(&table::RUNTIME, FlagValue::Text("runsc".into()));
        // Not a field of its own form, and not of the request at all: left to the caller.
        flags.push(&table::TIMEOUT, FlagValue::Text("5s".into()));
        flags.push(&table::REPORT, FlagValue::Path("r.json".into()));
        let request = RunRequest::with_flags(vec!["x".into()], &flags).unwrap();
        assert_eq!(request.allow, ["a.example", "b.example:8443"]);
        assert_eq!(
            (request.cpus, request.pids, request.memory.as_deref()),
            (Some(1.5), Some(64), Some("64MiB"))
        );
        assert_eq!(request.timeout, None);
        let read = request.same_fields().unwrap();
        for flag in [
            &table::ALLOW,
            &table::CPUS,
            &table::PIDS,
            &table::MEMORY,
            &table::RUNTIME,
        ] {
            assert_eq!(read.all(flag), flags.all(flag), "--{}", flag.long);
        }
        assert!(read.all(&table::TIMEOUT).is_empty());
        let checked = request.check().ok().unwrap();
        assert_eq!(checked.spec.runtime(), Some("runsc"));
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
