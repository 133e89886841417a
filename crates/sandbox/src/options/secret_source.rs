//! `--secret NAME`, `--secret NAME=env:VAR`, `--secret NAME=file:PATH`: where a secret's
//! value comes from, for `run` and `proxy`; and the checks of a secret's name and value,
//! wherever it came from. The value itself never appears in an error.

use std::path::{Path, PathBuf};

use egress_core::policy::check_secret_name;
use egress_core::secret::SecretValue;
use egress_core::text::visible;

use super::Names;

/// Largest secret file read: a key or token, not a document.
const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// A secret that cannot be used. The message names the flag as typed (or, in a request's
/// terms, [`SecretError::message`]) and says what is wrong, never the value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The name is not a valid secret name (the reason).
    #[error("--secret: {0}")]
    Name(String),
    /// The text after `=` is neither `env:VAR` nor `file:PATH`.
    #[error(
        "--secret {name}={}: the source must be env:VAR or file:PATH",
        visible(given)
    )]
    Source {
        /// The secret's name.
        name: String,
        /// The text after `=`.
        given: String,
    },
    /// The environment variable is not set, or its value is not UTF-8.
    #[error(
        "--secret {name}: the environment variable {} is not set (or not UTF-8)",
        visible(variable)
    )]
    Unset {
        /// The secret's name.
        name: String,
        /// The environment variable read.
        variable: String,
    },
    /// The file cannot be read. The file's error is part of the message, so every caller
    /// shows it whole.
    #[error("--secret {name}: cannot read {}: {cause}", path.display())]
    Read {
        /// The secret's name.
        name: String,
        /// The file named.
        path: PathBuf,
        /// Why it cannot be read.
        cause: std::io::Error,
    },
    /// The path is not a regular file.
    #[error("--secret {name}: {} is not a regular file", path.display())]
    NotAFile {
        /// The secret's name.
        name: String,
        /// The path named.
        path: PathBuf,
    },
    /// The file is larger than a key or token could be (64 KiB).
    #[error("--secret {name}: {} is larger than {MAX_SECRET_FILE_BYTES} bytes", path.display())]
    TooLarge {
        /// The secret's name.
        name: String,
        /// The file named.
        path: PathBuf,
    },
    /// The file is not UTF-8 text.
    #[error("--secret {name}: {} is not UTF-8 text", path.display())]
    NotText {
        /// The secret's name.
        name: String,
        /// The file named.
        path: PathBuf,
    },
    /// The value cannot be a secret ([`check_secret_value`]).
    #[error("--secret {name}: {problem}")]
    Value {
        /// The secret's name.
        name: String,
        /// What is wrong with the value, never the value.
        problem: &'static str,
    },
}

impl SecretError {
    /// The message in `names`' terms: a request's secrets are not flags. The errors of a
    /// flag's source are the command line's alone.
    pub fn message(&self, names: Names) -> String {
        match (self, names) {
            (SecretError::Name(reason), Names::Fields) => reason.clone(),
            (SecretError::Value { name, problem }, Names::Fields) => {
                format!("secret {name}: {problem}")
            }
            _ => self.to_string(),
        }
    }
}

/// One `--secret` flag read: the name and the value (from the environment or a file).
pub fn read_secret_flag(raw: &str) -> Result<(String, SecretValue), SecretError> {
    let (name, source) = match raw.split_once('=') {
        Some((name, source)) => (name, Some(source)),
        None => (raw, None),
    };
    check_secret_name(name).map_err(SecretError::Name)?;
    let value = match source {
        None => from_env(name, name)?,
        Some(source) => match source.split_once(':') {
            Some(("env", var)) => from_env(name, var)?,
            Some(("file", path)) => from_file(name, Path::new(path))?,
            _ => {
                return Err(SecretError::Source {
                    name: name.to_owned(),
                    given: source.to_owned(),
                });
            }
        },
    };
    let value = check_secret_value(value).map_err(|problem| SecretError::Value {
        name: name.to_owned(),
        problem,
    })?;
    Ok((name.to_owned(), value))
}

/// A value that can go in an HTTP header and be told from ordinary text: at least
/// [`egress_core::secret::MIN_SECRET_BYTES`] bytes, printable ASCII. The error says
/// what is wrong, never the value.
pub fn check_secret_value(value: String) -> Result<SecretValue, &'static str> {
    if value.is_empty() {
        return Err("the value is empty");
    }
    if value.len() < egress_core::secret::MIN_SECRET_BYTES {
        return Err(
            "the value is shorter than 6 bytes: the proxy could not tell it from ordinary text when it keeps it out of answers",
        );
    }
    if value.bytes().any(|b| b.is_ascii_control() || b >= 0x80) {
        return Err(
            "the value holds control or non-ASCII characters; it cannot go in an HTTP header",
        );
    }
    Ok(SecretValue::new(value))
}

fn from_env(name: &str, var: &str) -> Result<String, SecretError> {
    std::env::var(var).map_err(|_| SecretError::Unset {
        name: name.to_owned(),
        variable: var.to_owned(),
    })
}

fn from_file(name: &str, path: &Path) -> Result<String, SecretError> {
    let read_error = |cause| SecretError::Read {
        name: name.to_owned(),
        path: path.to_owned(),
        cause,
    };
    let metadata = std::fs::metadata(path).map_err(read_error)?;
    if !metadata.is_file() {
        return Err(SecretError::NotAFile {
            name: name.to_owned(),
            path: path.to_owned(),
        });
    }
    if metadata.len() > MAX_SECRET_FILE_BYTES {
        return Err(SecretError::TooLarge {
            name: name.to_owned(),
            path: path.to_owned(),
        });
    }
    let bytes = std::fs::read(path).map_err(read_error)?;
    let mut text = String::from_utf8(bytes).map_err(|_| SecretError::NotText {
        name: name.to_owned(),
        path: path.to_owned(),
    })?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_come_from_env_or_file_and_errors_never_show_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "sk-from-file\n").unwrap();
        let (name, value) = read_secret_flag(&format!("K=file:{}", file.display())).unwrap();
        assert_eq!((name.as_str(), value.expose()), ("K", "sk-from-file"));

        let missing = read_secret_flag("K=env:EGRESS_SANDBOX_TEST_SURELY_UNSET").unwrap_err();
        assert!(missing.to_string().contains("not set"), "{missing}");
        let unreadable = read_secret_flag("K=file:/nonexistent/key").unwrap_err();
        assert!(
            format!("{unreadable:#}").contains("cannot read"),
            "{unreadable:#}"
        );
        assert!(read_secret_flag("1K").is_err());
        assert!(read_secret_flag("K=vault:x").is_err());

        std::fs::write(&file, "sk-secret\r\nmore\n").unwrap();
        let bad = read_secret_flag(&format!("K=file:{}", file.display())).unwrap_err();
        assert!(!bad.to_string().contains("sk-secret"), "{bad}");
    }

    #[test]
    fn a_value_too_short_to_scrub_is_refused() {
        let short = "a".repeat(egress_core::secret::MIN_SECRET_BYTES - 1);
        let problem = check_secret_value(short).unwrap_err();
        assert!(
            problem.contains(&format!(
                "shorter than {} bytes",
                egress_core::secret::MIN_SECRET_BYTES
            )),
            "{problem}"
        );
        let long = "a".repeat(egress_core::secret::MIN_SECRET_BYTES);
        assert!(check_secret_value(long).is_ok());
    }
}
