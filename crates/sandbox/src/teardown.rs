//! Owns every Docker object of a run and removes them on every path.
//!
//! Objects are registered by name *before* the create request goes out: removing a name
//! that never came to exist is success. A create request that is dropped half-way (a
//! sibling step failed, Ctrl-C) may still be carried out by the engine after we removed
//! the name, so creations run through [`Teardown::complete`]: each is registered as
//! pending before it is sent and runs as a task of its own that finishes even when its
//! caller is gone. Removal — [`Teardown::run`], or `Drop` — first waits for every pending
//! creation to resolve, then removes what exists: the containers, and the network alongside
//! them when the run went to its end (else after them). If a
//! `Teardown` is dropped without having run (a panic, a dropped future), `Drop` does the
//! same work on a thread of its own before returning, so nothing outlives the process.
//!
//! Teardown talks to the engine through [`ContainerEngine`], so these paths are tested
//! against the in-memory fake (a creation it completes late, a network it refuses to remove
//! while containers hold endpoints).

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::Either;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::engine::ContainerEngine;
use crate::labels::RUN_LABEL;

/// How long teardown waits for creations still in flight (each is one API request).
const PENDING_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `Drop` may take in all (it blocks the dropping thread; `Sandbox::run`
/// documents this for callers who drop a run future).
const DROP_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Objects {
    containers: Vec<String>,
    network: Option<String>,
}

/// One creation in flight, visible to a plain thread (`Drop`) as well as to async code.
#[derive(Default)]
struct Pending {
    resolved: Mutex<bool>,
    changed: Condvar,
}

impl Pending {
    fn resolve(&self) {
        *self.resolved.lock().expect("pending lock") = true;
        self.changed.notify_all();
    }

    /// Blocks until resolved or `deadline`; whether it resolved.
    fn wait_until(&self, deadline: Instant) -> bool {
        let mut resolved = self.resolved.lock().expect("pending lock");
        while !*resolved {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            resolved = self
                .changed
                .wait_timeout(resolved, left)
                .expect("pending lock")
                .0;
        }
        true
    }
}

/// Resolves its creation when dropped: on completion, and also when the task is cancelled
/// (its runtime shutting down), so a waiter is never left hanging.
struct ResolveOnDrop(Arc<Pending>);

impl Drop for ResolveOnDrop {
    fn drop(&mut self) {
        self.0.resolve();
    }
}

pub(crate) struct Teardown {
    engine: Arc<dyn ContainerEngine>,
    run_id: String,
    objects: Mutex<Objects>,
    /// Creations registered before they were sent; awaited before removal so nothing is
    /// created after it.
    pending: Mutex<Vec<(Arc<Pending>, JoinHandle<()>)>>,
}

impl Teardown {
    pub(crate) fn new(engine: Arc<dyn ContainerEngine>, run_id: &str) -> Teardown {
        Teardown {
            engine,
            run_id: run_id.to_string(),
            objects: Mutex::new(Objects::default()),
            pending: Mutex::new(Vec::new()),
        }
    }

    /// Runs `creation` to completion as a task of its own, even if the caller stops
    /// waiting for it, and returns its result. It is registered as pending before it can
    /// send anything, so removal never starts while it is in flight.
    pub(crate) async fn complete<T>(&self, creation: impl Future<Output = T> + Send + 'static) -> T
    where
        T: Send + 'static,
    {
        let (done, result) = oneshot::channel();
        {
            // Registered under the lock it is spawned in: a removal that takes the list
            // sees this creation whenever it could have started.
            let mut registry = self.pending.lock().expect("teardown lock");
            let pending = Arc::new(Pending::default());
            let resolver = ResolveOnDrop(pending.clone());
            let task = tokio::spawn(async move {
                let _resolver = resolver;
                let _ = done.send(creation.await);
            });
            registry.push((pending, task));
        }
        result.await.expect("a creation task does not panic")
    }

    pub(crate) fn track_container(&self, name: &str) {
        let mut objects = self.objects.lock().expect("teardown lock");
        if !objects.containers.iter().any(|known| known == name) {
            objects.containers.push(name.to_string());
        }
    }

    pub(crate) fn track_network(&self, name: &str) {
        self.objects.lock().expect("teardown lock").network = Some(name.to_string());
    }

    /// `name` has been removed already; nothing left to do for it.
    pub(crate) fn forget_container(&self, name: &str) {
        self.objects
            .lock()
            .expect("teardown lock")
            .containers
            .retain(|known| known != name);
    }

    /// Waits for pending creations, then removes everything registered and, with `sweep`,
    /// anything else labelled with this run. Returns what could not be removed, as
    /// messages for the user.
    pub(crate) async fn run(&self, sweep: bool) -> Vec<String> {
        let pending: Vec<_> = std::mem::take(&mut *self.pending.lock().expect("teardown lock"))
            .into_iter()
            .map(|(_, task)| task)
            .collect();
        let settled =
            tokio::time::timeout(PENDING_TIMEOUT, futures_util::future::join_all(pending));
        if settled.await.is_err() {
            tracing::warn!("a Docker create request did not finish; removing what exists");
        }
        let objects = std::mem::take(&mut *self.objects.lock().expect("teardown lock"));
        remove_all(&*self.engine, &self.run_id, objects, sweep).await
    }
}

async fn remove_all(
    engine: &dyn ContainerEngine,
    run_id: &str,
    objects: Objects,
    sweep: bool,
) -> Vec<String> {
    let mut failures = Vec::new();
    let removals = futures_util::future::join_all(
        objects
            .containers
            .iter()
            .map(|name| async move { (name, engine.ensure_container_removed(name).await) }),
    );
    // After a run that went to its end both containers are stopped, and a stopped container
    // holds no endpoint: the network can go while they are being removed (~0.1 s less for a
    // cold `run`). While the engine still counts an endpoint (a container not quite
    // stopped) that removal keeps retrying; once the containers are gone it is abandoned
    // and tried again at once, rather than at its next retry. A set-up cut short may still
    // be starting a container: then the network goes only after them.
    let (removed, network_gone) = match &objects.network {
        Some(network) if !sweep => {
            let early_network = std::pin::pin!(engine.ensure_network_removed(network));
            match futures_util::future::select(std::pin::pin!(removals), early_network).await {
                Either::Left((removed, _abandoned)) => (removed, false),
                Either::Right((network_result, removals)) => {
                    (removals.await, network_result.is_ok())
                }
            }
        }
        _ => (removals.await, false),
    };
    for (name, result) in removed {
        if let Err(error) = result {
            failures.push(format!("container {name}: {error}"));
        }
    }
    // Containers a cancelled create request still made, found by label.
    if sweep {
        let label = format!("{RUN_LABEL}={run_id}");
        if let Ok(stragglers) = engine.containers_labelled(&label).await {
            for id in stragglers {
                if let Err(error) = engine.ensure_container_removed(&id).await {
                    failures.push(format!("container {id}: {error}"));
                }
            }
        }
    }
    if let Some(network) = &objects.network
        && !network_gone
        && let Err(error) = engine.ensure_network_removed(network).await
    {
        failures.push(format!("network {network}: {error}"));
    }
    failures
}

/// Whether this thread drives a current-thread runtime: blocking it would also stop the
/// creation tasks we would be waiting for.
fn on_current_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

impl Drop for Teardown {
    fn drop(&mut self) {
        let objects = std::mem::take(self.objects.get_mut().expect("teardown lock"));
        let pending: Vec<Arc<Pending>> =
            std::mem::take(self.pending.get_mut().expect("teardown lock"))
                .into_iter()
                .map(|(pending, _)| pending)
                .collect();
        if objects.containers.is_empty() && objects.network.is_none() {
            return;
        }
        // Creation tasks run on the caller's runtime; with a current-thread runtime they
        // cannot progress while this thread blocks, so only the label sweep can help.
        let current_thread = on_current_thread_runtime();
        let wait_for_creations = !current_thread;
        let run_id = self.run_id.clone();
        let engine = self.engine.clone();
        // The runtime that owned the engine's connections may be going away: use a fresh
        // connection on a runtime of our own, and wait for it.
        let worker = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => return vec![format!("no runtime for teardown: {error}")],
            };
            let deadline = Instant::now() + DROP_TIMEOUT;
            runtime.block_on(async move {
                match tokio::time::timeout(DROP_TIMEOUT, async {
                    let engine = engine
                        .reconnect()
                        .await
                        .map_err(|error| vec![crate::outcome::with_causes(&error)])?;
                    if wait_for_creations {
                        let waited = tokio::task::spawn_blocking(move || {
                            pending.iter().all(|creation| creation.wait_until(deadline))
                        });
                        if !waited.await.unwrap_or(false) {
                            tracing::warn!("a Docker create request did not finish");
                        }
                    }
                    Ok::<_, Vec<String>>(remove_all(&*engine, &run_id, objects, true).await)
                })
                .await
                {
                    Ok(Ok(failures)) | Ok(Err(failures)) => failures,
                    Err(_) => vec!["teardown timed out".to_string()],
                }
            })
        });
        // On a multi-thread runtime, hand this worker's queued tasks (a creation among them)
        // to another worker while we block.
        let joined = if tokio::runtime::Handle::try_current().is_ok() && !current_thread {
            tokio::task::block_in_place(|| worker.join())
        } else {
            worker.join()
        };
        match joined {
            Ok(failures) => {
                for failure in failures {
                    tracing::warn!("could not remove {failure}; `egress-sandbox gc` will");
                }
            }
            Err(_) => tracing::warn!("teardown failed; run `egress-sandbox gc`"),
        }
    }
}

#[cfg(test)]
mod tests;
