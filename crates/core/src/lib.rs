//! The pure heart of egress-sandbox, shared by the proxy, the sandbox library, the daemon
//! and the audit tools: what a run's egress is judged by and what is written about it.
//!
//! No I/O beyond reading a policy file, no async, no TLS: this crate depends on neither
//! tokio, hyper nor rustls, so everything here can be tested, fuzzed and embedded alone.
//!
//! # Layout
//!
//! - [`target`]: what a client asked for, as a normalised host name or an IP address, or
//!   a precise refusal. IP literals in every spelling are recognised, never looked up.
//! - [`floor`]: the private-address floor no policy can open.
//! - [`units`]: durations and sizes as a person writes them, with their bounds.
//! - [`text`]: untrusted text made safe to show a person.
//! - [`policy`]: the policy engine. YAML in, `decide(target, port) -> Decision` out.
//! - [`audit`]: the audit record (one JSON line per attempt), the `limit` and `end`
//!   records, the chain linking a run's lines, and what happens past the audit budget.
//! - [`tally`]: the bounded count of a run's audit records behind every summary.
//! - [`pin`]: `NAME=IP` pins.
//! - [`secret`]: secret values that never print, and their placeholders.
//! - [`upstream_ca`]: extra CA certificates trusted for upstream TLS.
//! - [`handoff`]: the one JSON line a run hands its proxy.
//! - [`doors`]: where a sandbox's doors are bound, and the socket they are passed over.
//! - [`wire`]: the version every object the library hands its helper binary carries.
#![deny(unsafe_code)]
#![deny(unreachable_pub)]
#![deny(missing_docs)]

pub mod audit;
pub mod doors;
pub mod floor;
pub mod handoff;
pub mod pin;
pub mod policy;
pub mod secret;
pub mod tally;
pub mod target;
pub mod text;
pub mod units;
pub mod upstream_ca;
pub mod wire;
