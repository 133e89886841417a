//! The egress proxy of egress-sandbox: the single exit of every sandboxed run.
//!
//! One gate, many doors. Every way in — a `CONNECT` tunnel, an absolute-form plain HTTP
//! request, a transparent TLS connection routed by SNI, a transparent HTTP connection routed
//! by `Host`, a DNS query — turns what the client asked for into a [`target::Target`] and
//! passes through the same decision pipeline in [`gate`], so the doors cannot disagree.
//!
//! # Layout
//!
//! - [`policy`]: the pure policy engine. YAML in, `decide(target, port) -> Decision` out;
//!   no I/O, no async.
//! - [`target`]: turns what a client asked for into a normalised host name or an IP address,
//!   or a precise refusal. IP literals in every spelling are recognised, never looked up.
//! - [`floor`]: the private-address floor, a pure function over `IpAddr`.
//! - [`resolve`]: the proxy's own resolver (hickory, never getaddrinfo) and `--resolve` pins.
//! - [`audit`]: the audit record and its single writer; [`text`] makes untrusted text safe
//!   to show a person.
//! - [`gate`]: the one decision pipeline: classify → policy → resolve once → floor → audit.
//! - [`server`], [`connect`], [`http`], [`transparent`], [`sni`], [`dns`]: listeners and doors;
//!   [`relay`] moves a tunnel's bytes ([`splice`] keeps them in the kernel); [`config`] is
//!   the typed configuration; a private pool keeps idle upstream connections per target.
//!
//! # Use
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use egress_proxy::{Proxy, ProxyConfig, policy::{Policy, PolicySet}};
//! let policy = PolicySet::merge(vec![Policy::from_allow_flags(&["example.com".into()])?]);
//! let proxy = Proxy::bind(ProxyConfig::new(policy, "127.0.0.1:0".parse()?)).await?;
//! println!("listening on {}", proxy.local_addrs().listen);
//! let counts = proxy.shutdown().await;
//! # let _ = counts; Ok(()) }
//! ```
#![deny(unsafe_code)]

pub mod audit;
pub mod config;
pub mod connect;
pub mod dns;
pub mod floor;
#[doc(hidden)]
pub mod fuzzing;
pub mod gate;
pub mod handoff;
pub mod http;
pub mod policy;
mod pool;
pub mod relay;
pub mod resolve;
pub mod server;
pub mod sni;
pub mod splice;
pub mod target;
pub mod text;
pub mod transparent;

pub use config::{ProxyConfig, ProxyLimits};
pub use server::{BoundProxy, LocalAddrs, Proxy, ProxyError, RunningProxy};
