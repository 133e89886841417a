//! The run's resource limits: the defaults, a policy's ceilings and the caller's requests
//! settled into one [`RunLimits`].

use std::time::Duration;

use egress_core::policy::Limits;
use egress_core::units::{MAX_DURATION, MAX_SIZE, format_size};

use super::{Field, SpecError, invalid};

/// The run's limits when neither a flag nor a stricter policy sets them (documented in
/// `docs/src/reference/cli.md`).
pub const DEFAULT_LIMITS: RunLimits = RunLimits {
    timeout: Duration::from_secs(30),
    memory: 256 << 20,
    cpus: 1.0,
    pids: 128,
    tmp: 64 << 20,
    output: 1 << 20,
};

/// Docker refuses memory limits below 6 MiB; say so before anything is created.
pub const MIN_MEMORY: u64 = 6 << 20;

/// The smallest `/tmp` (and `/task`) a run gets: below 1 MiB a tmpfs holds no more than a few
/// files of any size, and the run would fail with `ENOSPC` after everything was created.
pub const MIN_TMP: u64 = 1 << 20;

/// The limits a run is held to.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct RunLimits {
    /// Wall time of the command; the container is killed when it is up (exit 124).
    pub timeout: Duration,
    /// Memory, swap included, in bytes.
    pub memory: u64,
    /// CPUs the sandbox may use, fractions allowed (at least 0.01).
    pub cpus: f64,
    /// Processes and threads the sandbox may have at once (at least 2).
    pub pids: u64,
    /// Size of the writable `/tmp` tmpfs in bytes.
    pub tmp: u64,
    /// stdout+stderr bytes relayed; the rest is dropped.
    pub output: u64,
}

/// What the caller asked for; `None`: not asked.
pub(super) struct Requested {
    pub(super) timeout: Option<Duration>,
    pub(super) memory: Option<u64>,
    pub(super) cpus: Option<f64>,
    pub(super) pids: Option<u64>,
    pub(super) tmp: Option<u64>,
    pub(super) output: Option<u64>,
}

/// The runtime of a run: `requested` (`--runtime`) when the policies allow it; without
/// one, the runtime the policies require, if they require one; else the engine's default
/// (`None`).
pub(super) fn resolve_runtime(
    requested: Option<String>,
    required: Option<&[String]>,
    policy: &str,
) -> Result<Option<String>, SpecError> {
    let Some(required) = required else {
        return Ok(requested);
    };
    match (requested, required) {
        (_, []) => Err(SpecError::RuntimesConflict {
            policy: policy.to_string(),
        }),
        (Some(name), allowed) if !allowed.contains(&name) => Err(SpecError::RuntimeNotAllowed {
            name,
            policy: policy.to_string(),
            allowed: allowed.join(", "),
        }),
        (Some(name), _) => Ok(Some(name)),
        (None, [only, ..]) => Ok(Some(only.clone())),
    }
}

/// A flag is refused above the policy ceiling; without a flag, the default applies unless
/// the ceiling is stricter.
pub(super) fn resolve_limits(
    requested: &Requested,
    ceilings: &Limits,
    policy: &str,
) -> Result<RunLimits, SpecError> {
    fn pick<T: PartialOrd + Copy>(
        field: Field,
        key: &'static str,
        requested: Option<T>,
        ceiling: Option<T>,
        default: T,
        policy: &str,
        show: impl Fn(T) -> String,
    ) -> Result<T, SpecError> {
        match (requested, ceiling) {
            (Some(value), Some(limit)) if value > limit => Err(SpecError::AboveLimit {
                field,
                value: show(value),
                policy: policy.to_string(),
                key,
                limit: show(limit),
            }),
            (Some(value), _) => Ok(value),
            (None, Some(limit)) if limit < default => Ok(limit),
            (None, _) => Ok(default),
        }
    }
    let d = &DEFAULT_LIMITS;
    let show_duration = |value: Duration| humantime::format_duration(value).to_string();
    let show_size = |value: u64| format_size(value);
    let limits = RunLimits {
        timeout: pick(
            Field::Timeout,
            "timeout",
            requested.timeout,
            ceilings.timeout,
            d.timeout,
            policy,
            show_duration,
        )?,
        memory: pick(
            Field::Memory,
            "memory",
            requested.memory,
            ceilings.memory,
            d.memory,
            policy,
            show_size,
        )?,
        cpus: pick(
            Field::Cpus,
            "cpus",
            requested.cpus,
            ceilings.cpus,
            d.cpus,
            policy,
            |value: f64| value.to_string(),
        )?,
        pids: pick(
            Field::Pids,
            "pids",
            requested.pids,
            ceilings.pids,
            d.pids,
            policy,
            |value: u64| value.to_string(),
        )?,
        tmp: pick(
            Field::Tmp,
            "tmp",
            requested.tmp,
            ceilings.tmp,
            d.tmp,
            policy,
            show_size,
        )?,
        output: pick(
            Field::OutputLimit,
            "output",
            requested.output,
            ceilings.output,
            d.output,
            policy,
            show_size,
        )?,
    };
    if limits.timeout > MAX_DURATION {
        return Err(invalid(
            Field::Timeout,
            show_duration(limits.timeout),
            format!("must be at most {}", show_duration(MAX_DURATION)),
        ));
    }
    for (flag, value) in [
        (Field::Memory, limits.memory),
        (Field::Tmp, limits.tmp),
        (Field::OutputLimit, limits.output),
    ] {
        if value > MAX_SIZE {
            return Err(invalid(
                flag,
                format_size(value),
                format!("must be at most {}", format_size(MAX_SIZE)),
            ));
        }
    }
    if limits.timeout.is_zero() {
        return Err(invalid(
            Field::Timeout,
            show_duration(limits.timeout),
            "must be more than 0",
        ));
    }
    if limits.memory < MIN_MEMORY {
        return Err(invalid(
            Field::Memory,
            format_size(limits.memory),
            "Docker needs at least 6MiB",
        ));
    }
    if !(limits.cpus.is_finite() && limits.cpus >= 0.01) {
        return Err(invalid(
            Field::Cpus,
            limits.cpus.to_string(),
            "must be at least 0.01",
        ));
    }
    if limits.pids < 2 {
        // tini and the command.
        return Err(invalid(
            Field::Pids,
            limits.pids.to_string(),
            "must be at least 2",
        ));
    }
    if limits.tmp < MIN_TMP {
        return Err(invalid(
            Field::Tmp,
            format_size(limits.tmp),
            format!("must be at least {}", format_size(MIN_TMP)),
        ));
    }
    if i64::try_from(limits.pids).is_err() {
        return Err(invalid(Field::Pids, limits.pids.to_string(), "too large"));
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requested() -> Requested {
        Requested {
            timeout: None,
            memory: None,
            cpus: None,
            pids: None,
            tmp: None,
            output: None,
        }
    }

    #[test]
    fn a_policy_runtime_is_the_default_and_refuses_any_other() {
        let required = vec!["runsc".to_string()];
        assert_eq!(
            resolve_runtime(None, Some(&required), "p")
                .unwrap()
                .as_deref(),
            Some("runsc")
        );
        assert_eq!(
            resolve_runtime(Some("runsc".into()), Some(&required), "p")
                .unwrap()
                .as_deref(),
            Some("runsc")
        );
        let refused = resolve_runtime(Some("runc".into()), Some(&required), "p").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "--runtime runc is not allowed by policy p (runtime: runsc)"
        );
        let conflict = resolve_runtime(None, Some(&[]), "p").unwrap_err();
        assert!(
            conflict.to_string().contains("different runtimes"),
            "{conflict}"
        );
        assert_eq!(resolve_runtime(None, None, "p").unwrap(), None);
        assert_eq!(
            resolve_runtime(Some("runc".into()), None, "p")
                .unwrap()
                .as_deref(),
            Some("runc")
        );
    }

    #[test]
    fn defaults_apply_without_flags_or_ceilings() {
        let limits = resolve_limits(&requested(), &Limits::default(), "p").unwrap();
        assert_eq!(limits, DEFAULT_LIMITS);
    }

    #[test]
    fn stricter_ceiling_becomes_the_value_looser_one_does_not() {
        let mut ceilings = Limits::default();
        ceilings.timeout = Some(Duration::from_secs(5));
        ceilings.memory = Some(1 << 30);
        let limits = resolve_limits(&requested(), &ceilings, "p").unwrap();
        assert_eq!(limits.timeout, Duration::from_secs(5));
        assert_eq!(limits.memory, DEFAULT_LIMITS.memory);
    }

    #[test]
    fn flag_above_ceiling_is_refused_with_both_values() {
        let mut ceilings = Limits::default();
        ceilings.timeout = Some(Duration::from_secs(30));
        let mut asked = requested();
        asked.timeout = Some(Duration::from_secs(600));
        let error = resolve_limits(&asked, &ceilings, "agent").unwrap_err();
        assert_eq!(
            error.to_string(),
            "--timeout 10m is above the limit of policy agent (timeout: 30s)"
        );
    }

    #[test]
    fn flag_below_ceiling_wins() {
        let mut ceilings = Limits::default();
        ceilings.memory = Some(512 << 20);
        let mut asked = requested();
        asked.memory = Some(384 << 20);
        let limits = resolve_limits(&asked, &ceilings, "p").unwrap();
        assert_eq!(limits.memory, 384 << 20);
    }

    #[test]
    fn nonsense_limits_are_refused() {
        let mut asked = requested();
        asked.memory = Some(1 << 20);
        assert!(resolve_limits(&asked, &Limits::default(), "p").is_err());
        let mut asked = requested();
        asked.timeout = Some(Duration::ZERO);
        assert!(resolve_limits(&asked, &Limits::default(), "p").is_err());
        let mut asked = requested();
        asked.cpus = Some(f64::NAN);
        assert!(resolve_limits(&asked, &Limits::default(), "p").is_err());
    }

    /// A `/tmp` below 1 MiB is refused before anything is created, whether asked for or a
    /// policy's ceiling; 1 MiB itself is taken.
    #[test]
    fn a_tmp_below_the_minimum_is_refused() {
        let mut asked = requested();
        asked.tmp = Some(MIN_TMP - 1);
        let refused = resolve_limits(&asked, &Limits::default(), "p").unwrap_err();
        assert!(
            refused.to_string().starts_with("invalid --tmp")
                && refused.to_string().contains("at least 1MiB"),
            "{refused}"
        );
        let mut ceilings = Limits::default();
        ceilings.tmp = Some(4096);
        assert!(resolve_limits(&requested(), &ceilings, "p").is_err());
        asked.tmp = Some(MIN_TMP);
        assert_eq!(
            resolve_limits(&asked, &Limits::default(), "p").unwrap().tmp,
            MIN_TMP
        );
    }

    /// The library takes a `Duration` and byte counts, not text: the bounds the parsers
    /// hold flags to hold here too.
    #[test]
    fn limits_past_the_bounds_are_refused_naming_the_flag() {
        let refused = |asked: Requested| {
            resolve_limits(&asked, &Limits::default(), "p")
                .unwrap_err()
                .to_string()
        };
        let mut asked = requested();
        asked.timeout = Some(MAX_DURATION + Duration::from_nanos(1));
        assert!(refused(asked).contains("--timeout"));
        let mut asked = requested();
        asked.timeout = Some(Duration::MAX);
        let message = refused(asked);
        assert!(
            message.contains("--timeout") && message.contains("7days"),
            "{message}"
        );
        for (flag, set) in [
            (
                "--memory",
                (|asked: &mut Requested| asked.memory = Some(u64::MAX)) as fn(&mut _),
            ),
            ("--tmp", |asked| asked.tmp = Some(MAX_SIZE + 1)),
            ("--output-limit", |asked| asked.output = Some(MAX_SIZE + 1)),
        ] {
            let mut asked = requested();
            set(&mut asked);
            let message = refused(asked);
            assert!(
                message.contains(flag) && message.contains("1048576GiB"),
                "{message}"
            );
        }
        let mut asked = requested();
        asked.timeout = Some(MAX_DURATION);
        asked.memory = Some(MAX_SIZE);
        let limits = resolve_limits(&asked, &Limits::default(), "p").unwrap();
        assert_eq!((limits.timeout, limits.memory), (MAX_DURATION, MAX_SIZE));
    }
}
