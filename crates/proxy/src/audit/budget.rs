//! The run's record budget: how many more attempt records the writer may write.
//!
//! An attempt that would reach something (allowed, or let through by report mode) takes
//! its place before it acts ([`Budget::hold_for_egress`]), so its record is written
//! whatever the sandbox does next. A refusal takes its place only when its record reaches
//! the writer, and past the budget it is only counted. A flood of cheap refusals can thus
//! spend the shared budget, but never the place of an allowed attempt's record: past the
//! shared budget, egress either draws on a reserve of its own or is refused
//! ([`OnAuditLimit`]).

use std::sync::atomic::{AtomicU64, Ordering};

use egress_core::audit::{OnAuditLimit, reserve_for};

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
}
