//! Listeners, the connection limit and shutdown.
//!
//! [`Proxy::bind`] binds every listener (so a port conflict fails before anything runs),
//! then starts accepting. [`BoundProxy`] splits the two steps for callers that must announce
//! readiness between them — the `proxy` command prints its ready line there, so it comes
//! before any audit record on stdout.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::audit::{Attempt, AuditCounts, AuditSink, Kind, Outcome};
use crate::config::ProxyConfig;
use crate::policy::Reason;
use crate::shared::{ConnectionSlot, Door, Shared};
use crate::shutdown::{Shutdown, ShutdownTrigger};

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Credentials(#[from] crate::inspect::InspectError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot open the audit log: {0}")]
    Audit(std::io::Error),
    #[error(
        "the DNS responder on {0} needs an address to answer with (--dns-answer IPv4) when it listens on an unspecified or IPv6 address"
    )]
    DnsAnswer(SocketAddr),
    #[error("--dns-answer {0} must be an IPv4 address: the sandbox has no IPv6")]
    DnsAnswerV6(IpAddr),
}

/// The addresses actually bound (port 0 resolved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalAddrs {
    pub listen: SocketAddr,
    pub dns: Option<SocketAddr>,
    pub transparent: Vec<SocketAddr>,
}

/// Entry point: bind and start in one step.
pub struct Proxy;

impl Proxy {
    pub async fn bind(config: ProxyConfig) -> Result<RunningProxy, ProxyError> {
        Ok(BoundProxy::bind(config).await?.start())
    }
}

/// Every listener bound, nothing accepted yet.
pub struct BoundProxy {
    shared: Arc<Shared>,
    explicit: TcpListener,
    transparent: Vec<TcpListener>,
    dns: Option<(UdpSocket, TcpListener)>,
    addrs: LocalAddrs,
}

impl BoundProxy {
    pub async fn bind(mut config: ProxyConfig) -> Result<BoundProxy, ProxyError> {
        // Secrets and the run CA are checked and made before any port is bound.
        let inspect = crate::inspect::Inspector::new(
            &config.policy,
            std::mem::take(&mut config.credentials),
        )?;
        let dns_answer = match (config.dns_listen, config.dns_answer) {
            (None, _) => None,
            (Some(_), Some(IpAddr::V4(ip))) => Some(ip),
            (Some(_), Some(ip @ IpAddr::V6(_))) => return Err(ProxyError::DnsAnswerV6(ip)),
            (Some(listen), None) => match listen.ip() {
                IpAddr::V4(ip) if !ip.is_unspecified() => Some(ip),
                _ => return Err(ProxyError::DnsAnswer(listen)),
            },
        };
        // The transparent doors first: they take fixed ports (:80, :443 in a run), and
        // an explicit or DNS listener asked for port 0 must not be given one of those.
        let mut transparent = Vec::new();
        for addr in &config.transparent_listen {
            transparent.push(bind_tcp(*addr)?);
        }
        let explicit = bind_tcp(config.listen)?;
        let dns = match config.dns_listen {
            Some(addr) => Some(bind_dns(addr).await?),
            None => None,
        };
        let addrs = LocalAddrs {
            listen: local_addr(&explicit)?,
            dns: match &dns {
                Some((udp, _)) => Some(udp.local_addr().map_err(|source| ProxyError::Bind {
                    addr: config.listen,
                    source,
                })?),
                None => None,
            },
            transparent: transparent
                .iter()
                .map(local_addr)
                .collect::<Result<_, _>>()?,
        };
        let shared = Shared::new(config, dns_answer, inspect).map_err(ProxyError::Audit)?;
        Ok(BoundProxy {
            shared: Arc::new(shared),
            explicit,
            transparent,
            dns,
            addrs,
        })
    }

    pub fn local_addrs(&self) -> &LocalAddrs {
        &self.addrs
    }

    /// The run CA's certificate (PEM) when some host is inspected: for the ready line.
    pub fn ca_certificate_pem(&self) -> Option<&str> {
        self.shared.inspect.as_ref()?.ca_certificate_pem()
    }

    /// Each secret's placeholder, by name (what the sandbox's environment holds).
    pub fn placeholders(&self) -> Vec<(String, String)> {
        let mut placeholders: Vec<(String, String)> = self
            .shared
            .inspect
            .iter()
            .flat_map(|inspect| inspect.placeholders())
            .map(|(name, placeholder)| (name.to_owned(), placeholder.to_owned()))
            .collect();
        placeholders.sort();
        placeholders
    }

    /// Starts accepting on every listener.
    pub fn start(self) -> RunningProxy {
        let ca_pem = self.ca_certificate_pem().map(str::to_owned);
        let (trigger, shutdown) = Shutdown::new();
        let connections = Arc::new(Semaphore::new(self.shared.limits.max_connections));
        let mut tasks = Vec::new();
        let accept = |listener, door| {
            tokio::spawn(accept_loop(
                listener,
                door,
                self.shared.clone(),
                connections.clone(),
                shutdown.clone(),
            ))
        };
        tasks.push(accept(self.explicit, Door::Explicit));
        for (listener, addr) in self.transparent.into_iter().zip(&self.addrs.transparent) {
            tasks.push(accept(listener, Door::Transparent { port: addr.port() }));
        }
        if let Some((udp, tcp)) = self.dns {
            tasks.push(tokio::spawn(crate::dns::serve_udp(
                udp,
                self.shared.clone(),
                shutdown.clone(),
            )));
            tasks.push(tokio::spawn(crate::dns::serve_tcp(
                tcp,
                self.shared.clone(),
                connections.clone(),
                shutdown.clone(),
            )));
        }
        RunningProxy {
            ca_pem,
            addrs: self.addrs,
            audit: self.shared.gate.audit().clone(),
            grace: self.shared.limits.shutdown_grace,
            trigger,
            shutdown: Some(shutdown),
            tasks,
        }
    }
}

/// A proxy that is serving. Dropping it without [`RunningProxy::shutdown`] leaves the tasks
/// running on the runtime; call `shutdown` to stop cleanly.
pub struct RunningProxy {
    ca_pem: Option<String>,
    addrs: LocalAddrs,
    audit: AuditSink,
    grace: std::time::Duration,
    trigger: ShutdownTrigger,
    shutdown: Option<Shutdown>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningProxy {
    pub fn local_addrs(&self) -> &LocalAddrs {
        &self.addrs
    }

    /// The run CA's certificate (PEM) when some host is inspected.
    pub fn ca_certificate_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Records written so far, per (decision, reason): what a run summary needs.
    pub fn counts(&self) -> AuditCounts {
        self.audit.counts()
    }

    /// The audit sink, which outlives [`RunningProxy::shutdown`]: after it, its
    /// `write_errors` says whether the log is whole.
    pub fn audit_sink(&self) -> crate::audit::AuditSink {
        self.audit.clone()
    }

    /// Waits until every record sent so far is written.
    pub async fn flush(&self) {
        self.audit.flush().await;
    }

    /// Stops accepting, closes tunnels (each writes its record with its byte counts), gives
    /// in-flight requests a short grace, then closes the run's audit chain with its `end`
    /// record and flushes it. Returns the final counts.
    pub async fn shutdown(mut self) -> AuditCounts {
        self.trigger.begin();
        self.shutdown = None;
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        // Every connection task holds a `Shutdown`; the channel closes when the last ends.
        let wait = self.grace + std::time::Duration::from_millis(300);
        if !self.trigger.finished(wait).await {
            tracing::warn!("some connections did not finish within the shutdown grace");
        }
        self.audit.finish().await;
        self.audit.counts()
    }
}

/// UDP and TCP on the same port. With port 0 the UDP port is chosen first; if its TCP twin
/// is taken (another program's ephemeral port), another pair is tried.
async fn bind_dns(addr: SocketAddr) -> Result<(UdpSocket, TcpListener), ProxyError> {
    let attempts = if addr.port() == 0 { 16 } else { 1 };
    let mut last = None;
    for _ in 0..attempts {
        let udp = UdpSocket::bind(addr)
            .await
            .map_err(|source| ProxyError::Bind { addr, source })?;
        let bound = udp
            .local_addr()
            .map_err(|source| ProxyError::Bind { addr, source })?;
        match bind_tcp(bound) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(error) => last = Some(error),
        }
    }
    Err(last.expect("at least one attempt"))
}

fn bind_tcp(addr: SocketAddr) -> Result<TcpListener, ProxyError> {
    crate::listen::tcp_listener(addr).map_err(|source| ProxyError::Bind { addr, source })
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, ProxyError> {
    listener.local_addr().map_err(|source| ProxyError::Bind {
        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        source,
    })
}

async fn accept_loop(
    listener: TcpListener,
    door: Door,
    shared: Arc<Shared>,
    connections: Arc<Semaphore>,
    mut shutdown: Shutdown,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.wait() => return,
        };
        let (stream, client) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let task_shutdown = shutdown.clone();
        match connections.clone().try_acquire_owned() {
            Ok(permit) => {
                tokio::spawn(serve_connection(
                    stream,
                    client,
                    door,
                    shared,
                    task_shutdown,
                    ConnectionSlot::new(permit),
                ));
            }
            Err(_) => {
                tokio::spawn(refuse_over_limit(
                    stream,
                    client,
                    door,
                    shared,
                    task_shutdown,
                ));
            }
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    client: SocketAddr,
    door: Door,
    shared: Arc<Shared>,
    shutdown: Shutdown,
    slot: ConnectionSlot,
) {
    match door {
        Door::Explicit => crate::http::serve(stream, client, door, shared, shutdown, slot).await,
        // Boxed: its state (the TLS door) is ten times the explicit door's, and every
        // accepted connection's task would otherwise be that large (copied in at spawn).
        Door::Transparent { port } => {
            Box::pin(crate::transparent::serve(
                stream, client, port, shared, shutdown, slot,
            ))
            .await;
        }
    }
}

/// Over the connection limit: one `limit` record (written before the answer), a 503 on the
/// explicit listener, close.
async fn refuse_over_limit(
    mut stream: TcpStream,
    client: SocketAddr,
    door: Door,
    shared: Arc<Shared>,
    _shutdown: Shutdown,
) {
    let mut attempt = Attempt::new(shared.gate.audit(), Kind::Tcp, Some(client));
    attempt.set_outcome(Outcome::Blocked, Reason::Limit, None);
    if let Door::Transparent { port } = door {
        attempt.port = Some(port);
    }
    attempt.record().await;
    if let Door::Explicit = door {
        let body = "egress-sandbox: the proxy is at its connection limit\n";
        let response = format!(
            "HTTP/1.1 503 Service Unavailable\r\nX-Egress-Blocked: limit\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let write = stream.write_all(response.as_bytes());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), write).await;
    }
}
