//! The default sandbox image: Debian bookworm minbase with what code written by an agent
//! usually needs — python3 with pip, venv, requests and httpx, nodejs, git, curl and
//! ca-certificates — made with debootstrap on this machine and imported through the Docker
//! API (no registry, no Dockerfile). Built once; the tag carries a recipe version (`-4`) so
//! a changed recipe gets a new image instead of silently reusing the old one.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;

use super::rootfs::{RootfsDir, prepare_for_image};
use super::{IMAGE_LABEL, ImageError, Progress, image_exists, lock_exclusive, sweep};
use crate::engine::{ContainerEngine, ImageArchive, ImageImport};

/// Where the build reports its steps (the caller shows them; this module prints nothing).
pub(super) type Report = std::sync::Arc<dyn Fn(Progress) + Send + Sync>;

/// The tag of the default sandbox image.
pub const BASE_IMAGE: &str = "egress-sandbox-base:bookworm-4";
/// Overrides the Debian mirror debootstrap downloads from.
pub const MIRROR_ENV: &str = "EGRESS_SANDBOX_DEBIAN_MIRROR";
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
const SUITE: &str = "bookworm";
/// Debian packages only (their dependencies come along): nothing is fetched from PyPI or npm.
const PACKAGES: &str = "python3,python3-pip,python3-venv,python3-requests,python3-httpx,nodejs,git,curl,ca-certificates";
const LOG_FILE: &str = "base-image-build.log";
const ROOTFS_PREFIX: &str = "base-rootfs.";

pub(super) async fn ensure(
    engine: &dyn ContainerEngine,
    cache_dir: &Path,
    report: Report,
) -> Result<String, ImageError> {
    if image_exists(engine, BASE_IMAGE).await? {
        return Ok(BASE_IMAGE.to_owned());
    }
    let debootstrap = find_debootstrap().ok_or(ImageError::DebootstrapMissing)?;
    if !running_as_root() {
        return Err(build_error(
            "debootstrap must run as root, and it is needed once to build the default sandbox \
             image: run egress-sandbox once as root (e.g. sudo egress-sandbox run -- true); the \
             image is then there for every Docker user. Or pass --image with a local image",
        ));
    }
    let waiting = report.clone();
    let lock = lock_exclusive(cache_dir, "base-image.lock", move || {
        waiting(Progress::WaitingForBaseImage)
    })
    .await?;
    if image_exists(engine, BASE_IMAGE).await? {
        return Ok(BASE_IMAGE.to_owned());
    }
    build(engine, cache_dir, &debootstrap, &report).await?;
    drop(lock);
    sweep::remove_leftover_images(engine, cache_dir, None).await;
    Ok(BASE_IMAGE.to_owned())
}

/// `debootstrap` lives in /usr/sbin, which is often not on a non-root user's PATH.
fn find_debootstrap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("debootstrap"))
        .find(|candidate| {
            fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// From /proc rather than `geteuid`, which would need `unsafe` or another crate.
fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

fn mirror() -> String {
    std::env::var(MIRROR_ENV)
        .ok()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or(DEFAULT_MIRROR.into())
}

fn build_error(message: impl Into<String>) -> ImageError {
    ImageError::Build {
        image: BASE_IMAGE.to_owned(),
        message: message.into(),
    }
}

async fn build(
    engine: &dyn ContainerEngine,
    cache_dir: &Path,
    debootstrap: &Path,
    report: &Report,
) -> Result<(), ImageError> {
    let started = Instant::now();
    let mirror = mirror();
    let log_path = cache_dir.join(LOG_FILE);
    // We hold the lock, so any rootfs left here is from a build that was killed.
    remove_leftover_rootfs(cache_dir);
    let rootfs =
        RootfsDir::create(cache_dir.join(format!("{ROOTFS_PREFIX}{}", std::process::id())))
            .map_err(ImageError::io(
                "cannot create a directory for the base image root filesystem",
            ))?;
    let mut log = fs::File::create(&log_path).map_err(ImageError::io(format!(
        "cannot create the build log {}",
        log_path.display()
    )))?;
    report(Progress::BuildingBaseImage {
        image: BASE_IMAGE.to_owned(),
        mirror: mirror.clone(),
        log: log_path.clone(),
    });

    let status = run_debootstrap(debootstrap, rootfs.path(), &mirror, &mut log, report).await?;
    if !status.success() {
        let last = last_meaningful_line(&log_path).unwrap_or_default();
        // debootstrap's own detailed log dies with the rootfs; keep it in ours.
        if let Ok(details) = fs::read(rootfs.path().join("debootstrap/debootstrap.log")) {
            let _ = writeln!(log, "---- debootstrap/debootstrap.log ----");
            let _ = log.write_all(&details);
        }
        return Err(build_error(format!(
            "debootstrap failed ({status}): {last}; check that {mirror} is reachable (set \
             {MIRROR_ENV} to another Debian mirror); full log: {}",
            log_path.display()
        )));
    }

    let progress = |stage: &str| report(Progress::BaseImageStage(stage.to_owned()));
    progress("trimming the root filesystem");
    let root = rootfs.path().to_owned();
    tokio::task::spawn_blocking(move || prepare_for_image(&root))
        .await
        .map_err(|join| build_error(format!("the trimming task failed: {join}")))?
        .map_err(ImageError::io(
            "cannot prepare the base image root filesystem",
        ))?;

    progress("importing into Docker");
    import(engine, rootfs.path()).await?;
    drop(rootfs);
    report(Progress::BaseImageReady {
        image: BASE_IMAGE.to_owned(),
        elapsed: started.elapsed(),
    });
    Ok(())
}

/// Runs debootstrap with its full output going to `log` and one progress report per stage.
/// Killed if the caller gives up (future dropped).
async fn run_debootstrap(
    debootstrap: &Path,
    target: &Path,
    mirror: &str,
    log: &mut fs::File,
    report: &Report,
) -> Result<ExitStatus, ImageError> {
    let mut child = Command::new(debootstrap)
        .arg("--variant=minbase")
        .arg(format!("--include={PACKAGES}"))
        .arg(SUITE)
        .arg(target)
        .arg(mirror)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(ImageError::io(format!(
            "cannot start {}",
            debootstrap.display()
        )))?;
    let (lines_tx, mut lines) = mpsc::channel::<String>(64);
    forward_lines(
        child.stdout.take().expect("stdout is piped"),
        lines_tx.clone(),
    );
    forward_lines(child.stderr.take().expect("stderr is piped"), lines_tx);
    let mut stage = None;
    while let Some(line) = lines.recv().await {
        let _ = writeln!(log, "{line}");
        if let Some(next) = stage_of(&line)
            && stage != Some(next)
        {
            stage = Some(next);
            report(Progress::BaseImageStage(next.to_owned()));
        }
    }
    child
        .wait()
        .await
        .map_err(ImageError::io("waiting for debootstrap failed"))
}

/// Reads to the end even past bytes that are not UTF-8: a pipe left undrained would block
/// debootstrap.
fn forward_lines(pipe: impl AsyncRead + Unpin + Send + 'static, to: mpsc::Sender<String>) {
    tokio::spawn(async move {
        let mut reader = BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                    // The receiver only goes away with the build; keep draining regardless.
                    let _ = to.send(text).await;
                }
            }
        }
    });
}

/// The stage a debootstrap `I:` line belongs to; None for lines that do not start a stage.
fn stage_of(line: &str) -> Option<&'static str> {
    let message = line.strip_prefix("I: ")?;
    let word = message.split_whitespace().next()?;
    Some(match word {
        "Retrieving" | "Validating"
            if message.contains("Release") || message.contains("Packages") =>
        {
            "fetching the package index"
        }
        "Checking" if message.contains("component") => "resolving dependencies",
        "Checking" | "Valid" => "fetching the package index",
        "Resolving" | "Found" => "resolving dependencies",
        "Retrieving" | "Validating" => "downloading packages",
        "Extracting" => "extracting packages",
        "Installing" => "installing core packages",
        // Per-package "Unpacking foo..." lines stay in the stage their header started.
        "Unpacking" | "Configuring" => match message.split_once(' ').map(|(_, rest)| rest) {
            Some("required packages...") if word == "Unpacking" => "unpacking required packages",
            Some("required packages...") => "configuring required packages",
            Some("the base system...") if word == "Unpacking" => "unpacking the base system",
            Some("the base system...") => "configuring the base system",
            _ => return None,
        },
        "Base" => "base system installed",
        _ => return None,
    })
}

/// The last `E:` line of the log, else its last non-empty line: the one a user needs to see.
fn last_meaningful_line(log_path: &Path) -> Option<String> {
    let text = fs::read_to_string(log_path).ok()?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines
        .iter()
        .rev()
        .find(|l| l.starts_with("E: "))
        .or(lines.last())
        .map(|l| l.chars().take(300).collect())
}

fn remove_leftover_rootfs(cache_dir: &Path) {
    let Ok(entries) = fs::read_dir(cache_dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(ROOTFS_PREFIX)
        {
            drop(RootfsDir::adopt(entry.path()));
        }
    }
}

/// Streams the root filesystem as a tar made by the system `tar` (which keeps owners, modes,
/// hard links and symlinks exactly) into an image import, then tags it.
async fn import(engine: &dyn ContainerEngine, rootfs: &Path) -> Result<(), ImageError> {
    let mut tar = Command::new("tar")
        .args(["--numeric-owner", "-C"])
        .arg(rootfs)
        .args(["-cf", "-", "."])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(ImageError::io("cannot start tar to archive the base image"))?;
    let stdout = tar.stdout.take().expect("stdout is piped");
    let mut stderr = tar.stderr.take().expect("stderr is piped");
    let body = futures_util::stream::try_unfold(stdout, |mut out| async move {
        let mut chunk = BytesMut::with_capacity(256 * 1024);
        let read = out.read_buf(&mut chunk).await?;
        Ok::<_, io::Error>((read > 0).then(|| (chunk.freeze(), out)))
    });
    let (repository, tag) = BASE_IMAGE.split_once(':').expect("BASE_IMAGE is repo:tag");
    let import = ImageImport {
        repository: repository.to_owned(),
        tag: tag.to_owned(),
        message: format!(
            "egress-sandbox base: debootstrap --variant=minbase bookworm + {PACKAGES}"
        ),
        changes: vec![
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "ENV LANG=C.UTF-8".into(),
            // `pip install PKG` as on a laptop: Debian marks its Python as externally managed
            // (PEP 668), so pip refuses before it reaches the network. In the sandbox the
            // system's packages cannot be broken (the root is read-only, the user is 65534):
            // pip falls back to a user install under $HOME (/tmp: `/tmp/.local`), thrown away
            // with the run. A venv (`python3 -m venv /tmp/v`) works as well.
            "ENV PIP_BREAK_SYSTEM_PACKAGES=1".into(),
            // No version check against pypi.org on every pip command (a refused attempt in
            // the audit log of any run that does not allow it).
            "ENV PIP_DISABLE_PIP_VERSION_CHECK=1".into(),
            r#"CMD ["/bin/sh"]"#.into(),
            format!("LABEL {IMAGE_LABEL}=base"),
        ],
        archive: ImageArchive::Streamed(Box::pin(body)),
    };
    let imported = engine.import_image(import).await;
    let mut tar_errors = String::new();
    let _ = stderr.read_to_string(&mut tar_errors).await;
    let tar_status = tar
        .wait()
        .await
        .map_err(ImageError::io("waiting for tar failed"))?;
    if let Err(error) = imported {
        return Err(build_error(format!(
            "the image import was refused: {error}"
        )));
    }
    if !tar_status.success() {
        // The archive was incomplete: do not leave an image that looks finished.
        let _ = engine.remove_image(BASE_IMAGE, true).await;
        return Err(build_error(format!(
            "tar {tar_status} while archiving the root filesystem: {}",
            tar_errors.trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debootstrap_lines_map_to_a_few_stages() {
        let stages: Vec<_> = [
            "I: Retrieving InRelease ",
            "I: Checking Release signature",
            "I: Retrieving Packages ",
            "I: Validating Packages ",
            "I: Resolving dependencies of required packages...",
            "I: Found additional required dependencies: libzstd1 ",
            "I: Checking component main on http://deb.debian.org/debian...",
            "I: Retrieving adduser 3.134",
            "I: Validating adduser 3.134",
            "I: Extracting adduser...",
            "I: Installing core packages...",
            "I: Unpacking required packages...",
            "I: Unpacking adduser...",
            "I: Configuring required packages...",
            "I: Configuring libc-bin...",
            "I: Unpacking the base system...",
            "I: Unpacking apt...",
            "I: Configuring the base system...",
            "I: Base system installed successfully.",
            "W: some warning",
            "dpkg: warning: noise",
        ]
        .iter()
        .map(|l| stage_of(l))
        .collect();
        assert_eq!(
            stages,
            [
                Some("fetching the package index"),
                Some("fetching the package index"),
                Some("fetching the package index"),
                Some("fetching the package index"),
                Some("resolving dependencies"),
                Some("resolving dependencies"),
                Some("resolving dependencies"),
                Some("downloading packages"),
                Some("downloading packages"),
                Some("extracting packages"),
                Some("installing core packages"),
                Some("unpacking required packages"),
                None,
                Some("configuring required packages"),
                None,
                Some("unpacking the base system"),
                None,
                Some("configuring the base system"),
                Some("base system installed"),
                None,
                None,
            ]
        );
    }

    #[test]
    fn the_effective_uid_is_read_from_proc() {
        // These tests run as root on the build machines; the point is that parsing works.
        let uid = fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        assert_eq!(running_as_root(), uid.unwrap() == 0);
    }

    #[test]
    fn the_error_line_is_preferred_over_the_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        fs::write(
            &log,
            "I: Retrieving InRelease\nE: Failed getting release file x\nnoise\n\n",
        )
        .unwrap();
        assert_eq!(
            last_meaningful_line(&log).unwrap(),
            "E: Failed getting release file x"
        );
        fs::write(&log, "I: one\nlast words\n").unwrap();
        assert_eq!(last_meaningful_line(&log).unwrap(), "last words");
    }
}
