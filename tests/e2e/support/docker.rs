//! Docker, seen from the outside: the test's own egress network, and what a run left behind.
//! Uses the `docker` CLI on purpose, so the checks share no code with the tool under test.

use std::net::{Ipv4Addr, UdpSocket};
use std::process::Command;

/// Label key the tool puts on every object of a run (value: the run id).
pub const RUN_LABEL: &str = "egress-sandbox.run";
/// Label key with `<pid>:<process start time>:<boot id>:<pid namespace>` of the `egress-sandbox`
/// process that owns a run.
pub const OWNER_LABEL: &str = "egress-sandbox.owner";
/// Label this suite puts on its own networks, so a stray one is easy to find by hand.
const TEST_LABEL: &str = "egress-sandbox-e2e.test";

/// Runs `docker ARGS` and returns (success, stdout, stderr).
pub fn docker(args: &[&str]) -> (bool, String, String) {
    let output = Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs `docker ARGS`, panics with its stderr if it fails, returns stdout trimmed.
pub fn docker_ok(args: &[&str]) -> String {
    let (ok, stdout, stderr) = docker(args);
    assert!(ok, "docker {args:?} failed: {stderr}");
    stdout.trim().to_owned()
}

/// A non-internal bridge network of one test, with its own subnet (allocated by Docker, so
/// parallel tests never collide). The run's proxy joins it (`--egress-network`), and the
/// test binds its upstreams and canaries on the gateway address, which the host owns: the
/// proxy reaches them, and no packet leaves the machine. Removed on drop.
pub struct TestNetwork {
    pub name: String,
    pub gateway: Ipv4Addr,
}

impl TestNetwork {
    pub fn create() -> Self {
        let name = format!("e2e-{}", super::random_hex());
        docker_ok(&[
            "network",
            "create",
            "--driver",
            "bridge",
            "--label",
            &format!("{TEST_LABEL}=1"),
            &name,
        ]);
        // Built before the gateway is known so that the guard removes the network even if
        // the inspection below panics.
        let mut network = TestNetwork {
            gateway: Ipv4Addr::UNSPECIFIED,
            name,
        };
        let gateway = docker_ok(&[
            "network",
            "inspect",
            "-f",
            "{{range .IPAM.Config}}{{.Gateway}}{{end}}",
            &network.name,
        ]);
        network.gateway = gateway
            .parse()
            .unwrap_or_else(|e| panic!("gateway {gateway:?} of {}: {e}", network.name));
        network
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        if docker(&["network", "rm", &self.name]).0 {
            return;
        }
        // Something is still attached: a run left a container behind. The test that owns
        // this network reports that; here we only keep the machine usable for the next test.
        let attached = docker_ok(&[
            "network",
            "inspect",
            "-f",
            "{{range $id, $c := .Containers}}{{$id}} {{end}}",
            &self.name,
        ]);
        for id in attached.split_whitespace() {
            docker(&["rm", "-f", id]);
        }
        let (ok, _, stderr) = docker(&["network", "rm", &self.name]);
        if !ok {
            eprintln!("e2e: could not remove test network {}: {stderr}", self.name);
        }
    }
}

/// Containers and networks labelled with one run (or one owner).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Leftovers {
    pub containers: Vec<String>,
    pub networks: Vec<String>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.networks.is_empty()
    }

    /// Removes them by force: cleanup after a failure has been detected, never a fix.
    pub fn remove(&self) {
        for container in &self.containers {
            docker(&["rm", "-f", container]);
        }
        for network in &self.networks {
            docker(&["network", "rm", network]);
        }
    }
}

fn lines(text: String) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Every container and network labelled `egress-sandbox.run=<run_id>`.
pub fn leftovers(run_id: &str) -> Leftovers {
    let filter = format!("label={RUN_LABEL}={run_id}");
    Leftovers {
        containers: lines(docker_ok(&[
            "ps",
            "-a",
            "--filter",
            &filter,
            "--format",
            "{{.Names}}",
        ])),
        networks: lines(docker_ok(&[
            "network",
            "ls",
            "--filter",
            &filter,
            "--format",
            "{{.Name}}",
        ])),
    }
}

/// Every container and network whose owner label names process `pid`, with the run ids
/// found on them (how a test learns the run id of a run that never wrote its report).
pub fn objects_owned_by(pid: u32) -> (Leftovers, Vec<String>) {
    let prefix = format!("{pid}:");
    let format = format!("{{{{.Label \"{OWNER_LABEL}\"}}}}\t{{{{.Label \"{RUN_LABEL}\"}}}}");
    let owned = |listing: String| -> Vec<(String, String)> {
        lines(listing)
            .into_iter()
            .filter_map(|line| {
                let mut fields = line.split('\t');
                let (name, owner, run) = (fields.next()?, fields.next()?, fields.next());
                owner
                    .starts_with(&prefix)
                    .then(|| (name.to_owned(), run.unwrap_or_default().to_owned()))
            })
            .collect()
    };
    let containers = owned(docker_ok(&[
        "ps",
        "-a",
        "--filter",
        &format!("label={OWNER_LABEL}"),
        "--format",
        &format!("{{{{.Names}}}}\t{format}"),
    ]));
    let networks = owned(docker_ok(&[
        "network",
        "ls",
        "--filter",
        &format!("label={OWNER_LABEL}"),
        "--format",
        &format!("{{{{.Name}}}}\t{format}"),
    ]));
    let mut run_ids: Vec<String> = containers
        .iter()
        .chain(&networks)
        .map(|(_, run)| run.clone())
        .filter(|run| !run.is_empty())
        .collect();
    run_ids.sort();
    run_ids.dedup();
    (
        Leftovers {
            containers: containers.into_iter().map(|(name, _)| name).collect(),
            networks: networks.into_iter().map(|(name, _)| name).collect(),
        },
        run_ids,
    )
}

/// Panics (after removing them, so later tests start clean) if anything of run `run_id`
/// or of owner process `owner_pid` is left.
pub fn assert_nothing_left(run_id: &str, owner_pid: u32) {
    let by_run = leftovers(run_id);
    let (by_owner, _) = objects_owned_by(owner_pid);
    by_run.remove();
    by_owner.remove();
    assert!(
        by_run.is_empty() && by_owner.is_empty(),
        "run {run_id} (owner pid {owner_pid}) left Docker objects behind: \
         by run label {by_run:?}, by owner label {by_owner:?}"
    );
}

/// The host's own address on its default route (no packet is sent: connecting a UDP
/// socket only picks the source address).
pub fn host_address() -> Ipv4Addr {
    let socket = UdpSocket::bind("0.0.0.0:0").expect("bind a UDP socket");
    socket
        .connect("203.0.113.1:9")
        .expect("the host has a default route");
    match socket.local_addr().expect("local address").ip() {
        std::net::IpAddr::V4(address) => address,
        other => panic!("host address is not IPv4: {other}"),
    }
}

/// docker0's address (the host side of Docker's default bridge), read from the interface.
pub fn docker0_address() -> Ipv4Addr {
    let output = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "dev", "docker0"])
        .output()
        .expect("the ip command runs");
    let text = String::from_utf8_lossy(&output.stdout);
    text.split_whitespace()
        .skip_while(|field| *field != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next()?.parse().ok())
        .unwrap_or_else(|| panic!("docker0 has no IPv4 address: {text}"))
}
