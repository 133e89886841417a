//! `egress-sandbox gc`: remove the containers and networks of runs whose owner is gone.

use std::process::ExitCode;

use anyhow::Context;

use crate::sandbox::docker::Engine;
use crate::sandbox::gc::sweep;

pub fn run(args: crate::cli::GcArgs) -> anyhow::Result<ExitCode> {
    let crate::cli::GcArgs {} = args;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let swept = runtime.block_on(async {
        let engine = Engine::connect().await?;
        anyhow::Ok(sweep(&engine).await?)
    })?;
    for object in &swept {
        match &object.error {
            None => println!(
                "removed {} {} (run {})",
                object.kind, object.name, object.run
            ),
            Some(error) => eprintln!(
                "egress-sandbox: cannot remove {} {} (run {}): {error}",
                object.kind, object.name, object.run
            ),
        }
    }
    if swept.is_empty() {
        eprintln!("egress-sandbox: nothing to remove");
    }
    Ok(ExitCode::SUCCESS)
}
