//! `egress-sandbox audit report --html OUT.html FILE...`: one self-contained page
//! (`audit_tools::html` draws it).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use egress_audit::{html, log};

pub fn report(out: &Path, files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let log = log::read_files(files)?;
    crate::commands::warn_skipped(&log);
    let sources: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let page = html::render(&log, &sources);
    std::fs::write(out, page).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!(
        "egress-sandbox: wrote {} ({} records)",
        egress_core::text::visible(&out.display().to_string()),
        log.entries.len()
    );
    Ok(ExitCode::SUCCESS)
}
