//! A run's set-up in two parts, shared by cold runs and `serve`'s warm pool:
//!
//! - **the slot** ([`SlotObjects::prepare`]): images, the wiring (on a local engine the
//!   doors directory, the sandbox having no network; on a remote one the run network), the
//!   proxy created, attached, started and waiting for its handoff on stdin (it binds nothing
//!   before it), and the sandbox created — on a local engine also started, its command held
//!   by the launcher.
//!   What it is made of depends only on the run's create-time shape: image, tmp size,
//!   mounts, runtime, egress network, subnet pool, the trust bundle. A pool prepares slots
//!   of the default shape ahead of time (and connects their proxy to the egress network,
//!   [`SlotObjects::connect_egress`]); a cold run prepares one of its own shape.
//! - **the claim** ([`SlotObjects::claim`]): the live limits (memory, cpus, pids) set with
//!   `docker update` when they differ from the slot's, the handoff written to the proxy
//!   (connecting it to the egress network meanwhile if not yet), its ready line awaited,
//!   the trust bundle filled. Then the run's command goes through the launcher
//!   ([`launch_setup`](super::container::launch_setup)).
//!
//! A slot serves one run: its objects are that run's, named by its run id, labelled with
//! its owner, registered with its [`Teardown`] before they exist. Each step is a method of
//! its own, talking to the engine through [`ContainerEngine`], so the fake engine's tests
//! fail each call in turn.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::audit_tee::AuditTee;
use crate::audit_trail::{self, ProxyOutput};
use crate::container::{HeldStart, proxy_body, proxy_handoff, sandbox_body};
use crate::engine::{
    ContainerConfig, ContainerEngine, DockerError, ImageFacts, LiveLimits, OutputFrames,
    StdinWriter,
};
use crate::handle::Sandbox;
use crate::images;
use crate::labels::{Owner, RunNames, random_hostname};
use crate::network::{self, EGRESS_NETWORK};
use crate::outcome::{RunError, docker_step};
use crate::resolv::ResolvConf;
use crate::runtime::{RuntimeKind, WiringChoice, host_pids_for};
use crate::spec::RunSpec;
use crate::task_files::TASK_DIR;
use crate::teardown::Teardown;
use crate::trust::{self, TrustBundle};
use crate::wiring::{DoorsDir, Wiring};

/// How long the proxy may take from its handoff to its ready line.
pub(crate) const PROXY_READY_TIMEOUT: Duration = Duration::from_secs(15);

impl LiveLimits {
    /// The live limits `spec` asks for.
    pub(crate) fn of(spec: &RunSpec) -> LiveLimits {
        LiveLimits {
            memory: spec.limits.memory,
            nano_cpus: (spec.limits.cpus * 1e9).round() as i64,
            pids: spec.limits.pids,
        }
    }
}

/// The host pids cgroup limit of a sandbox under `runtime` limited to `tasks` tasks: the
/// limit itself, unless the runtime's own threads are in that cgroup (gVisor), where the
/// launcher carries the limit inside (`RLIMIT_NPROC`) and the cgroup leaves room around it.
fn host_pids(runtime: RuntimeKind, tasks: u64) -> u64 {
    if runtime.counts_tasks_itself() {
        host_pids_for(tasks)
    } else {
        tasks
    }
}

/// Why a run cannot use a slot prepared for `template` (it takes the cold path), or
/// `None` when it can: everything set at create time must be the same. (Whether the slot
/// has the trust bundle a policy that inspects hosts needs is the slot's own: [`trust_fits`].)
pub(crate) fn unfit(template: &RunSpec, spec: &RunSpec) -> Option<&'static str> {
    let egress = |spec: &RunSpec| {
        spec.egress_network
            .clone()
            .unwrap_or_else(|| EGRESS_NETWORK.to_string())
    };
    if spec.image != template.image {
        Some("another image")
    } else if !spec.mounts.is_empty() {
        Some("mounts")
    } else if spec.runtime != template.runtime {
        Some("a runtime")
    } else if spec.limits.tmp != template.limits.tmp {
        Some("another tmp size")
    } else if egress(spec) != egress(template) {
        Some("another egress network")
    } else if spec.subnet_pool != template.subnet_pool {
        Some("another subnet pool")
    } else if !matches!(
        spec.workdir.as_deref(),
        None | Some("/" | "/tmp" | TASK_DIR)
    ) {
        // Docker creates a missing working directory at create; a slot has only these.
        Some("a working directory made at create")
    } else {
        None
    }
}

/// Whether a slot whose sandbox has (`trust_mounted`) or lacks the trust bundle can serve
/// `spec`: a policy that inspects a host needs it, and it is a bind mount, made at create.
pub(crate) fn trust_fits(spec: &RunSpec, trust_mounted: bool) -> bool {
    trust_mounted || spec.policy_set.inspected_hosts().is_empty()
}

/// One run's objects, from before they exist until they are removed.
pub(crate) struct SlotObjects {
    pub(crate) engine: Arc<dyn ContainerEngine>,
    pub(crate) names: RunNames,
    pub(crate) labels: HashMap<String, String>,
    /// Whose run this is: stamped in its host directories too (`host_dirs`).
    owner: Owner,
    pub(crate) teardown: Teardown,
    /// The sandbox's CA bundle file, when some host is inspected.
    pub(crate) trust: Option<TrustBundle>,
    /// The sandbox's resolv.conf naming the proxy (local engines), made with the sandbox's
    /// create request; held until the run's objects are gone.
    resolv: std::sync::OnceLock<ResolvConf>,
    /// The directory the sandbox passes its doors through (local engines), held likewise.
    doors: std::sync::OnceLock<DoorsDir>,
}

/// A slot ready to be claimed: the proxy waits for its handoff, the sandbox (held by its launcher) for
/// its command.
pub(crate) struct Slot {
    image: String,
    wiring: Wiring,
    /// What the sandbox's runtime is: how its task limit is enforced.
    runtime: RuntimeKind,
    egress: String,
    egress_connected: bool,
    limits: LiveLimits,
    proxy_frames: OutputFrames,
    proxy_stdin: StdinWriter,
    sandbox_output: OutputFrames,
    /// The started sandbox's stdin, where its launcher waits; `None`: no launcher, not started.
    launcher: Option<StdinWriter>,
    /// The image's own CA bundle, when the trust bundle is to be filled at the claim.
    image_bundle: Arc<[u8]>,
    /// The sandbox's host name when its resolv.conf names the proxy, which is told it at
    /// the claim (it answers that name itself, without a record).
    resolv_hostname: Option<String>,
}

/// A claimed slot: everything ready to let the command go.
pub(crate) struct Prepared {
    pub image: String,
    pub wiring: Wiring,
    pub runtime: RuntimeKind,
    pub proxy: ProxyOutput,
    pub sandbox_output: OutputFrames,
    pub launcher: Option<StdinWriter>,
}

impl Slot {
    /// Whether the claim can hold `spec` to its limits in this slot: always where the
    /// engine changes a live container's limits; else (gVisor) only with the slot's memory
    /// and cpus and a task limit no higher than its own (the host cgroup's room was sized
    /// for that, and the launcher lowers `RLIMIT_NPROC` to the run's).
    pub(crate) fn limits_fit(&self, spec: &RunSpec) -> bool {
        if self.runtime.updates_live_limits() {
            return true;
        }
        let wanted = LiveLimits::of(spec);
        wanted.memory == self.limits.memory
            && wanted.nano_cpus == self.limits.nano_cpus
            && wanted.pids <= self.limits.pids
    }
}

impl SlotObjects {
    /// Fresh names and labels for one run of `sandbox`'s owner; nothing exists yet.
    pub(crate) fn new(sandbox: &Sandbox, trust: Option<TrustBundle>) -> SlotObjects {
        let names = RunNames::generate();
        let engine = sandbox.shared_engine();
        SlotObjects {
            engine: engine.clone(),
            labels: sandbox.owner().labels(&names.id),
            owner: sandbox.owner().clone(),
            teardown: Teardown::new(engine.clone(), &names.id),
            names,
            trust,
            resolv: std::sync::OnceLock::new(),
            doors: std::sync::OnceLock::new(),
        }
    }

    /// Images, networks, both containers, for runs shaped like `template`. The proxy is
    /// started and waits for its handoff; on a local engine the sandbox is started too,
    /// behind its launcher.
    pub(crate) async fn prepare(
        &self,
        sandbox: &Sandbox,
        template: &RunSpec,
    ) -> Result<Slot, RunError> {
        let behind_launcher = self.engine.is_local();
        if !behind_launcher && !template.files.is_empty() {
            return Err(RunError::FilesNeedLocalEngine);
        }
        let ready = self.gather(sandbox, template, behind_launcher).await?;
        tracing::debug!(proxy_image = %ready.proxy_image, image = %ready.image, wiring = ?ready.wiring, "images and wiring ready");
        let held = if behind_launcher {
            Some(held_start(sandbox, &ready.proxy_image, ready.facts.entrypoint.clone()).await?)
        } else {
            None
        };
        let hostname = random_hostname();
        let ((proxy_frames, proxy_stdin), (sandbox_output, launcher), image_bundle) = tokio::try_join!(
            self.start_proxy(
                &ready.proxy_image,
                &ready.wiring,
                &ready.egress,
                &ready.floor_extra
            ),
            self.create_sandbox(
                template,
                &ready.image,
                &ready.wiring,
                ready.runtime,
                &hostname,
                held.as_ref()
            ),
            self.image_bundle(sandbox, &ready.image, &ready.facts.id),
        )?;
        // With passed listeners the proxy is created on the egress network: nothing to connect.
        let egress_connected = matches!(ready.wiring, Wiring::PassedListeners { .. });
        Ok(Slot {
            image: ready.image,
            wiring: ready.wiring,
            runtime: ready.runtime,
            egress: ready.egress,
            egress_connected,
            limits: LiveLimits::of(template),
            proxy_frames,
            proxy_stdin,
            sandbox_output,
            launcher,
            image_bundle,
            // The proxy answers this name itself only where resolv.conf sends lookups to it.
            resolv_hostname: behind_launcher.then_some(hostname),
        })
    }

    /// What the containers are made from, each part found or made alongside the others:
    /// the proxy image, the run's image, the egress network and the proxy's floor, the wiring.
    async fn gather(
        &self,
        sandbox: &Sandbox,
        template: &RunSpec,
        behind_launcher: bool,
    ) -> Result<Ingredients, RunError> {
        let (proxy_image, (image, facts), (egress, floor_extra), (wiring, runtime)) = tokio::try_join!(
            async { sandbox.proxy_image().await.map_err(RunError::from) },
            self.run_image(sandbox, template, behind_launcher),
            self.egress(template, behind_launcher),
            self.wiring(template, behind_launcher),
        )?;
        Ok(Ingredients {
            proxy_image,
            image,
            facts,
            egress,
            floor_extra,
            wiring,
            runtime,
        })
    }

    /// The image the sandbox runs (`--image`, which must exist, else the base image) and,
    /// when a launcher goes in front of it, what the launcher needs of it.
    async fn run_image(
        &self,
        sandbox: &Sandbox,
        template: &RunSpec,
        behind_launcher: bool,
    ) -> Result<(String, ImageFacts), RunError> {
        let image = match &template.image {
            Some(image) => images::require_local_image(&*self.engine, image)
                .await
                .map(|()| image.clone())?,
            None => sandbox.base_image().await?,
        };
        let facts = if behind_launcher {
            self.engine
                .inspect_image(&image)
                .await
                .map_err(docker_step(format!("inspect the image {image}")))?
        } else {
            ImageFacts::default()
        };
        Ok((image, facts))
    }

    /// The egress network's id and the addresses the proxy refuses besides the private
    /// floor (the egress gateways; with a local engine, this host's own addresses).
    async fn egress(
        &self,
        template: &RunSpec,
        behind_launcher: bool,
    ) -> Result<(String, Vec<IpAddr>), RunError> {
        let engine = &*self.engine;
        let egress = network::egress_network(engine, template.egress_network.as_deref()).await?;
        let gateways = network::gateways(engine, &egress).await?;
        // This host's addresses are the engine host's only when the engine is local.
        let host_addresses = if behind_launcher {
            network::host_addresses().map_err(RunError::HostAddresses)?
        } else {
            Vec::new()
        };
        Ok((egress, network::floor_extra(&gateways, &host_addresses)))
    }

    /// How the sandbox reaches its proxy under the template's runtime: the doors directory
    /// its launcher passes them through, or a network of the run's own.
    async fn wiring(
        &self,
        template: &RunSpec,
        behind_launcher: bool,
    ) -> Result<(Wiring, RuntimeKind), RunError> {
        let runtime = self
            .engine
            .runtime_kind(template.runtime.as_deref())
            .await?;
        match runtime.wiring(behind_launcher) {
            WiringChoice::PassedListeners => {
                // No network of its own: the launcher passes the sandbox's doors.
                let doors = DoorsDir::create(&self.owner).map_err(RunError::DoorsDir)?;
                let wiring = Wiring::PassedListeners {
                    doors: doors.path().to_path_buf(),
                };
                let _ = self.doors.set(doors);
                Ok((wiring, runtime))
            }
            WiringChoice::RunNetwork => Ok((self.run_network(template).await?, runtime)),
            WiringChoice::Unusable => Err(RunError::RuntimeUnreachable {
                name: template.runtime.clone().unwrap_or_default(),
                kind: runtime.describe(),
            }),
        }
    }

    /// Both containers on a network of this run's own.
    async fn run_network(&self, template: &RunSpec) -> Result<Wiring, RunError> {
        self.teardown.track_network(&self.names.network);
        let subnet = self
            .teardown
            .complete(network::create_run_network(
                self.engine.clone(),
                template.subnet_pool,
                self.names.network.clone(),
                self.labels.clone(),
            ))
            .await?;
        Ok(Wiring::RunNetwork {
            network: self.names.network.clone(),
            subnet,
        })
    }

    /// The image's own CA bundle, when the trust bundle is to be filled at the claim: read
    /// from a probe container while the proxy starts, unless this handle read it for the
    /// same image (id `image_id`) before. (A trust bundle implies a local engine, so the
    /// image was inspected and its id is known.)
    async fn image_bundle(
        &self,
        sandbox: &Sandbox,
        image: &str,
        image_id: &str,
    ) -> Result<Arc<[u8]>, RunError> {
        if self.trust.is_none() {
            return Ok(Arc::from(&[][..]));
        }
        if let Some(bundle) = sandbox.kept_image_bundle(image_id) {
            tracing::debug!(bytes = bundle.len(), "image CA bundle known");
            return Ok(bundle);
        }
        let probe = trust::probe_name(&self.names.sandbox);
        let bundle: Arc<[u8]> =
            trust::image_bundle(&self.engine, &self.teardown, image, &probe, &self.labels)
                .await?
                .into();
        tracing::debug!(bytes = bundle.len(), "image CA bundle read");
        if !image_id.is_empty() {
            sandbox.keep_image_bundle(image_id, bundle.clone());
        }
        Ok(bundle)
    }

    /// Connects the slot's proxy to the egress network ahead of its claim. Safe before the
    /// handoff: the proxy binds nothing until it has read it, and the sandbox's only way
    /// anywhere is the proxy.
    pub(crate) async fn connect_egress(&self, slot: &mut Slot) -> Result<(), RunError> {
        if !slot.egress_connected {
            self.connect_proxy(&slot.egress).await?;
            slot.egress_connected = true;
        }
        Ok(())
    }

    async fn connect_proxy(&self, egress: &str) -> Result<(), RunError> {
        self.engine
            .connect_network(egress, &self.names.proxy)
            .await
            .map_err(docker_step("connect the proxy to the egress network"))?;
        tracing::debug!("proxy connected to the egress network");
        Ok(())
    }

    /// Hands `spec` to the slot: live limits, the proxy's handoff and ready line, the
    /// trust bundle. The command is still held (launcher) or not started.
    pub(crate) async fn claim(
        &self,
        slot: Slot,
        spec: &RunSpec,
        audit_log: Option<AuditTee>,
    ) -> Result<Prepared, RunError> {
        let mut proxy = audit_trail::spawn_reader(slot.proxy_frames, audit_log);
        // Connected after the start rather than before: a start with one network is
        // cheaper, and the proxy's ready line comes meanwhile. The launcher opens only after
        // both, so the command never runs before the proxy can reach the outside.
        let connect = async {
            if !slot.egress_connected {
                self.connect_proxy(&slot.egress).await?;
            }
            Ok::<_, RunError>(())
        };
        tokio::try_join!(
            self.update_limits(slot.runtime, slot.limits, spec),
            self.hand_off(slot.proxy_stdin, spec, slot.resolv_hostname.clone()),
            connect,
        )?;
        let ready = await_ready(&mut proxy).await?;
        tracing::debug!("proxy ready");
        // The command is still held by its launcher: it sees the full bundle from its start.
        if let Some(trust) = &self.trust {
            trust.fill(&slot.image_bundle, ready.ca.as_deref())?;
            tracing::debug!(run_ca = ready.ca.is_some(), "sandbox CA bundle written");
        }
        Ok(Prepared {
            image: slot.image,
            wiring: slot.wiring,
            runtime: slot.runtime,
            proxy,
            sandbox_output: slot.sandbox_output,
            launcher: slot.launcher,
        })
    }

    /// Sets `spec`'s live limits on the sandbox when they differ from the slot's. Under a
    /// runtime whose limits stay those of the create, the slot fits only runs that need no
    /// update (`Slot::limits_fit`); the launcher lowers the task limit itself.
    async fn update_limits(
        &self,
        runtime: RuntimeKind,
        slot_limits: LiveLimits,
        spec: &RunSpec,
    ) -> Result<(), RunError> {
        let limits = LiveLimits::of(spec);
        if limits == slot_limits || !runtime.updates_live_limits() {
            return Ok(());
        }
        let host = LiveLimits {
            pids: host_pids(runtime, limits.pids),
            ..limits
        };
        self.engine
            .update_container(&self.names.sandbox, host)
            .await
            .map_err(docker_step("update the sandbox's limits"))?;
        tracing::debug!(?limits, "sandbox limits updated");
        Ok(())
    }

    /// The run's own configuration goes over the proxy's stdin, never into arguments
    /// (visible to `docker inspect`); the proxy reads this one line before it binds anything.
    async fn hand_off(
        &self,
        mut stdin: StdinWriter,
        spec: &RunSpec,
        sandbox_hostname: Option<String>,
    ) -> Result<(), RunError> {
        use tokio::io::AsyncWriteExt;
        let mut handoff = proxy_handoff(spec, &self.names.id);
        handoff.sandbox_hostname = sandbox_hostname;
        let line = handoff.to_line();
        stdin
            .write_all(line.as_bytes())
            .await
            .and(stdin.shutdown().await)
            .map_err(|source| RunError::Handoff { source })?;
        tracing::debug!("handoff written to the proxy");
        Ok(())
    }

    /// Creates, attaches to and starts the proxy; it waits for its handoff on stdin.
    async fn start_proxy(
        &self,
        image: &str,
        wiring: &Wiring,
        egress: &str,
        floor_extra: &[IpAddr],
    ) -> Result<(OutputFrames, StdinWriter), RunError> {
        let name = self.names.proxy.as_str();
        let body = proxy_body(image, wiring, egress, floor_extra, &self.labels);
        self.create_tracked(
            name,
            ContainerConfig::new(body),
            "create the proxy container",
        )
        .await?;
        tracing::debug!("proxy created");
        let attached = self.attach_with_stdin(name, "attach to the proxy").await?;
        self.engine
            .start_container(name)
            .await
            .map_err(docker_step("start the proxy"))?;
        tracing::debug!("proxy started");
        Ok(attached)
    }

    /// Creates container `name`, registered with the teardown before the request goes out
    /// and completed even if this future is dropped (see `Teardown::complete`).
    async fn create_tracked(
        &self,
        name: &str,
        config: ContainerConfig,
        step: &str,
    ) -> Result<(), RunError> {
        self.teardown.track_container(name);
        let creation = {
            let (engine, name) = (self.engine.clone(), name.to_owned());
            async move { engine.create_container(&name, config).await }
        };
        self.teardown
            .complete(creation)
            .await
            .map_err(docker_step(step))?;
        Ok(())
    }

    /// The container's output and a writer to its stdin.
    async fn attach_with_stdin(
        &self,
        name: &str,
        step: &str,
    ) -> Result<(OutputFrames, StdinWriter), RunError> {
        let attached = self
            .engine
            .attach_container(name, true)
            .await
            .map_err(docker_step(step))?;
        let stdin = attached.stdin.ok_or_else(|| {
            docker_step(step)(DockerError::Protocol {
                message: format!("the attach to {name} gave no stdin"),
            })
        })?;
        Ok((attached.output, stdin))
    }

    /// Creates the sandbox and attaches to it; with a launcher, also starts it (the command
    /// waits behind the launcher) and returns the launcher's stdin.
    async fn create_sandbox(
        &self,
        template: &RunSpec,
        image: &str,
        wiring: &Wiring,
        runtime: RuntimeKind,
        hostname: &str,
        held: Option<&HeldStart>,
    ) -> Result<(OutputFrames, Option<StdinWriter>), RunError> {
        let name = self.names.sandbox.as_str();
        let config = self.sandbox_config(template, image, wiring, runtime, hostname, held)?;
        self.create_tracked(name, config, "create the sandbox container")
            .await?;
        if held.is_none() {
            let attached = self
                .engine
                .attach_container(name, false)
                .await
                .map_err(docker_step("attach to the sandbox"))?;
            return Ok((attached.output, None));
        }
        let (output, stdin) = self
            .attach_with_stdin(name, "attach to the sandbox")
            .await?;
        self.engine
            .start_container(name)
            .await
            .map_err(docker_step("start the sandbox"))?;
        tracing::debug!("sandbox started behind its launcher");
        Ok((output, Some(stdin)))
    }

    /// The sandbox's create request: its host pids limit for `runtime`, the trust bundle's
    /// mounts, and (behind a launcher, so a local engine: only that one mounts a host file)
    /// its resolv.conf naming the proxy.
    fn sandbox_config(
        &self,
        template: &RunSpec,
        image: &str,
        wiring: &Wiring,
        runtime: RuntimeKind,
        hostname: &str,
        held: Option<&HeldStart>,
    ) -> Result<ContainerConfig, RunError> {
        let mut body = sandbox_body(template, image, wiring, hostname, &self.labels, held);
        if let Some(host) = body.host_config.as_mut() {
            host.pids_limit = Some(host_pids(runtime, template.limits.pids) as i64);
        }
        if let Some(trust) = &self.trust {
            trust.add_to(&mut body);
        }
        if held.is_some() {
            let resolv =
                ResolvConf::create(wiring.proxy_ip(), &self.owner).map_err(RunError::ResolvConf)?;
            resolv.add_to(&mut body);
            let _ = self.resolv.set(resolv);
        }
        Ok(ContainerConfig::new(body))
    }
}

/// What a slot's containers are made from ([`SlotObjects::gather`]).
struct Ingredients {
    proxy_image: String,
    image: String,
    facts: ImageFacts,
    egress: String,
    floor_extra: Vec<IpAddr>,
    wiring: Wiring,
    runtime: RuntimeKind,
}

/// The launcher in front of the sandbox's command: the handle's binary at a place named by
/// its content (the proxy image's tag names that content too, `launcher_binary`), and the
/// image's own entrypoint, which the command follows.
async fn held_start(
    sandbox: &Sandbox,
    proxy_image: &str,
    image_entrypoint: Vec<String>,
) -> Result<HeldStart, RunError> {
    let content_id = proxy_image
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let source = sandbox.proxy_binary().to_path_buf();
    let binary =
        tokio::task::spawn_blocking(move || super::launcher_binary::place(&source, &content_id))
            .await
            .map_err(|error| RunError::LauncherBinary(std::io::Error::other(error)))??;
    Ok(HeldStart {
        binary,
        image_entrypoint,
    })
}

/// The proxy's ready line, within [`PROXY_READY_TIMEOUT`] of its handoff.
async fn await_ready(proxy: &mut ProxyOutput) -> Result<audit_trail::Ready, RunError> {
    match tokio::time::timeout(PROXY_READY_TIMEOUT, &mut proxy.ready).await {
        Ok(Ok(Ok(ready))) => Ok(ready),
        Ok(Ok(Err(not_ready))) => Err(RunError::ProxyNotReady {
            detail: not_ready.detail,
        }),
        Ok(Err(_)) => Err(RunError::ProxyNotReady {
            detail: "its output ended".into(),
        }),
        Err(_) => Err(RunError::ProxyReadyTimeout {
            waited: PROXY_READY_TIMEOUT,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential_run() -> RunSpec {
        RunSpec::builder(["true"])
            .policy_yaml(
                "cred.yaml",
                "version: 1\nallow:\n  - host: api.example.com\ncredentials:\n  - host: api.example.com\n    secret: API_KEY\n",
            )
            .secret(
                "API_KEY",
                egress_core::secret::SecretValue::new("sk-unit-test".into()),
            )
            .build()
            .unwrap()
    }

    /// A run whose policy inspects a host needs the trust bundle mounted at create: a slot
    /// with one fits it, a slot without one does not; a run that inspects nothing fits both.
    /// The shape alone decides `unfit`, bundle or not.
    #[test]
    fn an_inspected_run_fits_only_a_slot_with_the_trust_bundle() {
        let template = RunSpec::builder(["true"]).build().unwrap();
        let inspected = credential_run();
        assert_eq!(unfit(&template, &inspected), None);
        assert!(trust_fits(&inspected, true));
        assert!(!trust_fits(&inspected, false));
        let plain = RunSpec::builder(["true"])
            .allow("api.example.com")
            .build()
            .unwrap();
        assert!(trust_fits(&plain, true));
        assert!(trust_fits(&plain, false));
        let other_image = RunSpec::builder(["true"]).image("other:1").build().unwrap();
        assert_eq!(unfit(&template, &other_image), Some("another image"));
    }
}
