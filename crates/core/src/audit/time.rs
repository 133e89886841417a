//! A record's `ts`: written as RFC 3339 UTC with milliseconds, read back as an instant.

use std::time::{SystemTime, UNIX_EPOCH};

/// `ts` format: RFC 3339 UTC with milliseconds.
pub fn timestamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// RFC 3339 (`2026-11-29T18:40:43.123Z`, or with an offset such as `+02:00`; `t` and `z`
/// in either case) → milliseconds since the epoch. The proxy writes UTC with `Z`; an offset
/// is honoured, never ignored (read as UTC, `+02:00` would put an event two hours late).
pub fn epoch_millis(ts: &str) -> Option<i64> {
    let ts = ts.to_ascii_uppercase();
    let (local, offset_minutes) = match ts.strip_suffix('Z') {
        Some(local) => (local, 0),
        None => {
            let split = ts.len().checked_sub(6)?;
            let (local, offset) = (ts.get(..split)?, ts.get(split..)?);
            (local, utc_offset_minutes(offset)?)
        }
    };
    let at = humantime::parse_rfc3339(&format!("{local}Z")).ok()?;
    let since = at.duration_since(UNIX_EPOCH).ok()?;
    let millis = i64::try_from(since.as_millis()).ok()?;
    Some(millis - offset_minutes * 60_000)
}

/// `+HH:MM` / `-HH:MM` → minutes east of UTC.
fn utc_offset_minutes(offset: &str) -> Option<i64> {
    let bytes = offset.as_bytes();
    let sign = match bytes.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    if bytes.len() != 6 || bytes[3] != b':' {
        return None;
    }
    let hours: i64 = offset.get(1..3)?.parse().ok()?;
    let minutes: i64 = offset.get(4..6)?.parse().ok()?;
    (hours < 24 && minutes < 60).then_some(sign * (hours * 60 + minutes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc_millis() {
        assert_eq!(
            timestamp(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn a_written_timestamp_reads_back_as_its_instant() {
        let at = UNIX_EPOCH + std::time::Duration::from_millis(1_795_977_643_123);
        assert_eq!(epoch_millis(&timestamp(at)), Some(1_795_977_643_123));
    }

    #[test]
    fn times_with_an_offset_or_lower_case_letters_are_read_as_the_same_instant() {
        let utc = epoch_millis("2026-12-02T07:45:31.615Z");
        assert_eq!(utc, Some(1_796_197_531_615));
        assert_eq!(
            epoch_millis("2026-12-02T09:45:31+02:00"),
            Some(1_796_197_531_000)
        );
        for same in [
            "2026-12-02T09:45:31.615+02:00",
            "2026-12-02T02:15:31.615-05:30",
            "2026-12-02t07:45:31.615z",
            "2026-12-02T07:45:31.615+00:00",
        ] {
            assert_eq!(epoch_millis(same), utc, "{same}");
        }
        for bad in [
            "garbage",
            "2026-02-30T00:00:00Z",
            "2026-12-02T07:45:31+2:00",
            "2026-12-02T07:45:31+24:00",
            "2026-12-02T07:45:31",
            "é2026-12-02T07:45:31",
        ] {
            assert_eq!(epoch_millis(bad), None, "{bad}");
        }
    }
}
