//! The API socket: created with its final mode from the start (bound inside a private
//! directory, restricted, then renamed into place), so no other user can connect in between.
//! Its directory must be the running user's and writable by no one else
//! ([`private_dir`]): another user could otherwise put their own socket there first.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

use egress_sandbox::private_dir::{self, PlaceError, User};

/// `/run/egress-sandbox/api.sock` for root, else `$XDG_RUNTIME_DIR/egress-sandbox.sock`,
/// else `api.sock` in the user's private temporary directory
/// (`$TMPDIR/egress-sandbox-<uid>/api.sock`). Each directory is checked, and made 0700 if
/// missing, when the daemon binds.
pub fn default_socket() -> PathBuf {
    if private_dir::current_uid() == 0 {
        return PathBuf::from("/run/egress-sandbox/api.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("egress-sandbox.sock"),
        _ => private_dir::user_temp_dir().join("api.sock"),
    }
}

/// Why the API socket could not be bound.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SocketError {
    /// A live socket is at the path: something answers on it.
    #[error(
        "something answers on {} (the socket belongs to {owner}): another egress-sandbox serve, \
         or a program posing as one; it is not replaced: stop it, or choose another --socket",
        path.display()
    )]
    InUse {
        /// The socket's path.
        path: PathBuf,
        /// The socket file's owner.
        owner: User,
    },
    /// The socket's directory is not private to the running user, or could not be made.
    #[error(transparent)]
    Place(#[from] PlaceError),
    /// A file-system step of the binding failed (reading `/etc/group` among them).
    #[error("{what} {path}")]
    Io {
        /// The step, worded to precede the path (`cannot bind`).
        what: &'static str,
        /// The file or directory the step acted on.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// The group given is neither a number nor a name in `/etc/group` (the group given).
    #[error("no such group: {0}")]
    NoSuchGroup(String),
    /// Something other than a socket is at the path (the path).
    #[error("{} exists and is not a socket; refusing to replace it (choose another --socket)", .0.display())]
    NotASocket(PathBuf),
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SocketError {
    let path = path.to_path_buf();
    move |source| SocketError::Io { what, path, source }
}

/// The daemon's listening socket and which file it is, so that stopping removes that file
/// and never one a newer daemon put at the same path (after ours was deleted by hand, say).
#[derive(Debug)]
pub struct BoundSocket {
    /// The listener connections are accepted from.
    pub listener: UnixListener,
    path: PathBuf,
    /// (device, inode) of the socket file as bound.
    identity: (u64, u64),
}

impl BoundSocket {
    /// Stops listening and removes the socket file if it is still ours.
    pub fn close(self) {
        drop(self.listener);
        if let Ok(now) = std::fs::symlink_metadata(&self.path)
            && (now.dev(), now.ino()) == self.identity
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Binds `path` with mode 0600, or 0660 owned by `group` (a name or a number). Its
/// directory must be the running user's and writable by no one else; a missing one is made
/// 0700 (0710 for `group`, which then owns it, so that its members reach the socket). A stale
/// socket file (nobody answers) is replaced; a live one is refused, naming its owner, and so
/// is anything at `path` that is not a socket (a mistyped path must not cost a file its
/// contents).
pub async fn bind(path: &Path, group: Option<&str>) -> Result<BoundSocket, SocketError> {
    let gid = group.map(group_id).transpose()?;
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let made = !parent.exists();
    let parent = private_dir::ensure(parent)?;
    if let Some(gid) = gid.filter(|_| made) {
        open_to_group(&parent, gid)?;
    }
    let existing = std::fs::symlink_metadata(path).ok();
    if let Some(existing) = &existing
        && !existing.file_type().is_socket()
    {
        return Err(SocketError::NotASocket(path.to_path_buf()));
    }
    if let Some(existing) = existing
        && tokio::net::UnixStream::connect(path).await.is_ok()
    {
        return Err(SocketError::InUse {
            path: path.to_path_buf(),
            owner: User::of(existing.uid()),
        });
    }
    let private = tempfile::Builder::new()
        .prefix(".egress-sandbox-bind.")
        .tempdir_in(&parent)
        .map_err(io_error("cannot create a directory in", &parent))?;
    let staged = private.path().join("api.sock");
    let listener = UnixListener::bind(&staged).map_err(io_error("cannot bind", &staged))?;
    let mode = if gid.is_some() { 0o660 } else { 0o600 };
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))
        .map_err(io_error("cannot set the mode of", &staged))?;
    if let Some(gid) = gid {
        std::os::unix::fs::chown(&staged, None, Some(gid))
            .map_err(io_error("cannot give the group", &staged))?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(io_error("cannot replace", path)(error)),
    }
    let bound = std::fs::symlink_metadata(&staged).map_err(io_error("cannot read", &staged))?;
    std::fs::rename(&staged, path).map_err(io_error("cannot move the socket to", path))?;
    Ok(BoundSocket {
        listener,
        path: path.to_path_buf(),
        identity: (bound.dev(), bound.ino()),
    })
}

/// Lets `gid`'s members through the socket's directory (made by this daemon) to the socket.
fn open_to_group(dir: &Path, gid: u32) -> Result<(), SocketError> {
    std::os::unix::fs::chown(dir, None, Some(gid))
        .map_err(io_error("cannot give the group", dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o710))
        .map_err(io_error("cannot set the mode of", dir))
}

/// A group's id from its name (`/etc/group`) or its number.
fn group_id(group: &str) -> Result<u32, SocketError> {
    if let Ok(gid) = group.parse() {
        return Ok(gid);
    }
    let groups = std::fs::read_to_string("/etc/group")
        .map_err(io_error("cannot read", Path::new("/etc/group")))?;
    groups
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let gid = fields.nth(1)?.parse().ok()?;
            Some((name, gid))
        })
        .find(|(name, _)| *name == group)
        .map(|(_, gid)| gid)
        .ok_or_else(|| SocketError::NoSuchGroup(group.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step's message names the step and its path; the file system's error is its cause,
    /// said once when the chain is printed.
    #[test]
    fn a_failed_step_says_its_cause_once() {
        let error =
            io_error("cannot bind", Path::new("/run/x.sock"))(io::Error::other("disk full"));
        assert_eq!(error.to_string(), "cannot bind /run/x.sock");
        let line = egress_core::text::with_causes(&error);
        assert_eq!(line, "cannot bind /run/x.sock: disk full");
    }

    #[tokio::test]
    async fn the_socket_is_private_and_a_live_one_is_not_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.sock");
        let listener = bind(&path, None).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let error = bind(&path, None).await.expect_err("in use");
        assert!(
            matches!(&error, SocketError::InUse { owner, .. } if owner.uid == private_dir::current_uid()),
            "{error}"
        );
        drop(listener);
        // Stale now: replaced.
        let _again = bind(&path, Some("0")).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o660);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "the staging directory was left behind");
    }

    /// A directory the daemon makes is 0700, or 0710 for the socket's group, whose members
    /// must pass it to reach the socket.
    #[tokio::test]
    async fn a_missing_directory_is_made_private_or_passable_by_the_group() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("own");
        bind(&own.join("api.sock"), None).await.unwrap().close();
        assert_eq!(std::fs::metadata(&own).unwrap().mode() & 0o7777, 0o700);
        let shared = dir.path().join("shared");
        bind(&shared.join("api.sock"), Some("0"))
            .await
            .unwrap()
            .close();
        let meta = std::fs::metadata(&shared).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.gid()), (0o710, 0));
    }

    #[tokio::test]
    async fn closing_removes_only_the_socket_it_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.sock");
        bind(&path, None).await.unwrap().close();
        assert!(!path.exists(), "its own socket is removed");

        // Ours deleted by hand, a newer daemon bound at the same path: ours stops last.
        let older = bind(&path, None).await.unwrap();
        std::fs::remove_file(&path).unwrap();
        let newer = bind(&path, None).await.unwrap();
        older.close();
        assert!(
            tokio::net::UnixStream::connect(&path).await.is_ok(),
            "the newer daemon's socket was removed"
        );
        newer.close();
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn a_path_that_is_not_a_socket_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("precious.txt");
        std::fs::write(&file, "keep me").unwrap();
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let directory = dir.path().join("a-directory");
        std::fs::create_dir(&directory).unwrap();
        for path in [&file, &link, &directory] {
            let error = bind(path, None).await.expect_err("refused");
            assert!(matches!(error, SocketError::NotASocket(_)), "{error}");
            assert!(error.to_string().contains("not a socket"), "{error}");
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn groups_are_found_by_name_or_number() {
        assert_eq!(group_id("0").unwrap(), 0);
        assert_eq!(group_id("root").unwrap(), 0);
        assert!(matches!(
            group_id("no-such-group-x"),
            Err(SocketError::NoSuchGroup(_))
        ));
    }
}
