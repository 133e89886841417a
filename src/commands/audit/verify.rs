//! `egress-sandbox audit verify [--report REPORT.json]... FILE...`: the logs' chains
//! checked ([`egress_audit::verify`]), one line per break on stdout; exit 0
//! intact, 1 with breaks, 2 when a log or report cannot be read.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use egress_audit::verify::{ChainVerifier, ReportHead};
use egress_core::text::visible;

use crate::commands::{USAGE, print_out};

pub fn verify(reports: &[PathBuf], files: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut verifier = ChainVerifier::default();
    for path in files {
        let file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(error) => return Ok(usage_error(path, &error.to_string())),
        };
        if let Err(error) = verifier.read(path, BufReader::new(file)) {
            return Ok(usage_error(path, &error.to_string()));
        }
    }
    for path in reports {
        let report = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) => return Ok(usage_error(path, &error.to_string())),
        };
        match ReportHead::parse(&report) {
            Ok(report) => verifier.check_report(path, &report),
            Err(error) => {
                return Ok(usage_error(path, &format!("not a run report: {error}")));
            }
        }
    }
    let verification = verifier.finish();
    for line in &verification.breaks {
        print_out(&format!("{line}\n"));
    }
    if verification.breaks.is_empty() {
        print_out(&format!(
            "{} intact: {} run(s), {} line(s)\n",
            if files.len() == 1 {
                visible(&files[0].display().to_string()).into_owned()
            } else {
                format!("{} files", files.len())
            },
            verification.runs,
            verification.lines
        ));
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

fn usage_error(path: &Path, what: &str) -> ExitCode {
    eprintln!(
        "egress-sandbox: error: {}: {}",
        visible(&path.display().to_string()),
        visible(what)
    );
    ExitCode::from(USAGE)
}
