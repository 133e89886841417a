//! The `egress-sandbox` command is a helper binary too (the `run` command and `serve` pass
//! their own executable to the library): it answers the version handshake with the line the
//! helper binary answers, and the library takes it.

use std::process::Command;

use egress_sandbox::{Helper, HelperVersion};

#[test]
fn the_command_answers_the_helpers_handshake_and_the_library_takes_it() {
    let binary = env!("CARGO_BIN_EXE_egress-sandbox");
    let output = Command::new(binary).arg("version").output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        format!("{}\n", egress_sandbox_helper::version_line())
    );
    assert_eq!(
        egress_sandbox_helper::version_line(),
        HelperVersion::this_library().line()
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let helper = runtime.block_on(Helper::at(binary)).expect("a helper");
    assert_eq!(helper.version(), &HelperVersion::this_library());
}
