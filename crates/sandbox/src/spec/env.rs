//! Variables the caller sets in the sandbox (`--env`).

use super::{Field, SpecError, invalid};

/// Variables egress-sandbox sets itself: the proxy is the only way out, overriding them
/// could only make programs fail in confusing ways.
const PROXY_VARIABLES: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

pub(super) fn check_env(key: &str, value: &str) -> Result<(), SpecError> {
    let shown = format!("{key}={value}");
    if key.is_empty() || key.contains('=') {
        return Err(invalid(Field::Env, shown, "expected KEY=VALUE"));
    }
    if key.contains('\0') || value.contains('\0') {
        return Err(invalid(
            Field::Env,
            shown,
            "a NUL byte cannot be in an environment variable",
        ));
    }
    if PROXY_VARIABLES.contains(&key) {
        return Err(invalid(
            Field::Env,
            shown,
            "the proxy variables are set by egress-sandbox",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_refuses_proxy_variables_and_bad_keys() {
        assert!(check_env("FOO", "bar").is_ok());
        assert!(check_env("HTTPS_PROXY", "http://evil").is_err());
        assert!(check_env("", "x").is_err());
        let nul = check_env("A", "x\0y").unwrap_err().to_string();
        assert!(nul.contains("NUL byte"), "{nul}");
    }
}
