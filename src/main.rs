//! `egress-sandbox`: parse, set up diagnostics, dispatch. Everything else lives in the
//! library (`src/lib.rs`) so agent frameworks can embed it.
#![deny(unsafe_code)]

use std::process::ExitCode;

use egress_sandbox::cli::Command;
use egress_sandbox::commands;

fn main() -> ExitCode {
    let cli = commands::usage::parse_command_line();
    egress_sandbox::logging::init(cli.verbose);
    let result = match cli.command {
        Command::Run(args) => commands::run(args),
        Command::Policy(args) => commands::policy::run(args),
        Command::Proxy(args) => commands::proxy::run(args),
        Command::Audit(args) => commands::audit::run(args),
        Command::Gc(args) => commands::gc::run(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::Doctor(args) => commands::doctor::run(args),
        Command::Mcp(args) => commands::mcp::run(args),
        Command::SandboxGate(args) => commands::sandbox_gate::run(args),
        Command::Watchdog(args) => commands::watchdog::run(args),
    };
    match result {
        Ok(code) => code,
        // 125: the sandbox (or the command) could not be set up (docs: reference/exit-codes).
        Err(error) => commands::report_error(&error, 125),
    }
}
