//! Red-team cases against the running proxy on loopback, with raw bytes: what a malicious
//! program inside the sandbox would send through every door. Each case asserts the safe
//! outcome: the status or close, the reason, a canary that is never reached, and exactly one
//! well-formed audit record per attempt.
//!
//! Nothing leaves this machine: every name is pinned to 127.0.0.x, DNS upstreams are test
//! sockets, and addresses outside loopback are only ever judged by the pure engine
//! (`adversarial_policy.rs`), never used as destinations.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::client_hello::client_hello;
use common::{HANG, Responses, Site, TestProxy, exchange, read_to_close, status};
use egress_core::audit::{AuditRecord, Kind, Outcome};
use egress_core::policy::Reason;
use egress_core::target::HostName;
use egress_proxy::{AuditDestination, NameServers};
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Notify;

/// `site.test` is allowed on `port`, and only 127.0.0.2 is exempt from the floor.
fn site_policy(port: u16, extra: &str) -> String {
    format!(
        "version: 1\nname: red\nallow:\n  - host: site.test\n    ports: [{port}]\n  - cidr: 127.0.0.2/32\n    ports: [{port}]\n{extra}"
    )
}

/// Pins: the allowed site on 127.0.0.2, everything hostile on the canary's 127.0.0.3.
const PINS: &[(&str, &str)] = &[
    ("site.test", "127.0.0.2"),
    ("evil.test", "127.0.0.3"),
    ("localhost", "127.0.0.3"),
    ("site.test.evil.test", "127.0.0.3"),
];

fn reason_header(response: &str) -> Option<String> {
    response.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case("x-egress-blocked")
            .then(|| value.trim().to_owned())
    })
}

/// One attempt on a fresh connection; returns the answer and the attempt's only record.
async fn attempt(proxy: &mut TestProxy, request: &[u8]) -> (String, AuditRecord) {
    let mut responses = Responses::new(TcpStream::connect(proxy.addr).await.unwrap());
    responses.stream.write_all(request).await.unwrap();
    let response = responses.next().await;
    drop(responses);
    let record = proxy.record().await;
    let extra = proxy.records_now().await;
    assert!(
        extra.is_empty(),
        "more than one record for one attempt: {extra:?}"
    );
    (response, record)
}

// ---------------------------------------------------------------------------------------
// Plain HTTP: smuggling, request targets, headers
// ---------------------------------------------------------------------------------------

/// Each variant frames a body that holds a second request for the canary. Whatever the
/// proxy makes of the framing, the hidden request is never sent to the canary.
#[tokio::test]
async fn smuggled_requests_never_reach_another_host() {
    let site = Site::http("127.0.0.2", "site").await;
    let canary = Site::canary("127.0.0.3").await;
    let mut proxy = TestProxy::start(&site_policy(site.port(), ""), PINS).await;
    let (s, c) = (site.port(), canary.port());
    let hidden =
        format!("GET http://evil.test:{c}/smuggled HTTP/1.1\r\nHost: evil.test:{c}\r\n\r\n");
    let n = hidden.len();
    let head = format!("POST http://site.test:{s}/ HTTP/1.1\r\nHost: site.test:{s}\r\n");
    let variants = [
        format!(
            "{head}Content-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{hidden}",
            n + 5
        ),
        format!("{head}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n{hidden}"),
        format!("{head}Content-Length: 0\r\nContent-Length: {n}\r\n\r\n{hidden}"),
        format!("{head}Content-Length: {n}\r\nContent-Length: 0\r\n\r\n{hidden}"),
        format!("{head}Content-Length: 0, {n}\r\n\r\n{hidden}"),
        format!("{head}Content-Length: +{n}\r\n\r\n{hidden}"),
        format!("{head}Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n{hidden}"),
        format!("{head}Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{hidden}"),
        format!("{head}Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n{hidden}"),
        format!("{head}Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n{hidden}"),
        format!(
            "{head}Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n{hidden}"
        ),
        format!("{head}Transfer-Encoding: chunked\r\n\r\n0x0\r\n\r\n{hidden}"),
        format!("{head}Transfer-Encoding: chunked\r\n\r\n1;ext=\"\r\n\"\r\nX\r\n0\r\n\r\n{hidden}"),
        format!("{head}Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n{hidden}"),
        format!("{head}Transfer-Encoding: chunked\r\n\r\n0\n\n{hidden}"),
        format!(
            "GET http://site.test:{s}/ HTTP/1.1\r\nHost: site.test\r\nContent-Length: {n}\r\n\r\n{hidden}"
        ),
        format!("GET http://site.test:{s}/ HTTP/1.1\nHost: site.test\n\n{hidden}"),
        format!(
            "GET http://site.test:{s}/ HTTP/1.1\r\nHost: site.test\r\nX: a\rGET http://evil.test:{c}/ HTTP/1.1\r\n\r\n"
        ),
    ];
    for (index, request) in variants.iter().enumerate() {
        let mut responses = Responses::new(TcpStream::connect(proxy.addr).await.unwrap());
        responses
            .stream
            .write_all(request.as_bytes())
            .await
            .unwrap();
        let mut response = responses.next().await;
        let first = status(&response);
        // Whatever else the proxy answers on this connection (a hidden request it parsed).
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(
            Duration::from_millis(500),
            responses.stream.read_to_end(&mut rest),
        )
        .await;
        response.push_str(&String::from_utf8_lossy(&rest));
        assert!(
            matches!(first, 200 | 400 | 502),
            "variant {index}: unexpected answer {response}"
        );
        let records = proxy.records_now().await;
        assert!(!records.is_empty(), "variant {index}: no record");
        for record in &records {
            assert!(
                record.host != "evil.test" || record.decision == Outcome::Blocked,
                "variant {index}: {record:?}"
            );
        }
        assert!(
            !response.contains("site /smuggled"),
            "variant {index}: the site answered the hidden request: {response}"
        );
    }
    assert_eq!(canary.connection_count().await, 0, "the canary was reached");
}

#[tokio::test]
async fn every_pipelined_request_is_judged_on_its_own() {
    let site = Site::http("127.0.0.2", "site").await;
    let canary = Site::canary("127.0.0.3").await;
    let mut proxy = TestProxy::start(&site_policy(site.port(), ""), PINS).await;
    let (s, c) = (site.port(), canary.port());
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let mut responses = Responses::new(stream);
    let packet = format!(
        "GET http://site.test:{s}/1 HTTP/1.1\r\nHost: site.test\r\n\r\n\
         GET http://evil.test:{c}/2 HTTP/1.1\r\nHost: site.test:{s}\r\n\r\n\
         GET http://site.test:{s}/3 HTTP/1.1\r\nHost: evil.test\r\n\r\n\
         GET /4 HTTP/1.1\r\nHost: site.test:{s}\r\n\r\n"
    );
    responses.stream.write_all(packet.as_bytes()).await.unwrap();
    let one = responses.next().await;
    assert!(one.ends_with(&format!("site /1 site.test:{s}")), "{one}");
    let two = responses.next().await;
    assert_eq!(
        (status(&two), reason_header(&two).as_deref()),
        (403, Some("not_allowed")),
        "{two}"
    );
    let three = responses.next().await;
    assert!(
        three.ends_with(&format!("site /3 site.test:{s}")),
        "{three}"
    );
    let four = responses.next().await;
    assert_eq!(status(&four), 400, "origin-form on the proxy port: {four}");
    drop(responses);
    let records = proxy.records_now().await;
    assert_eq!(records.len(), 4, "{records:?}");
    assert_eq!(canary.connection_count().await, 0);
    assert!(
        !site.received_text().contains("evil.test"),
        "{}",
        site.received_text()
    );
}

#[tokio::test]
async fn request_target_tricks_are_refused_or_judged_by_the_real_host() {
    let site = Site::http("127.0.0.2", "site").await;
    let canary = Site::canary("127.0.0.3").await;
    let mut proxy = TestProxy::start(&site_policy(site.port(), ""), PINS).await;
    let (s, c) = (site.port(), canary.port());
    let confusable = HostName::parse("ѕite.test").unwrap(); // Cyrillic ѕ (U+0455)
    let long_label = "a".repeat(64);
    let long_host = "a.".repeat(600);
    let cases: Vec<(String, u16, Option<Reason>)> = vec![
        (
            format!("GET http://site.test@evil.test:{c}/ HTTP/1.1"),
            400,
            None,
        ),
        (
            format!("GET http://site.test:{s}@evil.test:{c}/ HTTP/1.1"),
            400,
            None,
        ),
        // `#` starts a fragment: the authority is evil.test, and that is what is judged.
        (
            format!("GET http://evil.test:{c}#@site.test:{s}/ HTTP/1.1"),
            403,
            Some(Reason::NotAllowed),
        ),
        (
            format!("GET http://evil.test:{c}\\@site.test:{s}/ HTTP/1.1"),
            400,
            None,
        ),
        (format!("GET http://%73ite.test:{s}/ HTTP/1.1"), 400, None),
        (format!("GET http://site%2etest:{s}/ HTTP/1.1"), 400, None),
        (
            format!("GET http://[fe80::1%25lo]:{c}/ HTTP/1.1"),
            400,
            None,
        ),
        (
            format!("GET http://[::ffff:127.0.0.3]:{c}/ HTTP/1.1"),
            403,
            Some(Reason::IpLiteral),
        ),
        (
            format!("GET http://[::1]:{c}/ HTTP/1.1"),
            403,
            Some(Reason::IpLiteral),
        ),
        (
            format!("GET http://2130706435:{c}/ HTTP/1.1"),
            403,
            Some(Reason::IpLiteral),
        ),
        (
            format!("GET http://0x7f.0.0.3:{c}/ HTTP/1.1"),
            403,
            Some(Reason::IpLiteral),
        ),
        (
            format!("GET http://0177.0.0.3:{c}/ HTTP/1.1"),
            403,
            Some(Reason::IpLiteral),
        ),
        (
            format!("GET http://127.3:{c}/ HTTP/1.1"),
            403,
            Some(Reason::IpLiteral),
        ),
        (
            format!("GET http://0:{c}/ HTTP/1.1"),
            403,
            Some(Reason::IpLiteral),
        ),
        (
            format!("GET http://localhost:{c}/ HTTP/1.1"),
            403,
            Some(Reason::NotAllowed),
        ),
        (
            format!("GET http://site.test.evil.test:{c}/ HTTP/1.1"),
            403,
            Some(Reason::NotAllowed),
        ),
        (
            format!("GET http://EVIL.test.:{c}/ HTTP/1.1"),
            403,
            Some(Reason::NotAllowed),
        ),
        (
            format!("GET http://{confusable}:{s}/ HTTP/1.1"),
            403,
            Some(Reason::NotAllowed),
        ),
        (
            format!("GET http://site.test:{c}/ HTTP/1.1"),
            403,
            Some(Reason::PortNotAllowed),
        ),
        (
            format!("GET http://evil.test:{c}/ HTTP/1.1\r\nHost: site.test:{s}"),
            403,
            Some(Reason::NotAllowed),
        ),
        (
            format!("GET http://site.test:{c}.evil.test/ HTTP/1.1"),
            400,
            None,
        ),
        ("GET http://site.test:0/ HTTP/1.1".to_owned(), 400, None),
        ("GET http://site.test:65536/ HTTP/1.1".to_owned(), 400, None),
        (
            format!("GET http://{long_label}.test:{s}/ HTTP/1.1"),
            400,
            None,
        ),
        (format!("GET http://{long_host}test/ HTTP/1.1"), 400, None),
        (
            format!("GET https://site.test:{s}/ HTTP/1.1"),
            400,
            Some(Reason::Unsupported),
        ),
        (
            format!("GET ftp://site.test:{s}/ HTTP/1.1"),
            400,
            Some(Reason::Unsupported),
        ),
        (
            format!("GET ws://site.test:{s}/ HTTP/1.1"),
            400,
            Some(Reason::Unsupported),
        ),
        (
            "GET / HTTP/1.1\r\nHost: site.test".to_owned(),
            400,
            Some(Reason::BadRequest),
        ),
        (
            "OPTIONS * HTTP/1.1\r\nHost: site.test".to_owned(),
            400,
            Some(Reason::BadRequest),
        ),
        (format!("GET http://evil.test:{c}/\0 HTTP/1.1"), 400, None),
        (format!("GET http://evil.test:{c}/ x HTTP/1.1"), 400, None),
        (format!("GET http://evil.test:{c}/ HTTP/2.0"), 400, None),
        (
            format!("GET http://evil.test:{c}/ HTTP/1.1\r\nHost: a\0b"),
            400,
            None,
        ),
        (
            format!("CONNECT http://evil.test:{c}/ HTTP/1.1"),
            400,
            Some(Reason::BadRequest),
        ),
        (format!("connect site.test:{s} HTTP/1.1"), 400, None),
        (format!("GET site.test:{s} HTTP/1.1"), 400, None),
        (
            format!("GET //evil.test:{c}/ HTTP/1.1\r\nHost: site.test"),
            400,
            None,
        ),
        (format!("CONNECT evil.test:{c}/x HTTP/1.1"), 400, None),
    ];
    for (head, expected, reason) in cases {
        let request = format!("{head}\r\nConnection: close\r\n\r\n");
        let (response, record) = attempt(&mut proxy, request.as_bytes()).await;
        assert_eq!(status(&response), expected, "{head:?}: {response}");
        assert!(record.decision == Outcome::Blocked, "{head:?}: {record:?}");
        if let Some(reason) = reason {
            assert_eq!(record.reason, reason, "{head:?}: {record:?}");
            assert_eq!(
                reason_header(&response).as_deref(),
                Some(reason.as_str()),
                "{head:?}"
            );
        } else {
            assert!(
                matches!(record.reason, Reason::BadRequest | Reason::Unsupported),
                "{head:?}: {record:?}"
            );
        }
    }
    // HTTP/0.9: no version, no headers.
    let response = exchange(
        proxy.addr,
        format!("GET http://evil.test:{c}/\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(
        status(&response) == 400 || response.is_empty(),
        "{response}"
    );
    assert_eq!(canary.connection_count().await, 0);
    assert_eq!(site.connection_count().await, 0);
}

#[tokio::test]
async fn normalised_spellings_of_the_allowed_host_reach_only_it() {
    let site = Site::http("127.0.0.2", "site").await;
    let mut proxy = TestProxy::start(&site_policy(site.port(), ""), PINS).await;
    let s = site.port();
    for head in [
        format!("GET http://SITE.TEST.:{s}/a HTTP/1.1"),
        format!("GET HTTP://Site.Test:{s}/a HTTP/1.1"),
        format!("GET http://site.test:{s}/a HTTP/1.0"),
        format!("GET http://site.test:{s}/a HTTP/1.1\r\nHost: evil.test"),
        format!("GET http://site.test:{s}/a HTTP/1.1\r\nHost: evil.test\r\nHost: other.test"),
    ] {
        let request = format!("{head}\r\nConnection: close\r\n\r\n");
        let (response, record) = attempt(&mut proxy, request.as_bytes()).await;
        assert_eq!(status(&response), 200, "{head:?}: {response}");
        assert!(
            response.ends_with(&format!("site /a site.test:{s}")),
            "{head:?}: {response}"
        );
        assert_eq!(
            (record.host.as_str(), record.decision),
            ("site.test", Outcome::Allowed)
        );
    }
    assert!(
        !site.received_text().contains("evil"),
        "{}",
        site.received_text()
    );
}

#[tokio::test]
async fn hop_by_hop_tricks_cannot_rewrite_the_host_or_leak_proxy_credentials() {
    let site = Site::http("127.0.0.2", "site").await;
    let mut proxy = TestProxy::start(&site_policy(site.port(), ""), PINS).await;
    let s = site.port();
    let request = format!(
        "GET http://site.test:{s}/h HTTP/1.1\r\nHost: evil.test\r\nConnection: Host, X-Keep, close\r\n\
         Proxy-Authorization: Basic c2VjcmV0OnNlY3JldA==\r\nProxy-Connection: keep-alive\r\n\
         X-Keep: 1\r\nTE: trailers\r\nKeep-Alive: 300\r\n\r\n"
    );
    let (response, record) = attempt(&mut proxy, request.as_bytes()).await;
    assert!(
        response.ends_with(&format!("site /h site.test:{s}")),
        "{response}"
    );
    assert_eq!(record.decision, Outcome::Allowed);
    let seen = site.received_text().to_ascii_lowercase();
    assert!(seen.contains(&format!("host: site.test:{s}\r\n")), "{seen}");
    assert_eq!(seen.matches("host:").count(), 1, "{seen}");
    for leaked in [
        "proxy-authorization",
        "c2vjcmv0",
        "proxy-connection",
        "x-keep",
        "evil.test",
    ] {
        assert!(
            !seen.contains(leaked),
            "{leaked} reached the upstream: {seen}"
        );
    }
}

#[tokio::test]
async fn upgrades_are_refused_or_stripped() {
    let site = Site::http("127.0.0.2", "site").await;
    let mut proxy = TestProxy::start(&site_policy(site.port(), ""), PINS).await;
    let s = site.port();
    for headers in [
        "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
        "Connection: Upgrade\r\nUpgrade: H2C",
        "Upgrade: websocket, h2c",
        "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA",
    ] {
        let request = format!("GET http://site.test:{s}/ HTTP/1.1\r\n{headers}\r\n\r\n");
        let (response, record) = attempt(&mut proxy, request.as_bytes()).await;
        assert_eq!(status(&response), 400, "{headers}: {response}");
        assert_eq!(
            (record.decision, record.reason),
            (Outcome::Blocked, Reason::Unsupported)
        );
    }
    assert_eq!(site.connection_count().await, 0);
    // A websocket upgrade is forwarded as a plain request: the upgrade does not happen.
    let request = format!(
        "GET http://site.test:{s}/ws HTTP/1.1\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    let (response, _) = attempt(&mut proxy, request.as_bytes()).await;
    assert_eq!(status(&response), 200, "{response}");
    assert!(
        !site
            .received_text()
            .to_ascii_lowercase()
            .contains("upgrade:")
    );
    // The HTTP/2 preface is not an HTTP/1 request.
    let (response, record) = attempt(
        &mut proxy,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
    )
    .await;
    assert!(
        status(&response) == 400 || response.is_empty(),
        "{response}"
    );
    assert_eq!(record.decision, Outcome::Blocked);
}

#[tokio::test]
async fn expect_continue_to_a_refused_host_gets_403_and_no_100() {
    let canary = Site::canary("127.0.0.3").await;
    let mut proxy = TestProxy::start(&site_policy(1, ""), PINS).await;
    let c = canary.port();
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(
            format!("POST http://evil.test:{c}/ HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut buffer = vec![0u8; 4096];
    let n = tokio::time::timeout(HANG, stream.read(&mut buffer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&buffer[..n]).into_owned();
    assert_eq!(status(&answer), 403, "{answer}");
    assert!(!answer.contains(" 100 "), "{answer}");
    assert_eq!(proxy.record().await.reason, Reason::NotAllowed);
    assert_eq!(canary.connection_count().await, 0);
}

// ---------------------------------------------------------------------------------------
// CONNECT
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn connect_authority_tricks_are_refused() {
    let echo = Site::echo("127.0.0.2").await;
    let canary = Site::canary("127.0.0.3").await;
    let mut proxy = TestProxy::start(&site_policy(echo.port(), ""), PINS).await;
    let (s, c) = (echo.port(), canary.port());
    let confusable = HostName::parse("ѕite.test").unwrap();
    let cases: Vec<(String, u16, Option<Reason>)> = vec![
        (format!("site.test:{s}.evil.test"), 400, None),
        ("site.test:0".to_owned(), 400, None),
        ("site.test:65536".to_owned(), 400, None),
        (format!("site.test:-{s}"), 400, None),
        ("site.test:".to_owned(), 400, None),
        ("site.test".to_owned(), 400, None),
        (format!(":{s}"), 400, None),
        (format!("site.test@evil.test:{c}"), 400, None),
        (format!("site.test:{s}@evil.test:{c}"), 400, None),
        (format!("[fe80::1%25lo]:{c}"), 400, None),
        (format!("::1:{c}"), 400, None),
        (
            format!("[::ffff:127.0.0.3]:{c}"),
            403,
            Some(Reason::IpLiteral),
        ),
        (format!("[::1]:{c}"), 403, Some(Reason::IpLiteral)),
        (format!("2130706435:{c}"), 403, Some(Reason::IpLiteral)),
        (format!("0x7f000003:{c}"), 403, Some(Reason::IpLiteral)),
        (format!("0177.0.0.3:{c}"), 403, Some(Reason::IpLiteral)),
        (format!("127.3:{c}"), 403, Some(Reason::IpLiteral)),
        (format!("0.0.0.0:{c}"), 403, Some(Reason::IpLiteral)),
        (format!("localhost:{c}"), 403, Some(Reason::NotAllowed)),
        (
            format!("site.test.evil.test:{c}"),
            403,
            Some(Reason::NotAllowed),
        ),
        (format!("evil.test.:{c}"), 403, Some(Reason::NotAllowed)),
        (format!("EVIL.TEST:{c}"), 403, Some(Reason::NotAllowed)),
        (format!("{confusable}:{s}"), 403, Some(Reason::NotAllowed)),
        (format!("site.test:{c}"), 403, Some(Reason::PortNotAllowed)),
        (format!("/site.test:{s}"), 400, None),
        (format!("site.test:{s}/"), 400, None),
        (format!("site.test:{s}?x"), 400, None),
    ];
    for (authority, expected, reason) in cases {
        let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
        let (response, record) = attempt(&mut proxy, request.as_bytes()).await;
        assert_eq!(status(&response), expected, "{authority}: {response}");
        assert_eq!(record.decision, Outcome::Blocked, "{authority}");
        match reason {
            Some(reason) => assert_eq!(record.reason, reason, "{authority}"),
            None => assert_eq!(record.reason, Reason::BadRequest, "{authority}"),
        }
    }
    assert_eq!(canary.connection_count().await, 0);
    assert_eq!(echo.connection_count().await, 0);
}

/// A CONNECT on a TLS port followed, in the same packet, by a plain request for another
/// host: the bytes are tunnel data, checked as a ClientHello, and refused.
#[tokio::test]
async fn connect_followed_by_a_request_for_another_host_is_not_a_second_request() {
    let echo = Site::echo("127.0.0.2").await;
    let canary = Site::canary("127.0.0.3").await;
    let (s, c) = (echo.port(), canary.port());
    let yaml = site_policy(s, &format!("tls:\n  ports: [{s}]\n"));
    let mut proxy = TestProxy::start(&yaml, PINS).await;
    let packet = format!(
        "CONNECT site.test:{s} HTTP/1.1\r\n\r\nGET http://evil.test:{c}/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"
    );
    let response = exchange(proxy.addr, packet.as_bytes()).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        !response[12..].contains("HTTP/1.1"),
        "a second answer: {response}"
    );
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::SniMismatch)
    );
    assert!(echo.received.lock().unwrap().is_empty());

    // A refused CONNECT followed by a request for the canary: judged, refused.
    let packet = format!(
        "CONNECT evil.test:{c} HTTP/1.1\r\n\r\nGET http://evil.test:{c}/ HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n"
    );
    let response = exchange(proxy.addr, packet.as_bytes()).await;
    assert_eq!(status(&response), 403, "{response}");
    let records = proxy.records_now().await;
    assert!(!records.is_empty());
    assert!(
        records.iter().all(|r| r.decision == Outcome::Blocked),
        "{records:?}"
    );
    assert_eq!(canary.connection_count().await, 0);
}

/// A CONNECT with a request body: the body bytes must not slip upstream unchecked.
#[tokio::test]
async fn a_connect_body_cannot_carry_unchecked_bytes_upstream() {
    let echo = Site::echo("127.0.0.2").await;
    let s = echo.port();
    let yaml = site_policy(s, &format!("tls:\n  ports: [{s}]\n"));
    let mut proxy = TestProxy::start(&yaml, PINS).await;
    let hello = client_hello(Some("site.test"), false);
    for framing in [
        "Content-Length: 9\r\n\r\nNOT-TLS!!".to_owned(),
        "Transfer-Encoding: chunked\r\n\r\n9\r\nNOT-TLS!!\r\n0\r\n\r\n".to_owned(),
    ] {
        let mut packet = format!("CONNECT site.test:{s} HTTP/1.1\r\n{framing}").into_bytes();
        packet.extend(&hello);
        let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
        stream.write_all(&packet).await.unwrap();
        let mut answer = vec![0u8; 512];
        let _ = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut answer)).await;
        drop(stream);
        // Every upstream connection closed and read to its end: nothing is still on its way.
        let received = echo.settled_received().await;
        let records = proxy.records_now().await;
        assert!(
            !received.windows(7).any(|w| w == b"NOT-TLS"),
            "{framing:?}: unchecked body bytes reached the upstream; records {records:?}"
        );
    }
}

/// A ClientHello with full control over its server_name extension and size.
fn crafted_hello(server_name_ext: Option<Vec<u8>>, padding: usize, record_size: usize) -> Vec<u8> {
    fn u16_len(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }
    fn extension(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut out = kind.to_be_bytes().to_vec();
        out.extend(u16_len(data));
        out
    }
    let mut extensions = Vec::new();
    if let Some(data) = server_name_ext {
        extensions.extend(extension(0x0000, &data));
    }
    extensions.extend(extension(0x000d, &u16_len(&[0x08, 0x04, 0x04, 0x03])));
    extensions.extend(extension(0x000a, &u16_len(&[0x00, 0x1d])));
    extensions.extend(extension(0x002b, &[0x02, 0x03, 0x04]));
    let mut key_share = vec![0x00, 0x1d, 0x00, 0x20];
    key_share.extend([7u8; 32]);
    extensions.extend(extension(0x0033, &u16_len(&key_share)));
    if padding > 0 {
        extensions.extend(extension(0x0015, &vec![0u8; padding]));
    }
    let mut body = vec![0x03, 0x03];
    body.extend([1u8; 32]);
    body.push(0);
    body.extend(u16_len(&[0x13, 0x01]));
    body.extend([0x01, 0x00]);
    body.extend(u16_len(&extensions));
    let mut handshake = vec![0x01];
    handshake.extend(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend(body);
    let mut records = Vec::new();
    for fragment in handshake.chunks(record_size) {
        records.extend([0x16, 0x03, 0x01]);
        records.extend(u16_len(fragment));
    }
    records
}

/// server_name extension data with these (type, name) entries.
fn sni_entries(entries: &[(u8, &[u8])]) -> Vec<u8> {
    let mut list = Vec::new();
    for (kind, name) in entries {
        list.push(*kind);
        list.extend((name.len() as u16).to_be_bytes());
        list.extend(*name);
    }
    let mut data = (list.len() as u16).to_be_bytes().to_vec();
    data.extend(list);
    data
}

/// Opens `CONNECT site.test:PORT` on a strict TLS port, sends `first` (in `pieces` writes),
/// and returns what came back plus the tunnel's record.
async fn tunnel_with(
    proxy: &mut TestProxy,
    port: u16,
    first: &[u8],
    pieces: usize,
) -> (Vec<u8>, AuditRecord) {
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let mut responses = Responses::new(stream);
    responses
        .stream
        .write_all(format!("CONNECT site.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let answer = responses.next().await;
    assert_eq!(status(&answer), 200, "{answer}");
    let mut stream = responses.stream;
    let size = first.len().div_ceil(pieces.max(1)).max(1);
    for piece in first.chunks(size) {
        if stream.write_all(piece).await.is_err() {
            break;
        }
        if pieces > 1 {
            // Pacing, not a wait: a pause between writes makes the proxy see the pieces in
            // separate reads, which is what a split ClientHello is about.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let mut back = vec![0u8; first.len()];
    let got = match tokio::time::timeout(Duration::from_secs(3), stream.read_exact(&mut back)).await
    {
        Ok(Ok(_)) => back,
        _ => Vec::new(),
    };
    drop(stream);
    (got, proxy.record().await)
}

#[tokio::test]
async fn sni_spelled_differently_but_equal_is_accepted() {
    let echo = Site::echo("127.0.0.2").await;
    let s = echo.port();
    let yaml = site_policy(s, &format!("tls:\n  ports: [{s}]\n"));
    let mut proxy = TestProxy::start(&yaml, PINS).await;
    for name in ["SITE.TEST", "Site.Test"] {
        let hello = client_hello(Some(name), false);
        let (back, record) = tunnel_with(&mut proxy, s, &hello, 1).await;
        assert_eq!(back, hello, "{name}");
        assert_eq!(
            (record.decision, record.reason),
            (Outcome::Allowed, Reason::Rule),
            "{name}"
        );
    }
    // Dribbled one byte per write, and re-framed into many tiny records.
    let hello = client_hello(Some("site.test"), false);
    let (back, record) = tunnel_with(&mut proxy, s, &hello, hello.len()).await;
    assert_eq!(back, hello);
    assert_eq!(record.reason, Reason::Rule);
    let tiny_records = crafted_hello(Some(sni_entries(&[(0, b"site.test")])), 0, 7);
    let (back, record) = tunnel_with(&mut proxy, s, &tiny_records, 5).await;
    assert_eq!(back, tiny_records);
    assert_eq!(record.reason, Reason::Rule);
}

#[tokio::test]
async fn sni_tricks_close_the_tunnel_before_upstream_sees_a_byte() {
    let echo = Site::echo("127.0.0.2").await;
    let s = echo.port();
    let yaml = site_policy(s, &format!("tls:\n  ports: [{s}]\n"));
    let mut proxy = TestProxy::start_with(&yaml, PINS, |config| {
        config.limits.client_hello_timeout = Duration::from_millis(300);
    })
    .await;
    let hello = |entries: &[(u8, &[u8])]| crafted_hello(Some(sni_entries(entries)), 0, 16384);
    let mut truncated = client_hello(Some("site.test"), false);
    truncated.truncate(40);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("other name", client_hello(Some("evil.test"), false)),
        (
            "allowed as a prefix",
            client_hello(Some("site.test.evil.test"), false),
        ),
        (
            "allowed as a suffix",
            client_hello(Some("evil-site.test"), false),
        ),
        (
            "confusable",
            client_hello(Some(HostName::parse("ѕite.test").unwrap().as_str()), false),
        ),
        ("IP literal", client_hello(Some("127.0.0.2"), false)),
        ("no SNI", client_hello(None, false)),
        ("ECH", client_hello(Some("site.test"), true)),
        (
            "two host names",
            hello(&[(0, b"site.test"), (0, b"evil.test")]),
        ),
        (
            "unknown name type first",
            hello(&[(1, b"site.test"), (0, b"site.test")]),
        ),
        ("NUL in name", hello(&[(0, b"site.test\0evil.test")])),
        ("empty name", hello(&[(0, b"")])),
        (
            "oversized hello",
            crafted_hello(Some(sni_entries(&[(0, b"site.test")])), 20_000, 16384),
        ),
        (
            "application data record",
            [&[0x17, 0x03, 0x03, 0x00, 0x05][..], b"hello"].concat(),
        ),
        (
            "alert record",
            vec![0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28],
        ),
        (
            "SSLv2 hello",
            vec![0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15, 0x00, 0x00],
        ),
        (
            "plain HTTP",
            b"GET / HTTP/1.1\r\nHost: site.test\r\n\r\n".to_vec(),
        ),
        ("half a hello, then silence", truncated),
    ];
    for (label, first) in cases {
        let (back, record) = tunnel_with(&mut proxy, s, &first, 1).await;
        assert!(back.is_empty(), "{label}: the tunnel answered");
        assert_eq!(
            (record.decision, record.reason),
            (Outcome::Blocked, Reason::SniMismatch),
            "{label}: {record:?}"
        );
        assert_eq!(record.host, "site.test", "{label}");
        assert_eq!(record.bytes_up, 0, "{label}");
    }
    assert!(
        echo.settled_received().await.is_empty(),
        "the upstream got bytes"
    );
}

// ---------------------------------------------------------------------------------------
// Resolution and the floor
// ---------------------------------------------------------------------------------------

/// Allowed names pinned to addresses behind the floor: refused before any connection.
/// Only addresses that stay on this machine are used as pins here; the full list is judged
/// by the pure engine in `adversarial_policy.rs`.
#[tokio::test]
async fn allowed_names_leading_to_local_private_addresses_are_never_connected() {
    let canary = Site::canary("127.0.0.3").await;
    let c = canary.port();
    let yaml = format!("version: 1\nallow:\n  - host: site.test\n    ports: [{c}]\n");
    for pin in [
        "127.0.0.3",
        "127.0.0.1",
        "0.0.0.0",
        "::ffff:127.0.0.3",
        "::1",
        "::",
    ] {
        let mut proxy = TestProxy::start(&yaml, &[("site.test", pin)]).await;
        for request in [
            format!("GET http://site.test:{c}/ HTTP/1.1\r\nConnection: close\r\n\r\n"),
            format!("CONNECT site.test:{c} HTTP/1.1\r\n\r\n"),
        ] {
            let (response, record) = attempt(&mut proxy, request.as_bytes()).await;
            assert_eq!(status(&response), 403, "{pin}: {response}");
            assert_eq!(
                reason_header(&response).as_deref(),
                Some("private_address"),
                "{pin}"
            );
            assert_eq!(
                (record.decision, record.reason),
                (Outcome::Blocked, Reason::PrivateAddress)
            );
            assert_eq!(record.addr, None, "{pin}");
        }
        proxy.shutdown().await;
    }
    assert_eq!(canary.connection_count().await, 0);
}

#[tokio::test]
async fn a_name_with_one_private_address_is_connected_only_to_the_checked_one() {
    let site = Site::http("127.0.0.2", "site").await;
    let canary = Site::canary("127.0.0.3").await;
    let s = site.port();
    // The canary listens on the site's port too, so a wrong choice would reach it.
    let canary_same_port = Site::canary_at(SocketAddr::from(([127, 0, 0, 3], s))).await;
    for pins in [
        vec![("site.test", "127.0.0.3"), ("site.test", "127.0.0.2")],
        vec![("site.test", "127.0.0.2"), ("site.test", "127.0.0.3")],
        vec![
            ("site.test", "0.0.0.0"),
            ("site.test", "::ffff:127.0.0.3"),
            ("site.test", "127.0.0.2"),
        ],
    ] {
        let mut proxy = TestProxy::start(&site_policy(s, ""), &pins).await;
        let request = format!("GET http://site.test:{s}/one HTTP/1.1\r\nConnection: close\r\n\r\n");
        let (response, record) = attempt(&mut proxy, request.as_bytes()).await;
        assert!(
            response.ends_with(&format!("site /one site.test:{s}")),
            "{pins:?}: {response}"
        );
        assert_eq!(record.addr.as_deref(), Some("127.0.0.2"), "{pins:?}");
        proxy.shutdown().await;
    }
    assert_eq!(
        canary_same_port.connection_count().await,
        0,
        "a private address was connected to"
    );
    assert_eq!(canary.connection_count().await, 0);
}

/// A DNS server that answers nothing and keeps every packet and connection it gets.
struct DnsCanary {
    addr: SocketAddr,
    hits: Arc<Mutex<Vec<Vec<u8>>>>,
    changed: Arc<Notify>,
}

impl DnsCanary {
    async fn start(ip: &str) -> DnsCanary {
        let udp = UdpSocket::bind((ip.parse::<IpAddr>().unwrap(), 0))
            .await
            .unwrap();
        let addr = udp.local_addr().unwrap();
        let tcp = TcpListener::bind(addr).await.unwrap();
        let hits: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let changed: Arc<Notify> = Arc::default();
        let (udp_hits, udp_changed) = (hits.clone(), changed.clone());
        tokio::spawn(async move {
            let mut buffer = vec![0u8; 4096];
            while let Ok((n, _)) = udp.recv_from(&mut buffer).await {
                udp_hits.lock().unwrap().push(buffer[..n].to_vec());
                udp_changed.notify_waiters();
            }
        });
        let (tcp_hits, tcp_changed) = (hits.clone(), changed.clone());
        tokio::spawn(async move {
            while let Ok((_stream, _)) = tcp.accept().await {
                tcp_hits.lock().unwrap().push(b"tcp".to_vec());
                tcp_changed.notify_waiters();
            }
        });
        DnsCanary {
            addr,
            hits,
            changed,
        }
    }

    fn count(&self) -> usize {
        self.hits.lock().unwrap().len()
    }

    /// The name each packet asked for (`tcp` for a TCP connection, `?` if unparsable).
    fn names(&self) -> Vec<String> {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .map(|hit| {
                if hit == b"tcp" {
                    return "tcp".to_owned();
                }
                Message::from_vec(hit)
                    .ok()
                    .and_then(|message| message.queries.first().map(|q| q.name().to_ascii()))
                    .map_or_else(|| "?".to_owned(), |name| name.to_ascii_lowercase())
            })
            .collect()
    }

    /// Waits (up to `HANG`) until a query for `name` has arrived.
    async fn wait_for_query(&self, name: &str) {
        let waited = tokio::time::timeout(HANG, async {
            loop {
                let changed = self.changed.notified();
                if self.names().iter().any(|seen| seen == name) {
                    return;
                }
                changed.await;
            }
        })
        .await;
        assert!(waited.is_ok(), "no query for {name} reached the DNS canary");
    }
}

fn dns_query(name: &str, kind: RecordType) -> Vec<u8> {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
    message.to_vec().unwrap()
}

async fn ask_udp(server: SocketAddr, bytes: &[u8]) -> Option<Message> {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(bytes, server).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    match tokio::time::timeout(Duration::from_secs(2), socket.recv_from(&mut buffer)).await {
        Ok(Ok((n, _))) => Some(Message::from_vec(&buffer[..n]).expect("a parsable answer")),
        _ => None,
    }
}

/// Refused names — by every door, in enforce and report mode — never reach a resolver.
/// The positive control at the end proves the DNS canary does see lookups.
#[tokio::test]
async fn refused_names_are_never_resolved_by_any_door() {
    let dns = DnsCanary::start("127.0.0.4").await;
    let site = Site::http("127.0.0.2", "site").await;
    let s = site.port();
    let yaml = format!(
        "version: 1\nallow:\n  - host: site.test\n    ports: [{s}]\n  - host: unpinned.test\n    ports: [{s}]\ndeny:\n  - host: denied.test\n"
    );
    let mut proxy = TestProxy::start_with(&yaml, &[], |config| {
        config.name_servers = NameServers::Given(vec![dns.addr]);
        config.limits.resolve_timeout = Duration::from_millis(500);
        config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
        config.transparent_listen = vec![SocketAddr::from(([127, 0, 0, 1], s))];
    })
    .await;
    let responder = proxy.running().local_addrs().dns.unwrap();
    let transparent = proxy.running().local_addrs().transparent[0];
    for request in [
        format!("GET http://evil.test:{s}/ HTTP/1.1\r\nConnection: close\r\n\r\n"),
        format!("GET http://denied.test:{s}/ HTTP/1.1\r\nConnection: close\r\n\r\n"),
        format!(
            "GET http://site.test:{}/ HTTP/1.1\r\nConnection: close\r\n\r\n",
            s ^ 1
        ),
        format!("CONNECT evil.test:{s} HTTP/1.1\r\nConnection: close\r\n\r\n"),
        format!("CONNECT exfil-c2VjcmV0.evil.test:{s} HTTP/1.1\r\nConnection: close\r\n\r\n"),
        format!("CONNECT site.test.evil.test:{s} HTTP/1.1\r\nConnection: close\r\n\r\n"),
    ] {
        let response = exchange(proxy.addr, request.as_bytes()).await;
        assert_eq!(status(&response), 403, "{request}: {response}");
    }
    let mut stream = TcpStream::connect(transparent).await.unwrap();
    stream
        .write_all(&client_hello(Some("exfil.evil.test"), false))
        .await
        .unwrap();
    assert!(read_to_close(&mut stream).await.is_empty());
    let mut stream = TcpStream::connect(transparent).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: exfil2.evil.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(status(&read_to_close(&mut stream).await), 403);
    for (name, kind) in [
        ("exfil3.evil.test.", RecordType::A),
        ("site.test.", RecordType::A),
        ("site.test.", RecordType::AAAA),
        ("site.test.", RecordType::TXT),
        ("unpinned.test.", RecordType::ANY),
        ("denied.test.", RecordType::A),
    ] {
        let answer = ask_udp(responder, &dns_query(name, kind))
            .await
            .expect("an answer");
        assert!(
            answer
                .answers
                .iter()
                .all(|r| r.record_type() == RecordType::A),
            "{name}"
        );
    }
    // Positive control through the same resolver, after every refused name: an allowed,
    // unpinned name is looked up (and fails: the canary is mute). Once the canary has seen
    // that lookup, a lookup of a refused name made before it has arrived too.
    let response = exchange(
        proxy.addr,
        format!("GET http://unpinned.test:{s}/ HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status(&response), 502, "{response}");
    dns.wait_for_query("unpinned.test.").await;
    let seen = dns.names();
    assert!(
        seen.iter().all(|name| name == "unpinned.test."),
        "a refused name (or a responder query) reached a resolver: {seen:?}"
    );
    let records = proxy.records_now().await;
    assert!(records.iter().all(|r| r.addr.is_none()), "{records:?}");
}

#[tokio::test]
async fn report_mode_still_refuses_deny_rules_and_the_floor() {
    let canary = Site::canary("127.0.0.3").await;
    let c = canary.port();
    let yaml = format!(
        "version: 1\nmode: report\nallow:\n  - host: site.test\n    ports: [{c}]\ndeny:\n  - host: denied.test\n"
    );
    let mut proxy = TestProxy::start(
        &yaml,
        &[
            ("other.test", "127.0.0.3"),
            ("denied.test", "127.0.0.3"),
            ("site.test", "127.0.0.3"),
        ],
    )
    .await;
    for (target, reason) in [
        (format!("other.test:{c}"), Reason::PrivateAddress),
        (format!("denied.test:{c}"), Reason::Denied),
        (format!("site.test:{c}"), Reason::PrivateAddress),
        (format!("127.0.0.3:{c}"), Reason::PrivateAddress),
        (format!("[::ffff:127.0.0.3]:{c}"), Reason::PrivateAddress),
        (format!("0x7f000003:{c}"), Reason::PrivateAddress),
    ] {
        for request in [
            format!("GET http://{target}/ HTTP/1.1\r\nConnection: close\r\n\r\n"),
            format!("CONNECT {target} HTTP/1.1\r\n\r\n"),
        ] {
            let (response, record) = attempt(&mut proxy, request.as_bytes()).await;
            assert_eq!(status(&response), 403, "{request}: {response}");
            assert_eq!(
                (record.decision, record.reason),
                (Outcome::Blocked, reason),
                "{request}"
            );
        }
    }
    assert_eq!(canary.connection_count().await, 0);
}

// ---------------------------------------------------------------------------------------
// DNS responder
// ---------------------------------------------------------------------------------------

async fn dns_proxy(yaml: &str, upstream: Option<SocketAddr>) -> (TestProxy, SocketAddr) {
    let proxy = TestProxy::start_with(yaml, &[], |config| {
        config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
        config.dns_answer = Some("127.0.0.9".parse().unwrap());
        config.limits.head_timeout = Duration::from_millis(500);
        if let Some(upstream) = upstream {
            config.name_servers = NameServers::Given(vec![upstream]);
        }
    })
    .await;
    let dns = proxy.running().local_addrs().dns.unwrap();
    (proxy, dns)
}

/// A raw DNS header: id, flags, counts.
fn dns_header(id: u16, flags: u16, qd: u16, an: u16, ns: u16, ar: u16) -> Vec<u8> {
    [id, flags, qd, an, ns, ar]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect()
}

/// A wire-format name from raw labels (a label may contain any byte, dots included).
fn wire_name(labels: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for label in labels {
        out.push(label.len() as u8);
        out.extend(*label);
    }
    out.push(0);
    out
}

fn question(name: Vec<u8>, kind: u16) -> Vec<u8> {
    let mut out = name;
    out.extend(kind.to_be_bytes());
    out.extend(1u16.to_be_bytes());
    out
}

#[tokio::test]
async fn dns_names_are_judged_exactly_as_they_are_on_the_wire() {
    let upstream = DnsCanary::start("127.0.0.4").await;
    let yaml = "version: 1\nallow:\n  - host: site.test\n  - host: \"*.wild.test\"\n";
    let (mut proxy, dns) = dns_proxy(yaml, Some(upstream.addr)).await;
    let allowed = |message: &Message| {
        message.metadata.response_code == ResponseCode::NoError && !message.answers.is_empty()
    };
    // Case variations (0x20) are the same name.
    let answer = ask_udp(dns, &dns_query("SiTe.TeSt.", RecordType::A))
        .await
        .unwrap();
    assert!(allowed(&answer));
    assert_eq!(proxy.record().await.host, "site.test");
    for refused in [
        "site.test.evil.test.",
        "site.test.local.",
        "evil.site.test.",
        "wild.test.",
        "site-test.",
        "xn--site-test.",
    ] {
        let answer = ask_udp(dns, &dns_query(refused, RecordType::A))
            .await
            .unwrap();
        assert_eq!(
            answer.metadata.response_code,
            ResponseCode::NXDomain,
            "{refused}"
        );
        assert!(answer.answers.is_empty(), "{refused}");
        let record = proxy.record().await;
        assert_eq!(record.decision, Outcome::Blocked, "{refused}");
    }
    // A single label that contains dots (or characters IDNA turns into dots) is not the
    // name `site.test`.
    for labels in [
        vec![&b"site.test"[..]],
        vec![&b"a.wild"[..], &b"test"[..]],
        vec![&b"site"[..], &b"test."[..]],
        // Dots in disguise: IDNA maps the ideographic and fullwidth full stops to `.`.
        vec!["site\u{3002}test".as_bytes()],
        vec!["site\u{ff0e}test".as_bytes()],
        vec!["a\u{ff61}wild".as_bytes(), &b"test"[..]],
    ] {
        let mut bytes = dns_header(0x4242, 0x0100, 1, 0, 0, 0);
        bytes.extend(question(wire_name(&labels), 1));
        let answer = ask_udp(dns, &bytes).await.expect("an answer");
        assert!(
            answer.answers.is_empty(),
            "{labels:?} was answered: {answer:?}"
        );
        let record = proxy.record().await;
        assert_eq!(record.decision, Outcome::Blocked, "{labels:?}: {record:?}");
    }
    // ANY/TXT/AAAA/HTTPS for an allowed name carry nothing but (at most) the proxy's A.
    // They repeat the lookup of site.test recorded above, so they get no record of their own.
    for kind in [
        RecordType::ANY,
        RecordType::TXT,
        RecordType::AAAA,
        RecordType::HTTPS,
        RecordType::MX,
    ] {
        let answer = ask_udp(dns, &dns_query("site.test.", kind)).await.unwrap();
        assert!(answer.answers.is_empty(), "{kind}: {answer:?}");
    }
    ask_udp(dns, &dns_query("after.test.", RecordType::A))
        .await
        .unwrap();
    assert_eq!(proxy.record().await.host, "after.test");
    assert_eq!(upstream.count(), 0, "the responder forwarded a query");
}

#[tokio::test]
async fn hostile_dns_messages_are_answered_safely_and_logged_once() {
    let yaml = "version: 1\nallow:\n  - host: site.test\n";
    let (mut proxy, dns) = dns_proxy(yaml, None).await;
    let mut loop_self = dns_header(1, 0x0100, 1, 0, 0, 0);
    loop_self.extend([0xc0, 0x0c, 0x00, 0x01, 0x00, 0x01]);
    let mut loop_pair = dns_header(2, 0x0100, 1, 0, 0, 0);
    loop_pair.extend([0x01, b'a', 0xc0, 0x0e, 0x00, 0x01, 0x00, 0x01]);
    let mut forward_pointer = dns_header(3, 0x0100, 1, 0, 0, 0);
    forward_pointer.extend([0xc0, 0x20, 0x00, 0x01, 0x00, 0x01]);
    let mut chain = dns_header(4, 0x0100, 1, 0, 0, 0);
    // A long chain of pointers, each to the one before: a pointer bomb.
    let mut offsets = vec![12u16];
    chain.extend([0x01, b'a', 0x00]);
    for _ in 0..200 {
        let target = *offsets.last().unwrap();
        offsets.push(chain.len() as u16);
        chain.extend([0x01, b'b', 0xc0 | (target >> 8) as u8, target as u8]);
    }
    let last = *offsets.last().unwrap();
    let mut bomb = chain.clone();
    bomb[4..6].copy_from_slice(&1u16.to_be_bytes());
    bomb.extend([0xc0 | (last >> 8) as u8, last as u8, 0x00, 0x01, 0x00, 0x01]);
    let mut two_questions = dns_header(5, 0x0100, 2, 0, 0, 0);
    two_questions.extend(question(wire_name(&[b"site", b"test"]), 1));
    two_questions.extend(question(wire_name(&[b"evil", b"test"]), 1));
    let mut many_questions = dns_header(6, 0x0100, 300, 0, 0, 0);
    for _ in 0..300 {
        many_questions.extend(question(wire_name(&[b"site", b"test"]), 1));
    }
    let mut lying_count = dns_header(7, 0x0100, 65535, 0, 0, 0);
    lying_count.extend(question(wire_name(&[b"site", b"test"]), 1));
    let mut long_name = dns_header(8, 0x0100, 1, 0, 0, 0);
    let label = [b'a'; 63];
    long_name.extend(question(
        wire_name(&[&label, &label, &label, &label, b"test"]),
        1,
    ));
    let mut response_bit = dns_header(9, 0x8100, 1, 0, 0, 0);
    response_bit.extend(question(wire_name(&[b"evil", b"test"]), 1));
    let mut chaos = dns_header(10, 0x0100, 1, 0, 0, 0);
    chaos.extend(wire_name(&[b"version", b"bind"]));
    chaos.extend([0x00, 0x10, 0x00, 0x03]);
    let mut update = dns_header(11, 0x2800, 1, 0, 0, 0);
    update.extend(question(wire_name(&[b"site", b"test"]), 6));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("self pointer", loop_self),
        ("pointer pair loop", loop_pair),
        ("forward pointer", forward_pointer),
        ("pointer bomb", bomb),
        ("two questions", two_questions),
        ("300 questions", many_questions),
        ("qdcount lies", lying_count),
        ("name over 255 bytes", long_name),
        ("response bit", response_bit),
        ("CHAOS class", chaos),
        ("UPDATE opcode", update),
    ];
    for (label, bytes) in cases {
        let answer = ask_udp(dns, &bytes).await;
        if let Some(answer) = &answer {
            assert!(answer.answers.is_empty(), "{label}: {answer:?}");
            assert_ne!(
                answer.metadata.response_code,
                ResponseCode::NoError,
                "{label}"
            );
        }
        let records = proxy.records_now().await;
        assert!(records.len() <= 1, "{label}: {records:?}");
        assert!(
            records.iter().all(|r| r.decision == Outcome::Blocked),
            "{label}: {records:?}"
        );
    }
    // Still serving.
    let answer = ask_udp(dns, &dns_query("site.test.", RecordType::A))
        .await
        .unwrap();
    assert_eq!(answer.answers.len(), 1);
}

#[tokio::test]
async fn dns_over_tcp_survives_length_prefix_lies() {
    let yaml = "version: 1\nallow:\n  - host: site.test\n";
    let (mut proxy, dns) = dns_proxy(yaml, None).await;
    // Says 300 bytes, sends 20, then goes silent: cut off by the idle bound.
    let mut stream = TcpStream::connect(dns).await.unwrap();
    stream.write_all(&300u16.to_be_bytes()).await.unwrap();
    stream
        .write_all(&dns_query("site.test.", RecordType::A)[..20])
        .await
        .unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(HANG, stream.read_to_end(&mut rest))
        .await
        .expect("cut off in time")
        .ok();
    assert!(rest.is_empty());
    // Says 0 bytes.
    let mut stream = TcpStream::connect(dns).await.unwrap();
    stream.write_all(&[0, 0]).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(HANG, stream.read_to_end(&mut rest))
        .await
        .expect("closed in time")
        .ok();
    // Says less than it sends: the surplus is the next (garbage) message.
    let query = dns_query("evil.test.", RecordType::A);
    let mut framed = 12u16.to_be_bytes().to_vec();
    framed.extend(&query);
    let mut stream = TcpStream::connect(dns).await.unwrap();
    stream.write_all(&framed).await.unwrap();
    let _ = stream.shutdown().await;
    let mut rest = Vec::new();
    tokio::time::timeout(HANG, stream.read_to_end(&mut rest))
        .await
        .expect("closed in time")
        .ok();
    for record in proxy.records_now().await {
        assert_ne!(record.decision, Outcome::Allowed, "{record:?}");
    }
    let answer = ask_udp(dns, &dns_query("site.test.", RecordType::A))
        .await
        .unwrap();
    assert_eq!(answer.answers.len(), 1);
}

// ---------------------------------------------------------------------------------------
// Transparent listeners
// ---------------------------------------------------------------------------------------

async fn transparent_proxy(site: &Site, yaml: &str) -> (TestProxy, SocketAddr) {
    let port = site.port();
    let proxy = TestProxy::start_with(yaml, PINS, |config| {
        config.transparent_listen = vec![SocketAddr::from(([127, 0, 0, 1], port))];
        config.limits.head_timeout = Duration::from_millis(500);
        config.limits.client_hello_timeout = Duration::from_millis(500);
    })
    .await;
    let listener = proxy.running().local_addrs().transparent[0];
    (proxy, listener)
}

#[tokio::test]
async fn transparent_tls_is_judged_by_sni_on_the_listener_port_and_stays_with_that_host() {
    let echo = Site::echo("127.0.0.2").await;
    let canary = Site::canary("127.0.0.3").await;
    let (mut proxy, listener) = transparent_proxy(&echo, &site_policy(echo.port(), "")).await;
    // SNI for the allowed host, then bytes naming another host: they all go to the SNI host.
    let hello = client_hello(Some("site.test"), false);
    let mut stream = TcpStream::connect(listener).await.unwrap();
    stream.write_all(&hello).await.unwrap();
    let inner = b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n";
    stream.write_all(inner).await.unwrap();
    let mut back = vec![0u8; hello.len() + inner.len()];
    tokio::time::timeout(HANG, stream.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    drop(stream);
    let record = proxy.record().await;
    assert_eq!(
        (record.kind, record.host.as_str(), record.decision),
        (Kind::Tls, "site.test", Outcome::Allowed)
    );
    assert_eq!(record.addr.as_deref(), Some("127.0.0.2"));
    let refused: Vec<(&str, Vec<u8>, Reason)> = vec![
        (
            "other SNI",
            client_hello(Some("evil.test"), false),
            Reason::NotAllowed,
        ),
        (
            "ECH",
            client_hello(Some("site.test"), true),
            Reason::SniMismatch,
        ),
        ("no SNI", client_hello(None, false), Reason::Unsupported),
        (
            "IP SNI",
            client_hello(Some("127.0.0.3"), false),
            Reason::Unsupported,
        ),
        (
            "garbage record",
            vec![0x16, 0x03, 0x01, 0x00, 0x03, 1, 2, 3],
            Reason::BadRequest,
        ),
        (
            "oversized",
            crafted_hello(Some(sni_entries(&[(0, b"site.test")])), 20_000, 16384),
            Reason::BadRequest,
        ),
    ];
    for (label, bytes, reason) in refused {
        let mut stream = TcpStream::connect(listener).await.unwrap();
        stream.write_all(&bytes).await.unwrap();
        assert!(read_to_close(&mut stream).await.is_empty(), "{label}");
        let record = proxy.record().await;
        assert_eq!(
            (record.decision, record.reason),
            (Outcome::Blocked, reason),
            "{label}: {record:?}"
        );
    }
    assert_eq!(canary.connection_count().await, 0);
    assert_eq!(echo.connection_count().await, 1);
}

#[tokio::test]
async fn transparent_http_is_judged_by_host_and_silent_or_empty_connections_get_nothing() {
    let site = Site::http("127.0.0.2", "site").await;
    let s = site.port();
    // The canary's port must differ from the listener's (the site's): on another address
    // the kernel may hand out the same port, and `Host: evil.test:{c}` would then name the
    // listener's own port (seen once: 403 where 400 was expected).
    let canary = loop {
        let canary = Site::canary("127.0.0.3").await;
        if canary.port() != s {
            break canary;
        }
    };
    let (mut proxy, listener) = transparent_proxy(&site, &site_policy(s, "")).await;
    let c = canary.port();
    for (head, expected) in [
        ("GET / HTTP/1.1\r\nHost: evil.test".to_owned(), 403),
        // A port other than the listener's: the program never connected there.
        (format!("GET / HTTP/1.1\r\nHost: evil.test:{c}"), 400),
        (format!("GET / HTTP/1.1\r\nHost: site.test:{c}"), 400),
        (
            format!("GET http://site.test:{c}/ HTTP/1.1\r\nHost: site.test"),
            400,
        ),
        (
            "GET / HTTP/1.1\r\nHost: site.test\r\nHost: evil.test".to_owned(),
            400,
        ),
        ("GET / HTTP/1.1".to_owned(), 400),
        (
            "GET / HTTP/1.1\r\nHost: site.test@evil.test".to_owned(),
            400,
        ),
        (
            format!("GET http://evil.test:{s}/ HTTP/1.1\r\nHost: site.test"),
            403,
        ),
        (
            "CONNECT site.test:443 HTTP/1.1\r\nHost: site.test".to_owned(),
            400,
        ),
        ("GET / HTTP/1.1\r\nHost: 127.0.0.3".to_owned(), 403),
    ] {
        let mut stream = TcpStream::connect(listener).await.unwrap();
        stream
            .write_all(format!("{head}\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let response = read_to_close(&mut stream).await;
        assert_eq!(status(&response), expected, "{head:?}: {response}");
        let record = proxy.record().await;
        assert_eq!(record.decision, Outcome::Blocked, "{head:?}");
    }
    // Connect and close without a byte: nothing was attempted, nothing is allowed.
    drop(TcpStream::connect(listener).await.unwrap());
    // Connect and stay silent: cut off at the head bound.
    let mut silent = TcpStream::connect(listener).await.unwrap();
    let silent_client = silent.local_addr().unwrap().to_string();
    let mut rest = Vec::new();
    tokio::time::timeout(HANG, silent.read_to_end(&mut rest))
        .await
        .expect("cut off in time")
        .ok();
    // The silent connection's record comes after the head bound, so whatever the empty
    // connection caused was written before it: read up to it, every record blocked.
    loop {
        let record = proxy.record().await;
        assert_eq!(record.decision, Outcome::Blocked, "{record:?}");
        if record.client.as_deref() == Some(silent_client.as_str()) {
            break;
        }
    }
    assert_eq!(canary.connection_count().await, 0);
    assert_eq!(site.connection_count().await, 0);
}

// ---------------------------------------------------------------------------------------
// Audit log integrity
// ---------------------------------------------------------------------------------------

/// Injection attempts through every door, with records written to a real file: every line
/// is one well-formed record, none is `allowed`, and there is one line per attempt.
#[tokio::test]
async fn hostile_hosts_never_forge_or_split_an_audit_line() {
    let site = Site::echo("127.0.0.2").await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    let s = site.port();
    let yaml = site_policy(s, "");
    let mut proxy = TestProxy::start_with(&yaml, PINS, |config| {
        config.audit = AuditDestination::File(log.clone());
        config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
        config.transparent_listen = vec![SocketAddr::from(([127, 0, 0, 1], s))];
        config.limits.head_timeout = Duration::from_millis(500);
    })
    .await;
    let dns = proxy.running().local_addrs().dns.unwrap();
    let transparent = proxy.running().local_addrs().transparent[0];
    let forged = "x\",\"decision\":\"allowed\",\"host\":\"y";
    let mut attempts = 0;
    let hosts: Vec<Vec<u8>> = vec![
        forged.as_bytes().to_vec(),
        b"evil\"}\n{\"v\":1,\"decision\":\"allowed\"}".to_vec(),
        b"a\xff\xfe\"b".to_vec(),
        "a\u{2028}{\"decision\":\"allowed\"}\u{85}b"
            .as_bytes()
            .to_vec(),
        b"a\tb\x7f\x01".to_vec(),
    ];
    for host in &hosts {
        // Transparent Host header (header values may carry obs-text and quotes).
        let mut request = b"GET / HTTP/1.1\r\nHost: ".to_vec();
        request.extend(
            host.iter()
                .filter(|b| **b != b'\n' && **b != b'\r' && **b != 0),
        );
        request.extend(b"\r\nConnection: close\r\n\r\n");
        let mut stream = TcpStream::connect(transparent).await.unwrap();
        stream.write_all(&request).await.unwrap();
        read_to_close(&mut stream).await;
        attempts += 1;
        // CONNECT authority (hyper refuses most of these bytes itself: still one record).
        let mut request = b"CONNECT ".to_vec();
        request.extend(
            host.iter()
                .filter(|b| **b != b'\n' && **b != b'\r' && **b != b' '),
        );
        request.extend(b":443 HTTP/1.1\r\n\r\n");
        exchange(proxy.addr, &request).await;
        attempts += 1;
        // DNS question whose labels carry the bytes.
        let labels: Vec<&[u8]> = host
            .split(|b| *b == b'.')
            .filter(|l| !l.is_empty() && l.len() < 64)
            .collect();
        let mut query = dns_header(0x77, 0x0100, 1, 0, 0, 0);
        query.extend(question(wire_name(&labels), 1));
        ask_udp(dns, &query).await;
        attempts += 1;
    }
    proxy.shutdown().await;
    let text = std::fs::read(&log).unwrap();
    let text = String::from_utf8(text).expect("the audit log is UTF-8");
    let mut lines: Vec<&str> = text.split('\n').filter(|l| !l.is_empty()).collect();
    // The run's chain closes with its end record; the attempts come before it.
    let end = lines.pop().unwrap();
    assert!(end.contains(r#""kind":"end""#), "{end}");
    assert_eq!(lines.len(), attempts, "one line per attempt:\n{text}");
    for line in &lines {
        assert!(line.starts_with("{\"v\":1,"), "{line}");
        assert_eq!(line.matches("\"decision\":").count(), 1, "{line}");
        assert!(
            !line.contains(['\r', '\u{85}', '\u{2028}', '\u{2029}']),
            "a line separator for some readers: {line:?}"
        );
        let record: AuditRecord =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(record.decision, Outcome::Blocked, "{line}");
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        // The 15 fields of an attempt, then the chain's seq and prev.
        assert_eq!(value.as_object().unwrap().len(), 17, "{line}");
    }
    assert_eq!(site.connection_count().await, 0);
}

// ---------------------------------------------------------------------------------------
// Resolution through a real (test) DNS server: rebinding and mixed answers
// ---------------------------------------------------------------------------------------

/// A DNS server on 127.0.0.x that answers every A/AAAA question from a script: the answer
/// to the `n`th question of a kind (counting from 0) is `script(n, kind)`, with TTL 0 so that nothing
/// is cached between attempts.
async fn scripted_dns(
    ip: &str,
    script: impl Fn(usize, RecordType) -> Vec<IpAddr> + Send + 'static,
) -> SocketAddr {
    use hickory_proto::op::{MessageType, OpCode};
    use hickory_proto::rr::rdata::{A, AAAA};
    use hickory_proto::rr::{RData, Record};
    let socket = UdpSocket::bind((ip.parse::<IpAddr>().unwrap(), 0))
        .await
        .unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 4096];
        let mut asked = std::collections::HashMap::<RecordType, usize>::new();
        while let Ok((n, client)) = socket.recv_from(&mut buffer).await {
            let Ok(query) = Message::from_vec(&buffer[..n]) else {
                continue;
            };
            let mut response = Message::response(query.metadata.id, OpCode::Query);
            response.metadata.message_type = MessageType::Response;
            response.metadata.recursion_available = true;
            response.queries = query.queries.clone();
            if let Some(question) = query.queries.first() {
                let kind = question.query_type();
                let n = asked.entry(kind).or_default();
                for ip in script(*n, kind) {
                    let data = match (ip, kind) {
                        (IpAddr::V4(v4), RecordType::A) => RData::A(A(v4)),
                        (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(v6)),
                        _ => continue,
                    };
                    response.add_answer(Record::from_rdata(question.name().clone(), 0, data));
                }
                *n += 1;
            }
            if let Ok(bytes) = response.to_vec() {
                let _ = socket.send_to(&bytes, client).await;
            }
        }
    });
    addr
}

/// DNS rebinding: the allowed name's answers flip between the site and the canary. Every
/// attempt resolves once and connects only to an address it checked.
#[tokio::test]
async fn rebinding_answers_never_lead_to_a_private_address() {
    let site = Site::http("127.0.0.2", "site").await;
    let s = site.port();
    let canary_listener = TcpListener::bind(("127.0.0.3", s))
        .await
        .expect("the canary binds the site's port on 127.0.0.3");
    let reached = Arc::new(Mutex::new(0usize));
    let counter = reached.clone();
    tokio::spawn(async move {
        while let Ok(_accepted) = canary_listener.accept().await {
            *counter.lock().unwrap() += 1;
        }
    });
    let dns = scripted_dns("127.0.0.5", |n, kind| match (n % 4, kind) {
        (0, RecordType::A) => vec!["127.0.0.2".parse().unwrap()],
        (1, RecordType::A) => vec!["127.0.0.3".parse().unwrap()],
        (2, RecordType::A) => vec!["127.0.0.3".parse().unwrap(), "127.0.0.2".parse().unwrap()],
        (_, RecordType::A) => vec!["0.0.0.0".parse().unwrap()],
        (0, RecordType::AAAA) => Vec::new(),
        (_, RecordType::AAAA) => vec!["::ffff:127.0.0.3".parse().unwrap()],
        _ => Vec::new(),
    })
    .await;
    let mut proxy = TestProxy::start_with(&site_policy(s, ""), &[], |config| {
        config.name_servers = NameServers::Given(vec![dns]);
        config.limits.resolve_timeout = Duration::from_secs(3);
    })
    .await;
    let mut allowed = 0;
    for round in 0..12 {
        let request = format!(
            "GET http://rebind.site.test:{s}/r{round} HTTP/1.1\r\nConnection: close\r\n\r\n"
        );
        // rebind.site.test is not allowed: refused before any lookup.
        let (response, record) = attempt(&mut proxy, request.as_bytes()).await;
        assert_eq!(status(&response), 403, "{response}");
        assert_eq!(record.reason, Reason::NotAllowed);
        let request =
            format!("GET http://site.test:{s}/r{round} HTTP/1.1\r\nConnection: close\r\n\r\n");
        let (response, record) = attempt(&mut proxy, request.as_bytes()).await;
        match status(&response) {
            200 => {
                allowed += 1;
                assert_eq!(record.addr.as_deref(), Some("127.0.0.2"), "{record:?}");
            }
            403 => assert_eq!(record.reason, Reason::PrivateAddress, "{record:?}"),
            502 => assert_eq!(record.reason, Reason::ResolveFailed, "{record:?}"),
            other => panic!("round {round}: status {other}: {response}"),
        }
    }
    assert!(
        allowed > 0,
        "the site was never reached: the script did not run"
    );
    assert_eq!(
        *reached.lock().unwrap(),
        0,
        "a rebound private address was connected to"
    );
}

/// Plain HTTP on a port the policy marks as TLS is judged by its host first (another host
/// is refused as not allowed), and then refused as `sni_mismatch` even for the allowed host,
/// through the transparent listener and the explicit proxy alike: every door applies the
/// TLS-port rule that CONNECT applies to non-TLS bytes.
#[tokio::test]
async fn plain_http_to_a_tls_port_is_judged_by_host_then_refused_as_not_tls() {
    let site = Site::http("127.0.0.2", "site").await;
    let canary = Site::canary("127.0.0.3").await;
    let s = site.port();
    let yaml = site_policy(s, &format!("tls:\n  ports: [{s}]\n"));
    let (mut proxy, listener) = transparent_proxy(&site, &yaml).await;
    let c = canary.port();
    let mut stream = TcpStream::connect(listener).await.unwrap();
    stream
        .write_all("GET / HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n".as_bytes())
        .await
        .unwrap();
    assert_eq!(status(&read_to_close(&mut stream).await), 403);
    assert_eq!(proxy.record().await.reason, Reason::NotAllowed);
    let (response, record) = attempt(
        &mut proxy,
        format!("GET http://evil.test:{c}/ HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status(&response), 403);
    assert_eq!(record.reason, Reason::NotAllowed);
    assert_eq!(canary.connection_count().await, 0);

    let mut stream = TcpStream::connect(listener).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /transparent HTTP/1.1\r\nHost: site.test:{s}\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    assert_eq!(status(&read_to_close(&mut stream).await), 403);
    assert_eq!(proxy.record().await.reason, Reason::SniMismatch);
    let (response, record) = attempt(
        &mut proxy,
        format!("GET http://site.test:{s}/explicit HTTP/1.1\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert_eq!(status(&response), 403);
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::SniMismatch)
    );
    assert_eq!(site.received_text(), "");
}

/// The CONNECT authority decides; a Host header naming another host changes nothing, and
/// a wildcard rule does not make SNI for a sibling name acceptable.
#[tokio::test]
async fn connect_ignores_host_headers_and_sni_must_equal_the_connect_host() {
    let echo = Site::echo("127.0.0.2").await;
    let s = echo.port();
    let yaml = format!(
        "version: 1\nallow:\n  - host: \"*.site.test\"\n    ports: [{s}]\n  - cidr: 127.0.0.2/32\n    ports: [{s}]\ntls:\n  ports: [{s}]\n"
    );
    let mut proxy = TestProxy::start(
        &yaml,
        &[("a.site.test", "127.0.0.2"), ("b.site.test", "127.0.0.2")],
    )
    .await;
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let mut responses = Responses::new(stream);
    responses
        .stream
        .write_all(
            format!("CONNECT a.site.test:{s} HTTP/1.1\r\nHost: evil.test:1\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    assert_eq!(status(&responses.next().await), 200);
    let mut tunnel = responses.stream;
    tunnel
        .write_all(&client_hello(Some("b.site.test"), false))
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(HANG, tunnel.read_to_end(&mut rest)).await;
    assert!(rest.is_empty());
    let record = proxy.record().await;
    assert_eq!(
        (record.host.as_str(), record.reason),
        ("a.site.test", Reason::SniMismatch)
    );
    assert!(echo.received.lock().unwrap().is_empty());
}
