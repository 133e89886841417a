//! The sandbox's `/etc/resolv.conf` names the proxy, not Docker's embedded resolver.
//!
//! On a user-defined network Docker points every container at 127.0.0.11, a resolver of
//! its own that forwards what it does not know to the configured server (the proxy) but
//! answers by itself the names and addresses of the containers on the network: a reverse
//! lookup of the proxy's address (the sandbox has it, in `HTTP_PROXY`) gave the proxy
//! container's name and with it the run id, and a lookup of either container's name its
//! address — answers that reached no proxy and left no audit record. So on a local engine
//! each run writes a one-line file in a private host directory, naming the proxy's address
//! on the run network, and bind-mounts it read-only over `/etc/resolv.conf`: every lookup
//! goes to the proxy's DNS door, where it is judged and recorded like any other. The one
//! name the proxy answers without a record is the sandbox's own host name (handed over at
//! the claim): glibc asks DNS for its AAAA record, which `/etc/hosts` lacks, whenever a
//! program looks up its own host. A remote engine cannot mount a host file: its sandboxes
//! keep Docker's resolver (every other name still goes to the proxy). The directory goes
//! with the run. A program that sends raw UDP to 127.0.0.11 still reaches Docker's resolver
//! (the sandbox cannot be given rules of its own from outside): what it can learn there is
//! in the book's known limits.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use bollard::models::ContainerCreateBody;

use crate::docker::bind_mount;
use crate::host_dirs;
use crate::labels::Owner;

/// Where the C library (and every resolver that follows it) reads its name servers.
pub(crate) const RESOLV_CONF: &str = "/etc/resolv.conf";

/// The run's resolv.conf file on the host, removed with its directory when dropped.
pub(crate) struct ResolvConf {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl ResolvConf {
    /// A file naming `nameserver` alone (mode 0644: the sandbox's user reads it).
    pub(crate) fn create(nameserver: Ipv4Addr, owner: &Owner) -> std::io::Result<ResolvConf> {
        use std::os::unix::fs::PermissionsExt;
        let dir = host_dirs::create(owner)?;
        let file = dir.path().join("resolv.conf");
        std::fs::write(&file, contents(nameserver))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
        Ok(ResolvConf { _dir: dir, file })
    }

    /// Adds the read-only mount over [`RESOLV_CONF`] to the sandbox's create request.
    pub(crate) fn add_to(&self, body: &mut ContainerCreateBody) {
        let host = body.host_config.get_or_insert_with(Default::default);
        host.mounts
            .get_or_insert_with(Vec::new)
            .push(bind_mount(&self.file, RESOLV_CONF, true));
    }
}

/// No search domains (a short name is asked as it is, once) and one server: the proxy.
fn contents(nameserver: Ipv4Addr) -> String {
    format!("nameserver {nameserver}\noptions ndots:0\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::MountType;

    #[test]
    fn the_file_names_the_proxy_alone_and_is_mounted_read_only_over_resolv_conf() {
        let proxy = Ipv4Addr::new(10, 213, 0, 10);
        let resolv = ResolvConf::create(proxy, &Owner::current().unwrap()).unwrap();
        let written = std::fs::read_to_string(&resolv.file).unwrap();
        assert_eq!(written, "nameserver 10.213.0.10\noptions ndots:0\n");
        let mut body = ContainerCreateBody::default();
        resolv.add_to(&mut body);
        let mounts = body.host_config.unwrap().mounts.unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].target.as_deref(), Some(RESOLV_CONF));
        assert_eq!(mounts[0].read_only, Some(true));
        assert_eq!(mounts[0].typ, Some(MountType::BIND));
        assert_eq!(
            mounts[0].source.as_deref(),
            Some(resolv.file.display().to_string().as_str())
        );
    }

    #[test]
    fn the_directory_goes_when_the_run_drops_it() {
        let resolv =
            ResolvConf::create(Ipv4Addr::new(10, 213, 0, 2), &Owner::current().unwrap()).unwrap();
        let file = resolv.file.clone();
        assert!(file.exists());
        drop(resolv);
        assert!(!file.exists());
    }
}
