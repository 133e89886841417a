//! The content hash of the binary, remembered by file identity so the per-run fast path is one
//! `stat` instead of hashing ~30 MB. Identity is (canonical path, size, mtime, ctime): a
//! rebuild changes mtime; ctime also catches `cp -p`/`touch -r` tricks that restore mtime.
//! The cache file is small JSON, rewritten atomically (temp file + rename); a lost update
//! between concurrent writers only costs a re-hash.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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

/// Lowercase hex sha256 of the file at `path`, from `cache_dir` when the file is unchanged.
/// Returns whether it was a cache hit, so callers (and tests) can tell.
pub fn sha256_cached(cache_dir: &Path, path: &Path) -> io::Result<(String, bool)> {
    let identity = FileIdentity::of(path)?;
    let cache_file = cache_dir.join(CACHE_FILE);
    let mut entries = read_entries(&cache_file);
    if let Some(entry) = entries.iter().find(|e| e.identity == identity) {
        return Ok((entry.sha256.clone(), true));
    }
    let sha256 = sha256_file(&identity.path)?;
    // The file changed while we hashed it: the hash is still returned but not remembered.
    if FileIdentity::of(path)? == identity {
        entries.retain(|e| e.identity.path != identity.path);
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
    Ok((sha256, false))
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
    let temp = cache_dir.join(format!("{CACHE_FILE}.{}.tmp", std::process::id()));
    fs::write(&temp, serde_json::to_vec_pretty(entries)?)?;
    fs::rename(&temp, cache_file).inspect_err(|_| {
        let _ = fs::remove_file(&temp);
    })
}

pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf)? {
            0 => break,
            n => hasher.update(&buf[..n]),
        }
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    const SHA256_HELLO: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    #[test]
    fn first_call_hashes_second_call_hits_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("bin");
        fs::write(&binary, "hello").unwrap();
        let cache = dir.path().join("cache");
        assert_eq!(
            sha256_cached(&cache, &binary).unwrap(),
            (SHA256_HELLO.into(), false)
        );
        assert_eq!(
            sha256_cached(&cache, &binary).unwrap(),
            (SHA256_HELLO.into(), true)
        );
    }

    #[test]
    fn a_changed_file_is_rehashed() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("bin");
        let cache = dir.path().join("cache");
        fs::write(&binary, "hello").unwrap();
        sha256_cached(&cache, &binary).unwrap();
        // Same size, different content, mtime forced to differ even on coarse clocks.
        fs::write(&binary, "world").unwrap();
        let later = SystemTime::now() + Duration::from_secs(5);
        File::options()
            .write(true)
            .open(&binary)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let (hash, hit) = sha256_cached(&cache, &binary).unwrap();
        assert!(!hit);
        assert_eq!(hash, sha256_file(&binary).unwrap());
        assert_ne!(hash, SHA256_HELLO);
    }

    #[test]
    fn the_cache_is_keyed_by_canonical_path() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("bin");
        let link = dir.path().join("link");
        let cache = dir.path().join("cache");
        fs::write(&binary, "hello").unwrap();
        std::os::unix::fs::symlink(&binary, &link).unwrap();
        sha256_cached(&cache, &binary).unwrap();
        assert_eq!(
            sha256_cached(&cache, &link).unwrap(),
            (SHA256_HELLO.into(), true)
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
        assert_eq!(
            sha256_cached(&cache, &binary).unwrap(),
            (SHA256_HELLO.into(), false)
        );
        assert_eq!(
            sha256_cached(&cache, &binary).unwrap(),
            (SHA256_HELLO.into(), true)
        );
    }

    #[test]
    fn the_cache_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        for i in 0..MAX_ENTRIES + 5 {
            let binary = dir.path().join(format!("bin{i}"));
            fs::write(&binary, format!("content {i}")).unwrap();
            sha256_cached(&cache, &binary).unwrap();
        }
        assert_eq!(read_entries(&cache.join(CACHE_FILE)).len(), MAX_ENTRIES);
    }
}
