//! The helper binary, `egress-sandbox-helper`: the one executable a run needs besides this
//! library. It is the proxy in the proxy container (`FROM scratch`: so it is static), the
//! sandbox's launcher, and the watchdog child of [`crate::watchdog`]; the library runs it,
//! never links it (so an embedder compiles no proxy).
//!
//! The two are built apart, so before a handle uses a helper it asks it: `<helper> version`
//! answers one line, [`HelperVersion::line`], naming the helper's version and the versions of
//! the two formats the library speaks to it — the proxy's handoff
//! ([`egress_core::handoff::HANDOFF_VERSION`]) and the launcher's signal
//! ([`crate::launch_signal::LAUNCH_VERSION`]). A helper that answers anything else is refused
//! with both versions and its path named, before any container exists. The `egress-sandbox`
//! command is a helper too (it answers the same line), and passes itself.
//!
//! [`Helper::locate`] finds it: `EGRESS_SANDBOX_HELPER`, else beside the running program or
//! in the directory above it (cargo puts examples in `target/<triple>/debug/examples/`, test
//! binaries in `…/debug/deps/`, the helper in `…/debug/`), else on `PATH`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::Sandbox;
use crate::docker::DockerEngine;
use crate::outcome::RunError;

/// The helper's file name.
pub const HELPER_NAME: &str = "egress-sandbox-helper";
/// The variable that names the helper's path, before any directory is searched.
pub const HELPER_ENV: &str = "EGRESS_SANDBOX_HELPER";
/// How long a helper may take to answer `version`: it only prints a line.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a helper's answer an error quotes.
const SAID_SHOWN: usize = 200;

/// What a helper says it is: its version and the format versions it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelperVersion {
    /// The helper's crate version (the egress-sandbox workspace's).
    pub version: String,
    /// The handoff line's format it reads.
    pub handoff: u32,
    /// The launch signal's format it reads.
    pub launch: u32,
}

impl HelperVersion {
    /// What a helper built with this library answers.
    pub fn this_library() -> HelperVersion {
        HelperVersion {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            handoff: egress_core::handoff::HANDOFF_VERSION,
            launch: crate::launch_signal::LAUNCH_VERSION,
        }
    }

    /// The answer to `version`: `egress-sandbox-helper 0.1.0 handoff 1 launch 1`.
    pub fn line(&self) -> String {
        format!(
            "{HELPER_NAME} {} handoff {} launch {}",
            self.version, self.handoff, self.launch
        )
    }

    /// Reads an answer to `version`: the helper's name and version, then `KEY NUMBER` pairs,
    /// of which `handoff` and `launch` must be given (others, of a later helper, are passed
    /// over: its version differs anyway). `None` if it is no such line.
    pub fn parse(line: &str) -> Option<HelperVersion> {
        let mut words = line.split_ascii_whitespace();
        if words.next()? != HELPER_NAME {
            return None;
        }
        let version = words.next()?.to_owned();
        let (mut handoff, mut launch) = (None, None);
        while let Some(key) = words.next() {
            let number: u32 = words.next()?.parse().ok()?;
            match key {
                "handoff" => handoff = Some(number),
                "launch" => launch = Some(number),
                _ => {}
            }
        }
        Some(HelperVersion {
            version,
            handoff: handoff?,
            launch: launch?,
        })
    }

    fn formats(&self) -> String {
        format!(
            "handoff version {}, launch version {}",
            self.handoff, self.launch
        )
    }
}

impl std::fmt::Display for HelperVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{HELPER_NAME} {} ({})", self.version, self.formats())
    }
}

/// Why no helper can be used. Each message names the path and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HelperError {
    #[error(
        "cannot find {HELPER_NAME}, the binary that runs a sandbox's proxy, launcher and watchdog \
         (looked for {}): build it with `cargo build -p egress-sandbox-helper` from the same \
         egress-sandbox as this library, then put it beside this program or on PATH, or name \
         it in {HELPER_ENV}",
        shown_paths(searched)
    )]
    /// No helper binary was found.
    NotFound {
        /// Every path looked at, in order.
        searched: Vec<PathBuf>,
    },
    /// The helper could not be run.
    #[error("cannot run `{} version`", path.display())]
    Run {
        /// The file run.
        path: PathBuf,
        /// Why it could not be run.
        #[source]
        source: std::io::Error,
    },
    /// The helper did not answer the handshake in time.
    #[error("`{} version` did not answer within {}s", path.display(), HANDSHAKE_TIMEOUT.as_secs())]
    Timeout {
        /// The file run.
        path: PathBuf,
    },
    #[error(
        "{} is not an {HELPER_NAME}: `version` answered {said:?}, not `{HELPER_NAME} VERSION handoff N launch M`",
        path.display()
    )]
    /// The file's answer is not a helper's handshake.
    NotAHelper {
        /// The file run.
        path: PathBuf,
        /// What it answered.
        said: String,
    },
    #[error(
        "{} is {found}, but this library (egress-sandbox {}) speaks {}: use the helper built \
         with this library ({HELPER_NAME} {})",
        path.display(),
        expected.version,
        expected.formats(),
        expected.version
    )]
    /// The helper is of another version or speaks other formats than this library.
    Mismatch {
        /// The file run.
        path: PathBuf,
        /// The version and formats it answered.
        found: HelperVersion,
        /// The version and formats this library needs.
        expected: HelperVersion,
    },
}

fn shown_paths(paths: &[PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    if shown.is_empty() {
        "nowhere: neither this program's path nor PATH is known".to_owned()
    } else {
        shown.join(", ")
    }
}

/// A helper binary that answered the handshake as this library expects.
#[derive(Clone, Debug)]
pub struct Helper {
    path: PathBuf,
    version: HelperVersion,
}

impl Helper {
    /// Finds the helper — `EGRESS_SANDBOX_HELPER`, else beside this program or above it,
    /// else on `PATH` (`docs/src/guide/library.md`) — and checks it. A helper named by the
    /// variable is the only one tried; otherwise the first file found is, and one of another
    /// version is refused rather than passed over.
    pub async fn locate() -> Result<Helper, HelperError> {
        let places = Places {
            named: std::env::var_os(HELPER_ENV).filter(|named| !named.is_empty()),
            program: std::env::current_exe().ok(),
            path: std::env::var_os("PATH"),
        };
        match places.find() {
            Found::Named(path) => Helper::at(path).await,
            Found::Searched { found, searched } => match found {
                Some(path) => Helper::at(path).await,
                None => Err(HelperError::NotFound { searched }),
            },
        }
    }

    /// The helper at `path`, checked: it must answer `version` with this library's
    /// [`HelperVersion::this_library`].
    pub async fn at(path: impl Into<PathBuf>) -> Result<Helper, HelperError> {
        let path = path.into();
        let found = handshake(&path).await?;
        let expected = HelperVersion::this_library();
        if found != expected {
            return Err(HelperError::Mismatch {
                path,
                found,
                expected,
            });
        }
        Ok(Helper {
            path,
            version: found,
        })
    }

    /// The helper binary's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version and formats it answered the handshake with.
    pub fn version(&self) -> &HelperVersion {
        &self.version
    }
}

impl Sandbox {
    /// Connects as [`Sandbox::connect`] does, with the helper binary found and checked by
    /// [`Helper::locate`]: what a program that embeds the library calls, with
    /// `egress-sandbox-helper` built beside it (or named in `EGRESS_SANDBOX_HELPER`). A
    /// helper that cannot be found or is of another version is refused before the engine is
    /// asked anything.
    pub async fn connect_with_helper() -> Result<Sandbox, RunError> {
        let helper = Helper::locate().await?;
        let engine = DockerEngine::connect().await?;
        Sandbox::with_engine(std::sync::Arc::new(engine), helper.path())
    }
}

/// Where a helper may be, as read from this process.
struct Places {
    /// `EGRESS_SANDBOX_HELPER`, when set and not empty.
    named: Option<OsString>,
    /// The running program.
    program: Option<PathBuf>,
    /// `PATH`.
    path: Option<OsString>,
}

/// What a search of [`Places`] gives.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// The variable named it: that path and no other.
    Named(PathBuf),
    /// The first file of `searched` that exists, if any.
    Searched {
        found: Option<PathBuf>,
        searched: Vec<PathBuf>,
    },
}

impl Places {
    fn find(&self) -> Found {
        if let Some(named) = &self.named {
            return Found::Named(PathBuf::from(named));
        }
        let searched = self.candidates();
        let found = searched.iter().find(|path| path.is_file()).cloned();
        Found::Searched { found, searched }
    }

    /// Beside the program, the directory above it, then each directory of `PATH`.
    fn candidates(&self) -> Vec<PathBuf> {
        let beside = self.program.as_deref().and_then(Path::parent);
        let above = beside.and_then(Path::parent);
        let on_path = self
            .path
            .iter()
            .flat_map(std::env::split_paths)
            .filter(|dir| !dir.as_os_str().is_empty());
        beside
            .into_iter()
            .chain(above)
            .map(Path::to_path_buf)
            .chain(on_path)
            .map(|dir| dir.join(HELPER_NAME))
            .collect()
    }
}

/// Runs `<path> version` and reads its answer.
async fn handshake(path: &Path) -> Result<HelperVersion, HelperError> {
    let mut command = tokio::process::Command::new(path);
    command
        .arg("version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(HANDSHAKE_TIMEOUT, command.output())
        .await
        .map_err(|_| HelperError::Timeout {
            path: path.to_owned(),
        })?
        .map_err(|source| HelperError::Run {
            path: path.to_owned(),
            source,
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let answer = stdout.lines().next().unwrap_or_default();
    match HelperVersion::parse(answer) {
        Some(version) if output.status.success() => Ok(version),
        _ => Err(HelperError::NotAHelper {
            path: path.to_owned(),
            said: said(answer, &output.stderr),
        }),
    }
}

/// What a binary that is no helper answered, cut short: its first line on stdout, else its
/// stderr.
fn said(answer: &str, stderr: &[u8]) -> String {
    let text = if answer.trim().is_empty() {
        String::from_utf8_lossy(stderr).trim().to_owned()
    } else {
        answer.trim().to_owned()
    };
    text.chars().take(SAID_SHOWN).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn this() -> HelperVersion {
        HelperVersion::this_library()
    }

    #[test]
    fn the_version_line_reads_back() {
        let line = this().line();
        assert_eq!(
            line,
            format!(
                "egress-sandbox-helper {} handoff {} launch {}",
                env!("CARGO_PKG_VERSION"),
                egress_core::handoff::HANDOFF_VERSION,
                crate::launch_signal::LAUNCH_VERSION
            )
        );
        assert_eq!(HelperVersion::parse(&line), Some(this()));
        assert_eq!(
            HelperVersion::parse("egress-sandbox-helper 9.0.0 launch 4 handoff 3 doors 2"),
            Some(HelperVersion {
                version: "9.0.0".into(),
                handoff: 3,
                launch: 4
            })
        );
    }

    #[test]
    fn other_lines_are_no_version() {
        for line in [
            "",
            "egress-sandbox 0.1.0",
            "egress-sandbox-helper",
            "egress-sandbox-helper 0.1.0",
            "egress-sandbox-helper 0.1.0 handoff 1",
            "egress-sandbox-helper 0.1.0 handoff one launch 1",
            "egress-sandbox-helper 0.1.0 handoff 1 launch",
            "other-helper 0.1.0 handoff 1 launch 1",
        ] {
            assert_eq!(HelperVersion::parse(line), None, "{line:?}");
        }
    }

    #[test]
    fn the_variable_names_the_one_helper_tried() {
        let places = Places {
            named: Some("/opt/helper".into()),
            program: Some("/nonexistent/bin/program".into()),
            path: Some("/usr/bin".into()),
        };
        assert_eq!(places.find(), Found::Named("/opt/helper".into()));
    }

    #[test]
    fn the_search_goes_beside_the_program_above_it_then_along_path() {
        let places = Places {
            named: None,
            program: Some("/t/debug/examples/embed".into()),
            path: Some("/a::/b".into()),
        };
        assert_eq!(
            places.candidates(),
            [
                "/t/debug/examples/egress-sandbox-helper",
                "/t/debug/egress-sandbox-helper",
                "/a/egress-sandbox-helper",
                "/b/egress-sandbox-helper"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn the_first_file_found_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let examples = dir.path().join("debug/examples");
        std::fs::create_dir_all(&examples).unwrap();
        let helper = dir.path().join("debug").join(HELPER_NAME);
        std::fs::write(&helper, "").unwrap();
        let places = Places {
            named: None,
            program: Some(examples.join("embed")),
            path: None,
        };
        let Found::Searched { found, searched } = places.find() else {
            panic!("searched");
        };
        assert_eq!(found, Some(helper));
        assert_eq!(searched.len(), 2);
        let nowhere = Places {
            named: None,
            program: None,
            path: None,
        };
        let Found::Searched { found, searched } = nowhere.find() else {
            panic!("searched");
        };
        assert_eq!((found, searched.len()), (None, 0));
    }

    #[test]
    fn not_found_says_how_to_build_it_and_where_it_looked() {
        let error = HelperError::NotFound {
            searched: vec!["/a/egress-sandbox-helper".into()],
        };
        let message = error.to_string();
        assert!(
            message.contains("cargo build -p egress-sandbox-helper"),
            "{message}"
        );
        assert!(message.contains("/a/egress-sandbox-helper"), "{message}");
        assert!(message.contains(HELPER_ENV), "{message}");
    }

    /// A script that answers `version` with `answer`, in a directory of its own.
    fn fake_helper(answer: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(HELPER_NAME);
        std::fs::write(&path, format!("#!/bin/sh\n{answer}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, path)
    }

    /// `Helper::at`, again while the script is busy: another test's fork may hold it open
    /// for writing for an instant (ETXTBSY).
    async fn check(path: &Path) -> Result<Helper, HelperError> {
        for _ in 0..20 {
            match Helper::at(path).await {
                Err(HelperError::Run { source, .. })
                    if source.kind() == std::io::ErrorKind::ExecutableFileBusy =>
                {
                    tokio::task::yield_now().await;
                }
                other => return other,
            }
        }
        Helper::at(path).await
    }

    #[tokio::test]
    async fn a_helper_of_this_library_is_taken() {
        let (_dir, path) = fake_helper(&format!("echo '{}'", this().line()));
        let helper = check(&path).await.unwrap();
        assert_eq!(helper.path(), path);
        assert_eq!(helper.version(), &this());
    }

    #[tokio::test]
    async fn a_helper_of_another_version_is_refused_with_both_versions_and_its_path() {
        let other = HelperVersion {
            version: "0.0.9".into(),
            handoff: this().handoff + 1,
            launch: this().launch,
        };
        let (_dir, path) = fake_helper(&format!("echo '{}'", other.line()));
        let error = check(&path).await.unwrap_err();
        assert!(
            matches!(&error, HelperError::Mismatch { found, expected, .. } if *found == other && *expected == this()),
            "{error:?}"
        );
        let message = error.to_string();
        for part in [
            path.display().to_string(),
            format!(
                "is egress-sandbox-helper 0.0.9 (handoff version {}, launch version {})",
                other.handoff, other.launch
            ),
            format!(
                "this library (egress-sandbox {}) speaks handoff version {}, launch version {}",
                this().version,
                this().handoff,
                this().launch
            ),
            format!(
                "use the helper built with this library (egress-sandbox-helper {})",
                this().version
            ),
        ] {
            assert!(message.contains(&part), "{part:?} in {message}");
        }
    }

    #[tokio::test]
    async fn a_helper_of_the_same_formats_but_another_version_is_refused() {
        let other = HelperVersion {
            version: "0.0.9".into(),
            ..this()
        };
        let (_dir, path) = fake_helper(&format!("echo '{}'", other.line()));
        assert!(matches!(
            check(&path).await,
            Err(HelperError::Mismatch { .. })
        ));
    }

    #[tokio::test]
    async fn a_binary_that_is_no_helper_is_refused_with_what_it_said() {
        let (_dir, path) = fake_helper("echo 'error: unrecognized subcommand' >&2; exit 2");
        let error = check(&path).await.unwrap_err();
        assert!(
            matches!(&error, HelperError::NotAHelper { said, .. } if said == "error: unrecognized subcommand"),
            "{error:?}"
        );
        let (_dir, path) = fake_helper(&format!("echo '{}'; exit 1", this().line()));
        assert!(matches!(
            check(&path).await,
            Err(HelperError::NotAHelper { .. })
        ));
        let error = Helper::at("/nonexistent/egress-sandbox-helper")
            .await
            .unwrap_err();
        assert!(matches!(error, HelperError::Run { .. }), "{error:?}");
    }
}
