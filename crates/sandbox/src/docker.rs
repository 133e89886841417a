//! The one place egress-sandbox talks to the Docker engine.
//!
//! [`Engine`] wraps a bollard client: it connects the way the docker CLI does (`DOCKER_HOST`,
//! else the local socket), settles the API version with the engine (20.10 speaks 1.41, older
//! than bollard's default), and gives the few calls a run needs. Removals are idempotent:
//! removing something already gone is success, so every teardown path can simply try.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummary, EndpointSettings, Mount,
    MountType, Network, NetworkConnectRequest, NetworkCreateRequest, NetworkInspect,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, ListNetworksOptionsBuilder, RemoveContainerOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use futures_util::{Stream, StreamExt};

pub(crate) use bollard::container::LogOutput;

/// A writer to a container's stdin.
pub type StdinWriter = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// A container's output as Docker frames it (stdout and stderr chunks).
pub(crate) type OutputFrames =
    std::pin::Pin<Box<dyn Stream<Item = Result<LogOutput, BollardError>> + Send>>;

/// How long connecting and the version handshake may take before we call the engine unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A request the Docker engine refused or that never reached it. The message is the one
/// the Docker client library gives; [`status`](Self::status) is the engine's HTTP status
/// when it answered. The client library's own error stays behind this type (its
/// [`source`](std::error::Error::source) chain is kept), so the public API does not
/// depend on it.
pub struct DockerError {
    inner: Box<BollardError>,
}

impl DockerError {
    /// The engine's HTTP status code, when the engine answered (404: no such object,
    /// 409: conflict, …).
    pub fn status(&self) -> Option<u16> {
        match *self.inner {
            BollardError::DockerResponseServerError { status_code, .. } => Some(status_code),
            _ => None,
        }
    }

    /// The engine's own message, when it answered.
    pub fn engine_message(&self) -> Option<&str> {
        server_message(&self.inner)
    }

    /// The engine's answer was "no such object".
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }
}

impl From<BollardError> for DockerError {
    fn from(inner: BollardError) -> Self {
        DockerError {
            inner: Box::new(inner),
        }
    }
}

impl std::fmt::Display for DockerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.inner, f)
    }
}

impl std::fmt::Debug for DockerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.inner, f)
    }
}

impl std::error::Error for DockerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // This error stands for the client's: its cause is the client error's cause.
        self.inner.source()
    }
}

/// Why the engine could not be reached or asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("cannot reach the Docker engine at {host}: {source}")]
    Unreachable {
        host: String,
        #[source]
        source: DockerError,
    },
    #[error("cannot reach the Docker engine at {host}: no answer within {}s", CONNECT_TIMEOUT.as_secs())]
    NoAnswer { host: String },
    #[error("Docker: {step}: {source}")]
    Api {
        step: String,
        #[source]
        source: DockerError,
    },
}

impl EngineError {
    fn api(step: impl Into<String>) -> impl FnOnce(BollardError) -> EngineError {
        let step = step.into();
        move |source| EngineError::Api {
            step,
            source: source.into(),
        }
    }
}

/// A connected Docker engine.
#[derive(Clone, Debug)]
pub struct Engine {
    docker: Docker,
    host: String,
}

/// The engine's answer was "no such object".
pub(crate) fn is_not_found(error: &BollardError) -> bool {
    matches!(
        error,
        BollardError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// The engine's answer was a conflict (name in use, container not running …).
pub(crate) fn is_conflict(error: &BollardError) -> bool {
    matches!(
        error,
        BollardError::DockerResponseServerError {
            status_code: 409,
            ..
        }
    )
}

/// The message of an engine error response, for matching well-known refusals.
pub(crate) fn server_message(error: &BollardError) -> Option<&str> {
    match error {
        BollardError::DockerResponseServerError { message, .. } => Some(message),
        _ => None,
    }
}

/// The engine as `doctor` reports it.
#[derive(Clone, Debug)]
pub struct EngineFacts {
    pub version: String,
    /// The newest API version the engine speaks, and the one this client agreed on.
    pub api_version: String,
    pub negotiated_api: String,
    pub storage_driver: String,
    pub cgroup_version: String,
    pub memory_limit: bool,
    pub swap_limit: bool,
    pub cpu_quota: bool,
    pub pids_limit: bool,
}

/// The engine's OCI runtimes by name, and the name of its default one.
#[derive(Clone, Debug)]
pub struct RuntimeRegistry {
    pub runtimes: std::collections::BTreeMap<String, super::runtime::RuntimeInfo>,
    pub default: String,
}

impl Engine {
    /// Connects through `DOCKER_HOST` (or the default socket) and agrees on an API version;
    /// the version request doubles as the ping.
    pub async fn connect() -> Result<Engine, EngineError> {
        let host = std::env::var("DOCKER_HOST")
            .ok()
            .filter(|host| !host.is_empty())
            .unwrap_or_else(|| "unix:///var/run/docker.sock".to_string());
        let docker =
            Docker::connect_with_defaults().map_err(|source| EngineError::Unreachable {
                host: host.clone(),
                source: source.into(),
            })?;
        let docker = match tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await {
            Ok(Ok(docker)) => docker,
            Ok(Err(source)) => {
                return Err(EngineError::Unreachable {
                    host,
                    source: source.into(),
                });
            }
            Err(_) => return Err(EngineError::NoAnswer { host }),
        };
        Ok(Engine { docker, host })
    }

    /// The bollard client, for modules that speak to it directly (images).
    pub(crate) fn docker(&self) -> &Docker {
        &self.docker
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether the engine runs on this machine (a Unix socket), so host paths are its paths.
    pub fn is_local(&self) -> bool {
        self.host.starts_with("unix://")
    }

    /// What a run needs to know of `image`: its id (content-addressed: the same id is the
    /// same files) and its own entrypoint, which the launcher goes in front of.
    pub(crate) async fn image_facts(&self, image: &str) -> Result<ImageFacts, BollardError> {
        let inspect = self.docker.inspect_image(image).await?;
        Ok(ImageFacts {
            id: inspect.id.unwrap_or_default(),
            entrypoint: inspect
                .config
                .and_then(|config| config.entrypoint)
                .unwrap_or_default(),
        })
    }

    /// The OCI runtimes the engine offers (`docker info`), sorted.
    pub async fn runtimes(&self) -> Result<Vec<String>, EngineError> {
        Ok(self
            .runtime_registry()
            .await?
            .runtimes
            .into_keys()
            .collect())
    }

    /// The engine's runtimes as it registers them (executable, arguments, what they are)
    /// and which one it uses by default.
    pub async fn runtime_registry(&self) -> Result<RuntimeRegistry, EngineError> {
        let info = self
            .docker
            .info()
            .await
            .map_err(EngineError::api("ask the engine for its runtimes"))?;
        Ok(RuntimeRegistry {
            runtimes: info
                .runtimes
                .unwrap_or_default()
                .into_iter()
                .map(|(name, runtime)| {
                    let info = super::runtime::RuntimeInfo::new(
                        name.clone(),
                        runtime.path,
                        runtime.runtime_args.unwrap_or_default(),
                    );
                    (name, info)
                })
                .collect(),
            default: info.default_runtime.unwrap_or_else(|| "runc".into()),
        })
    }

    /// What the runtime `name` (`None`: the engine's default) is; a name the engine does
    /// not register is [`RuntimeKind::Other`](super::runtime::RuntimeKind::Other).
    pub async fn runtime_kind(
        &self,
        name: Option<&str>,
    ) -> Result<super::runtime::RuntimeKind, EngineError> {
        let registry = self.runtime_registry().await?;
        let name = name.unwrap_or(&registry.default);
        Ok(registry
            .runtimes
            .get(name)
            .map(|info| info.kind)
            .unwrap_or(super::runtime::RuntimeKind::Other))
    }

    /// What `doctor` reports of the engine: versions, storage, the resource controls its
    /// cgroups offer (each run limit needs one).
    pub async fn facts(&self) -> Result<EngineFacts, EngineError> {
        let (version, info) = tokio::try_join!(
            async {
                self.docker
                    .version()
                    .await
                    .map_err(EngineError::api("ask the engine for its version"))
            },
            async {
                self.docker
                    .info()
                    .await
                    .map_err(EngineError::api("ask the engine about itself"))
            },
        )?;
        Ok(EngineFacts {
            version: version.version.unwrap_or_default(),
            api_version: version.api_version.unwrap_or_default(),
            negotiated_api: self.docker.client_version().to_string(),
            storage_driver: info.driver.unwrap_or_default(),
            cgroup_version: info
                .cgroup_version
                .map(|version| version.to_string())
                .unwrap_or_default(),
            memory_limit: info.memory_limit.unwrap_or(false),
            swap_limit: info.swap_limit.unwrap_or(false),
            cpu_quota: info.cpu_cfs_quota.unwrap_or(false),
            pids_limit: info.pids_limit.unwrap_or(false),
        })
    }

    /// Starts `command` in `image` under `runtime` with no network, waits for it and
    /// removes it: whether a container starts under that runtime at all. `Err`: the
    /// engine's own words.
    pub async fn probe_runtime(
        &self,
        name: &str,
        runtime: &str,
        image: &str,
        command: Vec<String>,
        labels: HashMap<String, String>,
    ) -> Result<(), String> {
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: Some(command),
            labels: Some(labels),
            host_config: Some(bollard::models::HostConfig {
                runtime: Some(runtime.to_string()),
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let outcome = async {
            self.create_container(name, body).await?;
            self.start_container(name).await?;
            self.wait_container(name).await
        }
        .await;
        let _ = self.remove_container(name).await;
        match outcome {
            Ok(0) => Ok(()),
            Ok(status) => Err(format!("its probe exited with status {status}")),
            Err(error) => Err(server_message(&error)
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string())),
        }
    }

    // ---- networks ----

    pub(crate) async fn create_network(
        &self,
        request: NetworkCreateRequest,
    ) -> Result<String, BollardError> {
        let response = self.docker.create_network(request).await?;
        Ok(response.id)
    }

    /// The subnets of network `name`, or `None` when it does not exist (yet): what
    /// `doctor` says of the egress network.
    pub async fn network_subnets(&self, name: &str) -> Result<Option<Vec<String>>, DockerError> {
        match self.inspect_network(name).await {
            Ok(network) => Ok(Some(
                network
                    .ipam
                    .and_then(|ipam| ipam.config)
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|config| config.subnet)
                    .collect(),
            )),
            Err(error) if is_not_found(&error) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    pub(crate) async fn inspect_network(&self, name: &str) -> Result<NetworkInspect, BollardError> {
        self.docker
            .inspect_network(
                name,
                None::<bollard::query_parameters::InspectNetworkOptions>,
            )
            .await
    }

    /// Networks matching `filters` (Docker filter syntax, e.g. `label` → `["k=v"]`).
    pub(crate) async fn list_networks(
        &self,
        filters: &HashMap<&str, Vec<&str>>,
    ) -> Result<Vec<Network>, EngineError> {
        let options = ListNetworksOptionsBuilder::default()
            .filters(filters)
            .build();
        self.docker
            .list_networks(Some(options))
            .await
            .map_err(EngineError::api("list networks"))
    }

    pub(crate) async fn connect_network(
        &self,
        network: &str,
        container: &str,
        endpoint: EndpointSettings,
    ) -> Result<(), BollardError> {
        let request = NetworkConnectRequest {
            container: container.to_string(),
            endpoint_config: Some(endpoint),
        };
        self.docker.connect_network(network, request).await
    }

    /// Removes a network; one that is already gone counts as removed. Endpoints of containers
    /// removed a moment ago can linger briefly, so "active endpoints" is retried.
    pub(crate) async fn remove_network(&self, name: &str) -> Result<(), BollardError> {
        let mut attempt = 0;
        loop {
            match self.docker.remove_network(name).await {
                Ok(()) => return Ok(()),
                Err(error) if is_not_found(&error) => return Ok(()),
                Err(error)
                    if attempt < 40
                        && server_message(&error)
                            .is_some_and(|message| message.contains("active endpoints")) =>
                {
                    attempt += 1;
                    // The endpoint goes once its container has fully stopped: poll closely.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    // ---- containers ----

    pub(crate) async fn create_container(
        &self,
        name: &str,
        body: ContainerCreateBody,
    ) -> Result<String, BollardError> {
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        Ok(self.docker.create_container(Some(options), body).await?.id)
    }

    /// As [`create_container`](Self::create_container), owning its arguments, for a task
    /// that must finish even if its caller goes away.
    pub(crate) async fn create_container_owned(
        self,
        name: String,
        body: ContainerCreateBody,
    ) -> Result<String, BollardError> {
        self.create_container(&name, body).await
    }

    /// stdout and stderr of a container, from now on, as a stream of frames. Attach before
    /// start so that nothing is missed; the stream ends when the container stops.
    pub(crate) async fn attach_output(
        &self,
        container: &str,
    ) -> Result<OutputFrames, BollardError> {
        let options = AttachContainerOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .stream(true)
            .logs(false)
            .build();
        let attached = self
            .docker
            .attach_container(container, Some(options))
            .await?;
        Ok(attached.output)
    }

    /// As [`attach_output`](Self::attach_output), plus a writer to the container's stdin.
    pub(crate) async fn attach_with_stdin(
        &self,
        container: &str,
    ) -> Result<(OutputFrames, StdinWriter), BollardError> {
        let options = AttachContainerOptionsBuilder::default()
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .stream(true)
            .logs(false)
            .build();
        let attached = self
            .docker
            .attach_container(container, Some(options))
            .await?;
        Ok((attached.output, attached.input))
    }

    pub(crate) async fn start_container(&self, container: &str) -> Result<(), BollardError> {
        self.docker
            .start_container(
                container,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
    }

    /// Waits until the container is not running and returns its exit status.
    pub(crate) async fn wait_container(&self, container: &str) -> Result<i64, BollardError> {
        let options = WaitContainerOptionsBuilder::default()
            .condition("not-running")
            .build();
        let mut stream = self.docker.wait_container(container, Some(options));
        match stream.next().await {
            Some(Ok(response)) => Ok(response.status_code),
            // bollard turns a non-zero status into an error; for us it is just the status.
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(error)) => Err(error),
            None => Err(BollardError::DockerStreamError {
                error: format!("wait on {container} ended without a status"),
            }),
        }
    }

    pub(crate) async fn inspect_container(
        &self,
        container: &str,
    ) -> Result<ContainerInspectResponse, BollardError> {
        self.docker
            .inspect_container(
                container,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
    }

    /// Whether the engine has logged an `oom` event for `container` in the last
    /// `lookback`, waiting up to `wait` for one still on its way. The engine handles a
    /// container's OOM and its exit as two events in no fixed order; when the exit comes
    /// first, its `OOMKilled` stays false, but the `oom` event is still logged.
    pub async fn saw_oom_event(&self, container: &str, lookback: Duration, wait: Duration) -> bool {
        let since = std::time::SystemTime::now()
            .checked_sub(lookback)
            .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |since| since.as_secs());
        let filters = HashMap::from([("container", vec![container]), ("event", vec!["oom"])]);
        let options = bollard::query_parameters::EventsOptionsBuilder::new()
            .since(&since.to_string())
            .filters(&filters)
            .build();
        let mut events = self.docker.events(Some(options));
        matches!(
            tokio::time::timeout(wait, events.next()).await,
            Ok(Some(Ok(_)))
        )
    }

    /// Sends `signal`; a container that is gone or not running needs no signal.
    pub(crate) async fn kill_container(
        &self,
        container: &str,
        signal: &str,
    ) -> Result<(), BollardError> {
        let options = KillContainerOptionsBuilder::default()
            .signal(signal)
            .build();
        match self.docker.kill_container(container, Some(options)).await {
            Err(error) if is_not_found(&error) || is_conflict(&error) => Ok(()),
            other => other,
        }
    }

    /// Kills (if needed) and removes a container; one that is already gone counts as removed.
    pub(crate) async fn remove_container(&self, container: &str) -> Result<(), BollardError> {
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        match self.docker.remove_container(container, Some(options)).await {
            Err(error) if is_not_found(&error) => Ok(()),
            // "removal already in progress": someone else (gc, a second teardown) is on it.
            Err(error) if is_conflict(&error) => Ok(()),
            other => other,
        }
    }

    /// Sets the limits Docker changes on a live container (no swap on top of memory).
    pub async fn update_limits(
        &self,
        container: &str,
        memory: u64,
        nano_cpus: i64,
        pids: u64,
    ) -> Result<(), BollardError> {
        let memory = i64::try_from(memory).unwrap_or(i64::MAX);
        let body = bollard::models::ContainerUpdateBody {
            memory: Some(memory),
            memory_swap: Some(memory),
            nano_cpus: Some(nano_cpus),
            pids_limit: Some(i64::try_from(pids).unwrap_or(i64::MAX)),
            ..Default::default()
        };
        self.docker.update_container(container, body).await
    }

    /// Containers (running or not) matching `filters`.
    pub(crate) async fn list_containers(
        &self,
        filters: &HashMap<&str, Vec<&str>>,
    ) -> Result<Vec<ContainerSummary>, EngineError> {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(filters)
            .build();
        self.docker
            .list_containers(Some(options))
            .await
            .map_err(EngineError::api("list containers"))
    }
}

/// See [`Engine::image_facts`].
#[derive(Clone, Debug, Default)]
pub(crate) struct ImageFacts {
    pub id: String,
    pub entrypoint: Vec<String>,
}

/// A bind mount of the host file or directory `source` at `target`.
pub(crate) fn bind_mount(source: &std::path::Path, target: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(target.into()),
        source: Some(source.to_string_lossy().into_owned()),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        ..Mount::default()
    }
}
