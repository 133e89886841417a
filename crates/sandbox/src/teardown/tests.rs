//! Teardown against the fake engine holding a creation until late: the object it makes
//! after the caller gave up is removed all the same, and never while it is being created.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use super::Teardown;
use crate::engine::{ContainerConfig, ContainerEngine, NetworkConfig};
use crate::testing::{Call, CallHook, FakeEngine, Method};

/// The objects that exist and the removals that came while their object was being created.
fn left(fake: &FakeEngine) -> (Vec<String>, Vec<String>) {
    let mut existing = fake.containers();
    existing.extend(fake.networks());
    existing.sort();
    (existing, fake.removed_in_flight())
}

fn teardown_on(fake: &FakeEngine, run_id: &str) -> Teardown {
    Teardown::new(Arc::new(fake.clone()), run_id)
}

/// A creation of container `name` that the fake holds until the hook lets it go; it counts
/// as in flight from its first poll on (the request is about to be sent).
fn create_container_held(
    fake: &FakeEngine,
    name: &str,
) -> (
    impl Future<Output = Result<String, crate::DockerError>> + Send + 'static,
    CallHook,
) {
    let hook = fake.hook(&Call::new(Method::CreateContainer, name), 1, true);
    let (engine, name) = (fake.clone(), name.to_owned());
    let config = ContainerConfig::new(bollard::models::ContainerCreateBody {
        image: Some(crate::images::BASE_IMAGE.into()),
        ..Default::default()
    });
    (
        async move { engine.create_container(&name, config).await },
        hook,
    )
}

/// Starts `creation` through the teardown and gives up on it after its first poll, as a
/// caller does whose sibling step failed.
async fn give_up_on<T: Send + 'static>(
    teardown: &Teardown,
    creation: impl Future<Output = T> + Send + 'static,
) {
    let completing = teardown.complete(creation);
    tokio::pin!(completing);
    assert!(futures_util::poll!(completing.as_mut()).is_pending());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_waits_for_a_creation_in_flight_and_removes_what_it_made() {
    let fake = FakeEngine::local();
    let teardown = teardown_on(&fake, "r-00000001");
    teardown.track_container("egress-run-r-00000001-proxy");
    // The creation completes only once teardown has begun: as late as it can be.
    let (creation, created) = create_container_held(&fake, "egress-run-r-00000001-proxy");
    let reconnected = fake.hook(&Call::new(Method::Reconnect, ""), 1, false);
    give_up_on(&teardown, creation).await;
    created.reached().await;
    let release = tokio::spawn(async move {
        reconnected.reached().await;
        created.release();
    });

    drop(teardown);
    release.await.unwrap();

    let (existing, removed_in_flight) = left(&fake);
    assert!(existing.is_empty(), "left behind: {existing:?}");
    assert!(
        removed_in_flight.is_empty(),
        "removed before its creation resolved: {removed_in_flight:?}"
    );
}

#[tokio::test]
async fn run_waits_for_a_creation_in_flight_and_removes_what_it_made() {
    let fake = FakeEngine::local();
    let teardown = teardown_on(&fake, "r-00000002");
    teardown.track_network("egress-run-r-00000002");
    let hook = fake.hook(
        &Call::new(Method::CreateNetwork, "egress-run-r-00000002"),
        1,
        true,
    );
    let creation = {
        let engine = fake.clone();
        let config = NetworkConfig::new(bollard::models::NetworkCreateRequest {
            name: "egress-run-r-00000002".into(),
            ..Default::default()
        });
        async move { engine.create_network(config).await }
    };
    give_up_on(&teardown, creation).await;

    let removal = teardown.run(false);
    tokio::pin!(removal);
    assert!(futures_util::poll!(removal.as_mut()).is_pending());
    hook.release();
    let failures = removal.await;

    assert!(failures.is_empty(), "{failures:?}");
    let (existing, removed_in_flight) = left(&fake);
    assert!(existing.is_empty(), "left behind: {existing:?}");
    assert!(removed_in_flight.is_empty(), "{removed_in_flight:?}");
}

#[tokio::test]
async fn removing_what_never_came_to_exist_is_success() {
    let fake = FakeEngine::local();
    let teardown = teardown_on(&fake, "r-00000003");
    teardown.track_container("never-created");
    teardown.track_network("never-created-either");
    assert!(teardown.run(true).await.is_empty());
    assert_eq!(left(&fake), (Vec::new(), Vec::new()));
}

/// A run's network the engine counts endpoints on until its containers are gone, with
/// both containers tracked by a fresh teardown.
fn busy_run(fake: &FakeEngine, run_id: &str) -> Teardown {
    let network = format!("egress-run-{run_id}");
    let containers = [format!("{network}-proxy"), format!("{network}-sandbox")];
    fake.add_network(&network, HashMap::new());
    for container in &containers {
        fake.add_container(container, HashMap::new(), &[&network]);
    }
    let teardown = teardown_on(fake, run_id);
    teardown.track_network(&network);
    for container in &containers {
        teardown.track_container(container);
    }
    teardown
}

#[tokio::test]
async fn a_network_the_engine_still_counts_endpoints_on_goes_after_the_containers() {
    let fake = FakeEngine::local();
    let teardown = busy_run(&fake, "r-00000004");
    let failures = teardown.run(false).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(left(&fake), (Vec::new(), Vec::new()));
    // The network was tried alongside the containers, refused, and removed after them.
    assert_eq!(fake.refused_network_removals(), 1);
}

/// The early network removal waits while the containers still hold endpoints; once they
/// are gone it is abandoned and tried again at once, not when its refusal comes (on the
/// real engine a retry comes every 50 ms, and a cold run waited for it).
#[tokio::test]
async fn the_network_goes_as_soon_as_the_containers_are_gone() {
    let fake = FakeEngine::local();
    fake.delay_refusals(std::time::Duration::from_secs(3600));
    let teardown = busy_run(&fake, "r-00000005");
    // Waiting for the refusal would take an hour; the bound only catches that.
    let failures = tokio::time::timeout(std::time::Duration::from_secs(30), teardown.run(false))
        .await
        .expect("the network removal waited for its refusal");
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(left(&fake), (Vec::new(), Vec::new()));
    assert_eq!(fake.refused_network_removals(), 1);
}
