//! What a client asked to reach, classified once for every door.
//!
//! A client names its destination in many ways: a `CONNECT` authority, an absolute URI, a TLS
//! SNI, a DNS question. [`Target::parse_host`] turns any of them into either a normalised
//! [`HostName`] or an IP address, or refuses it precisely. Anything a resolver would accept
//! as an address (`2852039166`, `0x7f.1`, `0177.0.0.1`, `127.1`, `[::ffff:127.0.0.1]`) is an
//! address here too, so it can never sneak past the policy as a "name".
//!
//! Classification order, and why:
//! 1. bound the input (a name is at most 253 bytes; we refuse anything over
//!    [`MAX_RAW_HOST_BYTES`] before doing any work);
//! 2. non-ASCII input goes through IDNA (UTS #46) first, because IDNA maps look-alikes such as
//!    fullwidth digits and `。` to ASCII: `１２７。０。０。１` *is* `127.0.0.1`;
//! 3. IPv6 (bracketed or containing `:`), then IPv4 in every `inet_aton` spelling;
//! 4. a name whose last label looks numeric (all digits, or `0x…`) but is not a valid IPv4
//!    address is refused, never treated as a name (WHATWG URL "ends in a number" rule);
//! 5. what is left must be a DNS name: labels of `[a-z0-9_-]`, 1–63 bytes, 253 in all.
// Reads bytes from the sandbox: a malformed input must be an error, never a panic.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests;

/// Longest raw host we even look at. Real names are ≤ 253 bytes; IDN input in UTF-8 and an
/// IPv6 literal with brackets stay well below this.
pub const MAX_RAW_HOST_BYTES: usize = 1024;
/// Longest name in presentation form without the trailing dot (RFC 1035).
pub const MAX_NAME_BYTES: usize = 253;
/// Longest label (RFC 1035).
pub const MAX_LABEL_BYTES: usize = 63;

/// Why a host or authority was refused. `Display` is the user-facing message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The host is empty.
    #[error("the host is empty")]
    Empty,
    /// The host is longer than a DNS name may be.
    #[error("the host is {len} bytes long; the limit is {max}")]
    TooLong {
        /// The host's length in bytes.
        len: usize,
        /// The most bytes a host may hold.
        max: usize,
    },
    /// One label is longer than [`MAX_LABEL_BYTES`].
    #[error("a label of the host is {len} bytes long; the limit is {MAX_LABEL_BYTES}")]
    LabelTooLong {
        /// The label's length in bytes.
        len: usize,
    },
    /// The host has an empty label.
    #[error("the host has an empty label (two dots in a row, or a leading dot)")]
    EmptyLabel,
    /// The host holds a byte a host name may not hold.
    #[error("the host contains {found} at byte {position}, which is not allowed in a host name")]
    BadByte {
        /// The byte, shown escaped.
        found: String,
        /// Its offset in the host, from 0.
        position: usize,
    },
    /// The host is not a valid internationalised domain name.
    #[error("the host is not a valid internationalised domain name (IDNA)")]
    Idna,
    /// An IP address was given where only a name is accepted.
    #[error("`{0}` is an IP address, not a host name")]
    IpLiteral(IpAddr),
    #[error(
        "the host ends in a number but is not a valid IPv4 address; numeric hosts are never names"
    )]
    /// The host ends in a number but is no valid IPv4 address.
    NumericNotAddress,
    /// The host is not a valid IPv6 address.
    #[error("the IPv6 address is not valid")]
    BadIpv6,
    /// The IPv6 address carries a zone id.
    #[error("IPv6 zone ids (`%…`) are not accepted")]
    Ipv6ZoneId,
    /// An IPv6 address with a port is not in brackets.
    #[error("an IPv6 address with a port needs brackets, e.g. `[::1]:443`")]
    Ipv6NeedsBrackets,
    /// The host carries a scheme.
    #[error("the host contains a scheme (`…://`); give only host[:port]")]
    Scheme,
    /// The host carries userinfo.
    #[error("the host contains userinfo (`…@`); give only host[:port]")]
    Userinfo,
    /// The host carries a path, query or fragment.
    #[error("the host contains a path, query or fragment; give only host[:port]")]
    Path,
    /// The authority has no port where one is required.
    #[error("a port is required (host:port)")]
    MissingPort,
    /// The port is not a number.
    #[error("the port `{0}` is not a number")]
    BadPort(String),
    /// The port is outside 1–65535.
    #[error("the port {0} is outside 1–65535")]
    PortOutOfRange(u32),
}

/// A host name in canonical form: ASCII lowercase, IDN labels as punycode (`xn--`), no
/// trailing dot, each label 1–63 bytes of `[a-z0-9-]` (and `_`, which real DNS names carry),
/// at most 253 bytes in all.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostName(String);

impl HostName {
    /// The name in canonical form.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A name only (IP literals in any spelling are an error). Normalises: ASCII lowercase,
    /// one trailing dot removed, IDN -> punycode (idna crate), label/length checks.
    pub fn parse(raw: &str) -> Result<HostName, TargetError> {
        match Target::parse_host(raw)? {
            Target::Name(name) => Ok(name),
            Target::Ip(ip) => Err(TargetError::IpLiteral(ip)),
        }
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
    /// A host name, in canonical form.
    Name(HostName),
    /// An IP address given literally.
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

impl Target {
    /// A bare host as a client gave it (CONNECT host part, URI host, SNI, DNS qname):
    /// `API.Example.com.`, `bücher.de`, `127.1`, `2852039166`, `0x7f000001`, `[::1]`, `::1`.
    ///
    /// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) become the IPv4 address they carry, so
    /// `cidr` rules and the floor see one spelling of each IPv4 destination.
    pub fn parse_host(raw: &str) -> Result<Target, TargetError> {
        if raw.is_empty() {
            return Err(TargetError::Empty);
        }
        if raw.len() > MAX_RAW_HOST_BYTES {
            return Err(TargetError::TooLong {
                len: raw.len(),
                max: MAX_NAME_BYTES,
            });
        }
        if let Some(inner) = raw.strip_prefix('[') {
            let inner = inner.strip_suffix(']').ok_or(TargetError::BadIpv6)?;
            return parse_ipv6(inner).map(canonical_ip);
        }
        if looks_like_ipv6(raw) {
            return parse_ipv6(raw).map(canonical_ip);
        }
        let mut host = to_ascii_lowercase_host(raw)?;
        if host.ends_with('.') {
            host.pop();
        }
        if host.is_empty() {
            return Err(TargetError::Empty);
        }
        if ends_in_number(&host) {
            return parse_ipv4_any(&host)
                .map(|ip| Target::Ip(IpAddr::V4(ip)))
                .ok_or(TargetError::NumericNotAddress);
        }
        validate_name(&host)?;
        Ok(Target::Name(HostName(host)))
    }

    /// "host:port" as in CONNECT or a Host header; `default_port` used when no port is given
    /// (None = port required). Brackets required for IPv6 with a port. Rejects userinfo,
    /// schemes, paths, empty/zero/oversize ports.
    pub fn parse_authority(
        raw: &str,
        default_port: Option<u16>,
    ) -> Result<(Target, u16), TargetError> {
        if raw.is_empty() {
            return Err(TargetError::Empty);
        }
        if raw.len() > MAX_RAW_HOST_BYTES {
            return Err(TargetError::TooLong {
                len: raw.len(),
                max: MAX_NAME_BYTES,
            });
        }
        if raw.contains("://") {
            return Err(TargetError::Scheme);
        }
        if raw.contains('@') {
            return Err(TargetError::Userinfo);
        }
        if raw.contains(['/', '?', '#']) {
            return Err(TargetError::Path);
        }
        let (host, port) = if raw.starts_with('[') {
            let close = raw.find(']').ok_or(TargetError::BadIpv6)?;
            let (host, rest) = raw.split_at(close + 1);
            match rest {
                "" => (host, None),
                _ => match rest.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return Err(TargetError::BadIpv6),
                },
            }
        } else {
            match raw.matches(':').count() {
                0 => (raw, None),
                1 => {
                    let (host, port) = raw.split_once(':').unwrap_or((raw, ""));
                    (host, Some(port))
                }
                _ => return Err(TargetError::Ipv6NeedsBrackets),
            }
        };
        let port = match port {
            Some(port) => parse_port(port)?,
            None => default_port.ok_or(TargetError::MissingPort)?,
        };
        Ok((Target::parse_host(host)?, port))
    }
}

/// A port as written in an authority: 1–5 ASCII digits, 1–65535.
fn parse_port(raw: &str) -> Result<u16, TargetError> {
    if raw.is_empty() || raw.len() > 5 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TargetError::BadPort(escape_for_message(raw)));
    }
    let value: u32 = raw
        .parse()
        .map_err(|_| TargetError::BadPort(escape_for_message(raw)))?;
    match u16::try_from(value) {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(TargetError::PortOutOfRange(value)),
    }
}

fn escape_for_message(raw: &str) -> String {
    raw.chars()
        .take(16)
        .flat_map(char::escape_default)
        .collect()
}

/// Unbracketed IPv6 as in an SNI-less DNS question or `policy test ::1`: hex digits,
/// colons and dots (embedded IPv4), optionally a `%zone` (refused later). Anything else with
/// a colon goes on as a name and is refused there with the colon's position.
fn looks_like_ipv6(raw: &str) -> bool {
    let address = raw.split('%').next().unwrap_or(raw);
    address.contains(':')
        && address
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
}

fn parse_ipv6(inner: &str) -> Result<Target, TargetError> {
    if inner.contains('%') {
        return Err(TargetError::Ipv6ZoneId);
    }
    inner
        .parse::<Ipv6Addr>()
        .map(|ip| Target::Ip(IpAddr::V6(ip)))
        .map_err(|_| TargetError::BadIpv6)
}

/// `::ffff:a.b.c.d` is `a.b.c.d`: one spelling per IPv4 destination.
fn canonical_ip(target: Target) -> Target {
    match target {
        Target::Ip(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => Target::Ip(IpAddr::V4(v4)),
            None => target,
        },
        other => other,
    }
}

/// ASCII-lowercases `raw`, running it through IDNA when it is not pure ASCII. Rejects bytes
/// that have no place in a host (control characters, spaces, `%`, `@`, `/`, `\`, quotes …)
/// with their position, so a log line can show what was wrong.
fn to_ascii_lowercase_host(raw: &str) -> Result<String, TargetError> {
    if raw.is_ascii() {
        check_ascii_bytes(raw)?;
        return Ok(raw.to_ascii_lowercase());
    }
    // Reject ASCII troublemakers before IDNA sees them, for a precise message.
    if let Some((position, ch)) = raw
        .char_indices()
        .find(|(_, ch)| ch.is_ascii() && !is_host_byte(*ch as u8))
    {
        return Err(bad_byte(position, ch));
    }
    if let Some((position, ch)) = raw.char_indices().find(|(_, ch)| ch.is_control()) {
        return Err(bad_byte(position, ch));
    }
    let uts46 = idna::uts46::Uts46::new();
    let ascii = uts46
        .to_ascii(
            raw.as_bytes(),
            idna::uts46::AsciiDenyList::URL,
            idna::uts46::Hyphens::Allow,
            idna::uts46::DnsLength::Ignore,
        )
        .map_err(|_| TargetError::Idna)?;
    // IDNA mapping may produce ASCII we do not accept (e.g. fullwidth `＠` → `@`).
    check_ascii_bytes(&ascii).map_err(|_| TargetError::Idna)?;
    Ok(ascii.to_ascii_lowercase())
}

fn check_ascii_bytes(raw: &str) -> Result<(), TargetError> {
    match raw.bytes().enumerate().find(|&(_, b)| !is_host_byte(b)) {
        Some((position, byte)) => Err(bad_byte(position, char::from(byte))),
        None => Ok(()),
    }
}

fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

fn bad_byte(position: usize, ch: char) -> TargetError {
    let found = match ch {
        ' ' => "a space".to_owned(),
        '\'' | '"' | '`' => format!("a quote ({ch})"),
        c if c.is_control() => format!("a control character ({})", c.escape_unicode()),
        c => format!("`{}`", c.escape_default()),
    };
    TargetError::BadByte { found, position }
}

/// WHATWG URL's "ends in a number": the last label is all decimal digits, or `0x`/`0X`
/// followed by hex digits (possibly none). Such a host is an IPv4 address or nothing.
fn ends_in_number(host: &str) -> bool {
    let last = host.rsplit('.').next().unwrap_or(host);
    if last.is_empty() {
        return false;
    }
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    match last.strip_prefix("0x").or_else(|| last.strip_prefix("0X")) {
        Some(hex) => hex.bytes().all(|b| b.is_ascii_hexdigit()),
        None => false,
    }
}

/// IPv4 in every spelling `inet_aton` accepts: 1–4 parts, each decimal, `0x` hex or
/// leading-`0` octal; the last part fills the remaining bytes (`127.1` = `127.0.0.1`,
/// `2852039166` = `169.254.169.254`).
pub(crate) fn parse_ipv4_any(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = [0u64; 4];
    for (slot, part) in numbers.iter_mut().zip(&parts) {
        *slot = parse_ipv4_part(part)?;
    }
    let count = parts.len();
    let (last, leading) = numbers.get(..count)?.split_last()?;
    if leading.iter().any(|&n| n > 255) {
        return None;
    }
    let last_bits = 8 * (5 - count as u32);
    if *last >= 1u64 << last_bits {
        return None;
    }
    let mut value: u64 = *last;
    for (index, &n) in leading.iter().enumerate() {
        value |= n << (8 * (3 - index as u32));
    }
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

fn parse_ipv4_part(part: &str) -> Option<u64> {
    if part.is_empty() {
        return None;
    }
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x").or(part.strip_prefix("0X")) {
        (hex, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        // `0x` alone is 0 to inet_aton and to WHATWG URL.
        return (radix == 16).then_some(0);
    }
    // Bound the work and the value: anything over 32 bits is out of range anyway.
    let digits = digits.trim_start_matches('0');
    if digits.len() > 11 {
        return None;
    }
    if digits.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(digits, radix).ok()
}

/// A host that is not an address must be a DNS name in canonical ASCII form.
fn validate_name(host: &str) -> Result<(), TargetError> {
    if host.len() > MAX_NAME_BYTES {
        return Err(TargetError::TooLong {
            len: host.len(),
            max: MAX_NAME_BYTES,
        });
    }
    for label in host.split('.') {
        if label.is_empty() {
            return Err(TargetError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_BYTES {
            return Err(TargetError::LabelTooLong { len: label.len() });
        }
    }
    Ok(())
}
