//! The temporary root filesystem debootstrap fills: a guard that always removes it, and the
//! trimming that turns a fresh debootstrap tree into an image-sized one.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Directories whose contents are not needed at run time (apt re-creates its lists on
/// `apt-get update`), or that Docker provides itself (`/dev`).
const EMPTIED_DIRS: &[&str] = &[
    "var/lib/apt/lists",
    "var/cache/apt",
    "var/cache/debconf/templates.dat-old",
    "var/log",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "tmp",
    "var/tmp",
    "dev",
];
const NOBODY_PASSWD: &str = "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const NOGROUP_GROUP: &str = "nogroup:x:65534:\n";

/// A root filesystem directory that is removed when dropped, on every path. debootstrap
/// mounts /proc and /sys inside the tree and may die before unmounting them, so mounts under
/// the tree are detached first, and if any survives nothing is deleted (deleting through a
/// live mount would reach the host's files).
#[derive(Debug)]
pub(super) struct RootfsDir {
    path: PathBuf,
}

impl RootfsDir {
    pub(super) fn create(path: PathBuf) -> io::Result<Self> {
        fs::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
        fs::create_dir(&path)?;
        Ok(Self { path })
    }

    /// Takes ownership of a directory left behind by an earlier, killed build.
    pub(super) fn adopt(path: PathBuf) -> Self {
        Self { path }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RootfsDir {
    fn drop(&mut self) {
        let mut mounts = mounts_under(&self.path);
        // Innermost first, so /proc/bus/usb goes before /proc.
        mounts.sort_by_key(|m| std::cmp::Reverse(m.as_os_str().len()));
        for mount in &mounts {
            let _ = std::process::Command::new("umount")
                .arg("--lazy")
                .arg(mount)
                .status();
        }
        let left = mounts_under(&self.path);
        if !left.is_empty() {
            tracing::warn!(
                dir = %self.path.display(),
                mounts = ?left,
                "left the base image build directory in place: mounts are still active beneath it"
            );
            return;
        }
        if let Err(error) = fs::remove_dir_all(&self.path)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.path.display(), %error, "could not remove the build directory");
        }
    }
}

/// Mount points at or below `dir`, from /proc/self/mountinfo (field 5, octal-escaped).
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(table) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mountinfo(field)))
        .filter(|mount| mount.starts_with(&dir))
        .collect()
}

fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(code) = u8::from_str_radix(&field[i + 1..i + 4], 8)
        {
            out.push(code);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Trims a fresh debootstrap tree and makes sure what the sandbox relies on is there:
/// user `nobody` (65534) and group `nogroup`, `/tmp` and `/var/tmp` with mode 1777, and no
/// host identity (debootstrap copies the host's /etc/hostname and /etc/resolv.conf; Docker
/// mounts its own over them at run time).
pub(super) fn prepare_for_image(root: &Path) -> io::Result<()> {
    for dir in EMPTIED_DIRS {
        empty_dir(&root.join(dir))?;
    }
    fs::write(root.join("etc/hostname"), "localhost\n")?;
    fs::write(root.join("etc/resolv.conf"), "")?;
    ensure_line(&root.join("etc/passwd"), "nobody:", NOBODY_PASSWD)?;
    ensure_line(&root.join("etc/group"), "nogroup:", NOGROUP_GROUP)?;
    for tmp in ["tmp", "var/tmp"] {
        let path = root.join(tmp);
        fs::create_dir_all(&path)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o1777))?;
    }
    Ok(())
}

/// Removes everything inside `dir` (a file at that path is removed); missing is fine.
/// Never follows symlinks.
fn empty_dir(dir: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if !meta.is_dir() {
        return fs::remove_file(dir);
    }
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())?;
        } else {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Appends `line` to `file` unless a line already starts with `prefix`.
fn ensure_line(file: &Path, prefix: &str, line: &str) -> io::Result<()> {
    let mut text = fs::read_to_string(file).unwrap_or_default();
    if text.lines().any(|l| l.starts_with(prefix)) {
        return Ok(());
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    fs::write(file, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_debootstrap_tree(root: &Path) {
        for dir in [
            "etc",
            "usr/share/doc/python3",
            "var/lib/apt/lists",
            "tmp",
            "dev",
        ] {
            fs::create_dir_all(root.join(dir)).unwrap();
        }
        fs::write(root.join("usr/share/doc/python3/copyright"), "text").unwrap();
        fs::write(
            root.join("var/lib/apt/lists/deb.debian.org_Packages"),
            "index",
        )
        .unwrap();
        fs::write(root.join("etc/hostname"), "the-build-host\n").unwrap();
        fs::write(root.join("etc/resolv.conf"), "nameserver 10.0.0.1\n").unwrap();
        fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/bash").unwrap();
        fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n").unwrap();
        std::os::unix::fs::symlink("/proc/self/fd", root.join("dev/fd")).unwrap();
    }

    #[test]
    fn trimming_removes_docs_indexes_and_host_identity() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fake_debootstrap_tree(root);
        prepare_for_image(root).unwrap();
        assert!(root.join("usr/share/doc").is_dir());
        assert_eq!(fs::read_dir(root.join("usr/share/doc")).unwrap().count(), 0);
        assert_eq!(
            fs::read_dir(root.join("var/lib/apt/lists"))
                .unwrap()
                .count(),
            0
        );
        assert_eq!(fs::read_dir(root.join("dev")).unwrap().count(), 0);
        assert_eq!(
            fs::read_to_string(root.join("etc/hostname")).unwrap(),
            "localhost\n"
        );
        assert_eq!(
            fs::read_to_string(root.join("etc/resolv.conf")).unwrap(),
            ""
        );
    }

    #[test]
    fn nobody_is_added_once_and_tmp_is_sticky_world_writable() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fake_debootstrap_tree(root);
        prepare_for_image(root).unwrap();
        prepare_for_image(root).unwrap();
        let passwd = fs::read_to_string(root.join("etc/passwd")).unwrap();
        assert_eq!(
            passwd,
            format!("root:x:0:0:root:/root:/bin/bash\n{NOBODY_PASSWD}")
        );
        let group = fs::read_to_string(root.join("etc/group")).unwrap();
        assert_eq!(group.matches("nogroup:").count(), 1);
        for tmp in ["tmp", "var/tmp"] {
            let mode = fs::metadata(root.join(tmp)).unwrap().permissions().mode();
            assert_eq!(mode & 0o7777, 0o1777, "{tmp}");
        }
    }

    #[test]
    fn the_guard_removes_the_tree_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base-rootfs.1");
        let rootfs = RootfsDir::create(path.clone()).unwrap();
        fake_debootstrap_tree(rootfs.path());
        drop(rootfs);
        assert!(!path.exists());
        drop(RootfsDir::adopt(path));
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo(r"/tmp/a\040b\011c"), "/tmp/a b\tc");
        assert_eq!(unescape_mountinfo(r"/plain\"), r"/plain\");
        assert!(mounts_under(Path::new("/")).contains(&PathBuf::from("/proc")));
    }
}
