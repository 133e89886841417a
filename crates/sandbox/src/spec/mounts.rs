//! Host paths mounted into the sandbox: the source must exist and not be a socket, the
//! target must not cover what the sandbox's own set-up needs.

use std::path::{Path, PathBuf};

use super::{Field, SpecError, invalid};

/// A host path mounted into the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mount {
    /// Absolute, canonical host path.
    pub source: PathBuf,
    /// Absolute path in the sandbox.
    pub target: String,
    /// Whether the sandbox may write to it; read-only otherwise.
    pub writable: bool,
}

/// Paths where a mount would break the sandbox's own set-up.
const RESERVED_TARGETS: &[&str] = &[
    "/",
    "/tmp",
    "/proc",
    "/sys",
    "/dev",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/hostname",
    // Where the sandbox's start launcher lives (container::LAUNCHER_PATH).
    "/.egress-sandbox",
];

pub(super) fn check_mount(source: &Path, target: &str, writable: bool) -> Result<Mount, SpecError> {
    let shown = format!("{}:{target}", source.display());
    let canonical = std::fs::canonicalize(source)
        .map_err(|error| invalid(Field::Mounts, &shown, format!("source: {error}")))?;
    let metadata = std::fs::metadata(&canonical)
        .map_err(|error| invalid(Field::Mounts, &shown, format!("source: {error}")))?;
    {
        use std::os::unix::fs::FileTypeExt;
        if metadata.file_type().is_socket() {
            // A socket (the Docker socket above all) would be a way out around the proxy.
            return Err(invalid(
                Field::Mounts,
                &shown,
                "the source is a socket, which would be a way out of the sandbox",
            ));
        }
    }
    if !target.starts_with('/') {
        return Err(invalid(
            Field::Mounts,
            &shown,
            "the target must be an absolute path",
        ));
    }
    // Judged as the kernel resolves it: `/etc//resolv.conf` and `/./etc/resolv.conf` are
    // /etc/resolv.conf (they passed, and replaced the sandbox's resolver); a `..` could
    // climb anywhere, so it is refused rather than resolved.
    let components: Vec<&str> = target
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    if components.contains(&"..") {
        return Err(invalid(
            Field::Mounts,
            &shown,
            "the target must not contain `..`",
        ));
    }
    let normalized = format!("/{}", components.join("/"));
    let normalized = normalized.as_str();
    let under = |root: &str| {
        normalized
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
    };
    if RESERVED_TARGETS.contains(&normalized)
        || ["/.egress-sandbox", "/proc", "/sys"].into_iter().any(under)
        || normalized.contains(',')
    {
        return Err(invalid(
            Field::Mounts,
            &shown,
            format!("cannot mount over {normalized}"),
        ));
    }
    Ok(Mount {
        source: canonical,
        target: normalized.to_string(),
        writable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_checks_source_and_target() {
        let dir = tempfile::tempdir().unwrap();
        let mount = check_mount(dir.path(), "/data/", false).unwrap();
        assert_eq!(mount.target, "/data");
        assert!(check_mount(dir.path(), "relative", false).is_err());
        assert!(check_mount(dir.path(), "/tmp", false).is_err());
        assert!(check_mount(&dir.path().join("missing"), "/data", false).is_err());
        // Spelled otherwise, the reserved targets are still refused.
        for reserved in [
            "/etc//resolv.conf",
            "/./etc/resolv.conf",
            "//tmp/",
            "/proc/../etc",
            "/proc/sys",
            "/sys/fs/cgroup",
            "/.egress-sandbox/launcher",
        ] {
            assert!(
                check_mount(dir.path(), reserved, false).is_err(),
                "{reserved}"
            );
        }
        assert_eq!(
            check_mount(dir.path(), "//data/./x/", false)
                .unwrap()
                .target,
            "/data/x"
        );
        let socket = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert!(check_mount(&socket, "/var/run/docker.sock", false).is_err());
    }
}
