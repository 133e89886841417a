//! What `run` writes to the sandbox's launcher (`egress-sandbox sandbox-launcher`, the sandbox's
//! entrypoint on a local engine) to let the command go, and how the launcher reads it.
//!
//! The signal is one header line: `\n` alone means "go"; `N\n` means N bytes of JSON
//! ([`LaunchSetup`]: the command, its environment and working directory, the task files)
//! follow, then go. A sandbox can so be created and started before its command is known
//! (a warm pool slot), and a cold run takes the same path. Everything after the signal on the same
//! stdin is the caller's input to the command, so the launcher reads exactly the signal and not
//! one byte more (no buffered reader).
//!
//! The JSON carries [`LAUNCH_VERSION`] (`"v"`, [`egress_core::wire`]): the launcher is the
//! helper binary, built apart from the library that signals it, and one of another version
//! says so rather than run a command it may have misread. The plain `\n` means "go, as you
//! are" in every version.

use std::io::{self, Read};

use serde::{Deserialize, Serialize};

use egress_core::wire::{self, WireError};

use crate::task_files::TaskFile;

/// The version of the signal's JSON, its `"v"`: raised whenever a field of [`LaunchSetup`] is
/// added, removed or changes its meaning.
pub const LAUNCH_VERSION: u32 = 1;

/// The header line is a decimal length: no more digits than this.
const MAX_HEADER: usize = 20;

/// What the launcher sets up before the command runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchSetup {
    /// The command, after the launcher's own arguments (the image's entrypoint); empty: the
    /// launcher's arguments are the whole command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// `KEY=VALUE`, in order, over the container's own environment (the image's): a
    /// later entry replaces an earlier one of the same name, as Docker merges `Env`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// The working directory; none: the container's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Files written under the task directory before the command starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<TaskFile>,
    /// The most tasks the sandbox's user may have (`RLIMIT_NPROC`), set by the launcher when the
    /// runtime's kernel is the sandbox's own (gVisor): there the host's pids cgroup counts
    /// the runtime's threads, not the command's tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_limit: Option<u64>,
    /// Ports the run's rules allow for some host, besides :80 and :443: the launcher binds a
    /// raw door on each ([`crate::container::loopback_doors`]). Known only with
    /// the run's policy, so they come with the signal, as the command does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub raw_ports: Vec<u16>,
}

/// Why no signal could be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignalError {
    /// Reading stdin failed.
    #[error("cannot read the launch signal")]
    Read(#[from] io::Error),
    /// The text is not a launch signal; says what is wrong.
    #[error("not a launch signal: {0}")]
    Invalid(String),
    /// The setup is of another version than this launcher's: the library that signalled it
    /// and the helper binary were not built together.
    #[error(
        "the launch signal is version {}, this launcher reads version {expected}: the library \
         and its helper binary were built from different versions of egress-sandbox",
        wire::shown_version(*found)
    )]
    Version {
        /// The version the signal declares; `None` when it declares none.
        found: Option<u64>,
        /// The version this launcher reads.
        expected: u32,
    },
}

/// The bytes that open the launcher with `setup`.
pub fn encode(setup: &LaunchSetup) -> Vec<u8> {
    if *setup == LaunchSetup::default() {
        return b"\n".to_vec();
    }
    let json = wire::to_versioned_json(LAUNCH_VERSION, setup);
    let mut signal = format!("{}\n", json.len()).into_bytes();
    signal.extend_from_slice(&json);
    signal
}

/// Reads one signal from `input`; `Ok(None)` if it ended first (the caller gave up).
pub fn read(input: &mut impl Read) -> Result<Option<LaunchSetup>, SignalError> {
    let mut header = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        if input.read(&mut byte)? == 0 {
            return Ok(None);
        }
        if byte[0] == b'\n' {
            break;
        }
        if !byte[0].is_ascii_digit() || header.len() == MAX_HEADER {
            return Err(SignalError::Invalid("its header is no length".into()));
        }
        header.push(byte[0]);
    }
    if header.is_empty() {
        return Ok(Some(LaunchSetup::default()));
    }
    let length: u64 = std::str::from_utf8(&header)
        .ok()
        .and_then(|digits| digits.parse().ok())
        .ok_or_else(|| SignalError::Invalid("bad length".into()))?;
    let mut json = Vec::new();
    input.take(length).read_to_end(&mut json)?;
    if json.len() as u64 != length {
        return Ok(None);
    }
    match wire::from_versioned_json(&json, LAUNCH_VERSION) {
        Ok(setup) => Ok(Some(setup)),
        Err(WireError::Version { found, expected }) => {
            Err(SignalError::Version { found, expected })
        }
        Err(error) => Err(SignalError::Invalid(error.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_that_cannot_be_read_says_its_cause_once() {
        let error = SignalError::from(io::Error::other("broken pipe"));
        assert_eq!(error.to_string(), "cannot read the launch signal");
        assert_eq!(
            crate::outcome::with_causes(&error),
            "cannot read the launch signal: broken pipe"
        );
    }

    #[test]
    fn a_plain_go_is_one_newline_and_nothing_after_it_is_read() {
        assert_eq!(encode(&LaunchSetup::default()), b"\n");
        let mut input: &[u8] = b"\ncaller input";
        assert_eq!(read(&mut input).unwrap(), Some(LaunchSetup::default()));
        assert_eq!(input, b"caller input");
    }

    #[test]
    fn a_setup_round_trips_and_leaves_the_input_after_it() {
        let setup = LaunchSetup {
            argv: vec!["python3".into(), "main.py".into()],
            env: vec!["A=1".into(), "PATH=/bin".into()],
            workdir: Some("/task".into()),
            files: vec![TaskFile {
                path: "main.py".into(),
                contents: b"print(42)\n".to_vec(),
            }],
            task_limit: Some(64),
            raw_ports: vec![5432, 18080],
        };
        let mut bytes = encode(&setup);
        bytes.extend_from_slice(b"stdin!");
        let mut input = bytes.as_slice();
        assert_eq!(read(&mut input).unwrap(), Some(setup));
        assert_eq!(input, b"stdin!");
    }

    #[test]
    fn an_input_that_ends_early_is_no_go() {
        for cut in [&b""[..], b"12", b"12\n{\"fi"] {
            let mut input = cut;
            assert_eq!(read(&mut input).unwrap(), None, "{cut:?}");
        }
        let mut garbage: &[u8] = b"x\n";
        assert!(read(&mut garbage).is_err());
    }

    /// A setup of another version, or of none, is refused for its version, whatever its
    /// fields say, and the input after it is left alone.
    #[test]
    fn a_setup_of_another_version_is_refused_by_its_version() {
        let other = LAUNCH_VERSION + 1;
        for (json, found) in [
            (r#"{"argv":["true"]}"#.to_owned(), None),
            (
                format!(r#"{{"v":{other},"argv":["true"],"unheard_of":1}}"#),
                Some(u64::from(other)),
            ),
        ] {
            let bytes = format!("{}\n{json}", json.len());
            let error = read(&mut bytes.as_bytes()).unwrap_err();
            assert!(
                matches!(error, SignalError::Version { found: f, expected } if f == found && expected == LAUNCH_VERSION),
                "{error:?}"
            );
            let message = error.to_string();
            assert!(
                message.contains(&format!("this launcher reads version {LAUNCH_VERSION}")),
                "{message}"
            );
            assert!(!message.contains("unknown field"), "{message}");
        }
        let encoded = encode(&LaunchSetup {
            argv: vec!["true".into()],
            ..LaunchSetup::default()
        });
        let text = String::from_utf8(encoded).unwrap();
        assert!(
            text.ends_with(&format!(r#"{{"v":{LAUNCH_VERSION},"argv":["true"]}}"#)),
            "{text}"
        );
    }
}
