//! egress-sandbox: run untrusted code in a throwaway Docker container whose only way out is
//! an allowlisting egress proxy container, removed again on every path.
//!
//! This crate is what embedding programs, the daemon (`egress-serve`) and the
//! `egress-sandbox` command share. It depends on `egress-core` (policies, the audit record)
//! and on no command-line crate.
//!
//! The public API is the [`Sandbox`] handle, [`RunSpec`] (built and checked by
//! [`RunSpecBuilder`]), [`OutputSinks`] / [`RunEvent`] / [`AuditEntry`] for what a run sends
//! back, and [`RunOutcome`]; errors are this crate's own ([`RunError`], [`SpecError`], …;
//! the engine's failures are [`DockerError`]). Modules that build Docker requests are
//! crate-private, so no Docker client type is part of the API.
//!
//! # Layout
//!
//! - [`spec`]: what a run is asked to do ([`spec::RunSpec`]), checked completely before
//!   Docker is touched (policies merged, limits against policy ceilings, mounts, env).
//! - [`engine`]: what the lifecycle asks of a container engine, the [`ContainerEngine`]
//!   trait (create, attach, start, wait, update, kill, remove, list; networks; images) with
//!   its typed [`DockerError`]. Run, slot, pool, gc, teardown and images use nothing else.
//! - [`docker`]: [`DockerEngine`], the trait over the Docker API (the one Docker client).
//! - [`testing`] (this crate's tests, and the `fake-engine` feature): `FakeEngine`, the trait
//!   in memory — containers, networks, scripted output and exit codes, an error injected at
//!   any call — and a [`Sandbox`] on it.
//! - [`images`]: the proxy image (built from the handle's static egress-sandbox binary)
//!   and the base sandbox image.
//! - `wiring`: how the sandbox reaches its proxy — on a local engine it has no network, its
//!   launcher passes the doors bound on its loopback to the proxy; a remote engine's run gets
//!   its own network.
//! - [`runtime`]: what an OCI runtime the engine offers is (host kernel, gVisor and its
//!   network mode), read from its registration: it decides the wiring and how the task
//!   limit is enforced.
//! - `network`: the per-run internal network of remote engines (own /29, no host address)
//!   and the shared egress network.
//! - `container`: the proxy and sandbox containers as create requests, hardened.
//! - [`events`]: what a caller following a run live receives ([`events::RunEvent`], each
//!   audit line parsed as an [`events::AuditEntry`]), through a bounded channel whose
//!   backpressure it documents.
//! - `audit_tee`: the host's audit writer — each line to the `--audit-log` file (from a
//!   thread) and to the run's events.
//! - [`output`]: live relay of the command's output with one byte cap.
//! - `audit_trail`: the proxy's ready line and audit records, read through attach.
//! - [`task_files`]: files handed to a run, written under /task by the launcher.
//! - `teardown`: owns every object of a run and removes it on every path.
//! - `slot`: a run's set-up in two parts, the slot (spec-independent) and its claim,
//!   shared by cold runs and the warm pool.
//! - [`pool`]: warm slots prepared ahead of the runs that will use them (the daemon's pool),
//!   run with [`Sandbox::run_leaving_objects`].
//! - [`report`]: the run report (`--report`, the daemon's `exit` event) and the one-line
//!   summary.
//! - [`watchdog`]: removes a process's runs when it dies without doing so (`kill -9`).
//! - [`handle`]: [`Sandbox`], the handle every caller runs specs through (the CLI, the
//!   daemon, embedders): it names its proxy binary and connects to the engine once.
//! - [`helper`]: that binary, `egress-sandbox-helper` (the proxy, the launcher, the
//!   watchdog), found beside the program or on `PATH` and checked by a version handshake
//!   ([`Sandbox::connect_with_helper`]).
//! - [`run`]: the lifecycle itself — [`Sandbox::run`] / [`Sandbox::run_until`] →
//!   [`RunOutcome`].
//! - [`outcome`]: what a run amounts to and why a set-up failed, named by every stage
//!   (handle, slot, run, report) without those depending on one another.
//! - [`launch_signal`]: what opens the sandbox's launcher (and hands it the task files);
//!   `launcher_binary`: the launcher's binary at a path named by its content, and `host_dirs`: the
//!   run's host directories, neutrally named, so the sandbox's mount table shows nothing
//!   of the host.
//! - [`options`]: a run's settings as a front end is given them ([`RunOptions`]: the command
//!   line's flags, a request's fields), checked into a [`RunSpecBuilder`]; [`Field`] names the
//!   setting a refusal is about.
//! - [`private_dir`]: the check every directory the tool keeps files in passes (the running
//!   user's, writable by no one else), so another local user can plant or swap nothing.
//! - [`gc`]: sweeps objects of runs whose owner process is gone.
//! - [`labels`]: run ids, object names, labels and the owner stamp.
#![deny(missing_docs)]

pub(crate) mod audit_tee;
pub(crate) mod audit_trail;
pub(crate) mod container;
pub(crate) mod credentials;
pub mod docker;
pub mod engine;
pub mod events;
pub mod fit;
pub mod gc;
pub mod handle;
pub mod helper;
pub(crate) mod host_dirs;
pub mod images;
pub mod labels;
pub mod launch_signal;
pub(crate) mod launcher_binary;
pub(crate) mod network;
pub mod options;
pub mod outcome;
pub mod output;
pub mod pool;
pub mod private_dir;
pub mod report;
pub(crate) mod resolv;
pub mod run;
pub mod runtime;
pub(crate) mod slot;
pub mod spec;
pub mod task_files;
pub(crate) mod teardown;
#[cfg(any(test, feature = "fake-engine"))]
pub mod testing;
pub(crate) mod trust;
pub mod watchdog;
pub(crate) mod wiring;

pub use container::loopback_doors;
pub use credentials::{CredentialError, RunCredentials};
pub use docker::DockerEngine;
pub use engine::{ContainerEngine, DockerError, EngineError};
pub use events::{AuditEntry, RunEvent};
pub use handle::Sandbox;
pub use helper::{Helper, HelperError, HelperVersion};
pub use images::{ImageError, Progress};
pub use network::{EGRESS_NETWORK, NetworkError};
pub use options::{Field, Names, RunOptions};
pub use outcome::{Interruption, RunError, RunOutcome, RunStatus};
pub use output::{OutputSinks, OutputStats};
pub use pool::{Pool, Refill, WarmSlot};
pub use private_dir::PlaceError;
pub use run::Leftovers;
pub use spec::{RunLimits, RunSpec, RunSpecBuilder, SpecError};
pub use trust::TrustError;
