//! The default egress network keeps runs apart: `egress-sandbox-egress` is a bridge with
//! inter-container traffic off, so a run's proxy cannot reach anything another run (or
//! anyone) has on that bridge — only the outside, through the host.
//!
//! Every other test gives its runs a test network with inter-container traffic on; this
//! one uses the tool's own default. A run's proxy binds nothing on the egress bridge (its
//! doors are the sockets its sandbox passed it, on that sandbox's loopback), so another
//! run's proxy offers nothing on the egress bridge to connect to; to see the
//! bridge's isolation itself, a stand-in peer — a container on the egress bridge listening
//! on the proxy port of every address — is the target, while two concurrent runs each
//! reach a host listener through the same bridge (so the path out works, and only the peer
//! is cut off).

use std::time::{Duration, Instant};

use crate::support::docker::docker;
use crate::support::{Run, Upstream, docker_ok, random_hex};

const EGRESS_NETWORK: &str = "egress-sandbox-egress";
const PEER_PORT: u16 = 3128;

/// A container on the egress bridge that prints ACCEPTED for every connection; removed
/// on drop.
struct Peer {
    name: String,
    address: String,
}

impl Peer {
    fn start() -> Self {
        let image = newest_base_image();
        let name = format!("e2e-peer-{}", random_hex());
        let listener = format!(
            "import socket\ns = socket.socket()\ns.bind(('0.0.0.0', {PEER_PORT}))\ns.listen()\n\
             print('LISTENING', flush=True)\nwhile True:\n    c, a = s.accept()\n    \
             print('ACCEPTED', a, flush=True)\n    c.close()\n"
        );
        docker_ok(&[
            "run",
            "-d",
            "--name",
            &name,
            "--network",
            EGRESS_NETWORK,
            "--label",
            "egress-sandbox-e2e.test=1",
            "--user",
            "65534:65534",
            &image,
            "python3",
            "-c",
            &listener,
        ]);
        let mut peer = Peer {
            address: String::new(),
            name,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !peer.logs().contains("LISTENING") {
            assert!(
                Instant::now() < deadline,
                "the peer never listened: {}",
                peer.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        peer.address = docker_ok(&[
            "inspect",
            "-f",
            &format!("{{{{(index .NetworkSettings.Networks \"{EGRESS_NETWORK}\").IPAddress}}}}"),
            &peer.name,
        ]);
        peer
    }

    fn logs(&self) -> String {
        let (_, stdout, stderr) = docker(&["logs", &self.name]);
        stdout + &stderr
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        docker(&["rm", "-f", &self.name]);
    }
}

fn newest_base_image() -> String {
    let tags = docker_ok(&["images", "egress-sandbox-base", "--format", "{{.Tag}}"]);
    let tag = tags
        .lines()
        .next()
        .expect("a base image exists after the warm-up");
    format!("egress-sandbox-base:{tag}")
}

#[test]
fn on_the_default_egress_bridge_concurrent_runs_reach_the_host_but_no_peer() {
    // The first run makes sure the shared network exists (created on first use).
    Run::on_default_egress().run(&["true"]).assert_code(0);
    let gateway = docker_ok(&[
        "network",
        "inspect",
        "-f",
        "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
        EGRESS_NETWORK,
    ]);
    let icc = docker_ok(&[
        "network",
        "inspect",
        "-f",
        "{{index .Options \"com.docker.network.bridge.enable_icc\"}}",
        EGRESS_NETWORK,
    ]);
    assert_eq!(
        icc, "false",
        "the default egress network lets containers talk"
    );
    let gateway: std::net::Ipv4Addr = gateway.parse().expect("gateway address");
    let upstream = Upstream::http((gateway, 0), &format!("egress-{}", random_hex()));
    let port = upstream.port();
    let peer = Peer::start();

    let policy = format!(
        "version: 1\nname: egress-bridge\nallow:\n  - host: gw.test\n    ports: [{port}]\n  \
         - cidr: {gateway}/32\n    ports: [{port}]\n  - host: peer.test\n    ports: \
         [{PEER_PORT}]\n  - cidr: {}/32\n    ports: [{PEER_PORT}]\n",
        peer.address
    );
    let script = format!(
        "curl -sS --max-time 20 http://gw.test:{port}/; echo; \
         curl -sS --max-time 10 -o /dev/null http://peer.test:{PEER_PORT}/; echo peer_exit=$?"
    );
    let peer_ip: std::net::Ipv4Addr = peer.address.parse().expect("peer address");
    let runs: Vec<_> = (0..2)
        .map(|_| {
            Run::on_default_egress()
                .policy(&policy)
                .resolve("gw.test", gateway)
                .resolve("peer.test", peer_ip)
                .timeout("60s")
                .spawn(&["sh", "-c", &script])
        })
        .collect();
    let finished: Vec<_> = runs.into_iter().map(|run| run.wait()).collect();

    for run in &finished {
        run.assert_code(0);
        assert!(run.stdout.contains(&upstream.body), "{}", run.describe());
        assert!(!run.stdout.contains("peer_exit=0\n"), "{}", run.describe());
        run.assert_nothing_left();
    }
    assert_eq!(upstream.requests().len(), 2);
    let logs = peer.logs();
    assert!(
        !logs.contains("ACCEPTED"),
        "a run's proxy reached the peer: {logs}"
    );
}
