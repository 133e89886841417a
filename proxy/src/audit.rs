//! The audit record: one JSON line per attempt (INTERFACE.md, "Audit record"), written by
//! a single writer so lines never interleave.

use serde::{Deserialize, Serialize};

use crate::policy::Reason;

/// How the attempt reached the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Connect,
    Http,
    Dns,
    /// Transparent TLS, routed by SNI.
    Tls,
    /// Transparent, neither TLS nor HTTP.
    Tcp,
}

/// What became of the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Allowed,
    Blocked,
    /// Report mode: the allowlist alone would have refused it; it went through.
    WouldBlock,
    /// Allowed, but the upstream could not be resolved or reached. Not a refusal.
    Failed,
}

/// One line of the audit log. Field order is the order of INTERFACE.md.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub v: u32,
    /// RFC 3339 UTC with milliseconds, e.g. `2026-11-29T18:40:43.123Z`.
    pub ts: String,
    pub run: Option<String>,
    pub policy: Option<String>,
    pub kind: Kind,
    pub client: Option<String>,
    /// Normalised when valid; otherwise the raw value, escaped and cut to 256 bytes.
    pub host: String,
    pub port: Option<u16>,
    pub decision: Outcome,
    pub reason: Reason,
    pub rule: Option<String>,
    pub addr: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}
