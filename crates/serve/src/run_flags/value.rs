//! One value of a run flag ([`FlagValue`]) and the kinds the command line takes
//! ([`ValueKind`]).

use std::path::PathBuf;

/// What the command line takes as a flag's value (and checks before a command runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// Any text.
    Text,
    /// A path on this host.
    Path,
    /// A whole number ≥ 0.
    Count,
    /// A decimal number.
    Decimal,
}

/// One value of a flag, as the command line parsed it.
#[derive(Clone, Debug, PartialEq)]
pub enum FlagValue {
    /// The value of a [`ValueKind::Text`] flag.
    Text(String),
    /// The value of a [`ValueKind::Path`] flag.
    Path(PathBuf),
    /// The value of a [`ValueKind::Count`] flag.
    Count(u64),
    /// The value of a [`ValueKind::Decimal`] flag.
    Decimal(f64),
}

impl FlagValue {
    /// The text of a [`ValueKind::Text`] value, the path of a [`ValueKind::Path`] one.
    pub fn text(&self) -> String {
        match self {
            FlagValue::Text(text) => text.clone(),
            FlagValue::Path(path) => path.display().to_string(),
            FlagValue::Count(count) => count.to_string(),
            FlagValue::Decimal(decimal) => decimal.to_string(),
        }
    }

    /// The path of a [`ValueKind::Path`] value, the text of another as a path.
    pub fn path(&self) -> PathBuf {
        match self {
            FlagValue::Path(path) => path.clone(),
            other => PathBuf::from(other.text()),
        }
    }
}
