//! The two containers of a run, as Docker create requests. Pure: what a run asks of the
//! engine can be read (and tested) here in one place.
//!
//! Both containers are hardened the same way (`docs/src/security/model.md`): unprivileged user,
//! no capabilities, no new privileges, default seccomp, read-only root, cgroup limits, no
//! IPv6, no packet forwarding, a log driver that writes nothing (output is relayed through attach instead, with a
//! byte cap, so nothing can fill the host's disk).

use std::collections::HashMap;
use std::net::IpAddr;

use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, HostConfigLogConfig,
    NetworkingConfig, ResourcesUlimits,
};

use egress_core::handoff::{Handoff, InlinePolicy, Pin, Secrets};

use crate::docker::bind_mount;
use crate::engine::ContainerConfig;
use crate::launch_signal::LaunchSetup;
use crate::spec::{RunLimits, RunSpec};
use crate::wiring::{self, PROXY_DOORS_DIR, SANDBOX_DOORS_DIR, Wiring};

/// The explicit proxy port; what HTTP(S)_PROXY point at.
pub(crate) const PROXY_PORT: u16 = 3128;
/// The transparent doors: TLS by SNI, HTTP by `Host`.
const TRANSPARENT_PORTS: [u16; 2] = [443, 80];
const DNS_PORT: u16 = 53;

/// The doors a launcher binds in the sandbox and passes to the proxy
/// (`Wiring::PassedListeners`): the explicit proxy and DNS on 127.0.0.1; the transparent
/// doors and a raw door per port of `raw_ports` on every loopback address (0.0.0.0: the
/// sandbox has no other interface), since the DNS responder answers each allowed name with
/// an address of its own (`docs/src/design/any-port.md`).
pub fn loopback_doors(raw_ports: &[u16]) -> egress_core::doors::DoorAddrs {
    use std::net::{Ipv4Addr, SocketAddrV4};
    let local = |port| SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let every = |port| SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port);
    egress_core::doors::DoorAddrs {
        explicit: local(PROXY_PORT),
        dns: Some(local(DNS_PORT)),
        transparent: TRANSPARENT_PORTS.into_iter().map(every).collect(),
        raw: raw_ports.iter().copied().map(every).collect(),
        closed_sockets: true,
    }
}

/// The ports of `policy`'s host rules that get a raw door: not the proxy's own ports (the
/// explicit proxy's, DNS's, the transparent doors'), at most
/// [`egress_core::doors::MAX_RAW_DOORS`] of them (the lowest). A port left out
/// is still reachable through the explicit proxy.
pub(crate) fn raw_door_ports(policy: &egress_core::policy::PolicySet) -> Vec<u16> {
    let mut ports: Vec<u16> = policy
        .host_ports()
        .into_iter()
        .filter(|port| ![PROXY_PORT, DNS_PORT].contains(port) && !TRANSPARENT_PORTS.contains(port))
        .collect();
    let max = egress_core::doors::MAX_RAW_DOORS;
    if ports.len() > max {
        tracing::warn!(
            left_out = ?&ports[max..],
            "the policy allows more ports than a sandbox has raw doors for; programs reach the others through the proxy variables only"
        );
        ports.truncate(max);
    }
    ports
}
const NOBODY: &str = "65534:65534";
/// Open files per process in the sandbox.
const SANDBOX_NOFILE: i64 = 1024;

/// The proxy's own limits: it relays, it does not compute.
const PROXY_MEMORY: i64 = 256 << 20;
const PROXY_PIDS: i64 = 256;
const PROXY_NOFILE: i64 = 8192;
const PROXY_NANO_CPUS: i64 = 1_000_000_000;

/// Settings both containers share.
fn hardened_host_config(network: &str) -> HostConfig {
    HostConfig {
        network_mode: Some(network.to_string()),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(true),
        ipc_mode: Some("private".into()),
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".into()),
            config: None,
        }),
        sysctls: Some(HashMap::from([
            (
                "net.ipv6.conf.all.disable_ipv6".to_string(),
                "1".to_string(),
            ),
            (
                "net.ipv6.conf.default.disable_ipv6".to_string(),
                "1".to_string(),
            ),
            // Neither container routes for anyone: the proxy sits on two networks, and a
            // sandbox must not become a router for a neighbour. (Writing ip_forward also
            // sets the default for interfaces added later, as the proxy's egress leg.)
            ("net.ipv4.ip_forward".to_string(), "0".to_string()),
            ("net.ipv6.conf.all.forwarding".to_string(), "0".to_string()),
            (
                "net.ipv6.conf.default.forwarding".to_string(),
                "0".to_string(),
            ),
        ])),
        privileged: Some(false),
        publish_all_ports: Some(false),
        ..HostConfig::default()
    }
}

fn endpoint(network: &str, address: std::net::Ipv4Addr) -> NetworkingConfig {
    NetworkingConfig {
        endpoints_config: Some(HashMap::from([(
            network.to_string(),
            EndpointSettings {
                ipam_config: Some(EndpointIpamConfig {
                    ipv4_address: Some(address.to_string()),
                    ..EndpointIpamConfig::default()
                }),
                ..EndpointSettings::default()
            },
        )])),
    }
}

fn ulimit(name: &str, limit: i64) -> ResourcesUlimits {
    ResourcesUlimits {
        name: Some(name.into()),
        soft: Some(limit),
        hard: Some(limit),
    }
}

fn nofile(limit: i64) -> Vec<ResourcesUlimits> {
    vec![ulimit("nofile", limit)]
}

/// The proxy's arguments: it serves the doors the sandbox passes it, or listens on its
/// run-network address only (see [`Wiring`]). The
/// proxy image's entrypoint is `egress-sandbox proxy`, so these follow it. What is the
/// run's own (policies, allow flags, pins, run id) is not here: arguments are visible to
/// anyone who can `docker inspect`, and a policy file name may hold any character, so it
/// travels over stdin as the [`proxy_handoff`] line (`--config-stdin`).
///
/// `floor_extra` are addresses that lead back to the engine's host (see
/// `network::floor_extra`): the proxy refuses them like private ones unless a `cidr` rule
/// names them.
pub(crate) fn proxy_command(wiring: &Wiring, floor_extra: &[IpAddr]) -> Vec<String> {
    let ip = wiring.proxy_ip();
    let mut cmd = match wiring {
        // Allowed names are answered with the sandbox's loopback, where the doors are.
        Wiring::PassedListeners { .. } => vec![
            "--listeners-from".to_string(),
            wiring::proxy_socket(),
            "--dns-answer".into(),
            ip.to_string(),
        ],
        Wiring::RunNetwork { .. } => {
            let mut listen = vec![
                "--listen".to_string(),
                format!("{ip}:{PROXY_PORT}"),
                "--dns-listen".into(),
                format!("{ip}:{DNS_PORT}"),
            ];
            for port in TRANSPARENT_PORTS {
                listen.push("--transparent-listen".into());
                listen.push(format!("{ip}:{port}"));
            }
            listen
        }
    };
    cmd.extend(["--audit-log".into(), "-".into(), "--config-stdin".into()]);
    for address in floor_extra {
        cmd.push("--floor-extra".into());
        cmd.push(address.to_string());
    }
    cmd
}

/// What the run hands its proxy over the proxy container's stdin before it binds.
pub(crate) fn proxy_handoff(spec: &RunSpec, run_id: &str) -> Handoff {
    let credentials = &spec.credentials;
    Handoff {
        policies: spec
            .policies
            .iter()
            .map(|policy| InlinePolicy {
                file: policy.file_name.clone(),
                yaml: policy.yaml.clone(),
            })
            .collect(),
        allow: spec.allow.clone(),
        pins: spec
            .resolve
            .iter()
            .map(|(name, addr)| Pin {
                name: name.to_string(),
                addr: *addr,
            })
            .collect(),
        run_id: Some(run_id.to_string()),
        audit_limit: Some(spec.audit_limit()),
        on_audit_limit: Some(spec.on_audit_limit()),
        door_ports: raw_door_ports(&spec.policy_set),
        secrets: Secrets(
            credentials
                .secrets
                .iter()
                .map(|secret| (secret.name.clone(), secret.value.expose().to_owned()))
                .collect(),
        ),
        placeholders: credentials
            .secrets
            .iter()
            .map(|secret| (secret.name.clone(), secret.placeholder.clone()))
            .collect(),
        upstream_ca: credentials.upstream_ca.clone(),
        // The spec's time limit is at most `units::MAX_DURATION`, so this is at most the
        // `units::MAX_CA_LIFETIME` the proxy takes.
        ca_lifetime_s: Some(egress_core::units::ca_lifetime(spec.limits.timeout).as_secs()),
        ..Handoff::default()
    }
}

/// The proxy container. With passed listeners: on the egress network alone, the doors
/// directory mounted read-write. On a run network: at `.2`; the egress network is connected
/// right after start, before the sandbox's launcher opens (API 1.41 takes only one network at
/// create, and a start with one network is the cheaper one).
pub(crate) fn proxy_body(
    image: &str,
    wiring: &Wiring,
    egress: &str,
    floor_extra: &[IpAddr],
    labels: &HashMap<String, String>,
) -> ContainerCreateBody {
    let (mut host, networking_config) = match wiring {
        Wiring::PassedListeners { doors } => {
            let mut host = hardened_host_config(egress);
            host.mounts = Some(vec![bind_mount(doors, PROXY_DOORS_DIR, false)]);
            (host, None)
        }
        Wiring::RunNetwork { network, subnet } => {
            let mut host = hardened_host_config(network);
            // Binding :53, :80 and :443 without CAP_NET_BIND_SERVICE (namespaced sysctl);
            // with passed listeners the proxy binds nothing and needs no such leave.
            host.sysctls
                .get_or_insert_with(HashMap::new)
                .insert("net.ipv4.ip_unprivileged_port_start".into(), "0".into());
            (host, Some(endpoint(network, subnet.proxy())))
        }
    };
    host.memory = Some(PROXY_MEMORY);
    host.memory_swap = Some(PROXY_MEMORY);
    host.pids_limit = Some(PROXY_PIDS);
    host.nano_cpus = Some(PROXY_NANO_CPUS);
    host.ulimits = Some(nofile(PROXY_NOFILE));
    ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(proxy_command(wiring, floor_extra)),
        user: Some(NOBODY.into()),
        env: Some(Vec::new()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        // The handoff line arrives here; closed after it.
        attach_stdin: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(true),
        labels: Some(labels.clone()),
        host_config: Some(host),
        networking_config,
        ..ContainerCreateBody::default()
    }
}

/// The sandbox's environment: `--env` and the proxy variables, nothing from the host.
pub(crate) fn sandbox_env(spec: &RunSpec, proxy_ip: std::net::Ipv4Addr) -> Vec<String> {
    let proxy = format!("http://{proxy_ip}:{PROXY_PORT}");
    let mut env = Vec::new();
    // Defaults a `--env` of the same name replaces. Python buffers stdout into a pipe, so
    // without PYTHONUNBUFFERED what a script printed before a time-limit kill would be lost.
    for (key, value) in [("HOME", "/tmp"), ("PYTHONUNBUFFERED", "1")] {
        if !spec.env.iter().any(|(given, _)| given == key) {
            env.push(format!("{key}={value}"));
        }
    }
    env.extend(spec.env.iter().map(|(key, value)| format!("{key}={value}")));
    for key in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        env.push(format!("{key}={proxy}"));
    }
    env.extend(spec.credentials.sandbox_env());
    env.push("NO_PROXY=".into());
    env.push("no_proxy=".into());
    if !spec.policy_set.inspected_hosts().is_empty() {
        super::trust::set_variables(&mut env);
    }
    env
}

fn sandbox_host_config(spec: &RunSpec, wiring: &Wiring, behind_launcher: bool) -> HostConfig {
    let RunLimits {
        memory,
        cpus,
        pids,
        tmp,
        ..
    } = spec.limits;
    let mut host = match wiring {
        Wiring::PassedListeners { .. } => {
            let mut host = hardened_host_config("none");
            // The launcher binds :53, :80 and :443 on the loopback without
            // CAP_NET_BIND_SERVICE (a namespaced sysctl: the sandbox's loopback only).
            host.sysctls
                .get_or_insert_with(HashMap::new)
                .insert("net.ipv4.ip_unprivileged_port_start".into(), "0".into());
            host
        }
        Wiring::RunNetwork { network, subnet } => {
            let mut host = hardened_host_config(network);
            // Docker's embedded resolver forwards every query to the proxy: no lookup
            // leaves from the host (CVE-2024-29018), and every lookup is an audit record.
            host.dns = Some(vec![subnet.proxy().to_string()]);
            host.dns_search = Some(Vec::new());
            host
        }
    };
    // memory_swap = memory: no swap on top.
    host.memory = Some(memory as i64);
    host.memory_swap = Some(memory as i64);
    host.pids_limit = Some(pids as i64);
    host.nano_cpus = Some((cpus * 1e9).round() as i64);
    // No POSIX message queue memory: mq_open works on the IPC namespace whatever is
    // mounted at /dev/mqueue, and the limit's accounting is per uid (65534 for every run).
    host.ulimits = Some(vec![
        ulimit("nofile", SANDBOX_NOFILE),
        ulimit("msgqueue", 0),
    ]);
    host.init = Some(true);
    // The writable places: /tmp and /dev/shm, each a tmpfs of --tmp bytes (Docker's own
    // /dev/shm would be 64 MiB whatever --tmp says). Docker mounts every tmpfs noexec unless
    // told `exec`; /dev/shm says it anyway.
    // /dev/mqueue, which Docker mounts writable, is replaced by an empty read-only tmpfs.
    host.shm_size = Some(tmp as i64);
    let mut tmpfs = HashMap::from([
        (
            "/tmp".to_string(),
            format!("rw,nosuid,nodev,size={tmp},mode=1777"),
        ),
        (
            "/dev/shm".to_string(),
            format!("rw,noexec,nosuid,nodev,size={tmp},mode=1777"),
        ),
        (
            "/dev/mqueue".to_string(),
            "ro,noexec,nosuid,nodev,size=4k".to_string(),
        ),
    ]);
    if behind_launcher || !spec.files.is_empty() {
        // Task files: written by the launcher (as the sandbox's user) before the command runs;
        // a sandbox behind a launcher always has the place, as its files come only with the signal.
        // Owned by that user: Docker resets a working directory's mode to 0755 at start.
        tmpfs.insert(
            super::task_files::TASK_DIR.to_string(),
            format!("rw,nosuid,nodev,size={tmp},mode=0755,uid=65534,gid=65534"),
        );
    }
    host.tmpfs = Some(tmpfs);
    let mut mounts: Vec<_> = spec
        .mounts
        .iter()
        .map(|mount| bind_mount(&mount.source, &mount.target, !mount.writable))
        .collect();
    if let Wiring::PassedListeners { doors } = wiring {
        mounts.push(bind_mount(doors, SANDBOX_DOORS_DIR, true));
    }
    host.mounts = Some(mounts);
    host
}

/// Where the launcher binary appears in the sandbox (read-only bind mount).
pub(crate) const LAUNCHER_PATH: &str = "/.egress-sandbox/launcher";

/// A sandbox started with its command held back: the `sandbox-launcher` goes in front of the
/// command and waits for the run's go signal on stdin. `binary` is the static egress-sandbox
/// binary on the engine's host, `image_entrypoint` the image's own entrypoint, which the
/// command follows.
#[derive(Clone, Debug)]
pub(crate) struct HeldStart {
    pub binary: std::path::PathBuf,
    pub image_entrypoint: Vec<String>,
}

/// What opens the launcher of a sandbox of `spec`: its command, environment, working
/// directory and task files all travel in the signal (`launch_signal`), so the container
/// itself carries nothing of the run but its create-time shape (image, limits, mounts).
pub(crate) fn launch_setup(spec: &RunSpec, proxy_ip: std::net::Ipv4Addr) -> LaunchSetup {
    LaunchSetup {
        argv: spec.command.clone(),
        env: sandbox_env(spec, proxy_ip),
        workdir: spec.workdir.clone(),
        files: spec.files.clone(),
        task_limit: None,
        raw_ports: raw_door_ports(&spec.policy_set),
    }
}

/// The sandbox container: with passed listeners, no network at all (its launcher passes the
/// doors it binds on the loopback, so it needs `held`); else on the run network at `.3`,
/// nothing else. With a launcher, the command, its environment and working directory come
/// with the launcher's signal on stdin ([`launch_setup`]; see `commands::sandbox_launcher`); without,
/// they are in the request.
pub(crate) fn sandbox_body(
    spec: &RunSpec,
    image: &str,
    wiring: &Wiring,
    hostname: &str,
    labels: &HashMap<String, String>,
    held: Option<&HeldStart>,
) -> ContainerCreateBody {
    let behind_launcher = held.is_some();
    let mut host = sandbox_host_config(spec, wiring, behind_launcher);
    host.runtime = spec.runtime.clone();
    let (entrypoint, cmd, env) = match held {
        Some(launcher) => {
            host.mounts.get_or_insert_with(Vec::new).push(bind_mount(
                &launcher.binary,
                LAUNCHER_PATH,
                true,
            ));
            // A non-empty entrypoint makes Docker ignore the image's CMD, as `run -- CMD`
            // should; the command follows the image's entrypoint (the launcher appends it).
            let mut entrypoint = vec![LAUNCHER_PATH.to_string(), "sandbox-launcher".into()];
            if let Wiring::PassedListeners { .. } = wiring {
                entrypoint.extend(["--pass-listeners".into(), wiring::sandbox_socket()]);
            }
            entrypoint.push("--".into());
            entrypoint.extend(launcher.image_entrypoint.iter().cloned());
            (Some(entrypoint), None, Vec::new())
        }
        None => (
            None,
            Some(spec.command.clone()),
            sandbox_env(spec, wiring.proxy_ip()),
        ),
    };
    if let Wiring::PassedListeners { .. } = wiring {
        // With no network Docker's /etc/hosts names only localhost; the sandbox's own name
        // is its loopback too (what `hostname -i` and `getfqdn` look up).
        host.extra_hosts = Some(vec![format!("{hostname}:127.0.0.1")]);
    }
    let networking_config = match wiring {
        Wiring::PassedListeners { .. } => None,
        Wiring::RunNetwork { network, subnet } => Some(endpoint(network, subnet.sandbox())),
    };
    ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint,
        cmd,
        hostname: Some(hostname.to_string()),
        user: Some(NOBODY.into()),
        env: Some(env),
        // Set even when the launcher enters it: Docker creates a missing one at create.
        working_dir: spec.workdir.clone(),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        // The launcher's go signal, then the caller's input; closed after it, so the command
        // sees EOF.
        attach_stdin: Some(behind_launcher),
        open_stdin: Some(behind_launcher),
        stdin_once: Some(behind_launcher),
        tty: Some(false),
        network_disabled: Some(false),
        labels: Some(labels.clone()),
        host_config: Some(host),
        networking_config,
        ..ContainerCreateBody::default()
    }
}

/// A container that runs `command` in `image` under `runtime` with no network: `doctor`'s
/// probe of whether a container starts under that runtime at all.
pub(crate) fn runtime_probe(
    runtime: &str,
    image: &str,
    command: Vec<String>,
    labels: HashMap<String, String>,
) -> ContainerConfig {
    ContainerConfig::new(ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(command),
        labels: Some(labels),
        host_config: Some(HostConfig {
            runtime: Some(runtime.to_string()),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_core::audit::OnAuditLimit;

    fn spec() -> RunSpec {
        RunSpec::builder(["python3", "-c", "print(1)"])
            .allow("api.example.com")
            .env("FOO", "bar")
            .memory(128 << 20)
            .build()
            .unwrap()
    }

    fn network() -> Wiring {
        Wiring::RunNetwork {
            network: "net".into(),
            subnet: super::super::network::RunSubnet {
                subnet: "10.213.0.8/29".parse().unwrap(),
            },
        }
    }

    fn passed() -> Wiring {
        Wiring::PassedListeners {
            doors: "/tmp/egress-sandbox-run-x/doors".into(),
        }
    }

    fn proxy_ip() -> std::net::Ipv4Addr {
        network().proxy_ip()
    }

    /// The secret goes to the proxy over stdin only; the sandbox holds a placeholder, and
    /// neither container's create request (env, args, labels) carries the value.
    #[test]
    fn secrets_travel_only_in_the_handoff() {
        let secret_value = "sk-unit-test-secret-value";
        let spec = RunSpec::builder(["true"])
            .policy_yaml(
                "cred.yaml",
                "version: 1\nallow:\n  - host: api.example.com\ncredentials:\n  - host: api.example.com\n    secret: API_KEY\n",
            )
            .timeout(std::time::Duration::from_millis(1500))
            .secret(
                "API_KEY",
                egress_core::secret::SecretValue::new(secret_value.into()),
            )
            .build()
            .unwrap();
        let handoff = proxy_handoff(&spec, "r-1");
        assert_eq!(handoff.secrets.0["API_KEY"], secret_value);
        let placeholder = &handoff.placeholders["API_KEY"];
        assert_ne!(placeholder, secret_value);
        assert_eq!(handoff.ca_lifetime_s, Some(2 + 3600));

        let env = sandbox_env(&spec, proxy_ip());
        assert!(env.contains(&format!("API_KEY={placeholder}")), "{env:?}");
        // An inspected host: the TLS clients' variables name the run's bundle.
        assert!(
            env.contains(&format!(
                "SSL_CERT_FILE={}",
                super::super::trust::BUNDLE_PATH
            )),
            "{env:?}"
        );
        let labels = HashMap::from([("egress-sandbox.run".to_string(), "r-1".to_string())]);
        let sandbox = sandbox_body(&spec, "img", &network(), "h", &labels, None);
        let proxy = proxy_body("img", &network(), "egress", &[], &labels);
        for body in [sandbox, proxy] {
            let shown = serde_json::to_string(&body).unwrap();
            assert!(!shown.contains(secret_value), "{shown}");
        }
        assert!(!format!("{spec:?}").contains(secret_value));
    }

    #[test]
    fn sandbox_is_hardened() {
        let body = sandbox_body(
            &spec(),
            "img",
            &network(),
            "sandbox-1",
            &HashMap::new(),
            None,
        );
        assert_eq!(body.cmd, Some(spec().command));
        assert_eq!(body.open_stdin, Some(false));
        assert_eq!(body.user.as_deref(), Some("65534:65534"));
        let host = body.host_config.unwrap();
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(
            host.security_opt,
            Some(vec!["no-new-privileges".to_string()])
        );
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.memory, Some(128 << 20));
        assert_eq!(host.memory_swap, host.memory);
        assert_eq!(host.pids_limit, Some(128));
        assert_eq!(host.nano_cpus, Some(1_000_000_000));
        assert_eq!(host.init, Some(true));
        assert_eq!(host.dns, Some(vec!["10.213.0.10".to_string()]));
        assert_eq!(host.log_config.unwrap().typ.as_deref(), Some("none"));
        assert!(host.port_bindings.is_none());
        assert!(host.binds.is_none());
        let tmpfs = host.tmpfs.unwrap();
        assert!(tmpfs["/tmp"].contains("size=67108864"));
        assert!(tmpfs["/dev/shm"].contains("size=67108864"));
        assert!(tmpfs["/dev/shm"].contains("noexec"));
        assert!(tmpfs["/dev/mqueue"].starts_with("ro,"));
        assert_eq!(host.shm_size, Some(67108864));
        let sysctls = host.sysctls.unwrap();
        assert_eq!(sysctls["net.ipv4.ip_forward"], "0");
        assert_eq!(sysctls["net.ipv6.conf.all.forwarding"], "0");
        let endpoints = body.networking_config.unwrap().endpoints_config.unwrap();
        let ip = endpoints["net"]
            .ipam_config
            .as_ref()
            .unwrap()
            .ipv4_address
            .clone();
        assert_eq!(ip.as_deref(), Some("10.213.0.11"));
    }

    #[test]
    fn launcher_goes_in_front_of_the_image_entrypoint_and_the_command() {
        let launcher = HeldStart {
            binary: "/usr/local/bin/egress-sandbox".into(),
            image_entrypoint: vec!["/entry".into()],
        };
        let body = sandbox_body(
            &spec(),
            "img",
            &network(),
            "h",
            &HashMap::new(),
            Some(&launcher),
        );
        assert_eq!(
            body.entrypoint.unwrap(),
            [LAUNCHER_PATH, "sandbox-launcher", "--", "/entry"]
        );
        assert_eq!(body.cmd, None);
        // The run's command and environment come with the signal, not in the request.
        assert_eq!(body.env, Some(Vec::new()));
        let setup = launch_setup(&spec(), proxy_ip());
        assert_eq!(setup.argv, ["python3", "-c", "print(1)"]);
        assert_eq!(setup.env, sandbox_env(&spec(), proxy_ip()));
        assert_eq!(body.stdin_once, Some(true));
        let mounts = body.host_config.unwrap().mounts.unwrap();
        let mount = mounts
            .iter()
            .find(|m| m.target.as_deref() == Some(LAUNCHER_PATH))
            .unwrap();
        assert_eq!(mount.read_only, Some(true));
    }

    #[test]
    fn sandbox_environment_is_only_what_was_asked_plus_the_proxy() {
        let env = sandbox_env(&spec(), proxy_ip());
        assert!(env.contains(&"FOO=bar".to_string()));
        assert!(env.contains(&"HOME=/tmp".to_string()));
        assert!(env.contains(&"https_proxy=http://10.213.0.10:3128".to_string()));
        assert!(env.contains(&"ALL_PROXY=http://10.213.0.10:3128".to_string()));
        assert!(env.contains(&"NO_PROXY=".to_string()));
        assert!(env.contains(&"PYTHONUNBUFFERED=1".to_string()));
        assert_eq!(env.len(), 11);
    }

    #[test]
    fn proxy_listens_on_its_run_address_only_and_takes_the_run_over_stdin() {
        let cmd = proxy_command(&network(), &[]);
        let joined = cmd.join(" ");
        assert!(joined.starts_with("--listen 10.213.0.10:3128 --dns-listen 10.213.0.10:53"));
        assert!(joined.contains("--transparent-listen 10.213.0.10:443"));
        assert!(joined.ends_with("--audit-log - --config-stdin"));
        let extra = [
            "192.0.3.1".parse().unwrap(),
            "2a00:1450::1".parse().unwrap(),
        ];
        assert!(
            proxy_command(&network(), &extra)
                .join(" ")
                .ends_with("--floor-extra 192.0.3.1 --floor-extra 2a00:1450::1")
        );
        let body = proxy_body("proxy:1", &network(), "egress", &[], &HashMap::new());
        assert_eq!(body.user.as_deref(), Some("65534:65534"));
        assert_eq!(body.env, Some(Vec::new()));
        assert_eq!(body.open_stdin, Some(true));
        assert_eq!(body.stdin_once, Some(true));
        let host = body.host_config.unwrap();
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(host.sysctls.unwrap()["net.ipv4.ip_forward"], "0");
    }

    #[test]
    fn the_handoff_carries_policies_allow_flags_pins_and_the_run_id() {
        let spec = RunSpec::builder(["true"])
            .policy_yaml("a=b.yaml", "version: 1\nallow:\n  - host: x.example\n")
            .allow("api.example.com")
            .resolve("api.example.com", "203.0.113.5".parse().unwrap())
            .build()
            .unwrap();
        let handoff = proxy_handoff(&spec, "r-00000001");
        assert_eq!(handoff.policies.len(), 1);
        assert_eq!(handoff.policies[0].file, "a=b.yaml");
        assert!(handoff.policies[0].yaml.contains("x.example"));
        assert_eq!(handoff.allow, ["api.example.com"]);
        assert_eq!(
            handoff.pins,
            [Pin {
                name: "api.example.com".into(),
                addr: "203.0.113.5".parse().unwrap()
            }]
        );
        assert_eq!(handoff.run_id.as_deref(), Some("r-00000001"));
        assert_eq!(handoff.audit_limit, Some(100_000));
        let spec = RunSpec::builder(["true"]).audit_limit(7).build().unwrap();
        assert_eq!(proxy_handoff(&spec, "r-1").audit_limit, Some(7));
        let spec = RunSpec::builder(["true"])
            .on_audit_limit(OnAuditLimit::Refuse)
            .build()
            .unwrap();
        assert_eq!(
            proxy_handoff(&spec, "r-1").on_audit_limit,
            Some(OnAuditLimit::Refuse)
        );
        assert!(handoff.door_ports.is_empty(), "443 is a transparent door's");
        let spec = RunSpec::builder(["true"])
            .allow("db.example.com:5432")
            .build()
            .unwrap();
        assert_eq!(proxy_handoff(&spec, "r-1").door_ports, [5432]);
    }

    /// A local run: the sandbox has no network and passes its doors, the proxy is on the
    /// egress network alone and serves them; the doors directory is the one shared thing,
    /// read-only in the sandbox.
    #[test]
    fn with_passed_listeners_the_sandbox_has_no_network_and_the_proxy_only_the_egress() {
        let launcher = HeldStart {
            binary: "/usr/local/bin/egress-sandbox".into(),
            image_entrypoint: Vec::new(),
        };
        let sandbox = sandbox_body(
            &spec(),
            "img",
            &passed(),
            "h",
            &HashMap::new(),
            Some(&launcher),
        );
        assert_eq!(
            sandbox.entrypoint.unwrap(),
            [
                LAUNCHER_PATH,
                "sandbox-launcher",
                "--pass-listeners",
                "/.egress-sandbox/doors/listeners.sock",
                "--"
            ]
        );
        assert!(sandbox.networking_config.is_none());
        let host = sandbox.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.dns, None, "Docker refuses --dns with --network none");
        assert_eq!(
            host.sysctls.unwrap()["net.ipv4.ip_unprivileged_port_start"],
            "0"
        );
        let mounts = host.mounts.unwrap();
        let doors = mounts
            .iter()
            .find(|m| m.target.as_deref() == Some(SANDBOX_DOORS_DIR))
            .unwrap();
        assert_eq!(doors.read_only, Some(true));
        assert_eq!(
            doors.source.as_deref(),
            Some("/tmp/egress-sandbox-run-x/doors")
        );

        let proxy = proxy_body("proxy:1", &passed(), "egress", &[], &HashMap::new());
        assert!(proxy.networking_config.is_none());
        let cmd = proxy.cmd.unwrap().join(" ");
        assert_eq!(
            cmd,
            "--listeners-from /doors/listeners.sock --dns-answer 127.0.0.1 --audit-log - --config-stdin"
        );
        let host = proxy.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("egress"));
        let sysctls = host.sysctls.clone().unwrap();
        assert!(
            !sysctls.contains_key("net.ipv4.ip_unprivileged_port_start"),
            "a proxy that binds nothing may not bind low ports either: {sysctls:?}"
        );
        let mounts = host.mounts.unwrap();
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].target.as_deref(), Some(PROXY_DOORS_DIR));
        assert_eq!(mounts[0].read_only, Some(false));

        let env = launch_setup(&spec(), passed().proxy_ip()).env;
        assert!(
            env.contains(&"HTTPS_PROXY=http://127.0.0.1:3128".to_string()),
            "{env:?}"
        );
    }

    #[test]
    fn the_launcher_binds_the_proxys_ports_on_the_loopback() {
        let doors = loopback_doors(&[5432, 18080]);
        assert_eq!(doors.explicit.to_string(), "127.0.0.1:3128");
        assert_eq!(doors.dns.unwrap().to_string(), "127.0.0.1:53");
        let on_every_address = |addrs: &[std::net::SocketAddrV4]| {
            addrs.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert_eq!(
            on_every_address(&doors.transparent),
            ["0.0.0.0:443", "0.0.0.0:80"]
        );
        assert_eq!(
            on_every_address(&doors.raw),
            ["0.0.0.0:5432", "0.0.0.0:18080"]
        );
    }

    #[test]
    fn raw_doors_are_the_host_rules_ports_but_the_proxys_own_and_bounded() {
        let (policy, _) = egress_core::policy::Policy::from_yaml(
            "t.yaml",
            "version: 1\nallow:\n  - host: a.test\n    ports: [53, 80, 443, 3128, 8443, 18080]\n  - cidr: 10.0.0.0/8\n    ports: [9000]\n",
        )
        .unwrap();
        let set = egress_core::policy::PolicySet::from(policy);
        assert_eq!(raw_door_ports(&set), [8443, 18080]);
        let many: Vec<String> = (20000..20100)
            .map(|port| format!("a.test:{port}"))
            .collect();
        let set = egress_core::policy::PolicySet::from(
            egress_core::policy::Policy::from_allow_flags(&many).unwrap(),
        );
        let ports = raw_door_ports(&set);
        assert_eq!(ports.len(), egress_core::doors::MAX_RAW_DOORS);
        assert_eq!(ports[0], 20000);
        let spec = RunSpec::builder(["true"])
            .allow("api.example.com:8443")
            .allow("api.example.com")
            .build()
            .unwrap();
        assert_eq!(launch_setup(&spec, proxy_ip()).raw_ports, [8443]);
    }
}
