//! CONNECT tunnels and the SNI check, on loopback with raw bytes.

mod common;

use std::time::Duration;

use common::client_hello::client_hello;
use common::{HANG, Responses, Site, TestProxy, allow_yaml, exchange, status};
use egress_core::audit::{Kind, Outcome};
use egress_core::policy::Reason;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn loopback(port: u16) -> String {
    format!("  - cidr: 127.0.0.0/8\n    ports: [{port}]\n")
}

/// A policy allowing `tunnel.test` on the echo site's port, with that port a TLS port.
fn tls_policy(port: u16, sni: &str) -> String {
    format!(
        "{}tls:\n  ports: [{port}]\n  sni: {sni}\n",
        allow_yaml(&[("tunnel.test", port)], &loopback(port))
    )
}

/// Opens a tunnel and returns the stream after the proxy's 200.
async fn open_tunnel(proxy: std::net::SocketAddr, authority: &str) -> TcpStream {
    let stream = TcpStream::connect(proxy).await.unwrap();
    let mut responses = Responses::new(stream);
    responses
        .stream
        .write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let answer = responses.next().await;
    assert_eq!(status(&answer), 200, "{answer}");
    responses.stream
}

async fn read_exactly(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buffer = vec![0u8; n];
    tokio::time::timeout(HANG, stream.read_exact(&mut buffer))
        .await
        .expect("echo in time")
        .expect("echo");
    buffer
}

#[tokio::test]
async fn allowed_tunnel_relays_both_ways_and_records_bytes_on_close() {
    let echo = Site::echo("127.0.0.2").await;
    let yaml = allow_yaml(&[("tunnel.test", echo.port())], &loopback(echo.port()));
    let mut proxy = TestProxy::start(&yaml, &[("tunnel.test", "127.0.0.2")]).await;
    let mut tunnel = open_tunnel(proxy.addr, &format!("Tunnel.Test.:{}", echo.port())).await;
    tunnel.write_all(b"hello through the tunnel").await.unwrap();
    assert_eq!(
        read_exactly(&mut tunnel, 24).await,
        b"hello through the tunnel"
    );
    drop(tunnel);
    let record = proxy.record().await;
    assert_eq!(record.kind, Kind::Connect);
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Allowed, Reason::Rule)
    );
    assert_eq!(record.host, "tunnel.test");
    assert_eq!(record.addr.as_deref(), Some("127.0.0.2"));
    assert_eq!((record.bytes_up, record.bytes_down), (24, 24));
}

#[tokio::test]
async fn refused_connect_gets_403_naming_host_and_reason() {
    let canary = Site::canary("127.0.0.3").await;
    let yaml = allow_yaml(&[("tunnel.test", 443)], "");
    let mut proxy = TestProxy::start(
        &yaml,
        &[("other.test", "127.0.0.3"), ("tunnel.test", "127.0.0.3")],
    )
    .await;
    let port = canary.port();
    for (authority, reason) in [
        (format!("other.test:{port}"), Reason::NotAllowed),
        (format!("tunnel.test:{port}"), Reason::PortNotAllowed),
        (format!("127.0.0.3:{port}"), Reason::IpLiteral),
        (format!("0x7f000003:{port}"), Reason::IpLiteral),
    ] {
        let response = exchange(
            proxy.addr,
            format!(
                "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await;
        assert_eq!(status(&response), 403, "{authority}: {response}");
        assert!(
            response.contains(&format!("X-Egress-Blocked: {reason}"))
                || response
                    .to_ascii_lowercase()
                    .contains(&format!("x-egress-blocked: {reason}")),
            "{response}"
        );
        assert!(response.contains(&reason.to_string()), "{response}");
        let record = proxy.record().await;
        assert_eq!(
            (record.decision, record.reason),
            (Outcome::Blocked, reason),
            "{authority}"
        );
    }
    let response = exchange(
        proxy.addr,
        b"CONNECT tunnel.test HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status(&response), 400, "{response}");
    assert_eq!(proxy.record().await.reason, Reason::BadRequest);
    assert_eq!(canary.connection_count().await, 0);
}

#[tokio::test]
async fn matching_sni_is_replayed_upstream() {
    let echo = Site::echo("127.0.0.2").await;
    let mut proxy = TestProxy::start(
        &tls_policy(echo.port(), "strict"),
        &[("tunnel.test", "127.0.0.2")],
    )
    .await;
    let hello = client_hello(Some("TUNNEL.test"), false);
    let mut tunnel = open_tunnel(proxy.addr, &format!("tunnel.test:{}", echo.port())).await;
    tunnel.write_all(&hello).await.unwrap();
    assert_eq!(read_exactly(&mut tunnel, hello.len()).await, hello);
    drop(tunnel);
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Allowed, Reason::Rule)
    );
    assert_eq!(record.bytes_up, hello.len() as u64);
    assert_eq!(echo.received.lock().unwrap().as_slice(), hello.as_slice());
}

#[tokio::test]
async fn hello_sent_with_the_connect_head_is_checked_too() {
    let echo = Site::echo("127.0.0.2").await;
    let mut proxy = TestProxy::start(
        &tls_policy(echo.port(), "strict"),
        &[("tunnel.test", "127.0.0.2")],
    )
    .await;
    let hello = client_hello(Some("tunnel.test"), false);
    let mut request = format!("CONNECT tunnel.test:{} HTTP/1.1\r\n\r\n", echo.port()).into_bytes();
    request.extend(&hello);
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let mut responses = Responses::new(stream);
    responses.stream.write_all(&request).await.unwrap();
    let answer = responses.next().await;
    assert_eq!(status(&answer), 200, "{answer}");
    let mut tunnel = responses.stream;
    assert_eq!(read_exactly(&mut tunnel, hello.len()).await, hello);
    drop(tunnel);
    assert_eq!(proxy.record().await.reason, Reason::Rule);
}

async fn assert_sni_refused(first_bytes: Vec<u8>) {
    let echo = Site::echo("127.0.0.2").await;
    let mut proxy = TestProxy::start(
        &tls_policy(echo.port(), "strict"),
        &[("tunnel.test", "127.0.0.2")],
    )
    .await;
    let mut tunnel = open_tunnel(proxy.addr, &format!("tunnel.test:{}", echo.port())).await;
    tunnel.write_all(&first_bytes).await.unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(HANG, tunnel.read_to_end(&mut rest)).await;
    assert!(rest.is_empty(), "the tunnel answered: {rest:?}");
    let record = proxy.record().await;
    assert_eq!(record.kind, Kind::Connect);
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::SniMismatch)
    );
    assert_eq!(record.host, "tunnel.test");
    // The upstream was connected (so a dead one is an honest 502) but never got a byte:
    // waited until the proxy closed that connection and the upstream read it to its end.
    assert!(echo.settled_received().await.is_empty());
    assert_eq!(echo.connection_count().await, 1);
}

#[tokio::test]
async fn mismatched_sni_closes_the_tunnel_before_upstream_sees_a_byte() {
    assert_sni_refused(client_hello(Some("evil.test"), false)).await;
}

#[tokio::test]
async fn missing_sni_for_a_named_host_is_refused() {
    assert_sni_refused(client_hello(None, false)).await;
}

#[tokio::test]
async fn encrypted_client_hello_is_refused() {
    assert_sni_refused(client_hello(Some("tunnel.test"), true)).await;
}

#[tokio::test]
async fn plain_bytes_on_a_tls_port_are_refused() {
    assert_sni_refused(b"GET / HTTP/1.1\r\nHost: tunnel.test\r\n\r\n".to_vec()).await;
}

#[tokio::test]
async fn half_a_client_hello_then_close_is_a_refusal_not_an_allowed_tunnel() {
    half_a_client_hello_then(Leave::Close).await;
}

/// A reset instead of a close (SO_LINGER 0) was a read error that kept the record `allowed`.
#[tokio::test]
async fn half_a_client_hello_then_a_reset_is_a_refusal_not_an_allowed_tunnel() {
    half_a_client_hello_then(Leave::Reset).await;
}

enum Leave {
    Close,
    Reset,
}

async fn half_a_client_hello_then(leave: Leave) {
    let echo = Site::echo("127.0.0.2").await;
    let mut proxy = TestProxy::start(
        &tls_policy(echo.port(), "strict"),
        &[("tunnel.test", "127.0.0.2")],
    )
    .await;
    let mut tunnel = open_tunnel(proxy.addr, &format!("tunnel.test:{}", echo.port())).await;
    let mut hello = client_hello(Some("tunnel.test"), false);
    hello.truncate(hello.len() / 2);
    tunnel.write_all(&hello).await.unwrap();
    if let Leave::Reset = leave {
        // The bytes already sent stay readable before the reset is (Linux).
        tunnel.set_zero_linger().unwrap();
    }
    drop(tunnel);
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::SniMismatch)
    );
    assert_eq!(record.bytes_up, 0);
    assert!(echo.settled_received().await.is_empty());
    assert_eq!(echo.connection_count().await, 1);
}

#[tokio::test]
async fn a_silent_client_on_a_tls_port_is_cut_off() {
    let echo = Site::echo("127.0.0.2").await;
    let mut proxy = TestProxy::start_with(
        &tls_policy(echo.port(), "strict"),
        &[("tunnel.test", "127.0.0.2")],
        |config| config.limits.client_hello_timeout = Duration::from_millis(200),
    )
    .await;
    let mut tunnel = open_tunnel(proxy.addr, &format!("tunnel.test:{}", echo.port())).await;
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(HANG, tunnel.read_to_end(&mut rest)).await;
    assert_eq!(proxy.record().await.reason, Reason::SniMismatch);
}

#[tokio::test]
async fn sni_off_lets_any_bytes_through() {
    let echo = Site::echo("127.0.0.2").await;
    let mut proxy = TestProxy::start(
        &tls_policy(echo.port(), "off"),
        &[("tunnel.test", "127.0.0.2")],
    )
    .await;
    let mut tunnel = open_tunnel(proxy.addr, &format!("tunnel.test:{}", echo.port())).await;
    tunnel.write_all(b"not tls").await.unwrap();
    assert_eq!(read_exactly(&mut tunnel, 7).await, b"not tls");
    drop(tunnel);
    assert_eq!(proxy.record().await.reason, Reason::Rule);
}

#[tokio::test]
async fn ip_literal_allowed_by_cidr_needs_no_sni() {
    let echo = Site::echo("127.0.0.2").await;
    let port = echo.port();
    let yaml = format!(
        "version: 1\nallow:\n{}tls:\n  ports: [{port}]\n",
        loopback(port)
    );
    let mut proxy = TestProxy::start(&yaml, &[]).await;
    let hello = client_hello(None, false);
    let mut tunnel = open_tunnel(proxy.addr, &format!("127.0.0.2:{port}")).await;
    tunnel.write_all(&hello).await.unwrap();
    assert_eq!(read_exactly(&mut tunnel, hello.len()).await, hello);
    drop(tunnel);
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Allowed, Reason::Rule)
    );
    assert_eq!(record.host, "127.0.0.2");
}

#[tokio::test]
async fn shutdown_closes_open_tunnels_and_records_their_bytes() {
    let echo = Site::echo("127.0.0.2").await;
    let yaml = allow_yaml(&[("tunnel.test", echo.port())], &loopback(echo.port()));
    let mut proxy = TestProxy::start(&yaml, &[("tunnel.test", "127.0.0.2")]).await;
    let mut tunnel = open_tunnel(proxy.addr, &format!("tunnel.test:{}", echo.port())).await;
    tunnel.write_all(b"12345").await.unwrap();
    assert_eq!(read_exactly(&mut tunnel, 5).await, b"12345");
    let started = std::time::Instant::now();
    proxy.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "shutdown took {:?}",
        started.elapsed()
    );
    let record = proxy.record().await;
    assert_eq!((record.bytes_up, record.bytes_down), (5, 5));
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(HANG, tunnel.read_to_end(&mut rest)).await;
    assert!(rest.is_empty());
}

/// Open tunnels hold their places under the connection limit until they close: hyper lets
/// go of the HTTP connection when it hands it over as a tunnel, and that must not free the
/// place.
#[tokio::test]
async fn open_tunnels_count_toward_the_connection_limit_until_they_close() {
    const LIMIT: usize = 3;
    let echo = Site::echo("127.0.0.2").await;
    let yaml = allow_yaml(&[("tunnel.test", echo.port())], &loopback(echo.port()));
    let mut proxy = TestProxy::start_with(&yaml, &[("tunnel.test", "127.0.0.2")], |config| {
        config.limits.max_connections = LIMIT;
    })
    .await;
    let authority = format!("tunnel.test:{}", echo.port());
    let mut tunnels = Vec::new();
    for n in 0..LIMIT {
        let mut tunnel = open_tunnel(proxy.addr, &authority).await;
        // Really open: bytes go through and come back.
        let greeting = format!("tunnel {n}");
        tunnel.write_all(greeting.as_bytes()).await.unwrap();
        assert_eq!(
            read_exactly(&mut tunnel, greeting.len()).await,
            greeting.as_bytes()
        );
        tunnels.push(tunnel);
    }
    let connect = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    let over = exchange(proxy.addr, connect.as_bytes()).await;
    assert_eq!(status(&over), 503, "{over}");
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::Limit)
    );
    assert!(
        proxy.records_now().await.is_empty(),
        "one record for the refused connection, none for the open tunnels"
    );

    // One tunnel closes; its record says so, and its place is free again.
    drop(tunnels.pop());
    let closed = proxy.record().await;
    assert_eq!(closed.kind, Kind::Connect);
    assert_eq!(
        (closed.decision, closed.reason),
        (Outcome::Allowed, Reason::Rule)
    );
    let mut again = open_tunnel(proxy.addr, &authority).await;
    again.write_all(b"after a close").await.unwrap();
    assert_eq!(read_exactly(&mut again, 13).await, b"after a close");
    // And the limit still holds with the new tunnel open.
    let over = exchange(proxy.addr, connect.as_bytes()).await;
    assert_eq!(status(&over), 503, "{over}");
    assert_eq!(proxy.record().await.reason, Reason::Limit);
}
