//! The lifecycle on the fake engine, no Docker: a cold run (local and remote engine) and a
//! warm slot's claim, each with every engine call failing in turn and with the interrupt
//! arriving during each step. Whatever happens, the run ends as it should and nothing it
//! made is left behind.

use std::future::Future;
use std::time::Duration;

use crate::Sandbox;
use crate::engine::{ContainerEngine, DockerError};
use crate::network::EGRESS_NETWORK;
use crate::outcome::{Interruption, RunError, RunOutcome, RunStatus};
use crate::output::OutputSinks;
use crate::pool::{Pool, WarmSlot};
use crate::spec::RunSpec;
use crate::testing::{Call, CommandScript, FakeEngine, Method, injected_error};

/// What a failed engine call does to a run.
#[derive(Debug, PartialEq, Eq)]
enum Effect {
    /// The set-up fails with an error that carries the engine's answer.
    Fails,
    /// The run goes on (a wait that fails is answered by an inspect, a signal that fails by
    /// a removal, an unclear egress network by a listing, a network removal refused while
    /// the containers went is tried again after them).
    RunsOn,
    /// Teardown reports the object (`container` or `network`) it could not remove, which
    /// stays for `gc`.
    LeftForGc(&'static str),
}

/// What the `index`-th of a run's `calls` failing does.
fn effect(calls: &[Call], index: usize) -> Effect {
    let call = &calls[index];
    let last_of_its_kind = !calls[index + 1..].contains(call);
    match call.method {
        Method::WaitContainer
        | Method::KillContainer
        | Method::InspectContainer
        | Method::SawOomEvent => Effect::RunsOn,
        Method::InspectNetwork if call.target == EGRESS_NETWORK => Effect::RunsOn,
        Method::RemoveNetwork if !last_of_its_kind => Effect::RunsOn,
        Method::RemoveNetwork => Effect::LeftForGc("network"),
        Method::RemoveContainer => Effect::LeftForGc("container"),
        _ => Effect::Fails,
    }
}

/// A run that reaches one allowed host, with a hang bound for a test that goes wrong.
fn spec() -> RunSpec {
    RunSpec::builder(["echo", "hello"])
        .allow("api.example.com")
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// A run whose limits differ from a default slot's: its claim updates them.
fn bigger_spec() -> RunSpec {
    RunSpec::builder(["echo", "hello"])
        .allow("api.example.com")
        .memory(512 << 20)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

fn quiet() -> OutputSinks {
    OutputSinks::new(tokio::io::sink(), tokio::io::sink())
}

/// The `index`-th call of `calls` as a fault or hook names it: the call and how many equal
/// ones came up to it.
fn occurrence(calls: &[Call], index: usize) -> usize {
    calls[..=index]
        .iter()
        .filter(|call| **call == calls[index])
        .count()
}

/// Waits until no task of the test's runtime is alive any more: nothing is left that could
/// still make an object (a creation the run gave up on, a reader, a program of the fake's).
async fn quiescent() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let settled = async {
        while metrics.num_alive_tasks() > 0 {
            tokio::task::yield_now().await;
        }
    };
    let bounded = tokio::time::timeout(Duration::from_secs(30), settled);
    bounded.await.expect("every task of the run ends");
}

/// How a run ended, once its objects are removed.
struct Ended {
    result: Result<RunOutcome, RunError>,
    teardown_errors: Vec<String>,
}

/// A cold run of `spec` to the end, its objects removed ([`Sandbox::run_until`]).
async fn cold(
    sandbox: &Sandbox,
    spec: RunSpec,
    interrupt: impl Future<Output = Interruption>,
) -> Ended {
    let result = sandbox.run_until(spec, quiet(), interrupt).await;
    let teardown_errors = result
        .as_ref()
        .map(|outcome| outcome.teardown_errors.clone())
        .unwrap_or_default();
    quiescent().await;
    Ended {
        result,
        teardown_errors,
    }
}

/// A run of `spec` in `warm`, its objects removed afterwards as the daemon does.
async fn warm(
    sandbox: &Sandbox,
    warm: WarmSlot,
    spec: RunSpec,
    interrupt: impl Future<Output = Interruption>,
) -> Ended {
    let (result, leftovers) = sandbox
        .run_leaving_objects(Some(warm), &spec, quiet(), interrupt)
        .await;
    let teardown_errors = match leftovers {
        Some(leftovers) => leftovers.remove().await,
        None => Vec::new(),
    };
    quiescent().await;
    Ended {
        result,
        teardown_errors,
    }
}

/// A slot of a one-slot pool on `sandbox`, claimed for `spec`; the pool is shut down, so
/// nothing but the claimed slot is left on the engine.
async fn claimed_slot(sandbox: &Sandbox, spec: &RunSpec) -> WarmSlot {
    let (ready, mut readiness) = tokio::sync::watch::channel(0);
    let template = RunSpec::builder(["true"]).build().unwrap();
    let pool = Pool::start(
        sandbox.clone(),
        template,
        1,
        Box::new(move |slots| {
            ready.send_replace(slots);
        }),
    );
    let filled = tokio::time::timeout(Duration::from_secs(60), readiness.wait_for(|n| *n == 1));
    filled.await.expect("the slot is ready").unwrap();
    let (slot, refill) = pool.take(spec).expect("the slot fits the run");
    pool.shutdown().await;
    drop(refill);
    slot
}

/// Checks that the run ended as the failure of the `index`-th of `calls` does to it, and
/// that nothing it made is left but what teardown said it could not remove.
fn check_failure_of(calls: &[Call], index: usize, ended: Ended, fake: &FakeEngine) {
    let call = &calls[index];
    let injected = injected_error(call).to_string();
    let outcome = match effect(calls, index) {
        Effect::Fails => {
            let error = ended
                .result
                .expect_err(&format!("{call} failing fails the run"));
            let message = error.message_with_causes();
            assert!(message.contains(&injected), "{call}: {message}");
            assert_eq!(fake.leftovers(), Vec::<String>::new(), "after {call}");
            return;
        }
        Effect::RunsOn | Effect::LeftForGc(_) => ended
            .result
            .unwrap_or_else(|error| panic!("{call} failing must not fail the run: {error}")),
    };
    assert_eq!(outcome.status, RunStatus::Exited, "after {call}");
    let (mut expected_errors, mut expected_left) = (Vec::new(), Vec::new());
    if let Effect::LeftForGc(kind) = effect(calls, index) {
        let name = call.target.replace("{run}", &outcome.run_id);
        expected_errors.push(format!("{kind} {name}: {injected}"));
        expected_left.push(format!("{kind} {name}"));
        // A run network cannot go while a container is still on it.
        if kind == "container" && !fake.is_local() {
            let network = format!("egress-run-{}", outcome.run_id);
            expected_errors.push(format!(
                "network {network}: the engine answered 403: error while removing \
                 network: network {network} has active endpoints"
            ));
            expected_left.push(format!("network {network}"));
        }
    }
    assert_eq!(ended.teardown_errors, expected_errors, "after {call}");
    assert_eq!(fake.leftovers(), expected_left, "after {call}");
}

/// The calls of a cold run on a fresh `engine()` that goes well.
async fn calls_of_a_cold_run(engine: fn() -> FakeEngine) -> Vec<Call> {
    let fake = engine();
    let ended = cold(&fake.sandbox().unwrap(), spec(), std::future::pending()).await;
    let outcome = ended.result.unwrap();
    assert_eq!((outcome.status, outcome.exit_code), (RunStatus::Exited, 0));
    assert_eq!(fake.leftovers(), Vec::<String>::new());
    fake.calls()
}

/// Every call of a cold run failing in turn, each on a fresh engine.
async fn cold_run_with_each_call_failing(engine: fn() -> FakeEngine) {
    let calls = calls_of_a_cold_run(engine).await;
    for (index, call) in calls.iter().enumerate() {
        let fake = engine();
        fake.fail_call(call, occurrence(&calls, index), injected_error(call));
        let ended = cold(&fake.sandbox().unwrap(), spec(), std::future::pending()).await;
        check_failure_of(&calls, index, ended, &fake);
    }
}

/// Whether the run listens for its interrupt while `call` is under way. All set-up calls
/// and the waits race the interrupt; the sandbox's start on a remote engine (after the
/// claim, before the wait) does not: an interrupt then is heard once it has started.
fn heard_during(call: &Call, local: bool) -> bool {
    local || *call != Call::new(Method::StartContainer, "egress-run-{run}-sandbox")
}

/// An interrupt that arrives when `call` (its `occurrence`-th) begins: the fake holds the
/// call until the run has seen the interrupt, where the run listens for it then.
fn interrupt_during(
    fake: &FakeEngine,
    call: &Call,
    occurrence: usize,
) -> impl Future<Output = Interruption> + use<> {
    let hook = fake.hook(call, occurrence, heard_during(call, fake.is_local()));
    async move {
        hook.reached().await;
        hook.release();
        Interruption::Interrupt
    }
}

/// The calls of a run, up to the wait for its sandbox (the command runs until killed, and
/// the interrupt comes during that wait): every step during which an interrupt is heard.
fn steps_up_to_the_wait(calls: &[Call]) -> &[Call] {
    let wait = Call::new(Method::WaitContainer, "egress-run-{run}-sandbox");
    let end = calls
        .iter()
        .position(|call| *call == wait)
        .expect("the run waits for its sandbox");
    &calls[..=end]
}

fn check_interrupted(call: &Call, ended: Ended, fake: &FakeEngine) {
    let outcome = ended
        .result
        .unwrap_or_else(|error| panic!("interrupted during {call}: {error}"));
    assert_eq!(
        (outcome.status, outcome.exit_code),
        (RunStatus::Interrupted, 130),
        "interrupted during {call}"
    );
    assert_eq!(ended.teardown_errors, Vec::<String>::new(), "during {call}");
    assert_eq!(fake.leftovers(), Vec::<String>::new(), "during {call}");
}

fn running_until_killed(engine: fn() -> FakeEngine) -> FakeEngine {
    let fake = engine();
    fake.script_command(CommandScript {
        exit: None,
        ..CommandScript::default()
    });
    fake
}

/// The interrupt during each step of a cold run, each on a fresh engine.
async fn cold_run_interrupted_at_each_step(engine: fn() -> FakeEngine) {
    let recorded = running_until_killed(engine);
    let wait = Call::new(Method::WaitContainer, "egress-run-{run}-sandbox");
    let interrupt = interrupt_during(&recorded, &wait, 1);
    let ended = cold(&recorded.sandbox().unwrap(), spec(), interrupt).await;
    check_interrupted(&wait, ended, &recorded);
    let calls = recorded.calls();
    for (index, call) in steps_up_to_the_wait(&calls).iter().enumerate() {
        let fake = running_until_killed(engine);
        let interrupt = interrupt_during(&fake, call, occurrence(&calls, index));
        let ended = cold(&fake.sandbox().unwrap(), spec(), interrupt).await;
        check_interrupted(call, ended, &fake);
    }
}

#[tokio::test]
async fn a_cold_run_on_a_local_engine_relays_its_output_and_removes_everything() {
    let fake = FakeEngine::local();
    let sandbox = fake.sandbox().unwrap();
    let (stdout, mut read) = tokio::io::duplex(1 << 16);
    let sinks = OutputSinks::new(stdout, tokio::io::sink());
    let (outcome, printed) = tokio::join!(sandbox.run(spec(), sinks), async {
        let mut printed = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut read, &mut printed)
            .await
            .unwrap();
        printed
    });
    let outcome = outcome.unwrap();
    assert_eq!((outcome.status, outcome.exit_code), (RunStatus::Exited, 0));
    assert_eq!(printed, "hello\n");
    assert!(
        outcome.teardown_errors.is_empty(),
        "{:?}",
        outcome.teardown_errors
    );
    assert_eq!(fake.leftovers(), Vec::<String>::new());
    assert_eq!(
        fake.networks(),
        [EGRESS_NETWORK],
        "the shared network stays"
    );
    // Passed listeners: the run made no network of its own, and its sandbox started
    // behind its launcher.
    let calls = fake.calls();
    assert!(
        !calls
            .iter()
            .any(|call| call.method == Method::ConnectNetwork),
        "{calls:?}"
    );
    assert!(calls.contains(&Call::new(
        Method::StartContainer,
        "egress-run-{run}-sandbox"
    )));
}

#[tokio::test]
async fn a_cold_run_fails_or_goes_on_as_each_engine_call_fails_and_leaves_nothing() {
    cold_run_with_each_call_failing(FakeEngine::local).await;
}

#[tokio::test]
async fn a_cold_run_on_a_remote_engine_fails_or_goes_on_as_each_call_fails_and_leaves_nothing() {
    cold_run_with_each_call_failing(FakeEngine::remote).await;
}

#[tokio::test]
async fn a_cold_run_interrupted_during_any_step_is_interrupted_and_leaves_nothing() {
    cold_run_interrupted_at_each_step(FakeEngine::local).await;
}

#[tokio::test]
async fn a_cold_run_on_a_remote_engine_interrupted_during_any_step_leaves_nothing() {
    cold_run_interrupted_at_each_step(FakeEngine::remote).await;
}

/// The claim's calls after a slot was prepared: the limits updated, then the run's.
async fn calls_of_a_claim() -> Vec<Call> {
    let fake = FakeEngine::local();
    let sandbox = fake.sandbox().unwrap();
    let slot = claimed_slot(&sandbox, &bigger_spec()).await;
    let before = fake.calls().len();
    let ended = warm(&sandbox, slot, bigger_spec(), std::future::pending()).await;
    let outcome = ended.result.unwrap();
    assert_eq!((outcome.status, outcome.exit_code), (RunStatus::Exited, 0));
    assert_eq!(fake.leftovers(), Vec::<String>::new());
    fake.calls().split_off(before)
}

#[tokio::test]
async fn a_warm_slot_claimed_for_bigger_limits_gets_them_and_is_removed_after_its_run() {
    let fake = FakeEngine::local();
    let sandbox = fake.sandbox().unwrap();
    let slot = claimed_slot(&sandbox, &bigger_spec()).await;
    let sandbox_name = slot.objects.names.sandbox.clone();
    let (result, leftovers) = sandbox
        .run_leaving_objects(Some(slot), &bigger_spec(), quiet(), std::future::pending())
        .await;
    assert_eq!(result.unwrap().status, RunStatus::Exited);
    let wanted = crate::engine::LiveLimits::of(&bigger_spec());
    assert_eq!(fake.limits_of(&sandbox_name), Some(wanted));
    assert!(leftovers.unwrap().remove().await.is_empty());
    assert_eq!(fake.leftovers(), Vec::<String>::new());
}

#[tokio::test]
async fn a_warm_claim_fails_or_goes_on_as_each_engine_call_fails_and_leaves_nothing() {
    let calls = calls_of_a_claim().await;
    assert!(calls.contains(&Call::new(
        Method::UpdateContainer,
        "egress-run-{run}-sandbox"
    )));
    for (index, call) in calls.iter().enumerate() {
        let fake = FakeEngine::local();
        let sandbox = fake.sandbox().unwrap();
        let slot = claimed_slot(&sandbox, &bigger_spec()).await;
        fake.fail_call(call, occurrence(&calls, index), injected_error(call));
        let ended = warm(&sandbox, slot, bigger_spec(), std::future::pending()).await;
        check_failure_of(&calls, index, ended, &fake);
    }
}

#[tokio::test]
async fn a_warm_claim_interrupted_during_any_step_is_interrupted_and_leaves_nothing() {
    let claimed = || async {
        let fake = running_until_killed(FakeEngine::local);
        let sandbox = fake.sandbox().unwrap();
        let slot = claimed_slot(&sandbox, &bigger_spec()).await;
        (fake, sandbox, slot)
    };
    let (recorded, sandbox, slot) = claimed().await;
    let before = recorded.calls().len();
    let wait = Call::new(Method::WaitContainer, "egress-run-{run}-sandbox");
    let interrupt = interrupt_during(&recorded, &wait, 1);
    let ended = warm(&sandbox, slot, bigger_spec(), interrupt).await;
    check_interrupted(&wait, ended, &recorded);
    let calls = recorded.calls().split_off(before);
    for (index, call) in steps_up_to_the_wait(&calls).iter().enumerate() {
        let (fake, sandbox, slot) = claimed().await;
        let interrupt = interrupt_during(&fake, call, occurrence(&calls, index));
        let ended = warm(&sandbox, slot, bigger_spec(), interrupt).await;
        check_interrupted(call, ended, &fake);
    }
}

/// A proxy that cannot start fails the set-up with its own words, and the run's objects go.
#[tokio::test]
async fn a_proxy_that_dies_before_it_is_ready_fails_the_run_with_its_words_and_leaves_nothing() {
    let fake = FakeEngine::local();
    fake.script_proxy(crate::testing::ProxyScript::Fails {
        said: "error: cannot bind 127.0.0.1:53".into(),
    });
    let ended = cold(&fake.sandbox().unwrap(), spec(), std::future::pending()).await;
    let error = ended.result.unwrap_err();
    assert!(
        matches!(&error, RunError::ProxyNotReady { detail } if detail.contains("cannot bind")),
        "{error}"
    );
    assert_eq!(fake.leftovers(), Vec::<String>::new());
}

/// An engine that refuses a create because the name is taken: the run fails naming the
/// step, and what it made before is removed.
#[tokio::test]
async fn a_create_the_engine_refuses_fails_the_run_naming_the_step() {
    let fake = FakeEngine::local();
    let refused = DockerError::Conflict {
        message: "the container name is already in use".into(),
    };
    fake.fail_nth(Method::CreateContainer, 2, refused);
    let ended = cold(&fake.sandbox().unwrap(), spec(), std::future::pending()).await;
    let error = ended.result.unwrap_err();
    assert!(
        matches!(&error, RunError::Docker { step, source } if step.starts_with("create the") && source.is_conflict()),
        "{error}"
    );
    assert_eq!(fake.leftovers(), Vec::<String>::new());
}

/// A runtime the engine lacks fails the cold run before anything is created, with the
/// message the daemon and `check_fit` give.
#[tokio::test]
async fn a_cold_run_on_a_runtime_the_engine_lacks_fails_before_creating_anything() {
    let fake = FakeEngine::local();
    let spec = RunSpec::builder(["true"]).runtime("kata").build().unwrap();
    let ended = cold(&fake.sandbox().unwrap(), spec, std::future::pending()).await;
    let error = ended.result.unwrap_err();
    assert!(
        matches!(&error, RunError::UnknownRuntime { name, available } if name == "kata" && *available == ["runc"]),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "the engine has no runtime \"kata\" (it has: runc)"
    );
    assert!(
        !fake
            .calls()
            .iter()
            .any(|call| matches!(call.method, Method::CreateContainer | Method::CreateNetwork)),
        "{:?}",
        fake.calls()
    );
    assert_eq!(fake.leftovers(), Vec::<String>::new());
}
