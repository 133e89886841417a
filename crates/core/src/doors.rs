//! Where a sandbox's doors are: the addresses its launcher binds on the sandbox's loopback
//! and passes to the proxy over a Unix socket in a directory both containers mount.

use std::net::SocketAddrV4;

/// The file name of the proxy's Unix socket in the directory both containers mount.
pub const SOCKET_NAME: &str = "listeners.sock";

/// The most raw doors (one per port) one pass carries.
pub const MAX_RAW_DOORS: usize = 64;
/// Where the launcher binds each door in the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DoorAddrs {
    /// The explicit proxy (CONNECT and absolute-form HTTP): what `HTTP_PROXY` names.
    pub explicit: SocketAddrV4,
    /// The DNS responder, UDP and TCP on the same address.
    pub dns: Option<SocketAddrV4>,
    /// Transparent doors: TLS by SNI, HTTP by `Host` (the port says which).
    pub transparent: Vec<SocketAddrV4>,
    /// Raw doors: any TCP protocol, the target named by the address reached (at most
    /// [`MAX_RAW_DOORS`]).
    pub raw: Vec<SocketAddrV4>,
    /// Whether to pass a watch of the closed TCP sockets of the namespace the doors are
    /// bound in (`refused_ports`).
    pub closed_sockets: bool,
}
