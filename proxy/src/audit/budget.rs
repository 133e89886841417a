//! The run's record budget: how many more attempt records the writer may write.
//!
//! An attempt that would reach something (allowed, or let through by report mode) takes
//! its place before it acts ([`Budget::hold_for_egress`]), so its record is written
//! whatever the sandbox does next. A refusal takes its place only when its record reaches
//! the writer, and past the budget it is only counted. A flood of cheap refusals can thus
//! spend the shared budget, but never the place of an allowed attempt's record: past the
//! shared budget, egress either draws on a reserve of its own or is refused
//! ([`OnAuditLimit`]).

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// What happens to new egress once `--audit-limit` records are spent (`--on-audit-limit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnAuditLimit {
    /// Allowed attempts keep their records from a reserve of another `--audit-limit`
    /// records; refusals are only counted. Once the reserve is spent too, new egress is
    /// refused.
    #[default]
    Reserve,
    /// New egress is refused as soon as the budget is spent.
    Refuse,
}

impl OnAuditLimit {
    /// The value as the flag, the handoff and the `limit` record spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnAuditLimit::Reserve => "reserve",
            OnAuditLimit::Refuse => "refuse",
        }
    }
}

impl std::fmt::Display for OnAuditLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value of `--on-audit-limit` that is neither `reserve` nor `refuse`.
#[derive(Debug, thiserror::Error)]
#[error(
    "expected reserve (allowed attempts keep being recorded from a reserve) or refuse (new egress is refused once the audit limit is reached)"
)]
pub struct OnAuditLimitError;

impl FromStr for OnAuditLimit {
    type Err = OnAuditLimitError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "reserve" => Ok(OnAuditLimit::Reserve),
            "refuse" => Ok(OnAuditLimit::Refuse),
            _ => Err(OnAuditLimitError),
        }
    }
}

/// Places left for attempt records, shared by the doors and the writer thread.
#[derive(Debug)]
pub(super) struct Budget {
    /// Places any record may take, `--audit-limit` at the start.
    shared: AtomicU64,
    /// Places only egress may take once `shared` is spent.
    reserve: AtomicU64,
}

impl Budget {
    pub(super) fn new(limit: u64, on_limit: OnAuditLimit) -> Budget {
        Budget {
            shared: AtomicU64::new(limit),
            reserve: AtomicU64::new(reserve_for(limit, on_limit)),
        }
    }

    /// A place for a record that holds none (a refusal): from the shared budget only.
    pub(super) fn take_shared(&self) -> bool {
        take(&self.shared)
    }

    /// A place for the record of an attempt about to reach something: shared first, then
    /// the reserve. None: none is left, and the attempt must not go ahead.
    pub(super) fn hold_for_egress(&self) -> Option<Place> {
        if take(&self.shared) {
            Some(Place::Shared)
        } else if take(&self.reserve) {
            Some(Place::Reserve)
        } else {
            None
        }
    }

    /// Gives back a held place whose record will never be written (an attempt that turned
    /// out to need none, such as a repeated DNS answer), so it cannot drain the budget.
    pub(super) fn release(&self, place: Place) {
        let left = match place {
            Place::Shared => &self.shared,
            Place::Reserve => &self.reserve,
        };
        left.fetch_add(1, Ordering::AcqRel);
    }
}

/// Where a held place came from, so that giving it back puts it where it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    Shared,
    Reserve,
}

/// The reserve egress has past the shared budget: as many places again, or none.
pub(super) fn reserve_for(limit: u64, on_limit: OnAuditLimit) -> u64 {
    match on_limit {
        OnAuditLimit::Reserve => limit,
        OnAuditLimit::Refuse => 0,
    }
}

fn take(left: &AtomicU64) -> bool {
    left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_spend_the_shared_budget_and_egress_then_draws_on_its_reserve() {
        let budget = Budget::new(2, OnAuditLimit::Reserve);
        assert!(budget.take_shared() && budget.take_shared());
        assert!(!budget.take_shared());
        assert_eq!(budget.hold_for_egress(), Some(Place::Reserve));
        assert_eq!(budget.hold_for_egress(), Some(Place::Reserve));
        assert_eq!(budget.hold_for_egress(), None);
    }

    #[test]
    fn a_released_place_is_there_again_where_it_came_from() {
        let budget = Budget::new(1, OnAuditLimit::Reserve);
        let shared = budget.hold_for_egress().unwrap();
        let reserve = budget.hold_for_egress().unwrap();
        assert_eq!((shared, reserve), (Place::Shared, Place::Reserve));
        budget.release(reserve);
        assert!(
            !budget.take_shared(),
            "the reserve's place does not go to refusals"
        );
        assert_eq!(budget.hold_for_egress(), Some(Place::Reserve));
        budget.release(shared);
        assert!(budget.take_shared());
    }

    #[test]
    fn under_refuse_egress_has_no_reserve() {
        let budget = Budget::new(1, OnAuditLimit::Refuse);
        assert!(budget.take_shared());
        assert_eq!(budget.hold_for_egress(), None);
    }

    #[test]
    fn the_value_parses_as_it_is_spelled() {
        for on_limit in [OnAuditLimit::Reserve, OnAuditLimit::Refuse] {
            assert_eq!(on_limit.as_str().parse::<OnAuditLimit>().unwrap(), on_limit);
        }
        assert!("Refuse".parse::<OnAuditLimit>().is_err());
    }
}
