//! [`DockerEngine`]: the [`ContainerEngine`] over the Docker API, the one place that holds a
//! Docker client.
//!
//! It connects the way the docker CLI does (`DOCKER_HOST`, else the local socket), settles
//! the API version with the engine (20.10 speaks 1.41, older than bollard's default), and
//! answers each trait method with one request, its errors made [`DockerError`]s.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::{EndpointSettings, Mount, MountType, NetworkConnectRequest};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, CreateImageOptionsBuilder,
    DownloadFromContainerOptions, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    ListImagesOptionsBuilder, ListNetworksOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures_util::{StreamExt, TryStreamExt};

use crate::engine::{
    ArchiveStream, Attached, ContainerConfig, ContainerEngine, ContainerState, ContainerSummary,
    DockerError, EngineCall, EngineError, EngineInfo, EngineVersion, ImageArchive, ImageFacts,
    ImageImport, ImageSummary, ListFilter, LiveLimits, NetworkConfig, NetworkSummary, OutputFrame,
    OutputFrames,
};
use crate::runtime::RuntimeInfo;

/// How long connecting and the version handshake may take before we call the engine unreachable.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connected Docker engine.
#[derive(Clone, Debug)]
pub struct DockerEngine {
    docker: Docker,
    host: String,
}

impl DockerEngine {
    /// Connects through `DOCKER_HOST` (or the default socket) and agrees on an API version;
    /// the version request doubles as the ping.
    pub async fn connect() -> Result<DockerEngine, EngineError> {
        let host = std::env::var("DOCKER_HOST")
            .ok()
            .filter(|host| !host.is_empty())
            .unwrap_or_else(|| "unix:///var/run/docker.sock".to_string());
        let docker =
            Docker::connect_with_defaults().map_err(|source| EngineError::Unreachable {
                host: host.clone(),
                source: docker_error(source),
            })?;
        let docker = match tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await {
            Ok(Ok(docker)) => docker,
            Ok(Err(source)) => {
                return Err(EngineError::Unreachable {
                    host,
                    source: docker_error(source),
                });
            }
            Err(_) => return Err(EngineError::NoAnswer { host }),
        };
        Ok(DockerEngine { docker, host })
    }
}

/// The client's error as the engine's answer: its status when the engine answered, else
/// the message with its causes (a connection error's cause says which socket).
fn docker_error(error: BollardError) -> DockerError {
    match error {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => match status_code {
            404 => DockerError::NotFound { message },
            409 => DockerError::Conflict { message },
            status => DockerError::Engine { status, message },
        },
        BollardError::JsonDataError { .. }
        | BollardError::JsonSerdeError { .. }
        | BollardError::DockerStreamError { .. }
        | BollardError::DockerContainerWaitError { .. } => DockerError::Protocol {
            message: with_causes(&error),
        },
        other => DockerError::Unreachable {
            message: with_causes(&other),
        },
    }
}

fn with_causes(error: &BollardError) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// One request: `work` on a clone of the client (cheap: one shared connection pool).
fn call<T, F>(docker: &Docker, work: impl FnOnce(Docker) -> F) -> EngineCall<'static, T>
where
    F: std::future::Future<Output = Result<T, BollardError>> + Send + 'static,
{
    let request = work(docker.clone());
    Box::pin(async move { request.await.map_err(docker_error) })
}

fn label_filters(filter: &ListFilter) -> HashMap<String, Vec<String>> {
    match filter {
        ListFilter::All => HashMap::new(),
        ListFilter::Label(label) => HashMap::from([("label".to_owned(), vec![label.clone()])]),
        ListFilter::Name(name) => HashMap::from([("name".to_owned(), vec![name.clone()])]),
    }
}

fn network_summary(network: bollard::models::NetworkInspect) -> NetworkSummary {
    summary_of(network.id, network.name, network.labels, network.ipam)
}

fn listed_network(network: bollard::models::Network) -> NetworkSummary {
    summary_of(network.id, network.name, network.labels, network.ipam)
}

/// A network as the engine describes it, from an inspect or a listing alike.
fn summary_of(
    id: Option<String>,
    name: Option<String>,
    labels: Option<HashMap<String, String>>,
    ipam: Option<bollard::models::Ipam>,
) -> NetworkSummary {
    let configs = ipam.and_then(|ipam| ipam.config).unwrap_or_default();
    NetworkSummary {
        id: id.unwrap_or_default(),
        name: name.unwrap_or_default(),
        labels: labels.unwrap_or_default(),
        subnets: configs.iter().filter_map(|c| c.subnet.clone()).collect(),
        gateways: configs.iter().filter_map(|c| c.gateway.clone()).collect(),
    }
}

fn output_frame(frame: bollard::container::LogOutput) -> Option<OutputFrame> {
    use bollard::container::LogOutput;
    match frame {
        LogOutput::StdOut { message } | LogOutput::Console { message } => {
            Some(OutputFrame::Stdout(message))
        }
        LogOutput::StdErr { message } => Some(OutputFrame::Stderr(message)),
        LogOutput::StdIn { .. } => None,
    }
}

impl ContainerEngine for DockerEngine {
    fn host(&self) -> &str {
        &self.host
    }

    fn is_local(&self) -> bool {
        self.host.starts_with("unix://")
    }

    fn reconnect(&self) -> EngineCall<'_, std::sync::Arc<dyn ContainerEngine>> {
        Box::pin(async {
            let engine =
                DockerEngine::connect()
                    .await
                    .map_err(|error| DockerError::Unreachable {
                        message: error.to_string(),
                    })?;
            Ok(std::sync::Arc::new(engine) as std::sync::Arc<dyn ContainerEngine>)
        })
    }

    fn create_container(&self, name: &str, config: ContainerConfig) -> EngineCall<'_, String> {
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        call(&self.docker, move |docker| async move {
            Ok(docker
                .create_container(Some(options), config.body)
                .await?
                .id)
        })
    }

    fn attach_container(&self, container: &str, stdin: bool) -> EngineCall<'_, Attached> {
        let options = AttachContainerOptionsBuilder::default()
            .stdin(stdin)
            .stdout(true)
            .stderr(true)
            .stream(true)
            .logs(false)
            .build();
        let container = container.to_owned();
        call(&self.docker, move |docker| async move {
            let attached = docker.attach_container(&container, Some(options)).await?;
            let output: OutputFrames = Box::pin(attached.output.filter_map(|frame| async {
                match frame {
                    Ok(frame) => output_frame(frame).map(Ok),
                    Err(error) => Some(Err(docker_error(error))),
                }
            }));
            Ok(Attached {
                output,
                stdin: stdin.then_some(attached.input),
            })
        })
    }

    fn start_container(&self, container: &str) -> EngineCall<'_, ()> {
        let container = container.to_owned();
        call(&self.docker, move |docker| async move {
            docker
                .start_container(
                    &container,
                    None::<bollard::query_parameters::StartContainerOptions>,
                )
                .await
        })
    }

    fn wait_container(&self, container: &str) -> EngineCall<'_, i64> {
        let options = WaitContainerOptionsBuilder::default()
            .condition("not-running")
            .build();
        let container = container.to_owned();
        call(&self.docker, move |docker| async move {
            let mut stream = docker.wait_container(&container, Some(options));
            match stream.next().await {
                Some(Ok(response)) => Ok(response.status_code),
                // bollard turns a non-zero status into an error; for us it is just the status.
                Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Ok(code),
                Some(Err(error)) => Err(error),
                None => Err(BollardError::DockerStreamError {
                    error: format!("wait on {container} ended without a status"),
                }),
            }
        })
    }

    fn inspect_container(&self, container: &str) -> EngineCall<'_, ContainerState> {
        let container = container.to_owned();
        call(&self.docker, move |docker| async move {
            let inspect = docker
                .inspect_container(
                    &container,
                    None::<bollard::query_parameters::InspectContainerOptions>,
                )
                .await?;
            let state = inspect.state.unwrap_or_default();
            Ok(ContainerState {
                running: state.running.unwrap_or(false),
                exit_code: state.exit_code,
                oom_killed: state.oom_killed.unwrap_or(false),
            })
        })
    }

    fn update_container(&self, container: &str, limits: LiveLimits) -> EngineCall<'_, ()> {
        let memory = i64::try_from(limits.memory).unwrap_or(i64::MAX);
        let body = bollard::models::ContainerUpdateBody {
            memory: Some(memory),
            memory_swap: Some(memory),
            nano_cpus: Some(limits.nano_cpus),
            pids_limit: Some(i64::try_from(limits.pids).unwrap_or(i64::MAX)),
            ..Default::default()
        };
        let container = container.to_owned();
        call(&self.docker, move |docker| async move {
            docker.update_container(&container, body).await
        })
    }

    fn kill_container(&self, container: &str, signal: &str) -> EngineCall<'_, ()> {
        let options = KillContainerOptionsBuilder::default()
            .signal(signal)
            .build();
        let container = container.to_owned();
        call(&self.docker, move |docker| async move {
            docker.kill_container(&container, Some(options)).await
        })
    }

    fn remove_container(&self, container: &str) -> EngineCall<'_, ()> {
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        let container = container.to_owned();
        call(&self.docker, move |docker| async move {
            docker.remove_container(&container, Some(options)).await
        })
    }

    fn list_containers(&self, filter: &ListFilter) -> EngineCall<'_, Vec<ContainerSummary>> {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&label_filters(filter))
            .build();
        call(&self.docker, move |docker| async move {
            let containers = docker.list_containers(Some(options)).await?;
            Ok(containers
                .into_iter()
                .filter_map(|container| {
                    let id = container.id?;
                    let name = container
                        .names
                        .and_then(|names| names.into_iter().next())
                        .map(|name| name.trim_start_matches('/').to_string())
                        .unwrap_or_else(|| id.clone());
                    Some(ContainerSummary {
                        id,
                        name,
                        labels: container.labels.unwrap_or_default(),
                    })
                })
                .collect())
        })
    }

    fn download_from_container(&self, container: &str, path: &str) -> ArchiveStream {
        let options = DownloadFromContainerOptions {
            path: path.to_owned(),
        };
        Box::pin(
            self.docker
                .download_from_container(container, Some(options))
                .map_err(docker_error),
        )
    }

    fn saw_oom_event(
        &self,
        container: &str,
        lookback: Duration,
        wait: Duration,
    ) -> EngineCall<'_, bool> {
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
        Box::pin(async move {
            match tokio::time::timeout(wait, events.next()).await {
                Ok(Some(Ok(_))) => Ok(true),
                Ok(Some(Err(error))) => Err(docker_error(error)),
                Ok(None) | Err(_) => Ok(false),
            }
        })
    }

    fn create_network(&self, config: NetworkConfig) -> EngineCall<'_, String> {
        call(&self.docker, move |docker| async move {
            Ok(docker.create_network(config.request).await?.id)
        })
    }

    fn inspect_network(&self, network: &str) -> EngineCall<'_, NetworkSummary> {
        let network = network.to_owned();
        call(&self.docker, move |docker| async move {
            docker
                .inspect_network(
                    &network,
                    None::<bollard::query_parameters::InspectNetworkOptions>,
                )
                .await
                .map(network_summary)
        })
    }

    fn connect_network(&self, network: &str, container: &str) -> EngineCall<'_, ()> {
        let request = NetworkConnectRequest {
            container: container.to_string(),
            endpoint_config: Some(EndpointSettings::default()),
        };
        let network = network.to_owned();
        call(&self.docker, move |docker| async move {
            docker.connect_network(&network, request).await
        })
    }

    fn remove_network(&self, network: &str) -> EngineCall<'_, ()> {
        let network = network.to_owned();
        call(&self.docker, move |docker| async move {
            docker.remove_network(&network).await
        })
    }

    fn list_networks(&self, filter: &ListFilter) -> EngineCall<'_, Vec<NetworkSummary>> {
        let options = ListNetworksOptionsBuilder::default()
            .filters(&label_filters(filter))
            .build();
        call(&self.docker, move |docker| async move {
            let networks = docker.list_networks(Some(options)).await?;
            Ok(networks.into_iter().map(listed_network).collect())
        })
    }

    fn inspect_image(&self, image: &str) -> EngineCall<'_, ImageFacts> {
        let image = image.to_owned();
        call(&self.docker, move |docker| async move {
            let inspect = docker.inspect_image(&image).await?;
            Ok(ImageFacts {
                id: inspect.id.unwrap_or_default(),
                entrypoint: inspect
                    .config
                    .and_then(|config| config.entrypoint)
                    .unwrap_or_default(),
            })
        })
    }

    fn list_images(&self, label: &str) -> EngineCall<'_, Vec<ImageSummary>> {
        let filters = HashMap::from([("label".to_owned(), vec![label.to_owned()])]);
        let options = ListImagesOptionsBuilder::default()
            .filters(&filters)
            .build();
        call(&self.docker, move |docker| async move {
            let images = docker.list_images(Some(options)).await?;
            Ok(images
                .into_iter()
                .map(|image| ImageSummary {
                    id: image.id,
                    repo_tags: image.repo_tags,
                    created: image.created,
                })
                .collect())
        })
    }

    fn import_image(&self, import: ImageImport) -> EngineCall<'_, ()> {
        let options = CreateImageOptionsBuilder::default()
            .from_src("-")
            .repo(&import.repository)
            .tag(&import.tag)
            .message(&import.message)
            .changes(import.changes)
            .build();
        let body = match import.archive {
            ImageArchive::Whole(bytes) => bollard::body_full(bytes),
            ImageArchive::Streamed(stream) => bollard::body_try_stream(stream),
        };
        call(&self.docker, move |docker| async move {
            docker
                .create_image(Some(options), Some(body), None)
                .try_collect::<Vec<_>>()
                .await
                .map(drop)
        })
    }

    fn remove_image(&self, image: &str, force: bool) -> EngineCall<'_, ()> {
        let options = RemoveImageOptionsBuilder::default()
            .force(force)
            .noprune(false)
            .build();
        let image = image.to_owned();
        call(&self.docker, move |docker| async move {
            docker
                .remove_image(&image, Some(options), None)
                .await
                .map(drop)
        })
    }

    fn version(&self) -> EngineCall<'_, EngineVersion> {
        let negotiated_api = self.docker.client_version().to_string();
        call(&self.docker, move |docker| async move {
            let version = docker.version().await?;
            Ok(EngineVersion {
                version: version.version.unwrap_or_default(),
                api_version: version.api_version.unwrap_or_default(),
                negotiated_api,
                os: version.os,
                arch: version.arch,
            })
        })
    }

    fn info(&self) -> EngineCall<'_, EngineInfo> {
        call(&self.docker, move |docker| async move {
            let info = docker.info().await?;
            let runtimes = info
                .runtimes
                .unwrap_or_default()
                .into_iter()
                .map(|(name, runtime)| {
                    let registered = RuntimeInfo::new(
                        name.clone(),
                        runtime.path,
                        runtime.runtime_args.unwrap_or_default(),
                    );
                    (name, registered)
                })
                .collect();
            Ok(EngineInfo {
                cpus: info.ncpu.and_then(|cpus| u64::try_from(cpus).ok()),
                runtimes,
                default_runtime: info.default_runtime,
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
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_answers_keep_their_status_and_a_broken_connection_its_causes() {
        let answer = |status_code| BollardError::DockerResponseServerError {
            status_code,
            message: "m".into(),
        };
        assert!(docker_error(answer(404)).is_not_found());
        assert!(docker_error(answer(409)).is_conflict());
        assert_eq!(docker_error(answer(400)).status(), Some(400));
        let unreachable = docker_error(BollardError::SocketNotFoundError("/x.sock".into()));
        assert_eq!(unreachable.status(), None);
        assert!(unreachable.to_string().contains("/x.sock"), "{unreachable}");
    }
}
