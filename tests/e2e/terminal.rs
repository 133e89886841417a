//! The tool's own lines cannot be hidden by the command's output: on a terminal they come
//! after a reset of character sets and attributes and on a line of their own; without one,
//! still on a line of their own, and nothing else is added.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::run::{BINARY, HANG_BOUND, wait_bounded};
use crate::support::{Run, TestNetwork};

/// What the tool writes before its own line on a terminal when the command left a line
/// open: character sets and attributes reset, then a line end (CR LF through a pty).
const RESET_AND_LINE_END: &str = "\x1b(B\x1b)B\x0f\x1b[0m\r\n";

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
            terminal.contains(&format!(
                "\x1b[8m{RESET_AND_LINE_END}egress-sandbox: exit 3 "
            )),
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

/// `egress-sandbox ARGS` in a fresh tmux server's pane: the screen as a terminal shows it
/// once the run has ended (see [`rendered`]), and the exit status.
fn on_a_screen(args: &[&str]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("tmux");
    let status = dir.path().join("status");
    let quoted = |arg: &str| format!("'{}'", arg.replace('\'', r"'\''"));
    let tmux = |socket: &Path| {
        format!(
            "tmux -f /dev/null -S {}",
            quoted(&socket.display().to_string())
        )
    };
    let command_line = format!(
        "{} {}; echo $? > {}; {} wait-for -S ended; exec sleep 600",
        quoted(BINARY),
        args.iter()
            .map(|arg| quoted(arg))
            .collect::<Vec<_>>()
            .join(" "),
        quoted(&status.display().to_string()),
        tmux(&socket),
    );
    let tmux_command = |arguments: &[&str]| {
        let mut command = Command::new("tmux");
        command
            .args(["-f", "/dev/null", "-S"])
            .arg(&socket)
            .args(arguments)
            .env_remove("TMUX")
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::null());
        command
    };
    let started = tmux_command(&["new-session", "-d", "-x", "200", "-y", "40", &command_line])
        .status()
        .expect("tmux runs");
    assert!(started.success(), "tmux new-session failed");
    let mut ended = tmux_command(&["wait-for", "ended"]).spawn().unwrap();
    let waited = wait_bounded(&mut ended, HANG_BOUND, || {});
    let captured = tmux_command(&["capture-pane", "-p", "-e", "-J"])
        .output()
        .unwrap();
    let _ = tmux_command(&["kill-server"]).status();
    assert!(waited.success() && captured.status.success(), "tmux failed");
    let screen = rendered(&String::from_utf8_lossy(&captured.stdout));
    let code = std::fs::read_to_string(&status).unwrap().trim().to_owned();
    (screen, code)
}

/// The text of a `capture-pane -e` as the terminal draws it: styles dropped, and each
/// character tmux marks as drawn from the DEC line-drawing set (between SO and SI) shown
/// as its glyph.
fn rendered(captured: &str) -> String {
    const LINE_DRAWING: &str = "\u{a0}◆▒␉␌␍␊°±␤␋┘┐┌└┼⎺⎻─⎼⎽├┤┴┬│≤≥π≠£·";
    let glyphs: Vec<char> = LINE_DRAWING.chars().collect();
    let mut screen = String::new();
    let mut line_drawing = false;
    let mut chars = captured.chars();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                // A CSI sequence (a style): skip to its final byte.
                let _ = chars.next();
                for next in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&next) {
                        break;
                    }
                }
            }
            '\x0e' => line_drawing = true,
            '\x0f' => line_drawing = false,
            '_'..='~' if line_drawing => screen.push(glyphs[c as usize - '_' as usize]),
            c => screen.push(c),
        }
    }
    screen
}

/// A command that switches the terminal to the line-drawing set, leaving no line end,
/// cannot make the summary unreadable: through G0 (`ESC ( 0`) or through G1 and a shift
/// out (`ESC ) 0`, SO). The screen is read the way a person sees it.
#[test]
fn a_command_switching_character_sets_leaves_the_summary_readable() {
    let network = TestNetwork::create();
    for (case, switch) in [("G0", r"\033(0"), ("G1 shifted in", r"\033)0\016")] {
        let program = format!("printf 'switching {switch}'");
        let (screen, code) = on_a_screen(&[
            "run",
            "--egress-network",
            &network.name,
            "--timeout",
            "60s",
            "--",
            "sh",
            "-c",
            &program,
        ]);
        assert_eq!(code, "0", "{case}: {screen}");
        assert!(
            screen.contains("\negress-sandbox: exit 0 after "),
            "{case}: the summary is not readable on the screen:\n{screen}"
        );
    }
}
