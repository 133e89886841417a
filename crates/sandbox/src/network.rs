//! The run's own network and the shared way out.
//!
//! A run whose sandbox cannot pass its doors to the proxy (a remote engine, a runtime other
//! than runc: see `wiring`) gets an internal bridge with a /29 from the tool's pool: `.1` is the gateway
//! Docker reserves (and, with `inhibit_ipv4`, never puts on the host), `.2` the proxy, `.3`
//! the sandbox. Without `inhibit_ipv4` the host would have an address on the bridge and the
//! sandbox could reach host listeners through it (measured; `docs/src/design/wirings.md`).
//! Docker's default pools run out at ~31 networks, hence the own pool.
//!
//! The proxy's second leg is the shared bridge `egress-sandbox-egress` with inter-container
//! traffic off, so proxies of different runs cannot reach each other.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use bollard::models::{Ipam, IpamConfig, NetworkCreateRequest};
use ipnet::Ipv4Net;

use crate::engine::{
    ContainerEngine, DockerError, EngineError, ListFilter, NetworkConfig, NetworkSummary,
};
use crate::labels::SHARED_LABEL;

/// The shared network every run's proxy reaches the outside through, unless a run names another.
pub const EGRESS_NETWORK: &str = "egress-sandbox-egress";
const RUN_PREFIX: u8 = 29;
/// Concurrent runs may pick the same free /29; the loser picks again.
const MAX_CREATE_ATTEMPTS: usize = 8;

/// The addresses of a run network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunSubnet {
    pub subnet: Ipv4Net,
}

impl RunSubnet {
    pub(crate) fn gateway(&self) -> Ipv4Addr {
        self.host(1)
    }
    pub(crate) fn proxy(&self) -> Ipv4Addr {
        self.host(2)
    }
    pub(crate) fn sandbox(&self) -> Ipv4Addr {
        self.host(3)
    }
    fn host(&self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.subnet.network()) + n)
    }
}

/// IPv4 subnets in use by existing networks.
fn used_subnets(networks: &[NetworkSummary]) -> Vec<Ipv4Net> {
    networks
        .iter()
        .flat_map(|network| &network.subnets)
        .filter_map(|subnet| subnet.parse::<Ipv4Net>().ok())
        .collect()
}

fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// A /29 of `pool` that overlaps none of `used`, searching from a random place so that
/// concurrent runs rarely pick the same one.
fn pick_subnet(pool: Ipv4Net, used: &[Ipv4Net], start: usize) -> Option<Ipv4Net> {
    let slots = 1usize << (RUN_PREFIX - pool.prefix_len());
    let base = u32::from(pool.network());
    (0..slots)
        .map(|i| (start + i) % slots)
        .map(|slot| {
            Ipv4Net::new(Ipv4Addr::from(base + ((slot as u32) << 3)), RUN_PREFIX)
                .expect("valid prefix")
        })
        .find(|candidate| !used.iter().any(|used| overlaps(candidate, used)))
}

/// Why a run network or the egress network could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetworkError {
    #[error(
        "no free /29 left in the subnet pool {pool} (set EGRESS_SANDBOX_SUBNET_POOL to another range, or run `egress-sandbox gc`)"
    )]
    /// Every /29 of the subnet pool is in use.
    PoolExhausted {
        /// The pool searched.
        pool: Ipv4Net,
    },
    /// Creating the run network failed.
    #[error("Docker: create network {name}")]
    Create {
        /// The network's name.
        name: String,
        /// The engine's refusal.
        #[source]
        source: DockerError,
    },
    /// The egress network named for the run does not exist.
    #[error("egress network {name:?} does not exist (create it, or leave out --egress-network)")]
    EgressMissing {
        /// The network's name.
        name: String,
    },
    /// The engine refused a request about the egress network.
    #[error("Docker: egress network {name}")]
    Egress {
        /// The network's name or id.
        name: String,
        /// The engine's refusal.
        #[source]
        source: DockerError,
    },
    /// Listing the engine's networks failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

fn run_network_request(
    name: &str,
    subnet: RunSubnet,
    labels: &HashMap<String, String>,
) -> NetworkCreateRequest {
    NetworkCreateRequest {
        name: name.to_string(),
        driver: Some("bridge".into()),
        internal: Some(true),
        attachable: Some(false),
        enable_ipv6: Some(false),
        ipam: Some(Ipam {
            driver: Some("default".into()),
            config: Some(vec![IpamConfig {
                subnet: Some(subnet.subnet.to_string()),
                gateway: Some(subnet.gateway().to_string()),
                ..IpamConfig::default()
            }]),
            options: None,
        }),
        options: Some(HashMap::from([
            // The host gets no address on this bridge: nothing on the host is reachable.
            (
                "com.docker.network.bridge.inhibit_ipv4".to_string(),
                "true".to_string(),
            ),
            (
                "com.docker.network.bridge.enable_ip_masquerade".to_string(),
                "false".to_string(),
            ),
        ])),
        labels: Some(labels.clone()),
        ..NetworkCreateRequest::default()
    }
}

/// Creates the run network `name` on a free /29 of `pool`, retrying when a concurrent run
/// took the same one. Owned arguments: it runs to completion as a task of its own (see
/// `Teardown::complete`).
pub(crate) async fn create_run_network(
    engine: Arc<dyn ContainerEngine>,
    pool: Ipv4Net,
    name: String,
    labels: HashMap<String, String>,
) -> Result<RunSubnet, NetworkError> {
    let slots = 1usize << (RUN_PREFIX - pool.prefix_len());
    let mut start = rand::random_range(0..slots);
    let mut attempt = 0;
    loop {
        attempt += 1;
        // The first try skips the listing: a random /29 of a big pool is almost always
        // free, and the engine refuses an overlapping one anyway ("Pool overlaps").
        let used = if attempt == 1 {
            Vec::new()
        } else {
            used_subnets(
                &engine
                    .list_networks(&ListFilter::All)
                    .await
                    .map_err(EngineError::api("list networks"))?,
            )
        };
        let subnet = pick_subnet(pool, &used, start)
            .map(|subnet| RunSubnet { subnet })
            .ok_or(NetworkError::PoolExhausted { pool })?;
        let request = NetworkConfig::new(run_network_request(&name, subnet, &labels));
        match engine.create_network(request).await {
            Ok(_) => return Ok(subnet),
            Err(error) if attempt < MAX_CREATE_ATTEMPTS && error.says("overlaps") => {
                tracing::debug!(%subnet.subnet, "subnet taken by a concurrent run; picking again");
                start = rand::random_range(0..slots);
            }
            Err(source) => return Err(NetworkError::Create { name, source }),
        }
    }
}

/// The id of the network the proxy reaches the outside through: `requested` (which must
/// exist) or the shared `egress-sandbox-egress`, created on first use — also when it is
/// named explicitly.
pub(crate) async fn egress_network(
    engine: &dyn ContainerEngine,
    requested: Option<&str>,
) -> Result<String, NetworkError> {
    if let Some(name) = requested.filter(|name| *name != EGRESS_NETWORK) {
        return match engine.inspect_network(name).await {
            Ok(network) if !network.id.is_empty() => Ok(network.id),
            Ok(_) => Ok(name.to_string()),
            Err(error) if error.is_not_found() => Err(NetworkError::EgressMissing {
                name: name.to_string(),
            }),
            Err(source) => Err(NetworkError::Egress {
                name: name.to_string(),
                source,
            }),
        };
    }
    if let Some(id) = shared_egress_id(engine).await? {
        return Ok(id);
    }
    let request = NetworkConfig::new(NetworkCreateRequest {
        name: EGRESS_NETWORK.to_string(),
        driver: Some("bridge".into()),
        enable_ipv6: Some(false),
        options: Some(HashMap::from([(
            "com.docker.network.bridge.enable_icc".to_string(),
            "false".to_string(),
        )])),
        labels: Some(HashMap::from([(
            SHARED_LABEL.to_string(),
            "egress".to_string(),
        )])),
        ..NetworkCreateRequest::default()
    });
    match engine.create_network(request).await {
        Ok(_) => {}
        Err(error) if error.is_conflict() => {}
        Err(source) => {
            return Err(NetworkError::Egress {
                name: EGRESS_NETWORK.to_string(),
                source,
            });
        }
    }
    // Engines before API 1.44 do not refuse a second network of the same name, so two
    // first runs may both create one. Everyone then settles on the same one (oldest id
    // order) and the loser's spare is removed if nobody uses it.
    let mut shared = shared_egress_networks(engine).await?;
    shared.sort();
    let Some(chosen) = shared.first().cloned() else {
        return Err(NetworkError::EgressMissing {
            name: EGRESS_NETWORK.to_string(),
        });
    };
    for spare in &shared[1..] {
        if let Err(error) = engine.ensure_network_removed(spare).await {
            tracing::debug!(%spare, %error, "spare egress network still in use");
        }
    }
    Ok(chosen)
}

/// The gateway addresses of network `id`: the host's own side of the bridge, which the
/// proxy reaches directly (host listeners on 0.0.0.0 answer there).
pub(crate) async fn gateways(
    engine: &dyn ContainerEngine,
    id: &str,
) -> Result<Vec<IpAddr>, NetworkError> {
    let network = engine
        .inspect_network(id)
        .await
        .map_err(|source| NetworkError::Egress {
            name: id.to_string(),
            source,
        })?;
    Ok(network
        .gateways
        .iter()
        .filter_map(|gateway| gateway.parse().ok())
        .collect())
}

/// Addresses that lead back to the engine's host although the private floor does not
/// cover them: the egress gateways and, with a local engine, every address of every
/// interface of this host (a public address of the host reaches its listeners through the
/// egress bridge). Addresses the floor already refuses (loopback, RFC 1918, link-local …)
/// are left out: they would only lengthen the proxy's arguments.
pub(crate) fn floor_extra(gateways: &[IpAddr], host_addresses: &[IpAddr]) -> Vec<IpAddr> {
    let mut extra: Vec<IpAddr> = gateways
        .iter()
        .chain(host_addresses)
        .copied()
        .filter(|address| !egress_core::floor::is_private(*address))
        .collect();
    extra.sort();
    extra.dedup();
    extra
}

/// Every address of every interface of this host, IPv4 and IPv6.
pub(crate) fn host_addresses() -> std::io::Result<Vec<IpAddr>> {
    Ok(if_addrs::get_if_addrs()?
        .into_iter()
        .map(|interface| interface.ip())
        .collect())
}

/// Ids of the shared egress networks (normally one), exact name match.
async fn shared_egress_networks(engine: &dyn ContainerEngine) -> Result<Vec<String>, NetworkError> {
    let networks = engine
        .list_networks(&ListFilter::Name(EGRESS_NETWORK.to_owned()))
        .await
        .map_err(EngineError::api("list networks"))?;
    Ok(networks
        .into_iter()
        .filter(|network| network.name == EGRESS_NETWORK)
        .map(|network| network.id)
        .collect())
}

async fn shared_egress_id(engine: &dyn ContainerEngine) -> Result<Option<String>, NetworkError> {
    match engine.inspect_network(EGRESS_NETWORK).await {
        Ok(network) => Ok((!network.id.is_empty()).then_some(network.id)),
        Err(error) if error.is_not_found() => Ok(None),
        // Ambiguous name (two were created by a race): pick the same one everyone picks.
        Err(_) => {
            let mut shared = shared_egress_networks(engine).await?;
            shared.sort();
            Ok(shared.into_iter().next())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_of_a_run_subnet() {
        let run = RunSubnet {
            subnet: net("10.213.0.8/29"),
        };
        assert_eq!(run.gateway(), Ipv4Addr::new(10, 213, 0, 9));
        assert_eq!(run.proxy(), Ipv4Addr::new(10, 213, 0, 10));
        assert_eq!(run.sandbox(), Ipv4Addr::new(10, 213, 0, 11));
    }

    #[test]
    fn picks_a_free_slash_29_and_wraps_around() {
        let pool = net("10.213.0.0/27");
        let used = vec![net("10.213.0.0/29"), net("10.213.0.16/28")];
        assert_eq!(pick_subnet(pool, &used, 0), Some(net("10.213.0.8/29")));
        assert_eq!(pick_subnet(pool, &used, 3), Some(net("10.213.0.8/29")));
        let full = vec![net("10.0.0.0/8")];
        assert_eq!(pick_subnet(pool, &full, 0), None);
    }

    #[test]
    fn the_floor_gets_public_host_addresses_and_gateways_once_private_ones_not() {
        let ip = |raw: &str| raw.parse::<IpAddr>().unwrap();
        let extra = floor_extra(
            &[ip("172.18.0.1"), ip("192.0.3.1")],
            &[
                ip("127.0.0.1"),
                ip("10.0.0.5"),
                ip("192.0.3.1"),
                ip("93.184.216.34"),
                ip("2a00:1450::1"),
                ip("fe80::1"),
                ip("::1"),
            ],
        );
        assert_eq!(
            extra,
            [ip("93.184.216.34"), ip("192.0.3.1"), ip("2a00:1450::1")]
        );
    }

    #[test]
    fn this_host_has_addresses() {
        let addresses = host_addresses().unwrap();
        assert!(addresses.contains(&ip_loopback()), "{addresses:?}");
    }

    fn ip_loopback() -> IpAddr {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    }

    #[test]
    fn run_network_is_internal_without_a_host_address() {
        let subnet = RunSubnet {
            subnet: net("10.213.0.8/29"),
        };
        let request = run_network_request("egress-run-r-1", subnet, &HashMap::new());
        assert_eq!(request.internal, Some(true));
        assert_eq!(request.enable_ipv6, Some(false));
        let options = request.options.unwrap();
        assert_eq!(
            options["com.docker.network.bridge.inhibit_ipv4"],
            "true".to_string()
        );
        let ipam = request.ipam.unwrap().config.unwrap();
        assert_eq!(ipam[0].subnet.as_deref(), Some("10.213.0.8/29"));
        assert_eq!(ipam[0].gateway.as_deref(), Some("10.213.0.9"));
    }
}
