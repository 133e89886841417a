//! How a run's sandbox reaches its proxy.
//!
//! On a local engine the sandbox has **no network** (`--network none`): nothing but its own
//! loopback. Its launcher binds the proxy's doors there (127.0.0.1:3128, :53, :443, :80) and
//! passes the listening sockets to the proxy through a Unix socket in a host directory both
//! containers mount (the proxy's passed listeners), before the command runs. The proxy
//! sits on the egress network alone and accepts the sandbox's connections on those sockets.
//! So a run creates no network, no endpoint for the sandbox and no second leg for the proxy:
//! measured on this engine, those were a third of a cold run's time, and the sandbox has no
//! interface, no gateway, no ARP neighbour and no Docker resolver to reach anything through.
//!
//! A remote engine can mount no host directory and runs no launcher, and some OCI runtimes put
//! something between the sandbox's sockets and the host's across which no socket can be
//! passed (gVisor with its own network stack, Kata's VM; which ones is `runtime`'s
//! judgement, from the engine's registration). Such runs get the per-run network wiring:
//! both containers on an internal network of the run's own (`network`), the proxy connected
//! to the egress network as well.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::labels::Owner;
use crate::network::RunSubnet;

/// Where the doors directory appears in the proxy container (read-write: the proxy makes
/// its Unix socket there).
pub(crate) const PROXY_DOORS_DIR: &str = "/doors";
/// Where it appears in the sandbox (read-only: the launcher only connects).
pub(crate) const SANDBOX_DOORS_DIR: &str = "/.egress-sandbox/doors";

/// How a run's two containers are wired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wiring {
    /// The sandbox has no network; its launcher passes the doors bound on its loopback to the
    /// proxy through `doors` (a host directory), and the proxy is on the egress network
    /// only. Needs the launcher, so a local engine.
    PassedListeners { doors: PathBuf },
    /// Both containers on the run's internal network (remote engines, runtimes other than
    /// runc).
    RunNetwork { network: String, subnet: RunSubnet },
}

impl Wiring {
    /// The proxy's address as the sandbox sees it: what `HTTP_PROXY` and resolv.conf name.
    pub(crate) fn proxy_ip(&self) -> Ipv4Addr {
        match self {
            Wiring::PassedListeners { .. } => Ipv4Addr::LOCALHOST,
            Wiring::RunNetwork { subnet, .. } => subnet.proxy(),
        }
    }
}

/// The proxy's Unix socket, as the proxy and as the sandbox name it.
pub(crate) fn proxy_socket() -> String {
    format!("{PROXY_DOORS_DIR}/{}", egress_core::doors::SOCKET_NAME)
}

pub(crate) fn sandbox_socket() -> String {
    format!("{SANDBOX_DOORS_DIR}/{}", egress_core::doors::SOCKET_NAME)
}

/// A run's doors directory on the host, removed when dropped. It sits in a private
/// directory (mode 0700) of its own, so no other user of the host can reach the proxy's
/// socket, and is itself open to both containers' user (mode 0777: the proxy, user 65534,
/// makes its socket there without this process having to own files as that user).
pub(crate) struct DoorsDir {
    _private: tempfile::TempDir,
    path: PathBuf,
}

impl DoorsDir {
    pub(crate) fn create(owner: &Owner) -> std::io::Result<DoorsDir> {
        use std::os::unix::fs::PermissionsExt;
        let private = super::host_dirs::create(owner)?;
        let path = private.path().join("doors");
        std::fs::create_dir(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))?;
        Ok(DoorsDir {
            _private: private,
            path,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_doors_directory_is_open_inside_a_private_one_and_goes_when_dropped() {
        let doors = DoorsDir::create(&Owner::current().unwrap()).unwrap();
        let path = doors.path().to_path_buf();
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o777);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        drop(doors);
        assert!(!path.exists());
        assert!(!path.parent().unwrap().exists());
    }

    #[test]
    fn the_sandbox_finds_the_proxy_on_its_loopback_only_when_listeners_are_passed() {
        let passed = Wiring::PassedListeners {
            doors: "/tmp/x".into(),
        };
        assert_eq!(passed.proxy_ip(), Ipv4Addr::LOCALHOST);
        let network = Wiring::RunNetwork {
            network: "net".into(),
            subnet: RunSubnet {
                subnet: "10.213.0.8/29".parse().unwrap(),
            },
        };
        assert_eq!(network.proxy_ip(), Ipv4Addr::new(10, 213, 0, 10));
        assert_eq!(proxy_socket(), "/doors/listeners.sock");
        assert_eq!(sandbox_socket(), "/.egress-sandbox/doors/listeners.sock");
    }
}
