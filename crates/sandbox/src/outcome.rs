//! What a run amounts to ([`RunOutcome`], [`RunStatus`], the [`Interruption`] that may end
//! it) and why a sandbox could not be set up ([`RunError`]).
//!
//! Its own module because every stage of a run names them — the handle, a pool's slot, the
//! run itself, the report — and none of those should depend on another for its types.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::{DockerError, EngineError};
use crate::images::ImageError;
use crate::network::NetworkError;
use crate::output::OutputStats;
use crate::private_dir::PlaceError;
use crate::trust::TrustError;
use egress_core::tally::{AttemptCounts, AuditCounts, RefusalGroup};

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunStatus {
    /// The command exited by itself; `exit_code` is its own.
    Exited,
    /// The time limit killed it (exit 124).
    Timeout,
    /// The kernel killed it for memory (exit 137).
    Oom,
    /// egress-sandbox itself got SIGINT / SIGTERM (exit 130 / 143).
    Interrupted,
    /// The proxy stopped while the command ran, so attempts could no longer be recorded:
    /// the sandbox was killed at once (exit 125).
    ProxyFailed,
}

/// The exit status of a run whose proxy stopped under it (as for a failed set-up).
pub const PROXY_FAILED_EXIT: i32 = 125;

/// The signal that interrupted a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Interruption {
    /// SIGINT.
    Interrupt,
    /// SIGTERM.
    Terminate,
    /// The reader of the run's output went away (`run … | head`): what SIGPIPE is to a
    /// command in a shell pipeline. Only sinks made with [`OutputSinks::stdio`](super::output::OutputSinks::stdio) end a run
    /// this way; others drop the rest of the output and let the command run on.
    OutputClosed,
}

impl Interruption {
    /// The exit status a run so interrupted ends with: 130, 143, or 141 as for SIGPIPE.
    pub fn exit_code(self) -> i32 {
        match self {
            Interruption::Interrupt => 130,
            Interruption::Terminate => 143,
            // 128 + SIGPIPE, as a shell reports a command that wrote to a closed pipe.
            Interruption::OutputClosed => 141,
        }
    }
}

/// What a run amounted to.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunOutcome {
    /// The run's id, as its audit records and Docker objects carry it.
    pub run_id: String,
    /// How the run ended.
    pub status: RunStatus,
    /// The exit status for the caller: the command's own, 124, 137, 130, 143 or 125.
    pub exit_code: i32,
    /// From the sandbox's start to its end (zero if it never started).
    pub duration: Duration,
    /// The time limit the run had.
    pub timeout: Duration,
    /// The image the command ran in.
    pub image: String,
    /// The name of the policy the run's egress was judged by.
    pub policy: String,
    /// What the command wrote to stdout and stderr.
    pub output: OutputStats,
    /// The run's egress attempts by decision.
    pub attempts: AttemptCounts,
    /// Blocked and would-block attempts grouped by host, port, reason; most frequent first;
    /// at most [`REPORT_GROUPS`](crate::report::REPORT_GROUPS) groups.
    pub blocked: Vec<RefusalGroup>,
    /// Refused attempts counted in no group of `blocked` (`tally::Refusals::more`).
    pub blocked_more: u64,
    /// Records the proxy wrote and attempts it only counted (`--audit-limit`, DNS rate).
    pub audit: AuditCounts,
    /// Hex SHA-256 of the proxy's `end` audit line (`audit verify --report` checks the log
    /// against it); `None` when the proxy never closed its chain.
    pub audit_head: Option<String>,
    /// Objects that could not be removed (`egress-sandbox gc` will). Normally empty.
    pub teardown_errors: Vec<String>,
    /// Why the `--audit-log` file holds only part of the records (a full disk, say): the
    /// first write error, after which nothing more was written there. `None` when every
    /// record was written, or no file was asked for.
    pub audit_log_error: Option<String>,
}

/// Why the sandbox could not be set up (exit 125). Nothing is left behind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The container engine could not be reached or asked.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The sandbox image is missing, or the proxy image could not be made.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The run's network could not be made.
    #[error(transparent)]
    Network(#[from] NetworkError),
    /// A Docker call of the set-up failed.
    #[error("Docker: {step}")]
    Docker {
        /// What the call was for (`start the sandbox`, …).
        step: String,
        /// The engine's error.
        #[source]
        source: DockerError,
    },
    /// The proxy reported it could not start, or its output ended before it was ready.
    #[error("the proxy did not start: {detail}")]
    ProxyNotReady {
        /// The proxy's own words.
        detail: String,
    },
    /// The proxy said nothing within the time allowed for it to start.
    #[error("the proxy was not ready within {}s", waited.as_secs())]
    ProxyReadyTimeout {
        /// How long it was waited for.
        waited: Duration,
    },
    /// The run's handoff line could not be written to the proxy.
    #[error("cannot hand the run's configuration to the proxy")]
    Handoff {
        /// The write's error.
        #[source]
        source: std::io::Error,
    },
    /// The launch signal could not be written to the sandbox's launcher.
    #[error("cannot signal the sandbox's launcher")]
    GoSignal {
        /// The write's error.
        #[source]
        source: std::io::Error,
    },
    /// The run has task files, and the engine is not local.
    #[error("task files need a local Docker engine (they are handed over the sandbox's launcher)")]
    FilesNeedLocalEngine,
    /// The policy inspects hosts, which needs the run CA's trust bundle bind-mounted, and
    /// the engine is not local.
    #[error(
        "the policy inspects {} (credentials, methods or paths): that needs a local Docker engine, which bind-mounts the run CA's trust bundle into the sandbox, and {engine} is not one",
        hosts.join(", ")
    )]
    InspectedNeedsLocalEngine {
        /// The hosts the policy inspects.
        hosts: Vec<String>,
        /// The engine the run was asked of.
        engine: String,
    },
    /// The `--audit-log` file could not be opened for appending.
    #[error("cannot open the audit log {path}")]
    AuditLog {
        /// The file asked for.
        path: PathBuf,
        /// The open's error.
        #[source]
        source: std::io::Error,
    },
    /// The helper binary could not be found, or answered as no helper of this library.
    #[error(transparent)]
    Helper(#[from] crate::helper::HelperError),
    /// The binary the proxy container runs could not be found or placed.
    #[error("cannot find the proxy binary {}", path.display())]
    ProxyBinary {
        /// Where it was looked for or placed.
        path: PathBuf,
        /// The file system's error.
        #[source]
        source: std::io::Error,
    },
    /// The run asked for an OCI runtime the engine does not offer.
    #[error("the engine has no runtime {name:?} (it has: {})", available.join(", "))]
    UnknownRuntime {
        /// The runtime asked for.
        name: String,
        /// The runtimes the engine offers.
        available: Vec<String>,
    },
    /// The sandbox's runtime gives it no way to reach its proxy.
    #[error(
        "the sandbox could not reach its proxy under runtime {name:?} ({kind}): register it with \
         a network (for gVisor: runtimeArgs [\"--network=host\"], see scripts/gvisor-setup.sh)"
    )]
    RuntimeUnreachable {
        /// The runtime's name.
        name: String,
        /// What kind of runtime it is, for a person (`host kernel`, …).
        kind: String,
    },
    /// This host's interface addresses, which the proxy refuses as upstreams on a local
    /// engine, could not be listed.
    #[error("cannot list this host's interface addresses")]
    HostAddresses(#[source] std::io::Error),
    /// The running process could not be identified for the owner label `gc` goes by.
    #[error("cannot identify this process for the owner label")]
    Owner(#[source] std::io::Error),
    /// The sandbox's trust bundle could not be made.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// The resolv.conf that points the sandbox at its proxy could not be written.
    #[error("cannot create the sandbox's resolv.conf")]
    ResolvConf(#[source] std::io::Error),
    /// The directory the sandbox's launcher takes its doors from could not be made.
    #[error("cannot create the directory the sandbox passes its doors through")]
    DoorsDir(#[source] std::io::Error),
    /// The launcher binary the sandbox mounts could not be placed.
    #[error("cannot place the binary the sandbox mounts as its launcher")]
    LauncherBinary(#[source] std::io::Error),
    /// A directory the run would keep files in is not the running user's alone.
    #[error(transparent)]
    Place(#[from] PlaceError),
}

impl RunError {
    /// The setting whose value the engine refused: the image it does not have, the egress
    /// network or the runtime it does not have, or what needs a local engine (`files`, a
    /// policy that inspects a host). `None` when the engine or this host failed.
    pub fn field(&self) -> Option<crate::Field> {
        use crate::Field;
        match self {
            RunError::Image(ImageError::Missing { .. } | ImageError::InvalidReference { .. }) => {
                Some(Field::Image)
            }
            RunError::Network(NetworkError::EgressMissing { .. }) => Some(Field::EgressNetwork),
            RunError::UnknownRuntime { .. } | RunError::RuntimeUnreachable { .. } => {
                Some(Field::Runtime)
            }
            RunError::FilesNeedLocalEngine => Some(Field::Files),
            RunError::InspectedNeedsLocalEngine { .. } => Some(Field::Policies),
            _ => None,
        }
    }

    /// The error and its causes on one line, as the CLI and the daemon show a set-up
    /// failure ([`with_causes`]).
    pub fn message_with_causes(&self) -> String {
        with_causes(self)
    }
}

/// `error` and each of its causes, joined with `: `. Every error of a run says only its own
/// step and leaves its cause to [`source`](std::error::Error::source), so each cause is said
/// once here, as in anyhow's `{:#}`. The one such helper of the tool, from `egress-core`.
pub use egress_core::text::with_causes;

pub(crate) fn docker_step(step: impl Into<String>) -> impl FnOnce(DockerError) -> RunError {
    let step = step.into();
    move |source| RunError::Docker { step, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::NetworkError;

    /// A nested set-up error, as the CLI prints it (anyhow's `{:#}`) and as the daemon does
    /// (`message_with_causes`): every step and cause once.
    #[test]
    fn each_cause_is_said_once() {
        let engine_words = "the engine answered 500: pool overlaps";
        let error = RunError::Network(NetworkError::Engine(EngineError::Api {
            step: "list networks".into(),
            source: DockerError::Engine {
                status: 500,
                message: "pool overlaps".into(),
            },
        }));
        let expected = format!("Docker: list networks: {engine_words}");
        assert_eq!(error.message_with_causes(), expected);
        let io = RunError::ResolvConf(std::io::Error::other("disk full"));
        assert_eq!(
            io.message_with_causes(),
            "cannot create the sandbox's resolv.conf: disk full"
        );
        for shown in [
            format!("{:#}", anyhow::Error::new(error)),
            format!("{:#}", anyhow::Error::new(io)),
        ] {
            for part in [
                "Docker: list networks",
                engine_words,
                "disk full",
                "resolv.conf",
            ] {
                assert!(shown.matches(part).count() <= 1, "{part} twice in {shown}");
            }
        }
    }

    #[test]
    fn a_set_up_error_names_the_request_field_whose_value_was_refused() {
        let cases = [
            (
                RunError::Image(ImageError::Missing { image: "x".into() }),
                Some("image"),
            ),
            (
                RunError::Network(NetworkError::EgressMissing { name: "n".into() }),
                Some("egress_network"),
            ),
            (
                RunError::UnknownRuntime {
                    name: "runsc".into(),
                    available: vec!["runc".into()],
                },
                Some("runtime"),
            ),
            (RunError::FilesNeedLocalEngine, Some("files")),
            (
                RunError::InspectedNeedsLocalEngine {
                    hosts: vec!["api.example.com".into()],
                    engine: "tcp://engine:2375".into(),
                },
                Some("policies"),
            ),
            (
                RunError::ProxyNotReady {
                    detail: "exited".into(),
                },
                None,
            ),
        ];
        for (error, field) in cases {
            assert_eq!(error.field().map(crate::Field::name), field, "{error}");
        }
    }
}
