//! The sandbox trusts the run CA (`docs/src/guide/credentials.md`) without anything written into
//! its image.
//!
//! The sandbox container is created alongside the proxy, before the run CA exists (it is
//! born in the proxy and published in its ready line). So each run makes an empty file in
//! a private host directory and bind-mounts it read-only twice: over the image's own bundle
//! [`IMAGE_BUNDLE`] (what tools that read no variable trust) and at [`BUNDLE_PATH`] (what
//! the variables name, present even where the image has no bundle). Once the proxy is
//! ready the file is filled — the image's own bundle, then the run CA — before the
//! sandbox's launcher opens.
//!
//! The image's bundle cannot be read from the sandbox's container: the mount covers it
//! there. It is read from a probe container instead — created from the same image, never
//! started, no network — through the archive API (a tar stream), then the probe is
//! removed. The probe runs alongside the proxy's start, so it costs the run CPU, not
//! waiting (README: Credentials). The directory goes with the run.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bollard::models::{ContainerCreateBody, HostConfig};
use futures_util::TryStreamExt;

use crate::docker::bind_mount;
use crate::engine::{ContainerConfig, ContainerEngine};
use crate::host_dirs;
use crate::labels::Owner;
use crate::teardown::Teardown;

/// Where the sandbox sees the bundle, whatever its image; the variables name it.
pub(crate) const BUNDLE_PATH: &str = "/etc/egress-sandbox/ca-bundle.crt";
/// The image's own bundle (Debian and derivatives, Alpine, Fedora through a link): the
/// run's bundle is mounted over it too.
pub(crate) const IMAGE_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
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
#[non_exhaustive]
pub enum TrustError {
    /// The host file for the bundle could not be created.
    #[error("cannot create the sandbox's CA bundle file")]
    Create(#[source] std::io::Error),
    /// The container that reads the image's bundle could not be created.
    #[error("cannot create a container to read the image's CA bundle {IMAGE_BUNDLE}")]
    Probe(#[source] crate::engine::DockerError),
    /// The image's bundle could not be copied out of that container.
    #[error("cannot read the image's CA bundle {IMAGE_BUNDLE}")]
    Download(#[source] crate::engine::DockerError),
    /// The archive holding the image's bundle could not be read.
    #[error("cannot read the image's CA bundle {IMAGE_BUNDLE}")]
    Archive(#[source] std::io::Error),
    /// The bundle could not be written to its host file.
    #[error("cannot write the sandbox's CA bundle")]
    Write(#[source] std::io::Error),
}

/// The run's bundle file on the host, removed with its directory when dropped.
pub(crate) struct TrustBundle {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl TrustBundle {
    /// An empty bundle file (mode 0644: the sandbox's user reads it through the mount).
    pub(crate) fn create(owner: &Owner) -> Result<TrustBundle, TrustError> {
        use std::os::unix::fs::PermissionsExt;
        let dir = host_dirs::create(owner).map_err(TrustError::Create)?;
        let file = dir.path().join("ca-bundle.crt");
        std::fs::write(&file, b"").map_err(TrustError::Create)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
            .map_err(TrustError::Create)?;
        Ok(TrustBundle { _dir: dir, file })
    }

    /// The bundle file on the host (the tests read it back).
    #[cfg(test)]
    pub(crate) fn host_path(&self) -> &Path {
        &self.file
    }

    /// Adds the read-only mounts to the sandbox's create request (the variables are in
    /// its environment already: [`set_variables`]).
    pub(crate) fn add_to(&self, body: &mut ContainerCreateBody) {
        let host = body.host_config.get_or_insert_with(Default::default);
        let mounts = host.mounts.get_or_insert_with(Vec::new);
        for target in [BUNDLE_PATH, IMAGE_BUNDLE] {
            mounts.push(bind_mount(&self.file, target, true));
        }
    }

    /// Writes `image_bundle` and then `run_ca` into the file, in place: the bind mounts
    /// follow the inode.
    pub(crate) fn fill(&self, image_bundle: &[u8], run_ca: Option<&str>) -> Result<(), TrustError> {
        std::fs::write(&self.file, combine(image_bundle, run_ca)).map_err(TrustError::Write)
    }
}

/// Points every trust variable of `env` (`KEY=VALUE` entries) at [`BUNDLE_PATH`], replacing
/// any the caller gave: the environment of a sandbox whose policy inspects a host, which
/// always gets the bundle (a remote engine refuses such runs).
pub(crate) fn set_variables(env: &mut Vec<String>) {
    for variable in TRUST_VARIABLES {
        env.retain(|entry| !entry.starts_with(&format!("{variable}=")));
        env.push(format!("{variable}={BUNDLE_PATH}"));
    }
}

/// The image's bundle followed by the run CA, each ending in a newline.
fn combine(image_bundle: &[u8], run_ca: Option<&str>) -> Vec<u8> {
    let mut bundle = image_bundle.to_vec();
    if let Some(ca) = run_ca {
        if !bundle.is_empty() && !bundle.ends_with(b"\n") {
            bundle.push(b'\n');
        }
        bundle.extend_from_slice(ca.as_bytes());
        if !bundle.ends_with(b"\n") {
            bundle.push(b'\n');
        }
    }
    bundle
}

/// The name of the run's probe container, next to its sandbox's.
pub(crate) fn probe_name(sandbox: &str) -> String {
    format!("{sandbox}-ca-probe")
}

/// The image's own bundle (empty when it has none), read from a probe container named
/// `name`: created from `image` with `labels` (so teardown and `gc` know it), never
/// started, no network; removed once read.
pub(crate) async fn image_bundle(
    engine: &Arc<dyn ContainerEngine>,
    teardown: &Teardown,
    image: &str,
    name: &str,
    labels: &HashMap<String, String>,
) -> Result<Vec<u8>, TrustError> {
    let config = ContainerConfig::new(ContainerCreateBody {
        image: Some(image.to_owned()),
        // Never run: a command only so that an image without one can be created.
        entrypoint: Some(vec!["/nonexistent-never-started".into()]),
        cmd: Some(Vec::new()),
        labels: Some(labels.clone()),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    });
    teardown.track_container(name);
    let creation = {
        let (engine, name) = (engine.clone(), name.to_owned());
        async move { engine.create_container(&name, config).await }
    };
    teardown
        .complete(creation)
        .await
        .map_err(TrustError::Probe)?;
    let read = read_file(&**engine, name, IMAGE_BUNDLE).await;
    match engine.ensure_container_removed(name).await {
        Ok(()) => teardown.forget_container(name),
        Err(error) => tracing::debug!(%error, "probe removal failed; teardown retries"),
    }
    read
}

/// The file at `path` in the container (one symbolic link followed); empty when the image
/// has none.
async fn read_file(
    engine: &dyn ContainerEngine,
    container: &str,
    path: &str,
) -> Result<Vec<u8>, TrustError> {
    let mut path = path.to_owned();
    for _ in 0..2 {
        let mut stream = engine.download_from_container(container, &path);
        let mut archive = Vec::new();
        loop {
            match stream.try_next().await {
                Ok(Some(chunk)) => archive.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(error) if error.is_not_found() => return Ok(Vec::new()),
                Err(error) => return Err(TrustError::Download(error)),
            }
            // The tar headers and padding on top of the largest bundle taken.
            if archive.len() as u64 > MAX_IMAGE_BUNDLE + (64 << 10) {
                return Err(TrustError::Archive(std::io::Error::other(format!(
                    "larger than {MAX_IMAGE_BUNDLE} bytes"
                ))));
            }
        }
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
        let bundle = TrustBundle::create(&Owner::current().unwrap()).unwrap();
        let mut body = ContainerCreateBody::default();
        bundle.add_to(&mut body);
        let mut env = vec!["SSL_CERT_FILE=/elsewhere".into(), "FOO=bar".into()];
        set_variables(&mut env);
        assert!(env.contains(&"FOO=bar".to_string()));
        for variable in TRUST_VARIABLES {
            assert_eq!(
                env.iter()
                    .filter(|entry| entry.starts_with(&format!("{variable}=")))
                    .collect::<Vec<_>>(),
                [&format!("{variable}={BUNDLE_PATH}")]
            );
        }
        let mounts = body.host_config.unwrap().mounts.unwrap();
        let targets: Vec<_> = mounts
            .iter()
            .map(|m| m.target.as_deref().unwrap())
            .collect();
        assert_eq!(targets, [BUNDLE_PATH, IMAGE_BUNDLE]);
        for mount in &mounts {
            assert_eq!(mount.read_only, Some(true));
            assert_eq!(
                mount.source.as_deref(),
                Some(&*bundle.host_path().display().to_string())
            );
        }
        let dir = bundle.host_path().parent().unwrap().to_path_buf();
        drop(bundle);
        assert!(!dir.exists(), "the private directory goes with the run");
    }

    #[test]
    fn the_bundle_is_the_image_bundle_then_the_run_ca() {
        let ca = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----";
        assert_eq!(
            combine(b"IMAGE", Some(ca)),
            format!("IMAGE\n{ca}\n").into_bytes()
        );
        // An image without a bundle: the run CA alone.
        assert_eq!(combine(b"", Some(ca)), format!("{ca}\n").into_bytes());
        assert_eq!(combine(b"IMAGE\n", None), b"IMAGE\n");

        let bundle = TrustBundle::create(&Owner::current().unwrap()).unwrap();
        bundle.fill(b"IMAGE\n", Some(ca)).unwrap();
        assert_eq!(
            std::fs::read(bundle.host_path()).unwrap(),
            format!("IMAGE\n{ca}\n").into_bytes()
        );
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
