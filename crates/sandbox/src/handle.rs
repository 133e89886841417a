//! [`Sandbox`]: the handle every caller runs sandboxes through.

use crate::network::NetworkError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::docker::DockerEngine;
use crate::engine::ContainerEngine;
use crate::images::{self, ImageError, Progress};
use crate::labels::Owner;
use crate::outcome::RunError;

/// Where progress of long steps goes (see [`Sandbox::on_progress`]).
pub type ProgressFn = dyn Fn(&Progress) + Send + Sync;

/// The handle every caller runs sandboxes through — the `run` command, the
/// `serve` daemon and programs that embed the library.
///
/// A handle is made once: it connects to the engine, resolves the proxy binary it was
/// given to one file (the proxy image and the sandbox's launcher are made from it: the
/// static helper, which [`Sandbox::connect_with_helper`] finds and checks, or the
/// `egress-sandbox` command itself), and identifies this process for the owner label that
/// `gc` reads. Then it runs any number of [`RunSpec`](crate::RunSpec)s, one after another
/// or concurrently (it is cheap to clone; clones share one engine connection).
///
/// The library prints nothing: output and audit records go to the
/// [`OutputSinks`](crate::OutputSinks) of each run, progress of long steps (building the
/// base image) to the callback given to [`Sandbox::on_progress`], else to `tracing` (info
/// level).
///
/// ```no_run
/// use std::time::Duration;
/// use egress_sandbox::events::Outcome;
/// use egress_sandbox::{OutputSinks, RunEvent, RunSpec, RunStatus, Sandbox};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// // The helper binary (egress-sandbox-helper) found beside this program or on PATH and
/// // checked by its version; the proxy image is made from it.
/// let sandbox = Sandbox::connect_with_helper()
///     .await?
///     .on_progress(|progress| tracing::info!("{progress}"));
/// let spec = RunSpec::builder(["python3", "-c", "print('hello')"])
///     .allow("api.openai.com")
///     .timeout(Duration::from_secs(20))
///     .build()?; // policies and limits checked here, before Docker is touched
/// // A bounded channel: a full one makes the run wait, so it is read while the run goes on.
/// let (events, mut received) = tokio::sync::mpsc::channel(64);
/// let follower = tokio::spawn(async move {
///     let mut refused = Vec::new(); // the hosts the proxy refused, from typed records
///     while let Some(event) = received.recv().await {
///         if let RunEvent::Audit(entry) = event
///             && let Some(record) = entry.attempt()
///             && record.decision == Outcome::Blocked
///         {
///             refused.push(record.host.clone());
///         }
///     }
///     refused
/// });
/// let outcome = sandbox
///     .run(spec, OutputSinks::stdio().with_events(events))
///     .await?;
/// let refused = follower.await?; // ends once every event is delivered
/// if outcome.status == RunStatus::Exited && outcome.attempts.blocked > 0 {
///     for group in &outcome.blocked {
///         tracing::warn!("refused: {}", group.describe());
///     }
///     tracing::warn!("the proxy refused {}", refused.join(", "));
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    engine: Arc<dyn ContainerEngine>,
    proxy_binary: PathBuf,
    owner: Owner,
    progress: Option<Arc<ProgressFn>>,
    /// The private link (or copy) of the binary [`Sandbox::keep_binary`] made; removed with
    /// the last clone of the handle.
    kept_binary: Option<Arc<tempfile::TempDir>>,
    /// The sha256 of the kept binary as it was kept: what it must still hold when an image
    /// is made from it.
    kept_sha256: Option<String>,
    /// The proxy image once made or found: later runs use it as long as it exists, without
    /// reading the binary again (which may since have been replaced on disk).
    proxy_image: Arc<Mutex<Option<String>>>,
    /// Images' own CA bundles, by image id, once read: later runs of the same image need
    /// no probe container (a daemon's warm slots each mount a bundle). An id names the
    /// image's content, so an entry never goes stale; the map is only bounded.
    image_bundles: Arc<Mutex<HashMap<String, Arc<[u8]>>>>,
}

/// Images whose bundle a handle keeps; one more starts the map afresh.
const IMAGE_BUNDLES_KEPT: usize = 16;

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("engine", &self.inner.engine.host())
            .field("proxy_binary", &self.inner.proxy_binary)
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Checks that `network` exists as a run would (the tool's own egress network is made
    /// on first use), so a caller can refuse a configuration before any run fails on it.
    pub async fn check_egress_network(&self, network: &str) -> Result<(), NetworkError> {
        crate::network::egress_network(self.engine(), Some(network))
            .await
            .map(drop)
    }

    /// Connects to the Docker engine the way the docker CLI does (`DOCKER_HOST`, else the
    /// local socket), then as [`with_engine`](Self::with_engine). A proxy binary that
    /// cannot be found is refused before the engine is asked anything.
    pub async fn connect(proxy_binary: impl AsRef<Path>) -> Result<Sandbox, RunError> {
        let proxy_binary = resolve_binary(proxy_binary.as_ref())?;
        let engine = DockerEngine::connect().await?;
        Sandbox::with_engine(Arc::new(engine), proxy_binary)
    }

    /// A handle on `engine` (a [`DockerEngine`], or a fake in tests) whose proxy image and
    /// launcher are made from `proxy_binary`, a static `egress-sandbox` binary (the
    /// `egress-sandbox` command passes its own). The path is resolved (symlinks, relative
    /// paths) once, here.
    pub fn with_engine(
        engine: Arc<dyn ContainerEngine>,
        proxy_binary: impl AsRef<Path>,
    ) -> Result<Sandbox, RunError> {
        let proxy_binary = resolve_binary(proxy_binary.as_ref())?;
        let owner = Owner::current().map_err(RunError::Owner)?;
        tracing::debug!(
            host = engine.host(),
            proxy_binary = %proxy_binary.display(),
            "sandbox handle ready"
        );
        Ok(Sandbox {
            inner: Arc::new(Inner {
                engine,
                proxy_binary,
                owner,
                progress: None,
                kept_binary: None,
                kept_sha256: None,
                proxy_image: Arc::default(),
                image_bundles: Arc::default(),
            }),
        })
    }

    /// Sends progress of long steps (the first build of the base image takes minutes) to
    /// `report`, besides `tracing`. Without it, progress goes to `tracing` only.
    pub fn on_progress(self, report: impl Fn(&Progress) + Send + Sync + 'static) -> Sandbox {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        inner.progress = Some(Arc::new(report));
        Sandbox {
            inner: Arc::new(inner),
        }
    }

    /// Keeps the proxy binary as it is now, for a handle that lives long (a daemon): a
    /// private hard link to it (a copy when the cache directory is on another file
    /// system) under the cache directory, which the proxy image and every sandbox's launcher
    /// then use (the launcher through a link named by the binary's content, so no sandbox sees
    /// this path). Replacing or deleting the binary on disk (an upgrade, a rebuild) changes
    /// nothing for this handle. Removed when the last clone of the handle is dropped.
    ///
    /// Its sha256 is taken now; a kept binary whose content differs later (written to in
    /// place) is refused ([`ImageError::BinaryChanged`]) before an image is made from it.
    pub fn keep_binary(self) -> Result<Sandbox, RunError> {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        let cache = images::private_cache_dir()?;
        let (dir, kept) =
            keep(&cache, &inner.proxy_binary).map_err(|source| RunError::ProxyBinary {
                path: inner.proxy_binary.clone(),
                source,
            })?;
        let sha256 = images::content_sha256(&kept)?;
        tracing::debug!(kept = %kept.display(), %sha256, "proxy binary kept");
        inner.proxy_binary = kept;
        inner.kept_binary = Some(Arc::new(dir));
        inner.kept_sha256 = Some(sha256);
        // An image found for the old path stays right: it holds the same bytes.
        Ok(Sandbox {
            inner: Arc::new(inner),
        })
    }

    /// The engine this handle talks to.
    pub fn engine(&self) -> &dyn ContainerEngine {
        &*self.inner.engine
    }

    /// The engine, for what outlives a borrow of the handle (a run's teardown).
    pub(crate) fn shared_engine(&self) -> Arc<dyn ContainerEngine> {
        self.inner.engine.clone()
    }

    /// The proxy binary, resolved.
    pub fn proxy_binary(&self) -> &Path {
        &self.inner.proxy_binary
    }

    pub(crate) fn owner(&self) -> &Owner {
        &self.inner.owner
    }

    /// The proxy image for this handle's binary: the one kept from an earlier run while it
    /// exists, else found or made from the binary (and kept).
    pub(crate) async fn proxy_image(&self) -> Result<String, ImageError> {
        let kept = self.kept_proxy_image().clone();
        if let Some(tag) = kept
            && images::hand_out_proxy_image(self.engine(), &tag).await?
        {
            return Ok(tag);
        }
        let tag = match &self.inner.kept_sha256 {
            Some(sha256) => {
                images::ensure_proxy_image_of(self.engine(), self.proxy_binary(), sha256).await?
            }
            None => images::ensure_proxy_image(self.engine(), self.proxy_binary()).await?,
        };
        *self.kept_proxy_image() = Some(tag.clone());
        Ok(tag)
    }

    /// As if the proxy image `tag` had been made for this handle's binary: a handle on the
    /// fake engine skips the image's build (its binary is a stand-in, never executed).
    #[cfg(any(test, feature = "fake-engine"))]
    pub(crate) fn assume_proxy_image(self, tag: String) -> Sandbox {
        *self.kept_proxy_image() = Some(tag);
        self
    }

    fn kept_proxy_image(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // A panic elsewhere cannot leave a half-written Option behind.
        self.inner
            .proxy_image
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The CA bundle of the image with id `image_id`, if read before by this handle.
    pub(crate) fn kept_image_bundle(&self, image_id: &str) -> Option<Arc<[u8]>> {
        self.image_bundles().get(image_id).cloned()
    }

    /// Keeps the CA bundle read from the image with id `image_id` for later runs.
    pub(crate) fn keep_image_bundle(&self, image_id: &str, bundle: Arc<[u8]>) {
        let mut kept = self.image_bundles();
        if kept.len() >= IMAGE_BUNDLES_KEPT && !kept.contains_key(image_id) {
            kept.clear();
        }
        kept.insert(image_id.to_owned(), bundle);
    }

    fn image_bundles(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<[u8]>>> {
        self.inner
            .image_bundles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The default sandbox image (built on first use, with progress).
    pub(crate) async fn base_image(&self) -> Result<String, ImageError> {
        match self.inner.progress.clone() {
            Some(report) => {
                images::ensure_base_image_with(self.engine(), move |step| {
                    tracing::debug!("{step}");
                    report(step);
                })
                .await
            }
            None => images::ensure_base_image(self.engine()).await,
        }
    }
}

/// The binary's canonical path; it must be a file.
fn resolve_binary(given: &Path) -> Result<PathBuf, RunError> {
    let refused = |source| RunError::ProxyBinary {
        path: given.to_path_buf(),
        source,
    };
    let path = std::fs::canonicalize(given).map_err(refused)?;
    if !std::fs::metadata(&path).map_err(refused)?.is_file() {
        return Err(refused(std::io::Error::other("not a file")));
    }
    Ok(path)
}

/// Directories of kept binaries under the cache directory: `kept-binary-<pid>-<random>`.
const KEPT_PREFIX: &str = "kept-binary-";

/// Links (else copies) `binary` into a new private directory under `cache` (the private
/// cache directory), after removing the directories of processes that are gone (a killed
/// daemon's).
fn keep(cache: &Path, binary: &Path) -> std::io::Result<(tempfile::TempDir, PathBuf)> {
    remove_kept_of_gone_processes(cache);
    let dir = tempfile::Builder::new()
        .prefix(&format!("{KEPT_PREFIX}{}-", std::process::id()))
        .tempdir_in(cache)?;
    let kept = dir.path().join("egress-sandbox");
    super::launcher_binary::link_or_copy(binary, &kept)?;
    Ok((dir, kept))
}

fn remove_kept_of_gone_processes(cache: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(KEPT_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
