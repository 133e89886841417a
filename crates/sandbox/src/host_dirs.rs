//! A run's private directories on the host: its resolv.conf, its trust bundle and its doors
//! directory, each a temporary directory removed when the run drops it.
//!
//! The sandbox sees what is mounted from them, and its `/proc/self/mountinfo` shows each
//! mount's source path. So a directory's name says nothing of the host or its owner
//! (`egress-sandbox-run-<random>`), and what is mounted is always a file or directory inside
//! it, never the directory itself.
//!
//! A process killed with SIGKILL drops nothing, so each directory holds its owner's stamp
//! (as in the owner label) in a file [`OWNER_FILE`] beside what is mounted: the watchdog
//! removes its owner's directories with its containers, and `gc` those of owners it proves
//! dead, by the same judgement as their containers.

use std::path::{Path, PathBuf};

use crate::labels::{Owner, OwnerLabel};
use crate::private_dir;

/// Every directory of a run is named this, then random characters.
const PREFIX: &str = "egress-sandbox-run-";
/// The file in a run directory naming its owner; never mounted.
const OWNER_FILE: &str = "owner";

/// A new directory for a run of `owner` (mode 0700), in the temporary directory. Mount
/// only what is put inside it.
///
/// Made with a random name that must not exist yet, so it is this process's own; the
/// temporary directory is checked first ([`private_dir::check_path`]): one that others
/// can write without it being sticky would let them move the run's directory away.
pub(crate) fn create(owner: &Owner) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    private_dir::check_path(&std::env::temp_dir()).map_err(std::io::Error::other)?;
    let dir = tempfile::Builder::new().prefix(PREFIX).tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    std::fs::write(dir.path().join(OWNER_FILE), owner.to_string())?;
    Ok(dir)
}

/// This user's run directories in `parent` (the temporary directory), each with the owner
/// its stamp names ([`OwnerLabel::Unreadable`] when the stamp is not there yet or not ours
/// to read). Another user's directory of the same name is never one: its stamp could name
/// any owner.
pub(crate) fn find(parent: &Path) -> Vec<(PathBuf, OwnerLabel)> {
    find_of(parent, private_dir::current_uid())
}

fn find_of(parent: &Path, uid: u32) -> Vec<(PathBuf, OwnerLabel)> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.starts_with(PREFIX))
                // Not followed if a link: only a directory itself is one.
                && entry
                    .metadata()
                    .is_ok_and(|meta| meta.is_dir() && meta.uid() == uid)
        })
        .map(|entry| {
            let owner = std::fs::read_to_string(entry.path().join(OWNER_FILE))
                .map_or(OwnerLabel::Unreadable, |stamp| Owner::parse(stamp.trim()));
            (entry.path(), owner)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::HostIdentity;

    fn owner() -> Owner {
        Owner {
            pid: 4242,
            start_time: 99,
            host: HostIdentity {
                boot_id: "f74a648c-5686-4894-93df-28551519ce56".into(),
                pid_namespace: 4026531836,
            },
        }
    }

    /// A directory's name says nothing of its owner; its stamp file does, and `find` reads
    /// it; other names in the same place are not taken for run directories.
    #[test]
    fn a_run_directory_is_named_neutrally_and_found_by_its_owner_stamp() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let dir = tempfile::Builder::new()
            .prefix(PREFIX)
            .tempdir_in(parent.path())
            .unwrap();
        std::fs::write(dir.path().join(OWNER_FILE), owner().to_string()).unwrap();
        for other in [
            "egress-sandbox-cache",
            "egress-sandbox-run-file",
            "something-else",
        ] {
            std::fs::write(parent.path().join(other), "").unwrap();
        }
        let unstamped = parent.path().join("egress-sandbox-run-Unstamped");
        std::fs::create_dir(&unstamped).unwrap();
        assert!(
            find_of(parent.path(), 4_000_000_001).is_empty(),
            "another user's directories are not this user's runs"
        );
        let mut found = find(parent.path());
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let mut expected = vec![
            (dir.path().to_path_buf(), OwnerLabel::Owner(owner())),
            (unstamped, OwnerLabel::Unreadable),
        ];
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(found, expected);

        let made = create(&owner()).unwrap();
        let name = made.path().file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with(PREFIX), "{name}");
        for stamp_part in ["4242", "f74a648c", "4026531836"] {
            assert!(!name.contains(stamp_part), "{name}");
        }
        let mode = std::fs::metadata(made.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
}
