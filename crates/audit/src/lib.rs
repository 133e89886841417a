//! Tools for the people who review what sandboxes tried: reading audit logs back, exporting
//! them to a SIEM, drawing them for a person, and drafting a first policy from them.
//!
//! Everything here is pure (text in, text out) so the commands stay thin and the tests need
//! no Docker.
//!
//! # Layout
//!
//! - [`verify`]: every run's hash chain checked, and run reports against it.
//! - [`summary`]: entries → the refusal and allowed-host tables of `audit summary`.
//! - [`log`]: audit log files → [`log::Entry`] values (attempts, `limit` and `end` lines),
//!   tolerant of fields added later and of lines that are not records.
//! - [`ocsf`]: one entry → one OCSF 1.5 event (Network, HTTP, DNS or Event Log Activity).
//! - [`html`]: entries → one self-contained HTML page (inline CSS and SVG, no script).
//! - [`suggest`]: entries → a commented draft policy YAML.

pub mod html;
pub mod log;
pub mod ocsf;
pub mod suggest;
pub mod summary;
pub mod verify;
