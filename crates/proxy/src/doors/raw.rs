//! Raw doors: any TCP protocol to an allowed `name:port`, for programs that ignore the
//! proxy variables (database drivers, gRPC, SSH, Node's `http`, a hand-made socket).
//!
//! A raw door listens on one port for the whole name block of the sandbox's loopback. The
//! DNS responder gave every allowed name an address of its own there
//! ([`crate::name_addresses`]), so the address a connection arrived on names its target,
//! and the listener's port is its port. From there it is judged as a `CONNECT name:port`
//! would be: the same gate (policy, resolve once, the floor on every address, connect to a
//! checked address), then the bytes are relayed as a tunnel's are (splice), and the record
//! is kind `tcp` with its address and byte counts.
//!
//! - Refused at once: an address that names nothing (a literal 127.x, or a name beyond the
//!   table's bound), a name not allowed on this port, the raw door's own limit. The record
//!   is written first, then the connection is reset, so a client never waits.
//! - TLS: when the client speaks first and its first byte opens a TLS record (and the
//!   policy's SNI check is strict), the ClientHello must name the door's name
//!   (`sni_mismatch` otherwise), checked before a byte goes upstream.
//! - A name whose requests the proxy reads on this port (a credential, `methods`/`paths`)
//!   is not relayed raw: the connection goes to the transparent door's handling, TLS by SNI
//!   and HTTP by `Host`, exactly as on :443 and :80.
//! - Bounded: `ProxyLimits::max_raw_connections` at once (each also under the
//!   connection limit) and `ProxyLimits::raw_idle_timeout` without a byte either way.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::audit::{Attempt, Kind, Outcome};
use crate::policy::{Reason, SniCheck};
use crate::relay::{Transferred, relay_bounded};
use crate::shared::{ConnectionSlot, Shared};
use crate::sni::{self, SniError};
use crate::target::Target;

/// Who spoke first on a relayed connection.
enum FirstWord {
    /// The client; `tls` when its first byte opens a TLS handshake record.
    Client { tls: bool },
    /// The upstream (a server-first protocol: SMTP, MySQL, an SSH banner): nothing to check.
    Upstream,
    /// The client left without a byte, or neither side spoke within the idle bound.
    Gone,
}

pub(crate) async fn serve(
    stream: TcpStream,
    client: SocketAddr,
    port: u16,
    shared: Arc<Shared>,
    slot: ConnectionSlot,
) {
    let gate = &shared.gate;
    let mut attempt = Attempt::new(gate.audit(), Kind::Tcp, Some(client));
    attempt.port = Some(port);
    let arrived_on = stream.local_addr().map(|addr| addr.ip()).ok();
    let name = match (arrived_on, shared.names.get()) {
        (Some(IpAddr::V4(address)), Some(names)) => names.name_at(address),
        _ => None,
    };
    let Some(name) = name else {
        // An address the DNS responder never gave: nothing says where this should go.
        attempt.host = arrived_on.map(|ip| ip.to_string()).unwrap_or_default();
        attempt.set_outcome(Outcome::Blocked, Reason::NotAllowed, None);
        return refuse(attempt, stream).await;
    };
    let target = Target::Name(name);
    let Ok(decision) = gate.verdict(&mut attempt, &target, port) else {
        return refuse(attempt, stream).await;
    };
    if shared.inspect.is_some() && gate.policy().inspection(&target, port).is_some() {
        // Its requests are read one by one: the transparent door serves it and writes
        // its own records.
        attempt.forget();
        drop(attempt);
        return super::transparent::serve(stream, client, port, shared.clone(), slot).await;
    }
    // Only now does this door let anything through itself: its record's place first.
    if !attempt.hold_record() {
        return refuse(attempt, stream).await;
    }
    // The raw door's own bound, on top of the connection limit this connection already
    // holds a place under.
    let Ok(_raw_place) = shared.raw_connections.clone().try_acquire_owned() else {
        attempt.set_outcome(Outcome::Blocked, Reason::Limit, None);
        return refuse(attempt, stream).await;
    };
    let connect = gate.connect_decided(&mut attempt, &target, port, &decision);
    let connected = tokio::select! {
        connected = connect => connected,
        () = shared.stop.cancelled() => return,
    };
    let Ok(mut upstream) = connected else {
        return refuse(attempt, stream).await;
    };
    // Bound after `attempt`, so the places are free again before the record is written.
    let _slot = slot;
    let mut client_stream = stream;
    let limits = &shared.limits;
    let idle = limits.raw_idle_timeout;
    let check_sni = gate.policy().tls().sni == SniCheck::Strict;
    match first_word(&client_stream, &upstream, idle, &shared.stop).await {
        FirstWord::Gone => return,
        FirstWord::Client { tls: true } if check_sni => {
            let read = sni::read_client_hello(
                &mut client_stream,
                Vec::new(),
                limits.max_client_hello_bytes,
                limits.client_hello_timeout,
            );
            let checked = tokio::select! {
                read = read => read.and_then(|hello| sni::check(&target, &hello).map(|()| hello.bytes)),
                () = shared.stop.cancelled() => return,
            };
            match checked {
                Ok(hello) => {
                    if upstream.write_all(&hello).await.is_err() {
                        return;
                    }
                    attempt.bytes_up = hello.len() as u64;
                }
                Err(SniError::Closed { received: 0 }) => return,
                Err(error) => {
                    tracing::debug!(%error, host = %target, "SNI check failed on a raw door");
                    attempt.set_outcome(Outcome::Blocked, Reason::SniMismatch, None);
                    return refuse(attempt, client_stream).await;
                }
            }
        }
        FirstWord::Client { .. } | FirstWord::Upstream => {}
    }
    let mut moved = Transferred {
        up: attempt.bytes_up,
        down: 0,
    };
    relay_bounded(
        &mut client_stream,
        &mut upstream,
        &shared.pipes,
        &mut moved,
        &shared.stop,
        Some(idle),
    )
    .await;
    attempt.bytes_up = moved.up;
    attempt.bytes_down = moved.down;
}

/// Waits until one side has something to say: the client's first byte (is it TLS?) or the
/// upstream's greeting. Peeks only: nothing is consumed.
async fn first_word(
    client: &TcpStream,
    upstream: &TcpStream,
    idle: Duration,
    stop: &CancellationToken,
) -> FirstWord {
    let mut first = [0u8; 1];
    let mut greeting = [0u8; 1];
    tokio::select! {
        peeked = client.peek(&mut first) => match peeked {
            Ok(0) | Err(_) => FirstWord::Gone,
            Ok(_) => FirstWord::Client { tls: first[0] == 0x16 },
        },
        _ = upstream.peek(&mut greeting) => FirstWord::Upstream,
        () = tokio::time::sleep(idle) => FirstWord::Gone,
        () = stop.cancelled() => FirstWord::Gone,
    }
}

/// Writes a refused connection's record, then resets the connection: the client learns at
/// once (a reset, not a connection that stays open), and after the record is in the log.
async fn refuse(attempt: Attempt, stream: TcpStream) {
    attempt.record().await;
    reset(stream);
}

/// Closes `stream` with a reset rather than an orderly end.
pub(crate) fn reset(stream: TcpStream) {
    let _ = rustix::net::sockopt::set_socket_linger(&stream, Some(Duration::ZERO));
    drop(stream);
}
