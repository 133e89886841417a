//! The helper binary as the library runs it: the handshake, the proxy reading a handoff of its
//! own version and refusing one of another in words, the launcher opened by a signal, and
//! nothing of the command line's flags.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};

use egress_core::handoff::{HANDOFF_VERSION, Handoff};
use egress_sandbox::launch_signal::{self, LAUNCH_VERSION, LaunchSetup};
use egress_sandbox::{Helper, HelperVersion};

const HELPER: &str = env!("CARGO_BIN_EXE_egress-sandbox-helper");

/// The helper in `args`, with piped stdio; killed when dropped.
struct Running(Child);

impl Running {
    fn start(args: &[&str]) -> Running {
        Running(
            Command::new(HELPER)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the helper starts"),
        )
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.stdin.as_mut().unwrap().write_all(bytes).unwrap();
    }

    /// Closes stdin and waits for the exit.
    fn finish(mut self) -> Output {
        drop(self.0.stdin.take());
        let mut output = Output {
            status: self.0.wait().unwrap(),
            stdout: Vec::new(),
            stderr: Vec::new(),
        };
        self.0
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut output.stdout)
            .unwrap();
        self.0
            .stderr
            .take()
            .unwrap()
            .read_to_end(&mut output.stderr)
            .unwrap();
        output
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const LOOPBACK_PROXY: &[&str] = &[
    "proxy",
    "--listen",
    "127.0.0.1:0",
    "--audit-log",
    "-",
    "--config-stdin",
];

#[test]
fn version_answers_the_line_the_library_checks() {
    let output = Command::new(HELPER).arg("version").output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let line = String::from_utf8(output.stdout).unwrap();
    assert_eq!(line, format!("{}\n", HelperVersion::this_library().line()));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let helper = runtime
        .block_on(Helper::at(HELPER))
        .expect("the library takes its own helper");
    assert_eq!(helper.version(), &HelperVersion::this_library());
    assert!(
        line.contains(&format!(
            " handoff {HANDOFF_VERSION} launch {LAUNCH_VERSION}"
        )),
        "{line}"
    );
}

#[test]
fn the_proxy_serves_a_handoff_of_its_version() {
    let mut proxy = Running::start(LOOPBACK_PROXY);
    let handoff = Handoff {
        allow: vec!["allowed.test".into()],
        run_id: Some("r-helper".into()),
        ..Handoff::default()
    };
    proxy.write(handoff.to_line().as_bytes());
    let mut stdout = BufReader::new(proxy.0.stdout.take().unwrap());
    let mut ready = String::new();
    stdout.read_line(&mut ready).unwrap();
    let ready: serde_json::Value = serde_json::from_str(&ready).expect("a ready line");
    let listen: SocketAddr = ready["listen"].as_str().unwrap().parse().unwrap();
    let mut stream = TcpStream::connect(listen).unwrap();
    stream
        .write_all(b"GET http://refused.test/ HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let mut record = String::new();
    stdout.read_line(&mut record).unwrap();
    let record: serde_json::Value = serde_json::from_str(&record).expect("an audit record");
    assert_eq!(record["host"], "refused.test", "{record}");
    assert_eq!(record["run"], "r-helper", "{record}");
}

#[test]
fn the_proxy_refuses_a_handoff_of_another_version_in_words() {
    for line in [
        // What a library writes whose handoff has no version: its pins as strings.
        "{\"resolve\":[\"a.test=203.0.113.5\"]}\n".to_owned(),
        format!("{{\"v\":{},\"unheard_of\":1}}\n", HANDOFF_VERSION + 1),
    ] {
        let mut proxy = Running::start(LOOPBACK_PROXY);
        proxy.write(line.as_bytes());
        let output = proxy.finish();
        assert_eq!(output.status.code(), Some(125), "{output:?}");
        assert!(output.stdout.is_empty(), "no ready line: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        for part in [
            format!("this proxy reads version {HANDOFF_VERSION}"),
            format!("this proxy is {}", HelperVersion::this_library().line()),
            "run the helper built with the library that runs it".to_owned(),
        ] {
            assert!(stderr.contains(&part), "{part:?} in {stderr}");
        }
        assert!(!stderr.contains("unknown field"), "{stderr}");
    }
}

#[test]
fn the_launcher_runs_the_signalled_command_after_its_prefix() {
    let mut launcher = Running::start(&["sandbox-launcher", "--", "sh", "-c"]);
    let setup = LaunchSetup {
        argv: vec!["echo \"$GREETING\"; cat".into()],
        env: vec!["GREETING=hello from the launcher".into()],
        ..LaunchSetup::default()
    };
    let mut signal = launch_signal::encode(&setup);
    signal.extend_from_slice(b"the caller's input\n");
    launcher.write(&signal);
    let output = launcher.finish();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "hello from the launcher\nthe caller's input\n"
    );
}

#[test]
fn the_launcher_refuses_a_signal_of_another_version_and_runs_nothing() {
    let mut launcher = Running::start(&["sandbox-launcher", "--", "echo", "ran"]);
    let json = format!("{{\"v\":{},\"argv\":[\"x\"]}}", LAUNCH_VERSION + 1);
    launcher.write(format!("{}\n{json}", json.len()).as_bytes());
    let output = launcher.finish();
    assert_eq!(output.status.code(), Some(125), "{output:?}");
    assert!(output.stdout.is_empty(), "nothing ran: {output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("this launcher reads version {LAUNCH_VERSION}")),
        "{stderr}"
    );
    assert!(stderr.contains("the command was not run"), "{stderr}");
}

#[test]
fn the_launcher_runs_nothing_when_stdin_ends_without_a_signal() {
    let launcher = Running::start(&["sandbox-launcher", "--", "echo", "ran"]);
    let output = launcher.finish();
    assert_eq!(output.status.code(), Some(125), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
}

#[test]
fn the_command_lines_flags_are_not_taken() {
    for args in [
        &["proxy", "--listen", "127.0.0.1:0", "--allow", "x.test"][..],
        &["run", "--", "true"],
        &["--help"],
        &[],
    ] {
        let output = Command::new(HELPER).args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("`egress-sandbox`"), "{args:?}: {stderr}");
    }
}
