//! egress-sandbox: run untrusted code in a throwaway Docker container whose only way out is
//! an allowlisting egress proxy (the `egress-proxy` crate).
//!
//! This library is what embedding programs, the daemon and the `egress-sandbox` binary
//! share. The command line itself (clap, one module per subcommand, the MCP server, stderr
//! diagnostics) lives in the binary target (`src/main.rs`), and the crates only it uses (clap,
//! rmcp, anyhow, tracing-subscriber) come with the default `cli` feature: an embedder that
//! turns it off (`default-features = false`) compiles none of them. `tests/layering.rs` keeps
//! the library free of the command line.
//!
//! # Layout
//!
//! - [`sandbox`]: the run lifecycle on Docker — images, the per-run network, the proxy and
//!   sandbox containers, teardown guards, `gc` — behind one handle,
//!   [`sandbox::Sandbox`], which the CLI, the daemon and embedding programs use
//!   (`examples/embed.rs`).
//! - [`audit_tools`]: audit logs read back for review — chain verification, the summary,
//!   OCSF export, the HTML report, `policy suggest`.
//! - [`serve`]: the daemon behind `egress-sandbox serve` (local API) and its client.
//! - [`report`]: the run report and the one-line summary.
//! - [`run_flags`] and [`secret_flags`]: the strings a user writes for a run (flags, the API's
//!   fields) turned into typed values; shared by the CLI and the daemon, never seen by
//!   [`sandbox`].
#![deny(unsafe_code)]

pub mod audit_tools;
pub mod report;
pub mod run_flags;
pub mod sandbox;
pub mod secret_flags;
pub mod serve;
