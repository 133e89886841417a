//! Everything the proxy needs, typed and checked before a port is bound.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::audit::AuditDestination;
use crate::policy::PolicySet;
use crate::resolve::NameServers;
use crate::target::HostName;

/// DNS queries per second per client unless [`ProxyConfig::dns_rate`] says otherwise.
pub use crate::dns_rate::DEFAULT_DNS_RATE;

/// The proxy's configuration. Build it with [`ProxyConfig::new`] and adjust the public
/// fields; every bound has a default that suits a sandboxed run.
#[non_exhaustive]
pub struct ProxyConfig {
    /// The merged policy every door asks.
    pub policy: PolicySet,
    /// The explicit proxy listener (CONNECT and absolute-form HTTP).
    pub listen: SocketAddr,
    /// The DNS responder (UDP and TCP on the same address), if any.
    pub dns_listen: Option<SocketAddr>,
    /// The address the DNS responder gives for allowed names: where the transparent
    /// listeners are, so programs that ignore proxy variables still reach the proxy.
    pub dns_answer: Option<IpAddr>,
    /// Transparent listeners: TLS routed by SNI, HTTP by `Host`.
    pub transparent_listen: Vec<SocketAddr>,
    /// Raw doors: any TCP protocol, the target named by the address the
    /// connection arrived on (the DNS responder's per-name answer,
    /// `name_addresses`) and the listener's port. With any raw door (bound here or
    /// passed in), the DNS responder answers each allowed name with an address of its own.
    pub raw_listen: Vec<SocketAddr>,
    /// Take every door from the sandbox instead of binding `listen`, `dns_listen` and
    /// `transparent_listen`: a Unix socket at this path receives one pass of listening
    /// sockets ([`crate::passed_listeners`]). `dns_answer` must then be given.
    pub listeners_from: Option<std::path::PathBuf>,
    /// Where audit records go.
    pub audit: AuditDestination,
    /// Written into every audit record's `run`.
    pub run_id: Option<String>,
    /// Attempt records written per run; past it one `limit` record, then attempts are only
    /// counted (the `end` record's `dropped`). At least 1.
    pub audit_limit: u64,
    /// DNS queries per second per client, every loopback address being one client (a run's
    /// sandbox is one client, whichever of its loopback addresses it sends from); over it a
    /// query is answered REFUSED, counted as dropped, and gets no record. At least 1.
    pub dns_rate: u32,
    /// Names pinned to addresses ([`crate::resolve::parse_pin`]); the floor still applies
    /// to them.
    pub pins: Vec<(HostName, IpAddr)>,
    /// Where unpinned names are resolved.
    pub name_servers: NameServers,
    /// Ranges added to the private-address floor ([`crate::floor::parse_extra`]): the engine host's own
    /// addresses and the egress gateway, which lead back to the machine running the sandbox
    /// although they may be public. Refused as `private_address` unless a `cidr` allow rule
    /// covers them.
    pub floor_extra: Vec<ipnet::IpNet>,
    pub limits: ProxyLimits,
    /// Secret values, upstream CAs and the run CA's lifetime, for inspected hosts.
    pub credentials: crate::secrets::CredentialConfig,
    /// The sandbox's own host name, when its resolv.conf names this proxy: a lookup of it
    /// is answered NOERROR with no records and writes no audit record (its address is in
    /// the sandbox's /etc/hosts; glibc asks DNS only for what that file lacks, AAAA). It
    /// names the sandbox itself, leads nowhere, and Docker's resolver answered it so.
    pub sandbox_hostname: Option<HostName>,
}

/// Bounds on everything that happens before a tunnel or request is established. After it,
/// nothing but the run's own limits: a tunnel lives until either side closes or shutdown.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProxyLimits {
    /// A client must send a complete request head within this time, so idle or slow
    /// connections (slowloris) cannot hold connection slots. Also the keep-alive idle time.
    pub head_timeout: Duration,
    /// Raw door connections open at once; each also holds a place under `max_connections`.
    /// Beyond it a raw connection is reset and one `limit` record is written.
    pub max_raw_connections: usize,
    /// A raw door connection on which no byte moved either way for this long is closed.
    pub raw_idle_timeout: Duration,
    /// Largest request head accepted (request line + headers); larger ones get 431.
    pub max_head_bytes: usize,
    /// Connections served at once over all TCP listeners; beyond it a connection gets 503
    /// (explicit listener) or is closed, and one `limit` record is written.
    pub max_connections: usize,
    /// A tunnel on a TLS port must deliver its ClientHello within this time.
    pub client_hello_timeout: Duration,
    /// Largest ClientHello accepted. Post-quantum key shares make real ones ~2 KiB; 16 KiB
    /// is one full TLS record plus room.
    pub max_client_hello_bytes: usize,
    /// Connecting to an allowed upstream must succeed within this time (else 504 `timeout`).
    pub connect_timeout: Duration,
    /// One DNS lookup, retries included, must finish within this time (else 502).
    pub resolve_timeout: Duration,
    /// Relay buffer per direction. Larger buffers mean fewer system calls per byte.
    pub relay_buffer_bytes: usize,
    /// On shutdown, open connections get this long to finish writing before they are cut.
    pub shutdown_grace: Duration,
    /// Idle upstream connections kept for plain HTTP requests to the same target and port
    /// (0 = none): reuse saves a connect per small request. `ab` at 1,000 clients opened a
    /// new upstream connection for 39 % of its requests with 64 kept, 11 % with 256, 7 % with
    /// 1,024 (3.4 % at 100 clients with 64).
    pub max_idle_upstreams: usize,
    /// An idle upstream connection older than this is not reused; servers close idle
    /// connections themselves after a few seconds, and a dead one would cost a retry.
    pub upstream_idle_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            head_timeout: Duration::from_secs(10),
            max_raw_connections: 256,
            raw_idle_timeout: Duration::from_secs(600),
            max_head_bytes: 64 * 1024,
            max_connections: 1024,
            client_hello_timeout: Duration::from_secs(10),
            max_client_hello_bytes: 16 * 1024 + 512,
            connect_timeout: Duration::from_secs(10),
            resolve_timeout: Duration::from_secs(5),
            relay_buffer_bytes: 256 * 1024,
            shutdown_grace: Duration::from_millis(500),
            max_idle_upstreams: 256,
            upstream_idle_timeout: Duration::from_secs(4),
        }
    }
}

impl ProxyConfig {
    /// A proxy on `listen` with `policy`, audit records on stdout, no DNS responder, no
    /// transparent listeners, the system resolver, default limits.
    pub fn new(policy: PolicySet, listen: SocketAddr) -> Self {
        ProxyConfig {
            policy,
            listen,
            dns_listen: None,
            dns_answer: None,
            transparent_listen: Vec::new(),
            raw_listen: Vec::new(),
            listeners_from: None,
            audit: AuditDestination::Stdout,
            run_id: None,
            audit_limit: crate::audit::DEFAULT_AUDIT_LIMIT,
            dns_rate: crate::dns_rate::DEFAULT_DNS_RATE,
            pins: Vec::new(),
            name_servers: NameServers::System,
            floor_extra: Vec::new(),
            limits: ProxyLimits::default(),
            credentials: crate::secrets::CredentialConfig::default(),
            sandbox_hostname: None,
        }
    }
}
