//! Listening sockets made inside the sandbox and served by the proxy.
//!
//! On a local engine a run's sandbox has no network at all (`--network none`), only its own
//! loopback. Before its command runs, the sandbox's launcher binds the proxy's doors there
//! (127.0.0.1:3128, :53 over UDP and TCP, :443, :80, and a raw door per port the run's
//! rules allow) and passes the sockets to the proxy over a Unix socket in a directory
//! both containers mount (`SCM_RIGHTS`). The proxy then
//! accepts the sandbox's connections on sockets that live in the sandbox's network
//! namespace, while its own upstream connections leave from its own namespace. No packet
//! crosses a Docker network between the two, so a run needs no network of its own: the
//! engine's most expensive objects (a network, an endpoint per container, a connect) are
//! gone from every run, and the sandbox has no interface to reach anything else through.
//!
//! With the doors the launcher may pass a watch of the sandbox's closed TCP sockets
//! (`refused_ports`), from which the proxy records the connections its kernel
//! refused because no door listens on their port.
//!
//! The proxy takes exactly one pass, the first connection's, closes and removes its socket,
//! and only then answers `ok`; the launcher waits for that answer before it runs the command.
//! So the command never finds a socket to pass descriptors of its own through. Every
//! descriptor received is checked before it is served: an IPv4 socket of its role's type,
//! listening where a stream is meant.
// Reads bytes from the sandbox: a malformed input must be an error, never a panic.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use egress_core::doors::{DoorAddrs, MAX_RAW_DOORS};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// The most descriptors one pass carries: an explicit door, DNS over UDP and TCP, up to
/// five transparent doors, the raw doors and the closed-socket watch.
const MAX_PASSED: usize = 9 + MAX_RAW_DOORS;
/// The pass's text (the roles, one word each) is at most this long.
const MAX_ROLES_BYTES: usize = 1024;
/// Connections the kernel queues on a passed stream listener (as [`crate::listen`]).
const BACKLOG: i32 = crate::listen::LISTEN_BACKLOG as i32;
/// How long the launcher waits for the proxy's answer to its pass, and the proxy for the pass
/// once connected.
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The proxy's answer to a pass it took.
const TAKEN: &[u8] = b"ok\n";

/// The doors' sockets, bound (and listening, for streams) by whoever made them.
/// `#[non_exhaustive]`: a new kind of door is a new field.
#[derive(Debug)]
#[non_exhaustive]
pub struct PassedListeners {
    /// The explicit proxy door (CONNECT and absolute-form HTTP).
    pub explicit: std::net::TcpListener,
    /// The DNS door, UDP and TCP on the same address, if bound.
    pub dns: Option<(std::net::UdpSocket, std::net::TcpListener)>,
    /// The transparent doors (TLS by SNI, HTTP by `Host`).
    pub transparent: Vec<std::net::TcpListener>,
    /// The raw doors (any TCP protocol, the target named by the address).
    pub raw: Vec<std::net::TcpListener>,
    /// The watch of closed TCP sockets, when asked for and the kernel has one.
    pub closed_sockets: Option<OwnedFd>,
}

/// Why a pass was refused: the proxy then serves no door at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PassError {
    /// Receiving over the Unix socket failed.
    #[error("cannot read the passed listeners")]
    Io(#[from] io::Error),
    /// The message is not one pass of the expected shape (count, roles, truncation).
    #[error("the pass is malformed: {0}")]
    Malformed(&'static str),
    /// A descriptor is not the listening IPv4 socket its role needs.
    #[error("passed descriptor {index} ({role}) is not {expected}")]
    WrongSocket {
        /// Its place in the pass.
        index: usize,
        /// The door it was passed as.
        role: &'static str,
        /// What that door needs.
        expected: &'static str,
    },
}

/// What one passed descriptor is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Explicit,
    DnsUdp,
    DnsTcp,
    Transparent,
    Raw,
    ClosedSockets,
}

impl Role {
    fn word(self) -> &'static str {
        match self {
            Role::Explicit => "explicit",
            Role::DnsUdp => "dns-udp",
            Role::DnsTcp => "dns-tcp",
            Role::Transparent => "transparent",
            Role::Raw => "raw",
            Role::ClosedSockets => "closed-sockets",
        }
    }

    fn parse(word: &str) -> Option<Role> {
        [
            Role::Explicit,
            Role::DnsUdp,
            Role::DnsTcp,
            Role::Transparent,
            Role::Raw,
            Role::ClosedSockets,
        ]
        .into_iter()
        .find(|role| role.word() == word)
    }
}

impl PassedListeners {
    /// Binds every door of `addrs` (what the launcher does in the sandbox). Stream listeners get
    /// `SO_REUSEADDR` and the proxy's backlog; every socket is close-on-exec, so the
    /// command the launcher runs next never inherits one. A closed-socket watch the kernel
    /// cannot give is left out, not an error: the doors work without it, and
    /// [`PassedListeners::closed_sockets`] says so.
    pub fn bind(addrs: &DoorAddrs) -> io::Result<PassedListeners> {
        if addrs.raw.len() > MAX_RAW_DOORS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("more than {MAX_RAW_DOORS} raw doors"),
            ));
        }
        let dns = match addrs.dns {
            Some(addr) => Some((bind_udp(addr)?, bind_tcp(addr)?)),
            None => None,
        };
        Ok(PassedListeners {
            explicit: bind_tcp(addrs.explicit)?,
            dns,
            transparent: addrs
                .transparent
                .iter()
                .map(|addr| bind_tcp(*addr))
                .collect::<io::Result<_>>()?,
            raw: addrs
                .raw
                .iter()
                .map(|addr| bind_tcp(*addr))
                .collect::<io::Result<_>>()?,
            closed_sockets: addrs
                .closed_sockets
                .then(crate::refused_ports::open_watch)
                .and_then(Result::ok),
        })
    }

    /// Passes these sockets to the proxy listening on `socket`, in one message, and waits
    /// for its answer: once it is `ok`, the proxy serves them and its socket is gone. The
    /// caller's descriptors stay open: drop them after, so the proxy holds the only ones.
    pub fn send(&self, socket: &Path) -> io::Result<()> {
        let stream = std::os::unix::net::UnixStream::connect(socket)?;
        let (roles, fds) = self.roles_and_fds();
        let mut line = roles
            .iter()
            .map(|role| role.word())
            .collect::<Vec<_>>()
            .join(" ");
        line.push('\n');
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PASSED))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(io::Error::other("too many listeners for one pass"));
        }
        let bytes = line.as_bytes();
        let sent = rustix::net::sendmsg(
            &stream,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        // The descriptors went with the first byte; the rest of a short send follows plain.
        let mut rest = bytes.get(sent..).unwrap_or_default();
        while !rest.is_empty() {
            let more = rustix::net::send(&stream, rest, SendFlags::NOSIGNAL)?;
            rest = rest.get(more..).unwrap_or_default();
        }
        stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        let mut answer = Vec::new();
        io::Read::read_to_end(&mut io::Read::take(&stream, 512), &mut answer)?;
        if answer == TAKEN {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&answer);
        Err(io::Error::other(match said.trim() {
            "" => "the proxy closed the connection without taking the listeners".to_owned(),
            said => format!("the proxy did not take the listeners: {said}"),
        }))
    }

    fn roles_and_fds(&self) -> (Vec<Role>, Vec<BorrowedFd<'_>>) {
        let mut roles = vec![Role::Explicit];
        let mut fds = vec![self.explicit.as_fd()];
        if let Some((udp, tcp)) = &self.dns {
            roles.extend([Role::DnsUdp, Role::DnsTcp]);
            fds.extend([udp.as_fd(), tcp.as_fd()]);
        }
        for listener in &self.transparent {
            roles.push(Role::Transparent);
            fds.push(listener.as_fd());
        }
        for listener in &self.raw {
            roles.push(Role::Raw);
            fds.push(listener.as_fd());
        }
        if let Some(watch) = &self.closed_sockets {
            roles.push(Role::ClosedSockets);
            fds.push(watch.as_fd());
        }
        (roles, fds)
    }

    /// Takes one pass from the first connection to `listener` (bound at `path`), closes
    /// and removes that socket, checks the pass and answers it. The sockets come back
    /// non-blocking, ready for tokio.
    pub async fn receive(
        listener: tokio::net::UnixListener,
        path: &Path,
    ) -> Result<PassedListeners, PassError> {
        let (mut stream, _) = listener.accept().await?;
        // No second pass: connections queued behind this one are refused from here on.
        drop(listener);
        let _ = std::fs::remove_file(path);
        let received = match tokio::time::timeout(ANSWER_TIMEOUT, read_pass(&stream)).await {
            Ok(received) => received,
            Err(_) => Err(PassError::Malformed("it did not arrive in time")),
        };
        let answer = match &received {
            Ok(_) => TAKEN.to_vec(),
            Err(error) => {
                format!("refused: {}\n", egress_core::text::with_causes(error)).into_bytes()
            }
        };
        // The sender may be gone already; what matters is what was received.
        let _ = tokio::io::AsyncWriteExt::write_all(&mut stream, &answer).await;
        received
    }
}

/// Reads one pass from `stream`: the roles line and its descriptors, checked.
async fn read_pass(stream: &tokio::net::UnixStream) -> Result<PassedListeners, PassError> {
    let mut text = Vec::new();
    let mut fds = Vec::new();
    while !text.ends_with(b"\n") {
        if text.len() > MAX_ROLES_BYTES || fds.len() > MAX_PASSED {
            return Err(PassError::Malformed("too long"));
        }
        stream.readable().await?;
        let received = stream.try_io(tokio::io::Interest::READABLE, || {
            receive_some(stream, &mut text, &mut fds)
        });
        match received {
            Ok(0) => return Err(PassError::Malformed("it ended before its last line")),
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error.into()),
        }
    }
    let text = std::str::from_utf8(text.strip_suffix(b"\n").unwrap_or_default())
        .map_err(|_| PassError::Malformed("its roles are not text"))?;
    let roles = text
        .split(' ')
        .map(|word| Role::parse(word).ok_or(PassError::Malformed("an unknown role")))
        .collect::<Result<Vec<_>, _>>()?;
    if roles.len() != fds.len() {
        return Err(PassError::Malformed(
            "its roles and descriptors differ in number",
        ));
    }
    assemble(roles, fds)
}

/// One `recvmsg` into `text` and `fds`; the bytes it read.
fn receive_some(
    stream: &tokio::net::UnixStream,
    text: &mut Vec<u8>,
    fds: &mut Vec<OwnedFd>,
) -> io::Result<usize> {
    let mut buffer = [0u8; MAX_ROLES_BYTES];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PASSED))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        stream,
        &mut [IoSliceMut::new(&mut buffer)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )?;
    if received.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "more descriptors than a pass carries",
        ));
    }
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(passed) = message {
            fds.extend(passed);
        }
    }
    text.extend_from_slice(buffer.get(..received.bytes).unwrap_or_default());
    Ok(received.bytes)
}

/// Checks each descriptor against its role and builds the listeners.
fn assemble(roles: Vec<Role>, fds: Vec<OwnedFd>) -> Result<PassedListeners, PassError> {
    let mut explicit = None;
    let mut dns_udp = None;
    let mut dns_tcp = None;
    let mut transparent = Vec::new();
    let mut raw = Vec::new();
    let mut closed_sockets = None;
    for (index, (role, fd)) in roles.into_iter().zip(fds).enumerate() {
        match role {
            Role::Explicit => put_once(&mut explicit, stream_listener(fd, index, role)?)?,
            Role::DnsUdp => put_once(&mut dns_udp, datagram_socket(fd, index, role)?)?,
            Role::DnsTcp => put_once(&mut dns_tcp, stream_listener(fd, index, role)?)?,
            Role::Transparent => transparent.push(stream_listener(fd, index, role)?),
            Role::Raw => raw.push(stream_listener(fd, index, role)?),
            Role::ClosedSockets => put_once(&mut closed_sockets, watch(fd, index, role)?)?,
        }
    }
    let dns = match (dns_udp, dns_tcp) {
        (Some(udp), Some(tcp)) => Some((udp, tcp)),
        (None, None) => None,
        _ => {
            return Err(PassError::Malformed(
                "DNS needs both its UDP and TCP socket",
            ));
        }
    };
    Ok(PassedListeners {
        explicit: explicit.ok_or(PassError::Malformed("no explicit door"))?,
        dns,
        transparent,
        raw,
        closed_sockets,
    })
}

fn put_once<T>(slot: &mut Option<T>, value: T) -> Result<(), PassError> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err(PassError::Malformed("a door passed twice")),
    }
}

fn is_inet_of_type(fd: &OwnedFd, kind: SocketType) -> bool {
    rustix::net::sockopt::socket_domain(fd).ok() == Some(AddressFamily::INET)
        && rustix::net::sockopt::socket_type(fd).ok() == Some(kind)
}

fn stream_listener(
    fd: OwnedFd,
    index: usize,
    role: Role,
) -> Result<std::net::TcpListener, PassError> {
    let listening = rustix::net::sockopt::socket_acceptconn(&fd).unwrap_or(false);
    if !is_inet_of_type(&fd, SocketType::STREAM) || !listening {
        return Err(PassError::WrongSocket {
            index,
            role: role.word(),
            expected: "a listening IPv4 stream socket",
        });
    }
    let listener = std::net::TcpListener::from(fd);
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn datagram_socket(
    fd: OwnedFd,
    index: usize,
    role: Role,
) -> Result<std::net::UdpSocket, PassError> {
    if !is_inet_of_type(&fd, SocketType::DGRAM) {
        return Err(PassError::WrongSocket {
            index,
            role: role.word(),
            expected: "an IPv4 datagram socket",
        });
    }
    let socket = std::net::UdpSocket::from(fd);
    socket.set_nonblocking(true)?;
    Ok(socket)
}

fn watch(fd: OwnedFd, index: usize, role: Role) -> Result<OwnedFd, PassError> {
    if !crate::refused_ports::is_watch(&fd) {
        return Err(PassError::WrongSocket {
            index,
            role: role.word(),
            expected: "a NETLINK_SOCK_DIAG socket",
        });
    }
    Ok(fd)
}

fn bind_tcp(addr: SocketAddrV4) -> io::Result<std::net::TcpListener> {
    let socket = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::sockopt::set_socket_reuseaddr(&socket, true)?;
    rustix::net::bind(&socket, &SocketAddr::V4(addr))?;
    rustix::net::listen(&socket, BACKLOG)?;
    Ok(std::net::TcpListener::from(socket))
}

fn bind_udp(addr: SocketAddrV4) -> io::Result<std::net::UdpSocket> {
    // std's sockets are close-on-exec.
    std::net::UdpSocket::bind(addr)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests;
