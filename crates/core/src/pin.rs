//! `NAME=IP` pins: a name answered with a fixed address instead of DNS, the one parser for
//! every front end (`run`, `proxy`, the handoff, the daemon's `resolve` field).

use std::net::IpAddr;

use crate::target::{HostName, Target, TargetError};

/// Why a `NAME=IP` pin (the proxy's `ProxyConfig::pins`) was refused.
/// `Display` starts with the quoted pin, so a front end can name its own source of pins
/// in front of it (the CLI: `--resolve "a.example": expected NAME=IP`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    /// The pin is not of the form `NAME=IP`.
    #[error("{0:?}: expected NAME=IP")]
    Syntax(String),
    /// The name is not a valid host name.
    #[error("{pin:?}: {error}")]
    Name {
        /// The pin as given.
        pin: String,
        /// Why the name was refused.
        error: TargetError,
    },
    /// The address is refused.
    #[error("{pin:?}: {error}")]
    Address {
        /// The pin as given.
        pin: String,
        /// Why the address was refused.
        error: PinAddressError,
    },
}

/// Why the address of a pin was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinAddressError {
    /// The text after `=` is not an IP address.
    #[error("`{0}` is not an IP address")]
    NotAnAddress(String),
    /// The address is written in a shortened IPv4 form (e.g. `127.1`).
    #[error("`{given}` is a shorthand of {full}; write the address in full")]
    Shorthand {
        /// The address as given.
        given: String,
        /// The address it stands for.
        full: IpAddr,
    },
}

/// A `--resolve NAME=IP` pin, the one parser for every front end (`run`, `proxy`, the
/// handoff, serve's `resolve` field): NAME is normalised like any target, so a pin for
/// `API.Example.com.` applies to `api.example.com`; IP as [`parse_pin_address`].
pub fn parse_pin(raw: &str) -> Result<(HostName, IpAddr), PinError> {
    let (name, ip) = raw
        .split_once('=')
        .ok_or_else(|| PinError::Syntax(raw.to_owned()))?;
    let name = HostName::parse(name).map_err(|error| PinError::Name {
        pin: raw.to_owned(),
        error,
    })?;
    let ip = parse_pin_address(ip).map_err(|error| PinError::Address {
        pin: raw.to_owned(),
        error,
    })?;
    Ok((name, ip))
}

/// A pin given as a typed pair (the handoff's [`Pin`](crate::handoff::Pin)), checked as
/// [`parse_pin`] checks `NAME=IP`: the name normalised like any target, the address in its
/// one spelling (`::ffff:a.b.c.d` is `a.b.c.d`). An error quotes the pair as `NAME=IP`.
pub fn check_pin(name: &str, addr: IpAddr) -> Result<(HostName, IpAddr), PinError> {
    let name = HostName::parse(name).map_err(|error| PinError::Name {
        pin: format!("{name}={addr}"),
        error,
    })?;
    Ok((name, addr.to_canonical()))
}

/// The address of a pin, written in full: `203.0.113.7`, `2001:db8::1` or `[2001:db8::1]`.
/// Shorthands a resolver would also take (`127.1`, `0x7f000001`, `2852039166`, `010.0.0.1`)
/// are refused with the address they stand for: like a policy's `cidr`, a pin is written
/// by a person, and `010` means 8 to one reader and 10 to another. `::ffff:a.b.c.d` is
/// `a.b.c.d`, as for every target, so the floor and `cidr` rules see one spelling.
pub fn parse_pin_address(raw: &str) -> Result<IpAddr, PinAddressError> {
    let parsed = match raw
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
    {
        Some(inner) => inner.parse::<std::net::Ipv6Addr>().map(IpAddr::V6).ok(),
        None => raw.parse::<IpAddr>().ok(),
    };
    if let Some(ip) = parsed {
        return Ok(ip.to_canonical());
    }
    match Target::parse_host(raw) {
        Ok(Target::Ip(full)) => Err(PinAddressError::Shorthand {
            given: raw.to_owned(),
            full,
        }),
        _ => Err(PinAddressError::NotAnAddress(raw.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_normalised_and_checked() {
        let (name, ip) = parse_pin("API.Example.com.=127.0.0.2").unwrap();
        assert_eq!(name.as_str(), "api.example.com");
        assert_eq!(ip, "127.0.0.2".parse::<IpAddr>().unwrap());
        assert!(matches!(parse_pin("example.com"), Err(PinError::Syntax(_))));
        assert!(matches!(
            parse_pin("example.com=other.example"),
            Err(PinError::Address { .. })
        ));
        assert!(matches!(
            parse_pin("1.2.3.4=1.2.3.4"),
            Err(PinError::Name { .. })
        ));
    }

    #[test]
    fn typed_pins_are_normalised_and_checked_as_written_ones() {
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        let (name, ip) = check_pin("API.Example.com.", mapped).unwrap();
        assert_eq!(name.as_str(), "api.example.com");
        assert_eq!(ip, "203.0.113.7".parse::<IpAddr>().unwrap());
        let error = check_pin("1.2.3.4", "1.2.3.4".parse().unwrap()).unwrap_err();
        assert!(
            matches!(&error, PinError::Name { pin, .. } if pin == "1.2.3.4=1.2.3.4"),
            "{error:?}"
        );
    }

    /// A shorthand address (`127.1`, `0x7f000001`) is refused wherever a pin is read, and
    /// the error says what it stands for, so `run` and `proxy` never read one pin two ways.
    #[test]
    fn pin_addresses_are_written_in_full() {
        for (given, full) in [
            ("127.1", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("2852039166", "169.254.169.254"),
            ("0177.0.0.1", "127.0.0.1"),
        ] {
            let error = parse_pin(&format!("api.test={given}")).unwrap_err();
            assert_eq!(
                error,
                PinError::Address {
                    pin: format!("api.test={given}"),
                    error: PinAddressError::Shorthand {
                        given: given.into(),
                        full: full.parse().unwrap()
                    }
                }
            );
            assert_eq!(
                error.to_string(),
                format!(
                    "\"api.test={given}\": `{given}` is a shorthand of {full}; write the address in full"
                )
            );
        }
        for (given, ip) in [
            ("203.0.113.7", "203.0.113.7"),
            ("2001:db8::1", "2001:db8::1"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("::ffff:203.0.113.7", "203.0.113.7"),
        ] {
            assert_eq!(
                parse_pin_address(given),
                Ok(ip.parse::<IpAddr>().unwrap()),
                "{given}"
            );
        }
        for bad in ["", "[203.0.113.7]", "fe80::1%eth0", "1.2.3.4.5", " 1.2.3.4"] {
            assert!(
                matches!(
                    parse_pin_address(bad),
                    Err(PinAddressError::NotAnAddress(_))
                ),
                "{bad:?}"
            );
        }
    }
}
