//! `pip install PKG` works in the default image as on a laptop when the package index is
//! allowed: a tiny index served by the test on its own network, allowed by a policy, and a
//! package installed from it into a writable place (a user install under /tmp).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::support::{Run, TestNetwork, gateway_policy, random_hex};

/// The package the index serves: a module, and a console script pip puts on PATH.
const PACKAGE: &str = "tinypkg";

/// A wheel of [`PACKAGE`] whose module holds `value`, made with the host's python3 (the
/// suite needs python3 anyway; its zipfile writes what pip reads).
fn wheel(dir: &Path, value: &str) -> Vec<u8> {
    let path = dir.join(format!("{PACKAGE}-1.0-py3-none-any.whl"));
    let script = format!(
        r#"
import sys, zipfile
files = {{
    "{PACKAGE}/__init__.py": "VALUE = '{value}'\ndef hello():\n    print('hello', VALUE)\n",
    "{PACKAGE}-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n",
    "{PACKAGE}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: egress-sandbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "{PACKAGE}-1.0.dist-info/entry_points.txt": "[console_scripts]\n{PACKAGE}-hello = {PACKAGE}:hello\n",
}}
record = "".join(name + ",,\n" for name in files) + "{PACKAGE}-1.0.dist-info/RECORD,,\n"
files["{PACKAGE}-1.0.dist-info/RECORD"] = record
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    for name, text in files.items():
        wheel.writestr(name, text)
"#
    );
    let status = std::process::Command::new("python3")
        .args(["-c", &script])
        .arg(&path)
        .status()
        .expect("run python3 to make the test wheel");
    assert!(status.success(), "python3 could not make the wheel");
    std::fs::read(&path).expect("read the wheel")
}

/// A package index on `gateway`: the simple API page of [`PACKAGE`] and its wheel; 404 for
/// anything else. Records every request line.
struct PackageIndex {
    port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

impl PackageIndex {
    fn start(gateway: Ipv4Addr, wheel: Vec<u8>) -> Self {
        let listener = TcpListener::bind((gateway, 0)).expect("bind the package index");
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let wheel_name = format!("{PACKAGE}-1.0-py3-none-any.whl");
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                let mut head = Vec::new();
                let mut buffer = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 << 10 {
                    match stream.read(&mut buffer) {
                        Ok(read @ 1..) => head.extend_from_slice(&buffer[..read]),
                        _ => break,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let line = head.lines().next().unwrap_or_default().to_owned();
                seen.lock().unwrap().push(line.clone());
                let path = line.split(' ').nth(1).unwrap_or_default();
                // Through the proxy the request line is in origin form; a path is all there is.
                let (status, kind, body): (&str, &str, Vec<u8>) =
                    if path == format!("/simple/{PACKAGE}/") {
                        let page = format!(
                            "<!DOCTYPE html><html><body>\
                         <a href=\"/files/{wheel_name}\">{wheel_name}</a></body></html>"
                        );
                        ("200 OK", "text/html", page.into_bytes())
                    } else if path == format!("/files/{wheel_name}") {
                        ("200 OK", "application/octet-stream", wheel.clone())
                    } else {
                        ("404 Not Found", "text/plain", b"not here".to_vec())
                    };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            }
        });
        PackageIndex { port, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

#[test]
fn pip_install_from_an_allowed_index_installs_into_a_user_site_under_tmp() {
    let network = TestNetwork::create();
    let dir = tempfile::tempdir().unwrap();
    let value = format!("from-the-index-{}", random_hex());
    let index = PackageIndex::start(network.gateway, wheel(dir.path(), &value));
    let port = index.port;
    let index_url = format!("http://pkgs.test:{port}/simple/");
    let script = format!(
        "pip install --no-cache-dir --index-url {index_url} --trusted-host pkgs.test:{port} \
         {PACKAGE} && python3 -c 'import {PACKAGE}; print({PACKAGE}.VALUE)' && \
         python3 /tmp/.local/bin/{PACKAGE}-hello"
    );

    let run = Run::new(&network)
        .policy(&gateway_policy(
            "pip",
            network.gateway,
            &[port],
            &[("pkgs.test", port)],
        ))
        .resolve("pkgs.test", network.gateway)
        .timeout("120s")
        .run(&["sh", "-c", &script]);

    run.assert_code(0);
    let printed: Vec<&str> = run.stdout.lines().collect();
    assert!(
        printed.contains(&value.as_str()),
        "the module did not import: {}",
        run.describe()
    );
    assert!(
        printed.contains(&format!("hello {value}").as_str()),
        "the package's command is not in /tmp/.local/bin: {}",
        run.describe()
    );
    let requests = index.requests();
    assert!(
        requests
            .iter()
            .any(|line| line.starts_with(&format!("GET /files/{PACKAGE}-1.0"))),
        "the wheel came from somewhere else: {requests:?}"
    );
    // Only the index was asked for: pip checked no version against pypi.org.
    let refused =
        run.audit_where(|record| record["decision"].is_string() && record["decision"] != "allowed");
    assert!(refused.is_empty(), "refused attempts: {refused:?}");
    run.assert_nothing_left();
}
