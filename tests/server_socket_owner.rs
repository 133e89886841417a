//! `run --server` and `mcp --server` against a fake daemon of another local user (uid 65534,
//! through `setpriv`) that records every byte it receives: the request, which carries the
//! run's secrets, must never reach it. Refused with exit 125 and the owner named, before a
//! byte is written. No Docker.

mod run_support;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

use run_support::*;

const SECRET_VALUE: &str = "sk-server-socket-owner-value";

const CREDENTIAL_POLICY: &str = "version: 1
allow:
  - host: api.example.test
credentials:
  - host: api.example.test
    secret: API_KEY
";

/// The fake daemon: listens on `argv[1]` (mode 0777, so anyone may connect), answers each
/// connection's first bytes with a 400 (so a client that sends does not wait forever), and
/// once its stdin closes reads what is still queued and prints `received N bytes: …`.
const FAKE_DAEMON: &str = r#"
import os, selectors, socket, sys
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o777)
listener.listen(16)
listener.setblocking(False)
selector = selectors.DefaultSelector()
selector.register(listener, selectors.EVENT_READ)
selector.register(0, selectors.EVENT_READ)
received = bytearray()
answered = set()
answer = b'{"error":"fake daemon"}'
answer = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(answer), answer)
def take(connection):
    data = connection.recv(65536)
    if data:
        if connection not in answered:
            answered.add(connection)
            connection.sendall(answer)
        received.extend(data)
    return data
print("listening", flush=True)
stopping = False
while not stopping:
    for key, _ in selector.select():
        if key.fileobj is listener:
            connection, _ = listener.accept()
            selector.register(connection, selectors.EVENT_READ)
        elif key.fileobj == 0:
            stopping = not os.read(0, 1)
        elif not take(key.fileobj):
            selector.unregister(key.fileobj)
            key.fileobj.close()
pending = [key.fileobj for key in selector.get_map().values() if key.fileobj not in (0, listener)]
while True:
    try:
        pending.append(listener.accept()[0])
    except BlockingIOError:
        break
for connection in pending:
    connection.setblocking(True)
    connection.settimeout(10)
    while take(connection):
        pass
print("received %d bytes: %r" % (len(received), bytes(received)), flush=True)
"#;

/// A fake daemon running as uid 65534 on `socket`.
struct FakeDaemon {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl FakeDaemon {
    fn start(socket: &Path) -> FakeDaemon {
        let mut child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["python3", "-c", FAKE_DAEMON])
            .arg(socket)
            // An interpreter uid 65534 may run (not one under root's home).
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("setpriv runs");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "listening\n", "the fake daemon did not start");
        FakeDaemon { child, stdout }
    }

    /// Stops the daemon and returns its last line: `received N bytes: …`.
    fn received(mut self) -> String {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        assert!(self.child.wait().unwrap().success(), "{rest}");
        rest.trim_end().to_string()
    }
}

/// A directory of this test's own with mode 1777, like `/tmp`: any user may put a socket
/// in it.
fn shared_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

fn policy(dir: &Path) -> PathBuf {
    let path = dir.join("cred.yaml");
    std::fs::write(&path, CREDENTIAL_POLICY).unwrap();
    path
}

/// `egress-sandbox COMMAND --server SOCKET -p POLICY --secret API_KEY …`, the secret's value
/// in its environment.
fn with_secret(command: &str, socket: &Path, policy: &Path, rest: &[&str]) -> Output {
    binary()
        .arg(command)
        .arg("--server")
        .arg(socket)
        .arg("-p")
        .arg(policy)
        .args(["--secret", "API_KEY"])
        .args(rest)
        .env("API_KEY", SECRET_VALUE)
        .env_remove("EGRESS_SANDBOX_SERVER")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn assert_refused(output: &Output, expected: &str) {
    let err = stderr(output);
    assert_eq!(code(output), 125, "{err}");
    assert!(err.contains(expected), "{err}");
    assert!(err.contains("uid 65534 (nobody)"), "{err}");
    assert!(!err.contains(SECRET_VALUE), "{err}");
}

#[test]
fn run_server_sends_nothing_to_a_socket_another_user_owns() {
    let dir = shared_dir();
    let socket = dir.path().join("api.sock");
    let daemon = FakeDaemon::start(&socket);
    let output = with_secret("run", &socket, &policy(dir.path()), &["--", "true"]);
    assert_eq!(daemon.received(), "received 0 bytes: b''");
    assert_refused(&output, &format!("{} is owned by", socket.display()));
}

#[test]
fn run_server_sends_nothing_to_another_user_answering_on_a_socket_root_owns() {
    // What a socket swapped in after the owner's check amounts to: the file is root's,
    // the process that accepts is uid 65534's.
    let dir = shared_dir();
    let socket = dir.path().join("api.sock");
    let daemon = FakeDaemon::start(&socket);
    std::os::unix::fs::chown(&socket, Some(0), Some(0)).unwrap();
    let output = with_secret("run", &socket, &policy(dir.path()), &["--", "true"]);
    assert_eq!(daemon.received(), "received 0 bytes: b''");
    assert_refused(
        &output,
        &format!("the process answering on {} runs as", socket.display()),
    );
}

#[test]
fn mcp_server_does_not_start_on_a_socket_another_user_owns() {
    let dir = shared_dir();
    let socket = dir.path().join("api.sock");
    let daemon = FakeDaemon::start(&socket);
    let output = with_secret("mcp", &socket, &policy(dir.path()), &[]);
    assert_eq!(daemon.received(), "received 0 bytes: b''");
    assert_refused(&output, &format!("{} is owned by", socket.display()));
    assert!(
        !stderr(&output).contains("MCP server ready"),
        "{}",
        stderr(&output)
    );
}
