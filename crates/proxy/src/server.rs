//! Listeners, the connection limit and shutdown.
//!
//! [`Proxy::bind`] binds every listener (so a port conflict fails before anything runs),
//! then starts accepting. [`BoundProxy`] splits the two steps for callers that must announce
//! readiness between them — the `proxy` command prints its ready line there, so it comes
//! before any audit record on stdout.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket, UnixListener};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::audit::{Attempt, AuditCounts, AuditSink, Kind, Outcome};
use crate::config::ProxyConfig;
use crate::passed_listeners::{PassError, PassedListeners};
use crate::policy::Reason;
use crate::shared::{ConnectionSlot, Door, Shared};

use crate::inspector::InspectError;

/// Why a proxy could not be bound: nothing listens, and nothing was let through.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The secrets do not fit the policy's credentials, or the run CA could not be made.
    #[error(transparent)]
    Credentials(#[from] InspectError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why it could not be bound.
        source: std::io::Error,
    },
    /// The Unix socket that receives the passed listeners could not be bound.
    #[error("cannot listen on {}", path.display())]
    BindUnix {
        /// Its path (`ProxyConfig::listeners_from`).
        path: PathBuf,
        /// Why it could not be bound.
        source: std::io::Error,
    },
    /// `listeners_from` without `dns_answer`: the passed DNS door could answer nothing.
    #[error(
        "a proxy whose listeners are passed in needs an address to answer DNS with (dns_answer, IPv4)"
    )]
    PassedNeedsDnsAnswer,
    /// The audit destination could not be opened.
    #[error("cannot open the audit log: {0}")]
    Audit(std::io::Error),
    /// A DNS door on an address that is no answer itself, without `dns_answer`.
    #[error(
        "the DNS responder on {0} needs an address to answer with (dns_answer, IPv4) when it listens on an unspecified or IPv6 address"
    )]
    DnsAnswer(SocketAddr),
    /// `dns_answer` is IPv6, which the sandbox cannot reach.
    #[error("dns_answer {0} must be an IPv4 address: the sandbox has no IPv6")]
    DnsAnswerV6(IpAddr),
}

/// The addresses actually bound (port 0 resolved).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocalAddrs {
    /// The explicit proxy listener.
    pub listen: SocketAddr,
    /// The DNS responder (UDP and TCP), if it runs.
    pub dns: Option<SocketAddr>,
    /// The transparent listeners, in the configuration's order.
    pub transparent: Vec<SocketAddr>,
    /// The raw doors, in the configuration's order.
    pub raw: Vec<SocketAddr>,
}

/// Entry point: bind and start in one step.
pub struct Proxy;

impl Proxy {
    /// Binds every listener of `config` and starts serving ([`BoundProxy::bind`], then
    /// [`BoundProxy::start`]).
    pub async fn bind(config: ProxyConfig) -> Result<RunningProxy, ProxyError> {
        Ok(BoundProxy::bind(config).await?.start())
    }
}

/// Every listener bound (or the socket that will receive them), nothing accepted yet.
pub struct BoundProxy {
    shared: Arc<Shared>,
    doors: Doors,
    addrs: LocalAddrs,
}

/// Where the doors' listeners come from.
enum Doors {
    /// Bound by the proxy itself.
    Bound {
        explicit: TcpListener,
        transparent: Vec<TcpListener>,
        raw: Vec<TcpListener>,
        dns: Option<(UdpSocket, TcpListener)>,
    },
    /// Passed by the sandbox's launcher ([`crate::passed_listeners`]) to this Unix socket, which
    /// takes one pass and is removed.
    Passed { socket: UnixListener, path: PathBuf },
}

impl BoundProxy {
    /// Checks the secrets against the policy, makes the run CA, opens the audit
    /// destination and binds every listener (or the Unix socket of passed ones), serving
    /// nothing yet: the caller can hand out the addresses and the CA before the first
    /// connection is taken.
    pub async fn bind(mut config: ProxyConfig) -> Result<BoundProxy, ProxyError> {
        // Secrets and the run CA are checked and made before any port is bound.
        let inspect = crate::inspector::Inspector::new(
            &config.policy,
            std::mem::take(&mut config.credentials),
        )?;
        if let Some(path) = config.listeners_from.clone() {
            return Self::await_listeners(config, inspect, path);
        }
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
        let mut raw = Vec::new();
        for addr in &config.raw_listen {
            raw.push(bind_tcp(*addr)?);
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
            raw: raw.iter().map(local_addr).collect::<Result<_, _>>()?,
        };
        let shared = Shared::new(config, dns_answer, inspect).map_err(ProxyError::Audit)?;
        Ok(BoundProxy {
            shared: Arc::new(shared),
            doors: Doors::Bound {
                explicit,
                transparent,
                raw,
                dns,
            },
            addrs,
        })
    }

    /// Binds the Unix socket the sandbox passes the doors to; nothing else is bound here.
    fn await_listeners(
        config: ProxyConfig,
        inspect: Option<crate::inspector::Inspector>,
        path: PathBuf,
    ) -> Result<BoundProxy, ProxyError> {
        let dns_answer = match config.dns_answer {
            Some(IpAddr::V4(ip)) => ip,
            Some(ip @ IpAddr::V6(_)) => return Err(ProxyError::DnsAnswerV6(ip)),
            None => return Err(ProxyError::PassedNeedsDnsAnswer),
        };
        // A socket file left by an earlier proxy in the same place would fail the bind.
        if std::fs::symlink_metadata(&path).is_ok_and(|meta| {
            use std::os::unix::fs::FileTypeExt;
            meta.file_type().is_socket()
        }) {
            let _ = std::fs::remove_file(&path);
        }
        let socket = UnixListener::bind(&path).map_err(|source| ProxyError::BindUnix {
            path: path.clone(),
            source,
        })?;
        let unbound = SocketAddr::from(([0, 0, 0, 0], 0));
        let shared = Shared::new(config, Some(dns_answer), inspect).map_err(ProxyError::Audit)?;
        Ok(BoundProxy {
            shared: Arc::new(shared),
            doors: Doors::Passed { socket, path },
            addrs: LocalAddrs {
                listen: unbound,
                dns: None,
                transparent: Vec::new(),
                raw: Vec::new(),
            },
        })
    }

    /// The addresses bound; when the listeners are passed in, none (all unspecified).
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
        let connections = Arc::new(Semaphore::new(self.shared.limits.max_connections));
        let tasks = match self.doors {
            Doors::Bound {
                explicit,
                transparent,
                raw,
                dns,
            } => {
                let with_ports = |listeners: Vec<TcpListener>, addrs: &[SocketAddr]| {
                    listeners
                        .into_iter()
                        .zip(addrs.iter().map(SocketAddr::port))
                        .collect()
                };
                let listeners = Listeners {
                    explicit,
                    transparent: with_ports(transparent, &self.addrs.transparent),
                    raw: with_ports(raw, &self.addrs.raw),
                    dns,
                    closed_sockets: None,
                };
                serve_doors(listeners, &self.shared, &connections)
            }
            Doors::Passed { socket, path } => vec![self.shared.tasks.spawn(serve_passed(
                socket,
                path,
                self.shared.clone(),
                connections,
            ))],
        };
        RunningProxy {
            ca_pem,
            addrs: self.addrs,
            shared: self.shared,
            listeners: tasks,
        }
    }
}

/// A proxy that is serving. Dropping it without [`RunningProxy::shutdown`] leaves the tasks
/// running on the runtime; call `shutdown` to stop cleanly.
pub struct RunningProxy {
    ca_pem: Option<String>,
    addrs: LocalAddrs,
    /// The doors' state: its stop token begins shutdown, its task tracker ends it.
    shared: Arc<Shared>,
    /// The listeners' tasks (and the wait for passed listeners), ended first at shutdown.
    listeners: Vec<JoinHandle<()>>,
}

impl RunningProxy {
    /// The addresses bound (port 0 resolved).
    pub fn local_addrs(&self) -> &LocalAddrs {
        &self.addrs
    }

    /// The run CA's certificate (PEM) when some host is inspected.
    pub fn ca_certificate_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Records written so far, per (decision, reason): what a run summary needs.
    pub fn counts(&self) -> AuditCounts {
        self.audit().counts()
    }

    /// The audit sink, which outlives [`RunningProxy::shutdown`]: after it, its
    /// `write_errors` says whether the log is whole.
    pub fn audit_sink(&self) -> crate::audit::AuditSink {
        self.audit().clone()
    }

    /// Waits until every record sent so far is written.
    pub async fn flush(&self) {
        self.audit().flush().await;
    }

    fn audit(&self) -> &AuditSink {
        self.shared.gate.audit()
    }

    /// Stops accepting, closes tunnels (each writes its record with its byte counts), gives
    /// in-flight requests a short grace, then closes the run's audit chain with its `end`
    /// record and flushes it. Returns the final counts.
    pub async fn shutdown(self) -> AuditCounts {
        let shared = &self.shared;
        shared.stop.cancel();
        for task in self.listeners {
            let _ = task.await;
        }
        // No listener is left to spawn a connection; each task that still runs was spawned
        // on the tracker, and every task it spawns is too.
        shared.tasks.close();
        let wait = shared.limits.shutdown_grace + std::time::Duration::from_millis(300);
        if tokio::time::timeout(wait, shared.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("some connections did not finish within the shutdown grace");
        }
        let audit = shared.gate.audit();
        audit.finish().await;
        audit.counts()
    }
}

/// Every door's listener, the transparent and raw ones with their ports, and the watch of
/// the sandbox's closed sockets ([`crate::refused_ports`]) when the sandbox passed one.
struct Listeners {
    explicit: TcpListener,
    transparent: Vec<(TcpListener, u16)>,
    raw: Vec<(TcpListener, u16)>,
    dns: Option<(UdpSocket, TcpListener)>,
    closed_sockets: Option<std::os::fd::OwnedFd>,
}

/// What a TCP listener's connections are served by.
#[derive(Clone, Copy, Debug)]
enum Entrance {
    /// A door that reads requests or a ClientHello ([`Door`]).
    Door(Door),
    /// A raw door on this port ([`crate::doors::raw`]).
    Raw { port: u16 },
}

/// Starts every door's task: the explicit door, the transparent and raw doors (with their
/// ports), the DNS responder, and the watch of connections no door received.
fn serve_doors(
    listeners: Listeners,
    shared: &Arc<Shared>,
    connections: &Arc<Semaphore>,
) -> Vec<JoinHandle<()>> {
    let Listeners {
        explicit,
        transparent,
        raw,
        dns,
        closed_sockets,
    } = listeners;
    // The ports with a door on the name block's addresses: the doors bound on every
    // address of the sandbox's loopback.
    let door_ports = transparent
        .iter()
        .chain(&raw)
        .map(|(_, port)| *port)
        .collect();
    let accept = |listener, door| {
        shared.tasks.spawn(accept_loop(
            listener,
            door,
            shared.clone(),
            connections.clone(),
        ))
    };
    let mut tasks = vec![accept(explicit, Entrance::Door(Door::Explicit))];
    for (listener, port) in transparent {
        tasks.push(accept(listener, Entrance::Door(Door::Transparent { port })));
    }
    for (listener, port) in raw {
        tasks.push(accept(listener, Entrance::Raw { port }));
    }
    if let Some(watch) = closed_sockets {
        tasks.push(shared.tasks.spawn(crate::refused_ports::serve(
            watch,
            door_ports,
            shared.clone(),
        )));
    }
    if let Some((udp, tcp)) = dns {
        tasks.push(
            shared
                .tasks
                .spawn(crate::doors::dns::serve_udp(udp, shared.clone())),
        );
        tasks.push(shared.tasks.spawn(crate::doors::dns::serve_tcp(
            tcp,
            shared.clone(),
            connections.clone(),
        )));
    }
    tasks
}

/// Waits for the sandbox's one pass of listeners (or shutdown), removes the socket it came
/// through, then serves the doors until shutdown. A pass that is refused leaves the
/// sandbox with no door: its connections are refused, nothing goes anywhere.
async fn serve_passed(
    socket: UnixListener,
    path: PathBuf,
    shared: Arc<Shared>,
    connections: Arc<Semaphore>,
) {
    let passed = tokio::select! {
        passed = PassedListeners::receive(socket, &path) => passed,
        () = shared.stop.cancelled() => {
            let _ = std::fs::remove_file(&path);
            return;
        }
    };
    let doors = passed.and_then(|passed| {
        let tokio_tcp = |listener| TcpListener::from_std(listener).map_err(PassError::Io);
        let with_ports = |listeners: Vec<std::net::TcpListener>| {
            listeners
                .into_iter()
                .map(|listener| {
                    let port = listener.local_addr()?.port();
                    Ok((tokio_tcp(listener)?, port))
                })
                .collect::<Result<Vec<_>, PassError>>()
        };
        let dns = match passed.dns {
            Some((udp, tcp)) => Some((UdpSocket::from_std(udp)?, tokio_tcp(tcp)?)),
            None => None,
        };
        Ok(Listeners {
            explicit: tokio_tcp(passed.explicit)?,
            transparent: with_ports(passed.transparent)?,
            raw: with_ports(passed.raw)?,
            dns,
            closed_sockets: passed.closed_sockets,
        })
    });
    let listeners = match doors {
        Ok(doors) => doors,
        Err(error) => {
            tracing::error!(
                error = %egress_core::text::with_causes(&error),
                "refused the listeners passed by the sandbox: no door is served"
            );
            return;
        }
    };
    if !listeners.raw.is_empty() || listeners.closed_sockets.is_some() {
        // Before any door is served: the sandbox's first lookup already gets its own address,
        // so both the raw doors and the closed-socket watch know which name an address
        // stands for.
        let _ = shared
            .names
            .set(crate::name_addresses::NameAddresses::new());
    }
    tracing::debug!("serving the listeners passed by the sandbox");
    for task in serve_doors(listeners, &shared, &connections) {
        let _ = task.await;
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
    door: Entrance,
    shared: Arc<Shared>,
    connections: Arc<Semaphore>,
) {
    crate::listen::accept_until_shutdown(listener, &shared.stop, |stream, client| {
        let _ = stream.set_nodelay(true);
        let task_shared = shared.clone();
        match connections.clone().try_acquire_owned() {
            Ok(permit) => {
                shared.tasks.spawn(serve_connection(
                    stream,
                    client,
                    door,
                    task_shared,
                    ConnectionSlot::new(permit),
                ));
            }
            Err(_) => {
                shared
                    .tasks
                    .spawn(refuse_over_limit(stream, client, door, task_shared));
            }
        }
    })
    .await;
}

async fn serve_connection(
    stream: TcpStream,
    client: SocketAddr,
    door: Entrance,
    shared: Arc<Shared>,
    slot: ConnectionSlot,
) {
    let door = match door {
        Entrance::Door(door) => door,
        Entrance::Raw { port } => {
            Box::pin(crate::doors::raw::serve(stream, client, port, shared, slot)).await;
            return;
        }
    };
    match door {
        Door::Explicit => crate::doors::http::serve(stream, client, door, shared, slot).await,
        // Boxed: its state (the TLS door) is ten times the explicit door's, and every
        // accepted connection's task would otherwise be that large (copied in at spawn).
        Door::Transparent { port } => {
            Box::pin(crate::doors::transparent::serve(
                stream, client, port, shared, slot,
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
    door: Entrance,
    shared: Arc<Shared>,
) {
    let mut attempt = Attempt::new(shared.gate.audit(), Kind::Tcp, Some(client));
    attempt.set_outcome(Outcome::Blocked, Reason::Limit, None);
    if let Entrance::Door(Door::Transparent { port }) | Entrance::Raw { port } = door {
        attempt.port = Some(port);
    }
    attempt.record().await;
    if let Entrance::Raw { .. } = door {
        crate::doors::raw::reset(stream);
        return;
    }
    if let Entrance::Door(Door::Explicit) = door {
        let body = "egress-sandbox: the proxy is at its connection limit\n";
        let response = format!(
            "HTTP/1.1 503 Service Unavailable\r\nX-Egress-Blocked: limit\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let write = stream.write_all(response.as_bytes());
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), write).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_that_cannot_be_bound_says_its_cause_once() {
        let bind = ProxyError::Bind {
            addr: SocketAddr::from(([127, 0, 0, 1], 9)),
            source: std::io::Error::other("address in use"),
        };
        let bind_unix = ProxyError::BindUnix {
            path: PathBuf::from("/run/doors.sock"),
            source: std::io::Error::other("address in use"),
        };
        for (error, shown) in [
            (&bind, "cannot listen on 127.0.0.1:9"),
            (&bind_unix, "cannot listen on /run/doors.sock"),
        ] {
            assert_eq!(error.to_string(), shown);
            assert_eq!(
                egress_core::text::with_causes(error),
                format!("{shown}: address in use")
            );
        }
    }
}
