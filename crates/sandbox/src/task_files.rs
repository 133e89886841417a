//! Files handed to a run (`files` in the API): they land under [`TASK_DIR`], a tmpfs of
//! the sandbox's own, written by the sandbox's launcher just before the command runs — so the
//! command's files need no bind mount from the host, and nothing of them outlives the run.

use serde::{Deserialize, Serialize};

/// Where task files land; the default working directory of a run that has files.
pub const TASK_DIR: &str = "/task";
/// Bytes of all files of one run together (they travel through the launcher's stdin).
pub const MAX_TASK_FILES_BYTES: u64 = 64 << 20;

/// Files of one run: each is an inode in the sandbox's tmpfs and a step of its launcher.
pub const MAX_TASK_FILES: usize = 10_000;
/// Longest name of one path component (the kernel's NAME_MAX).
const MAX_NAME_BYTES: usize = 255;
/// Longest path under [`TASK_DIR`] (the kernel's PATH_MAX, less the directory's own).
const MAX_PATH_BYTES: usize = 4096 - TASK_DIR.len() - 1;

/// One file: a relative path under [`TASK_DIR`] and its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFile {
    /// The path relative to [`TASK_DIR`], checked by [`check_path`].
    pub path: String,
    /// The file's bytes, base64 in JSON.
    #[serde(with = "base64_bytes")]
    pub contents: Vec<u8>,
}

/// Why a file path is refused; the caller names the field.
pub fn check_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("empty file name");
    }
    if path.contains('\0') {
        return Err("a file name cannot hold a NUL byte");
    }
    if path.starts_with('/') {
        return Err("must be a path relative to /task");
    }
    // Checked on the text: `Path::components` would quietly drop `.` and empty parts.
    if path
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err("must stay under /task (no `..`, `.` or empty components)");
    }
    if path.len() > MAX_PATH_BYTES {
        return Err("the path is longer than 4,090 bytes");
    }
    if path.split('/').any(|part| part.len() > MAX_NAME_BYTES) {
        return Err("a name in the path is longer than 255 bytes");
    }
    Ok(())
}

/// Why a set of (each valid) paths cannot all be written, with the path to name: too many,
/// the same path twice, or a file where another needs a directory (`a` and `a/b`). Found
/// here, not by the launcher after the set-up, where it would look like the command's failure.
pub(crate) fn check_paths<'a>(
    paths: impl IntoIterator<Item = &'a str>,
) -> Result<(), (String, String)> {
    let mut files = std::collections::BTreeSet::new();
    for path in paths {
        if !files.insert(path) {
            return Err((path.to_owned(), "the same path is given twice".to_owned()));
        }
        if files.len() > MAX_TASK_FILES {
            return Err((path.to_owned(), format!("more than {MAX_TASK_FILES} files")));
        }
    }
    for path in &files {
        let directories = path.match_indices('/').map(|(end, _)| &path[..end]);
        for directory in directories {
            if files.contains(directory) {
                return Err((
                    (*path).to_owned(),
                    format!("`{directory}` is a file, so it cannot also be a directory"),
                ));
            }
        }
    }
    Ok(())
}

mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_under_the_task_directory() {
        for good in ["main.py", "pkg/mod.py", "a b/ü.txt", ".hidden"] {
            assert_eq!(check_path(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "./x",
            "a/./b",
            "a//b",
            "a/",
            "a\0b",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn names_and_paths_fit_the_kernels_limits() {
        assert_eq!(check_path(&"n".repeat(255)), Ok(()));
        assert!(check_path(&"n".repeat(256)).is_err());
        let deep = vec!["d".repeat(200); 20].join("/");
        assert_eq!(check_path(&deep), Ok(()));
        assert!(check_path(&vec!["d".repeat(200); 21].join("/")).is_err());
    }

    #[test]
    fn a_set_of_paths_must_be_writable_together() {
        assert_eq!(check_paths(["main.py", "pkg/a.py", "pkg/sub/b.py"]), Ok(()));
        let (path, reason) = check_paths(["a", "a/b"]).unwrap_err();
        assert_eq!(path, "a/b");
        assert!(reason.contains("`a` is a file"), "{reason}");
        assert!(check_paths(["x/y", "x/y/z/w"]).is_err());
        assert!(check_paths(["x", "x"]).unwrap_err().1.contains("twice"));
        let many: Vec<String> = (0..=MAX_TASK_FILES).map(|n| format!("f{n}")).collect();
        let (_, reason) = check_paths(many.iter().map(String::as_str)).unwrap_err();
        assert!(reason.contains("more than 10000 files"), "{reason}");
    }

    #[test]
    fn contents_travel_as_base64() {
        let file = TaskFile {
            path: "x".into(),
            contents: vec![0, 255, b'a'],
        };
        let json = serde_json::to_string(&file).unwrap();
        assert_eq!(json, r#"{"path":"x","contents":"AP9h"}"#);
        assert_eq!(serde_json::from_str::<TaskFile>(&json).unwrap(), file);
    }
}
