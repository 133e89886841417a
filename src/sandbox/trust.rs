//! The sandbox trusts the run CA (INTERFACE.md B1) without anything written into its image.
//!
//! The sandbox container is created alongside the proxy, before the run CA exists (it is
//! born in the proxy and published in its ready line). So each run makes an empty file in
//! a private host directory, bind-mounts it read-only at [`BUNDLE_PATH`], and once the
//! proxy is ready fills it — the image's own bundle, read from the created container
//! through the archive API, then the run CA — before the sandbox's gate opens. The
//! variables that common TLS clients read point at it. The directory goes with the run.

use std::io::Read;
use std::path::{Path, PathBuf};

use bollard::models::{ContainerCreateBody, Mount, MountType};
use bollard::query_parameters::DownloadFromContainerOptions;
use futures_util::TryStreamExt;

use super::docker::{Engine, is_not_found};

/// Where the sandbox sees the bundle.
pub const BUNDLE_PATH: &str = "/etc/egress-sandbox/ca-bundle.crt";
/// The image's own bundle (Debian and derivatives).
const IMAGE_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The variables TLS clients read for their trust store: OpenSSL (Python, git's curl),
/// requests, curl, Node (added to its own roots), git.
const TRUST_VARIABLES: [&str; 5] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
];
/// A system bundle is a few hundred KiB; refuse to buffer anything far larger.
const MAX_IMAGE_BUNDLE: u64 = 16 << 20;

/// Why the sandbox's trust bundle could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("cannot create the sandbox's CA bundle file: {0}")]
    Create(#[source] std::io::Error),
    #[error("cannot read the image's CA bundle {IMAGE_BUNDLE}: {0}")]
    Download(#[source] bollard::errors::Error),
    #[error("cannot read the image's CA bundle {IMAGE_BUNDLE}: {0}")]
    Archive(#[source] std::io::Error),
    #[error("cannot write the sandbox's CA bundle: {0}")]
    Write(#[source] std::io::Error),
}

/// The run's bundle file on the host, removed with its directory when dropped.
pub struct TrustBundle {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl TrustBundle {
    /// An empty bundle file (mode 0644: the sandbox's user reads it through the mount).
    pub fn create() -> Result<TrustBundle, TrustError> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("egress-sandbox-trust-")
            .tempdir()
            .map_err(TrustError::Create)?;
        let file = dir.path().join("ca-bundle.crt");
        std::fs::write(&file, b"").map_err(TrustError::Create)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
            .map_err(TrustError::Create)?;
        Ok(TrustBundle { _dir: dir, file })
    }

    pub fn host_path(&self) -> &Path {
        &self.file
    }

    /// Adds the read-only mount and the trust variables to the sandbox's create request.
    pub fn add_to(&self, body: &mut ContainerCreateBody) {
        let host = body.host_config.get_or_insert_with(Default::default);
        host.mounts.get_or_insert_with(Vec::new).push(Mount {
            target: Some(BUNDLE_PATH.into()),
            source: Some(self.file.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Mount::default()
        });
        set_env(body.env.get_or_insert_with(Vec::new));
    }
}

/// Points the trust variables at the bundle in `env` (the create request's, or the gate
/// signal's, which goes over the container's), replacing any of the same name.
pub fn set_env(env: &mut Vec<String>) {
    for variable in TRUST_VARIABLES {
        env.retain(|entry| !entry.starts_with(&format!("{variable}=")));
        env.push(format!("{variable}={BUNDLE_PATH}"));
    }
}

impl TrustBundle {

    /// Writes the image's bundle (from the created `container`) and then `run_ca` into the
    /// file, in place: the bind mount follows the inode.
    pub async fn fill(
        &self,
        engine: &Engine,
        container: &str,
        run_ca: Option<&str>,
    ) -> Result<(), TrustError> {
        let mut bundle = image_bundle(engine, container, IMAGE_BUNDLE).await?;
        if let Some(ca) = run_ca {
            if !bundle.is_empty() && !bundle.ends_with(b"\n") {
                bundle.push(b'\n');
            }
            bundle.extend_from_slice(ca.as_bytes());
            if !bundle.ends_with(b"\n") {
                bundle.push(b'\n');
            }
        }
        std::fs::write(&self.file, bundle).map_err(TrustError::Write)
    }
}

/// The file at `path` in the container (one symbolic link followed); empty when the image
/// has none.
async fn image_bundle(engine: &Engine, container: &str, path: &str) -> Result<Vec<u8>, TrustError> {
    let mut path = path.to_owned();
    for _ in 0..2 {
        let options = DownloadFromContainerOptions { path: path.clone() };
        let archive: Vec<u8> = match engine
            .docker()
            .download_from_container(container, Some(options))
            .map_ok(|chunk| chunk.to_vec())
            .try_concat()
            .await
        {
            Ok(archive) => archive,
            Err(error) if is_not_found(&error) => return Ok(Vec::new()),
            Err(error) => return Err(TrustError::Download(error)),
        };
        match first_entry(&archive).map_err(TrustError::Archive)? {
            Entry::File(contents) => return Ok(contents),
            Entry::Link(target) => {
                path = if target.starts_with('/') {
                    target
                } else {
                    let parent = Path::new(&path).parent().unwrap_or(Path::new("/"));
                    parent.join(target).display().to_string()
                };
            }
            Entry::Other => return Ok(Vec::new()),
        }
    }
    Ok(Vec::new())
}

enum Entry {
    File(Vec<u8>),
    Link(String),
    Other,
}

fn first_entry(archive: &[u8]) -> std::io::Result<Entry> {
    let mut archive = tar::Archive::new(archive);
    let Some(entry) = archive.entries()?.next() else {
        return Ok(Entry::Other);
    };
    let entry = entry?;
    let kind = entry.header().entry_type();
    if kind.is_symlink() {
        return Ok(match entry.link_name()? {
            Some(target) => Entry::Link(target.display().to_string()),
            None => Entry::Other,
        });
    }
    if !kind.is_file() {
        return Ok(Entry::Other);
    }
    let mut contents = Vec::new();
    entry.take(MAX_IMAGE_BUNDLE).read_to_end(&mut contents)?;
    Ok(Entry::File(contents))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_is_mounted_read_only_and_named_by_every_variable() {
        let bundle = TrustBundle::create().unwrap();
        let mut body = ContainerCreateBody {
            env: Some(vec!["SSL_CERT_FILE=/elsewhere".into(), "FOO=bar".into()]),
            ..ContainerCreateBody::default()
        };
        bundle.add_to(&mut body);
        let env = body.env.unwrap();
        for variable in TRUST_VARIABLES {
            assert_eq!(
                env.iter()
                    .filter(|entry| entry.starts_with(&format!("{variable}=")))
                    .collect::<Vec<_>>(),
                [&format!("{variable}={BUNDLE_PATH}")]
            );
        }
        let mounts = body.host_config.unwrap().mounts.unwrap();
        assert_eq!(mounts[0].target.as_deref(), Some(BUNDLE_PATH));
        assert_eq!(mounts[0].read_only, Some(true));
        let dir = bundle.host_path().parent().unwrap().to_path_buf();
        drop(bundle);
        assert!(!dir.exists(), "the private directory goes with the run");
    }

    #[test]
    fn a_tar_entry_is_read_as_file_or_link() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        builder
            .append_link(&mut header, "ca-certificates.crt", "../b.crt")
            .unwrap();
        let archive = builder.into_inner().unwrap();
        assert!(matches!(first_entry(&archive).unwrap(), Entry::Link(t) if t == "../b.crt"));

        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(3);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, "ca-certificates.crt", &b"pem"[..])
            .unwrap();
        let archive = builder.into_inner().unwrap();
        assert!(matches!(first_entry(&archive).unwrap(), Entry::File(c) if c == b"pem"));
    }
}
