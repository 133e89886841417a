//! Diagnostics go to stderr through `tracing`, never into the audit stream or the sandboxed
//! command's output.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// `-v` turns on debug diagnostics; `EGRESS_SANDBOX_LOG` (an `EnvFilter`) overrides.
pub fn init(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info,egress_sandbox=debug,egress_proxy=debug",
        _ => "debug",
    };
    let filter =
        EnvFilter::try_from_env("EGRESS_SANDBOX_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a person: the proxy container's stderr is read by `run`.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}
