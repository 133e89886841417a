//! The doors: every way into the proxy. A door takes what a client sent — a connection, a
//! request, a DNS message — parses it into a target and what else the gate needs, asks the
//! [gate](crate::gate), and answers what the gate decided: it relays or forwards what was
//! let through, and answers a refusal with [`crate::refusal`] (or NXDOMAIN, or a reset).
//! What a door cannot parse it refuses itself as malformed or unsupported (the bytes are
//! not what it speaks); where a request may go — the tripwire, the policy, the floor, the
//! audit budget — only the gate decides.
//!
//! Doors depend on the gate and the shared pieces, and on each other only to hand a
//! connection over (`http` → `connect` → `inspect`, `transparent` → `http`/`inspect`,
//! `raw` → `transparent`); never on the server, which is the one that knows them all.

pub(crate) mod connect;
pub(crate) mod dns;
pub(crate) mod http;
pub(crate) mod inspect;
pub(crate) mod raw;
pub(crate) mod transparent;
