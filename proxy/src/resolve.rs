//! The proxy's own resolver: `--resolve` pins first, then DNS through hickory reading
//! `/etc/resolv.conf` (or name servers given by the caller).
//!
//! Never getaddrinfo / `ToSocketAddrs`: the binary is static, and the floor must judge the
//! exact addresses the proxy then connects to — which only holds if this module is the one
//! place names turn into addresses, and each name is resolved once per attempt.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;

use crate::target::{HostName, Target, TargetError};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ResolveError {
    #[error("no DNS resolver is configured ({0})")]
    NoResolver(String),
    #[error("{name} did not resolve: {message}")]
    Lookup { name: String, message: String },
    #[error("{0} has no addresses")]
    Empty(String),
    #[error("resolving {0} timed out")]
    Timeout(String),
}

/// Why a `NAME=IP` pin ([`ProxyConfig::pins`](crate::ProxyConfig::pins)) was refused.
/// `Display` starts with the quoted pin, so a front end can name its own source of pins
/// in front of it (the CLI: `--resolve "a.example": expected NAME=IP`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    #[error("{0:?}: expected NAME=IP")]
    Syntax(String),
    #[error("{pin:?}: {error}")]
    Name { pin: String, error: TargetError },
    #[error("{pin:?}: {error}")]
    Address { pin: String, error: PinAddressError },
}

/// Why the address of a pin was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PinAddressError {
    #[error("`{0}` is not an IP address")]
    NotAnAddress(String),
    #[error("`{given}` is a shorthand of {full}; write the address in full")]
    Shorthand { given: String, full: IpAddr },
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

/// Where DNS answers come from when a name is not pinned.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub enum NameServers {
    /// `/etc/resolv.conf`. When it cannot be read, only pinned names resolve.
    #[default]
    System,
    /// These name servers (UDP then TCP), e.g. a test's own DNS server.
    Given(Vec<SocketAddr>),
    /// No DNS at all: only pinned names resolve (tests that must never send a query).
    None,
}

pub(crate) struct Resolver {
    pins: HashMap<HostName, Vec<IpAddr>>,
    dns: Result<TokioResolver, String>,
    timeout: Duration,
}

impl Resolver {
    /// `timeout` bounds one whole lookup, retries included.
    pub(crate) fn new(
        pins: Vec<(HostName, IpAddr)>,
        name_servers: &NameServers,
        timeout: Duration,
    ) -> Self {
        let mut by_name: HashMap<HostName, Vec<IpAddr>> = HashMap::new();
        for (name, ip) in pins {
            let addresses = by_name.entry(name).or_default();
            if !addresses.contains(&ip) {
                addresses.push(ip);
            }
        }
        let dns = match name_servers {
            NameServers::None => Err("DNS is off; only --resolve names resolve".to_owned()),
            NameServers::System => TokioResolver::builder_tokio()
                .map(|mut builder| {
                    builder.options_mut().timeout = timeout;
                    builder.build()
                })
                .map_err(|error| error.to_string())
                .and_then(|built| built.map_err(|error| error.to_string())),
            NameServers::Given(servers) => {
                let config = ResolverConfig::from_parts(
                    None,
                    vec![],
                    servers
                        .iter()
                        .map(|server| {
                            let mut udp = ConnectionConfig::udp();
                            udp.port = server.port();
                            let mut tcp = ConnectionConfig::tcp();
                            tcp.port = server.port();
                            NameServerConfig::new(server.ip(), true, vec![udp, tcp])
                        })
                        .collect::<Vec<_>>(),
                );
                TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
                    .build()
                    .map_err(|error| error.to_string())
            }
        };
        if let Err(reason) = &dns {
            tracing::warn!(%reason, "no DNS resolver; only --resolve names will resolve");
        }
        Resolver {
            pins: by_name,
            dns,
            timeout,
        }
    }

    /// Every address of `name`, pins first. The caller checks each one against the floor
    /// and connects only to checked ones; it never asks again for the same attempt.
    pub(crate) async fn resolve(&self, name: &HostName) -> Result<Vec<IpAddr>, ResolveError> {
        if let Some(pinned) = self.pins.get(name) {
            return Ok(pinned.clone());
        }
        let dns = self
            .dns
            .as_ref()
            .map_err(|reason| ResolveError::NoResolver(reason.clone()))?;
        // A fully qualified query: the policy judged exactly this name, so no search domain
        // from resolv.conf may turn it into another one.
        let fqdn = format!("{name}.");
        let lookup = tokio::time::timeout(self.timeout, dns.lookup_ip(fqdn.as_str()))
            .await
            .map_err(|_| ResolveError::Timeout(name.to_string()))?
            .map_err(|error| ResolveError::Lookup {
                name: name.to_string(),
                message: error.to_string(),
            })?;
        let mut addresses: Vec<IpAddr> = Vec::new();
        for ip in lookup.iter() {
            if !addresses.contains(&ip) {
                addresses.push(ip);
            }
        }
        if addresses.is_empty() {
            return Err(ResolveError::Empty(name.to_string()));
        }
        Ok(addresses)
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

    /// Where `run` and `proxy` used to disagree: `proxy` took `127.1` as 127.0.0.1, `run`
    /// refused it; both now refuse every shorthand and say what it stands for.
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

    #[tokio::test]
    async fn pinned_names_resolve_without_dns() {
        let name = HostName::parse("pinned.test").unwrap();
        let resolver = Resolver::new(
            vec![
                (name.clone(), "127.0.0.2".parse().unwrap()),
                (name.clone(), "127.0.0.3".parse().unwrap()),
            ],
            &NameServers::None,
            Duration::from_secs(1),
        );
        let addresses = resolver.resolve(&name).await.unwrap();
        assert_eq!(addresses.len(), 2);
        let other = HostName::parse("other.test").unwrap();
        assert!(matches!(
            resolver.resolve(&other).await,
            Err(ResolveError::NoResolver(_))
        ));
    }
}
