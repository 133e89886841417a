//! A run's private directories on the host: its resolv.conf, its trust bundle and its doors
//! directory, each a temporary directory removed when the run drops it.
//!
//! A process killed with SIGKILL drops nothing, so each directory is named by its owner
//! (`egress-sandbox-KIND-<owner stamp>-<random>`, the stamp as in the owner label with `_`
//! for `:`): the watchdog removes its owner's directories with its containers, and `gc`
//! those of owners it proves dead, by the same judgement as their containers.

use std::path::{Path, PathBuf};

use super::labels::{Owner, OwnerLabel};

/// Every directory of a run starts with this.
const PREFIX: &str = "egress-sandbox-";
/// The kinds of run directory, in their names.
pub(crate) const RESOLV: &str = "resolv";
pub(crate) const TRUST: &str = "trust";
pub(crate) const DOORS: &str = "doors";
const KINDS: [&str; 3] = [RESOLV, TRUST, DOORS];

/// A new directory of `kind` for a run of `owner` (mode 0700), in the temporary directory.
pub(crate) fn create(kind: &str, owner: &Owner) -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let stamp = owner.to_string().replace(':', "_");
    let dir = tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{kind}-{stamp}-"))
        .tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Run directories in `parent` (the temporary directory), each with what its name says of
/// its owner.
pub(crate) fn find(parent: &Path) -> Vec<(PathBuf, OwnerLabel)> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let owner = owner_in(&name)?;
            entry
                .file_type()
                .is_ok_and(|kind| kind.is_dir())
                .then(|| (entry.path(), owner))
        })
        .collect()
}

/// The owner a run directory's name gives, or `None` when it is no run directory.
fn owner_in(name: &str) -> Option<OwnerLabel> {
    let rest = name.strip_prefix(PREFIX)?;
    let (kind, rest) = rest.split_once('-')?;
    if !KINDS.contains(&kind) {
        return None;
    }
    // The random part tempfile adds is alphanumeric: the stamp ends at the last '-'.
    let (stamp, _random) = rest.rsplit_once('-')?;
    Some(Owner::parse(&stamp.replace('_', ":")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::labels::HostIdentity;

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

    /// A directory names its owner, private to this user, and is found by it; other
    /// names in the same place are not taken for run directories.
    #[test]
    fn a_run_directory_names_its_owner_and_is_found_by_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = create(DOORS, &owner()).unwrap();
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let parent = dir.path().parent().unwrap();
        let found: Vec<_> = find(parent)
            .into_iter()
            .filter(|(path, _)| path == dir.path())
            .collect();
        assert_eq!(
            found,
            [(dir.path().to_path_buf(), OwnerLabel::Owner(owner()))]
        );
        for other in [
            "egress-sandbox-cache",
            "egress-sandbox-kept-binary-1-x",
            "egress-sandbox-doors-nonsense",
            "something-else",
        ] {
            assert!(
                owner_in(other).is_none_or(|label| label == OwnerLabel::Unreadable),
                "{other}"
            );
        }
        assert_eq!(
            owner_in("egress-sandbox-trust-1_2_b-o-o-t_3-Ab12cd"),
            Some(OwnerLabel::Owner(Owner {
                pid: 1,
                start_time: 2,
                host: HostIdentity {
                    boot_id: "b-o-o-t".into(),
                    pid_namespace: 3
                }
            }))
        );
    }
}
