//! What happens to new egress once a run's audit budget is spent.

use std::str::FromStr;

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

/// The reserve egress has past the shared budget: as many places again, or none.
pub fn reserve_for(limit: u64, on_limit: OnAuditLimit) -> u64 {
    match on_limit {
        OnAuditLimit::Reserve => limit,
        OnAuditLimit::Refuse => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_parses_as_it_is_spelled() {
        for on_limit in [OnAuditLimit::Reserve, OnAuditLimit::Refuse] {
            assert_eq!(on_limit.as_str().parse::<OnAuditLimit>().unwrap(), on_limit);
        }
        assert!("Refuse".parse::<OnAuditLimit>().is_err());
    }
}
