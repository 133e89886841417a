//! `run`'s flag strings (and the same strings in a `serve` API request) turned into the typed
//! values [`RunSpec::builder`] takes. The library never parses a flag; the values mean the same here
//! as in a policy and in the proxy, because durations, sizes and pins go through the proxy crate's
//! one parser each (`egress_core::units`, `egress_core::pin::parse_pin`).
//!
//! Which flags a run has, and what each does, is one list: [`table::RUN_FLAGS`]; [`given`]
//! holds the flags a front end was given ([`value`]: one value each) and applies them.
//!
//! [`RunSpec::builder`]: egress_sandbox::RunSpec::builder

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use egress_core::pin::parse_pin;
use egress_core::target::HostName;
use egress_core::units;

use egress_sandbox::SpecError;
use egress_sandbox::spec::MIN_MEMORY;

pub mod given;
pub mod table;
pub mod value;

fn invalid(flag: &'static str, raw: &str, reason: impl ToString) -> SpecError {
    SpecError::Invalid {
        flag,
        value: raw.to_owned(),
        reason: reason.to_string(),
    }
}

/// `500ms`, `10s`, `2m` ([`units::parse_duration`]; zero refused, as in a policy).
pub fn duration(flag: &'static str, raw: &str) -> Result<Duration, SpecError> {
    units::parse_duration(raw).map_err(|error| invalid(flag, raw, error))
}

/// `256MiB`, `1GB`, `65536` ([`units::parse_size`]; zero refused, as in a policy). A
/// `--memory` below what Docker takes is refused here, quoting what was typed (`"10"`, not
/// the bytes it came to).
pub fn size(flag: &'static str, raw: &str) -> Result<u64, SpecError> {
    let value = units::parse_size(raw).map_err(|error| invalid(flag, raw, error))?;
    if flag == "--memory" && value < MIN_MEMORY {
        return Err(invalid(flag, raw, "Docker needs at least 6MiB"));
    }
    Ok(value)
}

/// `SRC:DST[:rw|:ro]` → (source, target, writable).
pub fn mount(raw: &str) -> Result<(PathBuf, String, bool), SpecError> {
    let (rest, writable) = if let Some(rest) = raw.strip_suffix(":rw") {
        (rest, true)
    } else if let Some(rest) = raw.strip_suffix(":ro") {
        (rest, false)
    } else {
        (raw, false)
    };
    match rest.split_once(':') {
        Some((source, target)) if !source.is_empty() && !target.is_empty() => {
            Ok((PathBuf::from(source), target.to_string(), writable))
        }
        _ => Err(invalid("--mount", raw, "expected SRC:DST[:rw]")),
    }
}

/// `KEY=VALUE`. A bare `KEY` is refused rather than taken from the caller's environment as
/// `docker run -e KEY` does: nothing of the caller's enters the sandbox unless written out
/// (a key belongs in `--secret`, which the sandbox never sees). The message says so.
pub fn env(raw: &str) -> Result<(String, String), SpecError> {
    match raw.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        None if !raw.is_empty() => Err(invalid(
            "--env",
            raw,
            format!(
                "expected KEY=VALUE (the caller's environment is never passed on by name: \
                 write --env {raw}=\"${raw}\"; an API key belongs in a policy credential and \
                 --secret {raw}, which the sandbox never sees)"
            ),
        )),
        _ => Err(invalid("--env", raw, "expected KEY=VALUE")),
    }
}

/// `NAME=IP` ([`parse_pin`], the proxy's own parser: what `run` accepts, its proxy does).
pub fn resolve(raw: &str) -> Result<(HostName, IpAddr), SpecError> {
    parse_pin(raw).map_err(|error| SpecError::Pin(Box::new(error)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--env KEY` alone is refused (docker would pass the caller's value on), and the
    /// message says how to pass a value and where a key belongs.
    #[test]
    fn a_bare_env_name_is_refused_with_the_way_to_pass_it() {
        assert_eq!(env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert_eq!(env("A=").unwrap(), ("A".into(), String::new()));
        let bare = env("OPENAI_API_KEY").unwrap_err().to_string();
        assert!(
            bare.contains(r#"--env OPENAI_API_KEY="$OPENAI_API_KEY""#),
            "{bare}"
        );
        assert!(bare.contains("--secret OPENAI_API_KEY"), "{bare}");
        for raw in ["", "=x"] {
            let error = env(raw).unwrap_err().to_string();
            assert!(error.contains("expected KEY=VALUE"), "{error}");
            assert!(!error.contains("--secret"), "{error}");
        }
    }

    /// Where `run` and the policy disagreed: `--tmp 0` and `--timeout 0s` were taken here
    /// (then refused later, or not at all for `--output-limit`), `tmp: 0` refused there.
    #[test]
    fn sizes_and_durations_parse_as_in_a_policy() {
        assert_eq!(size("--memory", "256MiB").unwrap(), 256 << 20);
        assert_eq!(
            duration("--timeout", "500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert!(size("--memory", "lots").is_err());
        let too_small = size("--memory", "10").unwrap_err().to_string();
        assert_eq!(
            too_small, "invalid --memory \"10\": Docker needs at least 6MiB",
            "what was typed is quoted"
        );
        assert_eq!(size("--tmp", "10").unwrap(), 10);
        for raw in ["0", "0B", "0KiB"] {
            let error = size("--output-limit", raw).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("invalid --output-limit {raw:?}: `{raw}` is zero")
            );
        }
        assert!(duration("--timeout", "0s").is_err());
    }

    #[test]
    fn mounts_parse_modes() {
        assert_eq!(
            mount("/src:/dst").unwrap(),
            (PathBuf::from("/src"), "/dst".to_string(), false)
        );
        assert_eq!(
            mount("/src:/dst:rw").unwrap(),
            (PathBuf::from("/src"), "/dst".to_string(), true)
        );
        assert!(mount("/src").is_err());
    }

    #[test]
    fn env_needs_a_key() {
        assert!(env("=x").is_err());
        assert_eq!(env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
    }

    /// Where `run` and `proxy` disagreed: `run` refused `127.1`, its proxy took it.
    #[test]
    fn pins_parse_as_the_proxy_parses_them() {
        let (name, ip) = resolve("API.test.=127.0.0.5").unwrap();
        assert_eq!(name.as_str(), "api.test");
        assert_eq!(ip, "127.0.0.5".parse::<IpAddr>().unwrap());
        assert_eq!(
            resolve("api.test=127.1").unwrap_err().to_string(),
            "--resolve \"api.test=127.1\": `127.1` is a shorthand of 127.0.0.1; write the address in full"
        );
        assert!(resolve("api.test=nope").is_err());
        assert!(resolve("api.test").is_err());
    }
}
