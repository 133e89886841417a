//! Any allowed `name:port`, any TCP protocol, for programs that ignore the proxy variables:
//! the DNS responder gives each allowed name a loopback address of its own, the launcher binds a
//! raw door on every port the run's host rules allow, and the proxy relays what arrives to
//! the name behind the address, judged like a CONNECT and recorded as kind `tcp`.
//!
//! Every program here runs with the proxy variables removed.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::serve::{Daemon, assert_run_removed, post, with_network};
use crate::support::{
    Finished, Run, TestNetwork, Upstream, WITHOUT_PROXY_VARIABLES, gateway_policy, random_hex,
};

/// The ports the issue names: a plain HTTP site and a TLS one off :80/:443.
const HTTP_PORT: u16 = 18080;
const TLS_PORT: u16 = 8443;
/// A port only another name is allowed on: `api.test` there is refused by the proxy.
const OTHER_NAMES_PORT: u16 = 15432;
/// A port no rule names: no door, the sandbox's kernel refuses it.
const NO_RULES_PORT: u16 = 17777;

/// A line protocol: every line `L` is answered `ECHO L`, on any number of connections at
/// once (a thread each).
struct LineServer {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl LineServer {
    fn bind(addr: impl Into<SocketAddr>) -> LineServer {
        let listener = TcpListener::bind(addr.into()).expect("line server binds");
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut writer = stream.try_clone().unwrap();
                    for line in BufReader::new(stream).lines() {
                        let Ok(line) = line else { return };
                        if writeln!(writer, "ECHO {line}").is_err() {
                            return;
                        }
                    }
                });
            }
        });
        LineServer { addr, connections }
    }
}

fn program(script: &[&str]) -> Vec<String> {
    WITHOUT_PROXY_VARIABLES
        .iter()
        .chain(script)
        .map(|part| part.to_string())
        .collect()
}

fn tcp_records(run: &Finished, port: u16) -> Vec<&Value> {
    run.audit_where(|record| {
        record["kind"] == "tcp" && record["host"] == "api.test" && record["port"] == port
    })
}

/// Every record of a relayed connection is allowed, names the site's address and moved
/// bytes both ways.
fn assert_relayed(records: &[&Value], gateway: std::net::Ipv4Addr, run: &Finished) {
    assert!(!records.is_empty(), "no tcp record\n{}", run.describe());
    for record in records {
        assert_eq!(record["decision"], "allowed", "{record}");
        assert_eq!(record["addr"], gateway.to_string(), "{record}");
        assert!(
            record["bytes_up"].as_u64() > Some(0) && record["bytes_down"].as_u64() > Some(0),
            "{record}"
        );
        assert!(record["duration_ms"].is_u64(), "{record}");
    }
}

/// The sites [`NODE_CLIENTS`] reaches: plain HTTP on [`HTTP_PORT`], TLS for `api.test` on
/// [`TLS_PORT`], each with a body of its own.
fn node_sites(network: &TestNetwork) -> (Upstream, Upstream) {
    let http = Upstream::http(
        (network.gateway, HTTP_PORT),
        &format!("plain-{}", random_hex()),
    );
    let https = Upstream::https(
        (network.gateway, TLS_PORT),
        &["api.test"],
        &format!("tls-{}", random_hex()),
    );
    (http, https)
}

/// What [`NODE_CLIENTS`] printed: each client got its site's body, `nope.test` was not found.
fn assert_node_clients_got(run: &Finished, http_body: &str, https_body: &str) {
    for (client, body) in [
        ("http.get", http_body),
        ("https.get", https_body),
        ("fetch-http", http_body),
        ("fetch-https", https_body),
    ] {
        assert!(
            run.stdout.contains(&format!("{client} {body}")),
            "{client} did not get {body}\n{}",
            run.describe()
        );
    }
    assert!(
        run.stdout.contains("nope.test ENOTFOUND"),
        "{}",
        run.describe()
    );
}

const NODE_CLIENTS: &str = r#"
const http = require('http'), https = require('https');
const get = (client, url) => new Promise((resolve, reject) => {
  client.get(url, { rejectUnauthorized: false }, (response) => {
    let body = '';
    response.on('data', (chunk) => body += chunk);
    response.on('end', () => resolve(body));
  }).on('error', reject);
});
(async () => {
  // With -e, the arguments after the script start at argv[1].
  const [httpPort, tlsPort, noRulesPort] = process.argv.slice(-3);
  console.log('http.get ' + await get(http, `http://api.test:${httpPort}/http-get`));
  console.log('https.get ' + await get(https, `https://api.test:${tlsPort}/https-get`));
  console.log('fetch-http ' + await (await fetch(`http://api.test:${httpPort}/fetch`)).text());
  console.log('fetch-https ' + await (await fetch(`https://api.test:${tlsPort}/fetch-tls`)).text());
  try {
    await get(http, `http://nope.test:${httpPort}/`);
    console.log('nope.test reached');
  } catch (error) {
    console.log('nope.test ' + error.code);
  }
  const refused = await new Promise((resolve) => {
    const socket = require('net').connect(Number(noRulesPort), 'api.test');
    socket.on('connect', () => { socket.destroy(); resolve('connected'); });
    socket.on('error', (error) => resolve(error.code));
  });
  console.log('no rules port ' + refused);
})().catch((error) => { console.log('failed ' + error); process.exit(3); });
"#;

#[test]
fn node_http_https_and_fetch_reach_an_allowed_host_on_other_ports_without_proxy_variables() {
    let network = TestNetwork::create();
    let (http, https) = node_sites(&network);
    let mut script = program(&["env", "NODE_TLS_REJECT_UNAUTHORIZED=0", "node", "-e"]);
    script.extend([
        NODE_CLIENTS.to_string(),
        HTTP_PORT.to_string(),
        TLS_PORT.to_string(),
        NO_RULES_PORT.to_string(),
    ]);
    let script: Vec<&str> = script.iter().map(String::as_str).collect();

    let run = Run::new(&network)
        .policy(&gateway_policy(
            "any-port-node",
            network.gateway,
            &[HTTP_PORT, TLS_PORT],
            &[("api.test", HTTP_PORT), ("api.test", TLS_PORT)],
        ))
        .resolve("api.test", network.gateway)
        .timeout("90s")
        .run(&script);

    run.assert_code(0);
    assert_node_clients_got(&run, &http.body, &https.body);
    // No door on that port: the sandbox's kernel refused it, the proxy recorded it.
    assert!(
        run.stdout.contains("no rules port ECONNREFUSED"),
        "{}",
        run.describe()
    );
    let refused = tcp_records(&run, NO_RULES_PORT);
    assert_eq!(refused.len(), 1, "{}", run.describe());
    assert_eq!(
        (&refused[0]["decision"], &refused[0]["reason"]),
        (&json!("blocked"), &json!("port_not_allowed"))
    );
    assert_eq!(http.requests().len(), 2, "{}", run.describe());
    let tls_requests = https.requests();
    assert_eq!(tls_requests.len(), 2, "{}", run.describe());
    assert!(
        tls_requests
            .iter()
            .all(|request| request.sni.as_deref() == Some("api.test"))
    );
    for port in [HTTP_PORT, TLS_PORT] {
        let records = tcp_records(&run, port);
        assert_eq!(records.len(), 2, "{}", run.describe());
        assert_relayed(&records, network.gateway, &run);
    }
    assert!(
        !run.audit_where(|record| record["kind"] == "dns"
            && record["host"] == "nope.test"
            && record["reason"] == "not_allowed")
            .is_empty(),
        "{}",
        run.describe()
    );
    run.assert_nothing_left();
}

const PYTHON_CLIENTS: &str = r#"
import socket, ssl, sys
line_port, tls_port, other_port, no_rules_port = (int(p) for p in sys.argv[1:5])

def talk(sock, text):
    sock.sendall(text.encode() + b"\n")
    return sock.makefile("rb").readline().decode().strip()

one = socket.create_connection(("api.test", line_port), timeout=20)
print("line:", talk(one, "HELLO one"), "|", talk(one, "AGAIN"))
one.close()

# Resolved once, as a connection pool does (each lookup counts under the DNS rate).
address = socket.gethostbyname("api.test")
many = [socket.create_connection((address, line_port), timeout=20) for _ in range(50)]
answers = [talk(sock, "N %d" % n) for n, sock in enumerate(many)]
print("concurrent:", sum(answer == "ECHO N %d" % n for n, answer in enumerate(answers)))
for sock in many:
    sock.close()

def refused(port, bound):
    try:
        sock = socket.create_connection(("api.test", port), timeout=bound)
        sock.settimeout(bound)
        sock.sendall(b"x\n")
        got = sock.recv(16)
        return "closed" if got == b"" else "answered %r" % got
    except (ConnectionResetError, ConnectionRefusedError, BrokenPipeError) as error:
        return type(error).__name__
    except socket.timeout:
        return "hung"

print("other names port:", refused(other_port, 1.0))
print("no rules port:", refused(no_rules_port, 1.0))

# A blocking connect (no timeout): refused as fast, but the kernel forgets its port.
blocking = socket.socket()
try:
    blocking.connect((socket.gethostbyname("api.test"), no_rules_port + 1))
    print("blocking: connected")
except ConnectionRefusedError:
    print("blocking: refused")
blocking.close()

try:
    socket.getaddrinfo("nope.test", line_port)
    print("nope.test: resolved")
except socket.gaierror:
    print("nope.test: not found")

context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
try:
    raw = socket.create_connection(("api.test", tls_port), timeout=20)
    context.wrap_socket(raw, server_hostname="other.test").close()
    print("sni: handshake done")
except (ssl.SSLError, OSError) as error:
    print("sni: refused", type(error).__name__)
"#;

#[test]
fn raw_sockets_speak_any_protocol_and_refusals_are_immediate_and_recorded() {
    let network = TestNetwork::create();
    let lines = LineServer::bind((network.gateway, 0));
    let line_port = lines.addr.port();
    let https = Upstream::https((network.gateway, TLS_PORT), &["api.test"], "never");
    let ports = [
        line_port.to_string(),
        TLS_PORT.to_string(),
        OTHER_NAMES_PORT.to_string(),
        NO_RULES_PORT.to_string(),
    ];
    let mut script: Vec<&str> = WITHOUT_PROXY_VARIABLES.to_vec();
    script.extend(["python3", "-c", PYTHON_CLIENTS]);
    script.extend(ports.iter().map(String::as_str));

    let run = Run::new(&network)
        .policy(&gateway_policy(
            "any-port-raw",
            network.gateway,
            &[line_port, TLS_PORT],
            &[
                ("api.test", line_port),
                ("api.test", TLS_PORT),
                ("db.test", OTHER_NAMES_PORT),
            ],
        ))
        .resolve("api.test", network.gateway)
        .timeout("90s")
        .run(&script);

    run.assert_code(0);
    let said = |line: &str| {
        assert!(
            run.stdout.lines().any(|said| said == line),
            "missing {line:?}\n{}",
            run.describe()
        );
    };
    said("line: ECHO HELLO one | ECHO AGAIN");
    said("concurrent: 50");
    said("nope.test: not found");
    assert!(run.stdout.contains("sni: refused"), "{}", run.describe());
    for port in ["other names port:", "no rules port:"] {
        let line = run
            .stdout
            .lines()
            .find(|line| line.starts_with(port))
            .unwrap_or_else(|| panic!("no {port}\n{}", run.describe()));
        assert!(
            !line.contains("hung") && !line.contains("answered"),
            "{line}\n{}",
            run.describe()
        );
    }
    said("blocking: refused");
    assert_eq!(lines.connections.load(Ordering::SeqCst), 51);

    let relayed = tcp_records(&run, line_port);
    assert_eq!(relayed.len(), 51, "{}", run.describe());
    assert_relayed(&relayed, network.gateway, &run);
    let refused = tcp_records(&run, OTHER_NAMES_PORT);
    assert_eq!(refused.len(), 1, "{}", run.describe());
    assert_eq!(refused[0]["decision"], "blocked");
    assert_eq!(refused[0]["reason"], "port_not_allowed");
    // No door on that port: the sandbox's kernel refused it, the proxy recorded it (with
    // the port, or without it for the blocking connect).
    for port in [json!(NO_RULES_PORT), json!(null)] {
        let refused = run.audit_where(|record| {
            record["kind"] == "tcp" && record["host"] == "api.test" && record["port"] == port
        });
        assert_eq!(refused.len(), 1, "port {port}\n{}", run.describe());
        assert_eq!(
            (&refused[0]["decision"], &refused[0]["reason"]),
            (&json!("blocked"), &json!("port_not_allowed"))
        );
    }
    // Nothing else: the doors' own sockets and the relayed connections leave no record of
    // a missed door.
    let every_tcp = run.audit_where(|record| record["kind"] == "tcp");
    assert_eq!(every_tcp.len(), 51 + 1 + 2 + 1, "{}", run.describe());
    let mismatch = tcp_records(&run, TLS_PORT);
    assert_eq!(mismatch.len(), 1, "{}", run.describe());
    assert_eq!(
        (&mismatch[0]["decision"], &mismatch[0]["reason"]),
        (&json!("blocked"), &json!("sni_mismatch"))
    );
    assert!(https.requests().is_empty());
    run.assert_nothing_left();
}

/// A warm slot of `serve` is created before its run's policy is known: its raw doors come
/// with the claim.
#[test]
fn a_warm_slot_of_serve_gets_the_raw_doors_of_its_run() {
    let network = TestNetwork::create();
    let lines = LineServer::bind((network.gateway, 0));
    let port = lines.addr.port();
    let daemon = Daemon::with_pool(1, &network);
    let script = "import socket\n\
         s = socket.create_connection(('api.test', int(__import__('sys').argv[1])), timeout=20)\n\
         s.sendall(b'warm\\n')\n\
         print(s.makefile('rb').readline().decode().strip())\n";
    let mut argv: Vec<String> = WITHOUT_PROXY_VARIABLES
        .iter()
        .map(|part| part.to_string())
        .collect();
    argv.extend([
        "python3".into(),
        "-c".into(),
        script.into(),
        port.to_string(),
    ]);
    let run = post(
        &daemon,
        with_network(
            &network,
            json!({
                "argv": argv,
                "policies": [gateway_policy(
                    "any-port-warm",
                    network.gateway,
                    &[port],
                    &[("api.test", port)],
                )],
                "resolve": {"api.test": network.gateway.to_string()},
            }),
        ),
    )
    .unwrap();
    assert_eq!(run.report()["exit_code"], 0, "{:#?}", run.events);
    assert_eq!(run.stream("stdout"), "ECHO warm\n", "{:#?}", run.events);
    assert_eq!(lines.connections.load(Ordering::SeqCst), 1);
    let metrics = daemon.metrics();
    assert!(
        metrics.contains("egress_sandbox_run_starts_total{path=\"warm\"} 1"),
        "{metrics}"
    );
    assert_run_removed(&run.run_id());
    daemon.stop();
}

/// Under gVisor a run has its own network and the proxy one address on it, which the DNS
/// responder gives every allowed name: the bytes, not the address, say where a connection
/// goes. TLS by SNI and HTTP by `Host` work on every allowed port (the proxy serves a
/// transparent door on each); a raw protocol (here Redis's `PING`) carries no name and is
/// refused at once, recorded `unsupported`.
#[test]
fn under_gvisor_tls_and_http_reach_any_allowed_port_and_raw_protocols_are_refused() {
    crate::gvisor::require_gvisor();
    let network = TestNetwork::create();
    let (http, https) = node_sites(&network);
    let lines = LineServer::bind((network.gateway, 0));
    let line_port = lines.addr.port();
    let raw_client = format!(
        "const s = require('net').connect({line_port}, 'api.test', () => s.write('*1\\r\\n$4\\r\\nPING\\r\\n'));
s.on('data', (d) => {{ console.log('raw answered ' + d); s.destroy(); }});
s.on('error', (e) => console.log('raw ' + e.code));
s.on('close', () => console.log('raw closed'));"
    );
    let mut script = program(&["env", "NODE_TLS_REJECT_UNAUTHORIZED=0", "sh", "-c"]);
    script.extend([
        "node -e \"$0\" $1 $2 $3 && node -e \"$4\"".to_string(),
        NODE_CLIENTS.to_string(),
        HTTP_PORT.to_string(),
        TLS_PORT.to_string(),
        NO_RULES_PORT.to_string(),
        raw_client,
    ]);
    let script: Vec<&str> = script.iter().map(String::as_str).collect();

    let run = Run::new(&network)
        .arg("--runtime")
        .arg(crate::gvisor::GVISOR)
        .policy(&gateway_policy(
            "any-port-gvisor",
            network.gateway,
            &[HTTP_PORT, TLS_PORT, line_port],
            &[
                ("api.test", HTTP_PORT),
                ("api.test", TLS_PORT),
                ("api.test", line_port),
            ],
        ))
        .resolve("api.test", network.gateway)
        .timeout("120s")
        .run(&script);

    run.assert_code(0);
    assert_node_clients_got(&run, &http.body, &https.body);
    assert!(
        https
            .requests()
            .iter()
            .all(|request| request.sni.as_deref() == Some("api.test"))
    );
    assert!(
        !run.stdout.contains("raw answered"),
        "a raw protocol was relayed\n{}",
        run.describe()
    );
    assert_eq!(lines.connections.load(Ordering::SeqCst), 0);
    let raw = run.audit_where(|record| record["kind"] == "tcp" && record["port"] == line_port);
    assert_eq!(raw.len(), 1, "{}", run.describe());
    assert_eq!(
        (&raw[0]["decision"], &raw[0]["reason"]),
        (&json!("blocked"), &json!("unsupported"))
    );
    run.assert_nothing_left();
}
