//! Durations and sizes as people write them: the one parser each, shared by the policy's
//! `limits` section and every flag and API field that takes one (`run --timeout`,
//! `--memory`, `--tmp`, `--output-limit`, serve's JSON fields).
//!
//! Two parsers used to disagree (a flag took `0`, the policy refused it); now a value means
//! the same wherever it is written. Zero is refused everywhere: no limit of this tool is
//! meaningful at zero (a run that may take no time, hold no memory or print nothing).

use std::time::Duration;

/// Why a duration or size was refused. `Display` quotes the value as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    #[error("`{0}` is zero")]
    Zero(String),
    #[error("`{raw}` is not a duration like `30s`, `500ms` or `2m` ({reason})")]
    Duration { raw: String, reason: String },
    #[error("`{raw}` is not a size like `256MiB` or `1GiB` ({reason})")]
    Size { raw: String, reason: String },
}

/// `30s`, `500ms`, `2m`, `1h 30m` (humantime); surrounding spaces ignored; zero refused.
pub fn parse_duration(raw: &str) -> Result<Duration, UnitError> {
    match humantime::parse_duration(raw.trim()) {
        Ok(value) if value.is_zero() => Err(UnitError::Zero(raw.to_owned())),
        Ok(value) => Ok(value),
        Err(error) => Err(UnitError::Duration {
            raw: raw.to_owned(),
            reason: error.to_string(),
        }),
    }
}

/// `256MiB`, `1GiB`, `64MB`, `1048576` (parse-size; bytes; `KiB` = 1024, `kB` = 1000);
/// surrounding spaces ignored; zero refused.
pub fn parse_size(raw: &str) -> Result<u64, UnitError> {
    match parse_size::parse_size(raw.trim()) {
        Ok(0) => Err(UnitError::Zero(raw.to_owned())),
        Ok(value) => Ok(value),
        Err(error) => Err(UnitError::Size {
            raw: raw.to_owned(),
            reason: error.to_string(),
        }),
    }
}

/// `1048576` → `1MiB`: sizes shown the way people write them (and [`parse_size()`] reads).
pub fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_people_write_them() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert!(matches!(
            parse_duration("soon"),
            Err(UnitError::Duration { .. })
        ));
        assert!(matches!(
            parse_duration("30"),
            Err(UnitError::Duration { .. })
        ));
    }

    #[test]
    fn sizes_parse_like_people_write_them() {
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("64MB"), Ok(64_000_000));
        assert_eq!(parse_size(" 1048576 "), Ok(1 << 20));
        assert!(matches!(parse_size("lots"), Err(UnitError::Size { .. })));
    }

    /// Where the two old parsers disagreed: a flag took zero, the policy refused it.
    #[test]
    fn zero_is_refused_in_every_spelling() {
        for raw in ["0", "0B", "0MiB", " 0 "] {
            assert_eq!(parse_size(raw), Err(UnitError::Zero(raw.into())), "{raw}");
        }
        for raw in ["0s", "0ms", "0m"] {
            assert_eq!(
                parse_duration(raw),
                Err(UnitError::Zero(raw.into())),
                "{raw}"
            );
        }
        assert_eq!(parse_size("0").unwrap_err().to_string(), "`0` is zero");
    }

    #[test]
    fn formatted_sizes_parse_back() {
        for bytes in [1, 1000, 1024, 256 << 20, 3 << 30, (1 << 20) + 1] {
            assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }
        assert_eq!(format_size(256 << 20), "256MiB");
        assert_eq!(format_size(1000), "1000B");
    }
}
