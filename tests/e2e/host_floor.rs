//! The floor knows the engine host: an allowed name that resolves to one of the host's own
//! public addresses must not reach the host's listeners through the egress bridge.
//!
//! The host's real addresses here are private (already on the floor), so the test gives
//! the host a public-looking address of its own: 192.0.3.77 on an interface of its own (a
//! bridge with no ports: this kernel has no dummy driver). It is outside every special
//! range (so only `--floor-extra` can refuse it), and an interface without ports never
//! sends a packet anywhere: traffic to a local address is delivered on the host (checked
//! with `ip route get` before anything is sent). The listener binds 0.0.0.0,
//! as a host service would.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::process::{Command, Stdio};

use crate::support::run::binary;
use crate::support::{Run, TestNetwork, Upstream, random_hex};

const HOST_PUBLIC: Ipv4Addr = Ipv4Addr::new(192, 0, 3, 77);

/// An interface without ports holding one address of this host; removed on drop.
struct HostAddress {
    interface: String,
}

fn ip(args: &[&str]) -> String {
    let output = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        output.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

impl HostAddress {
    fn add(address: Ipv4Addr) -> Self {
        let interface = format!("ese2e{}", &random_hex()[..8]);
        ip(&["link", "add", &interface, "type", "bridge"]);
        let added = HostAddress { interface };
        ip(&[
            "addr",
            "add",
            &format!("{address}/32"),
            "dev",
            &added.interface,
        ]);
        ip(&["link", "set", &added.interface, "up"]);
        let route = ip(&["route", "get", &address.to_string()]);
        assert!(
            route.starts_with("local "),
            "{address} is not local, refusing to send anything to it: {route}"
        );
        added
    }
}

impl Drop for HostAddress {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.interface])
            .status();
    }
}

/// Asks a standalone proxy (no `--floor-extra`) for `http://name:port/` with `name` pinned
/// to `address`: the answer's body.
fn through_a_proxy_without_floor_extra(name: &str, address: Ipv4Addr, port: u16) -> String {
    let mut proxy = binary()
        .args(["proxy", "--listen", "127.0.0.1:0", "--audit-log", "-"])
        .args(["--allow", &format!("{name}:{port}")])
        .args(["--resolve", &format!("{name}={address}")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the proxy");
    let mut ready = String::new();
    BufReader::new(proxy.stdout.as_mut().expect("piped stdout"))
        .read_line(&mut ready)
        .expect("the ready line");
    let listen: serde_json::Value = serde_json::from_str(&ready).expect("ready line is JSON");
    let listen = listen["listen"]
        .as_str()
        .expect("listen address")
        .to_owned();
    let mut stream = TcpStream::connect(&listen).expect("connect to the proxy");
    write!(
        stream,
        "GET http://{name}:{port}/direct HTTP/1.1\r\nHost: {name}:{port}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let _ = proxy.kill();
    let _ = proxy.wait();
    answer
}

#[test]
fn an_allowed_name_pinned_to_a_host_address_is_refused_unless_a_cidr_rule_names_it() {
    let network = TestNetwork::create();
    let _address = HostAddress::add(HOST_PUBLIC);
    let upstream = Upstream::http(
        (Ipv4Addr::UNSPECIFIED, 0),
        &format!("host-{}", random_hex()),
    );
    let port = upstream.port();
    let name = "hostself.test";

    // Not private by itself: a proxy that does not know the host lets it through.
    let direct = through_a_proxy_without_floor_extra(name, HOST_PUBLIC, port);
    assert!(direct.contains(&upstream.body), "{direct}");
    let served_before = upstream.requests().len();

    let script = format!("curl -sS --max-time 20 http://{name}:{port}/run; echo; echo CURL=$?");
    let refused = Run::new(&network)
        .allow(&format!("{name}:{port}"))
        .resolve(name, HOST_PUBLIC)
        .timeout("60s")
        .run(&["sh", "-c", &script]);
    refused.assert_code(0);
    assert!(
        !refused.stdout.contains(&upstream.body),
        "{}",
        refused.describe()
    );
    assert_eq!(
        upstream.requests().len(),
        served_before,
        "{}",
        refused.describe()
    );
    assert!(
        !refused
            .audit_where(|record| record["host"] == name
                && record["decision"] == "blocked"
                && record["reason"] == "private_address")
            .is_empty(),
        "{}",
        refused.describe()
    );
    refused.assert_nothing_left();

    // A cidr rule naming the address still wins, as for private ranges.
    let allowed = Run::new(&network)
        .policy(&format!(
            "version: 1\nname: host-cidr\nallow:\n  - host: {name}\n    ports: [{port}]\n  \
             - cidr: {HOST_PUBLIC}/32\n    ports: [{port}]\n"
        ))
        .resolve(name, HOST_PUBLIC)
        .timeout("60s")
        .run(&["sh", "-c", &script]);
    allowed.assert_code(0);
    assert!(
        allowed.stdout.contains(&upstream.body),
        "{}",
        allowed.describe()
    );
    allowed.assert_nothing_left();
}
