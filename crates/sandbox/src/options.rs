//! [`RunOptions`]: a run's settings as a front end is given them. The command line's run
//! flags (with the `clap` feature), the fields of a `serve` request (serde) and the bounds
//! an MCP server is started with are this one type; [`RunOptions::builder`] checks them
//! into a [`RunSpecBuilder`] (the typed values a library caller gives directly), and every
//! refusal names its [`Field`], which each front end shows in its own terms ([`Names`]).
//!
//! The values are kept as they were written (`"256MiB"`, `"10s"`, `"SRC:DST:rw"`) and
//! parsed when the run is built, by the same parsers a policy's values go through
//! (`egress_core::units`, `egress_core::pin`): what was typed is what a refusal quotes.
//! Where the command line and a request carry a setting differently — a policy file against
//! its text, a secret's source against its value — the value is an enum of both forms; a
//! front end that hands a run to a daemon turns the local forms into the carried ones
//! ([`RunOptions::carried`]).

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use egress_core::handoff::InlineCertificate;
use egress_core::pin::parse_pin_address;
use egress_core::target::HostName;
use egress_core::units;

use crate::spec::{MIN_MEMORY, RunSpecBuilder, SpecError};

mod field;
mod forms;
mod secret_source;

pub use field::{Field, Names};
pub use forms::{EnvVar, Pin, PolicyText, SecretGiven, TimeLimit, UpstreamCa};
pub use secret_source::{SecretError, check_secret_value, read_secret_flag};

/// Every setting of a run a front end carries but the command itself (and a request's
/// `files` and `stdin`). Unset fields take the run's defaults, or a policy's ceiling where
/// it is lower.
///
/// Serialised, it is the fields of a `serve` request (`docs/src/reference/api.md`); as clap
/// arguments, `run`'s flags (`docs/src/reference/cli.md`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunOptions {
    /// Policy file (YAML); repeatable, policies merge
    #[cfg_attr(feature = "clap", arg(short = 'p', long = "policy", value_name = "FILE",
        value_parser = clap::builder::ValueParser::new(PolicyText::from_file_flag)))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<PolicyText>,
    /// Allowed destinations, `HOST` or `HOST:PORT` (port default 443); repeatable
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_name = "HOST[:PORT]",
            help = "Allow HOST[:PORT] (port default 443); repeatable"
        )
    )]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Sandbox image; default: the built-in base image (Debian, python3, node, curl)
    #[cfg_attr(feature = "clap", arg(long, value_name = "IMAGE"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Time limit, e.g. 500ms, 10s, 2m [default: 30s]
    #[cfg_attr(feature = "clap", arg(long, value_name = "DURATION",
        value_parser = clap::builder::ValueParser::new(TimeLimit::from_flag)))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<TimeLimit>,
    /// Memory limit, e.g. 256MiB [default: 256MiB]
    #[cfg_attr(feature = "clap", arg(long, value_name = "SIZE"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// CPUs [default: 1]
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Process limit [default: 128]
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Size of the writable /tmp [default: 64MiB]
    #[cfg_attr(feature = "clap", arg(long, value_name = "SIZE"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<String>,
    /// Bytes of stdout+stderr relayed; the rest is dropped with a marker [default: 1MiB]
    #[cfg_attr(feature = "clap", arg(long = "output-limit", value_name = "SIZE"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_limit: Option<String>,
    /// Mount SRC at DST, read-only unless :rw; repeatable
    #[cfg_attr(feature = "clap", arg(long = "mount", value_name = "SRC:DST[:rw]"))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<String>,
    /// Set KEY=VALUE in the sandbox; nothing else from the host environment enters
    #[cfg_attr(feature = "clap", arg(long, value_name = "KEY=VALUE",
        value_parser = clap::builder::ValueParser::new(EnvVar::from_flag)))]
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "forms::env_vars"
    )]
    pub env: Vec<EnvVar>,
    /// Working directory inside the sandbox
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Audit records written for the run; past it the proxy only counts refused attempts (the report and summary say how many were dropped), and --on-audit-limit says what new egress gets [default: 100000]
    #[cfg_attr(feature = "clap", arg(long = "audit-limit", value_name = "N"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_limit: Option<u64>,
    /// Past --audit-limit: `reserve` keeps writing allowed attempts' records from a reserve of as many again and refuses new egress once it is spent; `refuse` refuses new egress at once. Nothing leaves unrecorded either way [default: reserve]
    #[cfg_attr(
        feature = "clap",
        arg(long = "on-audit-limit", value_name = "reserve|refuse")
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_audit_limit: Option<String>,
    /// The proxy uses IP for NAME instead of DNS; the floor still applies. Repeatable
    #[cfg_attr(feature = "clap", arg(long, value_name = "NAME=IP",
        value_parser = clap::builder::ValueParser::new(Pin::from_flag)))]
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "forms::pins")]
    pub resolve: Vec<Pin>,
    /// Docker network the proxy uses to reach the outside [default: a bridge the tool manages]
    #[cfg_attr(feature = "clap", arg(long = "egress-network", value_name = "NAME"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_network: Option<String>,
    /// OCI runtime of the sandbox container (one the engine has, e.g. runc, runsc) [default: the engine's default]
    #[cfg_attr(feature = "clap", arg(long, value_name = "NAME"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// A secret a policy credential uses: NAME (this process's env var NAME), NAME=env:VAR or NAME=file:PATH (one trailing newline dropped); repeatable. Only the proxy gets the value; the sandbox's env var NAME holds a random placeholder
    #[cfg_attr(feature = "clap", arg(long = "secret", value_name = "NAME[=env:VAR|=file:PATH]",
        value_parser = clap::builder::ValueParser::new(SecretGiven::from_flag)))]
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "forms::secrets"
    )]
    pub secrets: Vec<SecretGiven>,
    /// Extra PEM CA the proxy trusts for upstream TLS of inspected hosts (besides the Mozilla roots); repeatable
    #[cfg_attr(feature = "clap", arg(long = "upstream-ca", value_name = "FILE",
        value_parser = clap::builder::ValueParser::new(UpstreamCa::from_file_flag)))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_ca: Vec<UpstreamCa>,
}

fn invalid(field: Field, value: &str, reason: impl ToString) -> SpecError {
    SpecError::Invalid {
        field,
        value: value.to_owned(),
        reason: reason.to_string(),
    }
}

/// `256MiB`, `1GB`, `65536` ([`units::parse_size`]; zero refused, as in a policy). A memory
/// limit below what Docker takes is refused here, quoting what was typed (`"10"`, not the
/// bytes it came to).
pub fn parse_size(field: Field, raw: &str) -> Result<u64, SpecError> {
    let value = units::parse_size(raw).map_err(|error| invalid(field, raw, error))?;
    if field == Field::Memory && value < MIN_MEMORY {
        return Err(invalid(field, raw, "Docker needs at least 6MiB"));
    }
    Ok(value)
}

/// `SRC:DST[:rw|:ro]` → (source, target, writable).
pub fn parse_mount(raw: &str) -> Result<(PathBuf, String, bool), SpecError> {
    let (rest, writable) = if let Some(rest) = raw.strip_suffix(":rw") {
        (rest, true)
    } else if let Some(rest) = raw.strip_suffix(":ro") {
        (rest, false)
    } else {
        (raw, false)
    };
    match rest.split_once(':') {
        Some((source, target)) if !source.is_empty() && !target.is_empty() => {
            Ok((PathBuf::from(source), target.to_string(), writable))
        }
        _ => Err(invalid(Field::Mounts, raw, "expected SRC:DST[:rw]")),
    }
}

impl RunOptions {
    /// The run of `command` these options describe, as a builder: every value parsed and
    /// checked in the order the fields are listed (the first refused is the error), policy
    /// files and secret sources read. [`RunSpecBuilder::build`] checks the rest.
    pub fn builder(self, command: Vec<String>) -> Result<RunSpecBuilder, SpecError> {
        let mut builder = crate::RunSpec::builder(command);
        for (index, policy) in self.policies.into_iter().enumerate() {
            builder = match policy {
                PolicyText::File(path) => builder.policy_file(path),
                PolicyText::Yaml(yaml) => {
                    builder.policy_yaml(format!("policy-{}.yaml", index + 1), yaml)
                }
                PolicyText::Named { file, yaml } => builder.policy_yaml(file, yaml),
            };
        }
        for host in self.allow {
            builder = builder.allow(host);
        }
        if let Some(image) = self.image {
            builder = builder.image(image);
        }
        if let Some(timeout) = self.timeout {
            builder = builder.timeout(timeout.duration()?);
        }
        if let Some(raw) = self.memory {
            builder = builder.memory(parse_size(Field::Memory, &raw)?);
        }
        if let Some(cpus) = self.cpus {
            builder = builder.cpus(cpus);
        }
        if let Some(pids) = self.pids {
            builder = builder.pids(pids);
        }
        if let Some(raw) = self.tmp {
            builder = builder.tmp(parse_size(Field::Tmp, &raw)?);
        }
        if let Some(raw) = self.output_limit {
            builder = builder.output_limit(parse_size(Field::OutputLimit, &raw)?);
        }
        for raw in &self.mounts {
            let (source, target, writable) = parse_mount(raw)?;
            builder = builder.mount(source, target, writable);
        }
        for var in self.env {
            let (key, value) = var.pair()?;
            builder = builder.env(key, value);
        }
        if let Some(dir) = self.workdir {
            builder = builder.workdir(dir);
        }
        if let Some(records) = self.audit_limit {
            builder = builder.audit_limit(records);
        }
        if let Some(raw) = self.on_audit_limit {
            let on_limit = raw
                .parse()
                .map_err(|error| invalid(Field::OnAuditLimit, &raw, error))?;
            builder = builder.on_audit_limit(on_limit);
        }
        for pin in &self.resolve {
            let (name, ip) = pin.parse()?;
            builder = builder.resolve(name.as_str(), ip);
        }
        if let Some(network) = self.egress_network {
            builder = builder.egress_network(network);
        }
        if let Some(runtime) = self.runtime {
            builder = builder.runtime(runtime);
        }
        for secret in self.secrets {
            let (name, value) = secret.read()?;
            builder = builder.secret(name, value);
        }
        for (index, ca) in self.upstream_ca.into_iter().enumerate() {
            builder = match ca {
                UpstreamCa::File(path) => builder.upstream_ca(path),
                UpstreamCa::Pem(pem) => {
                    builder.upstream_ca_pem(format!("upstream_ca[{index}]"), pem)
                }
                UpstreamCa::Named(InlineCertificate { file, pem }) => {
                    builder.upstream_ca_pem(file, pem)
                }
            };
        }
        Ok(builder)
    }

    /// These options in the forms a request carries, for a daemon that sees neither this
    /// process's files nor its environment: policy files read (sent with their names),
    /// relative mount sources made absolute, and the secrets and upstream CAs as `checked`
    /// read them (the run built from these options).
    pub fn carried(mut self, checked: &crate::RunCredentials) -> Result<RunOptions, SpecError> {
        for policy in &mut self.policies {
            if let PolicyText::File(path) = policy {
                let yaml =
                    std::fs::read_to_string(&*path).map_err(|cause| SpecError::PolicyRead {
                        path: path.clone(),
                        cause,
                    })?;
                *policy = PolicyText::Named {
                    file: path.display().to_string(),
                    yaml,
                };
            }
        }
        for mount in &mut self.mounts {
            let (source, target, writable) = parse_mount(mount)?;
            let source = std::path::absolute(&source).unwrap_or(source);
            let suffix = if writable { ":rw" } else { "" };
            *mount = format!("{}:{target}{suffix}", source.display());
        }
        self.secrets = checked
            .secret_values()
            .map(|(name, value)| SecretGiven::Value {
                name: name.to_owned(),
                value: value.clone(),
            })
            .collect();
        self.upstream_ca = checked
            .upstream_ca()
            .iter()
            .cloned()
            .map(UpstreamCa::Named)
            .collect();
        Ok(self)
    }
}

/// A pin's name and address, checked as the proxy checks a pin (the name normalised like
/// any target, the address written in full).
fn check_pin(name: &str, address: &str) -> Result<(HostName, IpAddr), String> {
    let host = HostName::parse(name).map_err(|error| error.to_string())?;
    let ip = parse_pin_address(address).map_err(|error| error.to_string())?;
    Ok((host, ip))
}

#[cfg(test)]
mod tests;
