//! What the run lifecycle asks of a container engine: the [`ContainerEngine`] trait, the
//! values it takes and gives, and its typed error [`DockerError`].
//!
//! Run, slot, pool, gc, teardown and images talk to the engine through this trait alone, as
//! `Arc<dyn ContainerEngine>` (the [`Sandbox`](crate::Sandbox) handle holds one). Each
//! method is one engine request, answered as the engine answers it: removing an object that
//! is gone is [`DockerError::NotFound`], signalling a stopped container is
//! [`DockerError::Conflict`]. What the lifecycle makes of such answers (a removal of what is
//! gone is success, a network whose endpoints linger is retried) is written once, over the
//! trait, in the helpers on `dyn ContainerEngine` below, so every implementation gets the
//! same semantics and the fake tests them.
//!
//! Two implementations: [`DockerEngine`](crate::docker::DockerEngine) over the Docker API
//! (bollard), and `FakeEngine` (the `testing` module, in this crate's tests
//! and with the `fake-engine` feature), which keeps containers and networks in memory. No
//! Docker client type appears here: a create request is a [`ContainerConfig`] built by the
//! crate's request builders, the engine's answers are this module's own types.
//!
//! Methods take `&self` and return boxed futures that borrow only the engine (arguments are
//! copied in), so the trait is object safe and a call reads as a plain `.await`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;

use crate::runtime::{RuntimeInfo, RuntimeKind};

/// One engine request in flight.
pub type EngineCall<'a, T> = Pin<Box<dyn Future<Output = Result<T, DockerError>> + Send + 'a>>;

/// A writer to a container's stdin.
pub type StdinWriter = Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// A container's output from its attach: stdout and stderr chunks, in order, until the
/// container's output closes.
pub type OutputFrames = Pin<Box<dyn Stream<Item = Result<OutputFrame, DockerError>> + Send>>;

/// Bytes streamed to or from the engine (an image archive, a file archive).
pub type ByteStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// A tar archive streamed from a container.
pub type ArchiveStream = Pin<Box<dyn Stream<Item = Result<Bytes, DockerError>> + Send>>;

/// One chunk of a container's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputFrame {
    /// Bytes the container wrote to stdout.
    Stdout(Bytes),
    /// Bytes the container wrote to stderr.
    Stderr(Bytes),
}

/// An attach to a container: its output and, when asked for, its stdin.
pub struct Attached {
    /// The container's stdout and stderr, frame by frame.
    pub output: OutputFrames,
    /// A writer to the container's stdin; `Some` only when the attach asked for it.
    pub stdin: Option<StdinWriter>,
}

/// A container to create, as the crate's request builders (`container`, `trust`) make it.
/// Opaque to callers: the engine reads it; the accessors say what a fake engine needs.
#[derive(Clone, Debug)]
pub struct ContainerConfig {
    pub(crate) body: bollard::models::ContainerCreateBody,
}

impl ContainerConfig {
    pub(crate) fn new(body: bollard::models::ContainerCreateBody) -> ContainerConfig {
        ContainerConfig { body }
    }

    /// The image the container is made from.
    pub fn image(&self) -> Option<&str> {
        self.body.image.as_deref()
    }

    /// The labels the container is created with (run id, owner).
    pub fn labels(&self) -> HashMap<String, String> {
        self.body.labels.clone().unwrap_or_default()
    }

    /// The network the container is created on (`none`: no network).
    #[cfg(any(test, feature = "fake-engine"))]
    pub(crate) fn network_mode(&self) -> Option<&str> {
        self.body.host_config.as_ref()?.network_mode.as_deref()
    }

    /// Whether the container's stdin is open (a proxy waiting for its handoff, a sandbox
    /// held by its launcher).
    #[cfg(any(test, feature = "fake-engine"))]
    pub(crate) fn opens_stdin(&self) -> bool {
        self.body.open_stdin.unwrap_or(false)
    }
}

/// A network to create, as `network` makes it. Opaque like [`ContainerConfig`].
#[derive(Clone, Debug)]
pub struct NetworkConfig {
    pub(crate) request: bollard::models::NetworkCreateRequest,
}

impl NetworkConfig {
    pub(crate) fn new(request: bollard::models::NetworkCreateRequest) -> NetworkConfig {
        NetworkConfig { request }
    }

    /// The network's name.
    pub fn name(&self) -> &str {
        &self.request.name
    }

    /// The labels the network carries.
    pub fn labels(&self) -> HashMap<String, String> {
        self.request.labels.clone().unwrap_or_default()
    }

    /// The subnets asked for (CIDR), with their gateways.
    pub fn subnets(&self) -> Vec<(String, Option<String>)> {
        self.request
            .ipam
            .as_ref()
            .and_then(|ipam| ipam.config.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|config| Some((config.subnet.clone()?, config.gateway.clone())))
            .collect()
    }
}

/// Which objects a listing returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListFilter {
    /// Every object.
    All,
    /// Objects carrying a label: `key` (any value) or `key=value`.
    Label(String),
    /// Objects whose name contains this (the engine's name filter; callers match exactly).
    Name(String),
}

impl ListFilter {
    /// Whether an object of `name` and `labels` passes, as the engine filters.
    pub fn admits(&self, name: &str, labels: &HashMap<String, String>) -> bool {
        match self {
            ListFilter::All => true,
            ListFilter::Label(label) => match label.split_once('=') {
                Some((key, value)) => labels.get(key).is_some_and(|found| found == value),
                None => labels.contains_key(label),
            },
            ListFilter::Name(part) => name.contains(part.as_str()),
        }
    }
}

/// A container as a listing shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerSummary {
    /// The container's id.
    pub id: String,
    /// Without Docker's leading `/`.
    pub name: String,
    /// The labels it carries, by which gc and the pool tell whose it is.
    pub labels: HashMap<String, String>,
}

/// What an inspect says of a container's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerState {
    /// Whether it is still running.
    pub running: bool,
    /// Its exit code, once it has exited; read when waiting for it failed.
    pub exit_code: Option<i64>,
    /// The kernel's OOM killer ended it.
    pub oom_killed: bool,
}

/// A network as an inspect or a listing shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkSummary {
    /// The network's id.
    pub id: String,
    /// The network's name.
    pub name: String,
    /// The labels it carries.
    pub labels: HashMap<String, String>,
    /// Its IPAM subnets (CIDR).
    pub subnets: Vec<String>,
    /// Their gateways.
    pub gateways: Vec<String>,
}

/// What a run needs to know of an image: its id (content-addressed: the same id is the same
/// files) and its own entrypoint, which the launcher goes in front of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageFacts {
    /// The image's id.
    pub id: String,
    /// The image's own entrypoint; empty when it has none.
    pub entrypoint: Vec<String>,
}

/// An image as a listing shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageSummary {
    /// The image's id.
    pub id: String,
    /// Its `repository:tag` names.
    pub repo_tags: Vec<String>,
    /// Seconds since the epoch.
    pub created: i64,
}

/// An image made from a root filesystem archive (`docker import`), tagged
/// `repository:tag`, with Dockerfile-style `changes` (`ENTRYPOINT …`, `LABEL …`).
pub struct ImageImport {
    /// The repository of the new image's tag.
    pub repository: String,
    /// The new image's tag.
    pub tag: String,
    /// The import's commit message, as the engine records it.
    pub message: String,
    /// Dockerfile instructions applied to the image (`ENTRYPOINT …`, `LABEL …`).
    pub changes: Vec<String>,
    /// The root filesystem, as a tar archive.
    pub archive: ImageArchive,
}

/// The archive of an [`ImageImport`].
pub enum ImageArchive {
    /// Held in memory whole (the proxy image: one binary).
    Whole(Bytes),
    /// Read as it is made (the base image: a root filesystem from `tar`).
    Streamed(ByteStream),
}

/// The limits Docker changes on a live container (`docker update`): memory (no swap on
/// top), CPU and the pids cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveLimits {
    /// Memory in bytes; swap is held at the same value, so there is none on top.
    pub memory: u64,
    /// CPU time in billionths of a CPU.
    pub nano_cpus: i64,
    /// The most processes the container may hold.
    pub pids: u64,
}

/// The engine's version, and the API version this client agreed on with it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineVersion {
    /// The engine's own version.
    pub version: String,
    /// The newest API version the engine speaks.
    pub api_version: String,
    /// The API version this client and the engine agreed on.
    pub negotiated_api: String,
    /// The engine's operating system (`linux`), when it says.
    pub os: Option<String>,
    /// The engine's CPU architecture (`amd64`), when it says.
    pub arch: Option<String>,
}

/// What the engine says of itself (`docker info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineInfo {
    /// CPUs the engine's host has, when it says.
    pub cpus: Option<u64>,
    /// Its OCI runtimes as it registers them, by name.
    pub runtimes: BTreeMap<String, RuntimeInfo>,
    /// The runtime the engine uses when a container names none.
    pub default_runtime: Option<String>,
    /// The storage driver (`overlay2`, `vfs`, …).
    pub storage_driver: String,
    /// The cgroup version (`1`, `2`); empty when it does not say.
    pub cgroup_version: String,
    /// Whether memory limits are enforced.
    pub memory_limit: bool,
    /// Whether swap limits are enforced.
    pub swap_limit: bool,
    /// Whether CPU quotas are enforced.
    pub cpu_quota: bool,
    /// Whether pids limits are enforced.
    pub pids_limit: bool,
}

/// A request the engine refused, or that never reached it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DockerError {
    /// No such object (404).
    #[error("the engine answered 404: {message}")]
    NotFound {
        /// The engine's message.
        message: String,
    },
    /// A conflict (409): a name in use, a container not running, a removal in progress.
    #[error("the engine answered 409: {message}")]
    Conflict {
        /// The engine's message.
        message: String,
    },
    /// Any other refusal, with the engine's status and words.
    #[error("the engine answered {status}: {message}")]
    Engine {
        /// The HTTP status code.
        status: u16,
        /// The engine's message.
        message: String,
    },
    /// No answer: the connection failed or broke (the message carries its causes).
    #[error("{message}")]
    Unreachable {
        /// What failed, with its causes.
        message: String,
    },
    /// An answer this client could not read, or a stream that ended too soon.
    #[error("{message}")]
    Protocol {
        /// What could not be read.
        message: String,
    },
}

impl DockerError {
    /// The engine's HTTP status code, when the engine answered (404: no such object,
    /// 409: conflict, …).
    pub fn status(&self) -> Option<u16> {
        match self {
            DockerError::NotFound { .. } => Some(404),
            DockerError::Conflict { .. } => Some(409),
            DockerError::Engine { status, .. } => Some(*status),
            DockerError::Unreachable { .. } | DockerError::Protocol { .. } => None,
        }
    }

    /// The engine's own message, when it answered.
    pub fn engine_message(&self) -> Option<&str> {
        match self {
            DockerError::NotFound { message }
            | DockerError::Conflict { message }
            | DockerError::Engine { message, .. } => Some(message),
            DockerError::Unreachable { .. } | DockerError::Protocol { .. } => None,
        }
    }

    /// The engine's answer was "no such object".
    pub fn is_not_found(&self) -> bool {
        matches!(self, DockerError::NotFound { .. })
    }

    /// The engine's answer was a conflict.
    pub fn is_conflict(&self) -> bool {
        matches!(self, DockerError::Conflict { .. })
    }

    /// The engine's message says `words` (its well-known refusals have no code of their
    /// own: "active endpoints", "Pool overlaps").
    pub(crate) fn says(&self, words: &str) -> bool {
        self.engine_message()
            .is_some_and(|message| message.contains(words))
    }
}

/// Why the engine could not be reached or asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The connection to the engine failed.
    #[error("cannot reach the Docker engine at {host}")]
    Unreachable {
        /// Where the engine is.
        host: String,
        /// Why it could not be reached.
        #[source]
        source: DockerError,
    },
    /// The engine did not answer within the connect timeout.
    #[error("cannot reach the Docker engine at {host}: no answer within {}s", crate::docker::CONNECT_TIMEOUT.as_secs())]
    NoAnswer {
        /// Where the engine is.
        host: String,
    },
    /// A request to the engine failed.
    #[error("Docker: {step}")]
    Api {
        /// What the request was for, as the message names it.
        step: String,
        /// The engine's refusal.
        #[source]
        source: DockerError,
    },
}

impl EngineError {
    pub(crate) fn api(step: impl Into<String>) -> impl FnOnce(DockerError) -> EngineError {
        let step = step.into();
        move |source| EngineError::Api { step, source }
    }
}

/// A container engine: the requests the run lifecycle makes. See the [module docs](self).
pub trait ContainerEngine: Send + Sync + 'static {
    /// Where the engine is (`unix:///var/run/docker.sock`, `tcp://…`), for messages.
    fn host(&self) -> &str;

    /// Whether the engine runs on this machine, so host paths are its paths (bind mounts,
    /// the launcher).
    fn is_local(&self) -> bool;

    /// A new connection to the same engine, usable on a runtime of its own (a teardown
    /// that runs from `Drop` makes one).
    fn reconnect(&self) -> EngineCall<'_, Arc<dyn ContainerEngine>>;

    /// Creates container `name`; returns its id. The name must be free ([`DockerError::Conflict`]).
    fn create_container(&self, name: &str, config: ContainerConfig) -> EngineCall<'_, String>;

    /// stdout and stderr from now on (attach before start so nothing is missed), and with
    /// `stdin` a writer to the container's stdin.
    fn attach_container(&self, container: &str, stdin: bool) -> EngineCall<'_, Attached>;

    /// Starts a created container.
    fn start_container(&self, container: &str) -> EngineCall<'_, ()>;

    /// Waits until the container is not running; its exit status.
    fn wait_container(&self, container: &str) -> EngineCall<'_, i64>;

    /// The container's running state and exit code.
    fn inspect_container(&self, container: &str) -> EngineCall<'_, ContainerState>;

    /// Sets the limits of a live container.
    fn update_container(&self, container: &str, limits: LiveLimits) -> EngineCall<'_, ()>;

    /// Sends `signal` (`SIGTERM`, `SIGKILL`) to a running container.
    fn kill_container(&self, container: &str, signal: &str) -> EngineCall<'_, ()>;

    /// Removes a container, killing it first if it runs, with its anonymous volumes.
    fn remove_container(&self, container: &str) -> EngineCall<'_, ()>;

    /// Containers, running or not, that `filter` admits.
    fn list_containers(&self, filter: &ListFilter) -> EngineCall<'_, Vec<ContainerSummary>>;

    /// The file or directory at `path` in the container, as a tar archive.
    fn download_from_container(&self, container: &str, path: &str) -> ArchiveStream;

    /// Whether the engine logged an `oom` event for `container` in the last `lookback`,
    /// waiting up to `wait` for one still on its way.
    fn saw_oom_event(
        &self,
        container: &str,
        lookback: Duration,
        wait: Duration,
    ) -> EngineCall<'_, bool>;

    /// Creates a network; returns its id.
    fn create_network(&self, config: NetworkConfig) -> EngineCall<'_, String>;

    /// The network of this name or id.
    fn inspect_network(&self, network: &str) -> EngineCall<'_, NetworkSummary>;

    /// Connects a container to a network, with default endpoint settings.
    fn connect_network(&self, network: &str, container: &str) -> EngineCall<'_, ()>;

    /// Removes a network; the engine refuses while a container is still connected to it.
    fn remove_network(&self, network: &str) -> EngineCall<'_, ()>;

    /// Networks that `filter` admits.
    fn list_networks(&self, filter: &ListFilter) -> EngineCall<'_, Vec<NetworkSummary>>;

    /// The image of this name or id: its id and entrypoint.
    fn inspect_image(&self, image: &str) -> EngineCall<'_, ImageFacts>;

    /// Images carrying `label` (`key` or `key=value`).
    fn list_images(&self, label: &str) -> EngineCall<'_, Vec<ImageSummary>>;

    /// Makes an image from a root filesystem archive.
    fn import_image(&self, import: ImageImport) -> EngineCall<'_, ()>;

    /// Removes an image (`force`: even while a container uses it).
    fn remove_image(&self, image: &str, force: bool) -> EngineCall<'_, ()>;

    /// The engine's version and the API version agreed on.
    fn version(&self) -> EngineCall<'_, EngineVersion>;

    /// What the engine says of itself: runtimes, storage, cgroups, which limits it enforces.
    fn info(&self) -> EngineCall<'_, EngineInfo>;
}

/// The engine's OCI runtimes by name, and the name of its default one.
#[derive(Clone, Debug)]
pub struct RuntimeRegistry {
    /// Every runtime the engine registers, by name.
    pub runtimes: BTreeMap<String, RuntimeInfo>,
    /// The runtime a container gets when it names none.
    pub default: String,
}

/// The engine as `doctor` reports it.
#[derive(Clone, Debug)]
pub struct EngineFacts {
    /// The engine's own version.
    pub version: String,
    /// The newest API version the engine speaks, and the one this client agreed on.
    pub api_version: String,
    /// The API version this client and the engine agreed on.
    pub negotiated_api: String,
    /// The storage driver (`overlay2`, `vfs`, …).
    pub storage_driver: String,
    /// The cgroup version; empty when the engine does not say.
    pub cgroup_version: String,
    /// Whether memory limits are enforced.
    pub memory_limit: bool,
    /// Whether swap limits are enforced.
    pub swap_limit: bool,
    /// Whether CPU quotas are enforced.
    pub cpu_quota: bool,
    /// Whether pids limits are enforced.
    pub pids_limit: bool,
}

/// How often, and how many times, a network removal is tried again while the engine still
/// counts an endpoint of a container removed a moment ago.
const NETWORK_RETRY_PAUSE: Duration = Duration::from_millis(50);
const NETWORK_RETRIES: usize = 40;

/// What the lifecycle makes of the engine's answers, the same over every implementation.
impl dyn ContainerEngine + '_ {
    /// Removes a container; one that is already gone counts as removed, and so does one
    /// whose removal is already in progress (gc, a second teardown).
    pub(crate) async fn ensure_container_removed(
        &self,
        container: &str,
    ) -> Result<(), DockerError> {
        match self.remove_container(container).await {
            Err(error) if error.is_not_found() || error.is_conflict() => Ok(()),
            other => other,
        }
    }

    /// Sends `signal`; a container that is gone or not running needs no signal.
    pub(crate) async fn signal_if_running(
        &self,
        container: &str,
        signal: &str,
    ) -> Result<(), DockerError> {
        match self.kill_container(container, signal).await {
            Err(error) if error.is_not_found() || error.is_conflict() => Ok(()),
            other => other,
        }
    }

    /// Removes a network; one that is already gone counts as removed. Endpoints of
    /// containers removed a moment ago can linger briefly, so "active endpoints" is retried.
    pub(crate) async fn ensure_network_removed(&self, network: &str) -> Result<(), DockerError> {
        let mut attempt = 0;
        loop {
            match self.remove_network(network).await {
                Ok(()) => return Ok(()),
                Err(error) if error.is_not_found() => return Ok(()),
                Err(error) if attempt < NETWORK_RETRIES && error.says("active endpoints") => {
                    attempt += 1;
                    // The endpoint goes once its container has fully stopped: poll closely.
                    tokio::time::sleep(NETWORK_RETRY_PAUSE).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Ids of the containers carrying `label` (`key=value`).
    pub(crate) async fn containers_labelled(
        &self,
        label: &str,
    ) -> Result<Vec<String>, DockerError> {
        let filter = ListFilter::Label(label.to_owned());
        let containers = self.list_containers(&filter).await?;
        Ok(containers
            .into_iter()
            .map(|container| container.id)
            .collect())
    }

    /// The engine's runtimes as it registers them and which one it uses by default.
    pub async fn runtime_registry(&self) -> Result<RuntimeRegistry, EngineError> {
        let info = self
            .info()
            .await
            .map_err(EngineError::api("ask the engine for its runtimes"))?;
        Ok(RuntimeRegistry {
            runtimes: info.runtimes,
            default: info.default_runtime.unwrap_or_else(|| "runc".into()),
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

    /// What the runtime `name` (`None`: the engine's default) is; a name the engine does
    /// not register is [`RuntimeKind::Other`].
    pub(crate) async fn runtime_kind(
        &self,
        name: Option<&str>,
    ) -> Result<RuntimeKind, EngineError> {
        let registry = self.runtime_registry().await?;
        let name = name.unwrap_or(&registry.default);
        Ok(registry
            .runtimes
            .get(name)
            .map(|info| info.kind)
            .unwrap_or(RuntimeKind::Other))
    }

    /// What `doctor` reports of the engine: versions, storage, the resource controls its
    /// cgroups offer (each run limit needs one).
    pub async fn facts(&self) -> Result<EngineFacts, EngineError> {
        let (version, info) = tokio::try_join!(
            async {
                self.version()
                    .await
                    .map_err(EngineError::api("ask the engine for its version"))
            },
            async {
                self.info()
                    .await
                    .map_err(EngineError::api("ask the engine about itself"))
            },
        )?;
        Ok(EngineFacts {
            version: version.version,
            api_version: version.api_version,
            negotiated_api: version.negotiated_api,
            storage_driver: info.storage_driver,
            cgroup_version: info.cgroup_version,
            memory_limit: info.memory_limit,
            swap_limit: info.swap_limit,
            cpu_quota: info.cpu_quota,
            pids_limit: info.pids_limit,
        })
    }

    /// The subnets of network `name`, or `None` when it does not exist (yet): what
    /// `doctor` says of the egress network.
    pub async fn network_subnets(&self, name: &str) -> Result<Option<Vec<String>>, DockerError> {
        match self.inspect_network(name).await {
            Ok(network) => Ok(Some(network.subnets)),
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
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
        let config = crate::container::runtime_probe(runtime, image, command, labels);
        let outcome = async {
            self.create_container(name, config).await?;
            self.start_container(name).await?;
            self.wait_container(name).await
        }
        .await;
        let _ = self.ensure_container_removed(name).await;
        match outcome {
            Ok(0) => Ok(()),
            Ok(status) => Err(format!("its probe exited with status {status}")),
            Err(error) => Err(error
                .engine_message()
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_filter_takes_a_key_or_a_key_and_value_and_a_name_filter_a_part() {
        let labels = HashMap::from([("egress-sandbox.run".to_string(), "r-1".to_string())]);
        let label = |text: &str| ListFilter::Label(text.into());
        assert!(label("egress-sandbox.run").admits("x", &labels));
        assert!(label("egress-sandbox.run=r-1").admits("x", &labels));
        assert!(!label("egress-sandbox.run=r-2").admits("x", &labels));
        assert!(!label("egress-sandbox.owner").admits("x", &labels));
        let name = ListFilter::Name("egress".into());
        assert!(name.admits("egress-sandbox-egress", &HashMap::new()));
        assert!(!name.admits("bridge", &HashMap::new()));
    }

    #[test]
    fn an_error_says_its_status_and_the_engines_words() {
        let gone = DockerError::NotFound {
            message: "No such container: x".into(),
        };
        assert_eq!(gone.status(), Some(404));
        assert!(gone.is_not_found());
        assert_eq!(gone.engine_message(), Some("No such container: x"));
        assert_eq!(
            gone.to_string(),
            "the engine answered 404: No such container: x"
        );
        let unreachable = DockerError::Unreachable {
            message: "Socket not found: /nonexistent.sock".into(),
        };
        assert_eq!(unreachable.status(), None);
        assert_eq!(
            unreachable.to_string(),
            "Socket not found: /nonexistent.sock"
        );
    }
}
