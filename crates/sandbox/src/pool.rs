//! A warm pool: slots prepared ahead of the runs that will use them (the daemon's, or an
//! embedder's that runs many short jobs).
//!
//! A slot is one run's objects up to its handoff (`slot`): its doors directory, its
//! proxy started on the egress network alone and waiting for its handoff, its sandbox (no
//! network: the proxy serves the doors its launcher passes) started behind the launcher with an
//! empty trust bundle mounted (filled at the claim, so a
//! policy that inspects hosts is served warm too) — all of the default shape (the base
//! image, default tmp size, no mounts, the daemon's egress network). A request that fits
//! takes the oldest ready slot, which is claimed as a cold run claims its own; anything set
//! at create time that differs (`slot::unfit`), or no slot ready, takes the cold path, with
//! the same result.
//!
//! Each slot serves one run: its replacement is prepared as soon as that run is answered
//! (or 2 s after the claim, for a longer run).
//! A slot whose proxy or sandbox stops on its own is discarded (its objects removed) and
//! replaced, never handed out. On shutdown every ready slot and every slot being prepared
//! is removed. Slots carry the daemon's owner labels, so `gc` and the next daemon's
//! start-up sweep remove what a crash left.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

use crate::slot::{Slot, SlotObjects, trust_fits, unfit};
use crate::trust::TrustBundle;
use crate::{RunSpec, Sandbox};

/// A claimed slot's replacement is started when its run is answered, or after this long
/// if that comes later: preparing a slot (two containers) while the claimed
/// run's command ends slows the engine's report of that end (measured: `true` answered in
/// ~1.8 s instead of ~0.25 s), so a short run is answered first.
const REFILL_AFTER: Duration = Duration::from_secs(2);
/// After a failed preparation, the next one waits this long (then up to the maximum).
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Starts a claimed slot's replacement when dropped (if it has not started yet): drop it
/// once the run is answered.
pub struct Refill {
    _answered: tokio::sync::oneshot::Sender<()>,
}

/// A ready slot, watched for a death of its own.
struct Warm {
    objects: SlotObjects,
    slot: Slot,
    _watcher: AbortOnDropHandle<()>,
}

#[derive(Default)]
struct State {
    ready: VecDeque<Warm>,
    /// Failed preparations in a row: the next waits longer.
    failures: u32,
}

/// A claimed warm slot, for [`Sandbox::run_leaving_objects`].
pub struct WarmSlot {
    pub(crate) objects: SlotObjects,
    pub(crate) slot: Slot,
}

/// Called with the number of ready slots whenever it changes (a metrics gauge, a log line).
pub type OnReady = Box<dyn Fn(usize) + Send + Sync>;

/// Warm slots of one shape, refilled as they are claimed, removed at [`Pool::shutdown`].
pub struct Pool {
    size: usize,
    /// The shape of every slot: a default run on the daemon's egress network.
    template: RunSpec,
    sandbox: Sandbox,
    state: Mutex<State>,
    on_ready: OnReady,
    stopping: watch::Sender<bool>,
    /// Preparations and removals in flight: shutdown waits for them.
    tasks: TaskTracker,
}

impl Pool {
    /// A pool of `size` slots shaped like `template`, filling in the background.
    pub fn start(sandbox: Sandbox, template: RunSpec, size: usize, on_ready: OnReady) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            size,
            template,
            sandbox,
            state: Mutex::new(State::default()),
            on_ready,
            stopping: watch::channel(false).0,
            tasks: TaskTracker::new(),
        });
        for _ in 0..size {
            pool.fill(Duration::ZERO);
        }
        pool
    }

    /// Slots the pool keeps ready.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Slots ready now.
    pub fn ready(&self) -> usize {
        self.state.lock().expect("pool lock").ready.len()
    }

    /// A new slot's trust bundle file, so that a policy that inspects a host is served warm
    /// too. Only a local engine can mount a host file; a slot without one serves only runs
    /// that inspect nothing (the others take the cold path, which refuses them on a remote
    /// engine and reports the error of a file that cannot be made).
    fn slot_trust(&self) -> Option<TrustBundle> {
        if !self.sandbox.engine().is_local() {
            return None;
        }
        TrustBundle::create(self.sandbox.owner())
            .inspect_err(|error| {
                let error = crate::outcome::with_causes(error);
                tracing::warn!(%error, "a warm slot without a trust bundle")
            })
            .ok()
    }

    fn stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Tells the pool's owner how many slots are ready now.
    fn report_ready(&self, state: &State) {
        (self.on_ready)(state.ready.len());
    }

    /// A ready slot for `spec`, if one fits it, and the start of its replacement: when the
    /// [`Refill`] is dropped (the run answered) or `REFILL_AFTER`, whichever is first.
    /// `None`: the run takes the cold path.
    pub fn take(self: &Arc<Self>, spec: &RunSpec) -> Option<(WarmSlot, Refill)> {
        if self.size == 0 || self.stopping() {
            return None;
        }
        if let Some(reason) = unfit(&self.template, spec) {
            tracing::debug!(reason, "the request takes the cold path");
            return None;
        }
        let warm = {
            let mut state = self.state.lock().expect("pool lock");
            let fits = |warm: &Warm| {
                trust_fits(spec, warm.objects.trust.is_some()) && warm.slot.limits_fit(spec)
            };
            let warm = match state.ready.iter().position(fits) {
                Some(index) => state.ready.remove(index),
                None => None,
            };
            self.report_ready(&state);
            warm
        };
        let Some(Warm { objects, slot, .. }) = warm else {
            tracing::debug!(
                "no warm slot ready that fits (a policy that inspects hosts needs the trust bundle; under gVisor, limits differ from the slot's); the request takes the cold path"
            );
            return None;
        };
        tracing::debug!(run = %objects.names.id, "claiming a warm slot");
        let (answered, wait) = tokio::sync::oneshot::channel::<()>();
        let guard = self.tasks.token();
        let pool = self.clone();
        tokio::spawn(async move {
            let _guard = guard;
            let mut stopping = pool.stopping.subscribe();
            tokio::select! {
                _ = tokio::time::timeout(REFILL_AFTER, wait) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
            if !pool.stopping() {
                pool.fill(Duration::ZERO);
            }
        });
        Some((
            WarmSlot { objects, slot },
            Refill {
                _answered: answered,
            },
        ))
    }

    /// Prepares one slot in the background (after `delay`) and adds it to the ready ones.
    fn fill(self: &Arc<Self>, delay: Duration) {
        let guard = self.tasks.token();
        let pool = self.clone();
        tokio::spawn(async move {
            let _guard = guard;
            let mut stopping = pool.stopping.subscribe();
            if tokio::time::timeout(delay, stopping.wait_for(|s| *s))
                .await
                .is_ok()
            {
                return;
            }
            let objects = SlotObjects::new(&pool.sandbox, pool.slot_trust());
            let prepare = async {
                let mut slot = objects.prepare(&pool.sandbox, &pool.template).await?;
                objects.connect_egress(&mut slot).await?;
                Ok::<_, crate::RunError>(slot)
            };
            let prepared = tokio::select! {
                prepared = prepare => Some(prepared),
                _ = stopping.wait_for(|s| *s) => None,
            };
            match prepared {
                Some(Ok(slot)) => pool.add(objects, slot).await,
                Some(Err(error)) => {
                    let failures = {
                        let mut state = pool.state.lock().expect("pool lock");
                        state.failures += 1;
                        state.failures
                    };
                    let retry = RETRY_FIRST
                        .saturating_mul(1 << failures.min(6))
                        .min(RETRY_MAX);
                    tracing::warn!(
                        error = %error.message_with_causes(),
                        retry_in = ?retry,
                        "cannot prepare a warm slot"
                    );
                    remove(objects, true).await;
                    if !pool.stopping() {
                        pool.fill(retry);
                    }
                }
                // Cut short by shutdown: a create may be in flight, so sweep by label.
                None => remove(objects, true).await,
            }
        });
    }

    async fn add(self: &Arc<Self>, objects: SlotObjects, slot: Slot) {
        if self.stopping() {
            remove(objects, false).await;
            return;
        }
        let watcher = AbortOnDropHandle::new(tokio::spawn(watch_slot(
            Arc::downgrade(self),
            objects.engine.clone(),
            objects.names.clone(),
        )));
        tracing::debug!(run = %objects.names.id, "warm slot ready");
        let mut state = self.state.lock().expect("pool lock");
        state.failures = 0;
        state.ready.push_back(Warm {
            objects,
            slot,
            _watcher: watcher,
        });
        self.report_ready(&state);
    }

    /// The slot of run `id` stopped on its own (`how`: which container, and how it
    /// ended): never hand it out; remove and replace it.
    fn discard(self: &Arc<Self>, id: &str, how: &str) {
        let warm = {
            let mut state = self.state.lock().expect("pool lock");
            let index = state.ready.iter().position(|w| w.objects.names.id == id);
            let warm = index.and_then(|index| state.ready.remove(index));
            self.report_ready(&state);
            warm
        };
        // Already claimed (the claim stopped this watcher's interest): nothing to do.
        let Some(warm) = warm else { return };
        tracing::warn!(run = %id, "a warm slot stopped on its own: {how}; replacing it");
        let guard = self.tasks.token();
        let Warm { objects, slot, .. } = warm;
        tokio::spawn(async move {
            let _guard = guard;
            drop(slot);
            remove(objects, false).await;
        });
        if !self.stopping() {
            self.fill(Duration::ZERO);
        }
    }

    /// Removes every ready slot and every slot being prepared; returns once all are gone.
    pub async fn shutdown(&self) {
        self.stopping.send_replace(true);
        let ready: Vec<Warm> = {
            let mut state = self.state.lock().expect("pool lock");
            let ready = state.ready.drain(..).collect();
            self.report_ready(&state);
            ready
        };
        let removals = ready.into_iter().map(|Warm { objects, slot, .. }| {
            drop(slot);
            remove(objects, false)
        });
        futures_util::future::join_all(removals).await;
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// Removes a slot's objects (sweeping by label when a create may have been in flight).
async fn remove(objects: SlotObjects, sweep: bool) {
    for failure in objects.teardown.run(sweep).await {
        tracing::warn!("could not remove {failure}; `egress-sandbox gc` will");
    }
}

/// Resolves into a discard when the slot's proxy or sandbox stops; aborted when the slot
/// is claimed or removed.
async fn watch_slot(
    pool: Weak<Pool>,
    engine: Arc<dyn crate::engine::ContainerEngine>,
    names: crate::labels::RunNames,
) {
    let (role, container, waited) = tokio::select! {
        waited = engine.wait_container(&names.proxy) => ("proxy", &names.proxy, waited),
        waited = engine.wait_container(&names.sandbox) => ("sandbox", &names.sandbox, waited),
    };
    let Ok(status) = waited else {
        // The engine could not be asked: no proof of a death; the claim will tell.
        return;
    };
    let oom_killed = engine
        .inspect_container(container)
        .await
        .is_ok_and(|state| state.oom_killed);
    if let Some(pool) = pool.upgrade() {
        pool.discard(&names.id, &how_it_stopped(role, status, oom_killed));
    }
}

/// How a slot's container ended, for the operator: which one, its exit status, and what
/// the status means when it says (killed for memory, killed by a signal).
fn how_it_stopped(role: &str, status: i64, oom_killed: bool) -> String {
    let mut how = format!("its {role} exited with status {status}");
    if oom_killed {
        how.push_str(" (killed for memory: out of memory)");
    } else if let Some(signal) = status.checked_sub(128).filter(|n| (1..=64).contains(n)) {
        let name = match signal {
            1 => "SIGHUP".to_owned(),
            2 => "SIGINT".to_owned(),
            6 => "SIGABRT".to_owned(),
            9 => "SIGKILL".to_owned(),
            11 => "SIGSEGV".to_owned(),
            15 => "SIGTERM".to_owned(),
            other => format!("signal {other}"),
        };
        how.push_str(&format!(" (killed by {name})"));
    }
    how
}

#[cfg(test)]
mod tests {
    use super::how_it_stopped;

    #[test]
    fn a_dead_slot_says_which_container_ended_and_how() {
        assert_eq!(
            how_it_stopped("proxy", 137, false),
            "its proxy exited with status 137 (killed by SIGKILL)"
        );
        assert_eq!(
            how_it_stopped("sandbox", 137, true),
            "its sandbox exited with status 137 (killed for memory: out of memory)"
        );
        assert_eq!(
            how_it_stopped("proxy", 1, false),
            "its proxy exited with status 1"
        );
        assert_eq!(
            how_it_stopped("sandbox", 139, false),
            "its sandbox exited with status 139 (killed by SIGSEGV)"
        );
    }
}
