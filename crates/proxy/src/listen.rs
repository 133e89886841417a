//! TCP listeners: opened with a listen backlog that suits a proxy, drained by one accept
//! loop.
//!
//! `TcpListener::bind` (tokio, via mio) listens with a backlog of 128, the standard
//! library's value. A run whose program opens many connections at once fills that queue
//! before the accept loop drains it, and the kernel then drops SYNs (clients stall for a
//! retransmit second). Every TCP listener of the proxy is opened here instead.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};

use tokio_util::sync::CancellationToken;

/// Connections the kernel queues for a listener before the proxy accepts them. Capped by
/// `net.core.somaxconn` (4096 by default since Linux 5.4).
pub(crate) const LISTEN_BACKLOG: u32 = 1024;

/// A listener on `addr` with `SO_REUSEADDR` (as `TcpListener::bind` sets it, so a restarted
/// proxy can bind at once) and a backlog of [`LISTEN_BACKLOG`].
pub(crate) fn tcp_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The pause after a failed accept before the next one.
pub(crate) const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Accepts connections on `listener` until `stop` is cancelled, handing each one to `serve` (which
/// spawns its task and returns at once). Every TCP listener of the proxy is drained by this
/// loop.
///
/// A failed accept is logged at warn level and followed by [`ACCEPT_BACKOFF`]: the errors
/// that reach here (EMFILE, ENFILE, ENOBUFS: out of descriptors or memory) last until some
/// connection closes, so accepting again at once would spin a core; giving up would leave
/// the door closed for the rest of the run.
pub(crate) async fn accept_until_shutdown(
    listener: TcpListener,
    stop: &CancellationToken,
    mut serve: impl FnMut(TcpStream, SocketAddr),
) {
    // One wait for the whole loop: a new one per accept would register with the token
    // (a lock every connection of the proxy shares) and deregister again each time.
    let stopped = stop.cancelled();
    tokio::pin!(stopped);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stopped => return,
        };
        match accepted {
            Ok((stream, client)) => serve(stream, client),
            Err(error) => {
                let listener = listener.local_addr().ok();
                tracing::warn!(%error, ?listener, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The backlog the kernel applied to the listening socket on `addr`, read from `ss`
    /// (for a listening socket, Send-Q is the backlog).
    fn applied_backlog(addr: SocketAddr) -> u32 {
        let output = std::process::Command::new("ss")
            .args(["-ltnH", &format!("sport = :{}", addr.port())])
            .output()
            .expect("`ss` (iproute2) runs; the test reads the backlog with it");
        let text = String::from_utf8_lossy(&output.stdout);
        let line = text
            .lines()
            .find(|line| line.contains(&addr.to_string()))
            .unwrap_or_else(|| panic!("no listening socket {addr} in `ss` output: {text}"));
        // State Recv-Q Send-Q Local Peer
        line.split_whitespace()
            .nth(2)
            .and_then(|q| q.parse().ok())
            .unwrap_or_else(|| panic!("no Send-Q in {line:?}"))
    }

    #[tokio::test]
    async fn listeners_queue_at_least_1024_connections() {
        let listener = tcp_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(
            applied_backlog(addr) >= 1024,
            "backlog {}",
            applied_backlog(addr)
        );
    }

    #[tokio::test]
    async fn every_tcp_listener_of_the_proxy_has_the_backlog() {
        use crate::policy::{Policy, PolicySet};
        use crate::{BoundProxy, ProxyConfig};
        let policy = Policy::from_allow_flags(&["example.com".into()]).unwrap();
        let mut config = ProxyConfig::new(PolicySet::from(policy), "127.0.0.1:0".parse().unwrap());
        config.transparent_listen = vec!["127.0.0.1:0".parse().unwrap()];
        config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
        let (records, _receiver) = tokio::sync::mpsc::unbounded_channel();
        config.audit = crate::audit::AuditDestination::Channel(records);
        let proxy = BoundProxy::bind(config).await.unwrap();
        let addrs = proxy.local_addrs().clone();
        let tcp = [addrs.listen, addrs.transparent[0], addrs.dns.unwrap()];
        for addr in tcp {
            assert!(
                applied_backlog(addr) >= 1024,
                "{addr}: {}",
                applied_backlog(addr)
            );
        }
    }

    #[tokio::test]
    async fn a_port_in_use_is_an_error() {
        let first = tcp_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let taken = first.local_addr().unwrap();
        assert!(tcp_listener(taken).is_err());
    }
}
