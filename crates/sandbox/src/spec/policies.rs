//! Policy texts as the proxy receives them: read once, bounded in size.

use std::path::Path;

use super::SpecError;

/// One argv string of the proxy process must stay below the kernel's MAX_ARG_STRLEN
/// (128 KiB), and policies travel to the proxy container as `--policy-yaml NAME=YAML`.
const MAX_POLICY_ARG: usize = 128 * 1024 - 1;
/// All of the proxy's arguments together stay far below ARG_MAX (2 MiB with an 8 MiB stack).
const MAX_POLICY_ARGS_TOTAL: usize = 1024 * 1024;

/// A policy exactly as the proxy will receive it: the text that was validated here is the
/// text the proxy parses, so the file cannot change in between.
#[derive(Clone, Debug)]
pub struct PolicySource {
    /// Gives the policy's default name; shown in the proxy's diagnostics.
    pub file_name: String,
    /// The policy's YAML text, validated as the proxy will parse it.
    pub yaml: String,
}

/// Reads a policy file once; the same text is validated here and parsed by the proxy.
pub(super) fn read_policy(path: &Path) -> Result<(String, PolicySource), SpecError> {
    let read_error = |cause| SpecError::PolicyRead {
        path: path.to_path_buf(),
        cause,
    };
    let shown = path.display().to_string();
    let size = std::fs::metadata(path).map_err(read_error)?.len();
    if size > MAX_POLICY_ARG as u64 {
        return Err(SpecError::PolicyTooLarge {
            file: shown,
            size: usize::try_from(size).unwrap_or(usize::MAX),
            max: MAX_POLICY_ARG,
        });
    }
    let yaml = std::fs::read_to_string(path).map_err(read_error)?;
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| shown.clone());
    Ok((shown, PolicySource { file_name, yaml }))
}

pub(super) fn check_policy_sizes(sources: &[PolicySource]) -> Result<(), SpecError> {
    let mut total = 0;
    for source in sources {
        // "NAME=YAML" plus the terminating NUL.
        let size = source.file_name.len() + 1 + source.yaml.len() + 1;
        if size > MAX_POLICY_ARG {
            return Err(SpecError::PolicyTooLarge {
                file: source.file_name.clone(),
                size,
                max: MAX_POLICY_ARG,
            });
        }
        total += size;
    }
    if total > MAX_POLICY_ARGS_TOTAL {
        return Err(SpecError::PoliciesTooLarge {
            size: total,
            max: MAX_POLICY_ARGS_TOTAL,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_policy_is_refused() {
        let big = PolicySource {
            file_name: "big.yaml".into(),
            yaml: "#".repeat(MAX_POLICY_ARG),
        };
        assert!(matches!(
            check_policy_sizes(&[big]),
            Err(SpecError::PolicyTooLarge { .. })
        ));
    }
}
