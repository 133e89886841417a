//! What a client asked to reach, classified once for every door.
//!
//! A client names its destination in many ways: a `CONNECT` authority, an absolute URI, a TLS
//! SNI, a DNS question. [`Target::parse_host`] turns any of them into either a normalised
//! [`HostName`] or an IP address, or refuses it precisely. Anything a resolver would accept
//! as an address (`2852039166`, `0x7f.1`, `0177.0.0.1`, `127.1`, `[::ffff:127.0.0.1]`) is an
//! address here too, so it can never sneak past the policy as a "name".

use std::fmt;
use std::net::IpAddr;

/// A host name in canonical form: ASCII lowercase, IDN labels as punycode (`xn--`), no
/// trailing dot, each label 1–63 bytes of `[a-z0-9-]` (and `_`, which real DNS names carry),
/// at most 253 bytes in all.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostName(String);

impl HostName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A destination: a name still to be judged and resolved, or an address given literally.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Name(HostName),
    Ip(IpAddr),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Name(name) => name.fmt(f),
            Target::Ip(IpAddr::V4(ip)) => ip.fmt(f),
            Target::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}
