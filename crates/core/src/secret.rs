//! Secret values for `credentials:`, and the placeholders the sandbox gets instead. A value
//! is only ever formatted into the one header it is meant for: `Debug` prints `<redacted>`
//! and there is no `Display`, so no log line, error or record can carry it by accident.

use std::fmt;

/// Shortest secret value accepted for a credential: the proxy's scrubber replaces every
/// occurrence of each form of it in every inspected answer, and a shorter value (or its
/// base64 core, seven characters at this length) could be ordinary text.
pub const MIN_SECRET_BYTES: usize = 6;

/// A secret's value. Deliberately without `Display`; `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps a secret's value so it never prints.
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
    /// The secret's name, as the policy's credentials name it.
    pub name: String,
    /// The real value, sent only in the credential's header.
    pub value: SecretValue,
    /// The stand-in the sandbox sees in place of the value.
    pub placeholder: String,
}

/// Shortest placeholder accepted: a short one could match ordinary text by chance.
pub const MIN_PLACEHOLDER_BYTES: usize = 16;

/// A fresh random placeholder for a secret.
pub fn new_placeholder() -> String {
    placeholder_from(rand::random())
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
            name: "KEY".into(),
            value: SecretValue::new("sk-live-123".into()),
            placeholder: placeholder_from([7; 16]),
        };
        assert!(!format!("{secret:?}").contains("sk-live-123"));
        assert!(secret.placeholder.len() >= MIN_PLACEHOLDER_BYTES);
    }

    #[test]
    fn placeholders_are_fresh() {
        assert_ne!(new_placeholder(), new_placeholder());
    }
}
