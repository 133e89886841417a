//! The values of [`RunOptions`](super::RunOptions) that the command line and a request
//! carry in forms of their own, each an enum (or pair) of the forms, with its serde form
//! (what a request holds) and its command-line form (what a flag holds).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use egress_core::handoff::InlineCertificate;
use egress_core::secret::SecretValue;
use egress_core::target::HostName;
use egress_core::units;

use super::secret_source::{SecretError, check_secret_value, read_secret_flag};
use super::{Field, check_pin, invalid};
use crate::spec::SpecError;

/// A policy: a file of this host (the command line's `--policy`), or its text (a
/// request's `policies`: the YAML alone, named `policy-N.yaml`, or with the file name that
/// names it in diagnostics). A request never names a file: it is read where the flag was.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum PolicyText {
    /// The YAML alone.
    Yaml(String),
    /// The YAML and the file name that shows in its diagnostics.
    Named {
        /// The policy's file name.
        file: String,
        /// The policy's YAML.
        yaml: String,
    },
    /// A policy file of this host, read when the run is built.
    #[serde(skip)]
    File(PathBuf),
}

impl PolicyText {
    /// `--policy FILE`.
    pub fn from_file_flag(raw: &str) -> Result<PolicyText, Infallible> {
        Ok(PolicyText::File(PathBuf::from(raw)))
    }
}

/// A time limit: text as `--timeout` takes it (`"1m30s"`), or a number of seconds (`90`,
/// `0.5`: a request's other form).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum TimeLimit {
    /// A number of seconds, more than 0 and at most [`units::MAX_DURATION`].
    Seconds(f64),
    /// Text as `--timeout` takes it.
    Text(String),
}

impl TimeLimit {
    /// `--timeout DURATION`.
    pub fn from_flag(raw: &str) -> Result<TimeLimit, Infallible> {
        Ok(TimeLimit::Text(raw.to_owned()))
    }

    /// The duration, checked as a policy's (zero and past 7 days refused).
    pub fn duration(&self) -> Result<Duration, SpecError> {
        match self {
            TimeLimit::Seconds(seconds) => {
                units::duration_from_seconds(&seconds.to_string(), *seconds).map_err(|_| {
                    SpecError::Seconds {
                        field: Field::Timeout,
                        seconds: *seconds,
                    }
                })
            }
            TimeLimit::Text(text) => {
                units::parse_duration(text).map_err(|error| invalid(Field::Timeout, text, error))
            }
        }
    }
}

/// One variable of the sandbox's environment: `KEY=VALUE` on the command line, a pair (or
/// an object's entry) in a request. A flag without `=` has no value, and is refused when
/// the run is built: nothing of the caller's environment enters the sandbox by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name.
    pub key: String,
    /// Its value; `None` for a `--env KEY` without one.
    pub value: Option<String>,
}

impl EnvVar {
    /// `--env KEY=VALUE` (or `--env KEY`, refused later with the way to pass it).
    pub fn from_flag(raw: &str) -> Result<EnvVar, Infallible> {
        Ok(match raw.split_once('=') {
            Some((key, value)) => EnvVar {
                key: key.to_owned(),
                value: Some(value.to_owned()),
            },
            None => EnvVar {
                key: raw.to_owned(),
                value: None,
            },
        })
    }

    /// The pair, or why it cannot be set. A bare `KEY` is refused rather than taken from
    /// the caller's environment as `docker run -e KEY` does: a key belongs in a secret,
    /// which the sandbox never sees. The message says so.
    pub(super) fn pair(self) -> Result<(String, String), SpecError> {
        match self.value {
            Some(value) if !self.key.is_empty() => Ok((self.key, value)),
            None if !self.key.is_empty() => {
                let key = &self.key;
                Err(invalid(
                    Field::Env,
                    key,
                    format!(
                        "expected KEY=VALUE (the caller's environment is never passed on by \
                         name: write --env {key}=\"${key}\"; an API key belongs in a policy \
                         credential and --secret {key}, which the sandbox never sees)"
                    ),
                ))
            }
            value => {
                let shown = match value {
                    Some(value) => format!("{}={value}", self.key),
                    None => self.key,
                };
                Err(invalid(Field::Env, &shown, "expected KEY=VALUE"))
            }
        }
    }
}

/// A request's `env`: an object (set in the order of its keys) or a list of `[KEY, VALUE]`
/// pairs (set in its order); written as pairs.
pub(super) mod env_vars {
    use super::*;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Map(BTreeMap<String, String>),
        Pairs(Vec<(String, String)>),
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<EnvVar>, D::Error> {
        let pairs: Vec<(String, String)> = match Option::<Form>::deserialize(deserializer)? {
            None => Vec::new(),
            Some(Form::Map(map)) => map.into_iter().collect(),
            Some(Form::Pairs(pairs)) => pairs,
        };
        Ok(pairs
            .into_iter()
            .map(|(key, value)| EnvVar {
                key,
                value: Some(value),
            })
            .collect())
    }

    pub(crate) fn serialize<S: Serializer>(
        vars: &[EnvVar],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let pairs = vars
            .iter()
            .map(|var| match &var.value {
                Some(value) => Ok((var.key.as_str(), value.as_str())),
                None => Err(serde::ser::Error::custom(format!(
                    "env {}: no value to send",
                    var.key
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        pairs.serialize(serializer)
    }
}

/// A name pinned to an address instead of DNS: `NAME=IP` on the command line, an entry
/// `NAME: IP` of a request's `resolve` object; parsed as the proxy parses a pin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The name as given.
    pub name: String,
    /// The address as given; `None` for a flag without `=`.
    pub address: Option<String>,
}

impl Pin {
    /// `--resolve NAME=IP`.
    pub fn from_flag(raw: &str) -> Result<Pin, Infallible> {
        Ok(match raw.split_once('=') {
            Some((name, address)) => Pin {
                name: name.to_owned(),
                address: Some(address.to_owned()),
            },
            None => Pin {
                name: raw.to_owned(),
                address: None,
            },
        })
    }

    pub(super) fn parse(&self) -> Result<(HostName, IpAddr), SpecError> {
        let refused = |reason: String| SpecError::Pin {
            name: self.name.clone(),
            address: self.address.clone(),
            reason,
        };
        let address = self
            .address
            .as_deref()
            .ok_or_else(|| refused("expected NAME=IP".into()))?;
        check_pin(&self.name, address).map_err(refused)
    }
}

/// A request's `resolve`: an object NAME → IP.
pub(super) mod pins {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Pin>, D::Error> {
        let map = Option::<BTreeMap<String, String>>::deserialize(deserializer)?;
        Ok(map
            .unwrap_or_default()
            .into_iter()
            .map(|(name, address)| Pin {
                name,
                address: Some(address),
            })
            .collect())
    }

    pub(crate) fn serialize<S: Serializer>(pins: &[Pin], serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = BTreeMap::new();
        for pin in pins {
            let address = pin.address.as_deref().ok_or_else(|| {
                serde::ser::Error::custom(format!("resolve {}: no address to send", pin.name))
            })?;
            map.insert(pin.name.as_str(), address);
        }
        map.serialize(serializer)
    }
}

/// A secret a policy credential uses: where the command line reads it from (`--secret
/// NAME`, `NAME=env:VAR`, `NAME=file:PATH`), or its value (a request's `secrets`, an
/// object NAME → value). `Debug` never shows a value.
#[derive(Clone, Debug)]
pub enum SecretGiven {
    /// A `--secret` flag as typed, read when the run is built.
    Flag(String),
    /// The value itself.
    Value {
        /// The secret's name.
        name: String,
        /// Its value, checked when the run is built.
        value: SecretValue,
    },
}

impl SecretGiven {
    /// `--secret NAME[=env:VAR|=file:PATH]`.
    pub fn from_flag(raw: &str) -> Result<SecretGiven, Infallible> {
        Ok(SecretGiven::Flag(raw.to_owned()))
    }

    /// The name and the value, read and checked.
    pub(super) fn read(self) -> Result<(String, SecretValue), SpecError> {
        match self {
            SecretGiven::Flag(raw) => Ok(read_secret_flag(&raw)?),
            SecretGiven::Value { name, value } => {
                egress_core::policy::check_secret_name(&name).map_err(SecretError::Name)?;
                let value = check_secret_value(value.expose().to_owned()).map_err(|problem| {
                    SecretError::Value {
                        name: name.clone(),
                        problem,
                    }
                })?;
                Ok((name, value))
            }
        }
    }
}

/// A request's `secrets`: an object NAME → value.
pub(super) mod secrets {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<SecretGiven>, D::Error> {
        let map = Option::<BTreeMap<String, String>>::deserialize(deserializer)?;
        Ok(map
            .unwrap_or_default()
            .into_iter()
            .map(|(name, value)| SecretGiven::Value {
                name,
                value: SecretValue::new(value),
            })
            .collect())
    }

    pub(crate) fn serialize<S: Serializer>(
        secrets: &[SecretGiven],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = BTreeMap::new();
        for secret in secrets {
            match secret {
                SecretGiven::Value { name, value } => {
                    map.insert(name.as_str(), value.expose());
                }
                SecretGiven::Flag(raw) => {
                    return Err(serde::ser::Error::custom(format!(
                        "--secret {}: read it first (RunOptions::carried)",
                        raw.split('=').next().unwrap_or_default()
                    )));
                }
            }
        }
        map.serialize(serializer)
    }
}

/// An extra CA the proxy trusts upstream: a PEM file of this host (`--upstream-ca FILE`),
/// or its text (a request's `upstream_ca`: bare PEM, or with the file name that shows in
/// errors).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum UpstreamCa {
    /// Bare PEM text.
    Pem(String),
    /// PEM text with the file name that shows in errors.
    Named(InlineCertificate),
    /// A PEM file of this host, read when the run is built.
    #[serde(skip)]
    File(PathBuf),
}

impl UpstreamCa {
    /// `--upstream-ca FILE`.
    pub fn from_file_flag(raw: &str) -> Result<UpstreamCa, Infallible> {
        Ok(UpstreamCa::File(PathBuf::from(raw)))
    }
}
