//! Entry points for the fuzz targets (`proxy/fuzz`) and the property tests: thin wrappers
//! over crate-private parsers, so that they exercise exactly the functions the doors run
//! rather than copies. Not a stable API; hidden from the documentation.

use std::net::{Ipv4Addr, SocketAddr};

use http::Request;

use crate::audit::AuditSink;
use crate::secrets::Placeholders;
use crate::target::HostName;

use crate::policy::{HostPattern, Policy, Reason};
use crate::target::Target;

/// The ClientHello reader the TLS doors run, and its checks.
pub mod sni {
    pub use crate::sni::{ClientHello, SniError, check, extension_types, read_client_hello};
}

/// Which door a request came in on (mirrors the private `http::Door`).
#[derive(Clone, Copy, Debug)]
pub enum RequestDoor {
    /// The explicit proxy listener: absolute-form requests.
    Explicit,
    /// A transparent HTTP listener on this port: origin-form requests routed by `Host`.
    Transparent { port: u16 },
}

/// What the HTTP doors make of a request's target: `Ok((target, port))`, or the raw bytes
/// that go in the audit record, the reason and the detail for the client.
pub fn request_target<B>(
    door: RequestDoor,
    request: &Request<B>,
) -> Result<(Target, u16), (Vec<u8>, Reason, &'static str)> {
    let door = match door {
        RequestDoor::Explicit => crate::shared::Door::Explicit,
        RequestDoor::Transparent { port } => crate::shared::Door::Transparent { port },
    };
    crate::http::request_target(door, request)
}

/// What the `CONNECT` door makes of its authority (`host:port`, port required).
pub fn connect_authority(authority: &str) -> Result<(Target, u16), &'static str> {
    crate::connect::parse_connect_authority(authority)
}

/// The `host:` patterns of a policy's allow and deny rules, in file order.
pub fn host_patterns(policy: &Policy) -> Vec<HostPattern> {
    policy
        .allow
        .iter()
        .chain(&policy.deny)
        .filter_map(|rule| match &rule.target {
            crate::policy::RuleTarget::Host(pattern) => Some(pattern.clone()),
            crate::policy::RuleTarget::Cidr(_) => None,
        })
        .collect()
}

/// The DNS responder's answer to one query message (`None` = dropped), its record queued:
/// with the run's `policy`, `placeholders` and the sandbox's `own_name`, no raw doors.
pub fn dns_respond(
    query: &[u8],
    client: SocketAddr,
    policy: &crate::policy::PolicySet,
    placeholders: &Placeholders,
    own_name: Option<&HostName>,
    answer: Ipv4Addr,
    audit: &AuditSink,
) -> Option<Vec<u8>> {
    let context = crate::dns::AnswerContext {
        policy,
        placeholders,
        own_name,
        names: None,
    };
    crate::dns::respond(query, client, context, answer, audit)
}

/// The run CA's `notBefore` and `notAfter` (Unix seconds) for a CA made now that lives
/// `lifetime`, as the proxy computes them, or why it would refuse.
pub fn run_ca_validity(lifetime: std::time::Duration) -> Result<(i64, i64), String> {
    crate::ca::validity(time::OffsetDateTime::now_utc(), lifetime)
        .map(|(not_before, not_after)| (not_before.unix_timestamp(), not_after.unix_timestamp()))
        .map_err(|error| error.to_string())
}
