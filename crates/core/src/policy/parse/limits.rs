//! The `limits:` section: ceilings for runs under the policy (timeout, memory, cpus, pids,
//! tmp, output) and the OCI runtime they must use.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::super::Limits;
use super::Findings;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    timeout: Option<Spanned<String>>,
    memory: Option<Spanned<String>>,
    cpus: Option<Spanned<String>>,
    pids: Option<Spanned<String>>,
    tmp: Option<Spanned<String>>,
    output: Option<Spanned<String>>,
    runtime: Option<Spanned<String>>,
}

pub(super) fn build_limits(findings: &mut Findings<'_>, raw: RawLimits) -> Limits {
    let mut limits = Limits::default();
    if let Some(timeout) = raw.timeout {
        match crate::units::parse_duration(&timeout.value) {
            Ok(value) => limits.timeout = Some(value),
            Err(message) => findings.error_at(&timeout.referenced, format!("`timeout`: {message}")),
        }
    }
    for (key, raw_value, slot) in [
        ("memory", raw.memory, &mut limits.memory),
        ("tmp", raw.tmp, &mut limits.tmp),
        ("output", raw.output, &mut limits.output),
    ] {
        if let Some(value) = raw_value {
            match crate::units::parse_size(&value.value) {
                Ok(bytes) => *slot = Some(bytes),
                Err(message) => findings.error_at(&value.referenced, format!("`{key}`: {message}")),
            }
        }
    }
    if let Some(cpus) = raw.cpus {
        match cpus.value.trim().parse::<f64>() {
            Ok(value) if value.is_finite() && value > 0.0 => limits.cpus = Some(value),
            _ => findings.error_at(
                &cpus.referenced,
                format!("`cpus`: `{}` is not a positive number", cpus.value),
            ),
        }
    }
    if let Some(runtime) = raw.runtime {
        let name = runtime.value.trim();
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            findings.error_at(
                &runtime.referenced,
                format!(
                    "`runtime`: `{}` is not a runtime name (one name, as `--runtime` takes it)",
                    runtime.value
                ),
            );
        } else {
            limits.runtime = Some(vec![name.to_string()]);
        }
    }
    if let Some(pids) = raw.pids {
        match pids.value.trim().parse::<u64>() {
            Ok(value) if value > 0 => limits.pids = Some(value),
            _ => findings.error_at(
                &pids.referenced,
                format!("`pids`: `{}` is not a positive whole number", pids.value),
            ),
        }
    }
    limits
}
