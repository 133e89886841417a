//! [`FakeEngine`]: the [`ContainerEngine`] in memory, for tests that need no Docker.
//!
//! Compiled into this crate's own tests, and for other crates with the `fake-engine`
//! feature (`egress-serve` tests its daemon on it). It keeps containers, networks and
//! images in memory and plays the two containers of a run the way they behave:
//!
//! - a **proxy** (a container named `…-proxy`) reads its handoff line from stdin once
//!   started, then prints its ready line ([`ProxyScript`]) and runs until signalled;
//! - a **sandbox** (`…-sandbox`) behind a launcher (its stdin open) waits for the launcher's
//!   go signal, then writes the [`CommandScript`]'s output and exits with its code (or runs
//!   until killed); without a launcher it does so as soon as it starts;
//! - any other container exits 0 when started.
//!
//! It answers as the Docker engine does where the lifecycle depends on it: a missing object
//! is `NotFound`, a name in use or a signal to a stopped container is a `Conflict`, a network
//! with a container on it refuses removal ("active endpoints"), a wait on a container that
//! is removed ends with 137, an attach before start sees all output.
//!
//! Every call is recorded ([`FakeEngine::calls`], the run id in a name written `{run}`,
//! so the calls of two runs compare equal). A test can make the n-th call of a method, or
//! of one [`Call`], fail ([`FakeEngine::fail_call`]), or hold a call until it lets it go
//! ([`FakeEngine::hook`]): that is how an interrupt is made to arrive during any step.
//! [`FakeEngine::leftovers`] is what a run left behind.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use ipnet::Ipv4Net;
use tokio::io::{AsyncReadExt, DuplexStream};
use tokio::sync::{mpsc, watch};

use crate::Sandbox;
use crate::engine::{
    ArchiveStream, Attached, ContainerConfig, ContainerEngine, ContainerState, ContainerSummary,
    DockerError, EngineCall, EngineInfo, EngineVersion, ImageFacts, ImageImport, ImageSummary,
    ListFilter, LiveLimits, NetworkConfig, NetworkSummary, OutputFrame, OutputFrames,
};
use crate::images::{BASE_IMAGE, PROXY_REPOSITORY};
use crate::labels::SHARED_LABEL;
use crate::outcome::RunError;
use crate::runtime::RuntimeInfo;

/// How long a held call waits to be let go before it goes on by itself (a test that forgot
/// to let it go then fails on what it sees, rather than hanging).
const HOLD_LIMIT: Duration = Duration::from_secs(60);

/// The engine's methods, as [`Call`]s name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Method {
    /// [`ContainerEngine::reconnect`].
    Reconnect,
    /// [`ContainerEngine::create_container`].
    CreateContainer,
    /// [`ContainerEngine::attach_container`].
    AttachContainer,
    /// [`ContainerEngine::start_container`].
    StartContainer,
    /// [`ContainerEngine::wait_container`].
    WaitContainer,
    /// [`ContainerEngine::inspect_container`].
    InspectContainer,
    /// [`ContainerEngine::update_container`].
    UpdateContainer,
    /// [`ContainerEngine::kill_container`].
    KillContainer,
    /// [`ContainerEngine::remove_container`].
    RemoveContainer,
    /// [`ContainerEngine::list_containers`].
    ListContainers,
    /// [`ContainerEngine::download_from_container`].
    DownloadFromContainer,
    /// [`ContainerEngine::saw_oom_event`].
    SawOomEvent,
    /// [`ContainerEngine::create_network`].
    CreateNetwork,
    /// [`ContainerEngine::inspect_network`].
    InspectNetwork,
    /// [`ContainerEngine::connect_network`].
    ConnectNetwork,
    /// [`ContainerEngine::remove_network`].
    RemoveNetwork,
    /// [`ContainerEngine::list_networks`].
    ListNetworks,
    /// [`ContainerEngine::inspect_image`].
    InspectImage,
    /// [`ContainerEngine::list_images`].
    ListImages,
    /// [`ContainerEngine::import_image`].
    ImportImage,
    /// [`ContainerEngine::remove_image`].
    RemoveImage,
    /// [`ContainerEngine::version`].
    Version,
    /// [`ContainerEngine::info`].
    Info,
}

/// One call the engine received: the method and what it was about (an object's name or
/// id, a filter), with any run id in it written `{run}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Call {
    /// The method called.
    pub method: Method,
    /// What the call was about (a name, an id, a filter), with run ids written `{run}`.
    pub target: String,
}

impl Call {
    /// The call of `method` about `target`, with run ids in `target` written `{run}`.
    pub fn new(method: Method, target: &str) -> Call {
        Call {
            method,
            target: without_run_id(target),
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} {}", self.method, self.target)
    }
}

/// `text` with every run id (`r-` and 8 hex digits) written `{run}`.
fn without_run_id(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut shown = String::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        let is_id = text[at..].starts_with("r-")
            && bytes.len() >= at + 10
            && bytes[at + 2..at + 10].iter().all(u8::is_ascii_hexdigit)
            && bytes
                .get(at + 10)
                .is_none_or(|next| !next.is_ascii_hexdigit());
        if is_id {
            shown.push_str("{run}");
            at += 10;
        } else {
            let c = text[at..].chars().next().expect("within the text");
            shown.push(c);
            at += c.len_utf8();
        }
    }
    shown
}

/// The error a failed call answers with when a test did not say which: it names the call,
/// so the test can follow it to the caller.
pub fn injected_error(call: &Call) -> DockerError {
    DockerError::Engine {
        status: 500,
        message: format!("injected failure of {call}"),
    }
}

/// What the command does in a fake sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandScript {
    /// What the command writes to stdout.
    pub stdout: Vec<u8>,
    /// What the command writes to stderr.
    pub stderr: Vec<u8>,
    /// Its exit status once it has written; `None`: it runs until killed.
    pub exit: Option<i64>,
}

impl Default for CommandScript {
    fn default() -> CommandScript {
        CommandScript {
            stdout: b"hello\n".to_vec(),
            stderr: Vec::new(),
            exit: Some(0),
        }
    }
}

/// What a fake proxy does after its handoff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProxyScript {
    /// Prints its ready line and runs until signalled.
    Ready,
    /// Writes `said` on stderr and exits 1, as a proxy that cannot start.
    Fails {
        /// What it writes on stderr.
        said: String,
    },
}

/// A call a test holds or waits for ([`FakeEngine::hook`]).
pub struct CallHook {
    reached: watch::Receiver<bool>,
    release: watch::Sender<bool>,
}

impl CallHook {
    /// Resolves once the call has begun.
    pub async fn reached(&self) {
        let mut reached = self.reached.clone();
        let _ = reached.wait_for(|reached| *reached).await;
    }

    /// Lets a held call go on.
    pub fn release(&self) {
        self.release.send_replace(true);
    }
}

/// The role a container plays, by its name (`labels::RunNames`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Proxy,
    Sandbox,
    Other,
}

impl Role {
    fn of(name: &str) -> Role {
        if name.ends_with("-proxy") {
            Role::Proxy
        } else if name.ends_with("-sandbox") {
            Role::Sandbox
        } else {
            Role::Other
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Created,
    Running,
    Exited(i64),
}

struct Container {
    id: String,
    name: String,
    labels: HashMap<String, String>,
    /// Ids of the networks it is on.
    networks: BTreeSet<String>,
    opens_stdin: bool,
    status: Status,
    limits: Option<LiveLimits>,
    exit: watch::Sender<Option<i64>>,
    output: Option<mpsc::UnboundedSender<Result<OutputFrame, DockerError>>>,
    /// The container's end of its stdin, until its program takes it.
    stdin: Option<DuplexStream>,
    program: Option<tokio::task::AbortHandle>,
}

struct Network {
    id: String,
    name: String,
    labels: HashMap<String, String>,
    subnets: Vec<(String, Option<String>)>,
}

/// A fault or a hook, armed for the `countdown`-th matching call.
struct Armed<T> {
    method: Method,
    /// `None`: any call of the method.
    call: Option<Call>,
    countdown: usize,
    then: T,
}

impl<T> Armed<T> {
    fn matches(&self, call: &Call) -> bool {
        self.method == call.method && self.call.as_ref().is_none_or(|armed| armed == call)
    }
}

/// A held call's side of its [`CallHook`].
struct Hold {
    reached: watch::Sender<bool>,
    release: watch::Receiver<bool>,
    holds: bool,
}

#[derive(Default)]
struct State {
    containers: Vec<Container>,
    networks: Vec<Network>,
    images: BTreeMap<String, ImageFacts>,
    calls: Vec<Call>,
    faults: Vec<Armed<DockerError>>,
    hooks: Vec<Armed<Hold>>,
    script: CommandScript,
    proxy: Option<ProxyScript>,
    next_id: u64,
    /// Names whose create request is under way.
    in_flight: BTreeSet<String>,
    /// Removals asked for while the object's creation was under way: too early, the object
    /// appears after them.
    removed_in_flight: Vec<String>,
    refused_network_removals: usize,
    /// How long a refused network removal takes to answer.
    refusal_delay: Option<Duration>,
}

impl State {
    fn container(&self, key: &str) -> Option<&Container> {
        self.containers
            .iter()
            .find(|container| container.name == key || container.id == key)
    }

    fn container_mut(&mut self, key: &str) -> Option<&mut Container> {
        self.containers
            .iter_mut()
            .find(|container| container.name == key || container.id == key)
    }

    fn network(&self, key: &str) -> Option<&Network> {
        self.networks
            .iter()
            .find(|network| network.name == key || network.id == key)
    }

    fn new_id(&mut self, kind: char) -> String {
        self.next_id += 1;
        format!("{kind}{:063x}", self.next_id)
    }

    /// The armed entry for `call` whose count has run down, taken out.
    fn take_armed<T>(armed: &mut Vec<Armed<T>>, call: &Call) -> Option<T> {
        let mut fired = None;
        for (index, entry) in armed.iter_mut().enumerate() {
            if entry.matches(call) {
                entry.countdown -= 1;
                if entry.countdown == 0 && fired.is_none() {
                    fired = Some(index);
                }
            }
        }
        fired.map(|index| armed.remove(index).then)
    }
}

struct Fake {
    host: String,
    local: bool,
    state: Mutex<State>,
}

/// The in-memory engine. See the [module docs](self). Clones share one engine.
#[derive(Clone)]
pub struct FakeEngine {
    fake: Arc<Fake>,
}

impl std::fmt::Debug for FakeEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeEngine")
            .field("host", &self.fake.host)
            .finish_non_exhaustive()
    }
}

/// What the fake's handles run from instead of the egress-sandbox binary: never executed,
/// only placed (the launcher's mount) and hashed (the proxy image's tag).
const STAND_IN_BINARY: &[u8] =
    b"#!/bin/false\n# egress-sandbox FakeEngine: a stand-in for the proxy binary, never run\n";

impl FakeEngine {
    /// A local engine (`unix://`): runs get the launcher and passed listeners, as on this
    /// machine's Docker. It holds the base image and runc.
    pub fn local() -> FakeEngine {
        FakeEngine::new("unix:///fake-engine/docker.sock", true)
    }

    /// A remote engine (`tcp://`): runs get a network of their own and no launcher.
    pub fn remote() -> FakeEngine {
        FakeEngine::new("tcp://fake-engine:2375", false)
    }

    fn new(host: &str, local: bool) -> FakeEngine {
        let engine = FakeEngine {
            fake: Arc::new(Fake {
                host: host.to_owned(),
                local,
                state: Mutex::new(State {
                    proxy: Some(ProxyScript::Ready),
                    ..State::default()
                }),
            }),
        };
        engine.add_image(BASE_IMAGE, Vec::new());
        engine
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.fake
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A [`Sandbox`] handle on this engine, its proxy image already there.
    pub fn sandbox(&self) -> Result<Sandbox, RunError> {
        let binary = stand_in_binary()?;
        let tag = format!(
            "{PROXY_REPOSITORY}:{}",
            &egress_core::audit::sha256_hex(STAND_IN_BINARY)[..16]
        );
        self.add_image(&tag, vec!["/egress-sandbox".into(), "proxy".into()]);
        Ok(Sandbox::with_engine(Arc::new(self.clone()), binary)?.assume_proxy_image(tag))
    }

    /// What every sandbox's command does from now on.
    pub fn script_command(&self, script: CommandScript) {
        self.state().script = script;
    }

    /// What every proxy does after its handoff from now on.
    pub fn script_proxy(&self, script: ProxyScript) {
        self.state().proxy = Some(script);
    }

    /// An image the engine has.
    pub fn add_image(&self, tag: &str, entrypoint: Vec<String>) {
        let id = format!("sha256:{}", egress_core::audit::sha256_hex(tag.as_bytes()));
        self.state()
            .images
            .insert(tag.to_owned(), ImageFacts { id, entrypoint });
    }

    /// A container that exists already (created, not started), on the `networks` named.
    pub fn add_container(&self, name: &str, labels: HashMap<String, String>, networks: &[&str]) {
        let mut state = self.state();
        let id = state.new_id('c');
        let networks = networks
            .iter()
            .filter_map(|network| state.network(network).map(|n| n.id.clone()))
            .collect();
        state.containers.push(Container {
            id,
            name: name.to_owned(),
            labels,
            networks,
            opens_stdin: false,
            status: Status::Created,
            limits: None,
            exit: watch::channel(None).0,
            output: None,
            stdin: None,
            program: None,
        });
    }

    /// A network that exists already.
    pub fn add_network(&self, name: &str, labels: HashMap<String, String>) {
        let mut state = self.state();
        let id = state.new_id('n');
        state.networks.push(Network {
            id,
            name: name.to_owned(),
            labels,
            subnets: Vec::new(),
        });
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// The `occurrence`-th call equal to `call` from now on (1: the next) fails with `error`.
    pub fn fail_call(&self, call: &Call, occurrence: usize, error: DockerError) {
        self.state().faults.push(Armed {
            method: call.method,
            call: Some(call.clone()),
            countdown: occurrence.max(1),
            then: error,
        });
    }

    /// The `nth` call of `method` from now on (1: the next), whatever it is about, fails
    /// with `error`.
    pub fn fail_nth(&self, method: Method, nth: usize, error: DockerError) {
        self.state().faults.push(Armed {
            method,
            call: None,
            countdown: nth.max(1),
            then: error,
        });
    }

    /// The `occurrence`-th call equal to `call` from now on tells the hook when it begins;
    /// with `hold`, it then waits until the hook lets it go (at most a minute).
    pub fn hook(&self, call: &Call, occurrence: usize, hold: bool) -> CallHook {
        let (reached, reached_rx) = watch::channel(false);
        let (release, release_rx) = watch::channel(false);
        self.state().hooks.push(Armed {
            method: call.method,
            call: Some(call.clone()),
            countdown: occurrence.max(1),
            then: Hold {
                reached,
                release: release_rx,
                holds: hold,
            },
        });
        CallHook {
            reached: reached_rx,
            release,
        }
    }

    /// A refused network removal ("active endpoints") answers only after `delay`, as a
    /// slow engine does.
    pub fn delay_refusals(&self, delay: Duration) {
        self.state().refusal_delay = Some(delay);
    }

    /// Network removals refused so far because a container was still on the network.
    pub fn refused_network_removals(&self) -> usize {
        self.state().refused_network_removals
    }

    /// Removals asked for while the object's creation was still under way.
    pub fn removed_in_flight(&self) -> Vec<String> {
        self.state().removed_in_flight.clone()
    }

    /// The names of the containers that exist, sorted.
    pub fn containers(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .state()
            .containers
            .iter()
            .map(|container| container.name.clone())
            .collect();
        names.sort();
        names
    }

    /// The names of the networks that exist, sorted.
    pub fn networks(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .state()
            .networks
            .iter()
            .map(|network| network.name.clone())
            .collect();
        names.sort();
        names
    }

    /// What runs left behind: every container and every network but the shared egress
    /// network (which belongs to no run), as `container NAME` / `network NAME`.
    pub fn leftovers(&self) -> Vec<String> {
        let state = self.state();
        let mut left: Vec<String> = state
            .containers
            .iter()
            .map(|container| format!("container {}", container.name))
            .chain(
                state
                    .networks
                    .iter()
                    .filter(|network| !network.labels.contains_key(SHARED_LABEL))
                    .map(|network| format!("network {}", network.name)),
            )
            .collect();
        left.sort();
        left
    }

    /// The live limits last set on container `name`.
    pub fn limits_of(&self, name: &str) -> Option<LiveLimits> {
        self.state().container(name)?.limits
    }

    /// Records `call`, then answers with an armed fault, after an armed hook.
    async fn enter(&self, method: Method, target: &str) -> Result<(), DockerError> {
        let call = Call::new(method, target);
        let (fault, hold) = {
            let mut state = self.state();
            state.calls.push(call.clone());
            let fault = State::take_armed(&mut state.faults, &call);
            let hold = State::take_armed(&mut state.hooks, &call);
            (fault, hold)
        };
        if let Some(hold) = hold {
            hold.reached.send_replace(true);
            if hold.holds {
                let mut release = hold.release;
                let _ = tokio::time::timeout(HOLD_LIMIT, release.wait_for(|go| *go)).await;
            }
        }
        fault.map_or(Ok(()), Err)
    }

    fn not_found(kind: &str, key: &str) -> DockerError {
        DockerError::NotFound {
            message: format!("No such {kind}: {key}"),
        }
    }

    /// Ends container `id` with `code`: its output closes, its waiters learn the code.
    fn exit(&self, id: &str, code: i64) {
        let mut state = self.state();
        if let Some(container) = state.container_mut(id) {
            exit_container(container, code);
        }
    }

    /// Sends `frame` to whoever is attached to container `id`.
    fn emit(&self, id: &str, frame: OutputFrame) {
        let state = self.state();
        if let Some(output) = state.container(id).and_then(|c| c.output.as_ref()) {
            let _ = output.send(Ok(frame));
        }
    }

    fn create(&self, name: &str, config: ContainerConfig) -> Result<String, DockerError> {
        let mut state = self.state();
        if state.container(name).is_some() {
            return Err(DockerError::Conflict {
                message: format!("the container name \"/{name}\" is already in use"),
            });
        }
        let image = config.image().unwrap_or_default().to_owned();
        if !state.images.contains_key(&image) {
            return Err(FakeEngine::not_found("image", &image));
        }
        let mut networks = BTreeSet::new();
        match config.network_mode() {
            None | Some("none" | "bridge" | "host" | "default") => {}
            Some(network) => match state.network(network) {
                Some(network) => {
                    networks.insert(network.id.clone());
                }
                None => {
                    return Err(FakeEngine::not_found("network", network));
                }
            },
        }
        let id = state.new_id('c');
        state.containers.push(Container {
            id: id.clone(),
            name: name.to_owned(),
            labels: config.labels(),
            networks,
            opens_stdin: config.opens_stdin(),
            status: Status::Created,
            limits: None,
            exit: watch::channel(None).0,
            output: None,
            stdin: None,
            program: None,
        });
        Ok(id)
    }

    fn attach(&self, name: &str, stdin: bool) -> Result<Attached, DockerError> {
        let mut state = self.state();
        let container = state
            .container_mut(name)
            .ok_or_else(|| FakeEngine::not_found("container", name))?;
        let (sender, receiver) = mpsc::unbounded_channel();
        if !matches!(container.status, Status::Exited(_)) {
            container.output = Some(sender);
        }
        let output: OutputFrames = Box::pin(futures_util::stream::unfold(
            receiver,
            |mut receiver| async move { receiver.recv().await.map(|item| (item, receiver)) },
        ));
        let stdin = stdin.then(|| {
            let (ours, theirs) = tokio::io::duplex(64 << 10);
            container.stdin = Some(theirs);
            Box::pin(ours) as crate::engine::StdinWriter
        });
        Ok(Attached { output, stdin })
    }

    fn start(&self, name: &str) -> Result<(), DockerError> {
        let mut state = self.state();
        let script = state.script.clone();
        let proxy = state.proxy.clone();
        let container = state
            .container_mut(name)
            .ok_or_else(|| FakeEngine::not_found("container", name))?;
        match container.status {
            Status::Running => return Ok(()),
            Status::Exited(_) => {
                return Err(DockerError::Conflict {
                    message: format!("the fake engine does not restart {name}"),
                });
            }
            Status::Created => {}
        }
        container.status = Status::Running;
        let program = Program {
            engine: self.clone(),
            id: container.id.clone(),
            role: Role::of(&container.name),
            stdin: container.stdin.take(),
            opens_stdin: container.opens_stdin,
            script,
            proxy: proxy.unwrap_or(ProxyScript::Ready),
        };
        container.program = Some(tokio::spawn(program.run()).abort_handle());
        Ok(())
    }

    fn kill(&self, name: &str, signal: &str) -> Result<(), DockerError> {
        let mut state = self.state();
        let container = state
            .container_mut(name)
            .ok_or_else(|| FakeEngine::not_found("container", name))?;
        if container.status != Status::Running {
            return Err(DockerError::Conflict {
                message: format!("Container {} is not running", container.id),
            });
        }
        let number = match signal {
            "SIGKILL" | "KILL" | "9" => 9,
            "SIGTERM" | "TERM" | "15" => 15,
            "SIGINT" | "INT" | "2" => 2,
            other => {
                return Err(DockerError::Engine {
                    status: 400,
                    message: format!("invalid signal: {other}"),
                });
            }
        };
        exit_container(container, 128 + number);
        Ok(())
    }

    fn remove(&self, name: &str) -> Result<(), DockerError> {
        let mut state = self.state();
        if state.in_flight.contains(name) {
            state.removed_in_flight.push(name.to_owned());
        }
        let index = state
            .containers
            .iter()
            .position(|container| container.name == name || container.id == name)
            .ok_or_else(|| FakeEngine::not_found("container", name))?;
        let mut container = state.containers.remove(index);
        if !matches!(container.status, Status::Exited(_)) {
            exit_container(&mut container, 137);
        }
        Ok(())
    }

    fn create_net(&self, config: &NetworkConfig) -> Result<String, DockerError> {
        let mut state = self.state();
        let name = config.name().to_owned();
        if state.network(&name).is_some() {
            return Err(DockerError::Conflict {
                message: format!("network with name {name} already exists"),
            });
        }
        let subnets = config.subnets();
        let taken = |candidate: &str| {
            let Ok(candidate) = candidate.parse::<Ipv4Net>() else {
                return false;
            };
            state
                .networks
                .iter()
                .flat_map(|n| &n.subnets)
                .any(|(used, _)| {
                    used.parse::<Ipv4Net>().is_ok_and(|used| {
                        used.contains(&candidate.network()) || candidate.contains(&used.network())
                    })
                })
        };
        if subnets.iter().any(|(subnet, _)| taken(subnet)) {
            return Err(DockerError::Engine {
                status: 403,
                message: "Pool overlaps with other one on this address space".into(),
            });
        }
        let id = state.new_id('n');
        state.networks.push(Network {
            id: id.clone(),
            name,
            labels: config.labels(),
            subnets,
        });
        Ok(id)
    }

    /// Removes network `key`, or says why not: `Err(Some(delay))` when a container is still
    /// on it (the refusal comes after `delay`).
    fn remove_net(&self, key: &str) -> Result<(), Result<DockerError, Option<Duration>>> {
        let mut state = self.state();
        if state.in_flight.contains(key) {
            state.removed_in_flight.push(key.to_owned());
        }
        let Some(network) = state.network(key) else {
            return Err(Ok(FakeEngine::not_found("network", key)));
        };
        let id = network.id.clone();
        if state.containers.iter().any(|c| c.networks.contains(&id)) {
            state.refused_network_removals += 1;
            return Err(Err(state.refusal_delay));
        }
        state.networks.retain(|network| network.id != id);
        Ok(())
    }

    /// Runs `answer` as call `method` on `target`: recorded, and failed or held as armed.
    fn answer<T: Send + 'static>(
        &self,
        method: Method,
        target: &str,
        answer: impl FnOnce(&FakeEngine) -> Result<T, DockerError> + Send + 'static,
    ) -> EngineCall<'static, T> {
        let (engine, target) = (self.clone(), target.to_owned());
        Box::pin(async move {
            engine.enter(method, &target).await?;
            answer(&engine)
        })
    }
}

/// Ends `container` with `code` (under the engine's lock).
fn exit_container(container: &mut Container, code: i64) {
    container.status = Status::Exited(code);
    container.output = None;
    container.stdin = None;
    if let Some(program) = container.program.take() {
        program.abort();
    }
    container.exit.send_replace(Some(code));
}

/// The stand-in binary, at one place per user (so runs of all tests share one launcher
/// place and one remembered hash), written once.
fn stand_in_binary() -> Result<PathBuf, RunError> {
    let dir = crate::private_dir::ensure(&crate::private_dir::user_temp_dir())?.join("fake-engine");
    let path = dir.join("egress-sandbox");
    if std::fs::read(&path).is_ok_and(|found| found == STAND_IN_BINARY) {
        return Ok(path);
    }
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        let staged = tempfile::NamedTempFile::new_in(&dir)?;
        std::fs::write(staged.path(), STAND_IN_BINARY)?;
        staged.persist(&path).map_err(|error| error.error)?;
        Ok(())
    };
    write().map_err(|source| RunError::ProxyBinary {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// What a started fake container does.
struct Program {
    engine: FakeEngine,
    id: String,
    role: Role,
    stdin: Option<DuplexStream>,
    opens_stdin: bool,
    script: CommandScript,
    proxy: ProxyScript,
}

impl Program {
    async fn run(mut self) {
        match self.role {
            Role::Proxy => self.proxy().await,
            Role::Sandbox => self.command().await,
            Role::Other => self.engine.exit(&self.id, 0),
        }
    }

    /// Reads the handoff line, says it is ready (or fails), then runs until signalled.
    async fn proxy(&mut self) {
        let handed_off = match self.stdin.take() {
            Some(mut stdin) => read_line(&mut stdin).await.is_some(),
            None => false,
        };
        match (&self.proxy, handed_off) {
            (ProxyScript::Ready, true) => self.engine.emit(
                &self.id,
                OutputFrame::Stdout(Bytes::from_static(b"{\"ready\":true}\n")),
            ),
            (ProxyScript::Ready, false) => {
                let said = "error: no handoff on stdin\n";
                self.engine.emit(
                    &self.id,
                    OutputFrame::Stderr(Bytes::from_static(said.as_bytes())),
                );
                return self.engine.exit(&self.id, 1);
            }
            (ProxyScript::Fails { said }, _) => {
                self.engine.emit(
                    &self.id,
                    OutputFrame::Stderr(Bytes::from(format!("{said}\n"))),
                );
                return self.engine.exit(&self.id, 1);
            }
        }
        std::future::pending::<()>().await
    }

    /// Waits for the launcher's go signal (when behind one), writes the script's output,
    /// exits with its code.
    async fn command(&mut self) {
        if self.opens_stdin {
            let signalled = match self.stdin.take() {
                Some(mut stdin) => read_launch_signal(&mut stdin).await,
                None => false,
            };
            if !signalled {
                // The launcher's input ended first: the run gave up; so does the launcher.
                return self.engine.exit(&self.id, 1);
            }
        }
        let script = self.script.clone();
        for (bytes, frame) in [
            (
                script.stdout,
                OutputFrame::Stdout as fn(Bytes) -> OutputFrame,
            ),
            (script.stderr, OutputFrame::Stderr),
        ] {
            if !bytes.is_empty() {
                self.engine.emit(&self.id, frame(Bytes::from(bytes)));
            }
        }
        match script.exit {
            Some(code) => self.engine.exit(&self.id, code),
            None => std::future::pending::<()>().await,
        }
    }
}

/// One line from `stdin`, without its newline; `None` at its end.
async fn read_line(stdin: &mut DuplexStream) -> Option<Vec<u8>> {
    let mut line = Vec::new();
    loop {
        match stdin.read_u8().await {
            Ok(b'\n') => return Some(line),
            Ok(byte) => line.push(byte),
            Err(_) => return None,
        }
    }
}

/// Reads one launcher signal (`launch_signal`: a length line, then that much JSON);
/// whether one came.
async fn read_launch_signal(stdin: &mut DuplexStream) -> bool {
    let Some(header) = read_line(stdin).await else {
        return false;
    };
    let Ok(length) = std::str::from_utf8(&header).unwrap_or("x").parse::<usize>() else {
        return header.is_empty();
    };
    let mut setup = vec![0; length];
    stdin.read_exact(&mut setup).await.is_ok()
}

impl ContainerEngine for FakeEngine {
    fn host(&self) -> &str {
        &self.fake.host
    }

    fn is_local(&self) -> bool {
        self.fake.local
    }

    fn reconnect(&self) -> EngineCall<'_, Arc<dyn ContainerEngine>> {
        self.answer(Method::Reconnect, "", |engine| {
            Ok(Arc::new(engine.clone()) as Arc<dyn ContainerEngine>)
        })
    }

    fn create_container(&self, name: &str, config: ContainerConfig) -> EngineCall<'_, String> {
        let (engine, name) = (self.clone(), name.to_owned());
        Box::pin(async move {
            engine.state().in_flight.insert(name.clone());
            let created = match engine.enter(Method::CreateContainer, &name).await {
                Ok(()) => engine.create(&name, config),
                Err(error) => Err(error),
            };
            engine.state().in_flight.remove(&name);
            created
        })
    }

    fn attach_container(&self, container: &str, stdin: bool) -> EngineCall<'_, Attached> {
        let name = container.to_owned();
        self.answer(Method::AttachContainer, container, move |engine| {
            engine.attach(&name, stdin)
        })
    }

    fn start_container(&self, container: &str) -> EngineCall<'_, ()> {
        let name = container.to_owned();
        self.answer(Method::StartContainer, container, move |engine| {
            engine.start(&name)
        })
    }

    fn wait_container(&self, container: &str) -> EngineCall<'_, i64> {
        let (engine, name) = (self.clone(), container.to_owned());
        Box::pin(async move {
            engine.enter(Method::WaitContainer, &name).await?;
            let mut exit = {
                let state = engine.state();
                let container = state
                    .container(&name)
                    .ok_or_else(|| FakeEngine::not_found("container", &name))?;
                // A container that never started is "not running" already.
                if container.status == Status::Created {
                    return Ok(0);
                }
                container.exit.subscribe()
            };
            let code = exit
                .wait_for(Option::is_some)
                .await
                .map(|code| code.unwrap_or(137))
                .unwrap_or(137);
            Ok(code)
        })
    }

    fn inspect_container(&self, container: &str) -> EngineCall<'_, ContainerState> {
        let name = container.to_owned();
        self.answer(Method::InspectContainer, container, move |engine| {
            let state = engine.state();
            let container = state
                .container(&name)
                .ok_or_else(|| FakeEngine::not_found("container", &name))?;
            Ok(ContainerState {
                running: container.status == Status::Running,
                exit_code: Some(match container.status {
                    Status::Exited(code) => code,
                    Status::Created | Status::Running => 0,
                }),
                oom_killed: false,
            })
        })
    }

    fn update_container(&self, container: &str, limits: LiveLimits) -> EngineCall<'_, ()> {
        let name = container.to_owned();
        self.answer(Method::UpdateContainer, container, move |engine| {
            let mut state = engine.state();
            let container = state
                .container_mut(&name)
                .ok_or_else(|| FakeEngine::not_found("container", &name))?;
            container.limits = Some(limits);
            Ok(())
        })
    }

    fn kill_container(&self, container: &str, signal: &str) -> EngineCall<'_, ()> {
        let (name, signal) = (container.to_owned(), signal.to_owned());
        self.answer(Method::KillContainer, container, move |engine| {
            engine.kill(&name, &signal)
        })
    }

    fn remove_container(&self, container: &str) -> EngineCall<'_, ()> {
        let (engine, name) = (self.clone(), container.to_owned());
        Box::pin(async move {
            engine.enter(Method::RemoveContainer, &name).await?;
            // A removal takes a while on an engine: a network refusal meanwhile answers first.
            let on_a_network = engine
                .state()
                .container(&name)
                .is_some_and(|container| !container.networks.is_empty());
            if on_a_network {
                tokio::task::yield_now().await;
            }
            engine.remove(&name)
        })
    }

    fn list_containers(&self, filter: &ListFilter) -> EngineCall<'_, Vec<ContainerSummary>> {
        let filter = filter.clone();
        self.answer(
            Method::ListContainers,
            &format!("{filter:?}"),
            move |engine| {
                Ok(engine
                    .state()
                    .containers
                    .iter()
                    .filter(|container| filter.admits(&container.name, &container.labels))
                    .map(|container| ContainerSummary {
                        id: container.id.clone(),
                        name: container.name.clone(),
                        labels: container.labels.clone(),
                    })
                    .collect())
            },
        )
    }

    fn download_from_container(&self, container: &str, path: &str) -> ArchiveStream {
        let (engine, name, path) = (self.clone(), container.to_owned(), path.to_owned());
        // The fake's images have no files: every path is missing.
        Box::pin(futures_util::stream::once(async move {
            engine.enter(Method::DownloadFromContainer, &name).await?;
            if engine.state().container(&name).is_none() {
                return Err(FakeEngine::not_found("container", &name));
            }
            Err(DockerError::NotFound {
                message: format!("Could not find the file {path} in container {name}"),
            })
        }))
    }

    fn saw_oom_event(
        &self,
        container: &str,
        _lookback: Duration,
        _wait: Duration,
    ) -> EngineCall<'_, bool> {
        self.answer(Method::SawOomEvent, container, |_| Ok(false))
    }

    fn create_network(&self, config: NetworkConfig) -> EngineCall<'_, String> {
        let (engine, name) = (self.clone(), config.name().to_owned());
        Box::pin(async move {
            engine.state().in_flight.insert(name.clone());
            let created = match engine.enter(Method::CreateNetwork, &name).await {
                Ok(()) => engine.create_net(&config),
                Err(error) => Err(error),
            };
            engine.state().in_flight.remove(&name);
            created
        })
    }

    fn inspect_network(&self, network: &str) -> EngineCall<'_, NetworkSummary> {
        let key = network.to_owned();
        self.answer(Method::InspectNetwork, network, move |engine| {
            let state = engine.state();
            let network = state
                .network(&key)
                .ok_or_else(|| FakeEngine::not_found("network", &key))?;
            Ok(network_summary(network))
        })
    }

    fn connect_network(&self, network: &str, container: &str) -> EngineCall<'_, ()> {
        let (key, name) = (network.to_owned(), container.to_owned());
        let target = format!("{network} {container}");
        self.answer(Method::ConnectNetwork, &target, move |engine| {
            let mut state = engine.state();
            let id = state
                .network(&key)
                .ok_or_else(|| FakeEngine::not_found("network", &key))?
                .id
                .clone();
            let container = state
                .container_mut(&name)
                .ok_or_else(|| FakeEngine::not_found("container", &name))?;
            if !container.networks.insert(id) {
                return Err(DockerError::Engine {
                    status: 403,
                    message: format!("endpoint with name {name} already exists in network {key}"),
                });
            }
            Ok(())
        })
    }

    fn remove_network(&self, network: &str) -> EngineCall<'_, ()> {
        let (engine, key) = (self.clone(), network.to_owned());
        Box::pin(async move {
            engine.enter(Method::RemoveNetwork, &key).await?;
            match engine.remove_net(&key) {
                Ok(()) => Ok(()),
                Err(Ok(error)) => Err(error),
                Err(Err(delay)) => {
                    if let Some(delay) = delay {
                        tokio::time::sleep(delay).await;
                    }
                    Err(DockerError::Engine {
                        status: 403,
                        message: format!(
                            "error while removing network: network {key} has active endpoints"
                        ),
                    })
                }
            }
        })
    }

    fn list_networks(&self, filter: &ListFilter) -> EngineCall<'_, Vec<NetworkSummary>> {
        let filter = filter.clone();
        self.answer(
            Method::ListNetworks,
            &format!("{filter:?}"),
            move |engine| {
                Ok(engine
                    .state()
                    .networks
                    .iter()
                    .filter(|network| filter.admits(&network.name, &network.labels))
                    .map(network_summary)
                    .collect())
            },
        )
    }

    fn inspect_image(&self, image: &str) -> EngineCall<'_, ImageFacts> {
        let tag = image.to_owned();
        self.answer(Method::InspectImage, image, move |engine| {
            engine
                .state()
                .images
                .get(&tag)
                .cloned()
                .ok_or_else(|| FakeEngine::not_found("image", &tag))
        })
    }

    fn list_images(&self, label: &str) -> EngineCall<'_, Vec<ImageSummary>> {
        // The fake's images carry no labels: none is this tool's to sweep.
        self.answer(Method::ListImages, label, |_| Ok(Vec::new()))
    }

    fn import_image(&self, import: ImageImport) -> EngineCall<'_, ()> {
        let tag = format!("{}:{}", import.repository, import.tag);
        self.answer(Method::ImportImage, &tag.clone(), move |engine| {
            engine.add_image(&tag, Vec::new());
            Ok(())
        })
    }

    fn remove_image(&self, image: &str, _force: bool) -> EngineCall<'_, ()> {
        let tag = image.to_owned();
        self.answer(Method::RemoveImage, image, move |engine| {
            engine
                .state()
                .images
                .remove(&tag)
                .map(drop)
                .ok_or_else(|| FakeEngine::not_found("image", &tag))
        })
    }

    fn version(&self) -> EngineCall<'_, EngineVersion> {
        self.answer(Method::Version, "", |_| {
            Ok(EngineVersion {
                version: "fake".into(),
                api_version: "1.41".into(),
                negotiated_api: "1.41".into(),
                os: Some("linux".into()),
                arch: Some("amd64".into()),
            })
        })
    }

    fn info(&self) -> EngineCall<'_, EngineInfo> {
        self.answer(Method::Info, "", |_| {
            let runc = RuntimeInfo::new("runc".into(), Some("runc".into()), Vec::new());
            Ok(EngineInfo {
                cpus: Some(2),
                runtimes: BTreeMap::from([("runc".to_owned(), runc)]),
                default_runtime: Some("runc".into()),
                storage_driver: "overlay2".into(),
                cgroup_version: "2".into(),
                memory_limit: true,
                swap_limit: true,
                cpu_quota: true,
                pids_limit: true,
            })
        })
    }
}

fn network_summary(network: &Network) -> NetworkSummary {
    NetworkSummary {
        id: network.id.clone(),
        name: network.name.clone(),
        labels: network.labels.clone(),
        subnets: network
            .subnets
            .iter()
            .map(|(subnet, _)| subnet.clone())
            .collect(),
        gateways: network
            .subnets
            .iter()
            .filter_map(|(_, gateway)| gateway.clone())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_id_in_a_call_is_written_as_a_placeholder() {
        assert_eq!(
            without_run_id("egress-run-r-0a1b2c3d-proxy"),
            "egress-run-{run}-proxy"
        );
        assert_eq!(
            without_run_id("Label(\"egress-sandbox.run=r-00000001\")"),
            "Label(\"egress-sandbox.run={run}\")"
        );
        // Not an id: too short, or longer than 8 hex digits.
        assert_eq!(without_run_id("r-0a1b"), "r-0a1b");
        assert_eq!(without_run_id("r-0a1b2c3d4"), "r-0a1b2c3d4");
    }

    /// The fake plays Docker's answers the lifecycle relies on: a missing object, a name
    /// in use, a signal to a stopped container, a network with a container on it.
    #[tokio::test]
    async fn the_fake_answers_as_the_engine_does() {
        let fake = FakeEngine::local();
        let engine: &dyn ContainerEngine = &fake;
        fake.add_network("net", HashMap::new());
        fake.add_container("c", HashMap::new(), &["net"]);
        assert!(
            engine
                .remove_container("gone")
                .await
                .unwrap_err()
                .is_not_found()
        );
        assert!(
            engine
                .kill_container("c", "SIGKILL")
                .await
                .unwrap_err()
                .is_conflict()
        );
        let refused = engine.remove_network("net").await.unwrap_err();
        assert!(refused.says("active endpoints"), "{refused}");
        assert_eq!(fake.refused_network_removals(), 1);
        engine.ensure_container_removed("c").await.unwrap();
        engine.ensure_network_removed("net").await.unwrap();
        engine.ensure_network_removed("net").await.unwrap();
        assert!(fake.leftovers().is_empty());
    }

    /// An armed fault fails exactly the call it names, once; the calls are recorded.
    #[tokio::test]
    async fn a_fault_fails_the_nth_matching_call_once() {
        let fake = FakeEngine::local();
        let engine: &dyn ContainerEngine = &fake;
        let call = Call::new(Method::InspectImage, BASE_IMAGE);
        fake.fail_call(&call, 2, injected_error(&call));
        engine.inspect_image(BASE_IMAGE).await.unwrap();
        let error = engine.inspect_image(BASE_IMAGE).await.unwrap_err();
        assert_eq!(error, injected_error(&call));
        engine.inspect_image(BASE_IMAGE).await.unwrap();
        fake.fail_nth(
            Method::Info,
            1,
            injected_error(&Call::new(Method::Info, "")),
        );
        assert!(engine.info().await.is_err());
        assert_eq!(fake.calls().len(), 4);
        assert_eq!(fake.calls()[0], call);
    }
}
