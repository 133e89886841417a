//! `--max-runs`: the runs live at once. A run holds its place ([`LiveRun`]) from its
//! accepted request until its answer (`exit` or `error`) is sent; the removal of its objects
//! that follows holds none. A request past the limit is refused with an estimate of when a
//! place frees up ([`Busy::retry_after`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The least `Retry-After` of a busy answer: the header counts whole seconds.
const LEAST_BUSY_WAIT: Duration = Duration::from_secs(1);
/// The most `Retry-After` of a busy answer: a run most often ends well before its time
/// limit, so a caller should not wait for the soonest limit when it is far away.
const MOST_BUSY_WAIT: Duration = Duration::from_secs(5);

/// The live runs and their limit.
#[derive(Debug)]
pub(crate) struct LiveRuns {
    max: usize,
    runs: Mutex<Places>,
}

#[derive(Debug, Default)]
struct Places {
    next: u64,
    /// By place number: when its run's time limit ends it at the latest (counted from
    /// the admission: the set-up comes on top).
    live: HashMap<u64, Instant>,
}

/// A run's place among the live runs, given back when dropped.
#[derive(Debug)]
pub(crate) struct LiveRun {
    runs: Arc<LiveRuns>,
    number: u64,
}

impl Drop for LiveRun {
    fn drop(&mut self) {
        self.runs.places().live.remove(&self.number);
    }
}

/// A refusal: every place is held.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Busy {
    pub(crate) max: usize,
    /// When to ask again: when the soonest live run reaches its time limit (a place is
    /// sure to be free then, or sooner), from 1 s up to 5 s.
    pub(crate) retry_after: Duration,
}

impl LiveRuns {
    /// At most `max` runs live at once (0 is taken as 1).
    pub(crate) fn new(max: usize) -> LiveRuns {
        LiveRuns {
            max: max.max(1),
            runs: Mutex::new(Places::default()),
        }
    }

    fn places(&self) -> std::sync::MutexGuard<'_, Places> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a run whose command may take up to `time_limit`, or [`Busy`].
    pub(crate) fn admit(self: &Arc<Self>, time_limit: Duration) -> Result<LiveRun, Busy> {
        let now = Instant::now();
        let mut places = self.places();
        if places.live.len() >= self.max {
            return Err(Busy {
                max: self.max,
                retry_after: busy_wait(now, places.live.values()),
            });
        }
        let number = places.next;
        places.next += 1;
        places.live.insert(number, now + time_limit);
        Ok(LiveRun {
            runs: self.clone(),
            number,
        })
    }
}

/// How long until the soonest of `live` reaches its time limit, rounded up to whole
/// seconds, within [`LEAST_BUSY_WAIT`] and [`MOST_BUSY_WAIT`].
fn busy_wait<'a>(now: Instant, ends_by: impl Iterator<Item = &'a Instant>) -> Duration {
    let soonest = ends_by
        .map(|end| end.saturating_duration_since(now))
        .min()
        .unwrap_or(LEAST_BUSY_WAIT);
    let whole_seconds =
        Duration::from_secs(soonest.as_secs() + u64::from(soonest.subsec_nanos() > 0));
    whole_seconds.clamp(LEAST_BUSY_WAIT, MOST_BUSY_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_held_until_the_run_gives_it_back() {
        let runs = Arc::new(LiveRuns::new(2));
        let first = runs.admit(Duration::from_secs(60)).unwrap();
        let _second = runs.admit(Duration::from_secs(60)).unwrap();
        let busy = runs.admit(Duration::from_secs(60)).unwrap_err();
        assert_eq!(busy.max, 2);
        drop(first);
        runs.admit(Duration::from_secs(60))
            .expect("the place given back is taken");
    }

    #[test]
    fn zero_is_taken_as_one() {
        let runs = Arc::new(LiveRuns::new(0));
        let _only = runs.admit(Duration::from_secs(1)).unwrap();
        assert_eq!(runs.admit(Duration::from_secs(1)).unwrap_err().max, 1);
    }

    #[test]
    fn a_busy_answer_waits_for_the_soonest_time_limit_within_its_bounds() {
        let now = Instant::now();
        let place = |seconds: f64| now + Duration::from_secs_f64(seconds);
        let wait = |places: &[Instant]| busy_wait(now, places.iter()).as_secs();
        assert_eq!(wait(&[place(600.0), place(3.2), place(20.0)]), 4);
        assert_eq!(wait(&[place(0.3)]), 1, "at least a second");
        assert_eq!(wait(&[place(0.0)]), 1, "a run past its limit is ending");
        assert_eq!(wait(&[place(3600.0)]), 5, "at most 5 s");
    }

    #[test]
    fn a_refusal_estimates_from_the_runs_it_counts() {
        let runs = Arc::new(LiveRuns::new(1));
        let _long = runs.admit(Duration::from_secs(4)).unwrap();
        let busy = runs.admit(Duration::from_secs(1)).unwrap_err();
        assert!(
            (1..=4).contains(&busy.retry_after.as_secs()),
            "{:?}",
            busy.retry_after
        );
    }
}
