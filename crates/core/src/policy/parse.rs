//! YAML → [`Policy`], strictly: unknown keys, duplicate keys, wrong types, a missing or
//! unknown `version` are errors with the line and column where they are. The parser runs
//! under a tight budget (a policy is a few kilobytes; [`MAX_POLICY_BYTES`] is refused
//! before parsing, aliases are bounded) so a hostile file cannot make `policy check` or a
//! run's set-up hang.
//!
//! This file reads the top-level keys (`version`, `name`, `mode`) and collects every
//! section's findings; each section has its own file: `rules` (`allow:`, `deny:`),
//! `limits`, `tls`, `credentials`. `yaml` holds the parser's options and error wording,
//! `ports` the port syntax the sections share.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_saphyr::{Location, Spanned};

use super::host_pattern::PatternUse;
use super::shadow::shadow_warnings;
use super::{Diagnostic, Mode, Policy, PolicyError};
use credentials::{RawCredential, build_credentials, check_credentials_admitted};
use limits::{RawLimits, build_limits};
use rules::{RawRule, build_rules};
use tls::{RawTls, build_tls};
use yaml::{parser_options, position, quoted_scalar_at, yaml_error};

mod credentials;
mod limits;
mod ports;
mod rules;
mod tls;
mod yaml;

pub use credentials::check_secret_name;
pub(crate) use ports::parse_port;

/// Largest policy file accepted: 1 MiB (10,000 rules fit in a third of that).
pub const MAX_POLICY_BYTES: usize = 1024 * 1024;
/// Longest policy name: it appears in every audit record.
pub(super) const MAX_POLICY_NAME_BYTES: usize = 64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    version: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    mode: Option<Spanned<String>>,
    allow: Option<Vec<Spanned<RawRule>>>,
    deny: Option<Vec<Spanned<RawRule>>>,
    limits: Option<RawLimits>,
    tls: Option<RawTls>,
    credentials: Option<Vec<Spanned<RawCredential>>>,
}

/// Collects diagnostics for one source file.
pub(crate) struct Findings<'a> {
    pub(crate) file: &'a str,
    pub(crate) errors: Vec<Diagnostic>,
    pub(crate) warnings: Vec<Diagnostic>,
}

impl<'a> Findings<'a> {
    pub(crate) fn new(file: &'a str) -> Self {
        Findings {
            file,
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn error_at(&mut self, location: &Location, message: impl Into<String>) {
        let (line, column) = position(location);
        self.errors
            .push(Diagnostic::error(self.file, line, column, message));
    }

    fn warning_at(&mut self, location: &Location, message: impl Into<String>) {
        let (line, column) = position(location);
        self.warnings
            .push(Diagnostic::warning(self.file, line, column, message));
    }
}

impl Policy {
    /// `file` names the source in diagnostics and gives the default name (file stem).
    /// Returns the policy and its warnings.
    pub fn from_yaml(file: &str, text: &str) -> Result<(Policy, Vec<Diagnostic>), PolicyError> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::single(Diagnostic::error(
                file,
                1,
                1,
                format!(
                    "the policy is {} bytes; the limit is {MAX_POLICY_BYTES} (1 MiB)",
                    text.len()
                ),
            )));
        }
        let raw: RawPolicy = serde_saphyr::from_str_with_options(text, parser_options())
            .map_err(|error| PolicyError::single(yaml_error(file, &error)))?;
        let mut findings = Findings::new(file);
        if let Some(version) = &raw.version
            && quoted_scalar_at(text, &version.referenced)
            && version.value.trim() == "1"
        {
            findings.warning_at(
                &version.referenced,
                "`version` is the number 1; the string \"1\" is read as 1 (write `version: 1`)",
            );
        }
        let policy = build(&mut findings, raw);
        let by_position = |d: &Diagnostic| (d.line, d.column);
        findings.errors.sort_by_key(by_position);
        findings.warnings.sort_by_key(by_position);
        if findings.errors.is_empty() {
            Ok((policy, findings.warnings))
        } else {
            let mut diagnostics = findings.errors;
            diagnostics.extend(findings.warnings);
            Err(PolicyError { diagnostics })
        }
    }

    /// Reads `path` (refusing huge files before parsing) and calls `from_yaml`.
    pub fn load(path: &Path) -> Result<(Policy, Vec<Diagnostic>), PolicyError> {
        let file = path.display().to_string();
        // About the file as a whole: no line or column to point at (0:0 is shown as none).
        let refuse = |message: String| PolicyError::single(Diagnostic::error(&file, 0, 0, message));
        let metadata =
            std::fs::metadata(path).map_err(|error| refuse(format!("cannot read: {error}")))?;
        if !metadata.is_file() {
            return Err(refuse("not a regular file".to_owned()));
        }
        if metadata.len() > MAX_POLICY_BYTES as u64 {
            return Err(refuse(format!(
                "the policy is {} bytes; the limit is {MAX_POLICY_BYTES} (1 MiB)",
                metadata.len()
            )));
        }
        let bytes = std::fs::read(path).map_err(|error| refuse(format!("cannot read: {error}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| refuse("the policy is not UTF-8 text".to_owned()))?;
        Policy::from_yaml(&file, &text)
    }
}

fn build(findings: &mut Findings<'_>, raw: RawPolicy) -> Policy {
    match &raw.version {
        None => findings.errors.push(Diagnostic::error(
            findings.file,
            1,
            1,
            "missing `version: 1`",
        )),
        Some(version) if version.value.trim() != "1" => findings.error_at(
            &version.referenced,
            format!(
                "unsupported version `{}`; this tool reads `version: 1`",
                version.value
            ),
        ),
        Some(_) => {}
    }
    let name = match &raw.name {
        Some(name) => {
            if let Err(message) = check_policy_name(&name.value) {
                findings.error_at(&name.referenced, message);
            }
            name.value.clone()
        }
        None => default_name(findings.file),
    };
    let mode = match &raw.mode {
        None => Mode::Enforce,
        Some(mode) => match mode.value.as_str() {
            "enforce" => Mode::Enforce,
            "report" => Mode::Report,
            other => {
                findings.error_at(
                    &mode.referenced,
                    format!("unknown mode `{other}`; use `enforce` or `report`"),
                );
                Mode::Enforce
            }
        },
    };
    let allow = build_rules(findings, raw.allow.unwrap_or_default(), PatternUse::Allow);
    let deny = build_rules(findings, raw.deny.unwrap_or_default(), PatternUse::Deny);
    let limits = raw
        .limits
        .map(|limits| build_limits(findings, limits))
        .unwrap_or_default();
    let tls = raw
        .tls
        .map(|tls| build_tls(findings, tls))
        .unwrap_or_default();
    let credentials = build_credentials(findings, raw.credentials.unwrap_or_default());
    if findings.errors.is_empty() {
        findings
            .warnings
            .extend(shadow_warnings(findings.file, &allow, &deny));
    }
    let policy = Policy {
        name: Arc::from(name),
        mode,
        limits,
        tls,
        allow,
        deny,
        credentials,
    };
    if findings.errors.is_empty() {
        check_credentials_admitted(findings, &policy);
    }
    policy
}

/// Policy names go into audit records and are joined with `+`: keep them plain.
pub(crate) fn check_policy_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("`name` is empty".to_owned());
    }
    if name.len() > MAX_POLICY_NAME_BYTES {
        return Err(format!(
            "`name` is {} bytes; the limit is {MAX_POLICY_NAME_BYTES}",
            name.len()
        ));
    }
    if !name.bytes().all(is_name_byte) {
        return Err(format!(
            "`name` `{}` may only contain letters, digits, `.`, `_` and `-`",
            name.escape_default()
        ));
    }
    // Records name the policy that decided: these two names already mean something there.
    match name {
        "none" => Err(
            "`name` `none` is reserved: records say `policy: none` when no policy applies (every host refused)"
                .to_owned(),
        ),
        "cli" => Err("`name` `cli` is reserved: it names the rules of `--allow` flags".to_owned()),
        _ => Ok(()),
    }
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// The file name without directory and extension, made a valid policy name.
fn default_name(file: &str) -> String {
    let stem = Path::new(file)
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut name: String = stem
        .chars()
        .map(|ch| {
            if ch.is_ascii() && is_name_byte(ch as u8) {
                ch
            } else {
                '-'
            }
        })
        .take(MAX_POLICY_NAME_BYTES)
        .collect();
    if name.is_empty() {
        name.push_str("policy");
    }
    name
}
