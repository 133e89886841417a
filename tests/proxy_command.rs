//! `egress-sandbox proxy` as a process: the readiness line, audit records on stdout after
//! it, inline policies, `--resolve`, and a prompt clean exit on SIGTERM with tunnel records.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use egress_core::handoff::HANDOFF_VERSION;

struct ProxyProcess {
    child: Child,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ProxyProcess {
    fn start(args: &[&str]) -> ProxyProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
            .arg("proxy")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the binary starts");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        ProxyProcess { child, stdout }
    }

    fn line(&mut self) -> serde_json::Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("a line on stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "no exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Accepts one connection and echoes it, on 127.0.0.2.
fn echo_site() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.2:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buffer) {
                    if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// Opens a CONNECT tunnel to `site.test` (pinned to the echo site) and proves it carries
/// bytes both ways; the tunnel stays open until the returned stream is dropped.
fn open_echo_tunnel(listen: SocketAddr, port: u16) -> TcpStream {
    let mut tunnel = TcpStream::connect(listen).unwrap();
    tunnel
        .write_all(format!("CONNECT site.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        tunnel.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200 "),
        "{}",
        String::from_utf8_lossy(&head)
    );
    tunnel.write_all(b"ping").unwrap();
    let mut pong = [0u8; 4];
    tunnel.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"ping");
    tunnel
}

#[test]
fn ready_line_then_audit_records_then_clean_exit_on_sigterm() {
    let site = echo_site();
    let port = site.port();
    let policy = format!(
        "version: 1\nallow:\n  - host: site.test\n    ports: [{port}]\n  - cidr: 127.0.0.2/32\n    ports: [{port}]\n"
    );
    let mut proxy = ProxyProcess::start(&[
        "--listen",
        "127.0.0.1:0",
        "--policy-yaml",
        &format!("inline.yaml={policy}"),
        "--allow",
        "api.example.com",
        "--resolve",
        "site.test=127.0.0.2",
        "--dns-listen",
        "127.0.0.1:0",
        "--run-id",
        "r-cmd",
    ]);
    let ready = proxy.line();
    assert_eq!(ready["ready"], true, "{ready}");
    assert!(ready["dns"].is_string(), "{ready}");
    assert_eq!(ready["transparent"], serde_json::json!([]));
    let listen: SocketAddr = ready["listen"].as_str().unwrap().parse().unwrap();

    // A refused request: its record comes at once, after the ready line.
    let mut refused = TcpStream::connect(listen).unwrap();
    refused
        .write_all(b"GET http://blocked.test/ HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    refused.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let record = proxy.line();
    assert_eq!(record["decision"], "blocked");
    assert_eq!(record["reason"], "not_allowed");
    assert_eq!(record["run"], "r-cmd");
    assert_eq!(record["policy"], "inline+cli");
    assert_eq!(record["v"], 1);

    // An open tunnel: its record comes when SIGTERM closes it, with the bytes it moved.
    let _tunnel = open_echo_tunnel(listen, port);
    let started = Instant::now();
    let status = proxy.terminate();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let record = proxy.line();
    assert_eq!(record["kind"], "connect");
    assert_eq!(record["decision"], "allowed");
    assert_eq!(record["addr"], "127.0.0.2");
    assert_eq!(record["bytes_up"], 4);
    assert_eq!(record["bytes_down"], 4);
    // The chain closes last: the end record counts the two lines before it.
    let end = proxy.line();
    assert_eq!(end["kind"], "end", "{end}");
    assert_eq!(end["records"], 2, "{end}");
    assert_eq!(end["dropped"], 0, "{end}");
    assert_eq!(end["seq"], 2, "{end}");
    assert_eq!(end["run"], "r-cmd", "{end}");
}

#[test]
fn audit_limit_and_dns_rate_must_be_at_least_one() {
    for args in [
        vec!["--listen", "127.0.0.1:0", "--audit-limit", "0"],
        vec!["--listen", "127.0.0.1:0", "--dns-rate", "0"],
        vec!["--listen", "127.0.0.1:0", "--audit-limit", "many"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
            .arg("proxy")
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: a usage error");
        assert!(output.stdout.is_empty(), "{args:?}: no ready line");
    }
}

#[test]
fn bad_policies_and_addresses_refuse_to_start() {
    for args in [
        vec![
            "--listen",
            "127.0.0.1:0",
            "--policy-yaml",
            "bad.yaml=allow: [1",
        ],
        vec!["--listen", "localhost:3128", "--allow", "a.example"],
        vec!["--listen", "127.0.0.1:0", "--resolve", "a.example"],
        vec!["--listen", "127.0.0.1:0", "--dns-listen", "0.0.0.0:0"],
        vec!["--listen", "127.0.0.1:0", "--floor-extra", "203.0.113.0/33"],
        vec!["--listen", "127.0.0.1:0", "--floor-extra", "host.example"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
            .arg("proxy")
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(125), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?}: no ready line");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("error"), "{args:?}: {stderr}");
        // Each diagnostic on a line of its own (they were joined, breaks shown as `\x0a`).
        assert!(!stderr.contains("\\x0a"), "{args:?}: {stderr}");
    }
    let output = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "-p",
            "/nonexistent-1",
            "-p",
            "/nonexistent-2",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{stderr}");
    for file in ["/nonexistent-1", "/nonexistent-2"] {
        assert!(
            stderr
                .lines()
                .any(|line| line.starts_with(&format!("{file}: error: cannot read:"))),
            "{stderr}"
        );
    }
}

/// A port already taken and a handoff that is not JSON: each error line says the step and
/// then its cause, the cause once.
#[test]
fn a_setup_failure_says_its_step_and_its_cause_once() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
        .args(["proxy", "--listen", &addr, "--allow", "a.example"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{stderr}");
    // EADDRINUSE, as the kernel says it.
    let cause = std::io::Error::from_raw_os_error(98).to_string();
    assert!(
        stderr.contains(&format!("error: cannot listen on {addr}: {cause}")),
        "{stderr}"
    );
    assert_eq!(stderr.matches(&cause).count(), 1, "{stderr}");

    let mut child = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
        .args(["proxy", "--listen", "127.0.0.1:0", "--config-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{not json\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    let step = "the run's configuration on stdin is not valid: ";
    assert_eq!(stderr.matches(step).count(), 1, "{stderr}");
    let cause = stderr.split(step).nth(1).unwrap().trim_end();
    assert!(!cause.is_empty(), "{stderr}");
    assert_eq!(stderr.matches(cause).count(), 1, "{stderr}");
}

/// `--floor-extra`: an allowed name pinned into the range is refused as `private_address`
/// (before any connection is tried; also through the IPv4 address a NAT64 form carries), and
/// a `cidr` allow rule naming the address lets it through, as for the private ranges.
#[test]
fn floor_extra_refuses_allowed_names_leading_into_the_range_unless_a_cidr_rule_names_it() {
    let site = echo_site();
    let port = site.port();
    let policy = format!(
        "version: 1\nallow:\n  - host: host.test\n    ports: [{port}]\n  - host: nat64.test\n    ports: [{port}]\n  - host: site.test\n    ports: [{port}]\n  - cidr: 127.0.0.2/32\n    ports: [{port}]\n"
    );
    let mut proxy = ProxyProcess::start(&[
        "--listen",
        "127.0.0.1:0",
        "--policy-yaml",
        &format!("inline.yaml={policy}"),
        // A public range (the engine host's address, say) and the upstream's own address.
        "--floor-extra",
        "93.184.216.0/24",
        "--floor-extra",
        "127.0.0.2",
        "--resolve",
        "host.test=93.184.216.34",
        "--resolve",
        "nat64.test=64:ff9b::5db8:d822",
        "--resolve",
        "site.test=127.0.0.2",
    ]);
    let ready = proxy.line();
    let listen: SocketAddr = ready["listen"].as_str().unwrap().parse().unwrap();

    // nat64.test's address carries 93.184.216.34.
    for name in ["host.test", "nat64.test"] {
        let mut refused = TcpStream::connect(listen).unwrap();
        refused
            .write_all(
                format!("CONNECT {name}:{port} HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .unwrap();
        let mut answer = String::new();
        refused.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("x-egress-blocked: private_address"),
            "{answer}"
        );
        let record = proxy.line();
        assert_eq!(record["host"], name);
        assert_eq!(record["decision"], "blocked");
        assert_eq!(record["reason"], "private_address");
        assert!(record["addr"].is_null(), "{record}");
    }

    open_echo_tunnel(listen, port);
}

/// SIGTERM at once after the ready line still shuts down cleanly and closes the audit
/// chain: the signals are watched before the ready line is printed.
#[test]
fn sigterm_right_after_the_ready_line_still_writes_the_end_record() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..10 {
        let log = dir.path().join(format!("audit-{round}.jsonl"));
        let mut proxy = ProxyProcess::start(&[
            "--listen",
            "127.0.0.1:0",
            "--run-id",
            "r-quick",
            "--audit-log",
            log.to_str().unwrap(),
        ]);
        assert_eq!(proxy.line()["ready"], true);
        let status = proxy.terminate();
        assert!(status.success(), "round {round}: {status:?}");
        let text = std::fs::read_to_string(&log).unwrap();
        let end: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(end["kind"], "end", "round {round}: {text}");
        assert_eq!(end["records"], 0, "round {round}: {text}");
    }
}

/// A log that cannot be written (`/dev/full`: a full disk) makes the proxy's end a failure,
/// exit 1 with a sentence saying so; it served, lost every record, and exited 0.
#[test]
fn an_audit_log_that_cannot_be_written_is_a_failed_exit() {
    let mut proxy = ProxyProcess::start(&[
        "--listen",
        "127.0.0.1:0",
        "--allow",
        "a.test",
        "--audit-log",
        "/dev/full",
    ]);
    let ready = proxy.line();
    let listen: SocketAddr = ready["listen"].as_str().unwrap().parse().unwrap();
    let mut stream = TcpStream::connect(listen).unwrap();
    stream
        .write_all(b"GET http://refused.test/ HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let status = proxy.terminate();
    assert_eq!(status.code(), Some(1), "{status:?}");
}

/// A proxy that binds its own doors (a run network) serves a transparent door on every
/// port of the handoff's `door_ports`, at its explicit door's address, as it would on :443.
#[test]
fn a_handoffs_door_ports_become_transparent_doors_beside_the_explicit_one() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let mut child = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
        .args(["proxy", "--listen", "127.0.0.1:0", "--config-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(
            format!(
                "{{\"v\":{HANDOFF_VERSION},\"allow\":[\"site.test:{port}\"],\"door_ports\":[{port}]}}\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    let ready: serde_json::Value = serde_json::from_str(&line).unwrap();
    let door = format!("127.0.0.1:{port}");
    assert_eq!(ready["transparent"], serde_json::json!([door]), "{ready}");
    // Plain HTTP there is judged by its Host, as on :80: a name not allowed gets 403.
    let mut stream = TcpStream::connect(&door).unwrap();
    stream
        .write_all(
            format!("GET / HTTP/1.1\r\nHost: evil.test:{port}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let _ = child.kill();
    let _ = child.wait();
    drop(stdin);
}

/// The handoff's `sandbox_hostname` is a host name like any other: anything else refuses
/// to start, with no ready line, and says which field.
#[test]
fn a_handoff_with_a_bad_sandbox_hostname_refuses_to_start() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
        .args(["proxy", "--listen", "127.0.0.1:0", "--config-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            format!("{{\"v\":{HANDOFF_VERSION},\"sandbox_hostname\":\"not a name\"}}\n").as_bytes(),
        )
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "no ready line");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("sandbox_hostname"), "{stderr}");
}

/// `--listeners-from`: the proxy binds nothing, says where it takes its doors in its ready
/// line, serves the listeners passed to it (a tunnel, DNS answered with `--dns-answer`),
/// removes its pass socket once it has them, and shuts down cleanly.
#[test]
fn listeners_passed_in_are_served_and_the_pass_socket_goes() {
    use egress_core::doors::{DoorAddrs, SOCKET_NAME};
    use egress_proxy::PassedListeners;
    let site = echo_site();
    let port = site.port();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(SOCKET_NAME);
    let mut proxy = passed_site_proxy(&socket, port);
    let ready = proxy.line();
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["listeners_from"], socket.to_str().unwrap());
    assert!(ready.get("listen").is_none(), "{ready}");

    let any = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0);
    let listeners = PassedListeners::bind(&DoorAddrs {
        explicit: any,
        dns: Some(any),
        transparent: Vec::new(),
        raw: Vec::new(),
        closed_sockets: false,
    })
    .unwrap();
    let explicit = listeners.explicit.local_addr().unwrap();
    let dns = listeners.dns.as_ref().unwrap().0.local_addr().unwrap();
    listeners.send(&socket).unwrap();
    drop(listeners);
    assert!(!socket.exists(), "the pass socket is still there");

    drop(open_echo_tunnel(explicit, port));
    // An A query for the allowed name: answered with --dns-answer.
    assert_eq!(site_test_address(dns), [127, 0, 0, 1]);

    let status = proxy.terminate();
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    proxy.stdout.read_to_string(&mut rest).unwrap();
    let records: Vec<serde_json::Value> = rest
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let tunnel = records
        .iter()
        .find(|r| r["kind"] == "connect")
        .unwrap_or_else(|| panic!("no tunnel record: {records:?}"));
    assert_eq!(tunnel["decision"], "allowed");
    assert!(
        tunnel["client"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{tunnel}"
    );
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "dns" && r["host"] == "site.test" && r["decision"] == "allowed"),
        "{records:?}"
    );
}

/// A proxy that takes its doors from `socket`, answers DNS with 127.0.0.1 and allows
/// `site.test` (pinned to 127.0.0.2, where the echo site listens) on `port`.
fn passed_site_proxy(socket: &std::path::Path, port: u16) -> ProxyProcess {
    let policy = format!(
        "version: 1\nallow:\n  - host: site.test\n    ports: [{port}]\n  - cidr: 127.0.0.2/32\n    ports: [{port}]\n"
    );
    ProxyProcess::start(&[
        "--listeners-from",
        socket.to_str().unwrap(),
        "--dns-answer",
        "127.0.0.1",
        "--policy-yaml",
        &format!("inline.yaml={policy}"),
        "--resolve",
        "site.test=127.0.0.2",
    ])
}

/// Asks the DNS responder at `dns` for `site.test`'s A record; the address it answers.
fn site_test_address(dns: std::net::SocketAddr) -> [u8; 4] {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut query = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["site", "test"] {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    udp.send_to(&query, dns).unwrap();
    let mut answer = [0u8; 512];
    let n = udp.recv(&mut answer).unwrap();
    assert_eq!(&answer[..2], &[0x12, 0x34]);
    answer[n - 4..n].try_into().unwrap()
}

/// With a closed-socket watch in the pass, a connection to a name's address on a port with
/// no door (refused by the kernel, never seen by a door) is recorded all the same: kind
/// `tcp`, the name, the port, the policy's reason. The watch here is of the test's own
/// network namespace, where other programs' sockets come and go too: only this test's
/// port is looked for.
#[test]
fn a_port_without_a_door_is_refused_by_the_kernel_and_recorded_by_the_proxy() {
    use egress_core::doors::{DoorAddrs, SOCKET_NAME};
    use egress_proxy::PassedListeners;
    let site = echo_site();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(SOCKET_NAME);
    // A door for the allowed port, on the name block's first address only.
    let door = std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(127, 100, 0, 1), site.port());
    let mut proxy = passed_site_proxy(&socket, site.port());
    assert_eq!(proxy.line()["ready"], true);
    let any = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0);
    let listeners = PassedListeners::bind(&DoorAddrs {
        explicit: any,
        dns: Some(any),
        transparent: Vec::new(),
        raw: vec![door],
        closed_sockets: true,
    })
    .unwrap();
    assert!(listeners.closed_sockets.is_some(), "no watch");
    let dns = listeners.dns.as_ref().unwrap().0.local_addr().unwrap();
    listeners.send(&socket).unwrap();
    drop(listeners);

    // The name's own address, from the name block.
    assert_eq!(site_test_address(dns), [127, 100, 0, 1]);

    let unused = std::net::TcpListener::bind("127.100.0.1:0").unwrap();
    let no_door = unused.local_addr().unwrap();
    drop(unused);
    let refused = std::net::TcpStream::connect_timeout(&no_door, Duration::from_secs(5));
    assert_eq!(
        refused.map(|_| ()).map_err(|error| error.kind()),
        Err(std::io::ErrorKind::ConnectionRefused)
    );
    // The kernel's notice reaches the proxy a moment after the socket is gone: its record
    // is waited for as it is written, before the proxy is stopped.
    let mut records = Vec::new();
    let is_missed = |r: &serde_json::Value| r["kind"] == "tcp" && r["port"] == no_door.port();
    while !records.iter().any(is_missed) {
        records.push(proxy.line());
    }
    // Through the door itself: relayed, and no record of a missed door.
    drop(std::net::TcpStream::connect(door).unwrap());

    let status = proxy.terminate();
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    proxy.stdout.read_to_string(&mut rest).unwrap();
    records.extend(rest.lines().map(|line| serde_json::from_str(line).unwrap()));
    let missed: Vec<_> = records.iter().filter(|r| is_missed(r)).collect();
    assert_eq!(missed.len(), 1, "{records:?}");
    assert_eq!(missed[0]["host"], "site.test");
    assert_eq!(missed[0]["decision"], "blocked");
    assert_eq!(missed[0]["reason"], "port_not_allowed");
    let through_the_door: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "tcp" && r["port"] == site.port())
        .collect();
    assert!(
        through_the_door.len() == 1 && through_the_door[0]["decision"] == "allowed",
        "{records:?}"
    );
}
