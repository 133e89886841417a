//! The content hash of the binary, remembered by file identity so the per-run fast path is one
//! `stat` instead of hashing ~30 MB. Identity is (canonical path, size, mtime, ctime): a
//! rebuild changes mtime; ctime also catches `cp -p`/`touch -r` tricks that restore mtime.
//! The cache file is small JSON, rewritten atomically (temp file + rename); a lost update
//! between concurrent writers only costs a re-hash.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use egress_core::audit::sha256_hex;
use serde::{Deserialize, Serialize};

const CACHE_FILE: &str = "proxy-binary-hashes.json";
/// A few binaries (worktrees, release and debug builds) are enough; older entries drop off.
const MAX_ENTRIES: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileIdentity {
    path: PathBuf,
    size: u64,
    /// (seconds, nanoseconds), as `stat` gives them.
    mtime: (i64, i64),
    ctime: (i64, i64),
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    identity: FileIdentity,
    sha256: String,
}

impl FileIdentity {
    fn of(path: &Path) -> io::Result<Self> {
        let path = fs::canonicalize(path)?;
        let meta = fs::metadata(&path)?;
        Ok(Self {
            path,
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// The sha256 (lowercase hex) remembered for the file at `path`, if the file is unchanged
/// since it was hashed: one `stat` and one small read.
pub(super) fn cached_sha256(cache_dir: &Path, path: &Path) -> io::Result<Option<String>> {
    let identity = FileIdentity::of(path)?;
    let entries = read_entries(&cache_dir.join(CACHE_FILE));
    Ok(entries
        .into_iter()
        .find(|e| e.identity == identity)
        .map(|e| e.sha256))
}

/// The file's bytes as read now and their sha256.
pub(super) struct HashedFile {
    pub bytes: Vec<u8>,
    pub sha256: String,
}

/// Reads and hashes the file, and remembers the hash for its identity unless the file
/// changed while it was read (then the hash is still right for the returned bytes).
pub(super) fn read_and_remember(cache_dir: &Path, path: &Path) -> io::Result<HashedFile> {
    let identity = FileIdentity::of(path)?;
    let bytes = fs::read(&identity.path)?;
    let sha256 = sha256_hex(&bytes);
    if FileIdentity::of(path)? == identity {
        let cache_file = cache_dir.join(CACHE_FILE);
        let mut entries = read_entries(&cache_file);
        // Entries of files gone (a stopped daemon's kept binary) would push live ones out.
        entries.retain(|e| e.identity.path != identity.path && e.identity.path.exists());
        entries.push(Entry {
            identity,
            sha256: sha256.clone(),
        });
        let excess = entries.len().saturating_sub(MAX_ENTRIES);
        entries.drain(..excess);
        if let Err(error) = write_entries(cache_dir, &cache_file, &entries) {
            tracing::debug!(%error, file = %cache_file.display(), "could not save the hash cache");
        }
    }
    Ok(HashedFile { bytes, sha256 })
}

/// The sha256 of the file at `path` as it is now: the remembered one while the file is
/// unchanged (a `stat`), else read, hashed and remembered.
pub(super) fn current_sha256(cache_dir: &Path, path: &Path) -> io::Result<String> {
    match cached_sha256(cache_dir, path)? {
        Some(sha256) => Ok(sha256),
        None => Ok(read_and_remember(cache_dir, path)?.sha256),
    }
}

/// A missing or unreadable cache is an empty cache, never an error.
fn read_entries(cache_file: &Path) -> Vec<Entry> {
    fs::read(cache_file)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

fn write_entries(cache_dir: &Path, cache_file: &Path, entries: &[Entry]) -> io::Result<()> {
    fs::create_dir_all(cache_dir)?;
    // A name of its own: threads of one process (a daemon's runs) write at the same time.
    let mut temp = tempfile::Builder::new()
        .prefix(&format!("{CACHE_FILE}."))
        .suffix(".tmp")
        .tempfile_in(cache_dir)?;
    io::Write::write_all(&mut temp, &serde_json::to_vec_pretty(entries)?)?;
    temp.persist(cache_file)
        .map(drop)
        .map_err(|error| error.error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::time::{Duration, SystemTime};

    const SHA256_HELLO: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    #[test]
    fn a_hash_is_remembered_once_read() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("bin");
        fs::write(&binary, "hello").unwrap();
        let cache = dir.path().join("cache");
        assert_eq!(cached_sha256(&cache, &binary).unwrap(), None);
        let hashed = read_and_remember(&cache, &binary).unwrap();
        assert_eq!(
            (hashed.bytes.as_slice(), hashed.sha256.as_str()),
            (&b"hello"[..], SHA256_HELLO)
        );
        assert_eq!(
            cached_sha256(&cache, &binary).unwrap().as_deref(),
            Some(SHA256_HELLO)
        );
    }

    #[test]
    fn a_changed_file_is_not_answered_from_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("bin");
        let cache = dir.path().join("cache");
        fs::write(&binary, "hello").unwrap();
        read_and_remember(&cache, &binary).unwrap();
        // Same size, different content, mtime forced to differ even on coarse clocks.
        fs::write(&binary, "world").unwrap();
        let later = SystemTime::now() + Duration::from_secs(5);
        File::options()
            .write(true)
            .open(&binary)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_eq!(cached_sha256(&cache, &binary).unwrap(), None);
        let hashed = read_and_remember(&cache, &binary).unwrap();
        assert_eq!(hashed.sha256, sha256_hex(b"world"));
        assert_eq!(
            cached_sha256(&cache, &binary).unwrap(),
            Some(sha256_hex(b"world"))
        );
    }

    #[test]
    fn the_cache_is_keyed_by_canonical_path() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("bin");
        let link = dir.path().join("link");
        let cache = dir.path().join("cache");
        fs::write(&binary, "hello").unwrap();
        std::os::unix::fs::symlink(&binary, &link).unwrap();
        read_and_remember(&cache, &binary).unwrap();
        assert_eq!(
            cached_sha256(&cache, &link).unwrap().as_deref(),
            Some(SHA256_HELLO)
        );
    }

    #[test]
    fn a_corrupt_cache_file_is_ignored_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("bin");
        let cache = dir.path().join("cache");
        fs::create_dir_all(&cache).unwrap();
        fs::write(cache.join(CACHE_FILE), "{not json").unwrap();
        fs::write(&binary, "hello").unwrap();
        assert_eq!(cached_sha256(&cache, &binary).unwrap(), None);
        read_and_remember(&cache, &binary).unwrap();
        assert_eq!(
            cached_sha256(&cache, &binary).unwrap().as_deref(),
            Some(SHA256_HELLO)
        );
    }

    #[test]
    fn the_current_hash_follows_a_write_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("bin");
        let cache = dir.path().join("cache");
        fs::write(&binary, "hello").unwrap();
        assert_eq!(current_sha256(&cache, &binary).unwrap(), SHA256_HELLO);
        assert_eq!(current_sha256(&cache, &binary).unwrap(), SHA256_HELLO);
        fs::write(&binary, "world").unwrap();
        // The mtime forced to differ even on coarse clocks.
        File::options()
            .write(true)
            .open(&binary)
            .unwrap()
            .set_modified(SystemTime::now() + Duration::from_secs(5))
            .unwrap();
        assert_eq!(
            current_sha256(&cache, &binary).unwrap(),
            sha256_hex(b"world")
        );
    }

    #[test]
    fn a_missing_binary_is_an_error_not_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        assert!(cached_sha256(dir.path(), &dir.path().join("absent")).is_err());
    }

    #[test]
    fn the_cache_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        for i in 0..MAX_ENTRIES + 5 {
            let binary = dir.path().join(format!("bin{i}"));
            fs::write(&binary, format!("content {i}")).unwrap();
            read_and_remember(&cache, &binary).unwrap();
        }
        assert_eq!(read_entries(&cache.join(CACHE_FILE)).len(), MAX_ENTRIES);
    }

    #[test]
    fn entries_of_files_gone_are_dropped_and_no_temporary_file_stays() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let gone = dir.path().join("gone");
        let kept = dir.path().join("kept");
        fs::write(&gone, "gone").unwrap();
        fs::write(&kept, "kept").unwrap();
        read_and_remember(&cache, &gone).unwrap();
        fs::remove_file(&gone).unwrap();
        read_and_remember(&cache, &kept).unwrap();
        let entries = read_entries(&cache.join(CACHE_FILE));
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].identity.path, fs::canonicalize(&kept).unwrap());
        let names: Vec<_> = fs::read_dir(&cache).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
