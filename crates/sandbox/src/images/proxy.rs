//! The proxy image: `FROM scratch` + the static binary at `/egress-sandbox`, user 65534,
//! entrypoint `egress-sandbox proxy`.
//!
//! Made with an image import (`POST /images/create?fromSrc=-` with `changes`), not a build:
//! measured on Docker 20.10, importing the 30 MB debug binary took 0.3 s against 2.7 s for
//! the legacy builder (which commits one container per Dockerfile step), and it needs no
//! builder at all.

use std::path::Path;

use crate::engine::{ContainerEngine, ImageArchive, ImageImport};

use super::elf::{ElfLinkage, docker_architecture, elf_linkage};
use super::handed_out::stamp;
use super::hash_cache::{HashedFile, cached_sha256, read_and_remember};
use super::{IMAGE_LABEL, ImageError, PROXY_REPOSITORY, image_exists, lock_exclusive, sweep};

/// Where the binary sits in the image.
pub const BINARY_IN_IMAGE: &str = "egress-sandbox";

/// The image of `binary`, found or built. With `expected`, the binary's sha256 must be that:
/// checked on the bytes that are imaged, or on the remembered hash of the unchanged file
/// (see `hash_cache`: a write to the file always changes its ctime).
pub(super) async fn ensure(
    engine: &dyn ContainerEngine,
    cache_dir: &Path,
    binary: &Path,
    expected: Option<&str>,
) -> Result<String, ImageError> {
    if let Some(tag) = existing_tag(engine, cache_dir, binary, expected).await? {
        return Ok(tag);
    }
    // Only saves duplicate work (concurrent imports of one binary are harmless: the last tag
    // wins and the untagged loser is swept later), so an unusable cache dir must not stop us.
    let lock = lock_exclusive(cache_dir, "proxy-image.lock", || {})
        .await
        .inspect_err(|error| tracing::debug!(%error, "building the proxy image without a lock"))
        .ok();
    // Whoever held the lock may have just built it.
    if let Some(tag) = existing_tag(engine, cache_dir, binary, expected).await? {
        return Ok(tag);
    }
    let built = build(engine, cache_dir, binary, expected).await?;
    stamp(cache_dir, &built);
    drop(lock);
    sweep::remove_leftover_images(engine, cache_dir, Some(&built)).await;
    Ok(built)
}

/// The fast path: the remembered hash of an unchanged binary names an image that exists.
async fn existing_tag(
    engine: &dyn ContainerEngine,
    cache_dir: &Path,
    binary: &Path,
    expected: Option<&str>,
) -> Result<Option<String>, ImageError> {
    let (dir, path) = (cache_dir.to_owned(), binary.to_owned());
    let cached = blocking(move || cached_sha256(&dir, &path))
        .await?
        .map_err(ImageError::io(format!(
            "cannot read {}",
            binary_display(binary)
        )))?;
    let Some(sha256) = cached else {
        return Ok(None);
    };
    require_content(binary, &sha256, expected)?;
    let tag = tag_for(&sha256);
    if !image_exists(engine, &tag).await? {
        return Ok(None);
    }
    stamp(cache_dir, &tag);
    Ok(Some(tag))
}

/// [`ImageError::BinaryChanged`] unless `sha256` is `expected` (when one is).
fn require_content(binary: &Path, sha256: &str, expected: Option<&str>) -> Result<(), ImageError> {
    match expected {
        Some(expected) if expected != sha256 => Err(ImageError::BinaryChanged {
            path: binary.to_owned(),
            expected: expected.to_owned(),
            found: sha256.to_owned(),
        }),
        _ => Ok(()),
    }
}

fn binary_display(path: &Path) -> String {
    format!("the egress-sandbox binary {}", path.display())
}

fn tag_for(sha256: &str) -> String {
    format!("{PROXY_REPOSITORY}:{}", &sha256[..16])
}

/// Imports the binary as read now; the tag comes from these very bytes, so a binary replaced
/// since it was last hashed still gets an image whose tag matches its content.
async fn build(
    engine: &dyn ContainerEngine,
    cache_dir: &Path,
    binary: &Path,
    expected: Option<&str>,
) -> Result<String, ImageError> {
    let (dir, path) = (cache_dir.to_owned(), binary.to_owned());
    let built = blocking(move || -> Result<_, ImageError> {
        let unreadable = || ImageError::io(format!("cannot read {}", binary_display(&path)));
        match elf_linkage(&path).map_err(unreadable())? {
            ElfLinkage::Static => {}
            ElfLinkage::Dynamic { interpreter } => {
                return Err(ImageError::NotStatic { path, interpreter });
            }
            ElfLinkage::NotElf(reason) => return Err(ImageError::NotElf { path, reason }),
        }
        let architecture = docker_architecture(&path).map_err(unreadable())?;
        let hashed = read_and_remember(&dir, &path).map_err(unreadable())?;
        Ok((architecture, hashed))
    })
    .await??;
    let (architecture, HashedFile { bytes, sha256 }) = built;
    require_content(binary, &sha256, expected)?;
    if let Some(architecture) = architecture {
        check_engine_platform(engine, binary, architecture).await?;
    }
    let tag = tag_for(&sha256);
    if image_exists(engine, &tag).await? {
        return Ok(tag);
    }

    let started = std::time::Instant::now();
    // Tens of megabytes copied: not on an async worker.
    let context = blocking(move || single_file_tar(BINARY_IN_IMAGE, &bytes))
        .await?
        .map_err(ImageError::io("cannot assemble the proxy image archive"))?;
    let (repository, version) = tag.split_once(':').expect("tag_for makes repo:tag");
    let import = ImageImport {
        repository: repository.to_owned(),
        tag: version.to_owned(),
        message: "egress-sandbox proxy: the static egress-sandbox binary, FROM scratch".into(),
        changes: vec![
            "USER 65534:65534".into(),
            format!(r#"ENTRYPOINT ["/{BINARY_IN_IMAGE}", "proxy"]"#),
            format!("LABEL {IMAGE_LABEL}=proxy egress-sandbox.binary-sha256={sha256}"),
        ],
        archive: ImageArchive::Whole(context.into()),
    };
    engine
        .import_image(import)
        .await
        .map_err(|error| ImageError::Build {
            image: tag.clone(),
            message: format!("the image import was refused: {error}"),
        })?;
    tracing::info!(%tag, elapsed = ?started.elapsed(), "built the proxy image");
    Ok(tag)
}

/// The engine runs the image's binary itself: a binary built for another architecture than
/// the engine's (an arm64 engine, an x86_64 binary) would fail in the container with `exec
/// format error`, so it is refused here, with the build that fits. Checked once per binary,
/// when its image is made: an image that exists was checked by the engine that holds it.
async fn check_engine_platform(
    engine: &dyn ContainerEngine,
    binary: &Path,
    architecture: &'static str,
) -> Result<(), ImageError> {
    let version = engine.version().await.map_err(ImageError::Docker)?;
    let (Some(os), Some(arch)) = (version.os, version.arch) else {
        return Ok(());
    };
    if os == "linux" && arch == architecture {
        return Ok(());
    }
    Err(ImageError::WrongPlatform {
        path: binary.to_owned(),
        binary: format!("linux/{architecture}"),
        build: rust_target(&arch).map_or_else(
            || format!("a static build for the Rust target of {os}/{arch}"),
            |target| format!("`cargo build --release --target {target}`"),
        ),
        engine: format!("{os}/{arch}"),
    })
}

/// The Rust target whose static build runs on a Linux engine of `arch` (as the engine names
/// it), for the targets the workspace's `.cargo/config.toml` links statically.
fn rust_target(arch: &str) -> Option<&'static str> {
    match arch {
        "amd64" => Some("x86_64-unknown-linux-gnu"),
        "arm64" => Some("aarch64-unknown-linux-gnu"),
        _ => None,
    }
}

/// A tar holding one executable file owned by root, with a fixed mtime.
fn single_file_tar(name: &str, content: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut archive = tar::Builder::new(Vec::with_capacity(content.len() + 4096));
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(content.len() as u64);
    header.set_mode(0o755);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    archive.append_data(&mut header, name, content)?;
    archive.into_inner()
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ImageError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|join| ImageError::io("a background task failed")(std::io::Error::other(join)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn the_tag_is_the_repository_and_16_hex_digits() {
        let sha = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        assert_eq!(tag_for(sha), "egress-sandbox-proxy:2cf24dba5fb0a30e");
    }

    #[test]
    fn the_archive_holds_one_root_owned_executable() {
        let bytes = single_file_tar("egress-sandbox", b"\x7fELF...").unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let mut entries = archive.entries().unwrap();
        let mut entry = entries.next().unwrap().unwrap();
        assert_eq!(entry.path().unwrap().to_str(), Some("egress-sandbox"));
        assert_eq!(entry.header().mode().unwrap(), 0o755);
        assert_eq!(
            (entry.header().uid().unwrap(), entry.header().gid().unwrap()),
            (0, 0)
        );
        let mut content = Vec::new();
        entry.read_to_end(&mut content).unwrap();
        assert_eq!(content, b"\x7fELF...");
        drop(entry);
        assert!(entries.next().is_none());
    }
}
