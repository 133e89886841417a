//! What a run hands its proxy over the proxy container's attached stdin, before the proxy
//! binds a listener: one JSON object on one line.
//!
//! Arguments and labels are visible to anyone who can `docker inspect`, and a policy's file
//! name can hold any character (`a=b.yaml`), so what is the run's own — its policies, its
//! pins, and anything secret — travels here instead. A warm proxy (one started before its run
//! is known) waits on this line; it is the only input the proxy takes after its start.
//! Both sides use this one type, so they cannot disagree about a field; the line carries
//! [`HANDOFF_VERSION`] (`"v"`, [`crate::wire`]), so a proxy built from another version of it
//! says so instead of misreading a field.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Read};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::wire::{self, WireError};

/// The version of the handoff line's format, its `"v"`: raised whenever a field is added,
/// removed or changes its meaning, so that a library and a helper binary of different
/// versions refuse each other in words.
pub const HANDOFF_VERSION: u32 = 1;

/// The handoff line is refused past this many bytes: a policy is small (1 MiB at most).
pub const MAX_HANDOFF_BYTES: u64 = 16 * 1024 * 1024;

/// One policy given as YAML text, with the file name its diagnostics name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InlinePolicy {
    /// Shown in diagnostics (`NAME:LINE:COL`), and the policy's default name.
    pub file: String,
    /// The policy's YAML text, parsed by the proxy as a policy file is.
    pub yaml: String,
}

/// Everything a run hands its proxy. Every field is optional; what is given here merges
/// with the proxy's own settings (the proxy's `ProxyConfig::merge_handoff`; `policies` and
/// `allow` load with the proxy's own policies).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Handoff {
    /// Policies as YAML text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<InlinePolicy>,
    /// `HOST[:PORT]` allow flags, as `--allow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Names pinned to addresses, as `--resolve NAME=IP`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<Pin>,
    /// The run id written into every audit record (overrides `--run-id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Secret values by name, for the policies' credentials. `Debug` shows names only.
    #[serde(default, skip_serializing_if = "Secrets::is_empty")]
    pub secrets: Secrets,
    /// The placeholder the sandbox holds for each secret, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub placeholders: BTreeMap<String, String>,
    /// Extra CA certificates (PEM text) trusted for upstream TLS, as `--upstream-ca`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_ca: Vec<InlineCertificate>,
    /// The run CA's longest validity in seconds: the run's time limit plus one hour. At most
    /// [`MAX_CA_LIFETIME`](crate::units::MAX_CA_LIFETIME).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_lifetime_s: Option<u64>,
    /// The run's `--audit-limit` (overrides the proxy's flag): here rather than in the
    /// arguments so that a proxy started ahead of its run (serve's warm slots) gets it at
    /// claim. At least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_limit: Option<u64>,
    /// The run's `--on-audit-limit` (overrides the proxy's flag), for the same reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_audit_limit: Option<crate::audit::OnAuditLimit>,
    /// The sandbox's host name, when its resolv.conf names the proxy: answered without a
    /// record (`ProxyConfig::sandbox_hostname`). Chosen with the sandbox, known at claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_hostname: Option<String>,
    /// Ports the run's host rules allow besides the transparent doors' own. A proxy that
    /// binds its doors itself (on a run network) serves a transparent door on each, at the
    /// explicit door's address: TLS routed by SNI, HTTP by `Host`, on any allowed port. With
    /// passed listeners the sandbox's launcher binds raw doors on them instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub door_ports: Vec<u16>,
}

/// One name pinned to an address instead of DNS: the pair as typed values, checked again by
/// the proxy as any pin is ([`crate::pin::check_pin`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// The pinned host name.
    pub name: String,
    /// The address the name resolves to instead of DNS.
    pub addr: IpAddr,
}

/// A PEM file's text, with its name for errors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InlineCertificate {
    /// The name errors show for this certificate.
    pub file: String,
    /// The PEM text of one or more certificates.
    pub pem: String,
}

/// Secret values by name. Never printed: `Debug` lists the names and hides the values.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secrets(pub BTreeMap<String, String>);

impl Secrets {
    /// Whether no secret is given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|name| (name, "<redacted>")))
            .finish()
    }
}

/// Why no handoff line could be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Reading stdin failed.
    #[error("cannot read the run's configuration from stdin")]
    Read(#[from] io::Error),
    /// Stdin reached its end before a whole line.
    #[error("stdin closed before the run's configuration arrived")]
    Closed,
    /// The line is longer than [`MAX_HANDOFF_BYTES`].
    #[error("the run's configuration on stdin is over {MAX_HANDOFF_BYTES} bytes")]
    TooLarge,
    /// The line is of another handoff version than this reader's: the library that wrote
    /// it and the proxy that reads it were not built together.
    #[error(
        "the run's configuration on stdin is handoff version {}, this proxy reads version {expected}: \
         the library and its helper binary were built from different versions of egress-sandbox",
        wire::shown_version(*found)
    )]
    Version {
        /// The version the line declares, `None` when it declares none.
        found: Option<u64>,
        /// The version this reader reads.
        expected: u32,
    },
    /// The line is not a handoff this reader understands.
    #[error("the run's configuration on stdin is not valid")]
    Invalid(#[from] serde_json::Error),
}

impl From<WireError> for ReadError {
    fn from(error: WireError) -> Self {
        match error {
            WireError::Version { found, expected } => ReadError::Version { found, expected },
            WireError::Invalid(error) => ReadError::Invalid(error),
        }
    }
}

impl Handoff {
    /// The handoff as the one line the proxy reads (with its newline), version first.
    pub fn to_line(&self) -> String {
        let json = wire::to_versioned_json(HANDOFF_VERSION, self);
        let mut line = String::from_utf8(json).expect("JSON is UTF-8");
        line.push('\n');
        line
    }

    /// Reads exactly one line from `input` (blocking until it arrives) and parses it.
    pub fn read_line(input: impl Read) -> Result<Handoff, ReadError> {
        let mut reader = io::BufReader::new(input.take(MAX_HANDOFF_BYTES + 1));
        let mut line = Vec::new();
        reader.read_until(b'\n', &mut line)?;
        if line.last() != Some(&b'\n') {
            return Err(if line.len() as u64 > MAX_HANDOFF_BYTES {
                ReadError::TooLarge
            } else {
                ReadError::Closed
            });
        }
        Ok(wire::from_versioned_json(&line, HANDOFF_VERSION)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handoff_that_cannot_be_read_or_parsed_says_its_cause_once() {
        let unreadable = ReadError::from(io::Error::other("broken pipe"));
        let parser = serde_json::from_str::<Handoff>("{").unwrap_err();
        let cause = parser.to_string();
        let invalid = ReadError::from(parser);
        for (error, cause) in [(&unreadable, "broken pipe"), (&invalid, cause.as_str())] {
            let shown = error.to_string();
            assert!(!shown.contains(cause), "{shown}");
            let line = crate::text::with_causes(error);
            assert_eq!(line.matches(cause).count(), 1, "{line}");
            assert_eq!(line, format!("{shown}: {cause}"));
        }
    }

    #[test]
    fn a_handoff_survives_its_line_whatever_the_file_name() {
        let handoff = Handoff {
            policies: vec![InlinePolicy {
                file: "a=b\nc.yaml".into(),
                yaml: "version: 1\nallow:\n  - host: x.example\n".into(),
            }],
            allow: vec!["api.example.com:8443".into()],
            pins: vec![Pin {
                name: "api.example.com".into(),
                addr: "203.0.113.5".parse().unwrap(),
            }],
            run_id: Some("r-1".into()),
            secrets: Secrets(BTreeMap::from([("K".to_owned(), "sk-1\n2".to_owned())])),
            placeholders: BTreeMap::from([(
                "K".to_owned(),
                "egress-sandbox-placeholder-1".to_owned(),
            )]),
            upstream_ca: vec![InlineCertificate {
                file: "ca.pem".into(),
                pem: "-----BEGIN CERTIFICATE-----\n".into(),
            }],
            ca_lifetime_s: Some(3630),
            audit_limit: Some(5),
            on_audit_limit: Some(crate::audit::OnAuditLimit::Refuse),
            sandbox_hostname: Some("sandbox-1a2b3c".into()),
            door_ports: vec![5432, 8443],
        };
        assert!(
            !format!("{handoff:?}").contains("sk-1"),
            "Debug hides secret values"
        );
        let line = handoff.to_line();
        assert_eq!(line.matches('\n').count(), 1, "one line: {line}");
        assert!(
            line.starts_with(&format!("{{\"v\":{HANDOFF_VERSION},")),
            "{line}"
        );
        assert!(
            line.contains(r#""pins":[{"name":"api.example.com","addr":"203.0.113.5"}]"#),
            "pins are typed pairs: {line}"
        );
        assert_eq!(Handoff::read_line(line.as_bytes()).unwrap(), handoff);
    }

    #[test]
    fn an_empty_object_is_an_empty_handoff() {
        let line = format!("{{\"v\":{HANDOFF_VERSION}}}\n");
        assert_eq!(
            Handoff::read_line(line.as_bytes()).unwrap(),
            Handoff::default()
        );
        assert_eq!(Handoff::default().to_line(), line);
    }

    /// A line of another version, or of none, is refused for its version, whatever its
    /// fields: not with a complaint about a field this reader does not know.
    #[test]
    fn a_line_of_another_handoff_version_is_refused_by_its_version() {
        let other = HANDOFF_VERSION + 1;
        let unversioned = &b"{\"resolve\":[\"a.test=203.0.113.5\"]}\n"[..];
        let newer = format!("{{\"v\":{other},\"unheard_of\":true}}\n");
        for (line, found) in [
            (unversioned, None),
            (newer.as_bytes(), Some(u64::from(other))),
        ] {
            let error = Handoff::read_line(line).unwrap_err();
            assert!(
                matches!(error, ReadError::Version { found: f, expected } if f == found && expected == HANDOFF_VERSION),
                "{error:?}"
            );
            let message = error.to_string();
            assert!(
                message.contains(&format!("this proxy reads version {HANDOFF_VERSION}")),
                "{message}"
            );
            assert!(
                message.contains("built from different versions of egress-sandbox"),
                "{message}"
            );
            assert!(
                !message.contains("unknown field"),
                "the version, not a field: {message}"
            );
        }
    }

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        assert!(matches!(
            Handoff::read_line(&b""[..]),
            Err(ReadError::Closed)
        ));
        assert!(matches!(
            Handoff::read_line(&b"{}"[..]),
            Err(ReadError::Closed)
        ));
        let misspelt = format!("{{\"v\":{HANDOFF_VERSION},\"allw\":[]}}\n");
        assert!(matches!(
            Handoff::read_line(misspelt.as_bytes()),
            Err(ReadError::Invalid(_))
        ));
        let string_pin = format!("{{\"v\":{HANDOFF_VERSION},\"pins\":[\"a.test=203.0.113.5\"]}}\n");
        assert!(matches!(
            Handoff::read_line(string_pin.as_bytes()),
            Err(ReadError::Invalid(_))
        ));
        let huge = vec![b' '; MAX_HANDOFF_BYTES as usize + 10];
        assert!(matches!(
            Handoff::read_line(&huge[..]),
            Err(ReadError::TooLarge)
        ));
    }
}
