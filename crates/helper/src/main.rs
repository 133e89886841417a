//! `egress-sandbox-helper`: see the library's docs ([`egress_sandbox_helper`]).
#![deny(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    egress_sandbox_helper::main(std::env::args_os().skip(1))
}
