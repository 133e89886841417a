//! The audit record's schema: one JSON line per attempt
//! (`docs/src/reference/audit-record.md`), the chain that links a run's lines, and the reader
//! that takes a log back apart.
//!
//! The proxy writes these records; the sandbox, the daemon and the audit tools read them
//! back with the same types, so writer and readers cannot disagree on a field. A reader of
//! logs from other versions reads through [`read_log`]: a record's reason this version does
//! not know is kept as its text ([`RecordedReason`]), fields it does not know are ignored.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::de::IntoDeserializer as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::policy::{Reason, Verdict};
use crate::text::{must_escape, push_escape};

mod budget;
mod chain;
mod read;
mod time;

pub use budget::{OnAuditLimit, OnAuditLimitError, reserve_for};
pub use chain::{
    AuditLine, Chain, DroppedByDecision, EndKind, EndRecord, LimitKind, LimitRecord, genesis,
    sha256_hex,
};
pub use read::{ChainLink, LineError, LogLine, LogReader, read_log};
pub use time::{epoch_millis, timestamp};

/// The schema version written in every record's `v`.
pub const AUDIT_VERSION: u32 = 1;

/// Raw, untrusted host strings are cut to this many bytes before they are logged.
pub const MAX_RAW_HOST_BYTES: usize = 256;

/// How the attempt reached the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Kind {
    /// A CONNECT tunnel.
    Connect,
    /// A plain HTTP request, or a request read inside an inspected tunnel.
    Http,
    /// A DNS query to the proxy's resolver.
    Dns,
    /// Transparent TLS, routed by SNI.
    Tls,
    /// Transparent, neither TLS nor HTTP.
    Tcp,
}

impl Kind {
    /// The name the audit record's `kind` field carries (`connect`, `http`, `dns`, `tls`,
    /// `tcp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Connect => "connect",
            Kind::Http => "http",
            Kind::Dns => "dns",
            Kind::Tls => "tls",
            Kind::Tcp => "tcp",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of the attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Let through by the policy.
    Allowed,
    /// Refused.
    Blocked,
    /// Report mode: the allowlist alone would have refused it; it went through.
    WouldBlock,
    /// Allowed, but the upstream could not be resolved or reached. Not a refusal.
    Failed,
}

impl Outcome {
    /// The name the audit record's `decision` field carries (`allowed`, `blocked`,
    /// `would_block`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Blocked => "blocked",
            Outcome::WouldBlock => "would_block",
            Outcome::Failed => "failed",
        }
    }
}

/// The record's decision for a policy verdict: allow → allowed, block → blocked,
/// report mode → would_block.
impl From<Verdict> for Outcome {
    fn from(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Allow => Outcome::Allowed,
            Verdict::Block => Outcome::Blocked,
            Verdict::WouldBlock => Outcome::WouldBlock,
        }
    }
}

/// One attempt's line of the audit log. Field order is the order of
/// `docs/src/reference/audit-record.md`.
///
/// `R` is the type of `reason`: [`Reason`] where this version writes or checks records,
/// [`RecordedReason`] where a log of any version is read back ([`read_log`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditRecord<R = Reason> {
    /// The schema version, [`AUDIT_VERSION`] when this version writes it.
    pub v: u32,
    /// RFC 3339 UTC with milliseconds, e.g. `2026-11-29T18:40:43.123Z`.
    pub ts: String,
    /// The run id, or null when the proxy runs without one.
    pub run: Option<String>,
    /// The name of the policy the attempt was judged by, or null without one.
    pub policy: Option<String>,
    /// How the attempt reached the proxy.
    pub kind: Kind,
    /// The address and port the sandbox connected or asked from, or null when unknown.
    pub client: Option<String>,
    /// The sandbox's host name, the client's name as the sandbox knows itself, when the run
    /// has one (`ProxyConfig::sandbox_hostname`): what names the source of every attempt in
    /// an export such as OCSF's `src_endpoint.hostname`. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_hostname: Option<String>,
    /// Normalised when valid; otherwise the raw value, escaped and cut to 256 bytes.
    pub host: String,
    /// The port asked for, or null when the attempt has none.
    pub port: Option<u16>,
    /// What became of the attempt.
    pub decision: Outcome,
    /// Why the attempt got its `decision` (`rule`, `not_allowed`, `resolve_failed`, …).
    pub reason: R,
    /// The policy rule that decided it (`POLICY:allow[N]` / `POLICY:deny[N]`), or null.
    pub rule: Option<String>,
    /// The address actually connected to, or null.
    pub addr: Option<String>,
    /// Refusals after resolution only (`private_address`, a deny `cidr`): every address the
    /// name resolved to, each refused, so an operator can tell a rebinding attempt from a
    /// split-horizon mistake. The sandbox is never told them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addrs: Vec<String>,
    /// Bytes relayed from the sandbox.
    pub bytes_up: u64,
    /// Bytes relayed to the sandbox.
    pub bytes_down: u64,
    /// How long the attempt lasted, in milliseconds.
    pub duration_ms: u64,
    /// `http` requests whose method and path the proxy read: `method`, `path`, `status`,
    /// and for inspected requests `credential`.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub request: Option<RequestFields>,
    /// The line's place in its run's chain, from 0. The writer leaves it out and the chain
    /// appends it as it seals the line ([`Chain::seal`]); a line read back has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Hex SHA-256 of the run's previous line, as [`seq`](Self::seq) is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<String>,
}

/// What a request read in clear (plain or inspected) adds to its `http` record. `path`
/// never holds the query string; `credential` is the name of the secret an inspected
/// request had added, never a value, and null on plain requests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RequestFields {
    /// The request's method.
    pub method: String,
    /// The request's path, without its query.
    pub path: String,
    /// The upstream's status, or null when no response came.
    pub status: Option<u16>,
    /// The name of the secret an inspected request had added, or null.
    pub credential: Option<String>,
    /// Occurrences of a run's real secret replaced by its placeholder in the answer (reason
    /// phrase, headers, body, trailers; a refused answer's quoted coding); absent when none
    /// was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflected: Option<u64>,
}

impl RequestFields {
    /// A request's `method` and `path` (already made safe for the log), with no status,
    /// credential or reflected secret yet.
    pub fn new(method: impl Into<String>, path: impl Into<String>) -> Self {
        RequestFields {
            method: method.into(),
            path: path.into(),
            status: None,
            credential: None,
            reflected: None,
        }
    }
}

impl<R> AuditRecord<R> {
    /// A record of this version, stamped now, of an attempt of `kind` at `host`: no run,
    /// policy, client, port, rule or address, nothing moved. The writer fills in the rest.
    pub fn new(kind: Kind, host: impl Into<String>, decision: Outcome, reason: R) -> Self {
        AuditRecord {
            v: AUDIT_VERSION,
            ts: timestamp(SystemTime::now()),
            run: None,
            policy: None,
            kind,
            client: None,
            sandbox_hostname: None,
            host: host.into(),
            port: None,
            decision,
            reason,
            rule: None,
            addr: None,
            addrs: Vec::new(),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            request: None,
            seq: None,
            prev: None,
        }
    }

    /// Refused, or would have been refused under enforce (report mode).
    pub fn is_refusal(&self) -> bool {
        matches!(self.decision, Outcome::Blocked | Outcome::WouldBlock)
    }
}

impl<R: Serialize> AuditRecord<R> {
    /// The record as one JSON line, without the newline. serde_json escapes every control
    /// character, so the line can never contain a raw newline whatever a client sent.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("an AuditRecord always serialises")
    }
}

/// A record's `reason` as read back from a log: one of this version's [`Reason`]s, or the
/// text of one a newer writer added, so that its record still reads and still counts.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordedReason {
    /// A reason this version knows.
    Known(Reason),
    /// As written. It comes from the log, so it is shown to a person only through
    /// `text::visible`, as a host is.
    Unknown(String),
}

impl RecordedReason {
    /// The reason as the record spells it.
    pub fn as_str(&self) -> &str {
        match self {
            RecordedReason::Known(reason) => reason.as_str(),
            RecordedReason::Unknown(text) => text,
        }
    }

    /// The reason, when this version knows it.
    pub fn known(&self) -> Option<Reason> {
        match self {
            RecordedReason::Known(reason) => Some(*reason),
            RecordedReason::Unknown(_) => None,
        }
    }
}

impl From<Reason> for RecordedReason {
    fn from(reason: Reason) -> Self {
        RecordedReason::Known(reason)
    }
}

/// Text as a record spells a reason: [`Known`](RecordedReason::Known) exactly when it is
/// how this version's [`Reason`] is written (`not_allowed`, not `Not_Allowed`).
impl From<String> for RecordedReason {
    fn from(text: String) -> Self {
        let spelled: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
            text.as_str().into_deserializer();
        match Reason::deserialize(spelled) {
            Ok(reason) => RecordedReason::Known(reason),
            Err(_) => RecordedReason::Unknown(text),
        }
    }
}

impl PartialEq<Reason> for RecordedReason {
    fn eq(&self, other: &Reason) -> bool {
        self.known() == Some(*other)
    }
}

impl std::fmt::Display for RecordedReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RecordedReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RecordedReason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(RecordedReason::from)
    }
}

/// An untrusted host (or label, SNI, path) as bytes, made safe for the log at the source:
/// every character of [`must_escape`] (C0 controls, DEL, C1 controls, bidi controls, line
/// and paragraph separators) becomes the visible text `\x1b` / `\u202e`, invalid UTF-8 bytes
/// become the text `\xNN`, and the result is cut to [`MAX_RAW_HOST_BYTES`] on a character
/// boundary. JSON escaping alone is not enough: every JSON reader undoes it, and the record's
/// text would then erase or forge what an operator reads on a terminal.
pub fn raw_host_for_log(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len().min(MAX_RAW_HOST_BYTES));
    let mut escaped = String::new();
    for chunk in raw.utf8_chunks() {
        for c in chunk.valid().chars() {
            let pushed = if must_escape(c) {
                escaped.clear();
                push_escape(&mut escaped, c);
                push_bounded(&mut out, &escaped)
            } else {
                push_bounded(&mut out, c.encode_utf8(&mut [0; 4]))
            };
            if !pushed {
                return out;
            }
        }
        for byte in chunk.invalid() {
            if !push_bounded(&mut out, &format!("\\x{byte:02x}")) {
                return out;
            }
        }
    }
    out
}

/// Text for a record's field made safe as [`raw_host_for_log`] does; unchanged (apart from
/// the cut) when it holds nothing to escape, so escaping twice changes nothing.
pub fn text_for_log(text: &str) -> String {
    raw_host_for_log(text.as_bytes())
}

fn push_bounded(out: &mut String, piece: &str) -> bool {
    if out.len() + piece.len() > MAX_RAW_HOST_BYTES {
        return false;
    }
    out.push_str(piece);
    true
}

/// Records per (decision, reason), for the caller's summary.
pub type AuditCounts = BTreeMap<(Outcome, Reason), u64>;

/// The default of `--audit-limit`: attempt records written per run before the rest are
/// only counted.
pub const DEFAULT_AUDIT_LIMIT: u64 = 100_000;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind; the match fails to compile when a kind is added and not listed.
    fn every_kind() -> [Kind; 5] {
        let every = [Kind::Connect, Kind::Http, Kind::Dns, Kind::Tls, Kind::Tcp];
        for kind in every {
            match kind {
                Kind::Connect | Kind::Http | Kind::Dns | Kind::Tls | Kind::Tcp => {}
            }
        }
        every
    }

    /// Every verdict, as [`every_kind`].
    fn every_verdict() -> [Verdict; 3] {
        let every = [Verdict::Allow, Verdict::Block, Verdict::WouldBlock];
        for verdict in every {
            match verdict {
                Verdict::Allow | Verdict::Block | Verdict::WouldBlock => {}
            }
        }
        every
    }

    fn serde_form(value: impl Serialize) -> String {
        match serde_json::to_value(value).unwrap() {
            serde_json::Value::String(form) => form,
            other => panic!("not a string: {other}"),
        }
    }

    #[test]
    fn a_kind_reads_as_the_records_kind_field() {
        for kind in every_kind() {
            assert_eq!(kind.as_str(), serde_form(kind), "{kind:?}");
            assert_eq!(kind.to_string(), kind.as_str(), "{kind:?}");
        }
    }

    #[test]
    fn a_verdict_reads_as_the_decision_its_record_gets() {
        for verdict in every_verdict() {
            let outcome = Outcome::from(verdict);
            assert_eq!(verdict.as_str(), serde_form(outcome), "{verdict:?}");
            assert_eq!(outcome.as_str(), verdict.as_str(), "{verdict:?}");
            assert_eq!(verdict.to_string(), verdict.as_str(), "{verdict:?}");
        }
    }

    #[test]
    fn raw_hosts_are_escaped_into_one_line() {
        let raw = b"evil\"host\r\n{\"v\":1}\x00\x1b\xff\xfe.example";
        let host = raw_host_for_log(raw);
        assert!(host.contains("\\xff\\xfe"), "{host}");
        let record = AuditRecord {
            v: 1,
            ts: timestamp(SystemTime::UNIX_EPOCH),
            run: None,
            policy: None,
            kind: Kind::Http,
            client: None,
            sandbox_hostname: None,
            host,
            port: Some(80),
            decision: Outcome::Blocked,
            reason: Reason::BadRequest,
            rule: None,
            addr: None,
            addrs: Vec::new(),
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            request: None,
            seq: None,
            prev: None,
        };
        let line = record.to_line();
        assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
        assert!(
            line.contains(r#"evil\"host\\x0d\\x0a{\"v\":1}\\x00\\x1b\\xff\\xfe.example"#),
            "{line}"
        );
        let back: AuditRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn raw_hosts_are_cut_on_a_character_boundary() {
        let raw = "é".repeat(200);
        let host = raw_host_for_log(raw.as_bytes());
        assert_eq!(host.len(), MAX_RAW_HOST_BYTES);
        let odd = format!("a{}", "é".repeat(200));
        let host = raw_host_for_log(odd.as_bytes());
        assert_eq!(host.len(), MAX_RAW_HOST_BYTES - 1);
        assert!(host.starts_with("aé"));
    }
}
