//! The helper's command line, as the library writes it: a mode, then exactly the arguments
//! the library gives that mode (`egress_sandbox`'s container requests and watchdog). Anything
//! else is refused: this is a protocol, not a user interface (`egress-sandbox proxy` is).

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use crate::launcher::LauncherOptions;
use crate::proxy::ProxyOptions;

/// A mode with its arguments.
#[derive(Debug)]
pub enum Mode {
    /// `proxy …`: the run's proxy.
    Proxy(Box<ProxyOptions>),
    /// `sandbox-launcher …`: the sandbox's entrypoint.
    Launcher(LauncherOptions),
    /// `watchdog --owner STAMP`: removes the owner's runs if it dies without.
    Watchdog {
        /// The owner label's value of the process watched over.
        owner: String,
    },
    /// `version`: the handshake line.
    Version,
}

/// Arguments this binary does not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}; this binary takes only what the egress-sandbox library passes it \
             (proxy, sandbox-launcher, watchdog, version): the command line is `egress-sandbox`",
            self.0
        )
    }
}

impl std::error::Error for UsageError {}

fn usage(message: impl Into<String>) -> UsageError {
    UsageError(message.into())
}

/// Parses the arguments after the program's name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Mode, UsageError> {
    let words = args
        .into_iter()
        .map(|word| {
            word.into_string()
                .map_err(|word| usage(format!("an argument is not UTF-8: {word:?}")))
        })
        .collect::<Result<Vec<String>, _>>()?;
    let mut words = Words(words.into_iter());
    let mode = words.next().ok_or_else(|| usage("no mode given"))?;
    match mode.as_str() {
        "proxy" => parse_proxy(words).map(|options| Mode::Proxy(Box::new(options))),
        "sandbox-launcher" => parse_launcher(words).map(Mode::Launcher),
        "watchdog" => parse_watchdog(words),
        "version" => words.end().map(|()| Mode::Version),
        other => Err(usage(format!("no mode {other:?}"))),
    }
}

/// The words after the mode.
struct Words(std::vec::IntoIter<String>);

impl Words {
    fn next(&mut self) -> Option<String> {
        self.0.next()
    }

    /// The value after `flag`.
    fn value(&mut self, flag: &str) -> Result<String, UsageError> {
        self.next()
            .ok_or_else(|| usage(format!("{flag} needs a value")))
    }

    fn end(mut self) -> Result<(), UsageError> {
        match self.next() {
            None => Ok(()),
            Some(word) => Err(usage(format!("unexpected argument {word:?}"))),
        }
    }
}

/// `proxy`: `--listeners-from PATH --dns-answer IP` or `--listen ADDR --dns-listen ADDR
/// [--transparent-listen ADDR]…`, then `--audit-log FILE|-`, `--config-stdin` and
/// `--floor-extra CIDR`…
fn parse_proxy(mut words: Words) -> Result<ProxyOptions, UsageError> {
    let mut options = ProxyOptions::default();
    while let Some(flag) = words.next() {
        match flag.as_str() {
            "--listen" => options.listen = Some(words.value(&flag)?),
            "--listeners-from" => options.listeners_from = Some(PathBuf::from(words.value(&flag)?)),
            "--dns-listen" => options.dns_listen = Some(words.value(&flag)?),
            "--dns-answer" => options.dns_answer = Some(words.value(&flag)?),
            "--transparent-listen" => options.transparent_listen.push(words.value(&flag)?),
            "--audit-log" => options.audit_log = words.value(&flag)?,
            "--config-stdin" => options.config_stdin = true,
            "--floor-extra" => options.floor_extra.push(words.value(&flag)?),
            other => return Err(usage(format!("proxy takes no argument {other:?}"))),
        }
    }
    match (&options.listen, &options.listeners_from) {
        (Some(_), None) | (None, Some(_)) => Ok(options),
        _ => Err(usage(
            "proxy needs one of --listen and --listeners-from, not both",
        )),
    }
}

/// `sandbox-launcher [--pass-listeners PATH] -- [PREFIX…]`.
fn parse_launcher(mut words: Words) -> Result<LauncherOptions, UsageError> {
    let mut options = LauncherOptions::default();
    while let Some(word) = words.next() {
        match word.as_str() {
            "--pass-listeners" => {
                options.pass_listeners = Some(PathBuf::from(words.value(&word)?));
            }
            "--" => {
                options.command = words.0.collect();
                break;
            }
            other => {
                return Err(usage(format!(
                    "sandbox-launcher takes no argument {other:?} before --"
                )));
            }
        }
    }
    Ok(options)
}

/// `watchdog --owner STAMP`.
fn parse_watchdog(mut words: Words) -> Result<Mode, UsageError> {
    let owner = match words.next().as_deref() {
        Some("--owner") => words.value("--owner")?,
        _ => return Err(usage("watchdog needs --owner STAMP")),
    };
    words.end()?;
    Ok(Mode::Watchdog { owner })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(words: &[&str]) -> Result<Mode, UsageError> {
        parse(words.iter().map(OsString::from))
    }

    #[test]
    fn the_proxy_takes_the_arguments_of_either_wiring() {
        let Ok(Mode::Proxy(options)) = parsed(&[
            "proxy",
            "--listen",
            "10.0.0.2:3128",
            "--dns-listen",
            "10.0.0.2:53",
            "--transparent-listen",
            "10.0.0.2:443",
            "--transparent-listen",
            "10.0.0.2:80",
            "--audit-log",
            "-",
            "--config-stdin",
            "--floor-extra",
            "192.0.2.1",
        ]) else {
            panic!("parsed");
        };
        assert_eq!(options.listen.as_deref(), Some("10.0.0.2:3128"));
        assert_eq!(options.dns_listen.as_deref(), Some("10.0.0.2:53"));
        assert_eq!(options.transparent_listen, ["10.0.0.2:443", "10.0.0.2:80"]);
        assert_eq!(options.audit_log, "-");
        assert!(options.config_stdin);
        assert_eq!(options.floor_extra, ["192.0.2.1"]);

        let Ok(Mode::Proxy(options)) = parsed(&[
            "proxy",
            "--listeners-from",
            "/doors/listeners.sock",
            "--dns-answer",
            "127.0.0.1",
            "--audit-log",
            "-",
            "--config-stdin",
        ]) else {
            panic!("parsed");
        };
        assert_eq!(
            options.listeners_from,
            Some(PathBuf::from("/doors/listeners.sock"))
        );
        assert_eq!(options.dns_answer.as_deref(), Some("127.0.0.1"));
        assert_eq!(options.listen, None);
    }

    #[test]
    fn the_proxy_refuses_what_the_library_never_passes() {
        for words in [
            &["proxy"][..],
            &["proxy", "--listen", "127.0.0.1:0", "--allow", "x.test"],
            &["proxy", "--listen", "127.0.0.1:0", "--listeners-from", "/s"],
            &["proxy", "--listen"],
            &["proxy", "--listen=127.0.0.1:0"],
        ] {
            assert!(parsed(words).is_err(), "{words:?}");
        }
    }

    #[test]
    fn the_launcher_takes_its_socket_and_the_words_after_dashes() {
        let Ok(Mode::Launcher(options)) = parsed(&[
            "sandbox-launcher",
            "--pass-listeners",
            "/doors/sandbox.sock",
            "--",
            "/entry",
            "--flag",
            "--",
        ]) else {
            panic!("parsed");
        };
        assert_eq!(
            options.pass_listeners,
            Some(PathBuf::from("/doors/sandbox.sock"))
        );
        assert_eq!(options.command, ["/entry", "--flag", "--"]);
        let Ok(Mode::Launcher(options)) = parsed(&["sandbox-launcher", "--"]) else {
            panic!("parsed");
        };
        assert_eq!(options, LauncherOptions::default());
        assert!(parsed(&["sandbox-launcher", "/entry"]).is_err());
    }

    #[test]
    fn the_watchdog_takes_its_owner_and_version_nothing() {
        assert!(matches!(
            parsed(&["watchdog", "--owner", "1:2:3:4"]),
            Ok(Mode::Watchdog { owner }) if owner == "1:2:3:4"
        ));
        assert!(parsed(&["watchdog"]).is_err());
        assert!(parsed(&["watchdog", "--owner", "1", "extra"]).is_err());
        assert!(matches!(parsed(&["version"]), Ok(Mode::Version)));
        assert!(parsed(&["version", "--json"]).is_err());
    }

    #[test]
    fn an_unknown_mode_says_where_the_command_line_is() {
        for words in [&[][..], &["run"], &["--help"]] {
            let error = parsed(words).unwrap_err().to_string();
            assert!(error.contains("`egress-sandbox`"), "{error}");
        }
    }
}
