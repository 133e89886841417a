//! `egress-sandbox gc`: remove the containers and networks of runs whose owner is gone,
//! and images of this tool that nothing can use any more.

use std::process::ExitCode;

use anyhow::Context;

use egress_sandbox::DockerEngine;
use egress_sandbox::HostIdentity;
use egress_sandbox::sweep;
use egress_sandbox::sweep_images;

pub fn run(args: crate::cli::GcArgs) -> anyhow::Result<ExitCode> {
    let crate::cli::GcArgs {} = args;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let here = HostIdentity::current().context("cannot read this host's identity from /proc")?;
    let (report, images) = runtime.block_on(async {
        let engine = DockerEngine::connect().await?;
        let report = sweep(&engine, &here).await?;
        let images = sweep_images(&engine).await;
        anyhow::Ok((report, images))
    })?;
    let swept = &report.removed;
    for object in swept {
        match &object.error {
            None => super::print_out(&format!(
                "removed {} {}{}\n",
                object.kind,
                object.name,
                of_run(&object.run)
            )),
            Some(error) => eprintln!(
                "egress-sandbox: cannot remove {} {}{}: {error}",
                object.kind,
                object.name,
                of_run(&object.run)
            ),
        }
    }
    for object in &report.skipped {
        eprintln!(
            "egress-sandbox: skipped {} {} (run {}): {}",
            object.kind, object.name, object.run, object.reason
        );
    }
    if images > 0 {
        super::print_out(&format!("removed {images} stale egress-sandbox image(s)\n"));
    }
    eprintln!("egress-sandbox: {}", summary(&report, images));
    Ok(ExitCode::SUCCESS)
}

/// One line that says what `gc` did, whatever it was: removed, skipped (left alone with
/// the reason above), failed.
fn summary(report: &egress_sandbox::GcReport, images: usize) -> String {
    let failed = report.removed.iter().filter(|o| o.error.is_some()).count();
    let removed = report.removed.len() - failed;
    let skipped = report.skipped.len();
    if removed == 0 && failed == 0 && skipped == 0 && images == 0 {
        return "nothing to remove".to_owned();
    }
    let mut line = format!("gc: removed {removed} object(s)");
    if images > 0 {
        line.push_str(&format!(" and {images} image(s)"));
    }
    line.push_str(&format!(", skipped {skipped}"));
    if failed > 0 {
        line.push_str(&format!(", could not remove {failed}"));
    }
    line
}

/// ` (run ID)` after an object's name, or nothing when its run is not known (a directory).
pub(crate) fn of_run(run: &str) -> String {
    if run.is_empty() {
        String::new()
    } else {
        format!(" (run {run})")
    }
}
