//! Connections to a name's address on a port no door listens on: refused by the sandbox's
//! own kernel, recorded here.
//!
//! A program that ignores the proxy variables connects to the address the DNS responder
//! gave its name ([`crate::name_addresses`]) on whatever port it likes. A port some rule of
//! the run allows has a raw door ([`crate::doors::raw`]) that judges and records the connection.
//! Any other port has no listener: the sandbox's kernel answers the SYN with a reset at
//! once (`ECONNREFUSED`), and no door ever sees the attempt.
//!
//! To record it all the same, the sandbox's launcher opens a `NETLINK_SOCK_DIAG` socket in the
//! sandbox's network namespace, subscribed to the kernel's notices of destroyed TCP
//! sockets (the `SKNLGRP_INET_TCP_DESTROY` group, open to unprivileged sockets), and passes
//! it with the doors ([`crate::passed_listeners`]). Each notice names a socket's addresses.
//! A socket whose destination is an address of the name block, on a port that no door
//! serves there, was an attempt to reach that name on that port: it is judged as a
//! `CONNECT name:port` would be and recorded as kind `tcp`, blocked, with the policy's
//! reason (`port_not_allowed` for an allowed name, `not_allowed` for an address no lookup
//! gave). A port the policy allows but that got no door (past the raw doors' bound) is
//! recorded `limit`.
//!
//! - **When.** A socket is destroyed when the program closes it: at once after the refusal
//!   for every client library we know, at the latest when the program exits.
//! - **The port.** When a *blocking* `connect` is refused, the kernel forgets the socket's
//!   destination port before the socket is destroyed; such a record has `port: null`.
//!   Non-blocking connects (Node, Go, Java NIO, Python with a timeout, curl, libpq) keep it.
//! - **Who speaks.** Only the kernel: sending to another process's sock_diag socket needs
//!   `CAP_NET_ADMIN` in the sandbox, and a message whose sender is not the kernel (port id
//!   0) is dropped all the same.
//! - **Bounded.** The notices wait in the socket's receive buffer. A program that closes
//!   sockets faster than the proxy reads them makes the kernel drop notices (`ENOBUFS`):
//!   the proxy then warns, once per burst; the refusals themselves are unaffected.
//! - Connections the doors received are never recorded here: their destination port is a
//!   door's, and the doors' own sockets (also in the sandbox's namespace) have the
//!   sandbox's side as their destination, which is not in the name block.

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SocketFlags, SocketType};
use tokio::io::Interest;

use crate::audit::{Attempt, Kind, Outcome};
use crate::name_addresses::NameAddresses;
use crate::policy::{Reason, Verdict};
use crate::shared::Shared;
use crate::target::Target;

/// The multicast group of destroyed TCP sockets (`SKNLGRP_INET_TCP_DESTROY`), as a bind
/// mask: group 1 is bit 0.
const TCP_DESTROY_GROUPS: u32 = 1;
/// `SOCK_DIAG_BY_FAMILY`: the message type of a socket notice.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLMSG_ERROR`: the kernel's word that something went wrong; nothing follows it.
const NLMSG_ERROR: u16 = 2;
/// `struct nlmsghdr`: length, type, flags, sequence, port id.
const HEADER_LEN: usize = 16;
/// Receive buffer asked of the kernel (it caps it at `net.core.rmem_max`): room for a few
/// thousand notices while the proxy is busy.
const RECEIVE_BUFFER: usize = 1 << 20;
/// One read: several notices of ~400 bytes each.
const READ_BUFFER: usize = 64 * 1024;

/// Opens the watch: a `NETLINK_SOCK_DIAG` socket in the caller's network namespace,
/// subscribed to destroyed TCP sockets, close-on-exec. The launcher calls this in the sandbox.
pub(crate) fn open_watch() -> io::Result<OwnedFd> {
    let socket = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        Some(rustix::net::netlink::SOCK_DIAG),
    )?;
    rustix::net::bind(&socket, &SocketAddrNetlink::new(0, TCP_DESTROY_GROUPS))?;
    // A smaller buffer than asked for is still a working watch.
    let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&socket, RECEIVE_BUFFER);
    Ok(socket)
}

/// Whether `fd` is what [`open_watch`] makes: the proxy checks every passed descriptor.
pub(crate) fn is_watch(fd: &OwnedFd) -> bool {
    use rustix::net::sockopt;
    sockopt::socket_domain(fd).ok() == Some(AddressFamily::NETLINK)
        && sockopt::socket_type(fd).ok() == Some(SocketType::RAW)
        && sockopt::socket_protocol(fd).ok().flatten() == Some(rustix::net::netlink::SOCK_DIAG)
}

/// What one notice says of a destroyed IPv4 TCP socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ClosedSocket {
    source: SocketAddrV4,
    destination: Ipv4Addr,
    /// 0 when the kernel forgot it (a refused blocking connect).
    destination_port: u16,
}

/// The IPv4 sockets the notices of one datagram name; anything else (another family, an
/// error or end message, a truncated part) is skipped.
fn closed_sockets(datagram: &[u8]) -> Vec<ClosedSocket> {
    let mut sockets = Vec::new();
    let mut rest = datagram;
    while let Some(header) = rest.get(..HEADER_LEN) {
        let Some(length) = header
            .get(..4)
            .and_then(|bytes| bytes.try_into().ok())
            .map(u32::from_ne_bytes)
            .and_then(|length| usize::try_from(length).ok())
            .filter(|length| *length >= HEADER_LEN)
        else {
            break;
        };
        let kind = header
            .get(4..6)
            .and_then(|bytes| bytes.try_into().ok())
            .map(u16::from_ne_bytes);
        let Some(message) = rest.get(..length) else {
            break;
        };
        if kind == Some(SOCK_DIAG_BY_FAMILY)
            && let Some(socket) = message.get(HEADER_LEN..).and_then(closed_socket)
        {
            sockets.push(socket);
        }
        if kind == Some(NLMSG_ERROR) {
            break;
        }
        // Messages are aligned to 4 bytes.
        let next = length.div_ceil(4) * 4;
        rest = rest.get(next..).unwrap_or_default();
    }
    sockets
}

/// One `struct inet_diag_msg`: family, state, timer, retransmits, then the socket id —
/// source and destination ports (big-endian), source and destination addresses (16
/// bytes each, IPv4 in the first four).
fn closed_socket(message: &[u8]) -> Option<ClosedSocket> {
    const AF_INET: u8 = 2;
    if *message.first()? != AF_INET {
        return None;
    }
    let port = |at: usize| {
        message
            .get(at..at + 2)
            .and_then(|bytes| bytes.try_into().ok())
            .map(u16::from_be_bytes)
    };
    let address = |at: usize| {
        message
            .get(at..at + 4)
            .and_then(|bytes| <[u8; 4]>::try_from(bytes).ok())
            .map(Ipv4Addr::from)
    };
    Some(ClosedSocket {
        source: SocketAddrV4::new(address(8)?, port(4)?),
        destination: address(24)?,
        destination_port: port(6)?,
    })
}

/// Whether a closed socket was an attempt no door received: its destination is in the
/// name block, on a port no door serves there.
fn missed_every_door(socket: &ClosedSocket, door_ports: &BTreeSet<u16>) -> bool {
    NameAddresses::in_block(socket.destination) && !door_ports.contains(&socket.destination_port)
}

/// Reads the watch until shutdown, recording each attempt no door received. `door_ports`
/// are the ports with a door on the name block's addresses (the transparent and raw
/// doors). At shutdown, what the kernel already queued is still read and recorded.
pub(crate) async fn serve(watch: OwnedFd, door_ports: BTreeSet<u16>, shared: Arc<Shared>) {
    // Tokio registers a descriptor with its reactor safely only through its own socket
    // types: a datagram socket carries the watch (netlink is datagram-like), and every read
    // goes through rustix, never through the carrier's own methods.
    let carrier = std::os::unix::net::UnixDatagram::from(watch);
    let registered = carrier
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UnixDatagram::from_std(carrier));
    let watch = match registered {
        Ok(watch) => watch,
        Err(error) => {
            tracing::warn!(%error, "cannot watch the sandbox's closed sockets: connections to ports without a door are refused but not recorded");
            return;
        }
    };
    let mut buffer = vec![0u8; READ_BUFFER];
    let mut overrun_said = false;
    loop {
        tokio::select! {
            ready = watch.readable() => if ready.is_err() {
                return;
            },
            () = shared.stop.cancelled() => break,
        }
        match watch.try_io(Interest::READABLE, || read_notices(&watch, &mut buffer)) {
            Ok(Some(sockets)) => {
                overrun_said = false;
                record_missed(&sockets, &door_ports, &shared).await;
            }
            Ok(None) => {}
            Err(error)
                if error.raw_os_error() == Some(rustix::io::Errno::NOBUFS.raw_os_error()) =>
            {
                if !std::mem::replace(&mut overrun_said, true) {
                    tracing::warn!(
                        "the sandbox closed sockets faster than the proxy could read the kernel's notices: some connections to ports without a door were refused without a record"
                    );
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => {
                tracing::warn!(%error, "the watch of the sandbox's closed sockets failed: connections to ports without a door are refused but no longer recorded");
                return;
            }
        }
    }
    // Shutdown: the sandbox has ended, and its last sockets' notices are queued already.
    // Everything queued is read, past a datagram not from the kernel or an overrun.
    loop {
        match read_notices(&watch, &mut buffer) {
            Ok(Some(sockets)) => record_missed(&sockets, &door_ports, &shared).await,
            Ok(None) => {}
            Err(error)
                if error.raw_os_error() == Some(rustix::io::Errno::NOBUFS.raw_os_error()) => {}
            Err(_) => break,
        }
    }
}

/// One datagram from the watch, without waiting: its sockets, `None` for a datagram not
/// from the kernel; `WouldBlock` when nothing is queued.
fn read_notices(watch: &impl AsFd, buffer: &mut [u8]) -> io::Result<Option<Vec<ClosedSocket>>> {
    let (length, _, sender) = rustix::net::recvfrom(watch, &mut *buffer, RecvFlags::DONTWAIT)?;
    let from_kernel = sender
        .and_then(|sender| SocketAddrNetlink::try_from(sender).ok())
        .is_some_and(|sender| sender.pid() == 0);
    if !from_kernel {
        return Ok(None);
    }
    Ok(Some(closed_sockets(
        buffer.get(..length).unwrap_or_default(),
    )))
}

async fn record_missed(sockets: &[ClosedSocket], door_ports: &BTreeSet<u16>, shared: &Shared) {
    let Some(names) = shared.names.get() else {
        return;
    };
    for socket in sockets
        .iter()
        .filter(|socket| missed_every_door(socket, door_ports))
    {
        judge(socket, names, shared).record().await;
    }
}

/// The record of one attempt no door received: judged as `CONNECT name:port`, and
/// refused whatever the policy says, since nothing carried it.
fn judge(socket: &ClosedSocket, names: &NameAddresses, shared: &Shared) -> Attempt {
    let gate = &shared.gate;
    let client = (!socket.source.ip().is_unspecified()).then_some(SocketAddr::V4(socket.source));
    let mut attempt = Attempt::new(gate.audit(), Kind::Tcp, client);
    let port = socket.destination_port;
    match names.name_at(socket.destination) {
        None => {
            attempt.host = socket.destination.to_string();
            attempt.port = Some(port);
            attempt.set_outcome(Outcome::Blocked, Reason::NotAllowed, None);
        }
        Some(name) => {
            // No port is ever 0, so a forgotten port is judged as one no rule allows.
            match gate.verdict(&mut attempt, &Target::Name(name), port) {
                // Refused by the policy: its reason stands.
                Err(_) => {}
                // Allowed, but past the raw doors' bound: no door was there to carry it.
                Ok(decision) if decision.verdict == Verdict::Allow => {
                    attempt.set_outcome(Outcome::Blocked, Reason::Limit, None);
                }
                // Report mode would have let it through, but nothing carried it: blocked,
                // for the reason enforcing would give.
                Ok(decision) => {
                    attempt.set_outcome(Outcome::Blocked, decision.reason, decision.rule.as_ref());
                }
            }
        }
    }
    if port == 0 {
        attempt.port = None;
    }
    attempt
}

#[cfg(test)]
mod tests;
