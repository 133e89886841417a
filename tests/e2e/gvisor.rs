//! gVisor as a second wall, and `doctor`: the engine's gVisor runtime (`runsc`, registered
//! by `scripts/gvisor-setup.sh`) runs sandboxes end to end, over the wiring its network
//! mode allows; the task limit means under gVisor what it means under runc; a policy can
//! require a runtime; `serve --runtime` keeps warm gVisor slots; `doctor` says what works.
//!
//! The isolation, reach, hardening and credential modules run a second time under gVisor
//! in CI (`EGRESS_SANDBOX_TEST_RUNTIME=runsc`, see `support::run::RUNTIME_ENV`); the tests
//! here are what only gVisor has.

use std::process::Stdio;

use serde_json::json;

use crate::serve::{Daemon, post, with_network};
use crate::support::run::binary;
use crate::support::{Run, TestNetwork, assert_nothing_left, objects_owned_by};

/// The gVisor runtime the engine registers (`runsc`, as the set-up script names it).
pub(crate) const GVISOR: &str = "runsc";

/// What `dmesg` prints in a gVisor sandbox (its kernel's boot log); under runc the
/// sandbox's user may not read the host's.
const GVISOR_BOOT_LINE: &str = "Starting gVisor";

pub(crate) fn require_gvisor() {
    let (ok, runtimes, _) =
        crate::support::docker::docker(&["info", "--format", "{{json .Runtimes}}"]);
    assert!(ok, "docker info failed");
    assert!(
        runtimes.contains(&format!("\"{GVISOR}\"")),
        "the engine has no runtime {GVISOR} (it has {runtimes}): run scripts/gvisor-setup.sh first"
    );
}

fn doctor(docker_host: Option<&str>) -> (i32, String, String) {
    let mut command = binary();
    if let Some(host) = docker_host {
        command.env("DOCKER_HOST", host);
    }
    let output = command
        .arg("doctor")
        .stdin(Stdio::null())
        .output()
        .expect("run egress-sandbox doctor");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn doctor_with_an_unreachable_engine_exits_1_and_says_what_to_do() {
    let missing = tempfile::tempdir().unwrap();
    let host = format!("unix://{}/docker.sock", missing.path().display());
    let (code, stdout, stderr) = doctor(Some(&host));
    assert_eq!(code, 1, "{stdout}{stderr}");
    let line = stdout
        .lines()
        .find(|line| line.starts_with("FAIL engine:"))
        .unwrap_or_else(|| panic!("no failed engine line:\n{stdout}"));
    assert!(line.contains(&host), "{line}");
    assert!(line.contains("— start the Docker engine"), "{line}");
    assert!(line.contains("DOCKER_HOST"), "{line}");
}

#[test]
fn doctor_names_each_runtime_whether_it_starts_and_the_wiring_a_run_gets() {
    require_gvisor();
    let (code, stdout, stderr) = doctor(None);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for check in [
        "ok   engine: Docker ",
        "ok   storage: ",
        "ok   cgroups: ",
        "ok   temp directory: ",
        "ok   proxy image: ",
        "ok   egress network: ",
    ] {
        assert!(
            stdout.lines().any(|line| line.starts_with(check)),
            "no line {check:?}:\n{stdout}"
        );
    }
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with("ok   runtime runc")
                && line.contains("starts; host kernel; a run gets passed listeners")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|line| line.starts_with(&format!("ok   runtime {GVISOR}:"))
                && line.contains("starts; gVisor")
                && line.contains("a run gets a per-run network")),
        "{stdout}"
    );
    // The probes are removed: no container of this test's doctor is left.
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

#[test]
fn a_policy_that_requires_a_runtime_refuses_another_with_125_before_anything_is_created() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .policy("version: 1\nname: second-wall\nlimits:\n  runtime: runsc\n")
        .option("--runtime", "runc")
        .run(&["echo", "SHOULD-NOT-RUN"]);
    run.assert_code(125);
    assert!(
        run.stderr
            .contains("--runtime runc is not allowed by policy second-wall (runtime: runsc)"),
        "{}",
        run.describe()
    );
    assert!(!run.stdout.contains("SHOULD-NOT-RUN"), "{}", run.describe());
    let (left, _) = objects_owned_by(run.pid);
    left.remove();
    assert!(left.is_empty(), "created before refusing: {left:?}");
}

#[test]
fn a_policy_that_requires_gvisor_runs_under_it_without_a_flag() {
    require_gvisor();
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .policy(&format!(
            "version: 1\nname: second-wall\nlimits:\n  runtime: {GVISOR}\n"
        ))
        .timeout("60s")
        .run(&["dmesg"]);
    run.assert_code(0);
    assert!(run.stdout.contains(GVISOR_BOOT_LINE), "{}", run.describe());
    assert_nothing_left(&run.run_id(), run.pid);
}

/// Under gVisor the host's pids cgroup counts gVisor's own threads (dozens per busy guest
/// task), so a limit meant for the command used to kill gVisor's kernel with the run:
/// `print(1)` printed, then the shell's next fork failed. Now the launcher sets the limit as
/// the sandbox's `RLIMIT_NPROC`, which gVisor's kernel counts per sandbox: the bomb's forks
/// fail with EAGAIN at the limit, as under runc, and the shell goes on.
#[test]
fn under_gvisor_a_fork_bomb_stops_at_the_pids_limit_and_the_command_survives() {
    require_gvisor();
    let network = TestNetwork::create();
    let bomb = r#"
import os, time
forked = 0
try:
    for _ in range(1000):
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        forked += 1
except OSError as error:
    print("STOPPED", forked, error.errno)
"#;
    let script = format!(
        "dmesg | grep -c '{GVISOR_BOOT_LINE}'; python3 -c 'print(1)'; echo rc=$?; python3 -c '{bomb}'; echo SURVIVED"
    );
    let run = Run::new(&network)
        .option("--runtime", GVISOR)
        .option("--pids", "64")
        .timeout("60s")
        .run(&["sh", "-c", &script]);
    run.assert_code(0);
    assert!(run.stdout.starts_with("1\n1\nrc=0\n"), "{}", run.describe());
    let stopped = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("STOPPED "))
        .unwrap_or_else(|| panic!("the bomb was not stopped\n{}", run.describe()));
    let (forked, errno) = stopped.split_once(' ').unwrap();
    let forked: u64 = forked.parse().unwrap();
    assert_eq!(errno, "11", "EAGAIN\n{}", run.describe());
    // 64 tasks in all: init, the shell, python and its children.
    assert!(
        (50..64).contains(&forked),
        "forked {forked}\n{}",
        run.describe()
    );
    assert!(run.stdout.ends_with("SURVIVED\n"), "{}", run.describe());
    assert_nothing_left(&run.run_id(), run.pid);
}

/// The pool's slots are gVisor sandboxes; a run whose task limit is lower than the
/// slot's is served warm (the launcher lowers it), one with other memory cold.
#[test]
fn serve_with_a_runtime_keeps_warm_gvisor_slots() {
    require_gvisor();
    let network = TestNetwork::create();
    let daemon = Daemon::start_with(&[
        "--pool",
        "1",
        "--egress-network",
        &network.name,
        "--runtime",
        GVISOR,
    ]);
    daemon.wait_pool_ready(1);
    let (slots, _) = objects_owned_by(daemon.pid());
    let sandbox = slots
        .containers
        .iter()
        .find(|name| name.ends_with("-sandbox"))
        .unwrap_or_else(|| panic!("no warm sandbox: {slots:?}"))
        .clone();
    let runtime =
        crate::support::docker_ok(&["inspect", "--format", "{{.HostConfig.Runtime}}", &sandbox]);
    assert_eq!(runtime.trim(), GVISOR);

    let run = post(
        &daemon,
        with_network(&network, json!({"argv": ["dmesg"], "pids": 32})),
    )
    .unwrap();
    assert_eq!(run.report()["exit_code"], 0, "{:#?}", run.events);
    assert!(run.stream("stdout").contains(GVISOR_BOOT_LINE));
    assert!(
        daemon
            .metrics()
            .contains("egress_sandbox_run_starts_total{path=\"warm\"} 1"),
        "{}",
        daemon.metrics()
    );
    // runsc cannot change a live container's limits (it has no `update`): a run that
    // needs other memory takes the cold path, and works.
    let cold = post(
        &daemon,
        with_network(&network, json!({"argv": ["dmesg"], "memory": "200MiB"})),
    )
    .unwrap();
    assert_eq!(cold.report()["exit_code"], 0, "{:#?}", cold.events);
    assert!(cold.stream("stdout").contains(GVISOR_BOOT_LINE));
    assert!(
        daemon
            .metrics()
            .contains("egress_sandbox_run_starts_total{path=\"cold\"} 1"),
        "{}",
        daemon.metrics()
    );
    daemon.stop();
}

/// Asks Docker's embedded resolver (127.0.0.11:53) over raw UDP, as any program can
/// whatever resolv.conf says: the proxy's address backwards (PTR), the name that gives, and
/// the made-up name in argv[1]. One line each: what, `rcode N` or `NO ANSWER`, the data;
/// first the proxy's address.
const ASK_THE_ENGINES_RESOLVER: &str = r#"
import os, random, socket, struct, sys
def ask(name, qtype):
    wire = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    query = struct.pack(">HHHHHH", random.randrange(65536), 0x0100, 1, 0, 0, 0) + wire + struct.pack(">HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        try:
            s.sendto(query, ("127.0.0.11", 53))
            answer, _ = s.recvfrom(4096)
        except OSError as error:
            return "NO ANSWER " + type(error).__name__, []
    flags, _, count = struct.unpack(">HHH", answer[2:8])
    at = 12
    while answer[at]:
        at += answer[at] + 1
    at += 5
    data = []
    for _ in range(count):
        if answer[at] & 0xC0 == 0xC0:
            at += 2
        else:
            while answer[at]:
                at += answer[at] + 1
            at += 1
        kind, _, _, length = struct.unpack(">HHIH", answer[at:at + 10])
        at += 10
        rdata = answer[at:at + length]
        at += length
        if kind == 1:
            data.append(socket.inet_ntoa(rdata))
        elif kind == 12:
            labels, i = [], 0
            while i < len(rdata) and 0 < rdata[i] < 64:
                labels.append(rdata[i + 1:i + 1 + rdata[i]].decode())
                i += rdata[i] + 1
            data.append(".".join(labels))
    return "rcode %d" % (flags & 0xF), data
proxy = os.environ["HTTP_PROXY"].split("//")[1].split(":")[0]
print("PROXY", proxy)
status, names = ask(".".join(reversed(proxy.split("."))) + ".in-addr.arpa", 12)
print("PTR", status, *names)
for name in names[:1]:
    status, addresses = ask(name, 1)
    print("NAME", status, *addresses)
status, addresses = ask(sys.argv[1], 1)
print("MADE-UP", status, *addresses)
"#;

/// Pins what Docker's embedded resolver tells a gVisor sandbox (known limits: "Docker's
/// embedded resolver"): over raw UDP it names the run's own containers and their addresses
/// without a record, and every other name it forwards to the proxy alone, where it is judged
/// and recorded like any lookup, never to the host's resolvers.
#[test]
fn under_gvisor_the_engines_resolver_names_the_runs_containers_and_forwards_only_to_the_proxy() {
    require_gvisor();
    let network = TestNetwork::create();
    let made_up = format!("leak-{}.test", crate::support::random_hex());
    let run = Run::new(&network)
        .option("--runtime", GVISOR)
        .timeout("60s")
        .run(&["python3", "-c", ASK_THE_ENGINES_RESOLVER, &made_up]);
    run.assert_code(0);
    let id = run.run_id();
    let proxy = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("PROXY "))
        .unwrap_or_else(|| panic!("no proxy address\n{}", run.describe()));
    let expected = format!(
        "PROXY {proxy}\nPTR rcode 0 egress-run-{id}-proxy.egress-run-{id}\nNAME rcode 0 {proxy}\nMADE-UP rcode 3\n"
    );
    assert_eq!(run.stdout, expected, "{}", run.describe());
    let forwarded =
        run.audit_where(|record| record["kind"] == "dns" && record["host"] == made_up.as_str());
    assert_eq!(forwarded.len(), 1, "{}", run.describe());
    assert_eq!(
        (&forwarded[0]["decision"], &forwarded[0]["reason"]),
        (&json!("blocked"), &json!("not_allowed"))
    );
    let proxy_prefix = &proxy[..proxy.rfind('.').unwrap()];
    assert!(
        forwarded[0]["client"]
            .as_str()
            .is_some_and(|client| client.starts_with(&format!("{proxy_prefix}."))),
        "forwarded from the sandbox's run-network address\n{}",
        run.describe()
    );
    let dns_records = run.audit_where(|record| record["kind"] == "dns");
    assert_eq!(
        dns_records.len(),
        1,
        "the run's own names are answered unrecorded\n{}",
        run.describe()
    );
    assert_nothing_left(&id, run.pid);
}
