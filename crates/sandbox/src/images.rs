//! The images a run needs, made on this machine, never pulled (there may be no registry).
//!
//! - The **proxy image** is `FROM scratch` plus this tool's own static binary, imported
//!   through the Docker API and tagged by the binary's content hash, so a rebuilt binary gets
//!   a new image and an unchanged one costs a `stat` and an image inspect per run.
//! - The **base image** (Debian bookworm minbase, python3, curl, ca-certificates) is built
//!   once with debootstrap and imported; a file lock keeps concurrent first runs from
//!   building it twice.
//! - `--image` is checked to exist locally; nothing is pulled.
//!
//! Everything that is cached on disk (hashes, locks, the build log) lives in
//! `cache_dir`.

mod base;
mod elf;
mod handed_out;
mod hash_cache;
mod proxy;
mod rootfs;
mod sweep;

use std::fs::{File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

use crate::engine::{ContainerEngine, DockerError};
use crate::private_dir::{self, PlaceError};

pub use base::{BASE_IMAGE, MIRROR_ENV};
/// Where the static binary sits in the proxy image (`/egress-sandbox`, its entrypoint).
pub use proxy::BINARY_IN_IMAGE as PROXY_BINARY_IN_IMAGE;
/// Repository of the proxy images; the tag is the first 16 hex digits of the binary's sha256.
pub const PROXY_REPOSITORY: &str = "egress-sandbox-proxy";

/// Label key on every image this module makes; the value says which (`proxy` or `base`).
pub(crate) const IMAGE_LABEL: &str = "egress-sandbox.image";

/// Why an image could not be provided. Each message says what was wrong and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    #[error(
        "image {image} not found locally: egress-sandbox never pulls images; check `docker images`, \
         build or load it on this machine (docker build, docker load), then pass its local name to --image"
    )]
    /// The image is not on the engine, and egress-sandbox never pulls one.
    Missing {
        /// The image asked for.
        image: String,
    },
    /// The image name is not a valid Docker reference.
    #[error("--image {image:?} is not a valid image reference: {message}")]
    InvalidReference {
        /// The name as given.
        image: String,
        /// What is wrong with it.
        message: String,
    },
    #[error(
        "{} is dynamically linked (it needs {interpreter}), so it cannot run in the FROM-scratch \
         proxy image; use a static build: `cargo build --release` inside the egress-sandbox \
         workspace makes one (its .cargo/config.toml sets +crt-static for the x86_64 and aarch64 \
         Linux targets), a build made elsewhere needs RUSTFLAGS='-C target-feature=+crt-static' \
         and an explicit --target",
        path.display()
    )]
    /// The binary meant for the proxy image is dynamically linked, so it cannot run in an empty image.
    NotStatic {
        /// The binary.
        path: PathBuf,
        /// The loader it needs.
        interpreter: String,
    },
    #[error(
        "{} is built for {binary} but the Docker engine runs {engine}, and the proxy image runs \
         this very binary on the engine; use an egress-sandbox built for {engine} ({build} in \
         the egress-sandbox workspace makes a static one), or an engine of this binary's \
         architecture",
        path.display()
    )]
    /// The binary meant for the proxy image is of another platform than the engine's.
    WrongPlatform {
        /// The binary.
        path: PathBuf,
        /// The binary's platform (`linux/<arch>`).
        binary: String,
        /// The engine's platform.
        engine: String,
        /// How to build a binary for the engine's platform, as the message suggests it.
        build: String,
    },
    #[error(
        "{} is not an executable ELF binary ({reason}); the proxy image is made from the static \
         egress-sandbox binary itself",
        path.display()
    )]
    /// The binary meant for the proxy image is not an executable ELF file.
    NotElf {
        /// The binary.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    #[error(
        "debootstrap is not installed; it is needed once, to build the default sandbox image: \
         apt-get install -y debootstrap (or pass --image with a local image)"
    )]
    /// `debootstrap`, which builds the default sandbox image, is not installed.
    DebootstrapMissing,
    /// Building an image failed.
    #[error("building the image {image} failed: {message}")]
    Build {
        /// The image being built.
        image: String,
        /// What failed.
        message: String,
    },
    #[error(
        "a Docker API request failed (is the Docker daemon running, and DOCKER_HOST right if set?)"
    )]
    /// An engine request failed.
    Docker(#[source] DockerError),
    /// A directory the step keeps files in is refused or cannot be made.
    #[error(transparent)]
    Place(#[from] PlaceError),
    #[error(
        "{} changed after egress-sandbox checked it (its sha256 is now {found}, not {expected}), \
         so nothing is run or imaged from it: remove it if it is a launcher's place (the next \
         run makes it again); restart the daemon if it is the binary a daemon kept",
        path.display()
    )]
    /// A file changed between its check and its use.
    BinaryChanged {
        /// The file.
        path: PathBuf,
        /// The sha256 it had when checked.
        expected: String,
        /// The sha256 it has now.
        found: String,
    },
    /// Reading or writing a file failed.
    #[error("{context}")]
    Io {
        /// What was being done, as the message says it.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Progress of a long step, for the caller to show (the library prints nothing). Its
/// `Display` is one line for a person, e.g. `building the base image: importing into
/// Docker`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress {
    /// Another process is building the base image; this one waits for it.
    WaitingForBaseImage,
    /// The base image is missing and its build begins (minutes).
    BuildingBaseImage {
        /// The image being built.
        image: String,
        /// The Debian mirror `debootstrap` fetches from.
        mirror: String,
        /// The file the build's output goes to.
        log: PathBuf,
    },
    /// A stage of the base image build (`debootstrap: …`, `importing into Docker` …).
    BaseImageStage(String),
    /// The base image was built.
    BaseImageReady {
        /// The image built.
        image: String,
        /// How long the build took.
        elapsed: std::time::Duration,
    },
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Progress::WaitingForBaseImage => f.write_str(
                "waiting for another egress-sandbox process to finish building the base image",
            ),
            Progress::BuildingBaseImage { image, mirror, log } => write!(
                f,
                "building the base image {image} (first use, ~2-8 min) from {mirror}; log: {}",
                log.display()
            ),
            Progress::BaseImageStage(stage) => write!(f, "building the base image: {stage}"),
            Progress::BaseImageReady { image, elapsed } => write!(
                f,
                "base image {image} ready after {}m{:02}s",
                elapsed.as_secs() / 60,
                elapsed.as_secs() % 60
            ),
        }
    }
}

impl ImageError {
    fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}

/// The proxy image for `binary` (a static egress-sandbox binary); returns its tag,
/// `egress-sandbox-proxy:<first 16 hex of sha256>`. Builds it when missing.
pub async fn ensure_proxy_image(
    engine: &dyn ContainerEngine,
    binary: &Path,
) -> Result<String, ImageError> {
    proxy::ensure(engine, &private_cache_dir()?, binary, None).await
}

/// As [`ensure_proxy_image`], for a binary whose sha256 must be `expected` (a kept binary):
/// [`ImageError::BinaryChanged`] if it is not, before any image is made from it.
pub(crate) async fn ensure_proxy_image_of(
    engine: &dyn ContainerEngine,
    binary: &Path,
    expected: &str,
) -> Result<String, ImageError> {
    proxy::ensure(engine, &private_cache_dir()?, binary, Some(expected)).await
}

/// For a caller that keeps the tag [`ensure_proxy_image`] gave: whether that image still
/// exists; if so it is marked as handed out (the sweep of other processes keeps it).
pub(crate) async fn hand_out_proxy_image(
    engine: &dyn ContainerEngine,
    tag: &str,
) -> Result<bool, ImageError> {
    if !image_exists(engine, tag).await? {
        return Ok(false);
    }
    handed_out::stamp(&private_cache_dir()?, tag);
    Ok(true)
}

/// The default sandbox image; returns its tag ([`BASE_IMAGE`]). The first call on a machine
/// builds it (a few minutes, progress to `tracing` at info level); concurrent callers wait
/// for that build.
pub async fn ensure_base_image(engine: &dyn ContainerEngine) -> Result<String, ImageError> {
    ensure_base_image_with(engine, |step| tracing::info!("{step}")).await
}

/// As [`ensure_base_image`], with each step of a build handed to `progress` instead.
pub(crate) async fn ensure_base_image_with(
    engine: &dyn ContainerEngine,
    progress: impl Fn(&Progress) + Send + Sync + 'static,
) -> Result<String, ImageError> {
    let progress: base::Report = std::sync::Arc::new(move |step: Progress| progress(&step));
    base::ensure(engine, &private_cache_dir()?, progress).await
}

/// For `--image`: Ok if `image` exists in the local engine, [`ImageError::Missing`] otherwise.
/// A reference the engine cannot parse (`UPPER/case`, `a@sha256:zz`) is the flag's fault,
/// said so, not the engine's (it was reported as "a Docker API request failed").
pub async fn require_local_image(
    engine: &dyn ContainerEngine,
    image: &str,
) -> Result<(), ImageError> {
    match engine.inspect_image(image).await {
        Ok(_) => Ok(()),
        Err(error) if error.is_not_found() => Err(ImageError::Missing {
            image: image.to_owned(),
        }),
        Err(error) => match error.status() {
            Some(400) => Err(ImageError::InvalidReference {
                image: image.to_owned(),
                message: error
                    .engine_message()
                    .unwrap_or("refused by the engine")
                    .to_owned(),
            }),
            _ => Err(ImageError::Docker(error)),
        },
    }
}

/// Removes images this tool made that nothing can use any more: proxy images of other
/// binaries not handed out for 30 minutes, and untagged leftovers of concurrent builds.
/// Never fails (images in use are kept); returns how many were removed. For `gc`; image
/// builds also run it.
pub async fn sweep_images(engine: &dyn ContainerEngine) -> usize {
    match private_cache_dir() {
        Ok(cache) => sweep::remove_leftover_images(engine, &cache, None).await,
        // Its stamps say which images to keep: not read from a place others control.
        Err(error) => {
            let error = crate::outcome::with_causes(&error);
            tracing::warn!(%error, "images not swept");
            0
        }
    }
}

/// `$XDG_CACHE_HOME/egress-sandbox`, else `~/.cache/egress-sandbox`, else `cache` in the
/// running user's private temporary directory (`$TMPDIR/egress-sandbox-<uid>/cache`: a root
/// service without `HOME` has a private place too). Created and checked on use
/// (`private_cache_dir`), not here.
pub(crate) fn cache_dir() -> PathBuf {
    let from_env = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(xdg) = from_env("XDG_CACHE_HOME") {
        xdg.join("egress-sandbox")
    } else if let Some(home) = from_env("HOME") {
        home.join(".cache").join("egress-sandbox")
    } else {
        private_dir::user_temp_dir().join("cache")
    }
}

/// [`cache_dir`], created mode 0700 if missing, once no other user can change it: the
/// hashes, locks, build log and kept binaries in it are trusted.
pub(crate) fn private_cache_dir() -> Result<PathBuf, ImageError> {
    Ok(private_dir::ensure(&cache_dir())?)
}

/// The sha256 (hex) of the file at `path` as it is now, by content: hashed, or remembered
/// in the private cache directory from when it was hashed if the file is unchanged since
/// (same size, mtime and ctime; no write leaves the ctime as it was).
pub(crate) fn content_sha256(path: &Path) -> Result<String, ImageError> {
    // One at a time: a daemon's concurrent runs would each hash the same file when it is
    // not remembered yet; after the first, the others find its hash.
    static HASHING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let cache = private_cache_dir()?;
    let _one = HASHING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    hash_cache::current_sha256(&cache, path)
        .map_err(ImageError::io(format!("cannot read {}", path.display())))
}

async fn image_exists(engine: &dyn ContainerEngine, image: &str) -> Result<bool, ImageError> {
    match engine.inspect_image(image).await {
        Ok(_) => Ok(true),
        Err(error) if error.is_not_found() => Ok(false),
        Err(error) => Err(ImageError::Docker(error)),
    }
}

/// An exclusive lock on `<cache_dir>/<name>`, held until the returned file is dropped. The
/// kernel releases it if the process dies, so a crashed build never blocks the next one.
/// `on_wait` runs once if another process holds the lock.
async fn lock_exclusive(
    cache_dir: &Path,
    name: &str,
    on_wait: impl FnOnce() + Send + 'static,
) -> Result<File, ImageError> {
    let path = cache_dir.join(name);
    let dir = cache_dir.to_owned();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir).map_err(ImageError::io(format!(
            "cannot create the cache directory {}",
            dir.display()
        )))?;
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(ImageError::io(format!(
                "cannot open the lock file {}",
                path.display()
            )))?;
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) => on_wait(),
            Err(TryLockError::Error(source)) => {
                return Err(ImageError::io(format!("cannot lock {}", path.display()))(
                    source,
                ));
            }
        }
        file.lock()
            .map_err(ImageError::io(format!("cannot lock {}", path.display())))?;
        Ok(file)
    })
    .await
    .map_err(|join| ImageError::io("the lock task failed")(io::Error::other(join)))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI prints each step as `egress-sandbox: {step}`: the lines users saw before
    /// progress became a callback.
    #[test]
    fn progress_reads_as_the_lines_the_cli_prints() {
        let lines = [
            Progress::WaitingForBaseImage,
            Progress::BuildingBaseImage {
                image: BASE_IMAGE.into(),
                mirror: "http://deb.debian.org/debian".into(),
                log: "/root/.cache/egress-sandbox/base-image-build.log".into(),
            },
            Progress::BaseImageStage("importing into Docker".into()),
            Progress::BaseImageReady {
                image: BASE_IMAGE.into(),
                elapsed: std::time::Duration::from_secs(125),
            },
        ]
        .map(|step| format!("egress-sandbox: {step}"));
        assert_eq!(
            lines,
            [
                "egress-sandbox: waiting for another egress-sandbox process to finish building the base image".to_string(),
                format!(
                    "egress-sandbox: building the base image {BASE_IMAGE} (first use, ~2-8 min) from \
                     http://deb.debian.org/debian; log: /root/.cache/egress-sandbox/base-image-build.log"
                ),
                "egress-sandbox: building the base image: importing into Docker".to_string(),
                format!("egress-sandbox: base image {BASE_IMAGE} ready after 2m05s"),
            ]
        );
    }
}
