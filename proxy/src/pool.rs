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

pub(crate) struct UpstreamPool {
    idle: Mutex<HashMap<(Target, u16), Vec<Idle>>>,
    max_idle: usize,
    idle_timeout: Duration,
}

struct Idle {
    addr: SocketAddr,
    sender: SendRequest<ProxyBody>,
    since: Instant,
}

impl UpstreamPool {
    pub fn new(max_idle: usize, idle_timeout: Duration) -> Self {
        UpstreamPool {
            idle: Mutex::default(),
            max_idle,
            idle_timeout,
        }
    }

    /// An idle, ready connection to `target:port` and the address it is connected to.
    pub async fn take(
        &self,
        target: &Target,
        port: u16,
    ) -> Option<(SocketAddr, SendRequest<ProxyBody>)> {
        loop {
            let candidate = {
                let mut idle = self.idle.lock().ok()?;
                let entries = idle.get_mut(&(target.clone(), port))?;
                let candidate = entries.pop();
                if entries.is_empty() {
                    idle.remove(&(target.clone(), port));
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
    pub fn put(&self, target: Target, port: u16, addr: SocketAddr, sender: SendRequest<ProxyBody>) {
        if sender.is_closed() || self.max_idle == 0 {
            return;
        }
        let Ok(mut idle) = self.idle.lock() else {
            return;
        };
        let timeout = self.idle_timeout;
        idle.retain(|_, entries| {
            entries.retain(|entry| entry.since.elapsed() <= timeout && !entry.sender.is_closed());
            !entries.is_empty()
        });
        if idle.values().map(Vec::len).sum::<usize>() >= self.max_idle {
            return;
        }
        idle.entry((target, port)).or_default().push(Idle {
            addr,
            sender,
            since: Instant::now(),
        });
    }
}
