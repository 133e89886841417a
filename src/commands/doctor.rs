//! `egress-sandbox doctor`: can a run work here, and if not, what to do. One line per check,
//! `ok`, `warn` (runs work, something is worth knowing) or `FAIL` (runs cannot work, or
//! would not be held to their limits), each failure with what to do. Exit 0 when a run can
//! work, 1 otherwise.
//!
//! Each runtime the engine registers is probed: a container of the proxy image (made from
//! this binary, `FROM scratch`, so no base image is needed) starts under it with no network
//! and runs `egress-sandbox --version`. The line says what the runtime is (from its
//! registration) and which wiring a run under it would get.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

use crate::cli::DoctorArgs;
use egress_sandbox::BASE_IMAGE;
use egress_sandbox::DockerEngine;
use egress_sandbox::EGRESS_NETWORK;
use egress_sandbox::engine::{ContainerEngine, EngineFacts};
use egress_sandbox::private_dir;
use egress_sandbox::with_causes;
use egress_sandbox::{Owner, RunNames};
use egress_sandbox::{RuntimeInfo, RuntimeKind, WiringChoice};

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
struct Check {
    status: Status,
    name: String,
    detail: String,
    /// What to do, when it is not `Ok`.
    hint: Option<String>,
}

impl Check {
    fn ok(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            status: Status::Ok,
            name: name.into(),
            detail: detail.into(),
            hint: None,
        }
    }

    fn not_ok(
        status: Status,
        name: impl Into<String>,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) -> Check {
        Check {
            status,
            name: name.into(),
            detail: detail.into(),
            hint: Some(hint.into()),
        }
    }

    fn line(&self) -> String {
        let status = match self.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        let hint = self
            .hint
            .as_ref()
            .map(|hint| format!(" — {hint}"))
            .unwrap_or_default();
        format!("{status} {}: {}{hint}", self.name, self.detail)
    }
}

pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let DoctorArgs {} = args;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let checks = runtime.block_on(checks());
    let mut failed = false;
    for check in &checks {
        failed |= check.status == Status::Fail;
        super::print_out(&format!("{}\n", egress_core::text::visible(&check.line())));
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn checks() -> Vec<Check> {
    let mut checks = Vec::new();
    let engine = match DockerEngine::connect().await {
        Ok(engine) => engine,
        Err(error) => {
            checks.push(Check::not_ok(
                Status::Fail,
                "engine",
                with_causes(&error),
                "start the Docker engine, or point DOCKER_HOST at one that answers (`docker version` must work)",
            ));
            return checks;
        }
    };
    let engine: &dyn ContainerEngine = &engine;
    let facts = match engine.facts().await {
        Ok(facts) => facts,
        Err(error) => {
            checks.push(Check::not_ok(
                Status::Fail,
                "engine",
                with_causes(&error),
                "check that this user may use the engine (`docker info` must work)",
            ));
            return checks;
        }
    };
    checks.push(Check::ok(
        "engine",
        format!(
            "Docker {} at {} (API {}, this client speaks {}){}",
            facts.version,
            engine.host(),
            facts.api_version,
            facts.negotiated_api,
            if engine.is_local() {
                ""
            } else {
                "; remote: runs get a network of their own, no host mounts"
            }
        ),
    ));
    checks.push(storage_check(&facts));
    checks.push(cgroup_check(&facts));
    checks.push(temp_dir_check());
    let proxy_image = proxy_image_check(engine).await;
    let probe_image = proxy_image.as_ref().ok().cloned();
    checks.push(match proxy_image {
        Ok(image) => Check::ok("proxy image", format!("{image} (made from this binary)")),
        Err(check) => check,
    });
    checks.push(base_image_check(engine).await);
    checks.push(egress_network_check(engine).await);
    checks.extend(runtime_checks(engine, probe_image.as_deref()).await);
    checks
}

fn storage_check(facts: &EngineFacts) -> Check {
    if facts.storage_driver == "vfs" {
        return Check::not_ok(
            Status::Warn,
            "storage",
            "vfs: every container copies its whole image, so each run starts slowly",
            "configure overlay2 (or fuse-overlayfs) as the engine's storage driver",
        );
    }
    Check::ok("storage", facts.storage_driver.clone())
}

/// Each run limit needs a controller: memory (and swap, so memory is not exceeded through
/// swap), the CPU quota, pids.
fn cgroup_check(facts: &EngineFacts) -> Check {
    let controllers = [
        ("memory", facts.memory_limit, "--memory"),
        ("swap", facts.swap_limit, "--memory (swap)"),
        ("cpu quota", facts.cpu_quota, "--cpus"),
        ("pids", facts.pids_limit, "--pids"),
    ];
    let missing: Vec<&str> = controllers
        .iter()
        .filter(|(_, present, _)| !present)
        .map(|(_, _, limit)| *limit)
        .collect();
    let version = if facts.cgroup_version.is_empty() {
        String::new()
    } else {
        format!("cgroup v{}: ", facts.cgroup_version)
    };
    if missing.is_empty() {
        return Check::ok(
            "cgroups",
            format!("{version}memory, swap, cpu quota and pids controllers"),
        );
    }
    Check::not_ok(
        Status::Fail,
        "cgroups",
        format!(
            "{version}the engine cannot enforce {} (its controller is missing)",
            missing.join(", ")
        ),
        "enable the controller on the engine's host (cgroup v2: `cgroup_enable=memory swapaccount=1` on the kernel command line, or the pids/cpu controllers delegated to Docker), then restart the engine",
    )
}

/// Runs keep their resolv.conf, doors and trust bundle in private directories under the
/// temp directory, which the engine mounts: it must be writable and on the engine's host.
/// The launcher's places are in the user's own directory there, which no one else may own
/// or write.
fn temp_dir_check() -> Check {
    let temp = std::env::temp_dir();
    if let Err(error) = tempfile::Builder::new()
        .prefix("egress-sandbox-doctor-")
        .tempdir()
    {
        return Check::not_ok(
            Status::Fail,
            "temp directory",
            format!("cannot create a directory in {}: {error}", temp.display()),
            "set TMPDIR to a writable directory on this host",
        );
    }
    match private_dir::ensure(&private_dir::user_temp_dir()) {
        Ok(own) => Check::ok(
            "temp directory",
            format!(
                "{} is writable; {} is private",
                temp.display(),
                own.display()
            ),
        ),
        Err(error) => Check::not_ok(
            Status::Fail,
            "temp directory",
            error.to_string(),
            "remove it if another user made it, or set TMPDIR to a directory of your own",
        ),
    }
}

async fn proxy_image_check(engine: &dyn ContainerEngine) -> Result<String, Check> {
    let binary = std::env::current_exe().map_err(|error| {
        Check::not_ok(
            Status::Fail,
            "proxy image",
            format!("cannot find this binary: {error}"),
            "run egress-sandbox from a path that exists",
        )
    })?;
    egress_sandbox::ensure_proxy_image(engine, &binary)
        .await
        .map_err(|error| {
            Check::not_ok(
                Status::Fail,
                "proxy image",
                with_causes(&error),
                "the proxy image is made from this binary, which must be the static build",
            )
        })
}

async fn base_image_check(engine: &dyn ContainerEngine) -> Check {
    match egress_sandbox::require_local_image(engine, BASE_IMAGE).await {
        Ok(()) => Check::ok("base image", BASE_IMAGE),
        Err(_) if on_path("debootstrap") => Check::not_ok(
            Status::Warn,
            "base image",
            format!("{BASE_IMAGE} is not built yet"),
            "the first run builds it with debootstrap (a few minutes)",
        ),
        Err(_) => Check::not_ok(
            Status::Fail,
            "base image",
            format!("{BASE_IMAGE} is not built, and debootstrap is not installed to build it"),
            "install debootstrap (apt-get install debootstrap), or give every run an --image of your own",
        ),
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| Path::new(&dir).join(program).is_file())
    })
}

async fn egress_network_check(engine: &dyn ContainerEngine) -> Check {
    match engine.network_subnets(EGRESS_NETWORK).await {
        Ok(Some(subnets)) => Check::ok(
            "egress network",
            format!("{EGRESS_NETWORK} ({})", subnets.join(", ")),
        ),
        Ok(None) => Check::ok(
            "egress network",
            format!("{EGRESS_NETWORK} does not exist yet; the first run creates it"),
        ),
        Err(error) => Check::not_ok(
            Status::Fail,
            "egress network",
            format!("cannot inspect {EGRESS_NETWORK}: {}", with_causes(&error)),
            "check the engine's networks (`docker network ls`)",
        ),
    }
}

/// One line per registered runtime: does a container start under it, what it is, which
/// wiring a run would get. Only the default runtime failing fails the report: runs that
/// name no runtime still work.
async fn runtime_checks(engine: &dyn ContainerEngine, probe_image: Option<&str>) -> Vec<Check> {
    let registry = match engine.runtime_registry().await {
        Ok(registry) => registry,
        Err(error) => {
            return vec![Check::not_ok(
                Status::Fail,
                "runtimes",
                with_causes(&error),
                "check that `docker info` works",
            )];
        }
    };
    let owner = Owner::current().ok();
    let mut checks = Vec::new();
    for info in registry.runtimes.values() {
        let is_default = info.name == registry.default;
        let name = if is_default {
            format!("runtime {} (default)", info.name)
        } else {
            format!("runtime {}", info.name)
        };
        let wiring = info.kind.wiring(engine.is_local());
        let what = format!("{}; a run gets {}", info.kind.describe(), wiring.describe());
        let started = match (probe_image, &owner) {
            (Some(image), Some(owner)) => Some(probe(engine, info, image, owner).await),
            _ => None,
        };
        let failing = if is_default {
            Status::Fail
        } else {
            Status::Warn
        };
        checks.push(match started {
            None => Check::not_ok(
                Status::Warn,
                name,
                format!("not probed (no probe image); {what}"),
                "fix the proxy image first",
            ),
            Some(Err(message)) => Check::not_ok(
                failing,
                name,
                format!("a container does not start under it: {message}"),
                runtime_hint(info),
            ),
            Some(Ok(())) if wiring == WiringChoice::Unusable => {
                Check::not_ok(failing, name, format!("starts; {what}"), runtime_hint(info))
            }
            Some(Ok(())) => Check::ok(name, format!("starts; {what}")),
        });
    }
    checks
}

async fn probe(
    engine: &dyn ContainerEngine,
    info: &RuntimeInfo,
    image: &str,
    owner: &Owner,
) -> Result<(), String> {
    // Named and labelled as a run's objects are, so `gc` or the watchdog removes it should
    // this process die while it exists.
    let names = RunNames::generate();
    let command = vec![
        format!("/{}", egress_sandbox::PROXY_BINARY_IN_IMAGE),
        "--version".into(),
    ];
    engine
        .probe_runtime(
            &names.sandbox,
            &info.name,
            image,
            command,
            owner.labels(&names.id),
        )
        .await
}

fn runtime_hint(info: &RuntimeInfo) -> String {
    match info.kind {
        RuntimeKind::Gvisor { .. } => format!(
            "register gVisor with a network mode that starts here: scripts/gvisor-setup.sh does it (runtimeArgs [\"--network=host\"] in {} under \"runtimes\", then SIGHUP to dockerd)",
            "/etc/docker/daemon.json"
        ),
        _ => format!(
            "check the registration of {} in /etc/docker/daemon.json and the engine's log",
            info.name
        ),
    }
}
