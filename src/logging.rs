//! Diagnostics go to stderr through `tracing`, never into the audit stream or the sandboxed
//! command's output.

use std::ffi::OsStr;
use std::io::IsTerminal;

use egress_core::text::visible;
use tracing_subscriber::EnvFilter;

/// The variable that overrides `-v`: an `EnvFilter` directive list such as
/// `egress_proxy=debug`.
pub const LOG_VAR: &str = "EGRESS_SANDBOX_LOG";

/// `-v` info, `-vv` debug, `-vvv` trace; `EGRESS_SANDBOX_LOG` (an `EnvFilter`) overrides.
///
/// An `EGRESS_SANDBOX_LOG` that is not a valid filter is said once on stderr and the `-v`
/// level is used instead: a typo must not leave someone believing they turned diagnostics
/// on (or off) when they did not.
pub fn init(verbose: u8) {
    let (filter, warning) = filter(verbose, std::env::var_os(LOG_VAR).as_deref());
    if let Some(warning) = warning {
        eprintln!("egress-sandbox: warning: {warning}");
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a person: the proxy container's stderr is read by `run`.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// The level `-v` flags ask for. `-vvv` is trace for this tool's own crates only: the
/// libraries under them (hyper, rustls, bollard) stay at debug, as with `-vv`, whose logs
/// are proven free of credentials — their trace output is not (EGRESS_SANDBOX_LOG can
/// still ask for it).
fn default_directives(verbose: u8) -> &'static str {
    match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "debug,egress_sandbox=trace,egress_proxy=trace",
    }
}

/// The filter to use, and why `EGRESS_SANDBOX_LOG` (`env`) was ignored when it was set but
/// is not a valid filter.
fn filter(verbose: u8, env: Option<&OsStr>) -> (EnvFilter, Option<String>) {
    let default = || EnvFilter::new(default_directives(verbose));
    let Some(value) = env else {
        return (default(), None);
    };
    let parsed = match value.to_str() {
        Some(text) => EnvFilter::try_new(text).map_err(|error| error.to_string()),
        None => Err("not UTF-8".to_owned()),
    };
    match parsed {
        Ok(filter) => (filter, None),
        // The value and the parser's message (which may quote it) are the user's text.
        Err(why) => {
            let value = value.to_string_lossy();
            let warning = format!("ignoring {LOG_VAR}={}: {}", visible(&value), visible(&why));
            (default(), Some(warning))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::filter::LevelFilter;

    fn level(verbose: u8, env: Option<&str>) -> Option<LevelFilter> {
        filter(verbose, env.map(OsStr::new)).0.max_level_hint()
    }

    #[test]
    fn each_v_raises_the_level_by_one_from_warn() {
        assert_eq!(level(0, None), Some(LevelFilter::WARN));
        assert_eq!(level(1, None), Some(LevelFilter::INFO));
        assert_eq!(level(2, None), Some(LevelFilter::DEBUG));
        assert_eq!(level(3, None), Some(LevelFilter::TRACE));
        assert_eq!(level(7, None), Some(LevelFilter::TRACE));
    }

    #[test]
    fn a_valid_log_variable_overrides_the_flags_without_a_word() {
        let (filter, warning) = filter(0, Some(OsStr::new("egress_proxy=trace")));
        assert_eq!(warning, None);
        assert_eq!(filter.max_level_hint(), Some(LevelFilter::TRACE));
    }

    #[test]
    fn an_invalid_log_variable_is_said_once_and_the_flags_level_used() {
        let (filter, warning) = filter(1, Some(OsStr::new("egress=notalevel")));
        let warning = warning.expect("a warning");
        assert!(
            warning.starts_with("ignoring EGRESS_SANDBOX_LOG=egress=notalevel: "),
            "{warning}"
        );
        assert!(!warning.contains('\n'), "{warning:?}");
        assert_eq!(filter.max_level_hint(), Some(LevelFilter::INFO));
    }

    #[test]
    fn an_invalid_log_variable_is_shown_with_its_controls_visible() {
        let (_, warning) = filter(0, Some(OsStr::new("x=\x1b[2Jnope")));
        let warning = warning.expect("a warning");
        assert!(warning.contains(r"x=\x1b[2Jnope"), "{warning}");
        assert!(!warning.contains('\x1b'), "{warning:?}");
    }
}
