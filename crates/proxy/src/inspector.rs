//! What the inspect door holds for the whole run: the secrets, their placeholders, the run CA
//! and the TLS settings toward upstreams — checked against the policy's credentials once,
//! when the proxy starts.
//!
//! A module of its own so that the shared state (`shared`) can hold it without depending on
//! the door (`inspect`), which depends on the shared state.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderValue;
use rustls::ClientConfig;

use crate::ca::{CaError, RunCa};
use crate::policy::{Credential, PolicySet};
use crate::secret_forms::{MIN_SECRET_BYTES, SecretForms};
use egress_core::secret::{MIN_PLACEHOLDER_BYTES, Secret};

use crate::secrets::{CredentialConfig, Placeholders};
use crate::upstream_tls::client_config;

/// Why the proxy cannot serve the policy's credentials.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// A credential of the policy names a secret that was not given.
    #[error("the credential for {host} needs the secret {name}, which was not given")]
    MissingSecret {
        /// The secret's name.
        name: String,
        /// The credential's `host:port`.
        host: String,
    },
    /// A secret was given that no credential uses: it would only be one more to leak.
    #[error("the secret {0} was given, but no credential of the policy uses it")]
    UnusedSecret(String),
    /// Two secrets of the same name.
    #[error("the secret {0} was given twice")]
    DuplicateSecret(String),
    /// A placeholder too short for the tripwire to tell it from ordinary text.
    #[error("the placeholder of {0} is shorter than {MIN_PLACEHOLDER_BYTES} bytes")]
    ShortPlaceholder(String),
    /// A secret too short for the scrubber.
    #[error(
        "the secret {0} is shorter than {MIN_SECRET_BYTES} bytes: too short to keep out of answers without mangling ordinary text"
    )]
    ShortSecret(String),
    /// Two secrets share a placeholder, so a request could not say which it carries.
    #[error("two secrets have the same placeholder")]
    DuplicatePlaceholder,
    /// The policy's credentials contradict each other (two for one host and port).
    #[error("{0}")]
    Conflict(String),
    /// The run CA could not be made.
    #[error(transparent)]
    Ca(#[from] CaError),
    /// An extra upstream CA (`CredentialConfig::upstream_ca`) was refused by rustls.
    #[error("upstream CA")]
    Upstream(#[from] rustls::Error),
}

/// What the inspect door holds for the whole run.
pub(crate) struct Inspector {
    pub(crate) ca: Option<RunCa>,
    pub(crate) upstream_tls: Arc<ClientConfig>,
    secrets: HashMap<String, Secret>,
    /// The gate's tripwire matcher: the secrets' placeholders and their real forms.
    placeholders: Placeholders,
    /// Every form of the real secrets: what the scrubber replaces in an answer and a
    /// record shows as `«secret:NAME»` (the tripwire holds them too).
    forms: Arc<SecretForms>,
}

impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector")
            .field("ca", &self.ca)
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Inspector {
    /// Checks the secrets against the policy's credentials (each credential's secret given,
    /// each given secret used) and makes the run CA for the inspected names. None when the
    /// policy inspects nothing and no secret is given.
    pub(crate) fn new(
        policy: &PolicySet,
        config: CredentialConfig,
    ) -> Result<Option<Inspector>, InspectError> {
        if let Some(conflict) = policy.credential_conflicts().first() {
            return Err(InspectError::Conflict(conflict.to_string()));
        }
        let mut secrets: HashMap<String, Secret> = HashMap::new();
        for secret in config.secrets {
            if secret.placeholder.len() < MIN_PLACEHOLDER_BYTES {
                return Err(InspectError::ShortPlaceholder(secret.name));
            }
            if secret.value.expose().len() < MIN_SECRET_BYTES {
                return Err(InspectError::ShortSecret(secret.name));
            }
            if secrets
                .values()
                .any(|other| other.placeholder == secret.placeholder)
            {
                return Err(InspectError::DuplicatePlaceholder);
            }
            if secrets.contains_key(&secret.name) {
                return Err(InspectError::DuplicateSecret(secret.name));
            }
            secrets.insert(secret.name.clone(), secret);
        }
        let mut credentials: Vec<&Credential> = policy.credentials().collect();
        credentials.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
        for credential in &credentials {
            if !secrets.contains_key(&credential.secret) {
                return Err(InspectError::MissingSecret {
                    name: credential.secret.clone(),
                    host: format!("{}:{}", credential.host, credential.port),
                });
            }
        }
        let mut names: Vec<&String> = secrets.keys().collect();
        names.sort();
        if let Some(unused) = names
            .into_iter()
            .find(|name| !credentials.iter().any(|c| &&c.secret == name))
        {
            return Err(InspectError::UnusedSecret(unused.clone()));
        }
        let hosts = policy.inspected_hosts();
        if hosts.is_empty() {
            return Ok(None);
        }
        let mut named: Vec<&Secret> = secrets.values().collect();
        named.sort_by(|a, b| a.name.cmp(&b.name));
        let forms = Arc::new(SecretForms::new(named.into_iter().map(|secret| {
            (
                secret.name.as_str(),
                secret.value.expose(),
                secret.placeholder.as_str(),
            )
        })));
        let placeholders = Placeholders::new(
            secrets
                .values()
                .map(|secret| (secret.name.as_str(), secret.placeholder.as_str())),
        )
        .with_secrets(forms.clone());
        Ok(Some(Inspector {
            ca: Some(RunCa::new(hosts, config.ca_lifetime)?),
            upstream_tls: client_config(&config.upstream_ca)?,
            secrets,
            placeholders,
            forms,
        }))
    }

    /// The run CA's certificate (PEM), for the ready line and the sandbox's trust bundle.
    pub(crate) fn ca_certificate_pem(&self) -> Option<&str> {
        self.ca.as_ref().map(RunCa::certificate_pem)
    }

    /// The placeholder of each secret, by name (not secret: the sandbox holds them).
    pub(crate) fn placeholders(&self) -> impl Iterator<Item = (&str, &str)> {
        self.secrets
            .values()
            .map(|secret| (secret.name.as_str(), secret.placeholder.as_str()))
    }

    /// The tripwire's matcher (the placeholders and the real secrets' forms), which the
    /// gate holds: every door's tripwire is the gate's.
    pub(crate) fn placeholder_matcher(&self) -> &Placeholders {
        &self.placeholders
    }

    /// Every form of the real secrets, which the gate holds too (for names and records).
    pub(crate) fn secret_forms(&self) -> &Arc<SecretForms> {
        &self.forms
    }

    /// The credential header value with the real secret. Never logged.
    pub(crate) fn credential_value(&self, credential: &Credential) -> Option<HeaderValue> {
        let secret = self.secrets.get(&credential.secret)?;
        let mut value =
            HeaderValue::try_from(credential.header_value(secret.value.expose())).ok()?;
        value.set_sensitive(true);
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_upstream_ca_says_its_cause_once() {
        let error = InspectError::from(rustls::Error::General("bad anchor".into()));
        assert_eq!(error.to_string(), "upstream CA");
        assert_eq!(
            egress_core::text::with_causes(&error),
            "upstream CA: unexpected error: bad anchor"
        );
    }
}
