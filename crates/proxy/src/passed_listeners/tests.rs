use std::net::Ipv4Addr;

use egress_core::doors::SOCKET_NAME;

use super::*;

fn loopback_doors() -> DoorAddrs {
    let any_port = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    DoorAddrs {
        explicit: any_port,
        dns: Some(any_port),
        transparent: vec![any_port, any_port],
        raw: vec![any_port],
        closed_sockets: true,
    }
}

fn proxy_socket() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    tokio::net::UnixListener,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SOCKET_NAME);
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    (dir, path, listener)
}

/// Sends `line` with `fds` as a pass, as a launcher (or a forger) would.
fn send_raw(path: &Path, line: &str, fds: &[BorrowedFd<'_>]) {
    let stream = std::os::unix::net::UnixStream::connect(path).unwrap();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PASSED))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    rustix::net::sendmsg(
        &stream,
        &[IoSlice::new(line.as_bytes())],
        &mut control,
        SendFlags::empty(),
    )
    .unwrap();
}

/// What the launcher binds arrives whole: each door is the very socket that was bound (the
/// same address), listening, and a connection made to the passed explicit door is
/// accepted through it.
#[tokio::test]
async fn passed_sockets_are_the_bound_ones_and_serve_connections() {
    let (_dir, path, listener) = proxy_socket();
    let bound = PassedListeners::bind(&loopback_doors()).unwrap();
    let explicit = bound.explicit.local_addr().unwrap();
    let (udp, tcp) = bound.dns.as_ref().unwrap();
    let dns = (udp.local_addr().unwrap(), tcp.local_addr().unwrap());
    assert_eq!(dns.0, udp.local_addr().unwrap());
    let transparent: Vec<_> = bound
        .transparent
        .iter()
        .map(|l| l.local_addr().unwrap())
        .collect();
    let raw = bound.raw[0].local_addr().unwrap();
    assert!(bound.closed_sockets.is_some(), "no closed-socket watch");
    let sender = std::thread::spawn({
        let path = path.clone();
        move || {
            // Returns once the proxy answered: its socket is gone by then.
            bound.send(&path).unwrap();
            assert!(
                !path.exists(),
                "the pass socket is still there after the answer"
            );
            assert!(std::os::unix::net::UnixStream::connect(&path).is_err());
        }
    });
    let received = PassedListeners::receive(listener, &path).await.unwrap();
    sender.join().unwrap();
    assert_eq!(received.explicit.local_addr().unwrap(), explicit);
    let (udp, tcp) = received.dns.as_ref().unwrap();
    assert_eq!((udp.local_addr().unwrap(), tcp.local_addr().unwrap()), dns);
    let got: Vec<_> = received
        .transparent
        .iter()
        .map(|l| l.local_addr().unwrap())
        .collect();
    assert_eq!(got, transparent);
    assert_eq!(received.raw.len(), 1);
    assert_eq!(received.raw[0].local_addr().unwrap(), raw);
    assert!(
        received
            .closed_sockets
            .as_ref()
            .is_some_and(crate::refused_ports::is_watch)
    );

    let served = tokio::net::TcpListener::from_std(received.explicit).unwrap();
    let client = tokio::net::TcpStream::connect(explicit);
    let (accepted, connected) = tokio::join!(served.accept(), client);
    let (_stream, peer) = accepted.unwrap();
    assert_eq!(peer, connected.unwrap().local_addr().unwrap());
}

/// A descriptor that is not what its role says is refused, whatever else came with it: a
/// datagram socket as the explicit door, a stream socket that does not listen, a Unix
/// socket; as the closed-socket watch, a listener or a netlink socket of another protocol.
#[tokio::test]
async fn a_socket_of_the_wrong_kind_is_refused() {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let not_listening = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    let (unix, _other) = std::os::unix::net::UnixStream::pair().unwrap();
    let explicit = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let route = rustix::net::socket(
        AddressFamily::NETLINK,
        SocketType::RAW,
        Some(rustix::net::netlink::GENERIC),
    )
    .unwrap();
    let cases: [(&str, Vec<BorrowedFd<'_>>, usize, &str); 5] = [
        ("explicit\n", vec![udp.as_fd()], 0, "explicit"),
        ("explicit\n", vec![not_listening.as_fd()], 0, "explicit"),
        ("explicit\n", vec![unix.as_fd()], 0, "explicit"),
        (
            "explicit closed-sockets\n",
            vec![explicit.as_fd(), explicit.as_fd()],
            1,
            "closed-sockets",
        ),
        (
            "explicit closed-sockets\n",
            vec![explicit.as_fd(), route.as_fd()],
            1,
            "closed-sockets",
        ),
    ];
    for (line, fds, wrong, its_role) in cases {
        let (_dir, path, listener) = proxy_socket();
        send_raw(&path, line, &fds);
        let error = PassedListeners::receive(listener, &path).await.unwrap_err();
        assert!(
            matches!(
                error,
                PassError::WrongSocket { index, role, .. } if index == wrong && role == its_role
            ),
            "{line:?}: {error}"
        );
    }
}

/// A pass whose words are off is refused: an unknown role, more roles than descriptors, a
/// door twice, DNS with one socket of two, no explicit door.
#[tokio::test]
async fn a_malformed_pass_is_refused() {
    let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let second = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cases: [(&str, Vec<BorrowedFd<'_>>); 5] = [
        ("explicit backdoor\n", vec![first.as_fd(), second.as_fd()]),
        ("explicit transparent\n", vec![first.as_fd()]),
        ("explicit explicit\n", vec![first.as_fd(), second.as_fd()]),
        ("explicit dns-tcp\n", vec![first.as_fd(), second.as_fd()]),
        ("transparent\n", vec![first.as_fd()]),
    ];
    for (line, fds) in cases {
        let (_dir, path, listener) = proxy_socket();
        send_raw(&path, line, &fds);
        let error = PassedListeners::receive(listener, &path).await.unwrap_err();
        assert!(
            matches!(error, PassError::Malformed(_)),
            "{line:?}: {error}"
        );
    }
}

/// A connection that closes before its line ends passes nothing.
#[tokio::test]
async fn a_pass_cut_short_is_refused() {
    let (_dir, path, listener) = proxy_socket();
    let stream = std::os::unix::net::UnixStream::connect(&path).unwrap();
    rustix::net::send(&stream, b"explicit", SendFlags::empty()).unwrap();
    drop(stream);
    let error = PassedListeners::receive(listener, &path).await.unwrap_err();
    assert!(matches!(error, PassError::Malformed(_)), "{error}");
}

/// A launcher whose pass is refused hears why (and so fails, rather than run the command with
/// no doors).
#[tokio::test]
async fn the_sender_hears_a_refusal() {
    let (_dir, path, listener) = proxy_socket();
    let not_listening = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    let forged = PassedListeners {
        explicit: std::net::TcpListener::from(not_listening),
        dns: None,
        transparent: Vec::new(),
        raw: Vec::new(),
        closed_sockets: None,
    };
    let sender = std::thread::spawn({
        let path = path.clone();
        move || forged.send(&path)
    });
    let error = PassedListeners::receive(listener, &path).await.unwrap_err();
    assert!(matches!(error, PassError::WrongSocket { .. }), "{error}");
    let said = sender.join().unwrap().unwrap_err().to_string();
    assert!(
        said.contains("did not take the listeners: refused: passed descriptor 0 (explicit)"),
        "{said}"
    );
}

#[test]
fn a_pass_that_cannot_be_read_says_its_cause_once() {
    let error = PassError::from(io::Error::other("connection reset"));
    assert_eq!(error.to_string(), "cannot read the passed listeners");
    assert_eq!(
        egress_core::text::with_causes(&error),
        "cannot read the passed listeners: connection reset"
    );
}
