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
//! of a local run needs; everything else is crate-private.
//!
//! - [`ProxyConfig`], [`ProxyLimits`] ([`config`]): the typed configuration, built from a
//!   policy and an address, or from a run's [`handoff`] plus the caller's own settings.
//! - [`Proxy`], [`BoundProxy`], [`RunningProxy`], [`LocalAddrs`], [`ProxyError`]
//!   ([`server`]): bind, start, shut down; a bind's credential errors are
//!   [`server::InspectError`] and [`server::CaError`].
//! - [`policy`]: the pure policy engine. YAML in, `decide(target, port) -> Decision` out;
//!   no I/O, no async.
//! - [`audit`]: the audit record, its destinations and the chain; [`text`] makes untrusted
//!   text safe to show a person.
//! - [`handoff`]: the one JSON line a run hands its proxy.
//! - [`target`] (host names and IP literals), [`floor`] (the private-address floor),
//!   [`resolve`] (pins and where unpinned names are resolved), [`units`] (durations and
//!   sizes), [`secrets`] and [`secret_forms`] (credentials), [`upstream_tls`] (extra CAs
//!   for inspected upstreams): the values a configuration is made of, with their parsers.
//! - [`passed_listeners`]: the sandbox's side of a local run, which binds the doors on the
//!   sandbox's loopback and passes them to the proxy over a Unix socket.
//!
//! The enums and the configuration are `#[non_exhaustive]`: a new reason, kind or setting
//! is not a breaking change. Errors name configuration fields and values, not the flags of
//! a particular front end; the CLI adds its flags where it prints them.
//!
//! # Layout
//!
//! - `target` turns what a client asked for into a normalised host name or an IP address,
//!   or a precise refusal. IP literals in every spelling are recognised, never looked up.
//! - `floor`: the private-address floor and a proxy's extra ranges; pure.
//! - `resolve`: the proxy's own resolver (hickory, never getaddrinfo) and pins.
//! - `gate`: the one decision pipeline: classify → policy → resolve once → floor → audit.
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
//!   `dns` (the responder), `inspect` (inspected hosts: requests read in clear, judged
//!   one by one, given their credential; handed over by `connect`, `transparent` and
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
#![deny(unreachable_pub)]

pub mod audit;
mod body;
mod ca;
pub mod config;
mod dns_rate;
mod doors;
mod exchange;
#[doc(hidden)]
pub mod fuzzing;
mod gate;
mod inspector;
mod listen;
mod name_addresses;
pub mod passed_listeners;
mod pool;
mod refusal;
mod refused_ports;
mod relay;
pub mod resolve;
mod scrub;
pub mod secret_forms;
pub mod secrets;
pub mod server;
mod shared;
mod sni;
mod splice;
#[cfg(test)]
mod test_sockets;
pub mod upstream_tls;

// The pure pieces live in egress-core; proxy code names them by their usual paths.
use egress_core::{floor, policy, target, text, units};

pub use config::{HandoffError, ProxyConfig, ProxyLimits};
pub use server::{BoundProxy, LocalAddrs, Proxy, ProxyError, RunningProxy};
