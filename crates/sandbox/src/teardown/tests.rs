//! Teardown against a fake engine whose creation completes late: the object it makes
//! after the caller gave up is removed all the same, and never while it is being created.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::{DockerObjects, Teardown};

#[derive(Default)]
struct FakeState {
    existing: HashSet<String>,
    /// Networks the engine refuses to remove while any container exists (an endpoint it
    /// still counts), as a real engine does while a container is not quite stopped.
    busy_networks: HashSet<String>,
    /// Network removals refused because containers still existed.
    refused_network_removals: usize,
    /// Set: a refused network removal waits this long and tries again, as the real
    /// engine handle does, instead of failing.
    network_retry_after: Option<std::time::Duration>,
    in_flight: HashSet<String>,
    /// Names a removal was asked for while their creation was still under way: such a
    /// removal comes too early, the object appears after it.
    removed_in_flight: Vec<String>,
}

#[derive(Clone, Default)]
struct FakeEngine {
    state: Arc<Mutex<FakeState>>,
    /// Told when a creation task runs (it then waits for its release).
    started: Arc<Notify>,
    /// Told when `Drop` opens its own connection: teardown has begun.
    reconnected: Arc<Notify>,
}

impl FakeEngine {
    /// A creation of `name` that completes only when `release` does; it counts as in
    /// flight from this call on (the request is about to be sent).
    fn create_late(
        &self,
        name: &str,
        release: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = Result<String, String>> + Send + 'static {
        self.state
            .lock()
            .unwrap()
            .in_flight
            .insert(name.to_string());
        let (engine, name) = (self.clone(), name.to_string());
        async move {
            engine.started.notify_one();
            release.await;
            let mut state = engine.state.lock().unwrap();
            state.in_flight.remove(&name);
            state.existing.insert(name.clone());
            Ok(name)
        }
    }

    fn left(&self) -> (Vec<String>, Vec<String>) {
        let state = self.state.lock().unwrap();
        let mut existing: Vec<String> = state.existing.iter().cloned().collect();
        existing.sort();
        (existing, state.removed_in_flight.clone())
    }
}

impl DockerObjects for FakeEngine {
    async fn remove_container(&self, name: &str) -> Result<(), String> {
        // With a busy network, removals take a turn first, so the network's early attempt
        // comes while the containers still exist.
        let busy = !self.state.lock().unwrap().busy_networks.is_empty();
        if busy {
            tokio::task::yield_now().await;
        }
        let mut state = self.state.lock().unwrap();
        if state.in_flight.contains(name) {
            state.removed_in_flight.push(name.to_string());
        }
        state.existing.remove(name);
        Ok(())
    }

    async fn remove_network(&self, name: &str) -> Result<(), String> {
        loop {
            let retry_after = {
                let mut state = self.state.lock().unwrap();
                let containers_left = state.existing.iter().any(|object| object != name);
                if !(state.busy_networks.contains(name) && containers_left) {
                    break;
                }
                state.refused_network_removals += 1;
                state.network_retry_after
            };
            match retry_after {
                Some(pause) => tokio::time::sleep(pause).await,
                None => return Err(format!("network {name} has active endpoints")),
            }
        }
        self.remove_container(name).await
    }

    async fn containers_labelled(&self, _label: &str) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }

    async fn reconnect(&self) -> Result<FakeEngine, String> {
        self.reconnected.notify_one();
        Ok(self.clone())
    }
}

/// Starts `creation` through the teardown and gives up on it after its first poll, as a
/// caller does whose sibling step failed.
async fn give_up_on<T: Send + 'static>(
    teardown: &Teardown<FakeEngine>,
    creation: impl Future<Output = T> + Send + 'static,
) {
    let completing = teardown.complete(creation);
    tokio::pin!(completing);
    assert!(futures_util::poll!(completing.as_mut()).is_pending());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_waits_for_a_creation_in_flight_and_removes_what_it_made() {
    let fake = FakeEngine::default();
    let teardown = Teardown::new(fake.clone(), "r-00000001");
    teardown.track_container("egress-run-r-00000001-proxy");
    // The creation completes only once teardown has begun: as late as it can be.
    let reconnected = fake.reconnected.clone();
    let creation = fake.create_late("egress-run-r-00000001-proxy", async move {
        reconnected.notified().await
    });
    give_up_on(&teardown, creation).await;
    fake.started.notified().await;

    drop(teardown);

    let (existing, removed_in_flight) = fake.left();
    assert!(existing.is_empty(), "left behind: {existing:?}");
    assert!(
        removed_in_flight.is_empty(),
        "removed before its creation resolved: {removed_in_flight:?}"
    );
}

#[tokio::test]
async fn run_waits_for_a_creation_in_flight_and_removes_what_it_made() {
    let fake = FakeEngine::default();
    let teardown = Teardown::new(fake.clone(), "r-00000002");
    teardown.track_network("egress-run-r-00000002");
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let creation = fake.create_late("egress-run-r-00000002", async move {
        let _ = released.await;
    });
    give_up_on(&teardown, creation).await;

    let removal = teardown.run(false);
    tokio::pin!(removal);
    assert!(futures_util::poll!(removal.as_mut()).is_pending());
    release.send(()).unwrap();
    let failures = removal.await;

    assert!(failures.is_empty(), "{failures:?}");
    let (existing, removed_in_flight) = fake.left();
    assert!(existing.is_empty(), "left behind: {existing:?}");
    assert!(removed_in_flight.is_empty(), "{removed_in_flight:?}");
}

#[tokio::test]
async fn removing_what_never_came_to_exist_is_success() {
    let fake = FakeEngine::default();
    let teardown = Teardown::new(fake.clone(), "r-00000003");
    teardown.track_container("never-created");
    teardown.track_network("never-created-either");
    assert!(teardown.run(true).await.is_empty());
    assert_eq!(fake.left(), (Vec::new(), Vec::new()));
}

/// A run's network the engine counts endpoints on until its containers are gone, with
/// both containers tracked by a fresh teardown.
fn busy_run(fake: &FakeEngine, run_id: &str) -> Teardown<FakeEngine> {
    let network = format!("egress-run-{run_id}");
    let containers = [format!("{network}-proxy"), format!("{network}-sandbox")];
    {
        let mut state = fake.state.lock().unwrap();
        state.existing.insert(network.clone());
        state.existing.extend(containers.iter().cloned());
        state.busy_networks.insert(network.clone());
    }
    let teardown = Teardown::new(fake.clone(), run_id);
    teardown.track_network(&network);
    for container in &containers {
        teardown.track_container(container);
    }
    teardown
}

#[tokio::test]
async fn a_network_the_engine_still_counts_endpoints_on_goes_after_the_containers() {
    let fake = FakeEngine::default();
    let teardown = busy_run(&fake, "r-00000004");
    let failures = teardown.run(false).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(fake.left(), (Vec::new(), Vec::new()));
    // The network was tried alongside the containers, refused, and removed after them.
    assert_eq!(fake.state.lock().unwrap().refused_network_removals, 1);
}

/// The early network removal retries while the containers still hold endpoints; once they
/// are gone it is abandoned and tried again at once, not at its next retry (on the real
/// engine a retry comes every 50 ms, and a cold run waited for it).
#[tokio::test]
async fn the_network_goes_as_soon_as_the_containers_are_gone() {
    let fake = FakeEngine::default();
    fake.state.lock().unwrap().network_retry_after = Some(std::time::Duration::from_secs(3600));
    let teardown = busy_run(&fake, "r-00000005");
    // Waiting for the retry would take an hour; the bound only catches that.
    let failures = tokio::time::timeout(std::time::Duration::from_secs(30), teardown.run(false))
        .await
        .expect("the network removal waited for its next retry");
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(fake.left(), (Vec::new(), Vec::new()));
    assert_eq!(fake.state.lock().unwrap().refused_network_removals, 1);
}
