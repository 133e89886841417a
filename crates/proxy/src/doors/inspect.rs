//! The door for inspected hosts: where the proxy reads requests in clear, has the gate judge
//! each one (method, path, placeholder tripwire), adds the credential, and sends it upstream
//! over TLS it originates and verifies.
//!
//! A target is inspected when the policy gives it a credential or `methods`/`paths`
//! ([`crate::policy::PolicySet::inspection`]). The CONNECT (or transparent TLS) connection
//! itself went through the gate exactly as any other — judged, resolved once, floor-checked, connected —
//! and keeps its own record; only then does this door terminate the client's TLS with a leaf
//! from the run CA ([`crate::ca`]) and TLS to the upstream ([`crate::upstream_tls`]). Every
//! request inside gets its own `http` record with `method`, `path` (never the query),
//! `status` and `credential`.
//!
//! Plain HTTP to an inspected host gets the same per-request judgement; `http://` to a
//! credential host (port 80, credential on 443) is sent upstream over TLS to port 443, so a
//! program needs no CA at all. A run placeholder in a request to any other host is refused
//! as `credential_misuse`: the sandbox has no business sending it anywhere else.
//!
//! Depends on shared pieces only (gate, shared, refusal, body, audit, and the run-long state
//! in [`crate::inspector`]); nothing depends on it but the doors that hand connections over,
//! so it adds no import circle.

use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::audit::{Attempt, Kind, Outcome};
use crate::body::ProxyBody;
use crate::exchange::{Drain, Upload, counting_body};
use crate::gate::InspectedRequest;
use crate::inspector::Inspector;
use crate::policy::{Decision, Reason, Verdict, split_path};
use crate::refusal::{Refusal, refuse};
use crate::shared::{ConnectionSlot, Shared, client_http1};
use crate::target::{HostName, Target};
use crate::upstream_tls::connect_tls;

/// Builds the refusal from the attempt, then records the attempt and answers.
async fn refuse_with(
    mut attempt: Attempt,
    build: impl FnOnce(&mut Attempt) -> Refusal,
) -> Response<ProxyBody> {
    let refusal = build(&mut attempt);
    refuse(attempt, &refusal).await
}

/// How a plain HTTP request to an inspected target goes upstream.
pub(crate) struct PlainPlan {
    name: HostName,
    /// The port judged and connected to (443 for an upgraded `http://`).
    port: u16,
    tls: bool,
}

/// Some when a plain request to `target:port` must be judged here. A credential is only
/// ever sent over TLS the proxy originates and verifies: to the credential's own port, or
/// from 80 to 443 for a credential on 443 (`http://` upgraded), whatever `tls.ports` says.
/// A rule with `methods`/`paths` judges every plain request to its host, sent upstream
/// plain (where a strict SNI check reserves the port for TLS, the request is refused
/// first, as at the plain door).
pub(crate) fn plain_plan(shared: &Shared, target: &Target, port: u16) -> Option<PlainPlan> {
    shared.inspect.as_ref()?;
    let Target::Name(name) = target else {
        return None;
    };
    let policy = shared.gate.policy();
    let plan = |port: u16, tls: bool| {
        Some(PlainPlan {
            name: name.clone(),
            port,
            tls,
        })
    };
    // Before a `methods`/`paths` rule that admits port 80 too: a credential on 443 is what
    // `http://HOST/` means, and it goes over TLS.
    if let Some(tls_port) = policy.credential_tls_port(target, port) {
        return plan(tls_port, true);
    }
    policy
        .inspection(target, port)
        .and_then(|_| plan(port, false))
}

/// One plain HTTP request to an inspected target: judged, credential set, sent over a fresh
/// upstream connection (TLS when the plan says so).
pub(crate) async fn forward_plain(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
    plan: PlainPlan,
    mut attempt: Attempt,
) -> Response<ProxyBody> {
    let inspector = shared.inspect.as_ref().expect("a plan needs the inspector");
    let target = Target::Name(plan.name.clone());
    let (mut parts, body) = request.into_parts();
    let judged = prepare_request(
        shared,
        inspector,
        &mut attempt,
        &plan.name,
        plan.port,
        &mut parts,
    );
    let decision = match judged {
        Ok(decision) => decision,
        Err(refusal) => return refuse(attempt, &refusal).await,
    };
    if !plan.tls
        && let Err(refusal) = shared
            .gate
            .refuse_plain_on_tls_port(&mut attempt, plan.port)
    {
        return refuse(attempt, &refusal).await;
    }
    let stream = match shared
        .gate
        .connect_decided(&mut attempt, &target, plan.port, &decision)
        .await
    {
        Ok(stream) => stream,
        Err(refusal) => return refuse(attempt, &refusal).await,
    };
    let sender = if plan.tls {
        match connect_tls(&inspector.upstream_tls, &plan.name, stream).await {
            Ok(tls) => handshake(tls).await,
            Err(error) => return refuse_with(attempt, |a| upstream_tls_failure(a, &error)).await,
        }
    } else {
        handshake(stream).await
    };
    let mut sender = match sender {
        Ok(sender) => sender,
        Err(error) => return refuse_with(attempt, |a| upstream_failure(a, &error)).await,
    };
    let upload = Upload::new();
    let outgoing = Request::from_parts(parts, counting_body(body, upload.clone()));
    match sender.send_request(outgoing).await {
        Ok(response) => answered(response, attempt, upload, shared.drain(), inspector).await,
        Err(error) => refuse_with(attempt, |a| upstream_failure(a, &error)).await,
    }
}

/// Serves an inspected tunnel: `client` is the client's side after the CONNECT's 200 (or a
/// transparent TLS connection, its ClientHello replayed); `upstream` the gate-checked TCP
/// connection; `tunnel` the tunnel's own record, which stays open until the client leaves.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve_tunnel<S>(
    shared: Arc<Shared>,
    client: S,
    client_addr: SocketAddr,
    name: HostName,
    port: u16,
    upstream: TcpStream,
    mut tunnel: Attempt,
    decision: Decision,
    _slot: ConnectionSlot,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(inspector) = shared.inspect.as_ref() else {
        return;
    };
    let Some(server_config) = inspector.ca.as_ref().and_then(|ca| ca.server_config(&name)) else {
        tracing::error!(host = %name, "an inspected host without a leaf");
        return;
    };
    let limits = shared.limits.clone();
    // The client's handshake and the upstream's run side by side: an inspected request
    // should cost one TLS handshake of latency, not two.
    let accept = async {
        let acceptor =
            tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), client);
        let start = tokio::time::timeout(limits.client_hello_timeout, acceptor)
            .await
            .map_err(|_| "no ClientHello in time".to_owned())?
            .map_err(|error| format!("not a TLS ClientHello: {error}"))?;
        let sni = start.client_hello().server_name().map(str::to_owned);
        if sni
            .as_deref()
            .map(|s| s.trim_end_matches('.').to_ascii_lowercase())
            != Some(name.as_str().to_owned())
        {
            return Err(format!("SNI {sni:?} is not {name}"));
        }
        start
            .into_stream(server_config)
            .await
            .map_err(|error| format!("TLS handshake with the client failed: {error}"))
    };
    let upstream_addr = upstream.peer_addr().ok();
    let upstream_tls = connect_tls(&inspector.upstream_tls, &name, upstream);
    let (accepted, upstream_tls) = tokio::select! {
        both = async { tokio::join!(accept, upstream_tls) } => both,
        () = shared.stop.cancelled() => return,
    };
    let client_tls = match accepted {
        Ok(stream) => stream,
        Err(problem) => {
            tracing::debug!(host = %name, %problem, "inspected tunnel refused");
            tunnel.set_outcome(Outcome::Blocked, Reason::SniMismatch, None);
            return;
        }
    };
    let upstream = match upstream_tls {
        Ok(stream) => match handshake(stream).await {
            Ok(sender) => UpstreamState::Ready(sender, upstream_addr),
            Err(error) => UpstreamState::Failed(Reason::ConnectFailed, error.to_string()),
        },
        Err(error) => {
            tracing::debug!(host = %name, %error, "upstream TLS failed");
            UpstreamState::Failed(Reason::UpstreamTls, error.to_string())
        }
    };
    // What a request hyper refuses before the service sees it is recorded as.
    let (refused_host, refused_client) = (name.to_string(), client_addr);
    let connection = Arc::new(InspectedConnection {
        shared: shared.clone(),
        client: client_addr,
        name,
        port,
        decision,
        upstream: tokio::sync::Mutex::new(upstream),
    });
    let service = service_fn(move |request| {
        let connection = connection.clone();
        async move { Ok::<_, std::convert::Infallible>(connection.handle(request).await) }
    });
    let builder = client_http1(&limits);
    let served = builder.serve_connection(TokioIo::new(client_tls), service);
    tokio::pin!(served);
    let result = tokio::select! {
        result = served.as_mut() => result,
        () = shared.stop.cancelled() => {
            served.as_mut().graceful_shutdown();
            tokio::time::timeout(limits.shutdown_grace, served.as_mut()).await.unwrap_or(Ok(()))
        }
    };
    match result {
        // A malformed or oversized head is answered by hyper (400/431) or closed, never
        // seen by the service: still an attempt, recorded as at the plain door.
        Err(error) if error.is_parse() || error.is_parse_too_large() => {
            tracing::debug!(%error, "malformed request in an inspected tunnel");
            let mut attempt = Attempt::new(shared.gate.audit(), Kind::Http, Some(refused_client));
            attempt.host = refused_host;
            attempt.port = Some(port);
            attempt.set_outcome(Outcome::Blocked, Reason::BadRequest, None);
            attempt.record().await;
        }
        Err(error) => tracing::debug!(%error, "inspected connection ended"),
        Ok(()) => {}
    }
}

enum UpstreamState {
    /// The connection and the address it goes to (each request's record names it).
    Ready(SendRequest<ProxyBody>, Option<SocketAddr>),
    /// The first upstream could not be used: every request gets this answer.
    Failed(Reason, String),
}

struct InspectedConnection {
    shared: Arc<Shared>,
    client: SocketAddr,
    name: HostName,
    port: u16,
    /// The tunnel's decision, for reconnecting through the gate.
    decision: Decision,
    upstream: tokio::sync::Mutex<UpstreamState>,
}

impl InspectedConnection {
    async fn handle(&self, request: Request<Incoming>) -> Response<ProxyBody> {
        let shared = &self.shared;
        let inspector = shared
            .inspect
            .as_ref()
            .expect("an inspected connection has its inspector");
        let mut attempt = Attempt::new(shared.gate.audit(), Kind::Http, Some(self.client));
        let (mut parts, body) = request.into_parts();
        if let Err(refusal) = prepare_request(
            shared,
            inspector,
            &mut attempt,
            &self.name,
            self.port,
            &mut parts,
        ) {
            return refuse(attempt, &refusal).await;
        }
        let upload = Upload::new();
        let mut outgoing = Request::from_parts(parts, counting_body(body, upload.clone()));
        let mut state = self.upstream.lock().await;
        for attempt_number in 0..2 {
            let sender = match &mut *state {
                UpstreamState::Failed(reason, detail) => {
                    attempt.set_outcome(Outcome::Failed, *reason, None);
                    return refuse_with(attempt, |a| Refusal::of(a, detail.clone())).await;
                }
                UpstreamState::Ready(sender, addr) => {
                    attempt.addr = *addr;
                    sender
                }
            };
            if sender.ready().await.is_ok() {
                match sender.try_send_request(outgoing).await {
                    Ok(response) => {
                        return answered(response, attempt, upload, shared.drain(), inspector)
                            .await;
                    }
                    Err(mut error) => match error.take_message() {
                        Some(request) if attempt_number == 0 => outgoing = request,
                        _ => {
                            return refuse_with(attempt, |a| upstream_failure(a, error.error()))
                                .await;
                        }
                    },
                }
            }
            // The upstream closed between requests: one new connection through the gate.
            match self.reconnect(&mut attempt, inspector).await {
                Ok(sender) => *state = UpstreamState::Ready(sender, attempt.addr),
                Err(refusal) => return refuse(attempt, &refusal).await,
            }
        }
        attempt.set_outcome(Outcome::Failed, Reason::ConnectFailed, None);
        refuse_with(attempt, |a| {
            Refusal::of(a, "the upstream closed every connection".to_owned())
        })
        .await
    }

    async fn reconnect(
        &self,
        attempt: &mut Attempt,
        inspector: &Inspector,
    ) -> Result<SendRequest<ProxyBody>, Refusal> {
        let target = Target::Name(self.name.clone());
        let decision = attempt_decision(attempt, &self.decision);
        let stream = self
            .shared
            .gate
            .connect_decided(attempt, &target, self.port, &decision)
            .await?;
        let tls = connect_tls(&inspector.upstream_tls, &self.name, stream)
            .await
            .map_err(|error| upstream_tls_failure(attempt, &error))?;
        handshake(tls)
            .await
            .map_err(|error| upstream_failure(attempt, &error))
    }
}

/// The request's own decision (set by the gate) if it is one, else the tunnel's.
fn attempt_decision(attempt: &Attempt, tunnel: &Decision) -> Decision {
    let verdict = match attempt.decision {
        Outcome::WouldBlock => Verdict::WouldBlock,
        _ => tunnel.verdict,
    };
    Decision::new(verdict, attempt.reason, tunnel.rule.clone())
}

/// One request, judged by the gate ([`crate::gate::Gate::judge_inspected_request`]) and,
/// once let through, rewritten for the upstream: origin-form, HTTP/1.1, hop-by-hop headers
/// gone, `Host` set from the judged target, `Accept-Encoding: identity` when answers are
/// scrubbed, `Range` and `If-Range` removed and the credential header replaced by the real
/// one on a credential's host. Shared by the tunnel and the plain door.
fn prepare_request(
    shared: &Shared,
    inspector: &Inspector,
    attempt: &mut Attempt,
    name: &HostName,
    port: u16,
    parts: &mut Parts,
) -> Result<Decision, Refusal> {
    let path_and_query = crate::exchange::origin_form(&parts.uri);
    let path = split_path(&path_and_query);
    let InspectedRequest {
        decision,
        credential,
    } = shared
        .gate
        .judge_inspected_request(attempt, name, port, parts, path)?;
    parts.uri = Uri::try_from(path_and_query.as_str()).unwrap_or_else(|_| Uri::from_static("/"));
    parts.version = Version::HTTP_11;
    crate::exchange::strip_hop_by_hop(&mut parts.headers);
    let host = if port == 443 || port == 80 {
        name.to_string()
    } else {
        format!("{name}:{port}")
    };
    if let Ok(value) = HeaderValue::try_from(host) {
        parts.headers.insert(header::HOST, value);
    }
    if !inspector.secret_forms().is_empty() {
        // The scrubber reads answers as they come; an encoded one is refused.
        parts.headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    if credential.is_some() {
        // An upstream that echoes the key would hand it back in pieces, one per range, each
        // too short for the scrubber to know: the credential's host is asked for whole
        // answers only. A 200 is a valid answer to a range request, which clients handle.
        parts.headers.remove(header::RANGE);
        parts.headers.remove(header::IF_RANGE);
    }
    if let Some(credential) = &credential {
        let header_name =
            HeaderName::try_from(credential.header.as_str()).expect("validated by the policy");
        parts.headers.remove(&header_name);
        match inspector.credential_value(credential) {
            Some(value) => {
                parts.headers.insert(header_name, value);
            }
            None => {
                attempt.set_outcome(Outcome::Failed, Reason::ConnectFailed, None);
                return Err(Refusal::of(
                    attempt,
                    format!(
                        "the secret {} is not a valid header value",
                        credential.secret
                    ),
                ));
            }
        }
    }
    Ok(decision)
}

async fn handshake<S>(stream: S) -> Result<SendRequest<ProxyBody>, hyper::Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "inspected upstream connection ended");
        }
    });
    Ok(sender)
}

/// The upstream's answer, its status in the record, scrubbed of the run's secrets.
async fn answered(
    response: Response<Incoming>,
    mut attempt: Attempt,
    upload: Arc<Upload>,
    drain: Drain,
    inspector: &Inspector,
) -> Response<ProxyBody> {
    if let Some(fields) = attempt.request.as_mut() {
        fields.status = Some(response.status().as_u16());
    }
    let secrets = Some(inspector.secret_forms());
    crate::exchange::answer(response, attempt, upload, drain, secrets).await
}

fn upstream_tls_failure(attempt: &mut Attempt, error: &std::io::Error) -> Refusal {
    tracing::debug!(%error, "upstream TLS failed");
    attempt.set_outcome(Outcome::Failed, Reason::UpstreamTls, None);
    Refusal::of(attempt, format!("TLS with the upstream failed: {error}"))
}

fn upstream_failure(attempt: &mut Attempt, error: &hyper::Error) -> Refusal {
    tracing::debug!(%error, "inspected upstream request failed");
    attempt.set_outcome(Outcome::Failed, Reason::ConnectFailed, None);
    Refusal::of(attempt, format!("the upstream failed: {error}"))
}
