//! `egress-sandbox`: parse, set up diagnostics, dispatch.
//!
//! # Layout
//!
//! The command line is this binary's own; everything a run is lives in the libraries
//! (`egress-sandbox`: the run lifecycle; `egress-serve`: the daemon; `egress-audit`: the
//! audit tools; `egress-proxy` and `egress-core` under them), which agent frameworks embed
//! without compiling any of this.
//!
//! - `cli`: the command line (clap), as `docs/src/reference/cli.md` describes it.
//! - `commands`: one module per subcommand; each turns arguments into library calls and
//!   prints what they return.
//! - `mcp`: the MCP server front end on stdio (`egress-sandbox mcp`), a client of the
//!   daemon's API.
//! - `logging`: the `tracing` subscriber for `-v` and `EGRESS_SANDBOX_LOG`, on stderr.
#![deny(unsafe_code)]

use std::process::ExitCode;

mod cli;
mod commands;
mod logging;
mod mcp;

use cli::Command;

fn main() -> ExitCode {
    let cli = commands::usage::parse_command_line();
    logging::init(cli.verbose);
    let result = match cli.command {
        Command::Run(args) => commands::run(args),
        Command::Policy(args) => commands::policy::run(args),
        Command::Proxy(args) => commands::proxy::run(*args),
        Command::Audit(args) => commands::audit::run(args),
        Command::Gc(args) => commands::gc::run(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::Doctor(args) => commands::doctor::run(args),
        Command::Mcp(args) => commands::mcp::run(args),
        Command::SandboxLauncher(args) => commands::sandbox_launcher::run(args),
        Command::Watchdog(args) => commands::watchdog::run(args),
        Command::Version => {
            println!("{}", egress_sandbox_helper::version_line());
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        // 125: the sandbox (or the command) could not be set up (docs: reference/exit-codes).
        Err(error) => commands::report_error(&error, 125),
    }
}
