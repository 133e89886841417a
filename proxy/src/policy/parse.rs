//! YAML → [`Policy`], strictly: unknown keys, duplicate keys, wrong types, a missing or
//! unknown `version` are errors with the line and column where they are. The parser runs
//! under a tight budget (a policy is a few kilobytes; [`MAX_POLICY_BYTES`] is refused
//! before parsing, aliases are bounded) so a hostile file cannot make `policy check` or a
//! run's set-up hang.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use serde_saphyr::{Location, Spanned};

use super::credential::{Credential, check_header_name, check_secret_name, check_value_template};
use super::host_pattern::{HostPattern, PatternUse, parse_host_pattern};
use super::request::{RequestRules, parse_method, parse_path_pattern};
use super::shadow::shadow_warnings;
use super::{
    Diagnostic, Limits, Mode, Policy, PolicyError, PortSet, Rule, RuleTarget, SniCheck, TlsSettings,
};

/// Largest policy file accepted: 1 MiB (10,000 rules fit in a third of that).
pub const MAX_POLICY_BYTES: usize = 1024 * 1024;
/// Longest policy name: it appears in every audit record.
pub const MAX_POLICY_NAME_BYTES: usize = 64;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCredential {
    host: Option<Spanned<String>>,
    port: Option<Spanned<String>>,
    secret: Option<Spanned<String>>,
    header: Option<Spanned<String>>,
    value: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    host: Option<Spanned<String>>,
    cidr: Option<Spanned<String>>,
    ports: Option<Spanned<Vec<Spanned<String>>>>,
    methods: Option<Spanned<Vec<Spanned<String>>>>,
    paths: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    timeout: Option<Spanned<String>>,
    memory: Option<Spanned<String>>,
    cpus: Option<Spanned<String>>,
    pids: Option<Spanned<String>>,
    tmp: Option<Spanned<String>>,
    output: Option<Spanned<String>>,
    runtime: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ports: Option<Spanned<Vec<Spanned<String>>>>,
    sni: Option<Spanned<String>>,
}

/// Parser options: duplicate keys refused, a single document, small structural budget and
/// alias replay bounded so an alias bomb fails within milliseconds. Merge keys (`<<`) are
/// refused: a key written next to `<<` silently wins over the merged one, and
/// `<<: [{host: a}, {host: b}]` keeps only `a`, so a deny rule a reviewer reads as two can
/// refuse one host. Anchors and aliases of plain values (one ports list) stay allowed.
fn parser_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::Error,
        merge_keys: serde_saphyr::options::MergeKeyPolicy::Error,
        strict_booleans: true,
        // A `!!binary` scalar stays its visible text: a reviewer must see the host a rule
        // allows, not a base64 blob that decodes to it.
        ignore_binary_tag_for_string: true,
        reject_unsupported_tags: true,
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: Some(MAX_POLICY_BYTES),
            max_events: 400_000,
            max_nodes: 200_000,
            max_depth: 16,
            max_documents: 1,
            max_aliases: 10_000,
            max_anchors: 1_000,
            max_recorded_anchor_events: 10_000,
            max_recorded_anchor_bytes: 64 * 1024,
            max_total_scalar_bytes: MAX_POLICY_BYTES,
            // Refused above; no budget to spend.
            max_merge_keys: 0,
            // One anchored ports list reused by every rule is legitimate; the replay caps
            // below are what bound the work.
            enforce_alias_anchor_ratio: false,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 100_000,
            max_replay_stack_depth: 8,
            max_alias_expansions_per_anchor: 10_000,
        },
    }
}

/// Whether the scalar at `location` is written in quotes (`"1"`, `'1'`): YAML makes it a
/// string where the unquoted form would be a number.
fn quoted_scalar_at(text: &str, location: &Location) -> bool {
    let (line, column) = position(location);
    text.lines()
        .nth(line.saturating_sub(1))
        .and_then(|line| line.chars().nth(column.saturating_sub(1)))
        .is_some_and(|c| c == '"' || c == '\'')
}

fn position(location: &Location) -> (usize, usize) {
    (
        usize::try_from(location.line()).unwrap_or(usize::MAX),
        usize::try_from(location.column()).unwrap_or(usize::MAX),
    )
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

/// A serde-saphyr error as a diagnostic: its location, its message without the trailing
/// "at line L, column C" (the location is already in front) and without hints about
/// library options.
fn yaml_error(file: &str, error: &serde_saphyr::Error) -> Diagnostic {
    let (line, column) = error
        .location()
        .map(|location| position(&location))
        .filter(|&(line, column)| line > 0 && column > 0)
        .unwrap_or((1, 1));
    let mut message = error.without_snippet().to_string();
    if let Some(cut) = message.find(" (defined at line ") {
        // Reached through an alias: say where the anchor is.
        message.truncate(cut);
        if let Some(locations) = error.locations() {
            let (line, column) = position(&locations.defined_location);
            message.push_str(&format!(
                " (through an alias of the anchor at {line}:{column})"
            ));
        }
    } else if let Some(cut) = message.rfind(" at line ")
        && message[cut + " at line ".len()..]
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b',' || b == b' ' || b.is_ascii_lowercase())
    {
        message.truncate(cut);
    }
    let message = message
        .replace(", set DuplicateKeyPolicy in Options if acceptable", "")
        .replace("expected string scalar", "expected a single value here")
        .replace("budget breached: ", "parser budget exceeded: ")
        .replace(
            "YAML merge keys are not allowed by configured policy",
            "merge keys (`<<`) are not accepted in a policy (what they merge is easy to misread); write each rule and key out",
        )
        .replace(
            "expected mapping start",
            "expected a mapping (`key: value` lines, e.g. `host: api.example.com`) here",
        )
        .replace(
            "expected sequence start",
            "expected a list (`- item` lines, or `[a, b]`) here",
        );
    let mut message = message.lines().next().unwrap_or_default().to_owned();
    if message.starts_with("parser budget exceeded: Documents") {
        message = "a policy is one YAML document; a second one (`---`) begins here".to_owned();
    }
    Diagnostic::error(file, line, column, format!("YAML: {message}"))
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

/// `credentials:` entries: exact host, port, secret name, header, value template. Two
/// credentials for one host and port are an error: which one applies would be a guess.
fn build_credentials(
    findings: &mut Findings<'_>,
    raw_credentials: Vec<Spanned<RawCredential>>,
) -> Vec<Credential> {
    let mut credentials: Vec<Credential> = Vec::with_capacity(raw_credentials.len());
    for (index, raw_credential) in raw_credentials.into_iter().enumerate() {
        let location = raw_credential.referenced;
        let raw = raw_credential.value;
        let errors_before = findings.errors.len();
        let host = match &raw.host {
            None => {
                findings.error_at(
                    &location,
                    format!("credentials[{index}] needs a `host` (the exact name it is sent to)"),
                );
                None
            }
            Some(host) => match parse_host_pattern(&host.value, PatternUse::Allow) {
                Ok(checked) => match checked.pattern {
                    HostPattern::Exact(name) => Some(
                        crate::target::HostName::parse(&name)
                            .expect("an exact host pattern is a valid name"),
                    ),
                    HostPattern::Wildcard(_) => {
                        findings.error_at(
                            &host.referenced,
                            format!(
                                "credentials[{index}]: a credential goes to one exact host, never a wildcard"
                            ),
                        );
                        None
                    }
                },
                Err(message) => {
                    findings.error_at(&host.referenced, format!("credentials[{index}]: {message}"));
                    None
                }
            },
        };
        let port = match &raw.port {
            None => Some(443),
            Some(port) => match parse_port(&port.value) {
                Ok(port) => Some(port),
                Err(message) => {
                    findings.error_at(&port.referenced, message);
                    None
                }
            },
        };
        let secret = match &raw.secret {
            None => {
                findings.error_at(
                    &location,
                    format!("credentials[{index}] needs a `secret` (the secret's name)"),
                );
                None
            }
            Some(secret) => match check_secret_name(&secret.value) {
                Ok(()) => Some(secret.value.clone()),
                Err(message) => {
                    findings.error_at(&secret.referenced, message);
                    None
                }
            },
        };
        let header = match &raw.header {
            None => Some("authorization".to_owned()),
            Some(header) => match check_header_name(&header.value) {
                Ok(name) => Some(name),
                Err(message) => {
                    findings.error_at(&header.referenced, message);
                    None
                }
            },
        };
        let value = match &raw.value {
            None => Some("Bearer {secret}".to_owned()),
            Some(value) => match check_value_template(&value.value) {
                Ok(()) => Some(value.value.clone()),
                Err(message) => {
                    findings.error_at(&value.referenced, message);
                    None
                }
            },
        };
        if findings.errors.len() != errors_before {
            continue;
        }
        let (Some(host), Some(port), Some(secret), Some(header), Some(value)) =
            (host, port, secret, header, value)
        else {
            continue;
        };
        if let Some(earlier) = credentials
            .iter()
            .find(|c| c.host == host && c.port == port)
        {
            findings.error_at(
                &location,
                format!(
                    "credentials[{index}]: {host}:{port} already has a credential (line {}); one host and port take one credential",
                    earlier.line
                ),
            );
            continue;
        }
        let (line, column) = position(&location);
        credentials.push(Credential {
            host,
            port,
            secret,
            header,
            value,
            line,
            column,
        });
    }
    credentials
}

/// A credential is only ever sent where the same policy lets the request go: an allow
/// rule must admit its host and port (and no deny rule refuse them).
fn check_credentials_admitted(findings: &mut Findings<'_>, policy: &Policy) {
    if policy.credentials.is_empty() {
        return;
    }
    let alone = super::PolicySet::from(policy.clone());
    for credential in &policy.credentials {
        let target = crate::target::Target::Name(credential.host.clone());
        let decision = alone.decide(&target, credential.port);
        if decision.verdict != super::Verdict::Allow {
            findings.errors.push(Diagnostic::error(
                findings.file,
                credential.line,
                credential.column,
                format!(
                    "credential for {}:{}: no allow rule of this policy admits it ({})",
                    credential.host, credential.port, decision.reason
                ),
            ));
        }
    }
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

fn build_rules(
    findings: &mut Findings<'_>,
    raw_rules: Vec<Spanned<RawRule>>,
    used_in: PatternUse,
) -> Vec<Rule> {
    let list = match used_in {
        PatternUse::Allow => "allow",
        PatternUse::Deny => "deny",
    };
    let mut rules = Vec::with_capacity(raw_rules.len());
    for (index, raw_rule) in raw_rules.into_iter().enumerate() {
        let rule_location = raw_rule.referenced;
        let raw = raw_rule.value;
        let target = match (raw.host, raw.cidr) {
            (Some(_), Some(cidr)) => {
                findings.error_at(
                    &cidr.referenced,
                    format!("{list}[{index}] has both `host` and `cidr`; write two rules"),
                );
                None
            }
            (None, None) => {
                findings.error_at(
                    &rule_location,
                    format!("{list}[{index}] needs a `host` or a `cidr`"),
                );
                None
            }
            (Some(host), None) => match parse_host_pattern(&host.value, used_in) {
                Ok(checked) => {
                    for warning in checked.warnings {
                        findings.warning_at(&host.referenced, warning);
                    }
                    Some(RuleTarget::Host(checked.pattern))
                }
                Err(message) => {
                    findings.error_at(&host.referenced, message);
                    None
                }
            },
            (None, Some(cidr)) => match parse_cidr(&cidr.value) {
                Ok(net) => {
                    if used_in == PatternUse::Allow
                        && let Some(warning) = private_cidr_warning(net)
                    {
                        findings.warning_at(&cidr.referenced, warning);
                    }
                    Some(RuleTarget::Cidr(net))
                }
                Err(message) => {
                    findings.error_at(&cidr.referenced, message);
                    None
                }
            },
        };
        let default_ports = match used_in {
            PatternUse::Allow => PortSet::List(vec![443]),
            PatternUse::Deny => PortSet::Any,
        };
        let ports = match raw.ports {
            None => Some(default_ports),
            Some(ports) => parse_port_list(findings, &ports, "ports").map(PortSet::List),
        };
        let request = build_request_rules(
            findings,
            &format!("{list}[{index}]"),
            raw.methods,
            raw.paths,
            used_in,
            target.as_ref(),
        );
        if let (Some(target), Some(ports), Some(request)) = (target, ports, request) {
            let (line, column) = position(&rule_location);
            rules.push(Rule {
                target,
                ports,
                request,
                line,
                column,
            });
        }
    }
    rules
}

/// `methods:` and `paths:` of a rule: allow rules on an exact host only (the run CA signs
/// exact names, and a deny rule refuses whole hosts). None after an error.
fn build_request_rules(
    findings: &mut Findings<'_>,
    rule_name: &str,
    methods: Option<Spanned<Vec<Spanned<String>>>>,
    paths: Option<Spanned<Vec<Spanned<String>>>>,
    used_in: PatternUse,
    target: Option<&RuleTarget>,
) -> Option<RequestRules> {
    let first = match (&methods, &paths) {
        (Some(methods), _) => methods.referenced,
        (None, Some(paths)) => paths.referenced,
        (None, None) => return Some(RequestRules::default()),
    };
    if used_in == PatternUse::Deny {
        findings.error_at(
            &first,
            format!("{rule_name}: `methods` and `paths` narrow allow rules; a deny rule refuses the whole host"),
        );
        return None;
    }
    match target {
        Some(RuleTarget::Host(HostPattern::Exact(_))) => {}
        Some(RuleTarget::Host(HostPattern::Wildcard(_))) => {
            findings.error_at(
                &first,
                format!("{rule_name}: `methods` and `paths` need an exact host (the proxy inspects exact names only)"),
            );
            return None;
        }
        Some(RuleTarget::Cidr(_)) => {
            findings.error_at(
                &first,
                format!("{rule_name}: `methods` and `paths` need a `host` rule, not a `cidr` rule"),
            );
            return None;
        }
        // The target's own error is already reported.
        None => return None,
    }
    let mut ok = true;
    let mut rules = RequestRules::default();
    for (key, list, parse) in [
        (
            "methods",
            methods,
            parse_method as fn(&str) -> Result<String, String>,
        ),
        ("paths", paths, |raw: &str| {
            parse_path_pattern(raw).map(|p| p.to_string())
        }),
    ] {
        let Some(list) = list else { continue };
        if list.value.is_empty() {
            findings.error_at(
                &list.referenced,
                format!(
                    "{rule_name}: `{key}` is empty; omit it to allow every {}",
                    &key[..key.len() - 1]
                ),
            );
            ok = false;
            continue;
        }
        let mut seen: Vec<String> = Vec::new();
        for item in &list.value {
            match parse(&item.value) {
                Ok(value) if seen.contains(&value) => {
                    findings.warning_at(&item.referenced, format!("`{value}` is listed twice"))
                }
                Ok(value) => seen.push(value),
                Err(message) => {
                    findings.error_at(&item.referenced, message);
                    ok = false;
                }
            }
        }
        if key == "methods" {
            rules.methods = Some(seen);
        } else {
            rules.paths = Some(
                seen.iter()
                    .map(|p| parse_path_pattern(p).expect("checked above"))
                    .collect(),
            );
        }
    }
    ok.then_some(rules)
}

/// A port list: each 1–65535, not empty. Repeats are dropped with a warning.
fn parse_port_list(
    findings: &mut Findings<'_>,
    ports: &Spanned<Vec<Spanned<String>>>,
    key: &str,
) -> Option<Vec<u16>> {
    if ports.value.is_empty() {
        findings.error_at(
            &ports.referenced,
            format!("`{key}` is empty; omit it for the default, or list ports"),
        );
        return None;
    }
    let mut parsed = Vec::with_capacity(ports.value.len());
    let mut ok = true;
    for port in &ports.value {
        match parse_port(&port.value) {
            Ok(value) if parsed.contains(&value) => {
                findings.warning_at(&port.referenced, format!("port {value} is listed twice"));
            }
            Ok(value) => parsed.push(value),
            Err(message) => {
                findings.error_at(&port.referenced, message);
                ok = false;
            }
        }
    }
    parsed.sort_unstable();
    ok.then_some(parsed)
}

pub(crate) fn parse_port(raw: &str) -> Result<u16, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "port `{}` is not a number in 1–65535",
            raw.escape_default()
        ));
    }
    match trimmed.parse::<u32>() {
        Ok(value @ 1..=65535) => Ok(value as u16),
        _ => Err(format!("port {trimmed} is outside 1–65535")),
    }
}

/// `a.b.c.d/len` or an IPv6 prefix; a bare address is a single host (/32 or /128). A prefix
/// with host bits set (`10.0.0.1/8`) is refused: it usually means a typo in either half. So
/// is an IPv4-mapped block (`::ffff:198.51.100.0/120`): it would match nothing.
fn parse_cidr(raw: &str) -> Result<ipnet::IpNet, String> {
    let raw = raw.trim();
    let not_cidr =
        || format!("`{raw}` is not a CIDR block (e.g. `203.0.113.0/24` or `2001:db8::/32`)");
    let (address, prefix) = match raw.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (raw, None),
    };
    // std's parser refuses leading zeros (`010.0.0.0`, octal to inet_aton): ambiguous.
    let address: std::net::IpAddr = address.parse().map_err(|_| not_cidr())?;
    let net = match prefix {
        None => ipnet::IpNet::from(address),
        Some(prefix) => {
            if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(not_cidr());
            }
            let len: u8 = prefix.parse().map_err(|_| not_cidr())?;
            ipnet::IpNet::new(address, len).map_err(|_| {
                format!("`{raw}`: the prefix length /{len} is too long for this address")
            })?
        }
    };
    if net.trunc() != net {
        return Err(format!(
            "`{raw}` has host bits set; did you mean `{}`?",
            net.trunc()
        ));
    }
    if let Some(ipv4) = mapped_ipv4(net) {
        return Err(format!(
            "`{raw}` is IPv4 written as IPv4-mapped IPv6, which the proxy matches as IPv4, so this rule would match nothing; write `{ipv4}`"
        ));
    }
    Ok(net)
}

/// The IPv4 block an IPv6 block inside `::ffff:0:0/96` spells. The engine turns every
/// `::ffff:a.b.c.d` target into `a.b.c.d` before matching, so such a rule matches nothing.
fn mapped_ipv4(net: ipnet::IpNet) -> Option<ipnet::Ipv4Net> {
    let ipnet::IpNet::V6(net) = net else {
        return None;
    };
    let ipv4 = net.network().to_ipv4_mapped()?;
    ipnet::Ipv4Net::new(ipv4, net.prefix_len().checked_sub(96)?).ok()
}

fn private_cidr_warning(net: ipnet::IpNet) -> Option<String> {
    crate::floor::overlaps_private(net).then(|| {
        format!(
            "cidr `{net}` covers private or special addresses; allowed names resolving there pass the private-address floor"
        )
    })
}

fn build_limits(findings: &mut Findings<'_>, raw: RawLimits) -> Limits {
    let mut limits = Limits::default();
    if let Some(timeout) = raw.timeout {
        match crate::units::parse_duration(&timeout.value) {
            Ok(value) => limits.timeout = Some(value),
            Err(message) => findings.error_at(&timeout.referenced, format!("`timeout`: {message}")),
        }
    }
    for (key, raw_value, slot) in [
        ("memory", raw.memory, &mut limits.memory),
        ("tmp", raw.tmp, &mut limits.tmp),
        ("output", raw.output, &mut limits.output),
    ] {
        if let Some(value) = raw_value {
            match crate::units::parse_size(&value.value) {
                Ok(bytes) => *slot = Some(bytes),
                Err(message) => findings.error_at(&value.referenced, format!("`{key}`: {message}")),
            }
        }
    }
    if let Some(cpus) = raw.cpus {
        match cpus.value.trim().parse::<f64>() {
            Ok(value) if value.is_finite() && value > 0.0 => limits.cpus = Some(value),
            _ => findings.error_at(
                &cpus.referenced,
                format!("`cpus`: `{}` is not a positive number", cpus.value),
            ),
        }
    }
    if let Some(runtime) = raw.runtime {
        let name = runtime.value.trim();
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            findings.error_at(
                &runtime.referenced,
                format!(
                    "`runtime`: `{}` is not a runtime name (one name, as `--runtime` takes it)",
                    runtime.value
                ),
            );
        } else {
            limits.runtime = Some(vec![name.to_string()]);
        }
    }
    if let Some(pids) = raw.pids {
        match pids.value.trim().parse::<u64>() {
            Ok(value) if value > 0 => limits.pids = Some(value),
            _ => findings.error_at(
                &pids.referenced,
                format!("`pids`: `{}` is not a positive whole number", pids.value),
            ),
        }
    }
    limits
}

fn build_tls(findings: &mut Findings<'_>, raw: RawTls) -> TlsSettings {
    let mut tls = TlsSettings::default();
    if let Some(ports) = raw.ports {
        // An empty list is meaningful here: no port requires TLS.
        if ports.value.is_empty() {
            tls.ports.clear();
        } else if let Some(parsed) = parse_port_list(findings, &ports, "tls.ports") {
            tls.ports = parsed;
        }
    }
    if let Some(sni) = raw.sni {
        match sni.value.as_str() {
            "strict" => tls.sni = SniCheck::Strict,
            "off" => tls.sni = SniCheck::Off,
            other => findings.error_at(
                &sni.referenced,
                format!("unknown `sni` check `{other}`; use `strict` or `off`"),
            ),
        }
    }
    tls
}
