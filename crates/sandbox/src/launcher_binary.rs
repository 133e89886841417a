//! The binary a sandbox mounts as its launcher, at a path that says nothing of the host.
//!
//! The sandbox's `/proc/self/mountinfo` shows a bind mount's source path. The proxy binary
//! itself lives in a checkout, a home directory or the kept copy of a daemon (named by its
//! pid), so the sandbox mounts a link to it instead, named by its content, in the running
//! user's private temporary directory ([`private_dir`]):
//! `$TMPDIR/egress-sandbox-<uid>/egress-sandbox-launcher-<content id>/egress-sandbox` (a
//! hard link, else a copy). Runs of the same binary share it, whichever process of the user
//! starts them. The sandbox sees the uid in that path, nothing more.
//!
//! The content id is public (the proxy image's tag), so the place must be where no other
//! user can put a file: a private directory, and the file's content is checked against the
//! content id each time a run takes it (by its remembered hash while the file is unchanged).
//!
//! A place is touched each time a run takes it; places of other binaries not taken for an
//! hour are removed when a new one is made (a link keeps an old build's bytes on disk). A
//! running sandbox keeps its mount even when the path goes, and a run whose place went is
//! given a new one: taking it checks it is there.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::images::{self, ImageError};
use crate::outcome::RunError;
use crate::private_dir;

/// Every place starts with this, then the content id.
const PREFIX: &str = "egress-sandbox-launcher-";
/// What places were named before the launcher had its own name: still removed when unused,
/// so an upgrade leaves no old binaries behind.
const FORMER_PREFIX: &str = "egress-sandbox-gate-";
/// The binary's name in its place.
const FILE_NAME: &str = "egress-sandbox";
/// Places not taken for this long are removed when another is made.
const UNUSED_FOR: Duration = Duration::from_secs(3600);

/// The path a sandbox mounts for `binary`, whose content id is `content_id` (the first hex
/// digits of its sha256), made if missing; its content checked against the id.
pub(crate) fn place(binary: &Path, content_id: &str) -> Result<PathBuf, RunError> {
    let parent = private_dir::ensure(&private_dir::user_temp_dir())?;
    if !parent.join(format!("{PREFIX}{content_id}")).exists() {
        remove_unused_shared(&std::env::temp_dir());
    }
    let path = place_in(&parent, binary, content_id).map_err(RunError::LauncherBinary)?;
    let found = images::content_sha256(&path)?;
    if !found.starts_with(content_id) {
        return Err(ImageError::BinaryChanged {
            path,
            expected: format!("{content_id}…"),
            found,
        }
        .into());
    }
    Ok(path)
}

/// Links `binary` to `to`, or copies it when it cannot be linked or its file could be
/// written by another user (a link is the same file: the link would change with it).
pub(crate) fn link_or_copy(binary: &Path, to: &Path) -> std::io::Result<()> {
    let meta = std::fs::metadata(binary)?;
    let owner_only =
        [private_dir::current_uid(), 0].contains(&meta.uid()) && meta.mode() & 0o022 == 0;
    if owner_only {
        match std::fs::hard_link(binary, to) {
            Ok(()) => return Ok(()),
            Err(error) => tracing::debug!(%error, "cannot link the binary; copying it"),
        }
    }
    std::fs::copy(binary, to).map(drop)
}

fn place_in(parent: &Path, binary: &Path, content_id: &str) -> std::io::Result<PathBuf> {
    if content_id.is_empty() || !content_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(std::io::Error::other(format!(
            "not a content id: {content_id:?}"
        )));
    }
    let dir = parent.join(format!("{PREFIX}{content_id}"));
    let path = dir.join(FILE_NAME);
    if path.is_file() {
        // Taken again: not to be removed as unused.
        let _ = std::fs::File::open(&dir).and_then(|dir| dir.set_modified(SystemTime::now()));
        return Ok(path);
    }
    remove_unused(parent);
    let staging = tempfile::Builder::new()
        .prefix(&format!("{PREFIX}staging-"))
        .tempdir_in(parent)?;
    let staged = staging.path().join(FILE_NAME);
    link_or_copy(binary, &staged)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(staging.path(), std::fs::Permissions::from_mode(0o755))?;
    }
    match std::fs::rename(staging.path(), &dir) {
        Ok(()) => {
            // Renamed away: nothing is left at the staging path to remove.
            let _ = staging.keep();
            Ok(path)
        }
        // Another process placed the same binary meanwhile: theirs is as good.
        Err(_) if path.is_file() => Ok(path),
        Err(error) => Err(error),
    }
}

/// Removes places (and staging leftovers) not taken for [`UNUSED_FOR`].
fn remove_unused(parent: &Path) {
    remove_unused_where(parent, |_| true);
}

/// Removes this user's places left in the shared temporary directory, where they were
/// made before they had a private directory, once unused; never another user's.
fn remove_unused_shared(temp_dir: &Path) {
    let uid = private_dir::current_uid();
    remove_unused_where(temp_dir, |meta| meta.uid() == uid);
}

fn remove_unused_where(parent: &Path, ours: impl Fn(&std::fs::Metadata) -> bool) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let is_place = entry
            .file_name()
            .to_str()
            .is_some_and(|name| name.starts_with(PREFIX) || name.starts_with(FORMER_PREFIX));
        // `DirEntry::metadata` does not follow a link.
        let unused = entry.metadata().is_ok_and(|meta| {
            ours(&meta)
                && meta.modified().is_ok_and(|modified| {
                    now.duration_since(modified).unwrap_or_default() > UNUSED_FOR
                })
        });
        if is_place && unused {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_is_placed_under_its_content_id_once_and_shared() {
        let parent = tempfile::tempdir().unwrap();
        let binary = parent.path().join("home-of-someone-egress-sandbox");
        std::fs::write(&binary, b"\x7fELF...").unwrap();
        let placed = place_in(parent.path(), &binary, "0123abcd").unwrap();
        assert_eq!(
            placed,
            parent
                .path()
                .join("egress-sandbox-launcher-0123abcd/egress-sandbox")
        );
        assert_eq!(std::fs::read(&placed).unwrap(), b"\x7fELF...");
        assert_eq!(
            place_in(parent.path(), &binary, "0123abcd").unwrap(),
            placed
        );
        let names: Vec<_> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "the binary and one place: {names:?}");
        assert!(place_in(parent.path(), &binary, "../x").is_err());
    }

    #[test]
    fn places_unused_for_an_hour_go_when_another_is_made() {
        let parent = tempfile::tempdir().unwrap();
        let binary = parent.path().join("bin");
        std::fs::write(&binary, b"one").unwrap();
        let old = place_in(parent.path(), &binary, "aaaa").unwrap();
        let long_ago = SystemTime::now() - UNUSED_FOR - Duration::from_secs(60);
        std::fs::File::open(old.parent().unwrap())
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let former = parent.path().join(format!("{FORMER_PREFIX}cccc"));
        std::fs::create_dir(&former).unwrap();
        std::fs::File::open(&former)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let new = place_in(parent.path(), &binary, "bbbb").unwrap();
        assert!(new.is_file());
        assert!(!old.exists(), "the place unused for an hour is removed");
        assert!(
            !former.exists(),
            "a place of the former name is removed too"
        );
    }
}
