//! Raw doors: any TCP protocol to an allowed name, named by the address the DNS responder
//! gave it, judged like a CONNECT, relayed, recorded as kind `tcp`.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::client_hello::client_hello;
use common::{HANG, Site, TestProxy, allow_yaml, read_to_close};
use egress_core::audit::{AuditRecord, Kind, Outcome};
use egress_core::policy::Reason;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// The first name the responder is asked about gets this address.
const FIRST_NAME_ADDRESS: Ipv4Addr = Ipv4Addr::new(127, 100, 0, 1);

fn site_policy(port: u16) -> String {
    allow_yaml(
        &[("site.test", port)],
        &format!("  - cidr: 127.0.0.2/32\n    ports: [{port}]\n"),
    )
}

/// A proxy with a DNS responder and raw doors on `FIRST_NAME_ADDRESS`, one per port of
/// `ports` (0: any free port), `site.test` pinned to 127.0.0.2.
async fn raw_proxy(
    yaml: &str,
    ports: &[u16],
    adjust: impl FnOnce(&mut egress_proxy::ProxyConfig),
) -> TestProxy {
    TestProxy::start_with(yaml, &[("site.test", "127.0.0.2")], |config| {
        config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
        config.dns_answer = Some("127.0.0.1".parse().unwrap());
        config.raw_listen = ports
            .iter()
            .map(|port| SocketAddr::from((FIRST_NAME_ADDRESS, *port)))
            .collect();
        adjust(config);
    })
    .await
}

/// Asks the proxy's responder for `name`'s A record, as the sandbox's resolver would, and
/// takes the lookup's record.
async fn resolve(proxy: &mut TestProxy, name: &str) -> Vec<Ipv4Addr> {
    let addresses = ask_a(proxy, name).await;
    let dns_record = proxy.record().await;
    assert_eq!(dns_record.kind, Kind::Dns);
    addresses
}

/// Asks the proxy's responder for `name`'s A record; its addresses.
async fn ask_a(proxy: &TestProxy, name: &str) -> Vec<Ipv4Addr> {
    let server = proxy.running().local_addrs().dns.expect("DNS bound");
    let mut message = Message::query();
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket
        .send_to(&message.to_vec().unwrap(), server)
        .await
        .unwrap();
    let mut buffer = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(HANG, socket.recv_from(&mut buffer))
        .await
        .expect("a DNS answer in time")
        .unwrap();
    let answer = Message::from_vec(&buffer[..n]).unwrap();
    answer
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

/// Reads until the peer closes or resets; true when it reset.
async fn closed_by_reset(stream: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    let read = tokio::time::timeout(HANG, stream.read_to_end(&mut rest))
        .await
        .expect("the door closes at once, it does not hang");
    assert!(rest.is_empty(), "a refused connection got {rest:?}");
    read.is_err_and(|error| error.kind() == std::io::ErrorKind::ConnectionReset)
}

fn assert_tcp(record: &AuditRecord, outcome: Outcome, reason: Reason, port: u16) {
    assert_eq!(record.kind, Kind::Tcp, "{record:?}");
    assert_eq!(
        (record.decision, record.reason, record.port),
        (outcome, reason, Some(port)),
        "{record:?}"
    );
}

#[tokio::test]
async fn a_raw_door_relays_a_line_protocol_to_the_name_behind_its_address() {
    let echo = Site::echo("127.0.0.2").await;
    let port = echo.port();
    let mut proxy = raw_proxy(&site_policy(port), &[port], |_| {}).await;
    assert_eq!(
        resolve(&mut proxy, "site.test.").await,
        vec![FIRST_NAME_ADDRESS]
    );
    let mut stream = TcpStream::connect((FIRST_NAME_ADDRESS, port))
        .await
        .unwrap();
    stream.write_all(b"PING 1\r\nPING 2\r\n").await.unwrap();
    let mut back = [0u8; 16];
    tokio::time::timeout(HANG, stream.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"PING 1\r\nPING 2\r\n");
    drop(stream);
    let record = proxy.record().await;
    assert_tcp(&record, Outcome::Allowed, Reason::Rule, port);
    assert_eq!(record.host, "site.test");
    assert_eq!(record.addr.as_deref(), Some("127.0.0.2"));
    assert_eq!((record.bytes_up, record.bytes_down), (16, 16));
}

#[tokio::test]
async fn a_port_the_name_is_not_allowed_on_is_reset_at_once_and_recorded() {
    let echo = Site::echo("127.0.0.2").await;
    let mut proxy = raw_proxy(&site_policy(echo.port()), &[0], |_| {}).await;
    let door = proxy.running().local_addrs().raw[0];
    resolve(&mut proxy, "site.test.").await;
    let mut stream = TcpStream::connect(door).await.unwrap();
    let _ = stream.write_all(b"hello\n").await;
    closed_by_reset(&mut stream).await;
    let record = proxy.record().await;
    assert_tcp(
        &record,
        Outcome::Blocked,
        Reason::PortNotAllowed,
        door.port(),
    );
    assert_eq!(record.host, "site.test");
    assert_eq!(echo.connection_count().await, 0);
}

#[tokio::test]
async fn an_address_the_responder_never_gave_is_refused() {
    let echo = Site::echo("127.0.0.2").await;
    let port = echo.port();
    let mut proxy = raw_proxy(&site_policy(port), &[port], |_| {}).await;
    // No lookup yet: the address names nothing.
    let mut stream = TcpStream::connect((FIRST_NAME_ADDRESS, port))
        .await
        .unwrap();
    assert!(closed_by_reset(&mut stream).await, "not reset");
    let record = proxy.record().await;
    assert_tcp(&record, Outcome::Blocked, Reason::NotAllowed, port);
    assert_eq!(record.host, FIRST_NAME_ADDRESS.to_string());
    assert_eq!(echo.connection_count().await, 0);
}

#[tokio::test]
async fn tls_on_a_raw_door_must_name_the_doors_name() {
    let echo = Site::echo("127.0.0.2").await;
    let port = echo.port();
    let mut proxy = raw_proxy(&site_policy(port), &[port], |_| {}).await;
    resolve(&mut proxy, "site.test.").await;

    let hello = client_hello(Some("site.test"), false);
    let mut stream = TcpStream::connect((FIRST_NAME_ADDRESS, port))
        .await
        .unwrap();
    stream.write_all(&hello).await.unwrap();
    let mut back = vec![0u8; hello.len()];
    tokio::time::timeout(HANG, stream.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, hello);
    drop(stream);
    let record = proxy.record().await;
    assert_tcp(&record, Outcome::Allowed, Reason::Rule, port);
    assert_eq!(record.bytes_up, hello.len() as u64);

    let other = client_hello(Some("other.test"), false);
    let mut stream = TcpStream::connect((FIRST_NAME_ADDRESS, port))
        .await
        .unwrap();
    stream.write_all(&other).await.unwrap();
    assert!(read_to_close(&mut stream).await.is_empty());
    let record = proxy.record().await;
    assert_tcp(&record, Outcome::Blocked, Reason::SniMismatch, port);
    assert_eq!(record.host, "site.test");
    assert_eq!(record.bytes_up, 0);
    // Only the first ClientHello ever reached the site.
    assert_eq!(echo.settled_received().await, hello);
}

#[tokio::test]
async fn a_server_that_speaks_first_is_relayed() {
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        stream.write_all(b"220 ready\r\n").await.unwrap();
        let mut line = [0u8; 6];
        stream.read_exact(&mut line).await.unwrap();
        stream.write_all(&line).await.unwrap();
    });
    let mut proxy = raw_proxy(&site_policy(port), &[port], |_| {}).await;
    resolve(&mut proxy, "site.test.").await;
    let mut stream = TcpStream::connect((FIRST_NAME_ADDRESS, port))
        .await
        .unwrap();
    let mut greeting = [0u8; 11];
    tokio::time::timeout(HANG, stream.read_exact(&mut greeting))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&greeting, b"220 ready\r\n");
    stream.write_all(b"QUIT\r\n").await.unwrap();
    let mut back = [0u8; 6];
    stream.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"QUIT\r\n");
    drop(stream);
    let record = proxy.record().await;
    assert_tcp(&record, Outcome::Allowed, Reason::Rule, port);
    assert_eq!((record.bytes_up, record.bytes_down), (6, 17));
}

#[tokio::test]
async fn raw_connections_over_their_cap_are_reset_and_recorded() {
    const CAP: usize = 3;
    let echo = Site::echo("127.0.0.2").await;
    let port = echo.port();
    let mut proxy = raw_proxy(&site_policy(port), &[port], |config| {
        config.limits.max_raw_connections = CAP;
    })
    .await;
    resolve(&mut proxy, "site.test.").await;
    let mut open = Vec::new();
    for n in 0..CAP {
        let mut stream = TcpStream::connect((FIRST_NAME_ADDRESS, port))
            .await
            .unwrap();
        stream.write_all(&[b'0' + n as u8]).await.unwrap();
        let mut back = [0u8; 1];
        stream.read_exact(&mut back).await.unwrap();
        open.push(stream);
    }
    let mut over = TcpStream::connect((FIRST_NAME_ADDRESS, port))
        .await
        .unwrap();
    assert!(closed_by_reset(&mut over).await, "not reset");
    let record = proxy.record().await;
    assert_tcp(&record, Outcome::Blocked, Reason::Limit, port);
    drop(open);
    for _ in 0..CAP {
        assert_eq!(proxy.record().await.decision, Outcome::Allowed);
    }
}

#[tokio::test]
async fn an_idle_raw_connection_is_closed_and_recorded() {
    let echo = Site::echo("127.0.0.2").await;
    let port = echo.port();
    let mut proxy = raw_proxy(&site_policy(port), &[port], |config| {
        config.limits.raw_idle_timeout = Duration::from_millis(300);
    })
    .await;
    resolve(&mut proxy, "site.test.").await;
    let mut stream = TcpStream::connect((FIRST_NAME_ADDRESS, port))
        .await
        .unwrap();
    stream.write_all(b"once").await.unwrap();
    let mut back = [0u8; 4];
    stream.read_exact(&mut back).await.unwrap();
    // Then silence: the proxy ends the relay, the client sees the close.
    let mut rest = Vec::new();
    tokio::time::timeout(HANG, stream.read_to_end(&mut rest))
        .await
        .expect("the idle bound closes the connection")
        .unwrap();
    let record = proxy.record().await;
    assert_tcp(&record, Outcome::Allowed, Reason::Rule, port);
    assert_eq!((record.bytes_up, record.bytes_down), (4, 4));
}

#[tokio::test]
async fn each_allowed_name_gets_its_own_address_and_other_names_none() {
    let yaml = allow_yaml(&[("site.test", 5432), ("db.test", 6379)], "");
    let mut proxy = raw_proxy(&yaml, &[0], |_| {}).await;
    let site = resolve(&mut proxy, "site.test.").await;
    let db = resolve(&mut proxy, "db.test.").await;
    assert_eq!(site, vec![FIRST_NAME_ADDRESS]);
    assert_eq!(db.len(), 1);
    assert_ne!(db, site);
    // A repeated lookup: the same address, no second record.
    assert_eq!(ask_a(&proxy, "SITE.test.").await, site);
    assert!(resolve(&mut proxy, "evil.test.").await.is_empty());
}
