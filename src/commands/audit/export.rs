//! `egress-sandbox audit export --format ocsf FILE...`: every line of the logs as one OCSF
//! event per line on stdout (`audit_tools::ocsf` has the mapping).

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::ExportFormat;
use egress_audit::{log, ocsf};

pub fn export(format: ExportFormat, files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let log = log::read_files(files)?;
    crate::commands::warn_skipped(&log);
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let events = log.entries.iter().filter_map(|located| match format {
        ExportFormat::Ocsf => ocsf::event(&located.record),
    });
    let written = events.into_iter().try_for_each(|event| {
        serde_json::to_writer(&mut out, &event)?;
        out.write_all(b"\n")
    });
    match written.and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // The reader went away (`… | head`): it has what it wanted.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(error) => Err(error).context("cannot write to stdout"),
    }
}
