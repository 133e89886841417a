//! `egress-sandbox-helper`: the one binary the egress-sandbox library runs, in the modes it
//! runs it in, and nothing else.
//!
//! - `proxy …` ([`proxy`]): the proxy in the proxy container (`FROM scratch`: the binary is
//!   static), with exactly the arguments the library gives it; the run's own settings come
//!   over stdin as the handoff line.
//! - `sandbox-launcher [--pass-listeners PATH] -- PREFIX…` ([`launcher`]): the sandbox's
//!   entrypoint, which waits for the launch signal, then executes the command.
//! - `watchdog --owner STAMP` ([`watchdog`]): removes a process's runs if it dies without.
//! - `version` ([`version_line`]): the handshake the library checks before it uses the
//!   binary ([`egress_sandbox::helper`]).
//!
//! Its command line is a protocol between the library and this binary, not a user
//! interface, so it is parsed here by hand ([`args`]) and the binary compiles no argument
//! parser, MCP server or log formatter. The `egress-sandbox` command runs the same code for
//! its own `proxy`, `sandbox-launcher` and `watchdog` subcommands (its `proxy` with the
//! flags of a user, converted to [`proxy::ProxyOptions`]) and answers `version` the same
//! way, so it is a helper too.

#![deny(unsafe_code)]
#![deny(missing_docs, unreachable_pub)]

use std::ffi::OsString;
use std::process::ExitCode;

pub mod args;
mod failure;
pub mod launcher;
pub mod proxy;
pub mod stderr_log;
pub mod watchdog;

pub use failure::Failure;

use args::Mode;
use egress_sandbox::HelperVersion;

/// Exit status of a failed set-up, as the `egress-sandbox` command's (125).
pub const SETUP_FAILED: u8 = 125;
/// Exit status of arguments this binary does not take.
pub const USAGE: u8 = 2;

/// What this binary answers `version` with: its version and the format versions it reads,
/// which [`egress_sandbox::Helper::at`] compares with its own.
pub fn version_line() -> String {
    HelperVersion {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        ..HelperVersion::this_library()
    }
    .line()
}

/// The binary's `main`: `args` without the program's name.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let mode = match args::parse(args) {
        Ok(mode) => mode,
        Err(error) => {
            eprintln!("{}: {error}", egress_sandbox::HELPER_NAME);
            return ExitCode::from(USAGE);
        }
    };
    stderr_log::init();
    let result = match mode {
        Mode::Version => {
            println!("{}", version_line());
            Ok(ExitCode::SUCCESS)
        }
        Mode::Proxy(options) => proxy::run(*options),
        Mode::Launcher(options) => Ok(launcher::run(options)),
        Mode::Watchdog { owner } => watchdog::run(&owner),
    };
    result.unwrap_or_else(|failure| {
        failure.report();
        ExitCode::from(SETUP_FAILED)
    })
}
