//! Test support: the proxy on loopback with its audit records in a channel, upstream servers
//! on 127.0.0.x that record what reached them, and raw-byte clients.
#![allow(dead_code)]

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use egress_core::audit::AuditRecord;

use egress_core::policy::{Policy, PolicySet};
use egress_core::target::HostName;
use egress_proxy::{AuditDestination, NameServers, Proxy, ProxyConfig, RunningProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, mpsc};

pub mod client_hello;
pub mod tls;

/// Generous bound that only catches hangs; never a performance assertion.
pub const HANG: Duration = Duration::from_secs(10);

pub struct TestProxy {
    pub proxy: Option<RunningProxy>,
    pub addr: SocketAddr,
    records: mpsc::UnboundedReceiver<AuditRecord>,
}

impl TestProxy {
    /// A proxy on 127.0.0.1:0 with `yaml` as its policy, `pins` as `--resolve`, no DNS
    /// upstream at all (an unpinned name fails to resolve instead of leaving the machine).
    pub async fn start(yaml: &str, pins: &[(&str, &str)]) -> TestProxy {
        Self::start_with(yaml, pins, |_| {}).await
    }

    pub async fn start_with(
        yaml: &str,
        pins: &[(&str, &str)],
        adjust: impl FnOnce(&mut ProxyConfig),
    ) -> TestProxy {
        let (policy, _warnings) = Policy::from_yaml("test.yaml", yaml).expect("test policy");
        let mut config = ProxyConfig::new(PolicySet::from(policy), "127.0.0.1:0".parse().unwrap());
        let (tx, records) = mpsc::unbounded_channel();
        config.audit = AuditDestination::Channel(tx);
        config.run_id = Some("r-test".into());
        config.name_servers = NameServers::None;
        config.pins = pins
            .iter()
            .map(|(name, ip)| {
                (
                    HostName::parse(name).unwrap(),
                    ip.parse::<IpAddr>().unwrap(),
                )
            })
            .collect();
        adjust(&mut config);
        let proxy = Proxy::bind(config).await.expect("proxy binds");
        let addr = proxy.local_addrs().listen;
        TestProxy {
            proxy: Some(proxy),
            addr,
            records,
        }
    }

    pub fn running(&self) -> &RunningProxy {
        self.proxy.as_ref().unwrap()
    }

    /// The next audit record (waits for it).
    pub async fn record(&mut self) -> AuditRecord {
        tokio::time::timeout(HANG, self.records.recv())
            .await
            .expect("an audit record in time")
            .expect("the audit channel is open")
    }

    /// Every record written so far, after a flush.
    pub async fn records_now(&mut self) -> Vec<AuditRecord> {
        self.running().flush().await;
        let mut out = Vec::new();
        while let Ok(record) = self.records.try_recv() {
            out.push(record);
        }
        out
    }

    /// Shuts the proxy down (every tunnel writes its record) and returns every record.
    pub async fn shutdown_and_records(&mut self) -> Vec<AuditRecord> {
        self.shutdown().await;
        let mut out = Vec::new();
        while let Ok(record) = self.records.try_recv() {
            out.push(record);
        }
        out
    }

    pub async fn shutdown(&mut self) {
        if let Some(proxy) = self.proxy.take() {
            tokio::time::timeout(HANG, proxy.shutdown())
                .await
                .expect("shutdown in time");
        }
    }
}

/// A policy allowing each name on the given port, plus `extra` YAML lines appended.
pub fn allow_yaml(rules: &[(&str, u16)], extra: &str) -> String {
    let mut yaml = String::from("version: 1\nname: test\nallow:\n");
    for (host, port) in rules {
        yaml.push_str(&format!("  - host: \"{host}\"\n    ports: [{port}]\n"));
    }
    yaml.push_str(extra);
    yaml
}

/// An upstream on `ip`:0 that records every byte and connection it receives. As an HTTP
/// server it answers each request head with `200` and body `NAME PATH HOST`; in echo mode it
/// sends back what it receives.
///
/// Negative checks ("nothing reached the site") wait on events, never on a sleep:
/// [`Site::connection_count`] sends a probe connection through the site's first-in,
/// first-out accept queue, and [`Site::settled_received`] also waits until every accepted
/// connection has been read to its end.
#[derive(Clone)]
pub struct Site {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<u8>>>,
    /// Connections accepted, probes not counted.
    connections: Arc<AtomicUsize>,
    events: Arc<SiteEvents>,
}

/// What the site's accept loop and connection handlers report.
#[derive(Default)]
struct SiteEvents {
    /// Peer address of every accepted connection, probes included.
    accepted: Mutex<Vec<SocketAddr>>,
    /// Connections whose handler has finished (the peer closed and everything was read).
    finished: AtomicUsize,
    /// Local addresses of probe connections, so they are not counted as visitors.
    probes: Mutex<HashSet<SocketAddr>>,
    changed: Notify,
}

impl Site {
    pub async fn http(ip: &str, name: &'static str) -> Site {
        Self::spawn(ip, move |stream, received| {
            serve_http(stream, received, name)
        })
        .await
    }

    pub async fn echo(ip: &str) -> Site {
        Self::spawn(ip, serve_echo).await
    }

    /// Accepts, records, never answers: a canary that must stay untouched.
    pub async fn canary(ip: &str) -> Site {
        Self::canary_at(SocketAddr::new(ip.parse().unwrap(), 0)).await
    }

    /// A canary on exactly `addr` (e.g. another site's port on another address).
    pub async fn canary_at(addr: SocketAddr) -> Site {
        Self::spawn_at(addr, |mut stream, received| async move {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buffer).await {
                if n == 0 {
                    break;
                }
                received.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        })
        .await
    }

    async fn spawn<F, Fut>(ip: &str, handler: F) -> Site
    where
        F: Fn(TcpStream, Arc<Mutex<Vec<u8>>>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        Self::spawn_at(SocketAddr::new(ip.parse().unwrap(), 0), handler).await
    }

    async fn spawn_at<F, Fut>(addr: SocketAddr, handler: F) -> Site
    where
        F: Fn(TcpStream, Arc<Mutex<Vec<u8>>>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind(addr)
            .await
            .unwrap_or_else(|error| panic!("upstream binds {addr}: {error}"));
        let site = Site {
            addr: listener.local_addr().unwrap(),
            received: Arc::default(),
            connections: Arc::default(),
            events: Arc::default(),
        };
        let handler = Arc::new(handler);
        let (received, connections, events) = (
            site.received.clone(),
            site.connections.clone(),
            site.events.clone(),
        );
        tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                if !events.probes.lock().unwrap().contains(&peer) {
                    connections.fetch_add(1, Ordering::SeqCst);
                }
                events.accepted.lock().unwrap().push(peer);
                events.changed.notify_waiters();
                let handled = handler(stream, received.clone());
                let events = events.clone();
                tokio::spawn(async move {
                    handled.await;
                    events.finished.fetch_add(1, Ordering::SeqCst);
                    events.changed.notify_waiters();
                });
            }
        });
        site
    }

    /// Waits (up to `HANG`) until `done` holds for the site's events.
    async fn wait_until(&self, what: &str, done: impl Fn(&SiteEvents) -> bool) {
        let waited = tokio::time::timeout(HANG, async {
            loop {
                // Registered before the check, so a change in between is not missed.
                let changed = self.events.changed.notified();
                if done(&self.events) {
                    return;
                }
                changed.await;
            }
        })
        .await;
        assert!(waited.is_ok(), "{}: waited in vain for {what}", self.addr);
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn ip(&self) -> String {
        self.addr.ip().to_string()
    }

    pub fn received_text(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().unwrap()).into_owned()
    }

    /// Connections the site has accepted, counted once every connection made before this
    /// call has been accepted: a probe connection goes through the same first-in, first-out
    /// accept queue, and the count is taken when the site has accepted the probe.
    pub async fn connection_count(&self) -> usize {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let probe_addr = socket.local_addr().unwrap();
        self.events.probes.lock().unwrap().insert(probe_addr);
        let probe = socket.connect(self.addr).await.expect("the probe connects");
        self.wait_until("the probe to be accepted", |events| {
            events.accepted.lock().unwrap().contains(&probe_addr)
        })
        .await;
        drop(probe);
        self.connections.load(Ordering::SeqCst)
    }

    /// Everything the site received, once every connection made before this call has been
    /// accepted and closed and its bytes read: a negative check on it cannot pass just
    /// because the bytes were still on their way. Every client of the site (the proxy) must
    /// have closed its connection, or this fails after `HANG`.
    pub async fn settled_received(&self) -> Vec<u8> {
        self.connection_count().await;
        self.wait_until("every connection to be closed", |events| {
            events.finished.load(Ordering::SeqCst) == events.accepted.lock().unwrap().len()
        })
        .await;
        self.received.lock().unwrap().clone()
    }
}

async fn serve_echo(mut stream: TcpStream, received: Arc<Mutex<Vec<u8>>>) {
    let mut buffer = [0u8; 16 * 1024];
    while let Ok(n) = stream.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        received.lock().unwrap().extend_from_slice(&buffer[..n]);
        if stream.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
}

async fn serve_http(mut stream: TcpStream, received: Arc<Mutex<Vec<u8>>>, name: &'static str) {
    let mut pending = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        while let Some(end) = find(&pending, b"\r\n\r\n") {
            let head: Vec<u8> = pending.drain(..end + 4).collect();
            let text = String::from_utf8_lossy(&head).into_owned();
            let path = text.split(' ').nth(1).unwrap_or("").to_owned();
            let host = text
                .lines()
                .find_map(|line| {
                    let (key, value) = line.split_once(':')?;
                    key.eq_ignore_ascii_case("host")
                        .then(|| value.trim().to_owned())
                })
                .unwrap_or_default();
            let length = text
                .lines()
                .find_map(|line| {
                    let (key, value) = line.split_once(':')?;
                    key.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            while pending.len() < length {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        received.lock().unwrap().extend_from_slice(&buffer[..n]);
                        pending.extend_from_slice(&buffer[..n]);
                    }
                }
            }
            pending.drain(..length);
            let body = format!("{name} {path} {host}");
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Upstream: {name}\r\nKeep-Alive: timeout=5\r\n\r\n{body}",
                body.len()
            );
            if stream.write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                received.lock().unwrap().extend_from_slice(&buffer[..n]);
                pending.extend_from_slice(&buffer[..n]);
            }
        }
    }
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Writes `request` to the proxy and reads until the proxy closes (or `HANG`).
pub async fn exchange(proxy: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_to_close(&mut stream).await
}

pub async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(HANG, stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads responses one by one (head + Content-Length body) from a stream, keeping bytes
/// that belong to the next response.
pub struct Responses {
    pub stream: TcpStream,
    pending: Vec<u8>,
}

impl Responses {
    pub fn new(stream: TcpStream) -> Self {
        Responses {
            stream,
            pending: Vec::new(),
        }
    }

    pub async fn next(&mut self) -> String {
        let mut buffer = [0u8; 4096];
        loop {
            if let Some(end) = find(&self.pending, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.pending[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if self.pending.len() >= end + 4 + length {
                    let response: Vec<u8> = self.pending.drain(..end + 4 + length).collect();
                    return String::from_utf8_lossy(&response).into_owned();
                }
            }
            let n = tokio::time::timeout(HANG, self.stream.read(&mut buffer))
                .await
                .expect("a response in time")
                .unwrap_or(0);
            if n == 0 {
                return String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
            }
            self.pending.extend_from_slice(&buffer[..n]);
        }
    }
}

pub fn status(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
