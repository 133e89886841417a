//! The run's side of credentials (`docs/src/guide/credentials.md`): which secrets the policy's
//! credentials need, the placeholder the sandbox holds for each, the upstream CAs the proxy trusts.
//! Everything here is checked by [`RunSpecBuilder::build`](super::RunSpecBuilder::build), before
//! Docker is touched; the values travel only in the proxy's stdin handoff.

use std::path::{Path, PathBuf};

use egress_core::handoff::InlineCertificate;
use egress_core::policy::PolicySet;
use egress_core::secret::{Secret, SecretValue};
use egress_core::upstream_ca::{UpstreamCaError, parse_upstream_ca};

use egress_core::secret::new_placeholder;

use crate::options::{Field, Names};

/// An upstream CA file is a handful of certificates, not a document.
const MAX_UPSTREAM_CA_BYTES: u64 = 1024 * 1024;

/// Why the run's credentials cannot be served. Never holds a secret's value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// A credential of the policy names a secret the run was not given.
    #[error("the credential for {host} needs the secret {name}: give it with --secret {name}")]
    MissingSecret {
        /// The secret's name.
        name: String,
        /// The host the credential is for.
        host: String,
    },
    /// A secret is given that no credential of the policy uses.
    #[error("--secret {0} is given, but no credential of the policy uses it")]
    UnusedSecret(String),
    /// A secret is given twice.
    #[error("--secret {0} is given twice")]
    DuplicateSecret(String),
    #[error(
        "--env {0} would replace the placeholder of the secret {0}; the sandbox gets {0} from --secret"
    )]
    /// An environment variable of the run has a secret's name, whose placeholder it would replace.
    EnvShadowsSecret(String),
    /// An upstream CA file could not be read. The read's error is part of the message (not
    /// a `source()`), so every caller shows it, once.
    #[error("--upstream-ca {path}: cannot read: {cause}")]
    UpstreamCaRead {
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        cause: std::io::Error,
    },
    /// An upstream CA file is larger than a CA file can be.
    #[error("--upstream-ca {path}: larger than {MAX_UPSTREAM_CA_BYTES} bytes")]
    UpstreamCaTooLarge {
        /// The file.
        path: PathBuf,
    },
    /// An upstream CA file holds no usable CA certificate.
    #[error("--upstream-ca {0}")]
    UpstreamCa(UpstreamCaError),
}

/// Said in the message, not a `source()`: the message holds it.
impl From<UpstreamCaError> for CredentialError {
    fn from(error: UpstreamCaError) -> CredentialError {
        CredentialError::UpstreamCa(error)
    }
}

impl CredentialError {
    /// The setting the refusal is about: the secrets, the environment or the upstream CAs.
    pub fn field(&self) -> Field {
        match self {
            CredentialError::MissingSecret { .. }
            | CredentialError::UnusedSecret(_)
            | CredentialError::DuplicateSecret(_) => Field::Secrets,
            CredentialError::EnvShadowsSecret(_) => Field::Env,
            CredentialError::UpstreamCaRead { .. }
            | CredentialError::UpstreamCaTooLarge { .. }
            | CredentialError::UpstreamCa(_) => Field::UpstreamCa,
        }
    }

    /// The message in `names`' terms (its `Display` is the command line's).
    pub fn message(&self, names: Names) -> String {
        if names == Names::Flags {
            return self.to_string();
        }
        match self {
            CredentialError::MissingSecret { name, host } => {
                format!("the credential for {host} needs the secret {name}: give it in secrets")
            }
            CredentialError::UnusedSecret(name) => {
                format!("secrets has {name}, but no credential of the policy uses it")
            }
            CredentialError::DuplicateSecret(name) => format!("secrets has {name} twice"),
            CredentialError::EnvShadowsSecret(name) => format!(
                "env {name} would replace the placeholder of the secret {name}; the sandbox gets \
                 {name} from secrets"
            ),
            CredentialError::UpstreamCaRead { path, cause } => {
                format!("upstream_ca {}: cannot read: {cause}", path.display())
            }
            CredentialError::UpstreamCaTooLarge { path } => format!(
                "upstream_ca {}: larger than {MAX_UPSTREAM_CA_BYTES} bytes",
                path.display()
            ),
            CredentialError::UpstreamCa(error) => format!("upstream_ca {error}"),
        }
    }
}

/// The credentials a run serves: each secret with its fresh placeholder, and the extra
/// CAs for upstream TLS. `Debug` never shows a value ([`SecretValue`]).
#[derive(Clone, Debug, Default)]
pub struct RunCredentials {
    pub(crate) secrets: Vec<Secret>,
    pub(crate) upstream_ca: Vec<InlineCertificate>,
}

impl RunCredentials {
    /// Matches the given secrets against the policy's credentials (each needed one given,
    /// each given one needed), draws a random placeholder per secret, reads and parses the
    /// upstream CA files. `env` is the sandbox's `--env`: it may not replace a placeholder.
    pub fn check(
        policy: &PolicySet,
        given: Vec<(String, SecretValue)>,
        upstream_ca_files: &[PathBuf],
        upstream_ca_inline: Vec<InlineCertificate>,
        env: &[(String, String)],
    ) -> Result<RunCredentials, CredentialError> {
        let mut secrets: Vec<Secret> = Vec::new();
        for (name, value) in given {
            if secrets.iter().any(|secret| secret.name == name) {
                return Err(CredentialError::DuplicateSecret(name));
            }
            if !policy
                .credentials()
                .any(|credential| credential.secret == name)
            {
                return Err(CredentialError::UnusedSecret(name));
            }
            secrets.push(Secret {
                placeholder: new_placeholder(),
                name,
                value,
            });
        }
        for credential in policy.credentials() {
            if !secrets
                .iter()
                .any(|secret| secret.name == credential.secret)
            {
                return Err(CredentialError::MissingSecret {
                    name: credential.secret.clone(),
                    host: format!("{}:{}", credential.host, credential.port),
                });
            }
        }
        if let Some((key, _)) = env
            .iter()
            .find(|(key, _)| secrets.iter().any(|secret| secret.name == *key))
        {
            return Err(CredentialError::EnvShadowsSecret(key.clone()));
        }
        let mut upstream_ca = upstream_ca_files
            .iter()
            .map(|path| read_upstream_ca(path))
            .collect::<Result<Vec<_>, _>>()?;
        for inline in upstream_ca_inline {
            if inline.pem.len() as u64 > MAX_UPSTREAM_CA_BYTES {
                return Err(CredentialError::UpstreamCaTooLarge {
                    path: PathBuf::from(inline.file),
                });
            }
            parse_upstream_ca(&inline.file, &inline.pem)?;
            upstream_ca.push(inline);
        }
        Ok(RunCredentials {
            secrets,
            upstream_ca,
        })
    }

    /// The secrets' names and values (not their placeholders), to hand to a daemon that
    /// draws its own placeholders (`run --server`).
    pub fn secret_values(&self) -> impl Iterator<Item = (&str, &SecretValue)> + '_ {
        self.secrets
            .iter()
            .map(|secret| (secret.name.as_str(), &secret.value))
    }

    /// The upstream CAs as read (file name and PEM text).
    pub fn upstream_ca(&self) -> &[InlineCertificate] {
        &self.upstream_ca
    }

    /// `NAME=<placeholder>` for the sandbox's environment, one per secret.
    pub fn sandbox_env(&self) -> impl Iterator<Item = String> + '_ {
        self.secrets
            .iter()
            .map(|secret| format!("{}={}", secret.name, secret.placeholder))
    }
}

/// Reads one `--upstream-ca` file and checks it holds usable PEM certificates.
fn read_upstream_ca(path: &Path) -> Result<InlineCertificate, CredentialError> {
    let read_error = |cause| CredentialError::UpstreamCaRead {
        path: path.to_path_buf(),
        cause,
    };
    let size = std::fs::metadata(path).map_err(read_error)?.len();
    if size > MAX_UPSTREAM_CA_BYTES {
        return Err(CredentialError::UpstreamCaTooLarge {
            path: path.to_path_buf(),
        });
    }
    let pem = std::fs::read_to_string(path).map_err(read_error)?;
    let file = path.display().to_string();
    parse_upstream_ca(&file, &pem)?;
    Ok(InlineCertificate { file, pem })
}
