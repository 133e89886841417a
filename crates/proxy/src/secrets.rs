//! Secret values the proxy holds for `credentials:`, and the placeholders the sandbox gets
//! instead. A value is only ever formatted into the one header it is meant for: `Debug` and
//! `Display` print `<redacted>`, so no log line, error or record can carry it by accident.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use egress_core::secret::Secret;

use crate::secret_forms::SecretForms;

/// What the proxy needs for inspected hosts besides the policy. Build it with
/// [`CredentialConfig::new`] (or take the default: no secrets) and adjust the public fields;
/// `#[non_exhaustive]`: a new setting, with its default, is not a breaking change.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CredentialConfig {
    /// The values of the policy's credentials, each with the placeholder the sandbox gets
    /// instead; every credential's secret must be here, and every secret used.
    pub secrets: Vec<Secret>,
    /// Extra CA certificates trusted for upstream TLS (`--upstream-ca`).
    pub upstream_ca: Vec<CertificateDer<'static>>,
    /// Longest validity of the run CA: the run's time limit plus one hour.
    pub ca_lifetime: Duration,
}

impl CredentialConfig {
    /// These secrets, no extra upstream CA, the default run CA lifetime (a day).
    pub fn new(secrets: Vec<Secret>) -> Self {
        CredentialConfig {
            secrets,
            ..CredentialConfig::default()
        }
    }
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

/// The run's placeholders, for the tripwire: which secret's placeholder (if any) a piece of
/// request text carries — or its real value, in any of the forms of `SecretForms`, which
/// is misuse wherever it goes. Matched in any letter case and through one layer of percent-encoding,
/// the two changes client libraries make on their own (header and host case, URL-encoding),
/// so an accident is caught; code that transforms the placeholder on purpose is not, and
/// gains nothing by it: the placeholder is not the secret.
#[derive(Clone, Debug, Default)]
pub struct Placeholders {
    /// (secret name, its placeholder in lower case).
    entries: Vec<(String, Vec<u8>)>,
    /// The real secrets' forms: found first, and never excepted.
    secrets: Arc<SecretForms>,
}

impl Placeholders {
    /// The matcher of these `(secret name, placeholder)` pairs, no real secrets.
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut entries: Vec<(String, Vec<u8>)> = pairs
            .into_iter()
            .map(|(name, placeholder)| {
                (
                    name.to_owned(),
                    placeholder.to_ascii_lowercase().into_bytes(),
                )
            })
            .collect();
        entries.sort();
        Placeholders {
            entries,
            secrets: Arc::default(),
        }
    }

    /// The matcher that also finds the real secrets.
    pub(crate) fn with_secrets(mut self, secrets: Arc<SecretForms>) -> Self {
        self.secrets = secrets;
        self
    }

    /// The real secrets' forms.
    pub(crate) fn secret_forms(&self) -> &Arc<SecretForms> {
        &self.secrets
    }

    /// No placeholder and no secret: the tripwire finds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.secrets.is_empty()
    }

    /// The name of a secret whose real value (in any form) is in any of `texts`, or one
    /// other than `except` whose placeholder is.
    pub fn find<'t>(
        &self,
        texts: impl IntoIterator<Item = &'t [u8]>,
        except: Option<&str>,
    ) -> Option<&str> {
        if self.is_empty() {
            return None;
        }
        for text in texts {
            if let Some(name) = self.secrets.find(text) {
                return Some(name);
            }
            let basic = basic_credentials(text);
            for text in std::iter::once(text).chain(basic.as_deref()) {
                let normal = percent_decoded_lowercase(text);
                if let Some((name, _)) = self.entries.iter().find(|(name, needle)| {
                    Some(name.as_str()) != except && memchr::memmem::find(&normal, needle).is_some()
                }) {
                    return Some(name);
                }
            }
        }
        None
    }
}

/// `Basic <base64 of user:password>` decoded: what client libraries send on their own for
/// `auth=(user, token)`, a `user:token@` URL or git, so a placeholder given as a password
/// is found there too.
fn basic_credentials(text: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine;
    let scheme = text.get(..6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let encoded = text[6..].trim_ascii();
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()
}

/// `text` with each valid `%XX` escape decoded once and ASCII letters lower-cased.
fn percent_decoded_lowercase(text: &[u8]) -> Vec<u8> {
    let hex = |byte: u8| (byte as char).to_digit(16).map(|digit| digit as u8);
    let mut out = Vec::with_capacity(text.len());
    let mut index = 0;
    while index < text.len() {
        let byte = text[index];
        if byte == b'%'
            && let Some(high) = text.get(index + 1).copied().and_then(hex)
            && let Some(low) = text.get(index + 2).copied().and_then(hex)
        {
            out.push((high << 4 | low).to_ascii_lowercase());
            index += 3;
        } else {
            out.push(byte.to_ascii_lowercase());
            index += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use egress_core::secret::{MIN_PLACEHOLDER_BYTES, SecretValue, placeholder_from};

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

    /// `Authorization: Basic base64(user:placeholder)`, as `requests` sends for
    /// `auth=(user, token)`, carries the placeholder too (it passed the tripwire).
    #[test]
    fn the_tripwire_sees_a_placeholder_given_as_a_basic_auth_password() {
        use base64::Engine;
        let placeholder = placeholder_from([0xab; 16]);
        let placeholders = Placeholders::new([("KEY", placeholder.as_str())]);
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("user:{placeholder}"));
        for header in [format!("Basic {encoded}"), format!("basic  {encoded} ")] {
            assert_eq!(
                placeholders.find([header.as_bytes()], None),
                Some("KEY"),
                "{header}"
            );
        }
        let innocent = base64::engine::general_purpose::STANDARD.encode("user:password");
        assert_eq!(
            placeholders.find([format!("Basic {innocent}").as_bytes()], None),
            None
        );
        assert_eq!(
            placeholders.find([b"Basic !!not base64".as_slice()], None),
            None
        );
    }

    #[test]
    fn the_tripwire_sees_a_placeholder_in_any_case_and_percent_encoded() {
        let placeholder = placeholder_from([0xab; 16]);
        let other = placeholder_from([0x01; 16]);
        let placeholders =
            Placeholders::new([("KEY", placeholder.as_str()), ("OTHER", other.as_str())]);
        let upper = placeholder.to_ascii_uppercase();
        let encoded = placeholder.replace('-', "%2D");
        let mixed = format!("q={}", placeholder.replacen("ab", "%41b", 1));
        for text in [
            placeholder.as_str(),
            upper.as_str(),
            encoded.as_str(),
            mixed.as_str(),
        ] {
            assert_eq!(
                placeholders.find([text.as_bytes()], None),
                Some("KEY"),
                "{text}"
            );
            assert_eq!(
                placeholders.find([text.as_bytes()], Some("KEY")),
                None,
                "{text}"
            );
        }
        assert_eq!(
            placeholders.find([b"x".as_slice(), other.as_bytes()], None),
            Some("OTHER")
        );
        assert_eq!(
            placeholders.find([b"egress-sandbox-placeholder-%zz".as_slice()], None),
            None
        );
        assert_eq!(
            Placeholders::default().find([placeholder.as_bytes()], None),
            None
        );
    }
}
