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

use crate::target::HostName;

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
