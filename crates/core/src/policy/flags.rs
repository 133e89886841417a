//! `--allow HOST[:PORT]` flags: the one-line policy agents use. They become a policy named
//! `cli` with one allow rule per flag, validated like a policy file's `host:` rules.

use std::sync::Arc;

use super::host_pattern::{PatternUse, parse_host_pattern};
use super::parse::parse_port;
use super::{
    Diagnostic, Limits, Mode, Policy, PolicyError, PortSet, RequestRules, Rule, RuleTarget,
    TlsSettings,
};

/// The `file` of diagnostics about flags; LINE is the flag's position (1 = first).
const FLAG_SOURCE: &str = "--allow";

impl Policy {
    /// `--allow HOST[:PORT]` flags as a policy named `cli` (port default 443).
    /// Wildcards (`*.example.com`) follow the policy file's rules; IP addresses are refused
    /// (use a policy file with a `cidr` rule). Warnings are logged through `tracing`.
    pub fn from_allow_flags(flags: &[String]) -> Result<Policy, PolicyError> {
        let mut errors = Vec::new();
        let mut allow = Vec::with_capacity(flags.len());
        for (index, flag) in flags.iter().enumerate() {
            let line = index + 1;
            match parse_flag(flag) {
                Ok((rule, warnings)) => {
                    for warning in warnings {
                        tracing::warn!("{}", Diagnostic::warning(FLAG_SOURCE, line, 1, warning));
                    }
                    allow.push(Rule { line, ..rule });
                }
                Err((column, message)) => errors.push(Diagnostic::error(
                    FLAG_SOURCE,
                    line,
                    column,
                    format!("`--allow {flag}`: {message}"),
                )),
            }
        }
        if !errors.is_empty() {
            return Err(PolicyError {
                diagnostics: errors,
            });
        }
        Ok(Policy {
            name: Arc::from("cli"),
            mode: Mode::Enforce,
            limits: Limits::default(),
            tls: TlsSettings::default(),
            allow,
            deny: Vec::new(),
            credentials: Vec::new(),
        })
    }
}

/// One flag → a rule, or (column, message).
fn parse_flag(flag: &str) -> Result<(Rule, Vec<String>), (usize, String)> {
    if flag.contains(['/', '@', '?', '#']) {
        // A URL or userinfo: let the host validator say precisely what is wrong.
        let message = parse_host_pattern(flag, PatternUse::Allow)
            .err()
            .unwrap_or_else(|| "give HOST or HOST:PORT".to_owned());
        return Err((1, message));
    }
    if flag.starts_with('[') || flag.matches(':').count() > 1 {
        return Err((
            1,
            "an IP address; allow addresses with a `cidr` rule in a policy file".to_owned(),
        ));
    }
    let (host, port) = match flag.split_once(':') {
        Some((host, port)) => {
            let port = parse_port(port).map_err(|message| (host.len() + 2, message))?;
            (host, port)
        }
        None => (flag, 443),
    };
    let checked = parse_host_pattern(host, PatternUse::Allow).map_err(|message| (1, message))?;
    Ok((
        Rule {
            target: RuleTarget::Host(checked.pattern),
            ports: PortSet::List(vec![port]),
            request: RequestRules::default(),
            line: 0,
            column: 1,
        },
        checked.warnings,
    ))
}
