//! The egress proxy of egress-sandbox: the single exit of every sandboxed run.
//!
//! One gate, many doors. Every way in — a `CONNECT` tunnel, an absolute-form plain HTTP
//! request, a transparent TLS connection routed by SNI, a transparent HTTP connection routed
//! by `Host`, a DNS query — turns what the client asked for into a [`target::Target`] and
//! passes through the same decision pipeline (`gate`), so the doors cannot disagree.
//!
//! # Public surface
//!
//! What an embedder needs to configure, run and read a proxy, and what the sandbox's side
//! of a local run needs, all at the crate root (the `pub use` list below); every module is
//! private. The pure pieces a configuration is made of — the policy engine, targets, the
//! floor, pins, the audit record, the handoff line — are egress-core's, named by their
//! paths there.
//!
//! - [`ProxyConfig`], [`ProxyLimits`], [`CredentialConfig`], [`NameServers`],
//!   [`AuditDestination`], [`DEFAULT_DNS_RATE`]: the typed configuration, built from a
//!   policy and an address, or from a run's handoff ([`ProxyConfig::merge_handoff`],
//!   failing with [`HandoffError`]) plus the caller's own settings.
//! - [`Proxy`], [`BoundProxy`], [`RunningProxy`], [`LocalAddrs`], [`ProxyError`]: bind,
//!   start, shut down; a bind's credential errors are [`InspectError`] and [`CaError`];
//!   [`AuditSink`] is the running proxy's record writer, for records of the caller's own.
//! - [`PassedListeners`], [`PassError`]: the sandbox's side of a local run, which binds the
//!   doors on the sandbox's loopback and passes them to the proxy over a Unix socket.
//!
//! The enums and the data types that gain fields are `#[non_exhaustive]`: a new reason,
//! kind or setting is not a breaking change. Errors name configuration fields and values,
//! not the flags of a particular front end; the CLI adds its flags where it prints them.
//!
//! # Layout
//!
//! - `target` turns what a client asked for into a normalised host name or an IP address,
//!   or a precise refusal. IP literals in every spelling are recognised, never looked up.
//! - `floor`: the private-address floor and a proxy's extra ranges; pure.
//! - `resolve`: the proxy's own resolver (hickory, never getaddrinfo) and pins.
//! - `gate`: the one decision pipeline: tripwire → classify → policy → resolve once →
//!   floor → audit, for a connection, a DNS question and a request read in clear alike,
//!   with the one tripwire (the run's real secrets anywhere, another host's placeholder).
//!   `refusal` turns what the gate refused into the client's answer (status, reason
//!   header, a sentence), the same for every door.
//! - Shared pieces every door uses: `shared` (the gate, limits and upstream pool of one
//!   proxy, its stop token and the tracker of its tasks, and which listener a connection
//!   came in on), `body` (the one body type of answers and forwarded requests), `relay`
//!   (moves a tunnel's bytes; `splice` keeps them in the kernel), a private `pool` of idle
//!   upstream connections per target, `dns_rate` (the DNS responder's per-client rate
//!   limits and the allowed names each client was answered lately), `exchange` (one forwarded request: its head as the upstream gets it, both
//!   bodies counted, the record written once both end), `inspector` (the run's secrets,
//!   placeholders, run CA (`ca`, `secrets`) and upstream TLS (`upstream_tls`), which
//!   `shared` holds).
//! - The doors: `http` (the explicit listener and transparent HTTP), `connect` (CONNECT
//!   tunnels, handed over by `http`), `transparent` (first-byte routing, TLS by `sni`),
//!   `dns` (the responder), `inspect` (inspected hosts: requests read in clear, each
//!   judged by the gate, given their credential; handed over by `connect`, `transparent` and
//!   `http`), `raw` (any TCP protocol to the name behind a loopback address), and
//!   `refused_ports` (not a door: the sandbox kernel's notices of closed sockets, from which
//!   the connections it refused for want of a door are recorded). A door takes a
//!   connection and an `Arc<Shared>`, turns what the client sent into a
//!   target, asks the gate, and answers refusals with `refusal`. Doors depend on the
//!   shared pieces and on the gate, never on `server`.
//! - `server`: binds the listeners (through `listen`, with a backlog of 1024), or takes
//!   them from the sandbox (`passed_listeners`), enforces the connection limit, builds the
//!   shared state and dispatches each connection to its door; only it knows every door.
//!   Shutdown begins and ends here: the stop token is cancelled, then the tracker waits
//!   for every task, so each writes its record before the audit chain is closed.
//!
//! Imports run one way: `server` → doors → `gate`/`refusal`/shared pieces → `policy`,
//! `target`, `floor`, `resolve`, `audit`. A new door is a module beside the others that
//! follows the same shape, plus one dispatch line in `server` (or in the door that hands
//! over to it).
//!
//! # Use
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use egress_core::policy::{Policy, PolicySet};
//! use egress_proxy::{Proxy, ProxyConfig};
//! let policy = PolicySet::from(Policy::from_allow_flags(&["example.com".into()])?);
//! let proxy = Proxy::bind(ProxyConfig::new(policy, "127.0.0.1:0".parse()?)).await?;
//! println!("listening on {}", proxy.local_addrs().listen);
//! let counts = proxy.shutdown().await;
//! # let _ = counts; Ok(()) }
//! ```
#![deny(unsafe_code)]
#![deny(missing_docs, unreachable_pub)]

mod audit;
mod body;
mod ca;
mod config;
mod dns_rate;
mod doors;
mod exchange;
// Entry points for the fuzz targets and property tests, not part of the API (as rustls's
// `internal`): hidden from the documentation, free to change.
#[doc(hidden)]
pub mod fuzzing;
mod gate;
mod inspector;
mod listen;
mod name_addresses;
mod passed_listeners;
mod pool;
mod refusal;
mod refused_ports;
mod relay;
mod resolve;
mod scrub;
mod secret_forms;
mod secrets;
mod server;
mod shared;
mod sni;
mod splice;
#[cfg(test)]
mod test_sockets;
mod upstream_tls;

// The pure pieces live in egress-core; proxy code names them by their usual paths.
use egress_core::{floor, policy, target, text, units};

// The public API, all of it. Everything else is crate-private.

// Configuring a proxy: the configuration, its bounds and credentials, where names are
// resolved and where records go; a run's handoff merged into it, and why that can fail.
pub use audit::AuditDestination;
pub use config::{DEFAULT_DNS_RATE, HandoffError, ProxyConfig, ProxyLimits};
pub use resolve::NameServers;
pub use secrets::CredentialConfig;

// Running one: bind, start, read its addresses and counts, shut down; why a bind fails.
pub use audit::AuditSink;
pub use ca::CaError;
pub use inspector::InspectError;
pub use server::{BoundProxy, LocalAddrs, Proxy, ProxyError, RunningProxy};

// The sandbox's side of a local run: its doors bound on its loopback and passed over.
pub use passed_listeners::{PassError, PassedListeners};
