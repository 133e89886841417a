//! `run --secret` / `--upstream-ca` mistakes are refused before Docker is touched: exit 125,
//! a message that names the secret but never shows its value, and no Docker object left.
//! So is a policy with inspected hosts on a remote engine (asked only for its address).

mod run_support;

use std::path::Path;
use std::process::Stdio;

use run_support::*;

const SECRET_VALUE: &str = "sk-run-credential-errors-value";

const CREDENTIAL_POLICY: &str = "version: 1
allow:
  - host: api.example.test
credentials:
  - host: api.example.test
    secret: API_KEY
";

fn policy(dir: &Path) -> String {
    let path = dir.join("cred.yaml");
    std::fs::write(&path, CREDENTIAL_POLICY).unwrap();
    path.display().to_string()
}

/// Runs `run ARGS -- true` with `API_KEY` and `OTHER_KEY` set in its environment.
fn refused(args: &[&str]) -> String {
    refused_with_env(args, &[])
}

/// As [`refused`], with `env` added to the environment; asserts exit 125, no secret in
/// stderr and nothing left, and returns stderr.
fn refused_with_env(args: &[&str], env: &[(&str, &str)]) -> String {
    let child = binary()
        .arg("run")
        .args(args)
        .args(["--", "true"])
        .env("API_KEY", SECRET_VALUE)
        .env("OTHER_KEY", SECRET_VALUE)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    let err = stderr(&output);
    assert_eq!(code(&output), 125, "{err}");
    assert!(!err.contains(SECRET_VALUE), "the value leaked: {err}");
    assert_nothing_left_by(pid);
    err
}

#[test]
fn a_credential_without_its_secret_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = refused(&["-p", &policy(dir.path())]);
    assert!(
        err.contains("needs the secret API_KEY: give it with --secret API_KEY"),
        "{err}"
    );
}

#[test]
fn a_secret_no_credential_uses_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path());
    let err = refused(&[
        "-p",
        &policy,
        "--secret",
        "API_KEY",
        "--secret",
        "OTHER_KEY",
    ]);
    assert!(
        err.contains("--secret OTHER_KEY is given, but no credential of the policy uses it"),
        "{err}"
    );
    let err = refused(&["--allow", "api.example.test", "--secret", "API_KEY"]);
    assert!(err.contains("--secret API_KEY is given"), "{err}");
}

#[test]
fn an_unreadable_secret_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path());
    let missing = dir.path().join("no-such-key");
    let err = refused(&[
        "-p",
        &policy,
        "--secret",
        &format!("API_KEY=file:{}", missing.display()),
    ]);
    assert!(err.contains("--secret API_KEY: cannot read"), "{err}");
}

#[test]
fn a_bad_upstream_ca_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path());
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "this is no certificate\n").unwrap();
    let err = refused(&[
        "-p",
        &policy,
        "--secret",
        "API_KEY",
        "--upstream-ca",
        not_pem.to_str().unwrap(),
    ]);
    assert!(err.contains("--upstream-ca"), "{err}");
    assert!(err.contains("no PEM certificate"), "{err}");
    let missing = dir.path().join("missing.pem");
    let err = refused(&[
        "-p",
        &policy,
        "--secret",
        "API_KEY",
        "--upstream-ca",
        missing.to_str().unwrap(),
    ]);
    assert!(err.contains("cannot read"), "{err}");
}

#[test]
fn env_may_not_replace_a_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path());
    let err = refused(&[
        "-p",
        &policy,
        "--secret",
        "API_KEY",
        "--env",
        &format!("API_KEY={SECRET_VALUE}x"),
    ]);
    assert!(
        err.contains("--env API_KEY would replace the placeholder"),
        "{err}"
    );
}

/// A TCP listener on 127.0.0.1 that relays each connection to the local engine's socket:
/// the engine as `DOCKER_HOST=tcp://…` shows it, a remote one.
fn engine_over_tcp() -> std::net::SocketAddr {
    use std::net::{Shutdown, TcpListener};
    use std::os::unix::net::UnixStream;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let Ok(engine) = UnixStream::connect("/var/run/docker.sock") else {
                return;
            };
            let (mut client_in, mut engine_out) =
                (client.try_clone().unwrap(), engine.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut client_in, &mut engine_out);
                let _ = engine_out.shutdown(Shutdown::Write);
            });
            let (mut engine_in, mut client_out) = (engine, client);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut engine_in, &mut client_out);
                let _ = client_out.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

#[test]
fn a_remote_engine_refuses_inspected_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy(dir.path());
    let engine = engine_over_tcp();
    let docker_host = format!("tcp://{engine}");
    let err = refused_with_env(
        &["-p", &policy, "--secret", "API_KEY"],
        &[("DOCKER_HOST", &docker_host)],
    );
    assert!(
        err.contains("the policy inspects api.example.test")
            && err.contains("needs a local Docker engine")
            && err.contains(&format!("tcp://{engine}")),
        "{err}"
    );
}
