//! The `CONNECT host:port` door: judge, connect to a checked address, answer 200, check the
//! ClientHello on TLS ports, then relay.
//!
//! The upstream is connected before the 200 so that an unreachable upstream is an honest 502
//! or 504. On TLS ports the ClientHello is read and checked *before* a single byte is written
//! upstream: on a mismatch the upstream sees a connection open and close, never data. The
//! 200 was already sent by then, so a mismatch turns the tunnel's own record into
//! `blocked`/`sni_mismatch`.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::audit::{Attempt, Kind, Outcome};
use crate::body::ProxyBody;
use crate::policy::{Reason, SniCheck};
use crate::refusal::refuse;
use crate::relay::{Transferred, relay};
use crate::shared::{ConnectionSlot, Shared};
use crate::sni::{self, SniError};
use crate::target::Target;

/// Where an answered CONNECT leaves its tunnel for the client connection's task, which runs
/// it once hyper has handed the connection over (or, if it never does, sees the upgrade
/// fail and lets the tunnel's record be written).
#[derive(Default)]
pub(crate) struct TunnelSlot(std::sync::Mutex<Option<Pin<Box<dyn Future<Output = ()> + Send>>>>);

impl TunnelSlot {
    fn put(&self, tunnel: impl Future<Output = ()> + Send + 'static) {
        *self.0.lock().unwrap_or_else(|poison| poison.into_inner()) = Some(Box::pin(tunnel));
    }

    /// The tunnel left here, if any.
    pub(crate) fn take(&self) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        self.0
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take()
    }
}

pub(crate) async fn handle(
    mut request: Request<Incoming>,
    shared: &Arc<Shared>,
    client: SocketAddr,
    slot: ConnectionSlot,
    tunnel_slot: &TunnelSlot,
) -> Response<ProxyBody> {
    let gate = &shared.gate;
    let mut attempt = Attempt::new(gate.audit(), Kind::Connect, Some(client));
    let uri = request.uri();
    let authority = match (uri.authority(), uri.scheme(), uri.path_and_query()) {
        (Some(authority), None, None) => authority.as_str().to_owned(),
        _ => {
            let raw = uri.to_string();
            let refusal = gate.refuse_request(
                &mut attempt,
                raw.as_bytes(),
                Reason::BadRequest,
                "CONNECT needs host:port",
            );
            return refuse(attempt, &refusal).await;
        }
    };
    let (target, port) = match parse_connect_authority(&authority) {
        Ok(found) => found,
        Err(detail) => {
            let refusal = gate.refuse_request(
                &mut attempt,
                authority.as_bytes(),
                Reason::BadRequest,
                detail,
            );
            return refuse(attempt, &refusal).await;
        }
    };
    if let Target::Name(name) = &target
        && shared.inspect.is_some()
        && gate.policy().inspection(&target, port).is_some()
    {
        return open_inspected(
            request,
            shared,
            client,
            name.clone(),
            port,
            attempt,
            slot,
            tunnel_slot,
        )
        .await;
    }
    let upstream = match gate.open(&mut attempt, &target, port).await {
        Ok(upstream) => upstream,
        Err(refusal) => return refuse(attempt, &refusal).await,
    };
    let tls = gate.policy().tls();
    let check_sni = tls.sni == SniCheck::Strict && tls.ports.contains(&port);
    let tunnel = Tunnel {
        _slot: slot,
        shared: shared.clone(),
        attempt,
        target,
        check_sni,
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    tunnel_slot.put(async move {
        match on_upgrade.await {
            Ok(upgraded) => match upgraded.downcast::<TokioIo<TcpStream>>() {
                Ok(parts) => {
                    tunnel
                        .run(parts.io.into_inner(), parts.read_buf.to_vec(), upstream)
                        .await;
                }
                Err(_) => tracing::error!("a CONNECT tunnel is not a TCP stream"),
            },
            Err(error) => tracing::debug!(%error, "the client left before the tunnel opened"),
        }
    });
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *response.status_mut() = StatusCode::OK;
    response
}

/// A CONNECT to an inspected host: the same gate (decide, resolve once, floor, connect),
/// then the inspect door serves what the client sends inside the tunnel.
#[allow(clippy::too_many_arguments)] // the door's state, handed on as it is
async fn open_inspected(
    mut request: Request<Incoming>,
    shared: &Arc<Shared>,
    client: SocketAddr,
    name: crate::target::HostName,
    port: u16,
    mut attempt: Attempt,
    slot: ConnectionSlot,
    tunnel_slot: &TunnelSlot,
) -> Response<ProxyBody> {
    let gate = &shared.gate;
    let target = Target::Name(name.clone());
    let decision = match gate.decide(&mut attempt, &target, port) {
        Ok(decision) => decision,
        Err(refusal) => return refuse(attempt, &refusal).await,
    };
    let upstream = match gate
        .connect_decided(&mut attempt, &target, port, &decision)
        .await
    {
        Ok(upstream) => upstream,
        Err(refusal) => return refuse(attempt, &refusal).await,
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let tunnel_shared = shared.clone();
    tunnel_slot.put(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                super::inspect::serve_tunnel(
                    tunnel_shared,
                    TokioIo::new(upgraded),
                    client,
                    name,
                    port,
                    upstream,
                    attempt,
                    decision,
                    slot,
                )
                .await;
            }
            Err(error) => tracing::debug!(%error, "the client left before the tunnel opened"),
        }
    });
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *response.status_mut() = StatusCode::OK;
    response
}

/// CONNECT's authority must carry a port: there is no default for a tunnel.
pub(crate) fn parse_connect_authority(authority: &str) -> Result<(Target, u16), &'static str> {
    if authority.contains('@') {
        return Err("user information is refused");
    }
    Target::parse_authority(authority, None).map_err(|_| "CONNECT needs a valid host:port")
}

struct Tunnel {
    /// The client connection's place under the connection limit: hyper lets go of the
    /// connection when it hands it over as a tunnel, so the tunnel keeps the place until it
    /// closes. Declared first, so it is free again before the tunnel's record is written.
    _slot: ConnectionSlot,
    shared: Arc<Shared>,
    attempt: Attempt,
    target: Target,
    check_sni: bool,
}

impl Tunnel {
    /// `early` holds bytes the client sent right behind its CONNECT head.
    async fn run(mut self, mut client: TcpStream, early: Vec<u8>, mut upstream: TcpStream) {
        let limits = &self.shared.limits;
        let first = if self.check_sni {
            let read = sni::read_client_hello(
                &mut client,
                early,
                limits.max_client_hello_bytes,
                limits.client_hello_timeout,
            );
            let checked = tokio::select! {
                read = read => read.and_then(|hello| {
                    sni::check(&self.target, &hello).map(|()| hello.bytes)
                }),
                () = self.shared.stop.cancelled() => return,
            };
            match checked {
                Ok(bytes) => bytes,
                // A client that leaves without a byte tried nothing: the record stays allowed.
                Err(SniError::Closed { received: 0 }) => return,
                Err(error) => {
                    tracing::debug!(%error, host = %self.target, "SNI check failed");
                    self.attempt
                        .set_outcome(Outcome::Blocked, Reason::SniMismatch, None);
                    // Recorded before the tunnel closes on the client.
                    self.attempt.record().await;
                    drop(client);
                    return;
                }
            }
        } else {
            early
        };
        if !first.is_empty() {
            if upstream.write_all(&first).await.is_err() {
                return;
            }
            self.attempt.bytes_up += first.len() as u64;
        }
        let mut moved = Transferred::default();
        relay(
            &mut client,
            &mut upstream,
            &self.shared.pipes,
            &mut moved,
            &self.shared.stop,
        )
        .await;
        self.attempt.bytes_up += moved.up;
        self.attempt.bytes_down += moved.down;
    }
}
