//! Owns every Docker object of a run and removes them on every path.
//!
//! Objects are registered by name *before* the create request goes out: removing a name
//! that never came to exist is success. A create request that is dropped half-way (a
//! sibling step failed, Ctrl-C) may still be carried out by the engine after we removed
//! the name, so creations run through [`Teardown::complete`]: as tasks of their own that
//! finish even when their caller is gone, and that [`Teardown::run`] waits for before it
//! removes anything. It removes containers, then the network. If a
//! `Teardown` is dropped without having run (a panic, a dropped future), `Drop` does the
//! same work on a thread of its own before returning, so nothing outlives the process.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::docker::Engine;
use super::labels::RUN_LABEL;

/// How long teardown waits for creations still in flight (each is one API request).
const PENDING_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Objects {
    containers: Vec<String>,
    network: Option<String>,
}

pub struct Teardown {
    engine: Engine,
    run_id: String,
    objects: Mutex<Objects>,
    /// Creation tasks; awaited before removal so nothing is created after it.
    pending: Mutex<Vec<JoinHandle<()>>>,
}

impl Teardown {
    pub fn new(engine: Engine, run_id: &str) -> Teardown {
        Teardown {
            engine,
            run_id: run_id.to_string(),
            objects: Mutex::new(Objects::default()),
            pending: Mutex::new(Vec::new()),
        }
    }

    /// Runs `creation` to completion as a task of its own, even if the caller stops
    /// waiting for it, and returns its result.
    pub async fn complete<T>(&self, creation: impl Future<Output = T> + Send + 'static) -> T
    where
        T: Send + 'static,
    {
        let (done, result) = oneshot::channel();
        let task = tokio::spawn(async move {
            let _ = done.send(creation.await);
        });
        self.pending.lock().expect("teardown lock").push(task);
        result.await.expect("a creation task does not panic")
    }

    pub fn track_container(&self, name: &str) {
        let mut objects = self.objects.lock().expect("teardown lock");
        if !objects.containers.iter().any(|known| known == name) {
            objects.containers.push(name.to_string());
        }
    }

    pub fn track_network(&self, name: &str) {
        self.objects.lock().expect("teardown lock").network = Some(name.to_string());
    }

    /// `name` has been removed already; nothing left to do for it.
    pub fn forget_container(&self, name: &str) {
        self.objects
            .lock()
            .expect("teardown lock")
            .containers
            .retain(|known| known != name);
    }

    /// The network has been removed already.
    pub fn forget_network(&self) {
        self.objects.lock().expect("teardown lock").network = None;
    }

    /// Removes everything registered and, with `sweep`, anything else labelled with this
    /// run. Returns what could not be removed, as messages for the user.
    pub async fn run(&self, sweep: bool) -> Vec<String> {
        let pending = std::mem::take(&mut *self.pending.lock().expect("teardown lock"));
        let settled =
            tokio::time::timeout(PENDING_TIMEOUT, futures_util::future::join_all(pending));
        if settled.await.is_err() {
            tracing::warn!("a Docker create request did not finish; removing what exists");
        }
        let objects = std::mem::take(&mut *self.objects.lock().expect("teardown lock"));
        remove_all(&self.engine, &self.run_id, objects, sweep).await
    }
}

async fn remove_all(engine: &Engine, run_id: &str, objects: Objects, sweep: bool) -> Vec<String> {
    let mut failures = Vec::new();
    let removals = objects
        .containers
        .iter()
        .map(|name| async move { (name, engine.remove_container(name).await) });
    for (name, result) in futures_util::future::join_all(removals).await {
        if let Err(error) = result {
            failures.push(format!("container {name}: {error}"));
        }
    }
    // Containers a cancelled create request still made, found by label.
    let label = format!("{RUN_LABEL}={run_id}");
    let filters = HashMap::from([("label", vec![label.as_str()])]);
    let stragglers = if sweep {
        engine.list_containers(&filters).await.ok()
    } else {
        None
    };
    if let Some(stragglers) = stragglers {
        for container in stragglers {
            if let Some(id) = container.id
                && let Err(error) = engine.remove_container(&id).await
            {
                failures.push(format!("container {id}: {error}"));
            }
        }
    }
    if let Some(network) = &objects.network
        && let Err(error) = engine.remove_network(network).await
    {
        failures.push(format!("network {network}: {error}"));
    }
    failures
}

impl Drop for Teardown {
    fn drop(&mut self) {
        let objects = std::mem::take(self.objects.get_mut().expect("teardown lock"));
        if objects.containers.is_empty() && objects.network.is_none() {
            return;
        }
        let run_id = self.run_id.clone();
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
            runtime.block_on(async move {
                match tokio::time::timeout(Duration::from_secs(30), async {
                    let engine = Engine::connect().await.map_err(|e| vec![e.to_string()])?;
                    Ok::<_, Vec<String>>(remove_all(&engine, &run_id, objects, true).await)
                })
                .await
                {
                    Ok(Ok(failures)) | Ok(Err(failures)) => failures,
                    Err(_) => vec!["teardown timed out".to_string()],
                }
            })
        });
        match worker.join() {
            Ok(failures) => {
                for failure in failures {
                    eprintln!(
                        "egress-sandbox: could not remove {failure}; `egress-sandbox gc` will"
                    );
                }
            }
            Err(_) => eprintln!("egress-sandbox: teardown failed; run `egress-sandbox gc`"),
        }
    }
}
