//! The DNS responder for the sandbox (UDP and TCP). It never forwards a query anywhere:
//! allowed names get the proxy's own address, or with raw doors an address of their own on
//! the sandbox's loopback ([`crate::name_addresses`]), so programs that ignore proxy
//! variables reach the transparent and raw doors; everything else gets NXDOMAIN, and every query is an audit
//! record (kind `dns`, port null), except a client's repeated lookup of an allowed name within
//! the answer's TTL. A refusal's record is written before the answer goes out. Queries over
//! the per-client rates ([`crate::dns_rate::DnsRate`]) are answered REFUSED and only counted.
//! The responder speaks DNS; whether a name is answered is the gate's
//! ([`Gate::judge_dns`]: the tripwire, the name, the policy, the record's place).
// Reads bytes from the sandbox: a malformed input must be an error, never a panic.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::audit::{Attempt, Kind, Outcome};
use crate::dns_rate::AnswerCost;
use crate::gate::{DnsVerdict, Gate};
use crate::name_addresses::NameAddresses;
use crate::policy::Reason;
use crate::shared::Shared;
use crate::target::{HostName, Target};

use crate::dns_rate::ANSWER_TTL;
/// Largest UDP payload we announce in EDNS answers (the usual safe value).
const EDNS_PAYLOAD: u16 = 1232;
/// The UDP socket's receive buffer asked for: room for some thousand queries at once. The
/// default (about 200 KiB, some 270 queries) overflows when a program opens a few hundred
/// connections at once, each looking up A and AAAA; the kernel caps it at `rmem_max`.
const UDP_RECEIVE_BUFFER: usize = 1 << 20;

/// Answers one query message. `None` = drop it (too short to carry an id, or not a query).
/// The record is queued when this returns; the responders use [`reply_and_attempt`] instead, to write a
/// refusal's record before they answer.
pub(crate) fn respond(
    query: &[u8],
    client: SocketAddr,
    context: AnswerContext<'_>,
    answer: Ipv4Addr,
) -> Option<Vec<u8>> {
    reply_and_attempt(query, client, context, answer).0
}

/// What a query is answered from: the gate, which decides ([`Gate::judge_dns`]), and what
/// only the DNS door needs to know.
#[derive(Clone, Copy)]
pub(crate) struct AnswerContext<'a> {
    pub gate: &'a Gate,
    /// The sandbox's own host name: answered NOERROR with no records, and not recorded.
    pub own_name: Option<&'a HostName>,
    /// The run's per-name addresses: an allowed name is answered with its own address
    /// from it (for the raw doors), the common answer once it is full.
    pub names: Option<&'a NameAddresses>,
}

/// The answer to one query message and the query's attempt, not yet recorded.
pub(crate) fn reply_and_attempt(
    query: &[u8],
    client: SocketAddr,
    context: AnswerContext<'_>,
    answer: Ipv4Addr,
) -> (Option<Vec<u8>>, Attempt) {
    let mut attempt = Attempt::new(context.gate.audit(), Kind::Dns, Some(client));
    let reply = answer_message(query, client, context, answer, &mut attempt);
    (reply, attempt)
}

fn answer_message(
    query: &[u8],
    client: SocketAddr,
    context: AnswerContext<'_>,
    answer: Ipv4Addr,
    attempt: &mut Attempt,
) -> Option<Vec<u8>> {
    let request = match Message::from_vec(query) {
        Ok(request) => request,
        Err(error) => {
            tracing::debug!(%error, %client, "malformed DNS query");
            if query.len() < 12 {
                return None;
            }
            let &[high, low, ..] = query else {
                return None;
            };
            let id = u16::from_be_bytes([high, low]);
            return Message::error_msg(id, OpCode::Query, ResponseCode::FormErr)
                .to_vec()
                .ok();
        }
    };
    if request.metadata.message_type != MessageType::Query {
        // Never answer an answer: two responders could bounce errors at each other forever.
        return None;
    }
    let mut response = Message::response(request.metadata.id, request.metadata.op_code);
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.metadata.recursion_available = true;
    response.metadata.authoritative = true;
    response.queries = request.queries.clone();
    if request.edns.is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        response.edns = Some(edns);
    }
    let code = answer_query(&request, &mut response, attempt, context, answer);
    response.metadata.response_code = code;
    response.to_vec().ok()
}

fn answer_query(
    request: &Message,
    response: &mut Message,
    attempt: &mut Attempt,
    context: AnswerContext<'_>,
    answer: Ipv4Addr,
) -> ResponseCode {
    let [query] = request.queries.as_slice() else {
        // Several questions are never answered; the record still names the first.
        if let Some(first) = request.queries.first() {
            attempt.set_raw_host(&presented(first.name()));
        }
        return ResponseCode::FormErr;
    };
    let raw: Vec<u8> = query.name().iter().collect::<Vec<_>>().join(&b'.');
    attempt.set_raw_host(&presented(query.name()));
    if request.metadata.op_code != OpCode::Query || query.query_class() != DNSClass::IN {
        attempt.set_outcome(Outcome::Blocked, Reason::Unsupported, None);
        return ResponseCode::NotImp;
    }
    // A label may carry any byte on the wire, dots included: the one label `site.test` is
    // not the name site.test, so joining labels with dots must not turn it into that name.
    // Non-ASCII is refused too: resolvers send IDNs as punycode, and IDNA would map full
    // stops such as `。` inside one label to `.` as well.
    let label_bytes_ok = query
        .name()
        .iter()
        .all(|label| label.is_ascii() && !label.contains(&b'.'));
    let target = std::str::from_utf8(&raw)
        .ok()
        .filter(|_| label_bytes_ok)
        .and_then(|raw| Target::parse_host(raw).ok());
    let name = match context
        .gate
        .judge_dns(attempt, &raw, target, context.own_name)
    {
        DnsVerdict::Answer(name) => name,
        DnsVerdict::OwnName => return ResponseCode::NoError,
        DnsVerdict::NoSuchName => return ResponseCode::NXDomain,
        DnsVerdict::NoRecordPlace => return ResponseCode::Refused,
    };
    // Allowed (or report mode): only A gets an answer; AAAA and the rest (HTTPS records that
    // would carry ECH keys included) are empty, since the sandbox has no IPv6 and every
    // connection must come to the proxy.
    if query.query_type() == RecordType::A {
        let answer = context
            .names
            .and_then(|names| names.address_of(&name))
            .unwrap_or(answer);
        response.add_answer(Record::from_rdata(
            query.name().clone(),
            ANSWER_TTL,
            RData::A(A(answer)),
        ));
    }
    ResponseCode::NoError
}

/// The name as the record shows it, in DNS presentation form: a `.` or `\\` inside a label
/// is escaped (`site\\.test` is the one label `site.test`), so a query can never be logged as
/// another name than the one it asked for.
fn presented(name: &Name) -> Vec<u8> {
    let mut shown = Vec::new();
    for (index, label) in name.iter().enumerate() {
        if index > 0 {
            shown.push(b'.');
        }
        for &byte in label {
            if byte == b'.' || byte == b'\\' {
                shown.push(b'\\');
            }
            shown.push(byte);
        }
    }
    shown
}

/// One query, whichever transport: judged, then charged by what it is
/// ([`crate::dns_rate`]). Over its rate → REFUSED, counted, no record; a repeated answer →
/// answered, no record; otherwise a refusal's record is written before the reply is
/// returned, an answer's queued.
async fn reply_to(
    shared: &Shared,
    message: &[u8],
    client: SocketAddr,
    answer: Ipv4Addr,
) -> Option<Vec<u8>> {
    let gate = &shared.gate;
    let context = AnswerContext {
        gate,
        own_name: shared.sandbox_hostname.as_ref(),
        names: shared.names.get(),
    };
    let (reply, mut attempt) = reply_and_attempt(message, client, context, answer);
    if !charge(shared, client, &mut attempt) {
        attempt.forget();
        gate.audit().count_dropped();
        return refused(message);
    }
    if attempt.is_refused() {
        attempt.record().await;
    }
    reply
}

/// Charges a judged query to its client's limits; false when it is over them. An answer to
/// an allowed name the client was answered lately is free and loses its record.
fn charge(shared: &Shared, client: SocketAddr, attempt: &mut Attempt) -> bool {
    if !matches!(attempt.decision, Outcome::Allowed | Outcome::WouldBlock) {
        return shared.dns_rate.allow_refusal(client.ip());
    }
    match shared.dns_rate.answer(client.ip(), &attempt.host) {
        AnswerCost::First => true,
        AnswerCost::Repeat => {
            attempt.forget();
            true
        }
        AnswerCost::OverRate => false,
    }
}

/// REFUSED for a query over the rate, without parsing more than its header; nothing for
/// what is not a query (never answer an answer).
fn refused(message: &[u8]) -> Option<Vec<u8>> {
    let [id_high, id_low, flags, ..] = *message else {
        return None;
    };
    if message.len() < 12 || flags & 0x80 != 0 {
        return None;
    }
    Message::error_msg(
        u16::from_be_bytes([id_high, id_low]),
        OpCode::Query,
        ResponseCode::Refused,
    )
    .to_vec()
    .ok()
}

pub(crate) async fn serve_udp(socket: UdpSocket, shared: Arc<Shared>) {
    let Some(answer) = shared.dns_answer else {
        return;
    };
    if let Err(error) =
        rustix::net::sockopt::set_socket_recv_buffer_size(&socket, UDP_RECEIVE_BUFFER)
    {
        tracing::debug!(%error, "DNS receive buffer left at its default");
    }
    let mut buffer = vec![0u8; 4096];
    loop {
        let received = tokio::select! {
            received = socket.recv_from(&mut buffer) => received,
            () = shared.stop.cancelled() => return,
        };
        let (len, client) = match received {
            Ok(received) => received,
            Err(error) => {
                // ICMP errors from earlier sends surface here; keep serving.
                tracing::debug!(%error, "DNS receive failed");
                continue;
            }
        };
        let Some(query) = buffer.get(..len) else {
            continue;
        };
        if let Some(reply) = reply_to(&shared, query, client, answer).await
            && let Err(error) = socket.send_to(&reply, client).await
        {
            tracing::debug!(%error, %client, "DNS reply failed");
        }
    }
}

pub(crate) async fn serve_tcp(
    listener: TcpListener,
    shared: Arc<Shared>,
    connections: Arc<Semaphore>,
) {
    crate::listen::accept_until_shutdown(listener, &shared.stop, |stream, client| {
        // Over the limit: close; the client retries over UDP.
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            return;
        };
        shared
            .tasks
            .spawn(serve_tcp_connection(stream, client, shared.clone(), permit));
    })
    .await;
}

/// Length-prefixed queries (RFC 1035 4.2.2) until the client closes or idles.
async fn serve_tcp_connection(
    mut stream: TcpStream,
    client: SocketAddr,
    shared: Arc<Shared>,
    _permit: OwnedSemaphorePermit,
) {
    let Some(answer) = shared.dns_answer else {
        return;
    };
    let idle = shared.limits.head_timeout;
    loop {
        let read = async {
            let len = stream.read_u16().await?;
            let mut message = vec![0u8; usize::from(len)];
            stream.read_exact(&mut message).await?;
            Ok::<_, std::io::Error>(message)
        };
        let message = tokio::select! {
            read = tokio::time::timeout(idle, read) => match read {
                Ok(Ok(message)) => message,
                _ => return,
            },
            () = shared.stop.cancelled() => return,
        };
        let Some(reply) = reply_to(&shared, &message, client, answer).await else {
            return;
        };
        let Ok(len) = u16::try_from(reply.len()) else {
            return;
        };
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend(reply);
        if stream.write_all(&framed).await.is_err() {
            return;
        }
    }
}
