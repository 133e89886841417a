//! Host paths mounted into the sandbox: the source must exist and not be a socket, the
//! target must not cover what the sandbox's own set-up needs.

use std::path::{Path, PathBuf};

use super::{SpecError, invalid};

/// A host path mounted into the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mount {
    /// Absolute, canonical host path.
    pub source: PathBuf,
    /// Absolute path in the sandbox.
    pub target: String,
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
    // Where the sandbox's start gate lives (container::GATE_PATH).
    "/.egress-sandbox",
];

pub(super) fn check_mount(source: &Path, target: &str, writable: bool) -> Result<Mount, SpecError> {
    let shown = format!("{}:{target}", source.display());
    let canonical = std::fs::canonicalize(source)
        .map_err(|error| invalid("--mount", &shown, format!("source: {error}")))?;
    let metadata = std::fs::metadata(&canonical)
        .map_err(|error| invalid("--mount", &shown, format!("source: {error}")))?;
    {
        use std::os::unix::fs::FileTypeExt;
        if metadata.file_type().is_socket() {
            // A socket (the Docker socket above all) would be a way out around the proxy.
            return Err(invalid(
                "--mount",
                &shown,
                "the source is a socket, which would be a way out of the sandbox",
            ));
        }
    }
    if !target.starts_with('/') {
        return Err(invalid(
            "--mount",
            &shown,
            "the target must be an absolute path",
        ));
    }
    let normalized = target.trim_end_matches('/');
    let normalized = if normalized.is_empty() {
        "/"
    } else {
        normalized
    };
    if RESERVED_TARGETS.contains(&normalized)
        || normalized.starts_with("/.egress-sandbox/")
        || normalized.contains(',')
    {
        return Err(invalid(
            "--mount",
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
        let socket = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert!(check_mount(&socket, "/var/run/docker.sock", false).is_err());
    }
}
