//! Idle upstream HTTP/1.1 connections, kept per (target, port) for the next plain request to
//! exactly that target — from any client connection of the run.
//!
//! A connection is only ever reused for the same target and port the gate already judged for
//! the new request; it saves the connect (and the upstream's accept) on the request path,
//! which is most of the latency a proxy adds to small requests. Bounded in count and age.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::client::conn::http1::SendRequest;

use crate::body::ProxyBody;
use crate::target::Target;

/// How long taking a pooled connection may wait for it to finish its previous response.
const READY_WAIT: Duration = Duration::from_millis(50);

/// How often a put looks through every kept connection for expired or closed ones. Each put
/// is otherwise constant time: with hundreds of connections kept (a burst of clients), a
/// look through all of them on every put cost more than the connect it saves.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct UpstreamPool {
    idle: Mutex<Kept>,
    max_idle: usize,
    idle_timeout: Duration,
}

struct Kept {
    by_target: HashMap<(Target, u16), Vec<Idle>>,
    /// Connections in `by_target`, all targets together.
    count: usize,
    pruned: Instant,
}

impl Kept {
    /// Drops (and so closes) every connection older than `timeout` or closed by its upstream.
    fn prune(&mut self, timeout: Duration) {
        self.by_target.retain(|_, entries| {
            entries.retain(|entry| entry.since.elapsed() <= timeout && !entry.sender.is_closed());
            !entries.is_empty()
        });
        self.count = self.by_target.values().map(Vec::len).sum();
        self.pruned = Instant::now();
    }
}

struct Idle {
    addr: SocketAddr,
    sender: SendRequest<ProxyBody>,
    since: Instant,
}

impl UpstreamPool {
    pub(crate) fn new(max_idle: usize, idle_timeout: Duration) -> Self {
        UpstreamPool {
            idle: Mutex::new(Kept {
                by_target: HashMap::new(),
                count: 0,
                pruned: Instant::now(),
            }),
            max_idle,
            idle_timeout,
        }
    }

    /// An idle, ready connection to `target:port` and the address it is connected to.
    pub(crate) async fn take(
        &self,
        target: &Target,
        port: u16,
    ) -> Option<(SocketAddr, SendRequest<ProxyBody>)> {
        let key = (target.clone(), port);
        loop {
            let candidate = {
                let mut kept = self.idle.lock().ok()?;
                let entries = kept.by_target.get_mut(&key)?;
                let candidate = entries.pop();
                let emptied = entries.is_empty();
                if emptied {
                    kept.by_target.remove(&key);
                }
                if candidate.is_some() {
                    kept.count -= 1;
                }
                candidate?
            };
            if candidate.since.elapsed() > self.idle_timeout || candidate.sender.is_closed() {
                continue;
            }
            let mut sender = candidate.sender;
            if let Ok(Ok(())) = tokio::time::timeout(READY_WAIT, sender.ready()).await {
                return Some((candidate.addr, sender));
            }
        }
    }

    /// Keeps `sender` for a later request to the same target and port.
    pub(crate) fn put(
        &self,
        target: Target,
        port: u16,
        addr: SocketAddr,
        sender: SendRequest<ProxyBody>,
    ) {
        if sender.is_closed() || self.max_idle == 0 {
            return;
        }
        let Ok(mut kept) = self.idle.lock() else {
            return;
        };
        if kept.pruned.elapsed() >= PRUNE_EVERY {
            kept.prune(self.idle_timeout);
        }
        if kept.count >= self.max_idle {
            return;
        }
        kept.by_target
            .entry((target, port))
            .or_default()
            .push(Idle {
                addr,
                sender,
                since: Instant::now(),
            });
        kept.count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper_util::rt::TokioIo;
    use tokio::net::{TcpListener, TcpStream};

    /// An HTTP/1 client connection to `addr`, as the plain door makes them.
    async fn connection(addr: SocketAddr) -> SendRequest<ProxyBody> {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        sender
    }

    #[tokio::test]
    async fn keeps_up_to_max_idle_and_gives_each_back_only_for_its_target() {
        // An upstream that accepts and keeps every connection open.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let pool = UpstreamPool::new(3, Duration::from_secs(60));
        let a = Target::parse_host("a.test").unwrap();
        let b = Target::parse_host("b.test").unwrap();
        for _ in 0..5 {
            pool.put(a.clone(), 80, addr, connection(addr).await);
        }
        assert_eq!(
            pool.idle.lock().unwrap().count,
            3,
            "at most max_idle are kept"
        );
        assert!(
            pool.take(&b, 80).await.is_none(),
            "never for another target"
        );
        assert!(
            pool.take(&a, 8080).await.is_none(),
            "never for another port"
        );
        for _ in 0..3 {
            let (got, _sender) = pool.take(&a, 80).await.expect("a kept connection");
            assert_eq!(got, addr);
        }
        assert!(pool.take(&a, 80).await.is_none());
        assert_eq!(pool.idle.lock().unwrap().count, 0);
        // Room again once taken.
        pool.put(b.clone(), 80, addr, connection(addr).await);
        assert!(pool.take(&b, 80).await.is_some());
    }
}
