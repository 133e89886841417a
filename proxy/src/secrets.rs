//! Secret values the proxy holds for `credentials:`, and the placeholders the sandbox gets
//! instead. A value is only ever formatted into the one header it is meant for: `Debug` and
//! `Display` print `<redacted>`, so no log line, error or record can carry it by accident.

use std::fmt;
use std::time::Duration;

use rustls::pki_types::CertificateDer;

/// A secret's value. Deliberately without `Display`; `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    pub fn new(value: String) -> Self {
        SecretValue(value)
    }

    /// The value itself, for the one header it goes into.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One secret: its name (as in the policy), its value, and the placeholder the sandbox
/// holds in the environment variable of that name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Secret {
    pub name: String,
    pub value: SecretValue,
    pub placeholder: String,
}

/// Shortest placeholder accepted: a short one could match ordinary text by chance.
pub const MIN_PLACEHOLDER_BYTES: usize = 16;

/// What the proxy needs for inspected hosts besides the policy.
#[derive(Clone, Debug)]
pub struct CredentialConfig {
    pub secrets: Vec<Secret>,
    /// Extra CA certificates trusted for upstream TLS (`--upstream-ca`).
    pub upstream_ca: Vec<CertificateDer<'static>>,
    /// Longest validity of the run CA: the run's time limit plus one hour.
    pub ca_lifetime: Duration,
}

impl Default for CredentialConfig {
    fn default() -> Self {
        CredentialConfig {
            secrets: Vec::new(),
            upstream_ca: Vec::new(),
            ca_lifetime: Duration::from_secs(24 * 3600),
        }
    }
}

/// A fresh placeholder: recognisable, and random so the sandbox cannot guess another run's.
pub fn placeholder_from(random: [u8; 16]) -> String {
    let mut text = String::from("egress-sandbox-placeholder-");
    for byte in random {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_value_never_prints() {
        let secret = Secret {
            name: "K".into(),
            value: SecretValue::new("sk-live-123".into()),
            placeholder: placeholder_from([7; 16]),
        };
        let shown = format!(
            "{secret:?} {:?}",
            CredentialConfig {
                secrets: vec![secret.clone()],
                ..CredentialConfig::default()
            }
        );
        assert!(!shown.contains("sk-live-123"), "{shown}");
        assert!(shown.contains("<redacted>"));
        assert_eq!(secret.value.expose(), "sk-live-123");
        assert!(secret.placeholder.len() >= MIN_PLACEHOLDER_BYTES);
    }
}
