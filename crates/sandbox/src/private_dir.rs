//! Directories only the running user can change: where every file, lock, socket and binary
//! the tool makes, reuses, executes, mounts or images lives.
//!
//! Another local user must not be able to plant or swap any of them. So a directory is used
//! only if every existing component of its path belongs to the running user or root and no
//! one else can write it (a sticky directory such as `/tmp` excepted: others cannot rename or
//! remove what is not theirs in it), and the directory itself belongs to the running user.
//! Missing components are created with mode 0700. A symbolic link is followed only when it
//! passes the same check, and so does where it points. A place that fails is refused, naming
//! the path, its owner and its mode; it is never used.

use std::fmt;
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

/// Symbolic links followed in one path before it is refused, as the kernel's limit.
const MAX_LINKS: u32 = 40;
/// Write permission for the group or others.
const SHARED_WRITE: u32 = 0o022;
/// Others may write but not rename or remove others' entries.
const STICKY: u32 = 0o1000;

/// Why a place was refused, or could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaceError {
    #[error(
        "refusing to use {}: {problem} (owner {owner}, mode {mode:04o}); egress-sandbox keeps \
         its files only where no other user can change them: remove it or make it yours and \
         not writable by others, or choose another directory (TMPDIR, XDG_CACHE_HOME, --socket)",
        path.display()
    )]
    /// A path component or the directory itself can be changed by someone else, or is not the user's.
    NotPrivate {
        /// The path refused.
        path: PathBuf,
        /// Who owns it.
        owner: User,
        /// Its permission bits.
        mode: u32,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The directory could not be created.
    #[error("cannot create the private directory {}", path.display())]
    Create {
        /// The directory.
        path: PathBuf,
        /// Why it could not.
        #[source]
        source: io::Error,
    },
    /// A path component could not be inspected.
    #[error("cannot inspect {}", path.display())]
    Inspect {
        /// The path.
        path: PathBuf,
        /// Why it could not be inspected.
        #[source]
        source: io::Error,
    },
}

/// A user as an error names them (who owns a file, who answers on a socket): the uid, and
/// the name where `/etc/passwd` knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The user's id.
    pub uid: u32,
    /// The user's name; `None` when `/etc/passwd` does not know the uid.
    pub name: Option<String>,
}

impl User {
    /// The user of `uid`, named from `/etc/passwd` where it can be.
    pub fn of(uid: u32) -> User {
        User {
            uid,
            name: user_name(uid),
        }
    }
}

impl fmt::Display for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "uid {} ({name})", self.uid),
            None => write!(f, "uid {}", self.uid),
        }
    }
}

/// The effective uid of this process: whose files the tool makes.
pub fn current_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The running user's directory in the temporary directory, `$TMPDIR/egress-sandbox-<uid>`;
/// not created here (see [`ensure`]).
pub fn user_temp_dir() -> PathBuf {
    std::env::temp_dir().join(format!("egress-sandbox-{}", current_uid()))
}

/// `dir`, created (with missing parents) mode 0700 if missing, once it is checked: every
/// component as the module says, and `dir` a directory of the running user that no one else
/// can write.
pub fn ensure(dir: &Path) -> Result<PathBuf, PlaceError> {
    let dir = std::path::absolute(dir).map_err(inspect_error(dir))?;
    // Before creating anything: nothing is made inside a place another user controls.
    check_path(&dir)?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|source| PlaceError::Create {
            path: dir.clone(),
            source,
        })?;
    // Again, now that every component exists: one made meanwhile by someone else shows.
    check_path(&dir)?;
    let meta = fs::metadata(&dir).map_err(inspect_error(&dir))?;
    let problem = if !meta.is_dir() {
        Some("it is not a directory")
    } else if meta.uid() != current_uid() {
        Some("it belongs to another user")
    } else if meta.mode() & SHARED_WRITE != 0 {
        Some("others can write to it")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(not_private(&dir, &meta, problem)),
        None => Ok(dir),
    }
}

/// Checks every existing component of `path` (absolute, or taken from the current
/// directory): it belongs to the running user or root and, unless sticky, no one else can
/// write it; a symbolic link passes only if where it points does too. Missing components
/// pass (they are the caller's to create).
pub fn check_path(path: &Path) -> Result<(), PlaceError> {
    let path = std::path::absolute(path).map_err(inspect_error(path))?;
    check_from_root(&path, current_uid(), 0)
}

fn check_from_root(path: &Path, uid: u32, links: u32) -> Result<(), PlaceError> {
    let mut current = PathBuf::from("/");
    let root = fs::symlink_metadata(&current).map_err(inspect_error(&current))?;
    check_component(&current, &root, uid)?;
    for component in path.components() {
        match component {
            Component::Normal(name) => current.push(name),
            Component::ParentDir => {
                current.pop();
                continue;
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => continue,
        }
        let meta = match fs::symlink_metadata(&current) {
            Ok(meta) => meta,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(inspect_error(&current)(error)),
        };
        check_component(&current, &meta, uid)?;
        if meta.file_type().is_symlink() {
            if links >= MAX_LINKS {
                return Err(not_private(&current, &meta, "too many symbolic links"));
            }
            let target = fs::read_link(&current).map_err(inspect_error(&current))?;
            let link_dir = current.parent().unwrap_or(Path::new("/"));
            check_from_root(&link_dir.join(target), uid, links + 1)?;
            current = match fs::canonicalize(&current) {
                Ok(resolved) => resolved,
                // A dangling link: nothing beyond it exists.
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(error) => return Err(inspect_error(&current)(error)),
            };
        }
    }
    Ok(())
}

/// One component: its owner, and who may write it (a link's own mode means nothing).
fn check_component(path: &Path, meta: &Metadata, uid: u32) -> Result<(), PlaceError> {
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(not_private(path, meta, "it belongs to another user"));
    }
    let shared = meta.mode() & SHARED_WRITE != 0 && meta.mode() & STICKY == 0;
    if !meta.file_type().is_symlink() && shared {
        return Err(not_private(
            path,
            meta,
            "others can write to it and it is not sticky",
        ));
    }
    Ok(())
}

fn not_private(path: &Path, meta: &Metadata, problem: &'static str) -> PlaceError {
    PlaceError::NotPrivate {
        path: path.to_path_buf(),
        owner: User::of(meta.uid()),
        mode: meta.mode() & 0o7777,
        problem,
    }
}

fn inspect_error(path: &Path) -> impl FnOnce(io::Error) -> PlaceError {
    let path = path.to_path_buf();
    move |source| PlaceError::Inspect { path, source }
}

/// The name `/etc/passwd` gives `uid`, if any.
fn user_name(uid: u32) -> Option<String> {
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn set_mode(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn refusal(error: PlaceError) -> (PathBuf, u32, &'static str) {
        match error {
            PlaceError::NotPrivate {
                path,
                mode,
                problem,
                ..
            } => (path, mode, problem),
            other => panic!("not a refusal: {other}"),
        }
    }

    #[test]
    fn a_missing_directory_is_created_private_with_its_parents() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("a/b/c");
        assert_eq!(ensure(&dir).unwrap(), dir);
        for made in ["a", "a/b", "a/b/c"] {
            let mode = fs::metadata(base.path().join(made)).unwrap().mode();
            assert_eq!(mode & 0o777, 0o700, "{made}");
        }
        assert_eq!(
            ensure(&dir).unwrap(),
            dir,
            "an existing one is taken as it is"
        );
    }

    #[test]
    fn a_directory_others_can_write_is_refused_unless_sticky() {
        let base = tempfile::tempdir().unwrap();
        let shared = base.path().join("shared");
        fs::create_dir(&shared).unwrap();
        set_mode(&shared, 0o777);
        let (path, mode, problem) = refusal(ensure(&shared.join("mine")).unwrap_err());
        assert_eq!((path, mode), (shared.clone(), 0o777));
        assert!(problem.contains("others can write"), "{problem}");
        assert!(!shared.join("mine").exists(), "nothing is made in it");

        set_mode(&shared, 0o1777);
        let mine = ensure(&shared.join("mine")).unwrap();
        assert!(mine.is_dir());

        set_mode(&mine, 0o1777);
        let (path, _, _) = refusal(ensure(&mine).unwrap_err());
        assert_eq!(path, mine, "the directory itself has no sticky exception");
    }

    #[test]
    fn the_message_names_the_path_its_owner_and_mode() {
        let base = tempfile::tempdir().unwrap();
        set_mode(base.path(), 0o757);
        let message = ensure(&base.path().join("x")).unwrap_err().to_string();
        let root = User::of(current_uid()).to_string();
        for part in [
            &base.path().display().to_string(),
            &root,
            "mode 0757",
            "others can write",
            "choose another directory",
        ] {
            assert!(message.contains(part), "{part} in: {message}");
        }
    }

    #[test]
    fn a_file_where_the_directory_should_be_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let file = base.path().join("file");
        fs::write(&file, "").unwrap();
        set_mode(&file, 0o600);
        assert!(ensure(&file).is_err());
    }

    #[test]
    fn links_are_followed_only_to_places_that_pass() {
        let base = tempfile::tempdir().unwrap();
        let good = base.path().join("good");
        fs::create_dir(&good).unwrap();
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(ensure(&link.join("inner")).is_ok());

        let shared = base.path().join("shared");
        fs::create_dir(&shared).unwrap();
        set_mode(&shared, 0o777);
        let bad_link = base.path().join("bad-link");
        std::os::unix::fs::symlink(&shared, &bad_link).unwrap();
        let (path, _, _) = refusal(check_path(&bad_link.join("inner")).unwrap_err());
        assert_eq!(path, shared);

        let looping = base.path().join("loop");
        std::os::unix::fs::symlink(&looping, &looping).unwrap();
        assert!(check_path(&looping.join("x")).is_err());
    }

    #[test]
    fn owners_are_named_when_known() {
        assert_eq!(User::of(0).to_string(), "uid 0 (root)");
        assert_eq!(User::of(4_000_000_001).to_string(), "uid 4000000001");
    }

    #[test]
    fn the_users_temp_dir_is_named_by_uid() {
        let dir = user_temp_dir();
        assert_eq!(dir.parent(), Some(std::env::temp_dir().as_path()));
        assert_eq!(
            dir.file_name().unwrap().to_str().unwrap(),
            format!("egress-sandbox-{}", current_uid())
        );
    }
}
