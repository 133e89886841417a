//! Shared helpers of the end-to-end tests; each one small and named after what it is.

pub mod docker;
pub mod run;
pub mod servers;

pub use docker::{TestNetwork, assert_nothing_left, docker_ok, leftovers, objects_owned_by};
pub use run::{Finished, Run, RunningRun, runs_have_a_network, runs_on_their_own_kernel};
pub use servers::{Canary, Upstream};

/// A fresh random hex string, for names, secrets and bodies that no other test shares.
pub fn random_hex() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// A policy named `name` that allows `hosts` (name, port) and lets the test's gateway
/// address through the private-address floor on `gateway_ports` (the floor refuses private
/// addresses unless a `cidr` rule names them; the test's servers live on that address).
pub fn gateway_policy(
    name: &str,
    gateway: std::net::Ipv4Addr,
    gateway_ports: &[u16],
    hosts: &[(&str, u16)],
) -> String {
    let list = |ports: &[u16]| {
        ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut yaml = format!("version: 1\nname: {name}\nallow:\n");
    for (host, port) in hosts {
        yaml += &format!("  - host: {host}\n    ports: [{port}]\n");
    }
    yaml += &format!(
        "  - cidr: {gateway}/32\n    ports: [{}]\n",
        list(gateway_ports)
    );
    yaml
}

/// Environment prefix that removes every proxy variable, so a program connects directly
/// (or, for allowed names, transparently through the proxy's DNS answers).
pub const WITHOUT_PROXY_VARIABLES: &[&str] = &[
    "env",
    "-u",
    "HTTPS_PROXY",
    "-u",
    "https_proxy",
    "-u",
    "HTTP_PROXY",
    "-u",
    "http_proxy",
    "-u",
    "ALL_PROXY",
    "-u",
    "all_proxy",
    "-u",
    "NO_PROXY",
    "-u",
    "no_proxy",
];

/// A host directory the sandbox sees read-only at [`GoSignal::PATH`]; the sandboxed command
/// waits for [`GoSignal::WAIT`] to see the file the test creates with [`GoSignal::go`], so
/// a test can look at a live run and then let it end by itself (exit 0).
pub struct GoSignal {
    dir: tempfile::TempDir,
}

impl GoSignal {
    pub const PATH: &'static str = "/go-signal";
    /// Shell that returns once the test said go.
    pub const WAIT: &'static str = "while [ ! -e /go-signal/go ]; do sleep 0.1; done";

    pub fn new() -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temporary directory");
        // The sandbox's user (nobody) must be able to look into it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod the signal directory");
        GoSignal { dir }
    }

    /// The `--mount` value.
    pub fn mount(&self) -> String {
        format!("{}:{}", self.dir.path().display(), Self::PATH)
    }

    pub fn go(&self) {
        std::fs::write(self.dir.path().join("go"), b"").expect("write the go file");
    }
}

impl Default for GoSignal {
    fn default() -> Self {
        Self::new()
    }
}

/// SIGKILLs the watchdog of process `owner` (`egress-sandbox watchdog --owner PID:…`, found
/// in /proc), so a test can leave the owner's objects behind for `gc`; panics if there is
/// none, and returns once it is gone.
pub fn kill_watchdog_of(owner: u32) {
    let stamp = format!("{owner}:");
    let watchdog = std::fs::read_dir("/proc")
        .expect("read /proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|byte| *byte == 0).collect();
            args.windows(3).any(|window| {
                window[0] == b"watchdog"
                    && window[1] == b"--owner"
                    && window[2].starts_with(stamp.as_bytes())
            })
        })
        .unwrap_or_else(|| panic!("process {owner} has no watchdog"));
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &watchdog.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success(), "kill -KILL {watchdog} failed");
    // Its parent (the owner) reaps it; until then it is a zombie, which holds nothing open.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_to_string(format!("/proc/{watchdog}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "watchdog {watchdog} did not die"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
