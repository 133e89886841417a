//! The `credentials:` section and every check a credential passes: an exact host, a port,
//! a secret name, a header that may carry it, a value template; one credential per host
//! and port; and an allow rule of the same policy that admits it, so a secret is only ever
//! sent where the policy lets the request go.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::super::credential::{Credential, SECRET_PLACEHOLDER};
use super::super::host_pattern::{HostPattern, PatternUse, parse_host_pattern};
use super::super::{Diagnostic, Policy, PolicySet, Verdict};
use super::Findings;
use super::ports::parse_port;
use super::yaml::position;

/// Longest secret name: it is also an environment variable in the sandbox.
const MAX_SECRET_NAME_BYTES: usize = 128;
/// Headers a credential may not set: they frame or route the request, or belong to one hop.
const FORBIDDEN_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "expect",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCredential {
    host: Option<Spanned<String>>,
    port: Option<Spanned<String>>,
    secret: Option<Spanned<String>>,
    header: Option<Spanned<String>>,
    value: Option<Spanned<String>>,
}

/// `credentials:` entries: exact host, port, secret name, header, value template. Two
/// credentials for one host and port are an error: which one applies would be a guess.
pub(super) fn build_credentials(
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
pub(super) fn check_credentials_admitted(findings: &mut Findings<'_>, policy: &Policy) {
    if policy.credentials.is_empty() {
        return;
    }
    let alone = PolicySet::from(policy.clone());
    for credential in &policy.credentials {
        let target = crate::target::Target::Name(credential.host.clone());
        let decision = alone.decide(&target, credential.port);
        if decision.verdict != Verdict::Allow {
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

/// A secret's name: an environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub fn check_secret_name(name: &str) -> Result<(), String> {
    let shown = crate::text::visible(name);
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if !first_ok || !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!(
            "secret name `{shown}` must be an environment variable name (letters, digits, `_`; not starting with a digit)"
        ));
    }
    if name.len() > MAX_SECRET_NAME_BYTES {
        return Err(format!(
            "secret name is longer than {MAX_SECRET_NAME_BYTES} bytes"
        ));
    }
    Ok(())
}

/// A header name: an HTTP token, not one that frames or routes the request.
pub(crate) fn check_header_name(raw: &str) -> Result<String, String> {
    let shown = crate::text::visible(raw);
    if http::header::HeaderName::from_bytes(raw.as_bytes()).is_err() {
        return Err(format!("`{shown}` is not a valid HTTP header name"));
    }
    let lower = raw.to_ascii_lowercase();
    if FORBIDDEN_HEADERS.contains(&lower.as_str()) {
        return Err(format!(
            "a credential cannot be sent in `{shown}`: that header frames, routes or belongs to one hop of the request"
        ));
    }
    Ok(lower)
}

/// A header value template: printable text holding `{secret}`, and no other `{`/`}`.
pub(crate) fn check_value_template(raw: &str) -> Result<(), String> {
    if !raw.contains(SECRET_PLACEHOLDER) {
        return Err(format!(
            "`value` must hold `{SECRET_PLACEHOLDER}` where the secret goes (e.g. `Bearer {SECRET_PLACEHOLDER}`)"
        ));
    }
    let rest = raw.replace(SECRET_PLACEHOLDER, "");
    if rest.contains(['{', '}']) {
        return Err(format!(
            "`value`: `{SECRET_PLACEHOLDER}` is the only placeholder; `{}` holds another `{{` or `}}`",
            crate::text::visible(raw)
        ));
    }
    if raw.bytes().any(|b| b.is_ascii_control() || b >= 0x80) {
        return Err("`value` may only hold printable ASCII".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_environment_variable_names() {
        assert!(check_secret_name("OPENAI_API_KEY").is_ok());
        assert!(check_secret_name("_x1").is_ok());
        for bad in ["", "1KEY", "A-B", "A B", "KEY=1", "Ä"] {
            assert!(check_secret_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_names_are_tokens_and_not_framing_headers() {
        assert_eq!(check_header_name("X-Api-Key").unwrap(), "x-api-key");
        assert_eq!(check_header_name("X-Totally-New").unwrap(), "x-totally-new");
        assert!(check_header_name("Host").unwrap_err().contains("frames"));
        assert!(check_header_name("Content-Length").is_err());
        assert!(
            check_header_name("Bad Header")
                .unwrap_err()
                .contains("not a valid")
        );
    }

    #[test]
    fn values_hold_the_one_placeholder_and_nothing_else() {
        assert!(check_value_template("Bearer {secret}").is_ok());
        assert!(check_value_template("{secret}").is_ok());
        assert!(
            check_value_template("Bearer x")
                .unwrap_err()
                .contains("must hold")
        );
        assert!(
            check_value_template("Bearer {key}{secret}")
                .unwrap_err()
                .contains("only placeholder")
        );
        assert!(check_value_template("{secret}}").is_err());
        assert!(check_value_template("Bearer {secret}\r\nX: y").is_err());
    }
}
