//! `serve --pool N`: runs claimed from warm slots give what a cold run gives (argv, env,
//! workdir, files, stdin, exit codes, blocked attempts, audit records); limits set at the
//! claim are the ones in force; a policy that inspects a host (a credential) is served warm,
//! its slot's trust bundle filled at the claim; a request a slot cannot honour goes cold and works; slots
//! are replaced after each run; a slot that died is never handed out; SIGTERM leaves no
//! slot behind, and `gc` removes the slots of a daemon that was killed.
//!
//! Each test starts its own daemon whose pool is on the test's own egress network.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::serve::{ApiRun, Daemon, assert_run_removed, post, with_network};
use crate::support::{
    TestNetwork, Upstream, docker_ok, gateway_policy, leftovers, objects_owned_by, random_hex,
};

const HANG_BOUND: Duration = Duration::from_secs(120);

/// The run ids of the daemon's objects: with no run in flight, its ready slots.
fn slot_ids(daemon: &Daemon) -> BTreeSet<String> {
    objects_owned_by(daemon.pid()).1.into_iter().collect()
}

fn counter(daemon: &Daemon, path: &str) -> u64 {
    let needle = format!("egress_sandbox_run_starts_total{{path=\"{path}\"}} ");
    daemon
        .metrics()
        .lines()
        .find_map(|line| line.strip_prefix(&needle).map(str::to_owned))
        .map_or(0, |count| count.trim().parse().unwrap())
}

/// What a run amounts to, with what differs between any two runs left out.
fn essence(run: &ApiRun) -> Value {
    let records: Vec<Value> = run
        .audit()
        .into_iter()
        .filter(|record| record.get("decision").is_some())
        .map(|record| {
            json!([
                record["host"],
                record["port"],
                record["decision"],
                record["reason"]
            ])
        })
        .collect();
    let report = run.report();
    json!({
        "stdout": run.stream("stdout"),
        "stderr": run.stream("stderr"),
        "exit_code": report["exit_code"],
        "status": report["status"],
        "attempts": report["attempts"],
        "blocked": report["blocked"],
        "records": records,
        "chain_closed": run.audit().iter().any(|record| record["kind"] == "end"),
    })
}

const PROGRAM: &str = r#"
import os, sys, urllib.request
print(open("main.py").read().strip(), open("pkg/data.txt").read(), os.getcwd())
print(sorted(k for k in os.environ if k not in ("HOSTNAME",)))
print(os.environ["GREETING"], os.environ["PYTHONUNBUFFERED"], os.environ["HTTPS_PROXY"] == "http://127.0.0.1:3128")
print(sys.stdin.read().strip(), sys.argv[1:])
print("err line", file=sys.stderr)
try:
    urllib.request.urlopen("https://blocked.example.org", timeout=10)
except Exception:
    print("REFUSED")
sys.exit(3)
"#;

fn program_request(network: &TestNetwork) -> Value {
    with_network(
        network,
        json!({
            "argv": ["python3", "-c", PROGRAM, "one", "two words"],
            "files": {"main.py": STANDARD.encode("print(42)"), "pkg/data.txt": STANDARD.encode("x")},
            "stdin": STANDARD.encode("from stdin\n"),
            "env": [["GREETING", "hello"], ["GREETING", "hello again"]],
            "allow": ["api.example.com"],
        }),
    )
}

#[test]
fn a_warm_run_gives_what_a_cold_run_gives() {
    let network = TestNetwork::create();
    let daemon = Daemon::with_pool(1, &network);
    let slots = slot_ids(&daemon);
    assert_eq!(slots.len(), 1, "{slots:?}");

    let warm = post(&daemon, program_request(&network)).unwrap();
    // Served by the slot that was ready before the request came.
    assert!(
        slots.contains(&warm.run_id()),
        "{} not in {slots:?}",
        warm.run_id()
    );
    assert_eq!(counter(&daemon, "warm"), 1);
    assert_eq!(counter(&daemon, "cold"), 0);

    // The same request, made to take the cold path: another /tmp size.
    let mut cold_request = program_request(&network);
    cold_request["tmp"] = json!("32MiB");
    let cold = post(&daemon, cold_request).unwrap();
    assert!(!slots.contains(&cold.run_id()));
    assert_eq!(counter(&daemon, "cold"), 1);

    assert_eq!(essence(&warm), essence(&cold), "{:#?}", warm.events);
    assert_eq!(warm.report()["exit_code"], 3);
    let stdout = warm.stream("stdout");
    assert!(
        stdout.starts_with("print(42) x /task\n"),
        "{stdout}\n{:#?}",
        warm.events
    );
    assert!(
        stdout.contains("hello again 1 True\nfrom stdin ['one', 'two words']\nREFUSED\n"),
        "{stdout}"
    );
    assert_eq!(warm.report()["attempts"]["blocked"], 1);
    assert_run_removed(&warm.run_id());
    assert_run_removed(&cold.run_id());
    daemon.stop();
}

/// A credential is served warm: the slot's sandbox has the trust bundle mounted from its
/// create, and the claim fills it (the image's bundle, then the run CA) before the command
/// goes. curl trusts the run CA with no flags, the upstream gets the key and the sandbox
/// only the placeholder. A warm run that inspects nothing sees the image's own bundle at
/// the system path, byte for byte what a cold run sees.
#[test]
fn a_credential_run_is_served_warm() {
    let network = TestNetwork::create();
    let host = "api.warm-cred.test";
    let (upstream, ca_pem) =
        Upstream::https_with_test_ca((network.gateway, 443), &[host], "served warm\n");
    let secret = format!("sk-e2e-{}", random_hex());
    let mut yaml = gateway_policy("warm-cred", network.gateway, &[443], &[(host, 443)]);
    yaml += &format!("credentials:\n  - host: {host}\n    secret: API_KEY\n");
    let daemon = Daemon::with_pool(1, &network);
    let slots = slot_ids(&daemon);

    let program = format!(
        r#"echo "key: $API_KEY"; curl -sS --max-time 20 -H "Authorization: Bearer $API_KEY" https://{host}/warm"#
    );
    let run = post(
        &daemon,
        with_network(
            &network,
            json!({
                "argv": ["sh", "-c", program],
                "policies": [yaml],
                "secrets": {"API_KEY": secret},
                "upstream_ca": [ca_pem],
                "resolve": {host: network.gateway.to_string()},
            }),
        ),
    )
    .unwrap();
    assert!(
        slots.contains(&run.run_id()),
        "{} was not a warm slot: {slots:?}",
        run.run_id()
    );
    assert_eq!((counter(&daemon, "warm"), counter(&daemon, "cold")), (1, 0));
    assert_eq!(run.report()["exit_code"], 0, "{:#?}", run.events);
    let stdout = run.stream("stdout");
    assert!(
        stdout.contains("key: egress-sandbox-placeholder-"),
        "{stdout}"
    );
    assert!(stdout.contains("served warm"), "{stdout}");
    assert!(!stdout.contains(&secret));
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].head.contains(&format!("Bearer {secret}")));
    assert_run_removed(&run.run_id());

    // Inspecting nothing, warm and cold: the system bundle is the image's own.
    let bundle_digest = json!({"argv": ["sha256sum", "/etc/ssl/certs/ca-certificates.crt"]});
    daemon.wait_pool_ready(1);
    let warm = post(&daemon, with_network(&network, bundle_digest.clone())).unwrap();
    let mut cold_request = with_network(&network, bundle_digest);
    cold_request["tmp"] = json!("32MiB");
    let cold = post(&daemon, cold_request).unwrap();
    assert_eq!((counter(&daemon, "warm"), counter(&daemon, "cold")), (2, 1));
    assert_eq!(warm.report()["exit_code"], 0, "{:#?}", warm.events);
    assert_eq!(warm.stream("stdout"), cold.stream("stdout"));
    daemon.stop();
}

/// The limits a request asks for are set on the live sandbox at the claim.
#[test]
fn limits_set_at_the_claim_are_the_ones_in_force() {
    let network = TestNetwork::create();
    let daemon = Daemon::with_pool(1, &network);
    let slots = slot_ids(&daemon);
    // cgroup v1 or v2, whichever the engine uses.
    let script = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max; \
                  cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max";
    let run = post(
        &daemon,
        with_network(
            &network,
            json!({"argv": ["sh", "-c", script], "memory": "100MiB", "pids": 37}),
        ),
    )
    .unwrap();
    assert!(slots.contains(&run.run_id()), "the run was not warm");
    assert_eq!(run.report()["exit_code"], 0, "{:#?}", run.events);
    assert_eq!(
        run.stream("stdout"),
        format!("{}\n37\n", 100 << 20),
        "{:#?}",
        run.events
    );
    // And a memory bomb under a limit set at the claim is killed for memory.
    daemon.wait_pool_ready(1);
    let bomb = "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n";
    let oom = post(
        &daemon,
        with_network(
            &network,
            json!({"argv": ["python3", "-c", bomb], "memory": "48MiB", "timeout": "60s"}),
        ),
    )
    .unwrap();
    assert_eq!(oom.report()["status"], "oom", "{:#?}", oom.events);
    assert_eq!(oom.report()["exit_code"], 137);
    assert_eq!(counter(&daemon, "warm"), 2);
    daemon.stop();
}

/// A claim the engine refuses (its `docker update` of the limits) ends the run with an
/// `error` event and exit 125, as a cold set-up that fails does, and its objects go (found
/// in review: the run hung for good, its proxy and network never removed).
#[test]
fn a_claim_the_engine_refuses_ends_in_an_error_and_leaves_nothing() {
    let network = TestNetwork::create();
    let daemon = Daemon::with_pool(1, &network);
    let slots = slot_ids(&daemon);
    // More tasks than the kernel's pid limit (4194304): the kernel refuses the pids cgroup's
    // value at the claim's update, which the daemon cannot know before.
    let run = post(
        &daemon,
        with_network(&network, json!({"argv": ["true"], "pids": 10_000_000})),
    )
    .unwrap();
    assert!(slots.contains(&run.run_id()), "the run was not warm");
    let last = run.events.last().expect("events");
    assert_eq!(last["event"], "error", "{:#?}", run.events);
    assert_eq!(last["exit_code"], 125);
    assert!(
        last["error"].as_str().unwrap().contains("limits"),
        "{:#?}",
        run.events
    );
    assert_run_removed(&run.run_id());
    // The daemon goes on serving.
    daemon.wait_pool_ready(1);
    let ok = post(&daemon, with_network(&network, json!({"argv": ["true"]}))).unwrap();
    assert_eq!(ok.report()["exit_code"], 0, "{:#?}", ok.events);
    daemon.stop();
}

/// Each slot serves one run; the pool makes a new one right away, and a slot whose proxy
/// died is removed and replaced, never handed out.
#[test]
fn slots_are_replaced_after_runs_and_a_dead_slot_is_never_handed_out() {
    let network = TestNetwork::create();
    let daemon = Daemon::with_pool(2, &network);
    let before = slot_ids(&daemon);
    assert_eq!(before.len(), 2, "{before:?}");
    let run = post(&daemon, with_network(&network, json!({"argv": ["true"]}))).unwrap();
    assert_eq!(run.report()["exit_code"], 0);
    assert!(before.contains(&run.run_id()));
    assert_run_removed(&run.run_id());
    daemon.wait_pool_ready(2);
    let after = slot_ids(&daemon);
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(!after.contains(&run.run_id()), "a slot was used twice");
    assert_eq!(before.intersection(&after).count(), 1);

    // Kill one slot's proxy: that slot goes, a fresh one takes its place.
    let victim = after.iter().next().unwrap().clone();
    docker_ok(&["kill", &format!("egress-run-{victim}-proxy")]);
    let deadline = Instant::now() + HANG_BOUND;
    loop {
        let now = slot_ids(&daemon);
        if !now.contains(&victim) && daemon.pool().0 == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dead slot was not replaced: {now:?} {:?}",
            daemon.pool()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(leftovers(&victim).is_empty());
    for _ in 0..2 {
        let run = post(
            &daemon,
            with_network(&network, json!({"argv": ["echo", "ok"]})),
        )
        .unwrap();
        assert_ne!(run.run_id(), victim);
        assert_eq!(run.stream("stdout"), "ok\n", "{:#?}", run.events);
    }
    assert_eq!(counter(&daemon, "warm"), 3);
    let said = daemon.stop();
    assert!(
        said.contains(
            "a warm slot stopped on its own: its proxy exited with status 137 (killed by SIGKILL)"
        ),
        "the log does not say how the slot died:\n{said}"
    );
}

/// SIGTERM removes every slot as well as every run's objects.
#[test]
fn sigterm_removes_every_slot() {
    let network = TestNetwork::create();
    let daemon = Daemon::with_pool(3, &network);
    let slots = slot_ids(&daemon);
    assert_eq!(slots.len(), 3, "{slots:?}");
    let pid = daemon.pid();
    // `stop` asserts that nothing owned by the daemon is left.
    daemon.stop();
    for slot in &slots {
        assert!(leftovers(slot).is_empty(), "slot {slot} left");
    }
    let (left, _) = objects_owned_by(pid);
    assert!(left.is_empty(), "{left:?}");
}

/// A daemon killed with SIGKILL cannot remove its slots; its watchdog sees it end and
/// removes them (and would remove its live runs alike: they carry the same owner stamp).
#[test]
fn a_killed_daemons_slots_are_removed_by_its_watchdog() {
    let network = TestNetwork::create();
    let daemon = Daemon::with_pool(2, &network);
    let slots = slot_ids(&daemon);
    assert_eq!(slots.len(), 2, "{slots:?}");
    let pid = daemon.pid();
    let stderr = daemon.kill();
    for slot in &slots {
        let said = format!(
            "egress-sandbox: process {pid} ended without removing its runs; removed container \
             egress-run-{slot}-sandbox (run {slot})"
        );
        assert!(stderr.contains(&said), "{stderr}");
        let left = leftovers(slot);
        assert!(left.is_empty(), "the watchdog left slot {slot}: {left:?}");
    }
    let (left, _) = objects_owned_by(pid);
    left.remove();
    assert!(
        left.is_empty(),
        "the watchdog left the daemon's objects: {left:?}"
    );
}

/// Without its watchdog too, the slots stay; they carry the daemon's owner stamp like any
/// run's objects, so `gc` proves the owner dead and removes them.
#[test]
fn a_killed_daemons_slots_are_removed_by_gc() {
    let network = TestNetwork::create();
    let daemon = Daemon::with_pool(2, &network);
    let slots = slot_ids(&daemon);
    assert_eq!(slots.len(), 2, "{slots:?}");
    let pid = daemon.pid();
    crate::support::kill_watchdog_of(pid);
    daemon.kill();
    for slot in &slots {
        let left = leftovers(slot);
        assert!(
            left.containers.len() == 2,
            "slot {slot} should remain until gc: {left:?}"
        );
    }
    let gc = crate::support::run::binary()
        .arg("gc")
        .output()
        .expect("run egress-sandbox gc");
    assert!(
        gc.status.success(),
        "gc failed ({}): {}",
        gc.status,
        String::from_utf8_lossy(&gc.stderr)
    );
    for slot in &slots {
        let left = leftovers(slot);
        assert!(left.is_empty(), "gc left slot {slot}: {left:?}");
    }
    let (left, _) = objects_owned_by(pid);
    left.remove();
    assert!(left.is_empty(), "gc left the daemon's objects: {left:?}");
}
