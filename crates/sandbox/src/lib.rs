//! egress-sandbox: run untrusted code in a throwaway Docker container whose only way out is
//! an allowlisting egress proxy, removed again on every path.
//!
//! This crate is what embedding programs, the daemon (`egress-serve`) and the
//! `egress-sandbox` command share. It depends on `egress-core` (policies, the audit record)
//! and on no command-line crate (its `clap` feature derives [`RunOptions`] as arguments).
//!
//! # The API
//!
//! Every module is private but the few namespaces below; what a caller uses is the one
//! `pub use` list at the end of this file, grouped and commented. The heart of it: the
//! [`Sandbox`] handle, [`RunSpec`] (built and checked by [`RunSpecBuilder`], or from a front
//! end's [`RunOptions`]), [`OutputSinks`] / [`RunEvent`] / [`AuditEntry`] for what a run sends
//! back, and [`RunOutcome`]; errors are this crate's own ([`RunError`], [`SpecError`], …; the
//! engine's failures are [`DockerError`]). No Docker client type is part of the API.
//!
//! The public namespaces:
//! - [`engine`]: the engine boundary — the [`ContainerEngine`] trait (create, attach,
//!   start, wait, update, kill, remove, list; networks; images) and the types of its calls.
//!   Run, slot, pool, gc, teardown and images use nothing else; [`DockerEngine`] is the
//!   Docker implementation, `testing` (tests and the `fake-engine` feature) one in memory.
//! - [`events`]: what a caller following a run live receives, with the audit record types.
//! - [`options`]: the forms of a run's settings a front end is given ([`RunOptions`]).
//! - [`launch_signal`] and [`task_files`]: what opens the sandbox's launcher and the files it
//!   writes under /task — the protocol this library and its helper binary share.
//! - [`private_dir`]: the check every directory the tool keeps files in passes (the running
//!   user's, writable by no one else), which the daemon's socket directory passes too.
//!
//! # Layout of the private modules
//!
//! - `spec`: what a run is asked to do, checked completely before Docker is touched
//!   (policies merged, limits against policy ceilings, mounts, env); `fit`: what it asks of
//!   the engine, asked before anything is created.
//! - `docker`: the trait over the Docker API (the one Docker client).
//! - `images`: the proxy image (built from the helper binary) and the base sandbox image.
//! - `wiring`: how the sandbox reaches its proxy — on a local engine it has no network, its
//!   launcher passes the doors bound on its loopback to the proxy; a remote engine's run gets
//!   its own network. `runtime`: what an OCI runtime the engine offers is (host kernel,
//!   gVisor and its network mode), which decides the wiring.
//! - `network`: the per-run internal network of remote engines (own /29, no host address)
//!   and the shared egress network; `container`: the proxy and sandbox containers as create
//!   requests, hardened.
//! - `audit_tee`: the host's audit writer — each line to the `--audit-log` file (from a
//!   thread) and to the run's events; `audit_trail`: the proxy's ready line and audit
//!   records, read through attach; `output`: live relay of the command's output with one cap.
//! - `teardown`: owns every object of a run and removes it on every path; `gc` sweeps
//!   objects of runs whose owner process is gone; `watchdog` removes a process's runs when it
//!   dies without doing so (`kill -9`); `labels`: run ids, object names, labels and the owner
//!   stamp.
//! - `slot`: a run's set-up in two parts, the slot (spec-independent) and its claim, shared
//!   by cold runs and the warm `pool` (run with [`Sandbox::run_leaving_objects`]).
//! - `handle`: [`Sandbox`], the handle every caller runs specs through; `helper`: its
//!   binary, `egress-sandbox-helper` (the proxy, the launcher, the watchdog), found beside the
//!   program or on `PATH` and checked by a version handshake.
//! - `run`: the lifecycle itself — [`Sandbox::run`] / [`Sandbox::run_until`] → [`RunOutcome`];
//!   `outcome`: what a run amounts to and why a set-up failed, named by every stage;
//!   `report`: the run report (`--report`, the daemon's `exit` event) and the summary line.
#![deny(missing_docs, unreachable_pub)]

mod audit_tee;
mod audit_trail;
mod container;
mod credentials;
mod docker;
pub mod engine;
pub mod events;
mod fit;
mod gc;
mod handle;
mod helper;
mod host_dirs;
mod images;
mod labels;
pub mod launch_signal;
mod launcher_binary;
mod network;
pub mod options;
mod outcome;
mod output;
mod pool;
pub mod private_dir;
mod report;
mod resolv;
mod run;
mod runtime;
mod slot;
mod spec;
pub mod task_files;
mod teardown;
#[cfg(any(test, feature = "fake-engine"))]
pub mod testing;
mod trust;
mod watchdog;
mod wiring;

// Connecting: the handle, its helper binary and the engine it drives.
pub use docker::DockerEngine;
pub use engine::{ContainerEngine, DockerError, EngineError, EngineFacts};
pub use handle::{ProgressFn, Sandbox};
pub use helper::{HELPER_ENV, HELPER_NAME, Helper, HelperError, HelperVersion};

// What a run is asked to do, checked before anything is created.
pub use credentials::{CredentialError, RunCredentials};
pub use fit::{EngineOffer, Unfit, UnknownRuntime, check_fit, check_runtime};
pub use options::{Field, Names, RunOptions};
pub use spec::{
    DEFAULT_AUDIT_LIMIT, DEFAULT_LIMITS, DEFAULT_SUBNET_POOL, MIN_MEMORY, MIN_TMP, Mount,
    PolicySource, RunLimits, RunSpec, RunSpecBuilder, SUBNET_POOL_ENV, SpecError,
};

// Running it, and what it amounts to.
pub use container::loopback_doors;
pub use events::{AuditEntry, RunEvent};
pub use outcome::{Interruption, PROXY_FAILED_EXIT, RunError, RunOutcome, RunStatus, with_causes};
pub use output::{OutputSinks, OutputStats};
pub use pool::{OnReady, Pool, Refill, WarmSlot};
pub use report::{
    AttemptCounts, AuditCounts, AuditTally, REPORT_GROUPS, RefusalGroup, Refusals, RunReport,
    audit_log_incomplete, summary_line,
};
pub use run::Leftovers;

// Images: the proxy image from the helper binary, the base image from Debian packages.
pub use images::{
    BASE_IMAGE, ImageError, MIRROR_ENV, PROXY_BINARY_IN_IMAGE, PROXY_REPOSITORY, Progress,
    ensure_base_image, ensure_proxy_image, require_local_image, sweep_images,
};

// The engine's runtimes and the wiring each gives a run.
pub use runtime::{GvisorNetwork, RuntimeInfo, RuntimeKind, WiringChoice};

// Cleaning up: what a dead owner left, and the watchdog that keeps it from being left.
pub use gc::{GcReport, SkipReason, Skipped, Swept, sweep, sweep_owner};
pub use labels::{HostIdentity, OWNER_LABEL, Owner, OwnerLabel, RUN_LABEL, RunNames, SHARED_LABEL};
pub use watchdog::{STAND_DOWN, Watchdog};

// Why a place or the engine cannot be used.
pub use network::{EGRESS_NETWORK, NetworkError};
pub use private_dir::PlaceError;
pub use trust::TrustError;
