//! `egress-sandbox audit summary FILE...`: the logs summarised
//! ([`egress_audit::summary`]) on stdout, warnings (lines that are not
//! records, reasons this version does not know) on stderr.

use std::process::ExitCode;

use anyhow::Context;
use egress_audit::summary::AuditSummary;
use egress_core::text::visible;

pub fn summary(files: &[std::path::PathBuf]) -> anyhow::Result<ExitCode> {
    let mut summary = AuditSummary::default();
    for path in files {
        let shown = visible(&path.display().to_string()).into_owned();
        let file = std::fs::File::open(path).with_context(|| format!("cannot open {shown}"))?;
        summary
            .read(path, std::io::BufReader::new(file), &mut |warning| {
                eprintln!("egress-sandbox: warning: {warning}");
            })
            .with_context(|| format!("cannot read {shown}"))?;
    }
    if let Some(warning) = summary.unknown_reasons_warning() {
        eprintln!("egress-sandbox: warning: {warning}");
    }
    crate::commands::print_out(&summary.render());
    Ok(ExitCode::SUCCESS)
}
