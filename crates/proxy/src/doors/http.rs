//! The HTTP/1.1 doors: the explicit proxy listener (absolute-form requests, and `CONNECT`
//! handed to [`super::connect`]) and transparent HTTP (origin-form, routed by `Host`).
//!
//! Every request is judged on its own, including the second and later requests of a kept-
//! alive or pipelined connection. An upstream connection is reused only for the next request
//! to the same target and port, so a request is never written to another target's upstream.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::audit::{Attempt, Kind};
use crate::body::ProxyBody;
use crate::exchange::{Upload, answer, counting_body, origin_form, strip_hop_by_hop};
use crate::policy::{Decision, Reason, split_path};
use crate::refusal::{Refusal, refuse};
use crate::shared::{ConnectionSlot, Door, Shared, client_http1};
use crate::target::Target;

/// One client connection's state.
struct ClientConnection {
    shared: Arc<Shared>,
    client: SocketAddr,
    door: Door,
    /// This connection's place under the connection limit, passed on to a CONNECT tunnel.
    slot: ConnectionSlot,
    /// The upstream of the previous request, kept for the next request to the same target.
    upstream: tokio::sync::Mutex<Option<UpstreamConnection>>,
    served_any: AtomicBool,
    /// A CONNECT's tunnel, left here by its answer: run by this connection's own task once
    /// hyper hands the connection over.
    tunnel: super::connect::TunnelSlot,
}

/// An open connection to an upstream, with the target and port it was opened for.
struct UpstreamConnection {
    target: Target,
    port: u16,
    addr: SocketAddr,
    sender: SendRequest<ProxyBody>,
}

/// Serves one client connection until it closes, its head times out, or shutdown.
pub(crate) async fn serve(
    stream: TcpStream,
    client: SocketAddr,
    door: Door,
    shared: Arc<Shared>,
    slot: ConnectionSlot,
) {
    let limits = shared.limits.clone();
    let stop = shared.stop.clone();
    let connection = Arc::new(ClientConnection {
        shared,
        client,
        door,
        slot,
        upstream: tokio::sync::Mutex::new(None),
        served_any: AtomicBool::new(false),
        tunnel: super::connect::TunnelSlot::default(),
    });
    let service_connection = connection.clone();
    let service = service_fn(move |request| {
        let connection = service_connection.clone();
        async move {
            connection.served_any.store(true, Ordering::Relaxed);
            Ok::<_, Infallible>(connection.handle(request).await)
        }
    });
    let builder = client_http1(&limits);
    let result = {
        let served = builder
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        tokio::pin!(served);
        tokio::select! {
            result = served.as_mut() => result,
            () = stop.cancelled() => {
                served.as_mut().graceful_shutdown();
                tokio::time::timeout(limits.shutdown_grace, served.as_mut())
                    .await
                    .unwrap_or(Ok(()))
            }
        }
        // The connection (and with it hyper's side of an upgrade not made) is gone here.
    };
    if let Err(error) = result {
        connection.record_connection_error(&error);
    }
    // A CONNECT answered 200: its tunnel goes on in this task, without a task of its own to
    // spawn and wake (a fresh tunnel's first bytes wait for neither). The connection's state
    // goes first, as it went with the connection's task before.
    let tunnel = connection.tunnel.take();
    drop(connection);
    if let Some(tunnel) = tunnel {
        tunnel.await;
    }
}

impl ClientConnection {
    fn attempt(&self, kind: Kind) -> Attempt {
        Attempt::new(self.shared.gate.audit(), kind, Some(self.client))
    }

    /// A malformed head never reaches the service; hyper answers it (400/431) or closes.
    /// It is still an attempt, so it gets its record.
    fn record_connection_error(&self, error: &hyper::Error) {
        let slow_first_head = error.is_timeout() && !self.served_any.load(Ordering::Relaxed);
        if error.is_parse() || error.is_parse_too_large() || slow_first_head {
            let mut attempt = self.attempt(Kind::Http);
            attempt.port = match self.door {
                Door::Explicit => None,
                Door::Transparent { port } => Some(port),
            };
            tracing::debug!(%error, client = %self.client, "malformed request head");
        } else {
            tracing::debug!(%error, client = %self.client, "client connection ended");
        }
    }

    async fn handle(&self, request: Request<Incoming>) -> Response<ProxyBody> {
        if request.method() == Method::CONNECT {
            return match self.door {
                // Boxed, as the inspected path below: each request's future is built and
                // moved into place by hyper, and these rarer paths would make every plain
                // request's several times larger.
                Door::Explicit => {
                    Box::pin(super::connect::handle(
                        request,
                        &self.shared,
                        self.client,
                        self.slot.clone(),
                        &self.tunnel,
                    ))
                    .await
                }
                Door::Transparent { .. } => {
                    let mut attempt = self.attempt(Kind::Http);
                    let raw = request.uri().to_string();
                    let refusal = self.shared.gate.refuse_request(
                        &mut attempt,
                        raw.as_bytes(),
                        Reason::Unsupported,
                        "CONNECT is only served on the proxy port",
                    );
                    refuse(attempt, &refusal).await
                }
            };
        }
        let mut attempt = self.attempt(Kind::Http);
        let (target, port) = match Self::request_target(self.door, &request) {
            Ok(found) => found,
            Err((raw, reason, detail)) => {
                let refusal = self
                    .shared
                    .gate
                    .refuse_request(&mut attempt, &raw, reason, detail);
                return refuse(attempt, &refusal).await;
            }
        };
        if let Err((reason, detail)) = check_request_shape(&request) {
            attempt.host = target.to_string();
            attempt.port = Some(port);
            let refusal = self
                .shared
                .gate
                .refuse_request(&mut attempt, b"", reason, detail);
            return refuse(attempt, &refusal).await;
        }
        if let Some(plan) = super::inspect::plain_plan(&self.shared, &target, port) {
            return Box::pin(super::inspect::forward_plain(
                &self.shared,
                request,
                plan,
                attempt,
            ))
            .await;
        }
        let (parts, body) = request.into_parts();
        let path_and_query = origin_form(&parts.uri);
        let judged = self.shared.gate.judge_request(
            &mut attempt,
            &target,
            port,
            &parts,
            split_path(&path_and_query),
        );
        let decision = match judged {
            Ok(decision) => decision,
            Err(refusal) => return refuse(attempt, &refusal).await,
        };
        let request = Request::from_parts(parts, body);
        let upload = Upload::new();
        match self
            .forward(request, &target, port, &decision, &mut attempt, &upload)
            .await
        {
            Ok(response) => {
                if let Some(fields) = attempt.request.as_mut() {
                    fields.status = Some(response.status().as_u16());
                }
                answer(response, attempt, upload, self.shared.drain(), None).await
            }
            Err(refusal) => refuse(attempt, &refusal).await,
        }
    }

    /// What the request asks for. The explicit door takes the absolute URI's authority and
    /// nothing else (the `Host` header is replaced by it); the transparent door takes the
    /// absolute URI if given, else the `Host` header, on its listener's port (a request
    /// that names another port is refused).
    fn request_target<B>(
        door: Door,
        request: &Request<B>,
    ) -> Result<(Target, u16), (Vec<u8>, Reason, &'static str)> {
        let uri = request.uri();
        let (authority, default_port): (Vec<u8>, u16) = match (door, uri.scheme_str()) {
            (_, Some(scheme)) if scheme.eq_ignore_ascii_case("http") => {
                let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
                (authority.as_bytes().to_vec(), 80)
            }
            // The record's host shows scheme and host (or the path) of what was asked for,
            // never a query or user information: those may carry secrets.
            (_, Some(scheme)) => {
                let host = without_userinfo(uri.authority().map_or("", |a| a.as_str()));
                return Err((
                    format!("{scheme}://{host}").into_bytes(),
                    Reason::Unsupported,
                    "only http:// URLs can be proxied; use CONNECT for https",
                ));
            }
            (Door::Explicit, None) => {
                return Err((
                    uri.path().as_bytes().to_vec(),
                    Reason::BadRequest,
                    "a proxy request needs an absolute URL (http://host/path)",
                ));
            }
            (Door::Transparent { port }, None) => {
                let host = request.headers().get_all(header::HOST);
                let mut values = host.iter();
                match (values.next(), values.next()) {
                    (Some(value), None) => (value.as_bytes().to_vec(), port),
                    (first, _) => {
                        let raw = first.map(|v| v.as_bytes().to_vec()).unwrap_or_default();
                        return Err((
                            raw,
                            Reason::BadRequest,
                            "the request needs exactly one Host header",
                        ));
                    }
                }
            }
        };
        let Ok(text) = std::str::from_utf8(&authority) else {
            return Err((authority, Reason::BadRequest, "the host is not valid"));
        };
        if text.contains('@') {
            return Err((
                without_userinfo(text).as_bytes().to_vec(),
                Reason::BadRequest,
                "user information in URLs is refused",
            ));
        }
        let (target, port) = match Target::parse_authority(text, Some(default_port)) {
            Ok(found) => found,
            Err(_) => return Err((authority, Reason::BadRequest, "the host is not valid")),
        };
        match door {
            // The program connected to this port believing it was the host's: a request
            // that names another port would be judged and sent where it never connected.
            Door::Transparent { port: listener } if port != listener => Err((
                authority,
                Reason::BadRequest,
                "the request names another port than the one it came in on",
            )),
            _ => Ok((target, port)),
        }
    }

    /// Sends a request the gate let through (`decision`) to the target, over the previous
    /// or a pooled upstream connection to it or one the gate opens, and returns the
    /// upstream's response.
    async fn forward(
        &self,
        request: Request<Incoming>,
        target: &Target,
        port: u16,
        decision: &Decision,
        attempt: &mut Attempt,
        upload: &Arc<Upload>,
    ) -> Result<Response<Incoming>, Refusal> {
        let gate = &self.shared.gate;
        let mut slot = self.upstream.lock().await;
        let previous = match slot.take() {
            Some(upstream) if &upstream.target == target && upstream.port == port => {
                let mut sender = upstream.sender;
                sender
                    .ready()
                    .await
                    .is_ok()
                    .then_some((upstream.addr, sender))
            }
            Some(other) => {
                self.shared
                    .pool
                    .put(other.target, other.port, other.addr, other.sender);
                None
            }
            None => None,
        };
        let reusable = match previous {
            Some(found) => Some(found),
            None => self.shared.pool.take(target, port).await,
        };
        let mut outgoing = upstream_request(request, target, port, upload.clone());
        if let Some((addr, mut sender)) = reusable {
            attempt.addr = Some(addr);
            match sender.try_send_request(outgoing).await {
                Ok(response) => {
                    *slot = Some(UpstreamConnection {
                        target: target.clone(),
                        port,
                        addr,
                        sender,
                    });
                    return Ok(response);
                }
                Err(mut error) => match error.take_message() {
                    // Never sent (the idle connection had closed): use a fresh one.
                    Some(request) => outgoing = request,
                    None => return Err(upstream_failure(attempt, error.error())),
                },
            }
        }
        let stream = gate
            .connect_decided(attempt, target, port, decision)
            .await?;
        let addr = attempt.addr.expect("a connected attempt has its address");
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| upstream_failure(attempt, &error))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "upstream connection ended");
            }
        });
        let response = sender
            .send_request(outgoing)
            .await
            .map_err(|error| upstream_failure(attempt, &error))?;
        *slot = Some(UpstreamConnection {
            target: target.clone(),
            port,
            addr,
            sender,
        });
        Ok(response)
    }
}

impl Drop for ClientConnection {
    /// The last upstream of a closing client connection goes to the shared pool.
    fn drop(&mut self) {
        if let Some(upstream) = self.upstream.get_mut().take() {
            self.shared.pool.put(
                upstream.target,
                upstream.port,
                upstream.addr,
                upstream.sender,
            );
        }
    }
}

/// What a request asks to reach through `door` (for the fuzz targets and property tests,
/// through [`crate::fuzzing`]): the same function the doors run.
pub(crate) fn request_target<B>(
    door: Door,
    request: &Request<B>,
) -> Result<(Target, u16), (Vec<u8>, Reason, &'static str)> {
    ClientConnection::request_target(door, request)
}

/// 400 for what a proxy must not pass on: HTTP/2 upgrades (h2c) — the rest of the
/// connection would no longer be HTTP/1 requests we can judge one by one.
fn check_request_shape(request: &Request<Incoming>) -> Result<(), (Reason, &'static str)> {
    let upgrade_h2c = request.headers().get_all(header::UPGRADE).iter().any(|v| {
        String::from_utf8_lossy(v.as_bytes())
            .to_ascii_lowercase()
            .contains("h2c")
    });
    if upgrade_h2c || request.headers().contains_key("http2-settings") {
        return Err((Reason::Unsupported, "h2c upgrades are not supported"));
    }
    Ok(())
}

fn upstream_failure(attempt: &mut Attempt, error: &hyper::Error) -> Refusal {
    tracing::debug!(%error, "upstream request failed");
    attempt.set_outcome(crate::audit::Outcome::Failed, Reason::ConnectFailed, None);
    Refusal {
        outcome: attempt.decision,
        reason: Reason::ConnectFailed,
        host: attempt.host.clone(),
        detail: format!("the upstream failed: {error}"),
    }
}

/// `user:password@host:port` → `host:port`: what a record may show of an authority.
fn without_userinfo(authority: &str) -> &str {
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
}

/// The request as the upstream gets it: origin-form, HTTP/1.1, hop-by-hop headers removed,
/// `Host` set from the target the gate judged (never the client's own `Host`).
fn upstream_request(
    request: Request<Incoming>,
    target: &Target,
    port: u16,
    upload: Arc<Upload>,
) -> Request<ProxyBody> {
    let (mut parts, body) = request.into_parts();
    parts.uri = Uri::try_from(origin_form(&parts.uri)).unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    let host = if port == 80 {
        target.to_string()
    } else {
        format!("{target}:{port}")
    };
    if let Ok(value) = HeaderValue::try_from(host) {
        parts.headers.insert(header::HOST, value);
    }
    Request::from_parts(parts, counting_body(body, upload))
}
