//! `watchdog --owner STAMP`: the child side of [`egress_sandbox::watchdog`]. Reads its stdin
//! to the end; unless the owner wrote the stand-down line first, the owner died with its
//! runs up, and every object carrying its owner label is removed now.

use std::io::Read;
use std::process::ExitCode;

use egress_sandbox::DockerEngine;
use egress_sandbox::STAND_DOWN;
use egress_sandbox::{GcReport, sweep_owner};
use egress_sandbox::{Owner, OwnerLabel};

use crate::Failure;

/// Waits for the owner's word or its end; after an end, removes the owner's objects.
pub fn run(owner: &str) -> Result<ExitCode, Failure> {
    let mut said = Vec::new();
    // An error reading is an end as well: either way the owner can no longer stand down.
    let _ = std::io::stdin().lock().read_to_end(&mut said);
    if said == STAND_DOWN {
        return Ok(ExitCode::SUCCESS);
    }
    let pid = owner_pid(owner);
    let report = sweep(owner).map_err(|failure| {
        Failure::new(format!(
            "process {pid} ended without removing its runs, and the watchdog cannot; run `egress-sandbox gc`: {failure}"
        ))
    })?;
    Ok(if say_removed(&pid, &report) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// How the owner is named in what is said: its pid, or the whole stamp if unreadable.
fn owner_pid(owner: &str) -> String {
    match Owner::parse(owner) {
        OwnerLabel::Owner(parsed) => parsed.pid.to_string(),
        _ => owner.to_owned(),
    }
}

/// Removes every object labelled with `owner`.
fn sweep(owner: &str) -> Result<GcReport, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Failure::context("cannot start the async runtime"))?;
    runtime.block_on(async {
        let engine = DockerEngine::connect()
            .await
            .map_err(|error| Failure::from_error(&error))?;
        sweep_owner(&engine, owner)
            .await
            .map_err(|error| Failure::from_error(&error))
    })
}

/// Says each object removed, or not; whether every one was.
fn say_removed(pid: &str, report: &GcReport) -> bool {
    let mut removed_all = true;
    for object in &report.removed {
        match &object.error {
            None => eprintln!(
                "egress-sandbox: process {pid} ended without removing its runs; removed {} {}{}",
                object.kind,
                object.name,
                of_run(&object.run)
            ),
            Some(error) => {
                removed_all = false;
                eprintln!(
                    "egress-sandbox: process {pid} ended without removing its runs; cannot remove {} {}{}: {error}; run `egress-sandbox gc`",
                    object.kind,
                    object.name,
                    of_run(&object.run)
                );
            }
        }
    }
    removed_all
}

/// ` (run ID)` after an object's name, or nothing when its run is not known (a directory).
fn of_run(run: &str) -> String {
    if run.is_empty() {
        String::new()
    } else {
        format!(" (run {run})")
    }
}
