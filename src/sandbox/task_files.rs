//! Files handed to a run (`files` in the API): they land under [`TASK_DIR`], a tmpfs of
//! the sandbox's own, written by the sandbox's gate just before the command runs — so the
//! command's files need no bind mount from the host, and nothing of them outlives the run.

use serde::{Deserialize, Serialize};

/// Where task files land; the default working directory of a run that has files.
pub const TASK_DIR: &str = "/task";
/// Bytes of all files of one run together (they travel through the gate's stdin).
pub const MAX_TASK_FILES_BYTES: u64 = 64 << 20;

/// One file: a relative path under [`TASK_DIR`] and its bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFile {
    pub path: String,
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
    Ok(())
}

mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
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
