#![allow(clippy::indexing_slicing, clippy::unwrap_used)]

use super::*;

/// A notice as the kernel writes it: `nlmsghdr`, then `inet_diag_msg` (72 bytes), then
/// attributes (a few bytes of padding stand for them here).
fn notice(family: u8, source: SocketAddrV4, destination: SocketAddrV4) -> Vec<u8> {
    let mut body = vec![family, 7, 0, 0];
    body.extend(source.port().to_be_bytes());
    body.extend(destination.port().to_be_bytes());
    body.extend(source.ip().octets());
    body.extend([0; 12]);
    body.extend(destination.ip().octets());
    body.extend([0; 12]);
    body.extend([0; 32]);
    body.extend([1, 2, 3]);
    message(SOCK_DIAG_BY_FAMILY, &body)
}

fn message(kind: u16, body: &[u8]) -> Vec<u8> {
    let length = HEADER_LEN + body.len();
    let mut bytes = Vec::new();
    bytes.extend(u32::try_from(length).unwrap().to_ne_bytes());
    bytes.extend(kind.to_ne_bytes());
    bytes.extend([0; 10]);
    bytes.extend(body);
    while bytes.len() % 4 != 0 {
        bytes.push(0);
    }
    bytes
}

fn v4(text: &str) -> SocketAddrV4 {
    text.parse().unwrap()
}

#[test]
fn every_ipv4_notice_of_a_datagram_is_read_and_the_rest_skipped() {
    let mut datagram = notice(2, v4("127.0.0.1:40000"), v4("127.100.0.1:5432"));
    datagram.extend(notice(10, v4("127.0.0.1:40001"), v4("127.100.0.2:5432")));
    datagram.extend(message(3, &[0; 4]));
    datagram.extend(notice(2, v4("0.0.0.0:40002"), v4("127.100.0.3:0")));
    let sockets = closed_sockets(&datagram);
    assert_eq!(
        sockets,
        [
            ClosedSocket {
                source: v4("127.0.0.1:40000"),
                destination: "127.100.0.1".parse().unwrap(),
                destination_port: 5432,
            },
            ClosedSocket {
                source: v4("0.0.0.0:40002"),
                destination: "127.100.0.3".parse().unwrap(),
                destination_port: 0,
            },
        ]
    );
}

#[test]
fn a_cut_or_lying_datagram_yields_what_is_whole_and_never_panics() {
    let whole = notice(2, v4("127.0.0.1:40000"), v4("127.100.0.1:5432"));
    // Cut anywhere before its last byte (the padding after it is not part of it).
    let length = usize::try_from(u32::from_ne_bytes(whole[..4].try_into().unwrap())).unwrap();
    assert_eq!(closed_sockets(&whole[..length]).len(), 1);
    for cut in 0..length {
        let sockets = closed_sockets(&whole[..cut]);
        assert!(sockets.is_empty(), "cut at {cut}: {sockets:?}");
    }
    // A header claiming more than there is, or less than a header.
    for claimed in [0u32, 3, 15, 1 << 20, u32::MAX] {
        let mut lying = whole.clone();
        lying[..4].copy_from_slice(&claimed.to_ne_bytes());
        assert!(closed_sockets(&lying).is_empty(), "length {claimed}");
    }
    // Nothing is read past an error message.
    let mut after_error = message(NLMSG_ERROR, &[0; 20]);
    after_error.extend(&whole);
    assert!(closed_sockets(&after_error).is_empty());
}

#[test]
fn only_the_name_block_off_the_doors_ports_missed_every_door() {
    let doors = BTreeSet::from([443, 80, 5432]);
    let closed = |destination: &str, port| ClosedSocket {
        source: v4("127.0.0.1:40000"),
        destination: destination.parse().unwrap(),
        destination_port: port,
    };
    assert!(missed_every_door(&closed("127.100.0.1", 6379), &doors));
    assert!(missed_every_door(&closed("127.100.0.1", 0), &doors));
    assert!(!missed_every_door(&closed("127.100.0.1", 5432), &doors));
    assert!(!missed_every_door(&closed("127.100.0.1", 443), &doors));
    // The program's own local servers, and the doors' accepted sockets (whose destination
    // is the sandbox's side of the connection).
    assert!(!missed_every_door(&closed("127.0.0.1", 6379), &doors));
    assert!(!missed_every_door(&closed("0.0.0.0", 0), &doors));
}

/// The kernel behaviour this module stands on, in the test's own network namespace: a
/// refused connection to a name-block address is reported when its socket is destroyed,
/// with its port for a non-blocking connect and without it for a blocking one. Other
/// processes' sockets are reported too, so only this test's destination is looked for.
#[test]
fn the_kernel_reports_a_refused_connection_when_its_socket_is_destroyed() {
    let watch = open_watch().expect("an unprivileged sock_diag watch");
    assert!(is_watch(&watch));
    let unused = || {
        let listener = std::net::TcpListener::bind("127.100.250.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let destination: Ipv4Addr = "127.100.250.1".parse().unwrap();

    // Non-blocking, as Node, Go and Python with a timeout connect.
    let port = unused();
    let refused = std::net::TcpStream::connect_timeout(
        &SocketAddr::from((destination, port)),
        std::time::Duration::from_secs(5),
    );
    assert_eq!(
        refused.map(|_| ()).map_err(|error| error.kind()),
        Err(io::ErrorKind::ConnectionRefused)
    );
    let seen = wait_for(&watch, |socket| {
        socket.destination == destination && socket.destination_port == port
    });
    assert_eq!(seen.source.ip(), &Ipv4Addr::LOCALHOST);

    // Blocking: the kernel forgets the port before the socket goes.
    let port = unused();
    let refused = std::net::TcpStream::connect((destination, port));
    assert!(refused.is_err());
    wait_for(&watch, |socket| {
        socket.destination == destination && socket.destination_port == 0
    });
}

/// Reads `watch` until a notice matches `wanted` (bounded: a hang fails the test).
fn wait_for(watch: &OwnedFd, wanted: impl Fn(&ClosedSocket) -> bool) -> ClosedSocket {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut buffer = vec![0u8; READ_BUFFER];
    loop {
        assert!(std::time::Instant::now() < deadline, "no notice came");
        match read_notices(watch, &mut buffer) {
            Ok(Some(sockets)) => {
                if let Some(socket) = sockets.into_iter().find(|socket| wanted(socket)) {
                    return socket;
                }
            }
            Ok(None) => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                let mut fds = [rustix::event::PollFd::new(
                    watch,
                    rustix::event::PollFlags::IN,
                )];
                let second = rustix::event::Timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                };
                let _ = rustix::event::poll(&mut fds, Some(&second));
            }
            Err(error) => panic!("the watch failed: {error}"),
        }
    }
}
