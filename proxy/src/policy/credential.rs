//! `credentials:` — a secret the proxy adds to requests for one exact host and port, so the
//! sandbox never holds it. The policy names the secret; its value is given to the proxy
//! alone (the run's handoff, or `proxy --secret`), never written in a policy.

use std::fmt;

use crate::target::HostName;

/// Longest secret name: it is also an environment variable in the sandbox.
const MAX_SECRET_NAME_BYTES: usize = 128;
/// The only substitution in a credential's `value`.
pub const SECRET_PLACEHOLDER: &str = "{secret}";

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

/// One validated credential.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Credential {
    pub host: HostName,
    pub port: u16,
    /// The secret's name (and the sandbox environment variable holding its placeholder).
    pub secret: String,
    /// Lower-case header name.
    pub header: String,
    /// The header value with `{secret}` where the secret goes.
    pub value: String,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl Credential {
    /// The header value with the secret in place. The result is secret: never log it.
    pub fn header_value(&self, secret: &str) -> String {
        self.value.replace(SECRET_PLACEHOLDER, secret)
    }
}

impl fmt::Display for Credential {
    /// As a reviewer wrote it, without any value: `api.x.com:443 OPENAI_API_KEY → Authorization`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} secret {} in header `{}: {}`",
            self.host, self.port, self.secret, self.header, self.value
        )
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

    #[test]
    fn the_secret_goes_where_the_placeholder_is() {
        let credential = Credential {
            host: HostName::parse("api.example.com").unwrap(),
            port: 443,
            secret: "K".into(),
            header: "authorization".into(),
            value: "Bearer {secret}".into(),
            line: 1,
            column: 1,
        };
        assert_eq!(credential.header_value("sk-1"), "Bearer sk-1");
        assert!(!credential.to_string().contains("sk-1"));
    }
}
