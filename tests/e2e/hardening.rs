//! Hardening, checked from inside the sandbox, and the resource limits doing their job.

use std::time::Duration;

use crate::support::{GoSignal, Run, TestNetwork, docker_ok, random_hex};

const PROBE_SCRIPT: &str = r#"
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status
if touch /x 2>/dev/null; then echo "root=writable"; else echo "root=read-only"; fi
if echo probe > /tmp/probe && [ "$(cat /tmp/probe)" = probe ]; then echo "tmp=writable"; fi
for socket in /var/run/docker.sock /run/docker.sock; do
  if [ -e "$socket" ]; then echo "docker-socket=$socket"; fi
done
if [ -e /proc/net/if_inet6 ]; then sed 's/^/if_inet6 /' /proc/net/if_inet6; fi
# The kernel's own answers, which gVisor gives though its /proc/self/status has no CapAmb
# or NoNewPrivs line: PR_GET_NO_NEW_PRIVS (39); PR_CAP_AMBIENT (47) IS_SET (1) per capability.
python3 -c 'import ctypes; prctl = ctypes.CDLL(None).prctl; print("prctl-no-new-privs", prctl(39, 0, 0, 0, 0)); print("prctl-ambient-set", sum(prctl(47, 1, cap, 0, 0) == 1 for cap in range(64)))'
echo "probe=done"
"#;

#[test]
fn sandbox_is_unprivileged_read_only_without_docker_socket_or_ipv6() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .timeout("60s")
        .run(&["sh", "-c", PROBE_SCRIPT]);

    run.assert_code(0);
    let out = &run.stdout;
    let context = run.describe();
    assert!(out.contains("probe=done"), "{context}");
    assert!(
        out.contains("uid=65534 gid=65534 groups=65534\n"),
        "{context}"
    );
    for capability in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let line = out
            .lines()
            .find(|line| line.starts_with(&format!("{capability}:")));
        // gVisor's /proc/self/status has no CapAmb line: prctl answers below.
        if line.is_none() && capability == "CapAmb" && own_kernel() {
            continue;
        }
        let line = line.unwrap_or_else(|| panic!("no {capability} line\n{context}"));
        assert!(
            line.split_whitespace().nth(1) == Some("0000000000000000"),
            "{line}\n{context}"
        );
    }
    assert!(
        out.contains("prctl-no-new-privs 1\nprctl-ambient-set 0\n"),
        "{context}"
    );
    assert!(
        own_kernel()
            || out
                .lines()
                .any(|line| line.split_whitespace().eq(["NoNewPrivs:", "1"])),
        "{context}"
    );
    assert!(out.contains("root=read-only\n"), "{context}");
    assert!(out.contains("tmp=writable\n"), "{context}");
    assert!(!out.contains("docker-socket="), "{context}");
    // /proc/net/if_inet6: address, index, prefix, scope, flags, device. Only loopback may
    // have an IPv6 address (not even a link-local one on the run network).
    let ipv6: Vec<&str> = out
        .lines()
        .filter(|line| line.starts_with("if_inet6 ") && !line.ends_with(" lo"))
        .collect();
    assert!(
        ipv6.is_empty(),
        "IPv6 addresses inside: {ipv6:?}\n{context}"
    );
    run.assert_nothing_left();
}

#[test]
fn tmp_is_writable_but_bounded_by_the_tmp_limit() {
    let network = TestNetwork::create();
    let script = "dd if=/dev/zero of=/tmp/small bs=1M count=2 2>/dev/null && echo small=ok; \
                  dd if=/dev/zero of=/tmp/big bs=1M count=64 2>/dev/null; echo big_exit=$?; \
                  echo big_bytes=$(wc -c < /tmp/big)";
    let run = Run::new(&network)
        .option("--tmp", "8MiB")
        .timeout("60s")
        .run(&["sh", "-c", script]);

    run.assert_code(0);
    let context = run.describe();
    assert!(run.stdout.contains("small=ok\n"), "{context}");
    assert!(!run.stdout.contains("big_exit=0\n"), "{context}");
    let big_bytes: u64 = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("big_bytes="))
        .and_then(|bytes| bytes.trim().parse().ok())
        .unwrap_or_else(|| panic!("no big_bytes line\n{context}"));
    assert!(big_bytes <= 8 << 20, "{big_bytes} bytes in /tmp\n{context}");
    run.assert_nothing_left();
}

const FORK_BOMB: &str = r#"
import os, sys, time
children = 0
while True:
    try:
        pid = os.fork()
    except OSError as error:
        print(f"FORK-REFUSED after {children} children: {error}", flush=True)
        break
    if pid == 0:
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
    children += 1
while True:
    time.sleep(1)
"#;

#[test]
fn fork_bomb_is_stopped_by_the_pids_limit() {
    let network = TestNetwork::create();
    let run = Run::new(&network)
        .option("--pids", "32")
        .timeout("10s")
        .run(&["python3", "-c", FORK_BOMB]);

    run.assert_code(124);
    let children: u32 = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("FORK-REFUSED after "))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("fork was never refused\n{}", run.describe()));
    assert!(children < 32, "{children} children under --pids 32");
    assert_eq!(run.report()["status"], "timeout", "{}", run.describe());
    run.assert_nothing_left();
}

#[test]
fn memory_bomb_exits_137_and_reports_oom() {
    let network = TestNetwork::create();
    let bomb = "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n";
    let run = Run::new(&network)
        .option("--memory", "64MiB")
        .timeout("60s")
        .run(&["python3", "-c", bomb]);

    run.assert_code(137);
    let report = run.report();
    assert_eq!(report["status"], "oom", "{}", run.describe());
    assert_eq!(report["exit_code"], 137, "{}", run.describe());
    run.assert_nothing_left();
}

/// The engine may take an OOM-killed sandbox's exit before its OOM (then `OOMKilled` stays
/// false), so a run that ends 137 also asks for the engine's `oom` events of its sandbox:
/// one is logged for an OOM kill, none for a process that kills itself with SIGKILL.
#[test]
fn an_oom_kill_is_in_the_engines_events_and_a_self_kill_is_not() {
    let base = egress_sandbox::BASE_IMAGE;
    let bomb = "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n";
    let oom = format!("egress-sandbox-e2e-oom-{}", random_hex());
    let killed = format!("egress-sandbox-e2e-selfkill-{}", random_hex());
    let (_, _, stderr) = crate::support::docker::docker(&[
        "run",
        "--rm",
        "--name",
        &oom,
        "--init",
        "--network",
        "none",
        "--memory",
        "64m",
        "--memory-swap",
        "64m",
        base,
        "python3",
        "-c",
        bomb,
    ]);
    let (ok, _, _) = crate::support::docker::docker(&[
        "run",
        "--rm",
        "--name",
        &killed,
        "--init",
        "--network",
        "none",
        base,
        "sh",
        "-c",
        "kill -9 $$",
    ]);
    assert!(!ok, "kill -9 $$ exited 0");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use egress_sandbox::ContainerEngine as _;
        let engine = egress_sandbox::DockerEngine::connect().await.unwrap();
        let lookback = Duration::from_secs(600);
        assert!(
            engine
                .saw_oom_event(&oom, lookback, Duration::from_secs(20))
                .await
                .unwrap(),
            "no oom event for the memory bomb: {stderr}"
        );
        assert!(
            !engine
                .saw_oom_event(&killed, lookback, Duration::from_millis(500))
                .await
                .unwrap()
        );
    });
}

/// Peak resident memory (VmHWM, kB) of process `pid`, if it is still running.
fn peak_resident_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[test]
fn huge_output_is_capped_with_a_marker_and_the_caller_stays_small() {
    const LIMIT: u64 = 1 << 20;
    const MARKER: &str = "[egress-sandbox: output truncated";
    let network = TestNetwork::create();
    let running = Run::new(&network)
        .option("--output-limit", "1MiB")
        .timeout("90s")
        .spawn(&[
            "sh",
            "-c",
            "yes 0123456789abcdef0123456789abcdef | head -c 100000000",
        ]);
    let pid = running.pid;
    let mut peak_kb = 0;
    let run = running.wait_with(|| peak_kb = peak_kb.max(peak_resident_kb(pid).unwrap_or(0)));

    run.assert_code(0);
    let context = run.describe();
    eprintln!("egress-sandbox peak resident memory while relaying 100 MB: {peak_kb} kB");
    assert!(peak_kb > 0, "never measured the caller's memory");
    assert!(
        peak_kb < 100 * 1024,
        "egress-sandbox peaked at {peak_kb} kB relaying 100 MB\n{context}"
    );
    assert!(
        run.stdout.contains(MARKER) || run.stderr.contains(MARKER),
        "no truncation marker\n{context}"
    );
    let relayed = run.stdout_bytes + run.stderr_bytes;
    assert!(
        relayed <= LIMIT + 4096,
        "{relayed} bytes relayed under a 1 MiB limit\n{context}"
    );
    assert!(
        run.stdout_bytes >= LIMIT / 2,
        "only {} bytes relayed",
        run.stdout_bytes
    );
    assert_eq!(run.report()["output"]["truncated"], true, "{context}");
    run.assert_nothing_left();
}

#[test]
fn double_forked_child_ignoring_sigterm_is_gone_when_the_run_returns() {
    let network = TestNetwork::create();
    let marker = format!("orphan-{}", random_hex());
    let program = format!(
        r#"
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.execvp("python3", ["python3", "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(100000)",
            "{marker}"])
    os._exit(0)
time.sleep(5)
print("PARENT-DONE", flush=True)
"#
    );
    let running = Run::new(&network)
        .timeout("60s")
        .hang_bound(Duration::from_secs(120))
        .spawn(&["python3", "-c", &program]);
    // Under gVisor the sandbox's processes are tasks of its own kernel, not host processes:
    // what could outlive the run there is that kernel (`runsc-sandbox`, named by the
    // sandbox container's id).
    let pid = running.pid;
    let mut host_trace = marker.clone();
    let mut seen_running = false;
    let run = running.wait_with(|| {
        if own_kernel() && host_trace == marker {
            let (owned, _) = crate::support::objects_owned_by(pid);
            if let Some(sandbox) = owned
                .containers
                .iter()
                .find(|name| name.ends_with("-sandbox"))
            {
                let (ok, id, _) =
                    crate::support::docker::docker(&["inspect", "-f", "{{.Id}}", sandbox]);
                if ok {
                    host_trace = id.trim().to_owned();
                }
            }
        }
        seen_running |= host_has_process_mentioning(&host_trace);
    });

    run.assert_code(0);
    assert!(run.stdout.contains("PARENT-DONE"), "{}", run.describe());
    // Positive control: the orphan (or gVisor's kernel) was visible from the host while
    // the run lasted.
    assert!(
        seen_running,
        "the orphan was never seen on the host\n{}",
        run.describe()
    );
    assert!(
        !host_has_process_mentioning(&host_trace),
        "the orphan ignoring SIGTERM outlived the run"
    );
    run.assert_nothing_left();
}

/// Whether any process on the host has `arg` as one of its command line arguments.
/// Whether a host process has `needle` as an argument, or in one (gVisor's processes name
/// the container id inside paths and flags).
fn host_has_process_mentioning(needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .map(|cmdline| {
                cmdline.split(|&byte| byte == 0).any(|part| {
                    part.windows(needle.len())
                        .any(|window| window == needle.as_bytes())
                })
            })
            .unwrap_or(false)
    })
}

fn own_kernel() -> bool {
    crate::support::runs_on_their_own_kernel()
}

/// `/dev/shm` is a tmpfs of `--tmp` size (Docker's own is 64 MiB whatever `--tmp` says),
/// `/dev/mqueue` takes nothing, and the sandbox does not forward packets.
#[test]
fn dev_shm_is_bounded_by_tmp_mqueue_is_read_only_and_nothing_forwards() {
    let network = TestNetwork::create();
    let script = "dd if=/dev/zero of=/dev/shm/big bs=1M count=8 2>/dev/null; echo shm_exit=$?; \
                  echo shm_bytes=$(wc -c < /dev/shm/big); \
                  if touch /dev/mqueue/q 2>/dev/null; then echo mqueue=writable; \
                  else echo mqueue=refused; fi; \
                  echo ip_forward=$(cat /proc/sys/net/ipv4/ip_forward)";
    let run = Run::new(&network)
        .option("--tmp", "1MiB")
        .timeout("60s")
        .run(&["sh", "-c", script]);

    run.assert_code(0);
    let context = run.describe();
    assert!(!run.stdout.contains("shm_exit=0\n"), "{context}");
    let shm_bytes: u64 = run
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("shm_bytes="))
        .and_then(|bytes| bytes.trim().parse().ok())
        .unwrap_or_else(|| panic!("no shm_bytes line\n{context}"));
    assert!(
        shm_bytes <= 1 << 20,
        "{shm_bytes} bytes in /dev/shm\n{context}"
    );
    assert!(run.stdout.contains("mqueue=refused\n"), "{context}");
    assert!(run.stdout.contains("ip_forward=0\n"), "{context}");
    run.assert_nothing_left();
}

/// The proxy is the one container with a network (with passed listeners; with a run network
/// it is on that too); it must not route for anyone. Its image
/// is FROM scratch (no shell), so the values are read from the host inside its network
/// namespace.
#[test]
fn the_proxy_does_not_forward_packets() {
    let network = TestNetwork::create();
    let signal = GoSignal::new();
    let mut running = Run::new(&network)
        .option("--mount", signal.mount())
        .timeout("60s")
        .spawn(&["sh", "-c", &format!("echo LIVE; {}", GoSignal::WAIT)]);
    running.wait_for_stdout("LIVE");
    let pid = docker_ok(&[
        "inspect",
        "-f",
        "{{.State.Pid}}",
        &running.proxy_container(),
    ]);
    let read = |key: &str| {
        let output = std::process::Command::new("nsenter")
            .args(["-t", &pid, "-n", "sysctl", "-n", key])
            .output()
            .expect("nsenter runs");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    let (ipv4, ipv6) = (
        read("net.ipv4.ip_forward"),
        read("net.ipv6.conf.all.forwarding"),
    );
    // Its one interface, the egress network's: its own setting must be off too.
    let per_interface = read("net.ipv4.conf.eth0.forwarding");
    let no_second_leg = read("net.ipv4.conf.eth1.forwarding");
    signal.go();
    let run = running.wait();

    run.assert_code(0);
    assert_eq!(ipv4, "0", "proxy ip_forward\n{}", run.describe());
    assert_eq!(ipv6, "0", "proxy IPv6 forwarding\n{}", run.describe());
    assert_eq!(
        per_interface,
        "0",
        "proxy eth0 forwarding\n{}",
        run.describe()
    );
    if crate::support::runs_have_a_network() {
        // The run-network wiring: its second leg is the run's network, not forwarding either.
        assert_eq!(
            no_second_leg,
            "0",
            "proxy eth1 forwarding\n{}",
            run.describe()
        );
    } else {
        assert_eq!(
            no_second_leg,
            "",
            "the proxy has a second network\n{}",
            run.describe()
        );
    }
    run.assert_nothing_left();
}
