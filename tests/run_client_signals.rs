//! `run --server` against a daemon that accepts a run and then never answers: the first
//! Ctrl-C cancels the run on the daemon (a `DELETE`), a second one stops waiting and exits
//! 130. No Docker: the daemon here is a fake on a Unix socket.

mod run_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use run_support::*;

const HANG: Duration = Duration::from_secs(60);

/// Reads one request head and its body; returns the request line.
fn read_request(stream: &mut UnixStream) -> String {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    request_line.trim_end().to_owned()
}

#[test]
fn a_second_ctrl_c_stops_waiting_for_a_daemon_that_does_not_answer() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fake.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let (requests_tx, requests) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            let request = read_request(&mut stream);
            if request.starts_with("POST /v1/runs ") {
                let started = "{\"event\":\"started\",\"run\":\"r-0000fake\"}\n";
                write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{started}\r\n",
                    started.len()
                )
                .unwrap();
                // And then nothing, ever.
                held.push(stream);
            } else {
                let body = "{\"cancelled\":true}";
                write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
            }
            let _ = requests_tx.send(request);
        }
    });
    let mut child = binary()
        .arg("run")
        .arg("--server")
        .arg(&socket)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let posted = requests.recv_timeout(HANG).expect("the run was posted");
    assert!(posted.starts_with("POST /v1/runs"), "{posted}");
    // The started line is on its way; the first Ctrl-C cancels once the id is known.
    let deleted = loop {
        send_signal(child.id(), "INT");
        if let Ok(request) = requests.recv_timeout(Duration::from_millis(200)) {
            break request;
        }
    };
    assert_eq!(deleted, "DELETE /v1/runs/r-0000fake HTTP/1.1");
    send_signal(child.id(), "INT");
    let deadline = std::time::Instant::now() + HANG;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "run --server still waits after a second Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("stopped waiting for the daemon"),
        "{stderr}"
    );
}
