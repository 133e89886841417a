//! End-to-end proof for egress-sandbox: black-box runs of the real binary against the real
//! Docker engine, with no mocks. Nothing leaves the machine: every upstream and canary is a
//! server this process starts on the gateway address of a bridge network the test creates
//! for itself (see `support::TestNetwork`), and "outside" addresses come from the
//! documentation ranges.
//!
//! Layout:
//! - `support`: the `Run` builder around the binary, Docker helpers (`TestNetwork`,
//!   leftover checks), `Upstream` / `Canary` servers;
//! - one module per part of the proof: the seed check, reachability of allowed hosts,
//!   isolation of the run, hardening inside the sandbox, teardown, concurrent runs, and
//!   `audit summary`.
//!
//! Every test ends by asserting that no container or network of its run is left.

mod support;

mod any_port;
mod audit_budget;
mod audit_chain;
mod audit_summary;
mod concurrency;
mod credentials;
mod dns_burst;
mod egress_bridge;
mod gvisor;
mod handoff;
mod hardening;
mod host_floor;
mod isolation;
mod library;
mod mcp;
mod mount_table;
mod pip_install;
mod policy_suggest;
mod reach;
mod report_bounds;
mod report_mode;
mod seed;
mod serve;
mod serve_clients;
mod serve_pool;
mod setup_errors;
mod stdio;
mod teardown;
mod terminal;
