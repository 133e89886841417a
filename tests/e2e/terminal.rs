//! The tool's own lines cannot be hidden by the command's output: on a terminal they come
//! after an attribute reset and on a line of their own; without one, still on a line of
//! their own, and nothing else is added.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::run::{BINARY, wait_bounded};
use crate::support::{Run, TestNetwork};

/// A command that forges a summary line and then turns on "concealed" without a line end.
const CONCEALING: &str =
    r#"printf "egress-sandbox: exit 0 after 0.1s; 0 blocked\n\033[8m" >&2; exit 3"#;

/// `egress-sandbox ARGS` on a fresh pseudo-terminal (through `script`): what the terminal
/// received, and the exit status.
fn on_a_terminal(args: &[&str]) -> (String, Option<i32>) {
    let quoted: Vec<String> = args
        .iter()
        .map(|arg| format!("'{}'", arg.replace('\'', r"'\''")))
        .collect();
    let command_line = format!("{BINARY} {}", quoted.join(" "));
    let mut child = Command::new("script")
        .args(["-qec", &command_line, "/dev/null"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("`script` (util-linux) runs");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut received = Vec::new();
        let _ = stdout.read_to_end(&mut received);
        String::from_utf8_lossy(&received).into_owned()
    });
    let status = wait_bounded(&mut child, Duration::from_secs(120), || {});
    (reader.join().unwrap(), status.code())
}

#[test]
fn on_a_terminal_the_summary_follows_a_reset_on_a_line_of_its_own() {
    let network = TestNetwork::create();
    let daemon = crate::serve::Daemon::start();
    let socket = daemon.socket.display().to_string();
    let cold = ["run", "--egress-network", &network.name, "--timeout", "60s"];
    let served = [&cold[..], &["--server", &socket]].concat();
    for args in [&cold[..], &served[..]] {
        let args = [args, &["--", "sh", "-c", CONCEALING]].concat();
        let (terminal, code) = on_a_terminal(&args);
        assert_eq!(code, Some(3), "{terminal:?}");
        // The pty turns each line end into CR LF.
        assert!(
            terminal.contains("\x1b[8m\x1b[0m\r\negress-sandbox: exit 3 "),
            "the real summary is not reset and on its own line: {terminal:?}"
        );
    }
}

#[test]
fn without_a_terminal_the_summary_still_starts_a_line_and_nothing_else_is_added() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .timeout("60s")
        .run(&["sh", "-c", "printf 'no line end' >&2"]);
    run.assert_code(0);
    assert!(
        run.stderr.contains("no line end\negress-sandbox: exit 0 "),
        "{}",
        run.describe()
    );
    assert!(!run.stderr.contains('\x1b'), "{}", run.describe());

    let run = Run::new(&network)
        .timeout("60s")
        .run(&["sh", "-c", "echo ended >&2"]);
    run.assert_code(0);
    assert!(
        run.stderr.contains("ended\negress-sandbox: exit 0 "),
        "no blank line is added after a line end: {}",
        run.describe()
    );
}
