//! `egress-sandbox`: parse, set up diagnostics, dispatch. Everything else lives in the
//! library (`src/lib.rs`) so agent frameworks can embed it.
#![deny(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

use egress_sandbox::cli::{Cli, Command};
use egress_sandbox::commands;

fn main() -> ExitCode {
    let cli = Cli::parse();
    egress_sandbox::logging::init(cli.verbose);
    let result = match cli.command {
        Command::Run(args) => commands::run(args),
        Command::Policy(args) => commands::policy::run(args),
        Command::Proxy(args) => commands::proxy::run(args),
        Command::Audit(args) => commands::audit::run(args),
        Command::Gc(args) => commands::gc::run(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::Mcp(args) => commands::mcp::run(args),
        Command::SandboxGate(args) => commands::sandbox_gate::run(args),
        Command::Watchdog(args) => commands::watchdog::run(args),
    };
    match result {
        Ok(code) => code,
        // 125: the sandbox (or the command) could not be set up; INTERFACE.md.
        Err(error) => commands::report_error(&error, 125),
    }
}
