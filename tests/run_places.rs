//! Another local user (uid 65534, through `setpriv`) plants every path the tool could
//! predict before its first use: the launcher's place, the cache directory, the daemon's
//! socket directory. Nothing planted is run, imaged or trusted: the run or the daemon is
//! refused with exit 125 naming the path, its owner and its mode, or (an old path) ignored.
//!
//! Each test has a temporary directory of its own with mode 1777, as `/tmp`, for TMPDIR.

mod run_support;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use run_support::*;
use sha2::{Digest, Sha256};

const NOBODY: &str = "uid 65534 (nobody)";
/// What a planted launcher prints if it runs: the sandbox's output shows it.
const PLANTED_MARKER: &str = "planted-launcher-ran";

/// A shared temporary directory (mode 1777, like `/tmp`), removed at the end.
fn shared_tmp() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

/// Runs `script` (sh, with `args` as $1…) as uid 65534 with no groups.
fn as_nobody(script: &str, args: &[&Path]) {
    let status = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .args(["sh", "-euc", script, "sh"])
        .args(args)
        .status()
        .expect("run setpriv");
    assert!(status.success(), "as uid 65534: {script}");
}

/// Plants, as uid 65534, a launcher at `place/egress-sandbox` that prints the marker.
fn plant_launcher(place: &Path) {
    as_nobody(
        "mkdir -p \"$1\"; chmod 755 \"$1\"; \
         printf '#!/bin/sh\\necho planted-launcher-ran\\n' > \"$1/egress-sandbox\"; \
         chmod 755 \"$1/egress-sandbox\"",
        &[place],
    );
}

/// The binary's content id: what the proxy image's tag and the launcher's place are named by.
fn content_id() -> String {
    content_id_of(Path::new(env!("CARGO_BIN_EXE_egress-sandbox")))
}

/// The first 16 hex digits of the file's sha256.
fn content_id_of(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The private directory the tool takes for this user in `tmp`.
fn user_dir(tmp: &Path) -> PathBuf {
    let uid = std::fs::metadata("/proc/self").map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid()
    });
    tmp.join(format!("egress-sandbox-{}", uid.unwrap()))
}

fn run_in(tmp: &Path, args: &[&str]) -> Output {
    binary()
        .env("TMPDIR", tmp)
        .arg("run")
        .args(args)
        .output()
        .expect("start egress-sandbox")
}

/// Exit 125 and a message naming `path`, its owner (uid 65534) and its `mode`.
fn assert_refused_naming(code: i32, err: &str, path: &Path, mode: &str) {
    assert_eq!(code, 125, "{err}");
    let parts = [
        format!("refusing to use {}", path.display()),
        NOBODY.to_owned(),
        format!("mode {mode}"),
    ];
    for part in parts {
        assert!(err.contains(&part), "{part:?} in: {err}");
    }
}

/// A launcher planted where places were made in the shared temporary directory is not
/// used: the run runs the real launcher.
#[test]
fn a_launcher_planted_at_the_shared_path_is_never_run() {
    let tmp = shared_tmp();
    plant_launcher(
        &tmp.path()
            .join(format!("egress-sandbox-launcher-{}", content_id())),
    );
    let output = run_in(tmp.path(), &["--", "echo", "the-real-command"]);
    let out = stdout(&output);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        !out.contains(PLANTED_MARKER),
        "the planted launcher ran: {out}"
    );
    assert!(out.contains("the-real-command"), "{out}");
}

/// The user's private directory planted by another user before the first run, a launcher
/// in it: refused, 125, naming it, its owner and mode; the launcher never runs.
#[test]
fn a_launcher_planted_at_the_private_path_refuses_the_run() {
    let tmp = shared_tmp();
    let planted = user_dir(tmp.path());
    plant_launcher(&planted.join(format!("egress-sandbox-launcher-{}", content_id())));
    let output = run_in(tmp.path(), &["--", "echo", "the-real-command"]);
    assert!(
        !stdout(&output).contains(PLANTED_MARKER),
        "the planted launcher ran"
    );
    assert_refused_naming(code(&output), &stderr(&output), &planted, "0755");
}

/// A place in the user's own directory whose file is not the binary its name says (written
/// by the user, or corrupted): checked by content before the sandbox mounts it, refused.
#[test]
fn a_launcher_place_whose_content_is_not_its_id_is_never_run() {
    let tmp = shared_tmp();
    let own = user_dir(tmp.path());
    let place = own.join(format!("egress-sandbox-launcher-{}", content_id()));
    std::fs::create_dir_all(&place).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o700)).unwrap();
    let launcher = place.join("egress-sandbox");
    std::fs::write(&launcher, format!("#!/bin/sh\necho {PLANTED_MARKER}\n")).unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let output = run_in(tmp.path(), &["--", "echo", "the-real-command"]);
    let err = stderr(&output);
    assert!(!stdout(&output).contains(PLANTED_MARKER), "the place ran");
    assert_eq!(code(&output), 125, "{err}");
    let changed = format!(
        "{} changed after egress-sandbox checked it",
        launcher.display()
    );
    assert!(err.contains(&changed), "{err}");
}

/// A daemon stopped at start, or killed if it serves (then the test fails).
struct DaemonStart {
    code: i32,
    stderr: String,
    served: bool,
}

/// `egress-sandbox serve --socket SOCKET`, with `env` changes, until it exits or says it
/// serves.
fn start_daemon(socket: &Path, tmp: &Path, without_home: bool) -> DaemonStart {
    let mut command = binary();
    command
        .env("TMPDIR", tmp)
        .args(["serve", "--pool", "0", "--socket"])
        .arg(socket)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if without_home {
        command.env_remove("HOME").env_remove("XDG_CACHE_HOME");
    }
    let mut child = command.spawn().expect("start egress-sandbox serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap());
    let mut stderr = String::new();
    let mut served = false;
    let mut line = String::new();
    while lines.read_line(&mut line).unwrap() > 0 {
        served |= line.contains("serving on");
        stderr.push_str(&line);
        line.clear();
        if served {
            send_signal(child.id(), "TERM");
            lines.read_to_string(&mut stderr).unwrap();
            break;
        }
    }
    let code = child.wait().unwrap().code().unwrap_or(-1);
    DaemonStart {
        code,
        stderr,
        served,
    }
}

fn assert_daemon_refused(start: &DaemonStart, path: &Path, mode: &str) {
    assert!(!start.served, "the daemon served: {}", start.stderr);
    assert_refused_naming(start.code, &start.stderr, path, mode);
}

/// A private directory of the test's own, for a socket.
fn private_socket_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// With neither HOME nor XDG_CACHE_HOME (a root service without `User=`), the cache
/// directory is in the temporary directory: planted there by another user (at the old and
/// the new path), it is refused, and no binary is kept or imaged from it.
#[test]
fn a_cache_directory_planted_by_another_user_is_refused() {
    let tmp = shared_tmp();
    let planted = user_dir(tmp.path());
    let former = tmp.path().join("egress-sandbox-cache");
    as_nobody(
        "mkdir -m 777 \"$1\" \"$1/cache\" \"$2\"",
        &[&planted, &former],
    );
    let socket = private_socket_dir();
    let start = start_daemon(&socket.path().join("api.sock"), tmp.path(), true);
    assert_daemon_refused(&start, &planted, "0777");
    for dir in [planted.join("cache"), former] {
        let kept: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert!(kept.is_empty(), "{} holds {kept:?}", dir.display());
    }
}

/// Another user's fake daemon listening in a socket directory they made: the daemon
/// refuses the directory, naming its owner, instead of saying another serve answers.
#[test]
fn serve_refuses_a_socket_directory_another_user_owns() {
    let tmp = shared_tmp();
    let planted = user_dir(tmp.path());
    as_nobody("mkdir -m 755 \"$1\"", &[&planted]);
    let socket = planted.join("api.sock");
    let mut fake = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        // The system's interpreter: a user's shim (pyenv) is not for uid 65534 to run.
        .args(["/usr/bin/python3", "-c"])
        .arg(
            "import socket, sys\n\
             s = socket.socket(socket.AF_UNIX)\n\
             s.bind(sys.argv[1]); s.listen()\n\
             print('listening', flush=True)\n\
             sys.stdin.read()\n",
        )
        .arg(&socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the fake daemon");
    let mut ready = String::new();
    BufReader::new(fake.stdout.as_mut().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready, "listening\n");
    let start = start_daemon(&socket, tmp.path(), false);
    drop(fake.stdin.take());
    fake.wait().unwrap();
    assert_daemon_refused(&start, &planted, "0755");
}

/// A live socket in the daemon's own directory is not replaced, and the refusal names
/// who owns it.
#[test]
fn serve_names_the_owner_of_a_live_socket_it_will_not_replace() {
    let tmp = shared_tmp();
    let dir = private_socket_dir();
    let socket = dir.path().join("api.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::os::unix::fs::lchown(&socket, Some(65534), Some(65534)).unwrap();
    let start = start_daemon(&socket, tmp.path(), false);
    assert!(!start.served, "the daemon served: {}", start.stderr);
    assert_eq!(start.code, 125, "{}", start.stderr);
    for part in [&socket.display().to_string(), NOBODY, "is not replaced"] {
        assert!(start.stderr.contains(part), "{part:?} in: {}", start.stderr);
    }
}

/// A daemon's kept binary written to after it was kept (here by its owner, in place): its
/// content no longer matches the hash taken when it was kept, so no image is made from it
/// and no run uses it.
#[test]
fn a_kept_binary_changed_after_it_was_kept_is_refused() {
    use egress_sandbox::PROXY_REPOSITORY;
    use egress_sandbox::{OutputSinks, RunSpec, Sandbox};
    use std::io::Write;

    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("egress-sandbox");
    std::fs::copy(env!("CARGO_BIN_EXE_egress-sandbox"), &copy).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (error, kept, swapped) = runtime.block_on(async {
        let sandbox = Sandbox::connect(&copy)
            .await
            .expect("a handle")
            .keep_binary()
            .expect("the binary kept");
        let kept = sandbox.proxy_binary().to_path_buf();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&kept)
            .unwrap();
        file.write_all(b"swapped after it was kept").unwrap();
        drop(file);
        let spec = RunSpec::builder(["true"]).build().unwrap();
        let sinks = OutputSinks::new(tokio::io::sink(), tokio::io::sink());
        let error = sandbox.run(spec, sinks).await.expect_err("refused");
        // Read before the handle goes, and its kept binary with it.
        (error, kept.clone(), content_id_of(&kept))
    });
    let message = error.to_string();
    let changed = format!("{} changed after egress-sandbox checked it", kept.display());
    assert!(message.contains(&changed), "{message}");
    let inspect = Command::new("docker")
        .args(["image", "inspect", &format!("{PROXY_REPOSITORY}:{swapped}")])
        .output()
        .unwrap();
    assert!(
        !inspect.status.success(),
        "an image was made of the swapped binary"
    );
}
