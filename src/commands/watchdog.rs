//! `egress-sandbox watchdog --owner STAMP` (hidden): the child side of
//! [`egress_sandbox::watchdog`]. Reads its stdin to the end; unless the owner wrote the
//! stand-down line first, the owner died with its runs up, and every object carrying its
//! owner label is removed now.

use std::io::Read;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::WatchdogArgs;
use egress_sandbox::DockerEngine;
use egress_sandbox::gc::sweep_owner;
use egress_sandbox::labels::{Owner, OwnerLabel};
use egress_sandbox::watchdog::STAND_DOWN;

pub fn run(args: WatchdogArgs) -> anyhow::Result<ExitCode> {
    let mut said = Vec::new();
    // An error reading is an end as well: either way the owner can no longer stand down.
    let _ = std::io::stdin().lock().read_to_end(&mut said);
    if said == STAND_DOWN {
        return Ok(ExitCode::SUCCESS);
    }
    let owner = args.owner;
    // How the owner is named in what is said: its pid, or the whole stamp if unreadable.
    let pid = match Owner::parse(&owner) {
        OwnerLabel::Owner(parsed) => parsed.pid.to_string(),
        _ => owner.clone(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let report = runtime.block_on(async {
        let engine = DockerEngine::connect().await?;
        anyhow::Ok(sweep_owner(&engine, &owner).await?)
    });
    let report = report.with_context(|| {
        format!("process {pid} ended without removing its runs, and the watchdog cannot; run `egress-sandbox gc`")
    })?;
    let mut failed = false;
    for object in &report.removed {
        match &object.error {
            None => eprintln!(
                "egress-sandbox: process {pid} ended without removing its runs; removed {} {}{}",
                object.kind,
                object.name,
                super::gc::of_run(&object.run)
            ),
            Some(error) => {
                failed = true;
                eprintln!(
                    "egress-sandbox: process {pid} ended without removing its runs; cannot remove {} {}{}: {error}; run `egress-sandbox gc`",
                    object.kind,
                    object.name,
                    super::gc::of_run(&object.run)
                );
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
