//! Transparent listeners: connections from programs that ignore proxy variables and reached
//! the proxy because the DNS responder answered an allowed name with the proxy's address.
//!
//! The first byte decides: a TLS handshake record is routed by the ClientHello's SNI (kind
//! `tls`), an HTTP method by the `Host` header (kind `http`, served by [`super::http`]),
//! anything else is closed (kind `tcp`, `unsupported`). Either way the target goes through
//! the same gate as an explicit request, on the listener's port. A refused connection's
//! record is written before the connection is closed.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::audit::{Attempt, Kind, Outcome};
use crate::policy::Reason;
use crate::relay::{Transferred, relay};
use crate::shared::{ConnectionSlot, Door, Shared};
use crate::sni::{self, SniError};
use crate::target::Target;

pub(crate) async fn serve(
    stream: TcpStream,
    client: SocketAddr,
    port: u16,
    shared: Arc<Shared>,
    slot: ConnectionSlot,
) {
    let mut first = [0u8; 1];
    let peeked = tokio::select! {
        peeked = tokio::time::timeout(shared.limits.head_timeout, stream.peek(&mut first)) => peeked,
        () = shared.stop.cancelled() => return,
    };
    match peeked {
        // Closed without a byte: nothing was attempted.
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(_)) if first[0] == 0x16 => {
            serve_tls(stream, client, port, shared, slot).await;
        }
        Ok(Ok(_)) if first[0].is_ascii_uppercase() => {
            let door = Door::Transparent { port };
            super::http::serve(stream, client, door, shared, slot).await;
        }
        Ok(Ok(_)) | Err(_) => {
            let mut attempt = Attempt::new(shared.gate.audit(), Kind::Tcp, Some(client));
            attempt.port = Some(port);
            attempt.set_outcome(Outcome::Blocked, Reason::Unsupported, None);
            attempt.record().await;
            drop(stream);
        }
    }
}

async fn serve_tls(
    mut client_stream: TcpStream,
    client: SocketAddr,
    port: u16,
    shared: Arc<Shared>,
    slot: ConnectionSlot,
) {
    let gate = &shared.gate;
    let mut attempt = Attempt::new(gate.audit(), Kind::Tls, Some(client));
    attempt.port = Some(port);
    // The tunnel is relayed right here, so the connection keeps its place under the limit
    // until it closes. Bound after `attempt`, so it is dropped first: the place is free
    // again before the record is written.
    let _slot = slot;
    let limits = &shared.limits;
    let read = sni::read_client_hello(
        &mut client_stream,
        Vec::new(),
        limits.max_client_hello_bytes,
        limits.client_hello_timeout,
    );
    let hello = tokio::select! {
        read = read => read,
        () = shared.stop.cancelled() => return,
    };
    let hello = match hello {
        Ok(hello) if hello.ech => {
            // The visible name is only ECH's public name; routing by it would let the
            // hidden inner name through.
            attempt.set_raw_host(hello.server_name.unwrap_or_default().as_bytes());
            attempt.set_outcome(Outcome::Blocked, Reason::SniMismatch, None);
            return close_refused(attempt, client_stream).await;
        }
        Ok(hello) => hello,
        Err(SniError::Closed { received: 0 }) => return,
        Err(error) => {
            tracing::debug!(%error, "transparent TLS without a readable ClientHello");
            attempt.set_outcome(Outcome::Blocked, Reason::BadRequest, None);
            return close_refused(attempt, client_stream).await;
        }
    };
    let Some(name) = hello.server_name.as_deref() else {
        // No SNI: nothing to route by.
        attempt.set_outcome(Outcome::Blocked, Reason::Unsupported, None);
        return close_refused(attempt, client_stream).await;
    };
    let target = match Target::parse_host(name) {
        Ok(target) => target,
        Err(_) => {
            gate.refuse_request(
                &mut attempt,
                name.as_bytes(),
                Reason::BadRequest,
                "invalid SNI",
            );
            return close_refused(attempt, client_stream).await;
        }
    };
    if let Target::Name(name) = &target
        && shared.inspect.is_some()
        && gate.policy().inspection(&target, port).is_some()
    {
        let Ok(decision) = gate.decide(&mut attempt, &target, port) else {
            return;
        };
        let Ok(upstream) = gate
            .connect_decided(&mut attempt, &target, port, &decision)
            .await
        else {
            return;
        };
        // The ClientHello already read is replayed to the inspect door's TLS acceptor.
        let (read, write) = client_stream.into_split();
        let replayed = std::io::Cursor::new(hello.bytes).chain(read);
        super::inspect::serve_tunnel(
            shared.clone(),
            tokio::io::join(replayed, write),
            client,
            name.clone(),
            port,
            upstream,
            attempt,
            decision,
            _slot.clone(),
        )
        .await;
        return;
    }
    let Ok(mut upstream) = gate.open(&mut attempt, &target, port).await else {
        return close_refused(attempt, client_stream).await;
    };
    if upstream.write_all(&hello.bytes).await.is_err() {
        return;
    }
    attempt.bytes_up = hello.bytes.len() as u64;
    let mut moved = Transferred::default();
    relay(
        &mut client_stream,
        &mut upstream,
        &shared.pipes,
        &mut moved,
        &shared.stop,
    )
    .await;
    attempt.bytes_up += moved.up;
    attempt.bytes_down = moved.down;
}

/// Writes a refused connection's record, then closes it: the client's reset or end of
/// stream comes after the record is in the log.
async fn close_refused(attempt: Attempt, stream: TcpStream) {
    attempt.record().await;
    drop(stream);
}
