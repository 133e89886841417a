//! The sandbox's `/proc/self/mountinfo` names nothing of the host: the run's directories
//! (resolv.conf, trust bundle, doors) and the launcher binary are mounted from neutral paths, so
//! no owner stamp (pid, start time, boot id, pid namespace), home, user or checkout path
//! shows through.

use crate::support::{Finished, Run, TestNetwork, gateway_policy, random_hex};

/// The mounts whose source is a host path of the run, by their target in the sandbox.
const RUN_MOUNTS: [&str; 5] = [
    "/etc/resolv.conf",
    "/etc/egress-sandbox/ca-bundle.crt",
    "/etc/ssl/certs/ca-certificates.crt",
    "/.egress-sandbox/doors",
    "/.egress-sandbox/launcher",
];

/// What a mount's source path may end with: a run directory or the launcher binary's place,
/// each named by random characters or the binary's content id.
fn is_neutral(source: &str) -> bool {
    let Some((parent, name)) = source.rsplit_once('/') else {
        return false;
    };
    let dir = parent.rsplit('/').next().unwrap_or_default();
    let random = |id: &str| !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric());
    match (
        dir.strip_prefix("egress-sandbox-run-"),
        dir.strip_prefix("egress-sandbox-launcher-"),
    ) {
        (Some(id), _) => random(id) && ["resolv.conf", "ca-bundle.crt", "doors"].contains(&name),
        (_, Some(id)) => id.chars().all(|c| c.is_ascii_hexdigit()) && name == "egress-sandbox",
        _ => false,
    }
}

/// Cold, and through a daemon (which keeps its binary in a pid-named copy of its own).
#[test]
fn the_sandbox_mount_table_names_no_owner_home_or_checkout() {
    let network = TestNetwork::create();
    let daemon = crate::serve::Daemon::start();
    let run = mountinfo_run(&network, None);
    assert_no_host_traces(&run, run.pid);
    run.assert_nothing_left();
    let run = mountinfo_run(&network, Some(&daemon.socket));
    assert_no_host_traces(&run, daemon.pid());
    crate::serve::assert_run_removed(&run.run_id());
}

fn mountinfo_run(network: &TestNetwork, server: Option<&std::path::PathBuf>) -> Finished {
    let mut yaml = gateway_policy(
        "mounts",
        network.gateway,
        &[443],
        &[("api.mounts.test", 443)],
    );
    yaml += "credentials:\n  - host: api.mounts.test\n    secret: API_KEY\n";
    let mut run = Run::new(network)
        .policy(&yaml)
        .caller_env("API_KEY", &format!("sk-mounts-{}", random_hex()))
        .option("--secret", "API_KEY")
        .timeout("60s");
    if let Some(socket) = server {
        run = run.option("--server", socket);
    }
    let run = run.run(&["cat", "/proc/self/mountinfo"]);
    run.assert_code(0);
    run
}

/// `owner`: the pid of the process that owns the run (the caller, or the daemon).
fn assert_no_host_traces(run: &Finished, owner: u32) {
    let mountinfo = &run.stdout;

    // mountinfo: id parent major:minor ROOT MOUNT-POINT options … - type source super
    let mut seen = Vec::new();
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(root), Some(target)) = (fields.get(3), fields.get(4)) else {
            continue;
        };
        if RUN_MOUNTS.contains(target) {
            assert!(
                is_neutral(root),
                "{target} mounted from {root}\n{mountinfo}"
            );
            seen.push(*target);
        }
    }
    seen.sort_unstable();
    let mut expected = RUN_MOUNTS.to_vec();
    expected.sort_unstable();
    assert_eq!(seen, expected, "{}", run.describe());

    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let pid_namespace = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let pid_namespace = pid_namespace.to_string_lossy();
    let pid_namespace = pid_namespace
        .trim_start_matches("pid:[")
        .trim_end_matches(']');
    let checkout = env!("CARGO_MANIFEST_DIR");
    let home = std::env::var("HOME").unwrap_or_default();
    let mut host_traces = vec![
        ("boot id", boot_id.trim().to_string()),
        ("pid namespace", pid_namespace.to_string()),
        ("checkout", checkout.to_string()),
        ("an owner stamp", format!("{owner}_")),
        ("a kept binary", "kept-binary-".to_string()),
    ];
    if home.len() > 1 {
        host_traces.push(("home", format!("{home}/")));
    }
    for (what, trace) in host_traces {
        assert!(
            !mountinfo.contains(&trace),
            "{what} ({trace}) in the sandbox's mountinfo:\n{mountinfo}"
        );
    }
}
