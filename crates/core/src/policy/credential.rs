//! `credentials:` — a secret the proxy adds to requests for one exact host and port, so the
//! sandbox never holds it. The policy names the secret; its value is given to the proxy
//! alone (the run's handoff, or `proxy --secret`), never written in a policy.
//!
//! This is the validated credential; the checks it passed are the `credentials:` section's,
//! in `parse::credentials`.

use std::fmt;

use crate::target::HostName;

/// The only substitution in a credential's `value`.
pub const SECRET_PLACEHOLDER: &str = "{secret}";

/// One validated credential.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Credential {
    /// The host the credential is sent to.
    pub host: HostName,
    /// The port on that host the credential is sent to.
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

#[cfg(test)]
mod tests {
    use super::*;

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
