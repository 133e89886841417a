//! The run lifecycle: set up, run, tear down — as a library call.
//!
//! ```text
//!  slot (slot.rs; a pool prepares it ahead, a cold run now):
//! connect, check --runtime ─┬─ proxy image ───────────────┐
//!                           ├─ sandbox image ─────────────┤
//!                           ├─ egress network, gateways ──┼─┬─ create proxy → attach → start ──────────────┐
//!                           └─ doors dir (local) or ──────┘ ├─ create sandbox → attach → start (held) ────┤
//!                              run network (remote)         └─ (inspected hosts) the image's CA bundle ────┤
//!  claim (slot.rs):  docker update (limits, if changed) ─┬─ handoff (stdin) ─ ready ─┬─ fill the trust bundle
//!                    (remote) connect egress ────────────┘                           └─ go signal: argv, env, workdir, files
//!                    launcher: bind the doors on the loopback, pass them to the proxy, wait for its `ok`, exec the command
//!    relay output, count audit records, wait ─ exit │ time limit │ interrupt │ proxy died ─ kill
//!    command over (output ends) ─ stop proxy (its output ends with the `end` record) ─ outcome
//!    then (Leftovers::remove; the daemon after its answer): remove both containers (─ remove the network)
//! ```
//!
//! On a local engine the sandbox has no network: its launcher passes the doors it binds on its
//! loopback to the proxy, which is created on the egress network alone (`wiring`). A run
//! then creates no Docker network; a remote engine's run still gets one of its own.
//!
//! The proxy's arguments carry only its listeners and `--floor-extra` (the egress gateways
//! and, with a local engine, this host's public addresses); policies, pins and the run id
//! go over its stdin as one handoff line. If the proxy stops on its own while the command
//! runs, the sandbox is killed at once and the run ends `proxy_failed` (exit 125).
//! Secrets travel only in that handoff; the sandbox gets placeholders in its env. When the
//! policy inspects a host, the proxy's ready line carries the run CA, and the sandbox's trust
//! bundle (a read-only bind mount created empty, `trust`) is filled with the image's own
//! bundle plus that CA before the launcher opens.
//!
//! Steps that do not depend on each other overlap: done one after another, a run costs about six
//! times a bare `docker run` (`docs/src/benchmarks.md`). On a local engine the sandbox is even
//! started alongside the proxy, its command held back by a launcher until the proxy is ready
//! (`commands::sandbox_launcher`), which also hands the command its argv, environment and working
//! directory. Every object is registered with the run's `Teardown` before it is created and removed
//! before the run returns, on every path.
//!
//! Embedders (an agent framework, say) run specs through a [`Sandbox`] handle, as the
//! `run` command and the daemon do.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::audit_tee::AuditTee;
use crate::audit_trail::{self, ProxyOutput};
use crate::container::launch_setup;
use crate::engine::{DockerError, EngineCall, OutputFrames, StdinWriter};
use crate::events::{EventSender, RunEvent};
use crate::handle::Sandbox;
use crate::launch_signal;
use crate::outcome::docker_step;
pub(crate) use crate::outcome::{Interruption, PROXY_FAILED_EXIT, RunError, RunOutcome, RunStatus};
use crate::output::{self, OutputSinks, OutputStats, StreamEnd};
use crate::runtime::RuntimeKind;
use crate::slot::{Prepared, Slot, SlotObjects};
use crate::spec::RunSpec;
use crate::trust::TrustBundle;
use crate::wiring::Wiring;
use egress_core::tally::{AttemptCounts, AuditCounts};

/// After SIGTERM the proxy closes tunnels, writes their records and exits (~1 s).
const PROXY_STOP_TIMEOUT: Duration = Duration::from_secs(3);
/// After the sandbox stopped, its output stream ends; this bounds a stuck stream.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How far back the engine's `oom` events are read for a sandbox that exited 137 (its name
/// is its run's alone, so any such event is this run's).
const OOM_LOOKBACK: Duration = Duration::from_secs(3600);
/// How long a 137 without the engine's `OOMKilled` waits for an `oom` event still on its
/// way (only such exits wait: a program that kills itself with SIGKILL, say).
const OOM_EVENT_WAIT: Duration = Duration::from_millis(500);

/// Running specs: here rather than in `handle`, so that the handle does not depend on the
/// lifecycle it starts.
impl Sandbox {
    /// Runs `spec` to the end, relaying output and events into `sinks`. Every object the
    /// run created is removed before this returns.
    ///
    /// # Dropping the future
    ///
    /// A run future dropped before it resolves (in a `select!`, a `timeout`, an aborted
    /// task) still removes every object the run created, from within the drop: **the
    /// dropping thread blocks** until the containers and the network are removed —
    /// normally well under a second, at most 60 s when a Docker create request is still
    /// in flight or the engine does not answer. The removal runs on a thread of its own with
    /// a fresh engine connection (the caller's runtime may be shutting down), so nothing
    /// of the run outlives the process. On a multi-thread runtime the wait is made in
    /// [`tokio::task::block_in_place`], so the worker's other tasks move to another
    /// worker; on a current-thread runtime nothing else on it progresses meanwhile, and
    /// creations still in flight are not waited for (the removal sweeps by the run's
    /// label instead). Outside a runtime the dropping thread simply waits.
    ///
    /// To stop a run without blocking a thread, end it instead of dropping it:
    /// [`run_until`](Self::run_until) with an `interrupt` that resolves, which kills the
    /// command and removes everything asynchronously.
    pub async fn run(&self, spec: RunSpec, sinks: OutputSinks) -> Result<RunOutcome, RunError> {
        self.run_until(spec, sinks, std::future::pending()).await
    }

    /// As [`run`](Self::run), but `interrupt` ending stops the run: the sandbox is killed,
    /// everything is removed, and the outcome says
    /// [`RunStatus::Interrupted`]. Dropping this future blocks the dropping thread, as
    /// the "Dropping the future" section of [`run`](Self::run) says.
    pub async fn run_until(
        &self,
        spec: RunSpec,
        sinks: OutputSinks,
        interrupt: impl Future<Output = Interruption>,
    ) -> Result<RunOutcome, RunError> {
        execute(self, spec, sinks, interrupt).await
    }

    /// As [`run_until`](Self::run_until), in `warm` (a slot claimed from a
    /// [`Pool`](crate::pool::Pool)) when given, else cold; but the run's objects are left
    /// for the caller to remove ([`Leftovers::remove`]), so it can answer its own caller
    /// first. `spec.audit_log` is not opened here.
    pub async fn run_leaving_objects(
        &self,
        warm: Option<crate::pool::WarmSlot>,
        spec: &RunSpec,
        sinks: OutputSinks,
        interrupt: impl Future<Output = Interruption>,
    ) -> (Result<RunOutcome, RunError>, Option<Leftovers>) {
        run_parts(self, warm, spec, None, sinks, interrupt).await
    }
}

/// Runs `spec` on `sandbox` to the end ([`Sandbox::run_until`]): set-up, run, removal.
async fn execute(
    sandbox: &Sandbox,
    spec: RunSpec,
    sinks: OutputSinks,
    interrupt: impl Future<Output = Interruption>,
) -> Result<RunOutcome, RunError> {
    // Opened before Docker is touched: a bad path is refused with nothing created.
    let audit_file = open_audit_log(&spec)?;
    let (result, leftovers) = run_parts(sandbox, None, &spec, audit_file, sinks, interrupt).await;
    let failures = match leftovers {
        Some(leftovers) => leftovers.remove().await,
        None => Vec::new(),
    };
    tracing::debug!("teardown done");
    let mut outcome = result?;
    outcome.teardown_errors = failures;
    Ok(outcome)
}

fn open_audit_log(spec: &RunSpec) -> Result<Option<std::fs::File>, RunError> {
    match &spec.audit_log {
        Some(path) => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(Some)
            .map_err(|source| RunError::AuditLog {
                path: path.clone(),
                source,
            }),
        None => Ok(None),
    }
}

/// A run's objects once its outcome is known: removing them is the caller's last step
/// (`run` waits for it; the daemon answers first and removes them in the background).
pub struct Leftovers {
    objects: SlotObjects,
    /// The set-up was cut short: a create request may have made an object we never
    /// heard of, so removal also sweeps by the run's label.
    sweep: bool,
}

impl Leftovers {
    /// The run these objects belong to.
    pub fn run_id(&self) -> &str {
        &self.objects.names.id
    }

    /// Removes every object; what could not be removed, as messages.
    pub async fn remove(self) -> Vec<String> {
        let failures = self.objects.teardown.run(self.sweep).await;
        drop(self.objects);
        failures
    }
}

/// The objects of a cold run of `spec`: checks what must hold before anything is created
/// (the runtime; inspected hosts need a local engine), makes the trust bundle.
async fn cold_objects(sandbox: &Sandbox, spec: &RunSpec) -> Result<SlotObjects, RunError> {
    let engine = sandbox.engine();
    // Checked before anything is created: an unknown runtime would fail only at the
    // sandbox's create, after the networks and the proxy exist.
    if let Some(name) = &spec.runtime {
        let offer = crate::fit::check_runtime(engine, Some(name)).await?;
        if let Err(unknown) = offer.runtime {
            return Err(RunError::UnknownRuntime {
                name: egress_core::text::visible(&unknown.name).into_owned(),
                available: unknown.available,
            });
        }
    }
    // The sandbox trusts the run CA through a bind-mounted bundle: a host file, so only
    // with a local engine (the same condition as the launcher that holds the command until
    // the bundle is written). A remote engine would run the command without it: refused.
    let inspected = spec.policy_set.inspected_hosts();
    let trust = if inspected.is_empty() {
        None
    } else if engine.is_local() {
        Some(TrustBundle::create(sandbox.owner())?)
    } else {
        return Err(RunError::InspectedNeedsLocalEngine {
            hosts: inspected.iter().map(|host| host.to_string()).collect(),
            engine: engine.host().to_owned(),
        });
    };
    Ok(SlotObjects::new(sandbox, trust))
}

/// Runs `spec` in `warm` (a pool's slot), or in a slot of its own set up now, up to its
/// outcome; the objects are left for the caller to remove (`None`: none were made).
async fn run_parts(
    sandbox: &Sandbox,
    warm: Option<crate::pool::WarmSlot>,
    spec: &RunSpec,
    audit_file: Option<std::fs::File>,
    mut sinks: OutputSinks,
    interrupt: impl Future<Output = Interruption>,
) -> (Result<RunOutcome, RunError>, Option<Leftovers>) {
    let events = sinks.events.take().map(EventSender::new);
    let audit_log_failed = Arc::default();
    let audit_log = AuditTee::new(audit_file, events.clone(), Arc::clone(&audit_log_failed));
    let (objects, slot) = match warm {
        Some(crate::pool::WarmSlot { objects, slot }) => (objects, Some(slot)),
        None => match cold_objects(sandbox, spec).await {
            Ok(objects) => (objects, None),
            Err(error) => return (Err(error), None),
        },
    };
    if let Some(events) = &events {
        events.send(RunEvent::Id(objects.names.id.clone())).await;
    }
    let run = Run {
        sandbox,
        objects: &objects,
        spec,
    };
    tokio::pin!(interrupt);
    let mut result = run.go(slot, audit_log, sinks, events, &mut interrupt).await;
    if let Ok(outcome) = &mut result {
        outcome.audit_log_error = audit_log_failed.get().cloned();
    }
    // Only a set-up that was cut short (an error in one branch drops the others, or an
    // interrupt) can have a create request in flight whose object we never heard of.
    let sweep = result.as_ref().map_or(true, |outcome| {
        outcome.duration.is_zero() && outcome.status == RunStatus::Interrupted
    });
    (result, Some(Leftovers { objects, sweep }))
}

/// Copies `input` (if any) to the sandbox's stdin, then closes it: the command sees EOF.
/// A command that exits without reading is no error.
async fn forward_stdin(
    input: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>,
    mut stdin: StdinWriter,
) {
    use tokio::io::AsyncWriteExt;
    if let Some(mut input) = input
        && let Err(error) = tokio::io::copy(&mut input, &mut stdin).await
    {
        tracing::debug!(%error, "stopped forwarding stdin");
    }
    let _ = stdin.shutdown().await;
}

struct Run<'a> {
    sandbox: &'a Sandbox,
    objects: &'a SlotObjects,
    spec: &'a RunSpec,
}

enum End {
    Exited(i64),
    Timeout,
    Interrupted(Interruption),
    ProxyFailed,
}

/// How the sandbox's side of a running command and the proxy's tell each other what
/// happened.
#[derive(Default)]
struct RunSignals {
    /// The command is over: the proxy may stop. The output stream's end shows it well
    /// before the engine reports the container stopped (~0.1 s: the engine's exit
    /// bookkeeping), so both containers' exits overlap.
    command_over: Arc<tokio::sync::Notify>,
    /// Cancelled before a kill: the relay stops waiting on the caller (`output::relay`).
    run_over: CancellationToken,
    /// Cancelled when the output's reader went away and the sinks say that ends the run.
    output_closed: CancellationToken,
    /// Set before the run stops its own proxy: from then on the proxy's end is expected.
    stopping_proxy: AtomicBool,
}

/// The sandbox's side of a run once its command is over.
struct SandboxEnded {
    status: RunStatus,
    exit_code: i32,
    duration: Duration,
    output: OutputStats,
}

impl Run<'_> {
    /// The run's steps: set-up (or an interrupt during it), the go signal, then the command
    /// and its proxy side by side until both are over.
    async fn go<I>(
        &self,
        warm: Option<Slot>,
        audit_log: Option<AuditTee>,
        mut sinks: OutputSinks,
        events: Option<EventSender>,
        interrupt: &mut std::pin::Pin<&mut I>,
    ) -> Result<RunOutcome, RunError>
    where
        I: Future<Output = Interruption>,
    {
        let prepared = match self.set_up(warm, audit_log, interrupt).await? {
            Ok(prepared) => prepared,
            Err(signal) => return Ok(self.outcome_before_start(signal)),
        };
        let Prepared {
            image,
            wiring,
            runtime,
            proxy,
            sandbox_output,
            launcher,
        } = prepared;
        let input = sinks.stdin.take();
        // Forwards the caller's input after the go signal; aborted when the run is over.
        let forward_input = self.let_go(launcher, input, &wiring, runtime).await?;
        let started = Instant::now();
        tracing::debug!("sandbox started");
        let signals = RunSignals::default();
        let relay = spawn_relay(sandbox_output, sinks, self.spec.limits.output, &signals);
        let (ended, records) = tokio::join!(
            self.sandbox_side(relay, &signals, events.as_ref(), interrupt, started),
            self.proxy_side(proxy, &signals),
        );
        drop(forward_input);
        tracing::debug!("proxy stopped: the outcome is known");
        Ok(self.outcome(image, ended, records))
    }

    /// The slot (warm, or prepared now in the run's own shape) claimed for the spec: one
    /// path for both. `Err` inside: the interrupt came first.
    async fn set_up<I>(
        &self,
        warm: Option<Slot>,
        audit_log: Option<AuditTee>,
        interrupt: &mut std::pin::Pin<&mut I>,
    ) -> Result<Result<Prepared, Interruption>, RunError>
    where
        I: Future<Output = Interruption>,
    {
        let objects = self.objects;
        let set_up = async {
            let slot = match warm {
                Some(slot) => slot,
                None => objects.prepare(self.sandbox, self.spec).await?,
            };
            objects.claim(slot, self.spec, audit_log).await
        };
        tokio::select! {
            prepared = set_up => prepared.map(Ok),
            signal = interrupt.as_mut() => Ok(Err(signal)),
        }
    }

    /// Lets the command run: the go signal to its launcher (the proxy is ready), or, with
    /// no launcher, the sandbox's start. Returns the task that forwards the caller's input.
    async fn let_go(
        &self,
        launcher: Option<StdinWriter>,
        input: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>,
        wiring: &Wiring,
        runtime: RuntimeKind,
    ) -> Result<Option<AbortOnDropHandle<()>>, RunError> {
        use tokio::io::AsyncWriteExt;
        let Some(mut go) = launcher else {
            self.objects
                .engine
                .start_container(&self.objects.names.sandbox)
                .await
                .map_err(docker_step("start the sandbox"))?;
            return Ok(None);
        };
        let mut setup = launch_setup(self.spec, wiring.proxy_ip());
        if runtime.counts_tasks_itself() {
            setup.task_limit = Some(self.spec.limits.pids);
        }
        go.write_all(&launch_signal::encode(&setup))
            .await
            .map_err(|source| RunError::GoSignal { source })?;
        Ok(Some(AbortOnDropHandle::new(tokio::spawn(forward_stdin(
            input, go,
        )))))
    }

    /// Waits for the command's end, stops the sandbox if it did not exit by itself, and
    /// says how it ended and what it wrote.
    async fn sandbox_side<I>(
        &self,
        relay: JoinHandle<OutputStats>,
        signals: &RunSignals,
        events: Option<&EventSender>,
        interrupt: &mut std::pin::Pin<&mut I>,
        started: Instant,
    ) -> SandboxEnded
    where
        I: Future<Output = Interruption>,
    {
        let mut wait = self
            .objects
            .engine
            .wait_container(&self.objects.names.sandbox);
        // Alongside: a receiver that is behind must not hold the time limit.
        let ((), end) = tokio::join!(
            emit(events, RunEvent::Started),
            self.await_end(&mut wait, signals, events, interrupt),
        );
        let duration = started.elapsed();
        tracing::debug!("sandbox ended");
        if !matches!(end, End::Exited(_)) {
            self.kill_sandbox(&signals.run_over, &mut wait).await;
        }
        emit(events, RunEvent::Ended).await;
        signals.command_over.notify_one();
        let (status, exit_code) = self.status_of(end).await;
        SandboxEnded {
            status,
            exit_code,
            duration,
            output: collect_output(relay).await,
        }
    }

    /// The first of: the sandbox's exit, the time limit, the interrupt, the output's reader
    /// gone, the proxy's death.
    async fn await_end<I>(
        &self,
        wait: &mut EngineCall<'_, i64>,
        signals: &RunSignals,
        events: Option<&EventSender>,
        interrupt: &mut std::pin::Pin<&mut I>,
    ) -> End
    where
        I: Future<Output = Interruption>,
    {
        let end = tokio::select! {
            status = wait => End::Exited(self.exit_status(status).await),
            () = tokio::time::sleep(self.spec.limits.timeout) => End::Timeout,
            signal = interrupt.as_mut() => End::Interrupted(signal),
            () = signals.output_closed.cancelled() => End::Interrupted(Interruption::OutputClosed),
            () = self.proxy_died(&signals.stopping_proxy) => End::ProxyFailed,
        };
        // The run's end never waits for a receiver that is behind (`events`).
        if let Some(events) = events {
            events.stop_waiting();
        }
        end
    }

    /// Kills a sandbox whose command did not exit by itself and waits (bounded) for it.
    async fn kill_sandbox(&self, run_over: &CancellationToken, wait: &mut EngineCall<'_, i64>) {
        let engine = &self.objects.engine;
        let sandbox = self.objects.names.sandbox.as_str();
        // First: the engine's kill waits until the sandbox's output is read.
        run_over.cancel();
        // The container, not a process: a double-forked child that ignores SIGTERM dies too.
        if let Err(error) = engine.signal_if_running(sandbox, "SIGKILL").await {
            tracing::warn!(%error, "cannot kill the sandbox; removing it");
            let _ = engine.ensure_container_removed(sandbox).await;
        }
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, wait).await;
    }

    /// The run's status and exit code for how it ended.
    async fn status_of(&self, end: End) -> (RunStatus, i32) {
        match end {
            End::Exited(137) if self.oom_killed().await => (RunStatus::Oom, 137),
            End::Exited(code) => (RunStatus::Exited, i32::try_from(code).unwrap_or(255)),
            End::Timeout => (RunStatus::Timeout, 124),
            End::Interrupted(signal) => (RunStatus::Interrupted, signal.exit_code()),
            End::ProxyFailed => (RunStatus::ProxyFailed, PROXY_FAILED_EXIT),
        }
    }

    /// Once the command is over: stops the proxy so it writes its last records (its output
    /// ends with the `end` record). Removing the containers and the network is left to the
    /// caller (`Leftovers`): the outcome does not wait for it.
    async fn proxy_side(
        &self,
        proxy: ProxyOutput,
        signals: &RunSignals,
    ) -> audit_trail::ProxyRecords {
        signals.command_over.notified().await;
        signals.stopping_proxy.store(true, Ordering::SeqCst);
        self.stop_proxy(proxy).await
    }

    /// Resolves when the proxy container stops on its own while the command runs (killed,
    /// crashed, out of memory). Without its proxy a run cannot record its attempts, so the
    /// caller kills the sandbox. Never resolves once `stopping` says the run stops the
    /// proxy itself, nor when the engine cannot be asked (that is no proof of a death).
    async fn proxy_died(&self, stopping: &AtomicBool) {
        match self
            .objects
            .engine
            .wait_container(&self.objects.names.proxy)
            .await
        {
            Ok(code) if !stopping.load(Ordering::SeqCst) => {
                tracing::warn!(
                    code,
                    "the proxy stopped during the run; killing the sandbox"
                );
                return;
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(%error, "cannot wait for the proxy container"),
        }
        std::future::pending::<()>().await
    }

    /// The wait answer, or the inspected exit code if the wait itself failed.
    async fn exit_status(&self, waited: Result<i64, DockerError>) -> i64 {
        match waited {
            Ok(code) => code,
            Err(error) => {
                tracing::warn!(%error, "waiting for the sandbox failed; inspecting it");
                self.objects
                    .engine
                    .inspect_container(&self.objects.names.sandbox)
                    .await
                    .ok()
                    .and_then(|state| state.exit_code)
                    .unwrap_or(125)
            }
        }
    }

    /// Whether the sandbox's 137 was the kernel's OOM killer: the engine's `OOMKilled`, or,
    /// when the engine took the exit before the OOM (then that flag stays false), its `oom`
    /// event for the sandbox (measured: CI once reported an OOM kill as a plain exit).
    async fn oom_killed(&self) -> bool {
        let engine = &self.objects.engine;
        let sandbox = self.objects.names.sandbox.as_str();
        let flagged = match engine.inspect_container(sandbox).await {
            Ok(state) => state.oom_killed,
            Err(error) => {
                tracing::warn!(%error, "cannot inspect the sandbox for an OOM kill");
                false
            }
        };
        flagged
            || engine
                .saw_oom_event(sandbox, OOM_LOOKBACK, OOM_EVENT_WAIT)
                .await
                .unwrap_or(false)
    }

    /// SIGTERM, then the rest of the audit records until the proxy's output ends.
    async fn stop_proxy(&self, mut proxy: ProxyOutput) -> audit_trail::ProxyRecords {
        let engine = &self.objects.engine;
        let name = self.objects.names.proxy.as_str();
        if let Err(error) = engine.signal_if_running(name, "SIGTERM").await {
            tracing::debug!(%error, "cannot signal the proxy");
        }
        tracing::debug!("proxy signalled");
        if let Ok(joined) = tokio::time::timeout(PROXY_STOP_TIMEOUT, &mut proxy.records).await {
            tracing::debug!("proxy output ended");
            return joined.unwrap_or_default();
        }
        tracing::warn!("the proxy did not stop in time; killing it");
        let _ = engine.ensure_container_removed(name).await;
        match tokio::time::timeout(Duration::from_secs(2), &mut proxy.records).await {
            Ok(joined) => joined.unwrap_or_default(),
            Err(_) => {
                proxy.records.abort();
                audit_trail::ProxyRecords::default()
            }
        }
    }

    /// What the run amounted to, from the sandbox's end and the proxy's records.
    fn outcome(
        &self,
        image: String,
        ended: SandboxEnded,
        records: audit_trail::ProxyRecords,
    ) -> RunOutcome {
        let (tally, head) = (records.tally, records.head);
        let refusals = tally.refusals();
        RunOutcome {
            run_id: self.objects.names.id.clone(),
            status: ended.status,
            exit_code: ended.exit_code,
            duration: ended.duration,
            timeout: self.spec.limits.timeout,
            image,
            policy: self.spec.policy_name().to_string(),
            output: ended.output,
            attempts: tally.attempts,
            blocked: refusals.groups,
            blocked_more: refusals.more,
            audit: tally.audit(),
            audit_head: head,
            teardown_errors: Vec::new(),
            audit_log_error: None,
        }
    }

    fn outcome_before_start(&self, signal: Interruption) -> RunOutcome {
        RunOutcome {
            run_id: self.objects.names.id.clone(),
            status: RunStatus::Interrupted,
            exit_code: signal.exit_code(),
            duration: Duration::ZERO,
            timeout: self.spec.limits.timeout,
            image: self.spec.image.clone().unwrap_or_default(),
            policy: self.spec.policy_name().to_string(),
            output: OutputStats::default(),
            attempts: AttemptCounts::default(),
            blocked: Vec::new(),
            blocked_more: 0,
            audit: AuditCounts::default(),
            audit_head: None,
            teardown_errors: Vec::new(),
            audit_log_error: None,
        }
    }
}

/// Sends `event` when the run is followed.
async fn emit(events: Option<&EventSender>, event: RunEvent) {
    if let Some(events) = events {
        events.send(event).await;
    }
}

/// Relays the sandbox's output into `sinks` as a task of its own; its end (the stream's
/// EOF) says the command is over.
fn spawn_relay(
    output: OutputFrames,
    sinks: OutputSinks,
    limit: u64,
    signals: &RunSignals,
) -> JoinHandle<OutputStats> {
    let relayed = output::relay(
        output,
        sinks,
        limit,
        signals.run_over.clone(),
        signals.output_closed.clone(),
    );
    let command_over = signals.command_over.clone();
    tokio::spawn(async move {
        let (stats, end) = relayed.await;
        tracing::debug!(?end, "sandbox output ended");
        if end == StreamEnd::Eof {
            command_over.notify_one();
        }
        stats
    })
}

/// What the relay counted, once the sandbox stopped and its output ended (bounded: a stuck
/// stream is stopped, not left behind).
async fn collect_output(mut relay: JoinHandle<OutputStats>) -> OutputStats {
    match tokio::time::timeout(DRAIN_TIMEOUT, &mut relay).await {
        Ok(Ok(stats)) => stats,
        Ok(Err(error)) => {
            tracing::warn!(%error, "output relay failed");
            OutputStats::default()
        }
        Err(_) => {
            // Stopped, not left behind: it may be waiting on a caller that reads nothing.
            relay.abort();
            tracing::warn!("output did not end after the sandbox stopped");
            OutputStats::default()
        }
    }
}

#[cfg(test)]
mod tests;
