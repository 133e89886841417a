//! The DNS responder (UDP and TCP) and the transparent listeners it leads programs to.

mod common;

use std::net::{Ipv4Addr, SocketAddr};

use common::client_hello::client_hello;
use common::{HANG, Responses, Site, TestProxy, allow_yaml, read_to_close, status};
use egress_core::audit::{Kind, Outcome};
use egress_core::policy::Reason;
use egress_core::secret::{Secret, SecretValue};
use egress_proxy::CredentialConfig;
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

async fn dns_proxy(yaml: &str) -> (TestProxy, SocketAddr) {
    let proxy = TestProxy::start_with(yaml, &[], |config| {
        config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
        config.dns_answer = Some("10.9.8.7".parse().unwrap());
    })
    .await;
    let dns = proxy.running().local_addrs().dns.expect("DNS bound");
    (proxy, dns)
}

fn query(name: &str, kind: RecordType) -> Vec<u8> {
    let mut message = Message::query();
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
    message.to_vec().unwrap()
}

async fn ask_udp(server: SocketAddr, bytes: &[u8]) -> Message {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(bytes, server).await.unwrap();
    let mut buffer = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(HANG, socket.recv_from(&mut buffer))
        .await
        .expect("a DNS answer in time")
        .unwrap();
    Message::from_vec(&buffer[..n]).unwrap()
}

async fn ask_tcp(server: SocketAddr, bytes: &[u8]) -> Message {
    let mut stream = TcpStream::connect(server).await.unwrap();
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend(bytes);
    stream.write_all(&framed).await.unwrap();
    let len = tokio::time::timeout(HANG, stream.read_u16())
        .await
        .unwrap()
        .unwrap();
    let mut answer = vec![0u8; usize::from(len)];
    stream.read_exact(&mut answer).await.unwrap();
    Message::from_vec(&answer).unwrap()
}

fn a_records(message: &Message) -> Vec<Ipv4Addr> {
    message
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

/// Each allowed name is recorded at its first lookup; a repeated lookup by the same client
/// (another type, another transport) is answered the same and not recorded again.
#[tokio::test]
async fn allowed_names_are_answered_with_the_proxy_address_over_udp_and_tcp() {
    let yaml = allow_yaml(&[("api.example.com", 443), ("www.example.com", 443)], "");
    let (mut proxy, dns) = dns_proxy(&yaml).await;
    for (answer, name) in [
        (
            ask_udp(dns, &query("API.example.com.", RecordType::A)).await,
            "api.example.com",
        ),
        (
            ask_tcp(dns, &query("www.example.com.", RecordType::A)).await,
            "www.example.com",
        ),
    ] {
        assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
        assert_eq!(a_records(&answer), vec![Ipv4Addr::new(10, 9, 8, 7)]);
        let record = proxy.record().await;
        assert_eq!(record.kind, Kind::Dns);
        assert_eq!(record.port, None);
        assert_eq!(record.host, name);
        assert_eq!(
            (record.decision, record.reason),
            (Outcome::Allowed, Reason::Rule)
        );
    }
    let answer = ask_tcp(dns, &query("api.example.com.", RecordType::A)).await;
    assert_eq!(a_records(&answer), vec![Ipv4Addr::new(10, 9, 8, 7)]);
    let answer = ask_udp(dns, &query("api.example.com.", RecordType::AAAA)).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    assert!(answer.answers.is_empty());
    ask_udp(dns, &query("evil.test.", RecordType::A)).await;
    assert_eq!(
        proxy.record().await.host,
        "evil.test",
        "the repeats got no record"
    );
}

#[tokio::test]
async fn other_names_get_nxdomain_and_a_blocked_record() {
    let (mut proxy, dns) = dns_proxy(&allow_yaml(&[("api.example.com", 443)], "")).await;
    for answer in [
        ask_udp(dns, &query("exfil-abc123.evil.test.", RecordType::A)).await,
        ask_tcp(dns, &query("exfil-abc123.evil.test.", RecordType::TXT)).await,
    ] {
        assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
        assert!(answer.answers.is_empty());
        let record = proxy.record().await;
        assert_eq!(record.host, "exfil-abc123.evil.test");
        assert_eq!(
            (record.decision, record.reason),
            (Outcome::Blocked, Reason::NotAllowed)
        );
    }
}

/// The sandbox's own host name (its resolv.conf names the proxy): NOERROR with no records
/// for every type, and no audit record; the same name with one more label, and every other
/// name, are judged and recorded as before.
#[tokio::test]
async fn the_sandboxs_own_host_name_is_answered_empty_and_not_recorded() {
    let own = egress_core::target::HostName::parse("sandbox-1a2b3c").unwrap();
    let mut proxy = TestProxy::start_with(
        &allow_yaml(&[("api.example.com", 443)], ""),
        &[],
        |config| {
            config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
            config.dns_answer = Some("10.9.8.7".parse().unwrap());
            config.sandbox_hostname = Some(own.clone());
        },
    )
    .await;
    let dns = proxy.running().local_addrs().dns.expect("DNS bound");
    for answer in [
        ask_udp(dns, &query("sandbox-1a2b3c.", RecordType::AAAA)).await,
        ask_udp(dns, &query("SANDBOX-1a2b3c.", RecordType::A)).await,
        ask_tcp(dns, &query("sandbox-1a2b3c.", RecordType::AAAA)).await,
    ] {
        assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
        assert!(answer.answers.is_empty(), "{answer:?}");
    }
    let longer = ask_udp(dns, &query("sandbox-1a2b3c.evil.test.", RecordType::A)).await;
    assert_eq!(longer.metadata.response_code, ResponseCode::NXDomain);
    let records = proxy.shutdown_and_records().await;
    let hosts: Vec<&str> = records
        .iter()
        .filter(|record| record.kind == Kind::Dns)
        .map(|record| record.host.as_str())
        .collect();
    assert_eq!(hosts, ["sandbox-1a2b3c.evil.test"], "{records:?}");
}

/// The tripwire at the DNS door: a name carrying a run placeholder (any case) is refused
/// as `credential_misuse`, even under an allowed wildcard, as the CONNECT door does.
#[tokio::test]
async fn a_name_carrying_a_placeholder_is_credential_misuse() {
    const PLACEHOLDER: &str = "egress-sandbox-placeholder-0123456789abcdef0123456789abcdef";
    let yaml = format!(
        "{}  - host: \"*.wild.test\"\ncredentials:\n  - host: api.example.com\n    secret: API_KEY\n",
        allow_yaml(&[("api.example.com", 443)], "")
    );
    let mut proxy = TestProxy::start_with(&yaml, &[], |config| {
        config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
        config.dns_answer = Some("10.9.8.7".parse().unwrap());
        config.credentials = CredentialConfig::new(vec![Secret {
            name: "API_KEY".into(),
            value: SecretValue::new("sk-real-key".into()),
            placeholder: PLACEHOLDER.into(),
        }]);
    })
    .await;
    let dns = proxy.running().local_addrs().dns.expect("DNS bound");
    let upper = PLACEHOLDER.to_ascii_uppercase();
    for name in [
        format!("{PLACEHOLDER}.wild.test."),
        format!("{upper}.evil.test."),
    ] {
        let answer = ask_udp(dns, &query(&name, RecordType::A)).await;
        assert_eq!(
            answer.metadata.response_code,
            ResponseCode::NXDomain,
            "{name}"
        );
        assert!(answer.answers.is_empty(), "{name}");
        let record = proxy.record().await;
        assert_eq!(
            (record.kind, record.decision, record.reason),
            (Kind::Dns, Outcome::Blocked, Reason::CredentialMisuse),
            "{name}"
        );
    }
    // Without the placeholder the wildcard still answers.
    let answer = ask_udp(dns, &query("api.wild.test.", RecordType::A)).await;
    assert_eq!(
        a_records(&answer),
        ["10.9.8.7".parse::<Ipv4Addr>().unwrap()]
    );
}

#[tokio::test]
async fn malformed_queries_get_formerr_and_a_bad_request_record() {
    let (mut proxy, dns) = dns_proxy(&allow_yaml(&[("api.example.com", 443)], "")).await;
    let mut garbage = query("api.example.com.", RecordType::A);
    garbage.truncate(20);
    let answer = ask_udp(dns, &garbage).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::FormErr);
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::BadRequest)
    );
}

#[tokio::test]
async fn hostile_query_names_are_escaped_into_one_log_line() {
    let (mut proxy, dns) = dns_proxy(&allow_yaml(&[("api.example.com", 443)], "")).await;
    let hostile: &[u8] = b"a\"b\n{\"v\":1}\x01\xff";
    let name = Name::from_labels([hostile, b"test".as_slice()]).unwrap();
    let mut message = Message::query();
    message.add_query(Query::query(name, RecordType::A));
    let answer = ask_udp(dns, &message.to_vec().unwrap()).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
    let record = proxy.record().await;
    assert_eq!(record.decision, Outcome::Blocked);
    let line = record.to_line();
    assert!(!line.contains('\n'), "{line}");
    assert!(
        line.contains(r#""host":"a\"b\\x0a{\"v\":1}\\x01\\xff.test""#),
        "{line}"
    );
}

/// One wire label `api.example.com` is not the allowed name api.example.com: it is refused
/// and recorded with its dots escaped (it was recorded as `api.example.com`, blocked, so the
/// log seemed to show the allowed name refused). A query with two questions gets FormErr and
/// its record names the first (it named none).
#[tokio::test]
async fn a_dot_inside_a_label_is_escaped_in_the_record_and_several_questions_name_the_first() {
    let (mut proxy, dns) = dns_proxy(&allow_yaml(&[("api.example.com", 443)], "")).await;
    let name = Name::from_labels([b"api.example.com".as_slice()]).unwrap();
    let mut message = Message::query();
    message.add_query(Query::query(name, RecordType::A));
    let answer = ask_udp(dns, &message.to_vec().unwrap()).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Blocked, Reason::BadRequest)
    );
    assert_eq!(record.host, r"api\.example\.com");

    let mut message = Message::query();
    for name in ["evil.test.", "api.example.com."] {
        message.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    }
    let answer = ask_udp(dns, &message.to_vec().unwrap()).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::FormErr);
    assert!(answer.answers.is_empty());
    let record = proxy.record().await;
    assert_eq!(record.host, "evil.test");
    assert_eq!(record.decision, Outcome::Blocked);
}

/// A transparent listener on 127.0.0.1:P in front of a site on 127.0.0.2:P (same port, as
/// a real site's :443 or :80 behind the proxy's own address).
async fn transparent(site: &Site, yaml: &str) -> (TestProxy, SocketAddr) {
    let port = site.port();
    let proxy = TestProxy::start_with(
        yaml,
        &[("site.test", "127.0.0.2"), ("evil.test", "127.0.0.3")],
        |config| {
            config.transparent_listen = vec![SocketAddr::from(([127, 0, 0, 1], port))];
        },
    )
    .await;
    let listener = proxy.running().local_addrs().transparent[0];
    (proxy, listener)
}

fn site_policy(port: u16) -> String {
    allow_yaml(
        &[("site.test", port)],
        &format!("  - cidr: 127.0.0.2/32\n    ports: [{port}]\n"),
    )
}

#[tokio::test]
async fn transparent_tls_is_routed_by_sni() {
    let echo = Site::echo("127.0.0.2").await;
    let canary = Site::canary("127.0.0.3").await;
    let (mut proxy, listener) = transparent(&echo, &site_policy(echo.port())).await;
    let hello = client_hello(Some("site.test"), false);
    let mut stream = TcpStream::connect(listener).await.unwrap();
    stream.write_all(&hello).await.unwrap();
    let mut back = vec![0u8; hello.len()];
    tokio::time::timeout(HANG, stream.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, hello);
    drop(stream);
    let record = proxy.record().await;
    assert_eq!(record.kind, Kind::Tls);
    assert_eq!(record.host, "site.test");
    assert_eq!(record.port, Some(echo.port()));
    assert_eq!(
        (record.decision, record.reason),
        (Outcome::Allowed, Reason::Rule)
    );

    let mut stream = TcpStream::connect(listener).await.unwrap();
    stream
        .write_all(&client_hello(Some("evil.test"), false))
        .await
        .unwrap();
    assert!(read_to_close(&mut stream).await.is_empty());
    let record = proxy.record().await;
    assert_eq!(
        (record.kind, record.decision, record.reason),
        (Kind::Tls, Outcome::Blocked, Reason::NotAllowed)
    );
    assert_eq!(canary.connection_count().await, 0);
}

#[tokio::test]
async fn transparent_http_is_routed_by_host() {
    let site = Site::http("127.0.0.2", "site").await;
    let (mut proxy, listener) = transparent(&site, &site_policy(site.port())).await;
    let stream = TcpStream::connect(listener).await.unwrap();
    let mut responses = Responses::new(stream);
    responses
        .stream
        .write_all(
            b"GET /x HTTP/1.1\r\nHost: site.test\r\n\r\nGET /y HTTP/1.1\r\nHost: evil.test\r\n\r\n",
        )
        .await
        .unwrap();
    let first = responses.next().await;
    assert!(
        first.ends_with(&format!("site /x site.test:{}", site.port())),
        "{first}"
    );
    let second = responses.next().await;
    assert_eq!(status(&second), 403, "{second}");
    assert!(!site.received_text().contains("/y"));
    let mut records = [proxy.record().await, proxy.record().await];
    records.sort_by_key(|r| r.host.clone());
    assert_eq!(
        (records[0].host.as_str(), records[0].reason),
        ("evil.test", Reason::NotAllowed)
    );
    assert_eq!(
        (records[1].host.as_str(), records[1].kind, records[1].reason),
        ("site.test", Kind::Http, Reason::Rule)
    );
}

#[tokio::test]
async fn transparent_host_headers_with_quotes_are_logged_escaped() {
    let site = Site::http("127.0.0.2", "site").await;
    let (mut proxy, listener) = transparent(&site, &site_policy(site.port())).await;
    let mut stream = TcpStream::connect(listener).await.unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: \"quoted\"\t\xffhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let response = read_to_close(&mut stream).await;
    assert_eq!(status(&response), 400, "{response}");
    let line = proxy.record().await.to_line();
    assert!(
        line.contains(r#""host":"\"quoted\"\\x09\\xffhost""#),
        "{line}"
    );
}

#[tokio::test]
async fn other_protocols_on_transparent_ports_are_closed_as_unsupported() {
    let site = Site::echo("127.0.0.2").await;
    let (mut proxy, listener) = transparent(&site, &site_policy(site.port())).await;
    let mut stream = TcpStream::connect(listener).await.unwrap();
    stream.write_all(b"\x00\x01binary").await.unwrap();
    assert!(read_to_close(&mut stream).await.is_empty());
    let record = proxy.record().await;
    assert_eq!(
        (record.kind, record.decision, record.reason),
        (Kind::Tcp, Outcome::Blocked, Reason::Unsupported)
    );
    assert_eq!(site.connection_count().await, 0);
}

#[tokio::test]
async fn answers_are_never_answered() {
    let (mut proxy, dns) = dns_proxy(&allow_yaml(&[("api.example.com", 443)], "")).await;
    let mut bounced = Message::response(7, hickory_proto::op::OpCode::Query);
    bounced.add_query(Query::query(
        Name::from_ascii("api.example.com.").unwrap(),
        RecordType::A,
    ));
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket
        .send_to(&bounced.to_vec().unwrap(), dns)
        .await
        .unwrap();
    let record = proxy.record().await;
    assert_eq!(
        (record.kind, record.reason),
        (Kind::Dns, Reason::BadRequest)
    );
    let mut buffer = [0u8; 512];
    let reply = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        socket.recv_from(&mut buffer),
    )
    .await;
    assert!(reply.is_err(), "a response was answered");
}

/// An open transparent TLS tunnel holds its place under the connection limit until it
/// closes; over the limit a transparent connection is closed with one `limit` record.
#[tokio::test]
async fn open_transparent_tunnels_count_toward_the_connection_limit() {
    const LIMIT: usize = 2;
    let echo = Site::echo("127.0.0.2").await;
    let port = echo.port();
    let mut proxy = TestProxy::start_with(
        &site_policy(port),
        &[("site.test", "127.0.0.2")],
        |config| {
            config.transparent_listen = vec![SocketAddr::from(([127, 0, 0, 1], port))];
            config.limits.max_connections = LIMIT;
        },
    )
    .await;
    let listener = proxy.running().local_addrs().transparent[0];
    let hello = client_hello(Some("site.test"), false);
    let open = || async {
        let mut stream = TcpStream::connect(listener).await.unwrap();
        stream.write_all(&hello).await.unwrap();
        // Really open: the upstream echoes the ClientHello back through the tunnel.
        let mut back = vec![0u8; hello.len()];
        tokio::time::timeout(HANG, stream.read_exact(&mut back))
            .await
            .expect("echo in time")
            .expect("echo");
        assert_eq!(back, hello);
        stream
    };
    let mut tunnels = Vec::new();
    for _ in 0..LIMIT {
        tunnels.push(open().await);
    }
    let mut over = TcpStream::connect(listener).await.unwrap();
    let _ = over.write_all(&hello).await;
    assert!(read_to_close(&mut over).await.is_empty());
    let record = proxy.record().await;
    assert_eq!(
        (record.decision, record.reason, record.port),
        (Outcome::Blocked, Reason::Limit, Some(port))
    );
    assert!(proxy.records_now().await.is_empty());

    drop(tunnels.pop());
    let closed = proxy.record().await;
    assert_eq!(
        (closed.kind, closed.decision),
        (Kind::Tls, Outcome::Allowed)
    );
    tunnels.push(open().await);
    assert!(proxy.records_now().await.is_empty());
}
