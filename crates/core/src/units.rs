//! Durations and sizes as people write them: the one parser each, shared by the policy's
//! `limits` section and every flag and API field that takes one (`run --timeout`,
//! `--memory`, `--tmp`, `--output-limit`, serve's JSON fields), and the bounds every
//! duration and size of the tool is held to.
//!
//! A value means the same wherever it is written. Zero is refused everywhere: no limit of
//! this tool is meaningful at zero (a run that may take no time, hold no memory or print
//! nothing). Nor is any limit meaningful past [`MAX_DURATION`] or [`MAX_SIZE`], and both
//! keep every sum and product the tool makes of them (a deadline, the run CA's `notAfter`,
//! Docker's signed 64-bit byte counts) far from overflowing.

use std::time::Duration;

/// The longest duration any flag, API field or policy limit takes: 7 days. A sandboxed run
/// is a task of minutes or hours; a week covers the longest batch job while an instant
/// plus it, and a certificate's `notAfter` of now plus it, fit any clock.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The largest size any flag, API field or policy limit takes: 1 PiB (2⁵⁰ bytes), more than
/// any machine's memory or disk, and 2¹³ times below `i64::MAX` (Docker's byte counts).
pub const MAX_SIZE: u64 = 1 << 50;

/// How long the run CA outlives the run's time limit: setup before the command starts and
/// the drain after it.
pub const CA_SLACK: Duration = Duration::from_secs(3600);

/// The longest lifetime the proxy gives a run CA: the longest time limit plus [`CA_SLACK`].
pub const MAX_CA_LIFETIME: Duration = Duration::from_secs(MAX_DURATION.as_secs() + 3600);

/// Why a duration or size was refused. `Display` quotes the value as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitError {
    /// The value is zero; a duration or size must be positive.
    #[error("`{0}` is zero")]
    Zero(String),
    /// The text is not a duration.
    #[error("`{raw}` is not a duration like `30s`, `500ms` or `2m` ({reason})")]
    Duration {
        /// The text as given.
        raw: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The text is not a size.
    #[error("`{raw}` is not a size like `256MiB` or `1GiB` ({reason})")]
    Size {
        /// The text as given.
        raw: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The duration is over the longest this tool takes.
    #[error("`{0}` is longer than any duration this tool takes (at most 7days)")]
    TooLong(String),
    /// The size is over the largest this tool takes.
    #[error("`{0}` is larger than any size this tool takes (at most 1PiB)")]
    TooLarge(String),
}

/// The run CA's lifetime for a run with `time_limit`: the limit in whole seconds, rounded
/// up, plus [`CA_SLACK`]. At most [`MAX_CA_LIFETIME`] for a limit of at most
/// [`MAX_DURATION`]; saturating, never overflowing, past it.
pub fn ca_lifetime(time_limit: Duration) -> Duration {
    let seconds = time_limit
        .as_secs()
        .saturating_add(u64::from(time_limit.subsec_nanos() > 0));
    Duration::from_secs(seconds.saturating_add(CA_SLACK.as_secs()))
}

/// `30s`, `500ms`, `2m`, `1h 30m` (humantime); surrounding spaces ignored; zero and more
/// than [`MAX_DURATION`] refused.
pub fn parse_duration(raw: &str) -> Result<Duration, UnitError> {
    match humantime::parse_duration(raw.trim()) {
        Ok(value) => check_duration(raw, value),
        Err(error) => Err(UnitError::Duration {
            raw: raw.to_owned(),
            reason: error.to_string(),
        }),
    }
}

/// A duration given as a number of seconds (serve's JSON fields, MCP arguments): zero,
/// negative, not finite and more than [`MAX_DURATION`] refused. `raw` is how the value was
/// written, for the error.
pub fn duration_from_seconds(raw: &str, seconds: f64) -> Result<Duration, UnitError> {
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(UnitError::Duration {
            raw: raw.to_owned(),
            reason: "not a number of seconds".to_owned(),
        });
    }
    if seconds > MAX_DURATION.as_secs_f64() {
        return Err(UnitError::TooLong(raw.to_owned()));
    }
    check_duration(raw, Duration::from_secs_f64(seconds))
}

/// `value` (written `raw`) if it is neither zero nor more than [`MAX_DURATION`].
pub(crate) fn check_duration(raw: &str, value: Duration) -> Result<Duration, UnitError> {
    if value.is_zero() {
        Err(UnitError::Zero(raw.to_owned()))
    } else if value > MAX_DURATION {
        Err(UnitError::TooLong(raw.to_owned()))
    } else {
        Ok(value)
    }
}

/// `256MiB`, `1GiB`, `64MB`, `1048576` (parse-size; bytes; `KiB` = 1024, `kB` = 1000);
/// surrounding spaces ignored; zero and more than [`MAX_SIZE`] refused.
pub fn parse_size(raw: &str) -> Result<u64, UnitError> {
    match parse_size::parse_size(raw.trim()) {
        Ok(0) => Err(UnitError::Zero(raw.to_owned())),
        Ok(value) if value > MAX_SIZE => Err(UnitError::TooLarge(raw.to_owned())),
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
    fn durations_are_bounded_at_seven_days() {
        assert_eq!(parse_duration("7d"), Ok(MAX_DURATION));
        assert_eq!(parse_duration("168h"), Ok(MAX_DURATION));
        for raw in ["7d 1s", "8d", "100000000000000h", "1000y"] {
            assert_eq!(
                parse_duration(raw),
                Err(UnitError::TooLong(raw.into())),
                "{raw}"
            );
        }
        assert_eq!(
            parse_duration("100000000000000h").unwrap_err().to_string(),
            "`100000000000000h` is longer than any duration this tool takes (at most 7days)"
        );
        assert!(matches!(
            parse_duration("99999999999999999999999h"),
            Err(UnitError::Duration { .. })
        ));
        assert_eq!(
            format!("{}", humantime::format_duration(MAX_DURATION)),
            "7days",
            "the message names the bound as it is"
        );
    }

    #[test]
    fn durations_in_seconds_are_bounded_at_seven_days() {
        assert_eq!(
            duration_from_seconds("0.5", 0.5),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(duration_from_seconds("604800", 604_800.0), Ok(MAX_DURATION));
        assert_eq!(
            duration_from_seconds("1e300", 1e300),
            Err(UnitError::TooLong("1e300".into()))
        );
        assert_eq!(
            duration_from_seconds("604800.5", 604_800.5),
            Err(UnitError::TooLong("604800.5".into()))
        );
        assert_eq!(
            duration_from_seconds("0", 0.0),
            Err(UnitError::Zero("0".into()))
        );
        for (raw, seconds) in [("-1", -1.0), ("inf", f64::INFINITY), ("NaN", f64::NAN)] {
            assert!(
                matches!(
                    duration_from_seconds(raw, seconds),
                    Err(UnitError::Duration { .. })
                ),
                "{raw}"
            );
        }
    }

    #[test]
    fn sizes_are_bounded_at_one_pebibyte() {
        assert_eq!(parse_size("1PiB"), Ok(MAX_SIZE));
        assert_eq!(parse_size("1048576GiB"), Ok(MAX_SIZE));
        for raw in ["1048577GiB", "2PiB", "1EiB", "18446744073709551615"] {
            assert_eq!(
                parse_size(raw),
                Err(UnitError::TooLarge(raw.into())),
                "{raw}"
            );
        }
        assert!(matches!(parse_size("16EiB"), Err(UnitError::Size { .. })));
        assert_eq!(
            parse_size("2PiB").unwrap_err().to_string(),
            "`2PiB` is larger than any size this tool takes (at most 1PiB)"
        );
    }

    #[test]
    fn the_ca_lifetime_bound_is_the_longest_run_plus_the_slack() {
        assert_eq!(MAX_CA_LIFETIME, MAX_DURATION + CA_SLACK);
        assert_eq!(ca_lifetime(MAX_DURATION), MAX_CA_LIFETIME);
        assert_eq!(
            ca_lifetime(Duration::from_millis(1500)),
            Duration::from_secs(3602)
        );
        assert_eq!(ca_lifetime(Duration::MAX), Duration::from_secs(u64::MAX));
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
