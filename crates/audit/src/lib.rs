//! Tools for the people who review what sandboxes tried: reading audit logs back, exporting
//! them to a SIEM, drawing them for a person, and drafting a first policy from them.
//!
//! Everything here is pure (text in, text out) so the commands stay thin and the tests need
//! no Docker.
//!
//! # Layout
//!
//! - [`verify`]: every run's hash chain checked, and run reports against it.
//! - [`summary`]: logs → the refusal and allowed-host tables of `audit summary`.
//! - [`log`]: audit log files read through core's reader into core's records (attempts,
//!   `limit` and `end` lines), each with its file and line, and the lines that are not
//!   records.
//! - [`ocsf`]: one line → one OCSF 1.5 event (Network, HTTP, DNS or Event Log Activity).
//! - [`html`]: records → one self-contained HTML page (inline CSS and SVG, no script).
//! - [`suggest`]: records → a commented draft policy YAML.

#![deny(missing_docs, unreachable_pub)]

pub mod html;
pub mod log;
pub mod ocsf;
pub mod suggest;
pub mod summary;
pub mod verify;
