//! The audit log as a file: a refusal's record is there when its answer arrives; record
//! text from the sandbox never holds a raw control character; the chain (`seq`, `prev`,
//! `end`); the audit limit, which refusals cannot spend to hide egress; the DNS rate limit
//! (one for the whole loopback).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use common::{HANG, Responses, Site, TestProxy, allow_yaml, exchange, status};
use egress_core::audit::{
    AuditLine, DroppedByDecision, OnAuditLimit, Outcome, genesis, sha256_hex,
};
use egress_core::text::must_escape;
use egress_proxy::AuditDestination;
use hickory_proto::op::{Message, ResponseCode};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

/// A proxy writing to `log`, with a DNS responder and `adjust` applied.
async fn proxy_with_log(
    log: &Path,
    adjust: impl FnOnce(&mut egress_proxy::ProxyConfig),
) -> TestProxy {
    let log = log.to_path_buf();
    TestProxy::start_with(&allow_yaml(&[("allowed.test", 443)], ""), &[], |config| {
        config.audit = AuditDestination::File(log);
        config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
        adjust(config);
    })
    .await
}

fn dns_addr(proxy: &TestProxy) -> SocketAddr {
    proxy.running().local_addrs().dns.unwrap()
}

/// A DNS query for the given raw labels, type A, recursion desired.
fn query(id: u16, labels: &[&[u8]]) -> Vec<u8> {
    let mut bytes = id.to_be_bytes().to_vec();
    bytes.extend([0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in labels {
        bytes.push(u8::try_from(label.len()).unwrap());
        bytes.extend(*label);
    }
    bytes.extend([0, 0, 1, 0, 1]);
    bytes
}

async fn ask(socket: &UdpSocket, server: SocketAddr, bytes: &[u8]) -> Message {
    socket.send_to(bytes, server).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(HANG, socket.recv_from(&mut buffer))
        .await
        .expect("a DNS answer in time")
        .unwrap();
    Message::from_vec(&buffer[..n]).unwrap()
}

fn read_lines(log: &PathBuf) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Defect 3: whoever sees the refusal and then reads the log finds the record — for the
/// CONNECT 403, the plain HTTP 403 and the DNS NXDOMAIN, many times over, with the log read
/// the instant the answer arrives.
#[tokio::test]
async fn a_refusal_is_in_the_log_the_instant_its_answer_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let mut proxy = proxy_with_log(&log, |_| {}).await;
    let dns = dns_addr(&proxy);
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut responses = Responses::new(TcpStream::connect(proxy.addr).await.unwrap());
    for round in 0..40u16 {
        let connect_host = format!("c{round}.blocked.test");
        responses
            .stream
            .write_all(format!("CONNECT {connect_host}:443 HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let answer = responses.next().await;
        assert_eq!(status(&answer), 403, "{answer}");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains(&format!("\"host\":\"{connect_host}\"")),
            "round {round}: the CONNECT 403 came before its record"
        );

        let plain_host = format!("p{round}.blocked.test");
        responses
            .stream
            .write_all(format!("GET http://{plain_host}/ HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let answer = responses.next().await;
        assert_eq!(status(&answer), 403, "{answer}");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains(&format!("\"host\":\"{plain_host}\"")),
            "round {round}: the plain 403 came before its record"
        );

        let label = format!("d{round}");
        let answer = ask(
            &socket,
            dns,
            &query(round, &[label.as_bytes(), b"blocked", b"test"]),
        )
        .await;
        assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains(&format!("\"host\":\"{label}.blocked.test\"")),
            "round {round}: the NXDOMAIN came before its record"
        );
    }
    proxy.shutdown().await;
}

/// Defect 1 at the source: a DNS label carrying `ESC[2K\rall-clear` (raw bytes over UDP),
/// a transparent `Host` with a bidi override and a tab, and a CONNECT target with control
/// characters leave only visible escapes in the record, even after JSON decoding.
#[tokio::test]
async fn record_text_from_the_sandbox_never_holds_a_raw_control_character() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let mut proxy = proxy_with_log(&log, |config| {
        config.transparent_listen = vec!["127.0.0.1:0".parse().unwrap()];
    })
    .await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let answer = ask(
        &socket,
        dns_addr(&proxy),
        &query(7, &[b"\x1b[2K\rall-clear", b"\xe2\x80\xaeevil", b"test"]),
    )
    .await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
    let mut responses = Responses::new(TcpStream::connect(proxy.addr).await.unwrap());
    responses
        .stream
        .write_all(b"CONNECT a\x1b[2K\x7f\x01.test:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let answer = responses.next().await;
    assert_eq!(status(&answer), 400, "{answer}");
    let transparent = proxy.running().local_addrs().transparent[0];
    let mut responses = Responses::new(TcpStream::connect(transparent).await.unwrap());
    responses
        .stream
        .write_all(b"GET / HTTP/1.1\r\nHost: \xe2\x80\xaeevil\t\xc2\x85.test\r\n\r\n")
        .await
        .unwrap();
    let answer = responses.next().await;
    assert_eq!(status(&answer), 400, "{answer}");
    proxy.shutdown().await;

    let lines = read_lines(&log);
    let hosts: Vec<String> = lines
        .iter()
        .filter_map(|line| match AuditLine::parse(line.as_bytes()).unwrap() {
            AuditLine::Attempt(record) => Some(record.host),
            _ => None,
        })
        .collect();
    assert_eq!(hosts.len(), 3, "{lines:#?}");
    for host in &hosts {
        assert!(!host.chars().any(must_escape), "raw control in {host:?}");
    }
    assert_eq!(hosts[0], r"\x1b[2K\x0dall-clear.\u202eevil.test");
    // hyper refuses control bytes in a request target before the CONNECT door sees them.
    assert!(
        hosts[1].is_empty() || hosts[1].contains(r"\x1b[2K\x7f\x01"),
        "{:?}",
        hosts[1]
    );
    assert_eq!(hosts[2], r"\u202eevil\x09\u0085.test");
}

/// Issue 10: every line carries `seq` and `prev` linking it to the previous line of the
/// run, and shutdown closes the chain with an `end` record counting the lines before it.
#[tokio::test]
async fn lines_are_chained_and_closed_by_an_end_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let mut proxy = proxy_with_log(&log, |_| {}).await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for n in 0..3u16 {
        let label = format!("n{n}");
        ask(
            &socket,
            dns_addr(&proxy),
            &query(n, &[label.as_bytes(), b"test"]),
        )
        .await;
    }
    ask(&socket, dns_addr(&proxy), &query(9, &[b"allowed", b"test"])).await;
    proxy.shutdown().await;

    let lines = read_lines(&log);
    assert_eq!(lines.len(), 5, "{lines:#?}");
    let mut prev = genesis(Some("r-test"));
    for (seq, line) in lines.iter().enumerate() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(value["seq"], seq, "{line}");
        assert_eq!(value["prev"], prev.as_str(), "{line}");
        assert!(
            line.ends_with(&format!(",\"seq\":{seq},\"prev\":\"{prev}\"}}")),
            "seq and prev come last: {line}"
        );
        prev = sha256_hex(line.as_bytes());
    }
    match AuditLine::parse(lines[4].as_bytes()).unwrap() {
        AuditLine::End(end) => {
            assert_eq!((end.records, end.dropped), (4, 0));
            assert_eq!(end.run.as_deref(), Some("r-test"));
        }
        other => panic!("not an end record: {other:?}"),
    }
}

/// Past `--audit-limit` records: one `limit` record, then attempts are only counted, and
/// the end record says how many were dropped.
#[tokio::test]
async fn past_the_audit_limit_attempts_are_counted_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let mut proxy = proxy_with_log(&log, |config| config.audit_limit = 3).await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for n in 0..8u16 {
        let label = format!("n{n}");
        let answer = ask(
            &socket,
            dns_addr(&proxy),
            &query(n, &[label.as_bytes(), b"test"]),
        )
        .await;
        assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
    }
    proxy.shutdown().await;

    let lines = read_lines(&log);
    assert_eq!(
        lines.len(),
        5,
        "3 attempts, the limit record, the end:\n{lines:#?}"
    );
    for line in &lines[..3] {
        assert!(matches!(
            AuditLine::parse(line.as_bytes()).unwrap(),
            AuditLine::Attempt(_)
        ));
    }
    match AuditLine::parse(lines[3].as_bytes()).unwrap() {
        AuditLine::Limit(limit) => {
            assert_eq!((limit.limit, limit.reason.as_str()), (3, "audit_limit"));
            assert_eq!(limit.seq, Some(3));
        }
        other => panic!("not a limit record: {other:?}"),
    }
    match AuditLine::parse(lines[4].as_bytes()).unwrap() {
        AuditLine::End(end) => assert_eq!((end.records, end.dropped), (4, 5)),
        other => panic!("not an end record: {other:?}"),
    }
}

/// A proxy writing to `log` that allows `site.test` (pinned to `site`) on the site's port,
/// with a DNS responder, an audit limit of [`SMALL_LIMIT`] and `on_limit`.
async fn budget_proxy(log: &Path, site: &Site, on_limit: OnAuditLimit) -> TestProxy {
    let port = site.port();
    let yaml = allow_yaml(
        &[("site.test", port)],
        &format!("  - cidr: 127.0.0.0/8\n    ports: [{port}]\n"),
    );
    let log = log.to_path_buf();
    TestProxy::start_with(&yaml, &[("site.test", &site.ip())], |config| {
        config.audit = AuditDestination::File(log);
        config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
        config.audit_limit = SMALL_LIMIT;
        config.on_audit_limit = on_limit;
    })
    .await
}

const SMALL_LIMIT: u64 = 5;

/// The attack: refusals are cheap, so the sandbox spends the whole audit budget on blocked
/// lookups (`refusals` of them, more than the limit).
async fn spend_the_budget_on_refusals(proxy: &TestProxy, refusals: u16) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for n in 0..refusals {
        let label = format!("flood{n}");
        let answer = ask(
            &socket,
            dns_addr(proxy),
            &query(n, &[label.as_bytes(), b"blocked", b"test"]),
        )
        .await;
        assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
    }
}

/// A plain request for `site.test` through the proxy, as the program would send it next.
async fn request_the_site(proxy: &TestProxy, site: &Site) -> String {
    let port = site.port();
    let request = format!(
        "GET http://site.test:{port}/after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    exchange(proxy.addr, request.as_bytes()).await
}

fn parsed(lines: &[String]) -> Vec<AuditLine> {
    lines
        .iter()
        .map(|line| AuditLine::parse(line.as_bytes()).unwrap())
        .collect()
}

/// The attack that spent the budget to hide egress: the refusals fill `--audit-limit`,
/// then an allowed request goes out. It is still written (from the reserve), after the
/// `limit` line, and the `end` line counts the dropped refusals by decision.
#[tokio::test]
async fn an_allowed_request_past_a_budget_spent_on_refusals_is_still_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let site = Site::http("127.0.0.2", "site").await;
    let mut proxy = budget_proxy(&log, &site, OnAuditLimit::Reserve).await;
    spend_the_budget_on_refusals(&proxy, 8).await;
    let response = request_the_site(&proxy, &site).await;
    assert_eq!(status(&response), 200, "{response}");
    assert!(site.received_text().starts_with("GET /after "));
    proxy.shutdown().await;

    let lines = read_lines(&log);
    let lines = parsed(&lines);
    assert_eq!(
        lines.len(),
        8,
        "5 refusals, limit, the request, end:\n{lines:#?}"
    );
    for line in &lines[..5] {
        assert!(
            matches!(line, AuditLine::Attempt(record) if record.decision == Outcome::Blocked),
            "{line:?}"
        );
    }
    match &lines[5] {
        AuditLine::Limit(limit) => {
            assert_eq!(limit.limit, SMALL_LIMIT);
            assert_eq!(limit.on_audit_limit.as_deref(), Some("reserve"));
            assert_eq!(limit.reserve, Some(SMALL_LIMIT));
        }
        other => panic!("not a limit record: {other:?}"),
    }
    match &lines[6] {
        AuditLine::Attempt(record) => {
            assert_eq!(record.decision, Outcome::Allowed);
            assert_eq!(record.host, "site.test");
            assert_eq!(record.request.as_ref().unwrap().path, "/after");
        }
        other => panic!("the allowed request has no record: {other:?}"),
    }
    match &lines[7] {
        AuditLine::End(end) => {
            assert_eq!((end.records, end.dropped), (7, 3));
            assert_eq!(end.dropped_by_decision, Some(blocked_dropped(3)));
        }
        other => panic!("not an end record: {other:?}"),
    }
}

/// Under `refuse`, the same attack gets the allowed request refused (503, `audit_limit`)
/// before anything leaves: the upstream never sees a connection, and the refusal is counted
/// as a dropped `blocked` attempt.
#[tokio::test]
async fn under_refuse_egress_past_a_spent_budget_never_reaches_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let canary = Site::canary("127.0.0.3").await;
    let mut proxy = budget_proxy(&log, &canary, OnAuditLimit::Refuse).await;
    spend_the_budget_on_refusals(&proxy, 8).await;
    let response = request_the_site(&proxy, &canary).await;
    assert_eq!(status(&response), 503, "{response}");
    assert!(response.contains("audit_limit"), "{response}");
    assert_eq!(
        canary.connection_count().await,
        0,
        "the upstream was reached"
    );
    proxy.shutdown().await;

    let lines = read_lines(&log);
    let lines = parsed(&lines);
    assert_eq!(lines.len(), 7, "5 refusals, limit, end:\n{lines:#?}");
    match &lines[5] {
        AuditLine::Limit(limit) => {
            assert_eq!(limit.on_audit_limit.as_deref(), Some("refuse"));
            assert_eq!(limit.reserve, Some(0));
        }
        other => panic!("not a limit record: {other:?}"),
    }
    match &lines[6] {
        AuditLine::End(end) => {
            assert_eq!((end.records, end.dropped), (6, 4));
            assert_eq!(end.dropped_by_decision.unwrap().blocked, 4);
        }
        other => panic!("not an end record: {other:?}"),
    }
}

/// Once the reserve is spent too, new egress is refused under `reserve` as well: every
/// allowed request that went out has its record.
#[tokio::test]
async fn past_the_reserve_egress_is_refused_and_every_allowed_request_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let site = Site::http("127.0.0.2", "site").await;
    let mut proxy = budget_proxy(&log, &site, OnAuditLimit::Reserve).await;
    spend_the_budget_on_refusals(&proxy, 6).await;
    let mut served = 0;
    for _ in 0..SMALL_LIMIT + 2 {
        match status(&request_the_site(&proxy, &site).await) {
            200 => served += 1,
            503 => {}
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(served, SMALL_LIMIT, "the reserve's worth went out");
    proxy.shutdown().await;

    let lines = read_lines(&log);
    let allowed = parsed(&lines)
        .iter()
        .filter(|line| matches!(line, AuditLine::Attempt(record) if record.decision == Outcome::Allowed))
        .count();
    assert_eq!(allowed as u64, served);
    match parsed(&lines).last().unwrap() {
        AuditLine::End(end) => assert_eq!(end.dropped_by_decision.unwrap().blocked, 1 + 2),
        other => panic!("not an end record: {other:?}"),
    }
}

/// A client's repeated lookup of an allowed name is answered without a record, so it must
/// not spend the audit budget either: after many more repeats than the budget and its
/// reserve hold, the allowed request still goes out and is written.
#[tokio::test]
async fn repeated_lookups_without_records_do_not_spend_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let site = Site::http("127.0.0.2", "site").await;
    let mut proxy = budget_proxy(&log, &site, OnAuditLimit::Reserve).await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let repeats = u16::try_from(4 * SMALL_LIMIT).unwrap();
    for n in 0..repeats {
        let answer = ask(&socket, dns_addr(&proxy), &query(n, &[b"site", b"test"])).await;
        assert_eq!(
            answer.metadata.response_code,
            ResponseCode::NoError,
            "lookup {n}"
        );
    }
    let response = request_the_site(&proxy, &site).await;
    assert_eq!(status(&response), 200, "{response}");
    proxy.shutdown().await;

    let lines = read_lines(&log);
    let kinds: Vec<_> = parsed(&lines)
        .iter()
        .map(|line| match line {
            AuditLine::Attempt(record) => format!("{:?} {:?}", record.kind, record.decision),
            AuditLine::Limit(_) => "limit".to_owned(),
            AuditLine::End(end) => format!("end dropped {}", end.dropped),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        ["Dns Allowed", "Http Allowed", "end dropped 0"],
        "one lookup's record, the request's, no limit reached"
    );
}

/// Over `--dns-rate` a query is answered REFUSED, gets no record and counts as dropped.
#[tokio::test]
async fn dns_queries_over_the_rate_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    // One query a second, a burst of one: of a quick series, most are over the rate.
    let mut proxy = proxy_with_log(&log, |config| config.dns_rate = 1).await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut refused = 0u64;
    let asked = 30u16;
    for n in 0..asked {
        let label = format!("flood{n}");
        let answer = ask(
            &socket,
            dns_addr(&proxy),
            &query(n, &[label.as_bytes(), b"test"]),
        )
        .await;
        assert_eq!(answer.metadata.id, n);
        match answer.metadata.response_code {
            ResponseCode::Refused => refused += 1,
            ResponseCode::NXDomain => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    proxy.shutdown().await;
    assert!(refused > 0, "no query was over the rate");

    let lines = read_lines(&log);
    let (end, attempts) = lines.split_last().unwrap();
    assert_eq!(
        attempts.len() as u64 + refused,
        u64::from(asked),
        "{lines:#?}"
    );
    match AuditLine::parse(end.as_bytes()).unwrap() {
        AuditLine::End(end) => assert_eq!(end.dropped, refused),
        other => panic!("not an end record: {other:?}"),
    }
}

/// The sandbox owns all of 127.0.0.0/8: queries rotated over 250 source addresses share one
/// rate, so past the burst the excess is refused and counted, as from one address.
#[tokio::test]
async fn dns_queries_from_many_loopback_addresses_share_one_rate() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    // One query a second, a burst of one.
    let mut proxy = proxy_with_log(&log, |config| config.dns_rate = 1).await;
    let mut sources = Vec::new();
    for n in 0..250u32 {
        let address = std::net::Ipv4Addr::from(0x7f01_0000 + (n << 8) + 2);
        sources.push(UdpSocket::bind((address, 0)).await.unwrap());
    }
    let started = std::time::Instant::now();
    let (mut answered, mut refused) = (0u64, 0u64);
    for round in 0..2u16 {
        for (n, socket) in sources.iter().enumerate() {
            let id = round * 1000 + u16::try_from(n).unwrap();
            let label = format!("rotate{id}");
            let answer = ask(
                socket,
                dns_addr(&proxy),
                &query(id, &[label.as_bytes(), b"test"]),
            )
            .await;
            match answer.metadata.response_code {
                ResponseCode::Refused => refused += 1,
                ResponseCode::NXDomain => answered += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    proxy.shutdown().await;

    // A burst of one, then one a second: whatever the pace, no more than that was answered.
    let within = 1 + elapsed.ceil() as u64;
    assert!(
        answered <= within,
        "{answered} of 500 answered in {elapsed:.1}s at 1/s"
    );
    let lines = read_lines(&log);
    let (end, attempts) = lines.split_last().unwrap();
    assert_eq!(attempts.len() as u64, answered, "{lines:#?}");
    match AuditLine::parse(end.as_bytes()).unwrap() {
        AuditLine::End(end) => assert_eq!(end.dropped, refused),
        other => panic!("not an end record: {other:?}"),
    }
    assert_eq!(answered + refused, 500);
}

/// A proxy writing to `log` under a policy allowing `one.test` and every name under
/// `many.test`, with a DNS responder and `adjust` applied.
async fn wildcard_proxy_with_log(
    log: &Path,
    adjust: impl FnOnce(&mut egress_proxy::ProxyConfig),
) -> TestProxy {
    let log = log.to_path_buf();
    let yaml = allow_yaml(&[("one.test", 443), ("*.many.test", 443)], "");
    TestProxy::start_with(&yaml, &[], |config| {
        config.audit = AuditDestination::File(log);
        config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
        adjust(config);
    })
    .await
}

/// One lookup as glibc makes it: A and AAAA at once, from a socket of its own, for `name`;
/// the two answers' codes.
async fn lookup(server: SocketAddr, name: String, id: u16) -> [ResponseCode; 2] {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let labels: Vec<&[u8]> = name.split('.').map(str::as_bytes).collect();
    let a = query(id, &labels);
    let mut aaaa = a.clone();
    let type_at = aaaa.len() - 3;
    aaaa[type_at] = 28;
    aaaa[1] ^= 1;
    socket.send_to(&a, server).await.unwrap();
    socket.send_to(&aaaa, server).await.unwrap();
    let mut codes = [ResponseCode::ServFail; 2];
    let mut buffer = vec![0u8; 4096];
    for _ in 0..2 {
        let (n, _) = tokio::time::timeout(HANG, socket.recv_from(&mut buffer))
            .await
            .expect("a DNS answer in time")
            .unwrap();
        let answer = Message::from_vec(&buffer[..n]).unwrap();
        let slot = usize::from(answer.metadata.id != id);
        codes[slot] = answer.metadata.response_code;
    }
    codes
}

fn attempt_hosts(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|line| match AuditLine::parse(line.as_bytes()).unwrap() {
            AuditLine::Attempt(record) => Some(record.host),
            _ => None,
        })
        .collect()
}

fn dropped(lines: &[String]) -> u64 {
    match AuditLine::parse(lines.last().unwrap().as_bytes()).unwrap() {
        AuditLine::End(end) => end.dropped,
        other => panic!("not an end record: {other:?}"),
    }
}

/// A program opening 200 connections at once, each with its own lookup (A and AAAA), to 200
/// allowed names and 200 times to one allowed name, at the default rate: every query is
/// answered, each name is recorded once, nothing is dropped.
#[tokio::test]
async fn two_hundred_concurrent_lookups_of_allowed_names_are_all_answered() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let mut proxy = wildcard_proxy_with_log(&log, |_| {}).await;
    let server = dns_addr(&proxy);
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(400));
    let lookups: Vec<_> = (0..400u16)
        .map(|n| {
            let name = if n < 200 {
                format!("n{n}.many.test")
            } else {
                "one.test".to_owned()
            };
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                (name.clone(), lookup(server, name, n * 2).await)
            })
        })
        .collect();
    for lookup in lookups {
        let (name, codes) = lookup.await.unwrap();
        assert_eq!(
            codes,
            [ResponseCode::NoError; 2],
            "{name}: A and AAAA answered"
        );
    }
    proxy.shutdown().await;

    let lines = read_lines(&log);
    let mut hosts = attempt_hosts(&lines);
    hosts.sort();
    let mut expected: Vec<String> = (0..200).map(|n| format!("n{n}.many.test")).collect();
    expected.push("one.test".to_owned());
    expected.sort();
    assert_eq!(hosts, expected, "each allowed name recorded once");
    assert_eq!(dropped(&lines), 0);
}

/// Answers to allowed names are no audit-spam channel: a thousand repeated lookups of one
/// allowed name get one record, and made-up names under a wildcard rule are charged like
/// any first lookup, so past the rate they are refused and only counted.
#[tokio::test]
async fn repeated_and_made_up_allowed_names_cannot_flood_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    // One first lookup a second, a burst of two.
    let mut proxy = wildcard_proxy_with_log(&log, |config| config.dns_rate = 1).await;
    let server = dns_addr(&proxy);
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    for id in 0..1000u16 {
        let answer = ask(&socket, server, &query(id, &[b"one", b"test"])).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    }
    let started = std::time::Instant::now();
    let (mut answered, mut refused) = (0u64, 0u64);
    for id in 0..300u16 {
        let label = format!("exfil{id}");
        let answer = ask(
            &socket,
            server,
            &query(id, &[label.as_bytes(), b"many", b"test"]),
        )
        .await;
        match answer.metadata.response_code {
            ResponseCode::NoError => answered += 1,
            ResponseCode::Refused => refused += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    proxy.shutdown().await;

    // one.test took one token of the burst of two; then one a second.
    let within = 1 + elapsed.ceil() as u64;
    assert!(
        answered <= within,
        "{answered} of 300 made-up names answered in {elapsed:.1}s at 1/s"
    );
    let lines = read_lines(&log);
    let hosts = attempt_hosts(&lines);
    assert_eq!(
        hosts.iter().filter(|host| *host == "one.test").count(),
        1,
        "{lines:#?}"
    );
    assert_eq!(hosts.len() as u64, 1 + answered);
    assert_eq!(dropped(&lines), refused);
}

/// Attempts dropped past the budget, all of them refusals.
fn blocked_dropped(blocked: u64) -> DroppedByDecision {
    let mut dropped = DroppedByDecision::default();
    dropped.blocked = blocked;
    dropped
}
