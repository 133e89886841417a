//! `egress-sandbox policy suggest FILE... [--name NAME] [--wildcard-after N]`: a commented
//! draft policy on stdout, drafted by `audit_tools::suggest` from audit logs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use egress_core::policy::Policy;

use crate::commands::{USAGE, print_out, report_error, warn_skipped};
use egress_audit::{log, suggest};

pub fn suggest(files: &[PathBuf], name: &str, wildcard_after: usize) -> anyhow::Result<ExitCode> {
    // The name goes into the draft as written: refuse one the engine would refuse, before
    // reading any log.
    let probe = format!("version: 1\nname: {}\n", serde_json::to_string(name)?);
    if let Err(error) = Policy::from_yaml("--name", &probe) {
        let message = error
            .diagnostics
            .first()
            .map_or_else(String::new, |d| d.message.clone());
        eprintln!(
            "egress-sandbox: error: --name: {}",
            egress_core::text::visible(&message)
        );
        return Ok(ExitCode::from(USAGE));
    }
    let log = match log::read_files(files) {
        Ok(log) => log,
        // An unreadable log is a usage error, like a refused --name.
        Err(error) => return Ok(report_error(&error.into(), USAGE)),
    };
    warn_skipped(&log);
    let options = suggest::SuggestOptions {
        name: name.to_owned(),
        wildcard_after,
        sources: files.iter().map(|f| f.display().to_string()).collect(),
    };
    let draft = suggest::suggest(&log, &options);
    // The draft must pass `policy check`: a draft that does not is a bug here, never
    // something to hand a reviewer.
    if let Err(error) = Policy::from_yaml("draft", &draft) {
        bail!("the drafted policy does not pass `policy check` (a bug):\n{error}");
    }
    print_out(&draft);
    Ok(ExitCode::SUCCESS)
}
