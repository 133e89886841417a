//! What every door shares: the gate, the limits, the upstream pool, shutdown — and which
//! listener a connection came in on.
//!
//! Doors depend on this module, never on the server: the server builds one [`Shared`] from
//! the configuration and hands it to every door it dispatches to.

use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::audit::AuditSink;
use crate::config::{ProxyConfig, ProxyLimits};
use crate::exchange::Drain;
use crate::floor::Floor;
use crate::gate::Gate;
use crate::name_addresses::NameAddresses;
use crate::pool::UpstreamPool;
use crate::resolve::Resolver;
use crate::splice::PipePool;

/// Empty pipes kept for later tunnels (a tunnel takes two). A kept pipe holds no data, only
/// its two descriptors.
const IDLE_PIPES: usize = 64;

/// What every door shares, one per proxy.
pub(crate) struct Shared {
    pub gate: Gate,
    pub limits: ProxyLimits,
    /// The address the DNS responder answers allowed names with, if it runs.
    pub dns_answer: Option<Ipv4Addr>,
    pub pool: UpstreamPool,
    /// Empty splice pipes of closed tunnels, for the next tunnels.
    pub pipes: PipePool,
    /// The inspect door's CA, secrets and upstream TLS; None when nothing is inspected.
    pub inspect: Option<crate::inspector::Inspector>,
    /// The DNS responder's per-client limits (the whole loopback is one client), shared by
    /// the UDP and TCP responders.
    pub dns_rate: crate::dns_rate::DnsRate,
    /// The sandbox's own host name, answered without a record ([`ProxyConfig`]'s field).
    pub sandbox_hostname: Option<crate::target::HostName>,
    /// The run's name ↔ loopback address table, set once the proxy serves a raw door (bound
    /// at start, or passed by the sandbox before its command runs): from then on the DNS
    /// responder answers from it. Without raw doors, names get `dns_answer` as before.
    pub names: OnceLock<NameAddresses>,
    /// Places for raw door connections (`ProxyLimits::max_raw_connections`).
    pub raw_connections: Arc<Semaphore>,
    /// Cancelled when shutdown begins: every task watches it and stops.
    pub stop: CancellationToken,
    /// Every task that serves the sandbox — listeners, connections, tunnels, a record that
    /// waits for its request body — is spawned here: shutdown waits for them, so each
    /// writes its record (with its byte counts) before the audit chain is closed.
    pub tasks: TaskTracker,
}

impl Shared {
    /// Starts the audit writer and builds the gate from `config`. Fails only when the audit
    /// destination cannot be opened.
    pub(crate) fn new(
        config: ProxyConfig,
        dns_answer: Option<Ipv4Addr>,
        inspect: Option<crate::inspector::Inspector>,
    ) -> std::io::Result<Shared> {
        let names = OnceLock::new();
        if !config.raw_listen.is_empty() {
            let _ = names.set(NameAddresses::new());
        }
        let audit = AuditSink::start(
            config.audit,
            config.run_id,
            config.policy.name(),
            config.audit_limit.max(1),
            config.on_audit_limit,
        )?
        .with_redactor(
            inspect
                .as_ref()
                .map(|inspector| inspector.secret_forms().clone())
                .unwrap_or_default(),
        )
        .with_sandbox_hostname(config.sandbox_hostname.as_ref().map(|name| name.as_str()));
        let resolver = Resolver::new(
            config.pins,
            &config.name_servers,
            config.limits.resolve_timeout,
        );
        let gate = Gate::new(
            config.policy,
            Floor::with_extra(config.floor_extra),
            resolver,
            config.limits.connect_timeout,
            audit,
        )
        .with_placeholders(
            inspect
                .as_ref()
                .map(|inspector| inspector.placeholder_matcher().clone())
                .unwrap_or_default(),
        );
        Ok(Shared {
            gate,
            pool: UpstreamPool::new(
                config.limits.max_idle_upstreams,
                config.limits.upstream_idle_timeout,
            ),
            pipes: PipePool::new(IDLE_PIPES, config.limits.relay_buffer_bytes),
            raw_connections: Arc::new(Semaphore::new(config.limits.max_raw_connections)),
            limits: config.limits,
            dns_answer,
            inspect,
            dns_rate: crate::dns_rate::DnsRate::new(
                config.dns_rate,
                std::time::Duration::from_secs(u64::from(crate::dns_rate::ANSWER_TTL)),
            ),
            sandbox_hostname: config.sandbox_hostname,
            names,
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        })
    }

    /// Where a forwarded request's record waits for its upload: this proxy's tracker and
    /// stop token.
    pub(crate) fn drain(&self) -> Drain {
        Drain {
            tasks: self.tasks.clone(),
            stop: self.stop.clone(),
        }
    }
}

/// One place under `ProxyLimits::max_connections`. A client connection holds it, and so does
/// every tunnel the connection turns into (a CONNECT tunnel outlives the HTTP connection that
/// asked for it): the place is free again only when the last holder is gone, so an open
/// tunnel counts until it closes.
#[derive(Clone)]
pub(crate) struct ConnectionSlot {
    _permit: Arc<OwnedSemaphorePermit>,
}

impl ConnectionSlot {
    pub(crate) fn new(permit: OwnedSemaphorePermit) -> Self {
        ConnectionSlot {
            _permit: Arc::new(permit),
        }
    }
}

/// Which listener a connection came in on; decides how a request names its target.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Door {
    /// The explicit proxy: absolute-form requests and CONNECT.
    Explicit,
    /// A transparent listener on this port: the target is the `Host` header.
    Transparent { port: u16 },
}

/// The HTTP/1 server side of a client connection, as every door that reads requests from
/// the sandbox serves it: the head's time and size bounds, no half-close.
pub(crate) fn client_http1(limits: &ProxyLimits) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.head_timeout)
        .max_header_size(limits.max_head_bytes)
        .max_buf_size(limits.max_head_bytes.max(8192))
        .half_close(false);
    builder
}
