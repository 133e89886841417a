//! Absolute-form plain HTTP through the explicit listener, on loopback with raw bytes.

mod common;

use std::time::Duration;

use common::{Responses, Site, TestProxy, allow_yaml, exchange, read_to_close, status};
use egress_core::audit::{Kind, Outcome};
use egress_core::policy::Reason;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn loopback_cidr(port: u16) -> String {
    format!("  - cidr: 127.0.0.0/8\n    ports: [{port}]\n")
}

#[tokio::test]
async fn allowed_request_is_forwarded_in_origin_form_with_the_uri_host() {
    let site = Site::http("127.0.0.2", "site-a").await;
    let yaml = allow_yaml(&[("a.test", site.port())], &loopback_cidr(site.port()));
    let mut proxy = TestProxy::start(&yaml, &[("a.test", "127.0.0.2")]).await;
    let port = site.port();
    let request = format!(
        "GET http://A.test:{port}/path?q=1 HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: secret\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\nProxy-Connection: keep-alive\r\n\r\n"
    );
    let response = exchange(proxy.addr, request.as_bytes()).await;
    assert_eq!(status(&response), 200, "{response}");
    assert!(
        response.ends_with(&format!("site-a /path?q=1 a.test:{port}")),
        "{response}"
    );
    let seen = site.received_text();
    assert!(seen.starts_with("GET /path?q=1 HTTP/1.1\r\n"), "{seen}");
    let lower = seen.to_ascii_lowercase();
    for gone in [
        "proxy-authorization",
        "x-drop",
        "proxy-connection",
        "evil.test",
    ] {
        assert!(!lower.contains(gone), "{gone} reached the upstream: {seen}");
    }
    let record = proxy.record().await;
    assert_eq!(record.kind, Kind::Http);
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Allowed, Reason::Rule)
    );
    assert_eq!(record.host, "a.test");
    assert_eq!(record.port, Some(port));
    assert_eq!(record.addr.as_deref(), Some("127.0.0.2"));
    assert_eq!(record.rule.as_deref(), Some("test:allow[0]"));
    assert_eq!(record.run.as_deref(), Some("r-test"));
    assert_eq!(
        record.bytes_down,
        format!("site-a /path?q=1 a.test:{port}").len() as u64
    );
}

/// A plain request is read in clear, so its record carries its method, its path (without
/// the query) and the upstream's status as an inspected one does, but no credential; a
/// refused one has its method and path and a null status. Every record names the sandbox by
/// the run's host name.
#[tokio::test]
async fn a_plain_request_records_its_method_path_status_and_the_sandbox_host_name() {
    let site = Site::http("127.0.0.2", "site-a").await;
    let yaml = allow_yaml(&[("a.test", site.port())], &loopback_cidr(site.port()));
    let own = egress_core::target::HostName::parse("sandbox-1a2b3c").unwrap();
    let mut proxy = TestProxy::start_with(&yaml, &[("a.test", "127.0.0.2")], |config| {
        config.sandbox_hostname = Some(own.clone());
    })
    .await;
    let port = site.port();
    let request = format!(
        "PUT http://a.test:{port}/v1/items?token=x HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
    );
    let response = exchange(proxy.addr, request.as_bytes()).await;
    assert_eq!(status(&response), 200, "{response}");
    let record = proxy.record().await;
    assert_eq!(record.decision, Outcome::Allowed);
    let fields = record
        .request
        .expect("a plain request has its request fields");
    assert_eq!(fields.method, "PUT");
    assert_eq!(fields.path, "/v1/items");
    assert_eq!(fields.status, Some(200));
    assert_eq!(fields.credential, None);
    assert_eq!(record.sandbox_hostname.as_deref(), Some("sandbox-1a2b3c"));

    let refused = "DELETE http://b.test/gone HTTP/1.1\r\nConnection: close\r\n\r\n";
    let response = exchange(proxy.addr, refused.as_bytes()).await;
    assert_eq!(status(&response), 403, "{response}");
    let record = proxy.record().await;
    assert_eq!(record.decision, Outcome::Blocked);
    let fields = record
        .request
        .expect("a refused plain request has its request fields");
    assert_eq!(
        (fields.method.as_str(), fields.path.as_str()),
        ("DELETE", "/gone")
    );
    assert_eq!(fields.status, None);
    assert_eq!(record.sandbox_hostname.as_deref(), Some("sandbox-1a2b3c"));
}

/// `http://host:port?q=1` has no path: the upstream is asked for `/?q=1`, query kept
/// (it was asked for `/`, the query dropped).
#[tokio::test]
async fn an_absolute_url_without_a_path_keeps_its_query() {
    let site = Site::http("127.0.0.2", "site-a").await;
    let yaml = allow_yaml(&[("a.test", site.port())], &loopback_cidr(site.port()));
    let proxy = TestProxy::start(&yaml, &[("a.test", "127.0.0.2")]).await;
    let port = site.port();
    let request = format!("GET http://a.test:{port}?q=1 HTTP/1.1\r\nConnection: close\r\n\r\n");
    let response = exchange(proxy.addr, request.as_bytes()).await;
    assert_eq!(status(&response), 200, "{response}");
    let seen = site.received_text();
    assert!(seen.starts_with("GET /?q=1 HTTP/1.1\r\n"), "{seen}");
}

/// An upstream that answers `413` as soon as it has the head, then reads the body to its end
/// (as nginx does with a large upload) or to the connection's end; it reports how many
/// body bytes it received.
async fn early_answering_upstream(
    ip: &str,
    length: usize,
) -> (u16, tokio::sync::oneshot::Receiver<usize>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (received, told) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buffer = vec![0u8; 64 * 1024];
        let head_end = loop {
            let n = stream.read(&mut buffer).await.unwrap();
            seen.extend_from_slice(&buffer[..n]);
            if let Some(end) = common::find(&seen, b"\r\n\r\n") {
                break end + 4;
            }
        };
        stream
            .write_all(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 2\r\n\r\nno")
            .await
            .unwrap();
        let mut body = seen.len() - head_end;
        while body < length {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => body += n,
            }
        }
        let _ = received.send(body);
    });
    (port, told)
}

/// The upstream answers before it reads the body; the client sends the body after the
/// answer. The record counts every body byte forwarded (it said `bytes_up: 0`, written when
/// the answer ended), and is written once the upload is done.
#[tokio::test]
async fn an_upload_sent_after_an_early_answer_is_counted_in_its_record() {
    const BODY: usize = 200_000;
    let (port, upstream_received) = early_answering_upstream("127.0.0.2", BODY).await;
    let yaml = allow_yaml(&[("a.test", port)], &loopback_cidr(port));
    let mut proxy = TestProxy::start(&yaml, &[("a.test", "127.0.0.2")]).await;
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let mut responses = Responses::new(stream);
    let head = format!(
        "POST http://a.test:{port}/upload HTTP/1.1\r\nContent-Length: {BODY}\r\nConnection: close\r\n\r\n"
    );
    responses.stream.write_all(head.as_bytes()).await.unwrap();
    let response = responses.next().await;
    assert_eq!(status(&response), 413, "{response}");
    responses.stream.write_all(&vec![b'A'; BODY]).await.unwrap();
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Allowed, Reason::Rule)
    );
    assert_eq!(record.bytes_up, BODY as u64, "{record:?}");
    assert_eq!(record.bytes_down, 2);
    let received = tokio::time::timeout(common::HANG, upstream_received)
        .await
        .expect("the upstream saw the upload end")
        .unwrap();
    assert_eq!(received, BODY);
}

/// An upstream that answers `101 Switching Protocols` (the proxy removed the request's
/// `Upgrade`) gets the client a 502 and a failed record; the 101 was passed on, leaving the
/// client on a connection nobody relayed.
#[tokio::test]
async fn an_upstream_that_switches_protocols_is_a_502() {
    let listener = tokio::net::TcpListener::bind(("127.0.0.2", 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buffer = [0u8; 4096];
        while common::find(&seen, b"\r\n\r\n").is_none() {
            let n = stream.read(&mut buffer).await.unwrap();
            if n == 0 {
                return;
            }
            seen.extend_from_slice(&buffer[..n]);
        }
        let _ = stream
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            .await;
        let _ = stream.read(&mut buffer).await;
    });
    let yaml = allow_yaml(&[("a.test", port)], &loopback_cidr(port));
    let mut proxy = TestProxy::start(&yaml, &[("a.test", "127.0.0.2")]).await;
    let response = exchange(
        proxy.addr,
        format!("GET http://a.test:{port}/ws HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status(&response), 502, "{response}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Failed, Reason::ConnectFailed)
    );
    assert_eq!(record.host, "a.test");
}

#[tokio::test]
async fn refused_host_gets_403_and_is_never_resolved_or_reached() {
    let canary = Site::canary("127.0.0.3").await;
    let yaml = allow_yaml(&[("a.test", 80)], "");
    // Were the name resolved and connected, the pin would lead to the canary.
    let mut proxy = TestProxy::start(&yaml, &[("blocked.test", "127.0.0.3")]).await;
    let request = format!(
        "GET http://blocked.test:{}/ HTTP/1.1\r\nHost: blocked.test\r\nConnection: close\r\n\r\n",
        canary.port()
    );
    let response = exchange(proxy.addr, request.as_bytes()).await;
    assert_eq!(status(&response), 403, "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("x-egress-blocked: not_allowed")
    );
    assert!(response.contains("blocked.test"), "{response}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::NotAllowed)
    );
    assert_eq!(record.addr, None);
    assert_eq!(canary.connection_count().await, 0);
}

#[tokio::test]
async fn each_pipelined_request_is_judged_and_sent_to_its_own_upstream() {
    let a = Site::http("127.0.0.2", "site-a").await;
    let b = Site::http("127.0.0.4", "site-b").await;
    let canary = Site::canary("127.0.0.3").await;
    let yaml = allow_yaml(
        &[("a.test", a.port()), ("b.test", b.port())],
        &format!("{}{}", loopback_cidr(a.port()), loopback_cidr(b.port())),
    );
    let mut proxy = TestProxy::start(
        &yaml,
        &[
            ("a.test", "127.0.0.2"),
            ("b.test", "127.0.0.4"),
            ("c.test", "127.0.0.3"),
        ],
    )
    .await;
    let request = format!(
        "GET http://a.test:{pa}/1 HTTP/1.1\r\nHost: a.test\r\n\r\n\
         GET http://c.test:{pc}/2 HTTP/1.1\r\nHost: a.test\r\n\r\n\
         GET http://b.test:{pb}/3 HTTP/1.1\r\nHost: a.test\r\n\r\n\
         GET http://a.test:{pa}/4 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
        pa = a.port(),
        pb = b.port(),
        pc = canary.port()
    );
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut responses = Responses::new(stream);
    let first = responses.next().await;
    let second = responses.next().await;
    let third = responses.next().await;
    let fourth = responses.next().await;
    assert!(
        first.starts_with("HTTP/1.1 200") && first.contains("site-a /1"),
        "{first}"
    );
    assert_eq!(status(&second), 403, "{second}");
    assert!(
        third.starts_with("HTTP/1.1 200") && third.contains("site-b /3"),
        "{third}"
    );
    assert!(
        fourth.starts_with("HTTP/1.1 200") && fourth.contains("site-a /4"),
        "{fourth}"
    );
    assert_eq!(canary.connection_count().await, 0);
    let seen_a = a.received_text();
    assert!(!seen_a.contains("/2") && !seen_a.contains("/3"), "{seen_a}");
    assert_eq!(seen_a.matches("GET ").count(), 2, "{seen_a}");
    assert_eq!(b.received_text().matches("GET ").count(), 1);
    let records = [
        proxy.record().await,
        proxy.record().await,
        proxy.record().await,
        proxy.record().await,
    ];
    let mut outcomes: Vec<_> = records.iter().map(|r| (r.host.clone(), r.reason)).collect();
    outcomes.sort();
    assert_eq!(
        outcomes,
        vec![
            ("a.test".into(), Reason::Rule),
            ("a.test".into(), Reason::Rule),
            ("b.test".into(), Reason::Rule),
            ("c.test".into(), Reason::NotAllowed),
        ]
    );
}

async fn refused(
    request: &str,
    expected_status: u16,
    reason: Reason,
) -> egress_core::audit::AuditRecord {
    let canary = Site::canary("127.0.0.3").await;
    let yaml = allow_yaml(&[("a.test", 80), ("a.test", 443)], "");
    let mut proxy = TestProxy::start(&yaml, &[("a.test", "127.0.0.3")]).await;
    let response = exchange(proxy.addr, request.as_bytes()).await;
    assert_eq!(
        status(&response),
        expected_status,
        "{request:?} → {response}"
    );
    assert!(
        response
            .to_ascii_lowercase()
            .contains(&format!("x-egress-blocked: {reason}")),
        "{request:?} → {response}"
    );
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, reason),
        "{request:?}"
    );
    assert_eq!(canary.connection_count().await, 0);
    record
}

/// Refusals record what was asked for without its query or user information (they were
/// logged whole: `https://a.test/x?key=…`, `user:pw@a.test`).
#[tokio::test]
async fn malformed_and_unsupported_requests_get_400() {
    let record = refused(
        "GET /path?key=q1 HTTP/1.1\r\nHost: a.test\r\n\r\n",
        400,
        Reason::BadRequest,
    )
    .await;
    assert_eq!(record.host, "/path");
    let record = refused(
        "GET https://a.test/x?key=q2 HTTP/1.1\r\nHost: a.test\r\n\r\n",
        400,
        Reason::Unsupported,
    )
    .await;
    assert_eq!(record.host, "https://a.test");
    let record = refused(
        "GET ftp://u:pw@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
        400,
        Reason::Unsupported,
    )
    .await;
    assert_eq!(record.host, "ftp://a.test");
    let record = refused(
        "GET http://user:pw@a.test/?key=q3 HTTP/1.1\r\nHost: a.test\r\n\r\n",
        400,
        Reason::BadRequest,
    )
    .await;
    assert_eq!(record.host, "a.test");
    refused(
        "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
        400,
        Reason::Unsupported,
    )
    .await;
    let record = refused(
        "GET http://a..test/ HTTP/1.1\r\nHost: a\r\n\r\n",
        400,
        Reason::BadRequest,
    )
    .await;
    assert_eq!(record.host, "a..test");
}

#[tokio::test]
async fn ip_literals_in_any_spelling_are_refused() {
    for host in [
        "127.0.0.3",
        "127.1",
        "2130706435",
        "0x7f000003",
        "0177.0.0.3",
        "[::1]",
        "[::ffff:127.0.0.3]",
    ] {
        let record = refused(
            &format!("GET http://{host}/ HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"),
            403,
            Reason::IpLiteral,
        )
        .await;
        assert_eq!(record.addr, None, "{host}");
    }
}

#[tokio::test]
async fn allowed_names_resolving_to_private_addresses_are_refused() {
    for ip in [
        "127.0.0.3",
        "10.1.2.3",
        "169.254.169.254",
        "::ffff:127.0.0.3",
        "::1",
        "100.64.0.1",
    ] {
        let yaml = allow_yaml(&[("a.test", 80)], "");
        let mut proxy = TestProxy::start(&yaml, &[("a.test", ip)]).await;
        let response = exchange(
            proxy.addr,
            b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(status(&response), 403, "{ip}: {response}");
        assert!(
            response
                .to_ascii_lowercase()
                .contains("x-egress-blocked: private_address")
        );
        // The answer says why, once, and never where the name points.
        let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
        assert_eq!(
            body,
            "egress-sandbox: a.test:80 blocked (private_address): private, loopback and \
             link-local addresses are refused; the name resolves to such an address\n",
            "{ip}"
        );
        let record = proxy.record().await;
        assert_eq!(
            (record.decision, record.reason),
            (Outcome::Blocked, Reason::PrivateAddress),
            "{ip}"
        );
        assert_eq!(record.addrs, [ip], "the record names the refused address");
    }
}

/// A name whose every address is refused: the record names them all (for the operator),
/// the answer none (the sandbox learns nothing about the network behind the proxy).
#[tokio::test]
async fn a_private_address_record_names_every_refused_address_and_the_answer_none() {
    let yaml = allow_yaml(&[("inside.test", 80)], "");
    let mut proxy = TestProxy::start(
        &yaml,
        &[("inside.test", "10.20.30.40"), ("inside.test", "fd00::7")],
    )
    .await;
    let response = exchange(
        proxy.addr,
        b"GET http://inside.test/ HTTP/1.1\r\nHost: inside.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status(&response), 403, "{response}");
    assert!(
        !response.contains("10.20.30.40") && !response.contains("fd00"),
        "{response}"
    );
    let record = proxy.record().await;
    assert_eq!(record.reason, Reason::PrivateAddress);
    assert_eq!(record.addr, None);
    assert_eq!(record.addrs, ["10.20.30.40", "fd00::7"]);
    let line = record.to_line();
    assert!(
        line.contains(r#""addr":null,"addrs":["10.20.30.40","fd00::7"]"#),
        "{line}"
    );
}

#[tokio::test]
async fn report_mode_lets_unlisted_hosts_through_as_would_block_but_keeps_the_floor() {
    let site = Site::http("127.0.0.2", "site-a").await;
    let yaml = format!(
        "version: 1\nname: audit-only\nmode: report\nallow:\n{}",
        loopback_cidr(site.port())
    );
    let mut proxy = TestProxy::start(
        &yaml,
        &[
            ("other.test", "127.0.0.2"),
            ("meta.test", "169.254.169.254"),
        ],
    )
    .await;
    let request = format!(
        "GET http://other.test:{}/ HTTP/1.1\r\nConnection: close\r\n\r\n",
        site.port()
    );
    let response = exchange(proxy.addr, request.as_bytes()).await;
    assert_eq!(status(&response), 200, "{response}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::WouldBlock, Reason::NotAllowed)
    );
    let response = exchange(
        proxy.addr,
        b"GET http://meta.test/ HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status(&response), 403, "{response}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::PrivateAddress)
    );
}

#[tokio::test]
async fn unreachable_and_unresolvable_upstreams_are_failures_not_refusals() {
    let closed = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let yaml = allow_yaml(
        &[("down.test", closed_port), ("nowhere.test", 80)],
        &loopback_cidr(closed_port),
    );
    let mut proxy = TestProxy::start(&yaml, &[("down.test", "127.0.0.2")]).await;
    let response = exchange(
        proxy.addr,
        format!("GET http://down.test:{closed_port}/ HTTP/1.1\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert_eq!(status(&response), 502, "{response}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Failed, Reason::ConnectFailed)
    );
    // No DNS upstream in tests: an unpinned allowed name fails to resolve.
    let response = exchange(
        proxy.addr,
        b"GET http://nowhere.test/ HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status(&response), 502, "{response}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Failed, Reason::ResolveFailed)
    );
}

#[tokio::test]
async fn a_silent_upstream_is_a_504_timeout() {
    // A listener whose backlog is full drops further SYNs, so connecting hangs — on loopback.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.5:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(stream)) =
            tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
        {
            fillers.push(stream);
        }
    }
    let yaml = allow_yaml(&[("slow.test", addr.port())], &loopback_cidr(addr.port()));
    let mut proxy = TestProxy::start_with(&yaml, &[("slow.test", "127.0.0.5")], |config| {
        config.limits.connect_timeout = Duration::from_millis(300);
    })
    .await;
    let response = exchange(
        proxy.addr,
        format!(
            "GET http://slow.test:{}/ HTTP/1.1\r\nConnection: close\r\n\r\n",
            addr.port()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(status(&response), 504, "{response}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Failed, Reason::Timeout)
    );
    drop(listener);
}

#[tokio::test]
async fn oversize_and_slow_heads_are_cut_off_and_recorded() {
    let yaml = allow_yaml(&[("a.test", 80)], "");
    let mut proxy = TestProxy::start_with(&yaml, &[], |config| {
        config.limits.max_head_bytes = 16 * 1024;
        config.limits.head_timeout = Duration::from_millis(300);
    })
    .await;
    let big = format!(
        "GET http://a.test/ HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "x".repeat(32 * 1024)
    );
    let response = exchange(proxy.addr, big.as_bytes()).await;
    assert_eq!(status(&response), 431, "{response}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::BadRequest)
    );

    let mut slow = TcpStream::connect(proxy.addr).await.unwrap();
    slow.write_all(b"GET http://a.test/ HTTP/1.1\r\nX-Slow: ")
        .await
        .unwrap();
    let rest = read_to_close(&mut slow).await;
    assert!(!rest.contains("200"), "{rest}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::BadRequest)
    );
}

#[tokio::test]
async fn connections_over_the_limit_get_503_and_one_limit_record() {
    let yaml = allow_yaml(&[("a.test", 80)], "");
    let mut proxy = TestProxy::start_with(&yaml, &[], |config| {
        config.limits.max_connections = 1;
    })
    .await;
    // The accept queue is first in, first out: the holder, connected first, is accepted
    // first and takes the only place (it then waits for a head that never comes).
    let _holder = TcpStream::connect(proxy.addr).await.unwrap();
    let response = exchange(proxy.addr, b"GET http://a.test/ HTTP/1.1\r\n\r\n").await;
    assert_eq!(status(&response), 503, "{response}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::Limit)
    );
    assert!(proxy.records_now().await.is_empty());
}

#[tokio::test]
async fn content_length_with_transfer_encoding_cannot_smuggle_a_request() {
    let a = Site::http("127.0.0.2", "site-a").await;
    let canary = Site::canary("127.0.0.3").await;
    let yaml = allow_yaml(&[("a.test", a.port())], &loopback_cidr(a.port()));
    let mut proxy =
        TestProxy::start(&yaml, &[("a.test", "127.0.0.2"), ("c.test", "127.0.0.3")]).await;
    let smuggled = format!(
        "GET http://c.test:{}/ HTTP/1.1\r\nHost: c.test\r\n\r\n",
        canary.port()
    );
    let request = format!(
        "POST http://a.test:{}/ HTTP/1.1\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}",
        a.port(),
        5 + smuggled.len()
    );
    let response = exchange(proxy.addr, request.as_bytes()).await;
    assert!(!response.contains("c.test"), "{response}");
    assert_eq!(canary.connection_count().await, 0);
    assert!(
        !a.received_text().contains("c.test"),
        "{}",
        a.received_text()
    );
    let records = proxy.records_now().await;
    assert!(
        records
            .iter()
            .all(|r| r.host != "c.test" || r.decision == Outcome::Blocked)
    );
}

#[tokio::test]
async fn deny_rules_beat_allow_rules() {
    let canary = Site::canary("127.0.0.3").await;
    let port = canary.port();
    let yaml = format!(
        "version: 1\nname: test\nallow:\n  - host: \"*.example.test\"\n    ports: [{port}]\n{}deny:\n  - host: gist.example.test\n",
        loopback_cidr(port)
    );
    let mut proxy = TestProxy::start(&yaml, &[("gist.example.test", "127.0.0.3")]).await;
    let response = exchange(
        proxy.addr,
        format!("GET http://gist.example.test:{port}/ HTTP/1.1\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert_eq!(status(&response), 403, "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("x-egress-blocked: denied")
    );
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::Denied)
    );
    assert_eq!(record.rule.as_deref(), Some("test:deny[0]"));
    assert_eq!(canary.connection_count().await, 0);
}

#[tokio::test]
async fn idle_upstream_connections_are_reused_only_for_the_same_target() {
    let a = Site::http("127.0.0.2", "site-a").await;
    let b = Site::http("127.0.0.4", "site-b").await;
    let yaml = allow_yaml(
        &[("a.test", a.port()), ("b.test", b.port())],
        &format!("{}{}", loopback_cidr(a.port()), loopback_cidr(b.port())),
    );
    let mut proxy =
        TestProxy::start(&yaml, &[("a.test", "127.0.0.2"), ("b.test", "127.0.0.4")]).await;
    for (host, port, path) in [
        ("a.test", a.port(), "/first"),
        ("b.test", b.port(), "/second"),
        ("a.test", a.port(), "/third"),
    ] {
        let request =
            format!("GET http://{host}:{port}{path} HTTP/1.1\r\nConnection: close\r\n\r\n");
        let response = exchange(proxy.addr, request.as_bytes()).await;
        assert!(
            response.contains(&format!(" {path} {host}:{port}")),
            "{response}"
        );
        let record = proxy.record().await;
        assert_eq!((record.host.as_str(), record.reason), (host, Reason::Rule));
    }
    assert_eq!(
        a.connection_count().await,
        1,
        "the second request to a.test reused the first connection"
    );
    assert_eq!(b.connection_count().await, 1);
    assert!(!a.received_text().contains("/second"));
    assert!(!b.received_text().contains("/first") && !b.received_text().contains("/third"));
}
