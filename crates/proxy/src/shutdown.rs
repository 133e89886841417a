//! Shutdown, seen from both ends: the proxy begins it (`ShutdownTrigger`) and every task
//! watches it ([`Shutdown`]).
//!
//! Each task holds a [`Shutdown`] for as long as it runs; the trigger's `finished` waits until
//! the last one is dropped, so tunnels write their records (with their byte counts) before
//! the process exits.

use std::time::Duration;

use tokio::sync::{mpsc, watch};

/// A task's view of shutdown. Holding one also keeps `ShutdownTrigger::finished` waiting
/// for the task.
#[derive(Clone)]
pub(crate) struct Shutdown {
    signal: watch::Receiver<bool>,
    _alive: mpsc::Sender<()>,
}

impl Shutdown {
    /// A new shutdown pair: the trigger for the proxy, the first watcher for its tasks.
    pub(crate) fn new() -> (ShutdownTrigger, Shutdown) {
        let (stop, signal) = watch::channel(false);
        let (alive, done) = mpsc::channel(1);
        (
            ShutdownTrigger { stop, done },
            Shutdown {
                signal,
                _alive: alive,
            },
        )
    }

    /// Resolves once shutdown has begun.
    pub(crate) async fn wait(&mut self) {
        let _ = self.signal.wait_for(|stopping| *stopping).await;
    }
}

/// The proxy's end: begins shutdown and waits for the tasks to finish.
pub(crate) struct ShutdownTrigger {
    stop: watch::Sender<bool>,
    done: mpsc::Receiver<()>,
}

impl ShutdownTrigger {
    /// Tells every [`Shutdown`] holder to stop.
    pub(crate) fn begin(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits up to `limit` until every [`Shutdown`] is dropped; false if some task was still
    /// running when the time ran out.
    pub(crate) async fn finished(&mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.done.recv()).await.is_ok()
    }
}
