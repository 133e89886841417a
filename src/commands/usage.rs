//! The command line parsed, with one hint clap cannot give: `run true` (the command
//! without `--` before it) says where the command goes.

use clap::Parser;
use clap::error::{ContextKind, ContextValue, ErrorKind};

use crate::cli::Cli;

/// Parses `std::env::args_os()`; on an error prints clap's message (with the hint when it
/// applies) and exits as clap does (2 for a usage error, 0 for `--help`).
pub fn parse_command_line() -> Cli {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(mut error) => {
            if let Some(hint) = command_after_dashes_hint(&error, &args) {
                error.insert(
                    ContextKind::Suggested,
                    ContextValue::StyledStrs(vec![hint.into()]),
                );
            }
            error.exit()
        }
    }
}

/// `put the command after --: egress-sandbox run [FLAGS] -- COMMAND…` when `run` met an
/// argument it does not know and no `--` came before it: that argument is where the
/// command begins (`run` takes every word after `--` as the command).
fn command_after_dashes_hint(error: &clap::Error, args: &[std::ffi::OsString]) -> Option<String> {
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(unexpected)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let words: Vec<String> = args
        .iter()
        .skip(1)
        .map(|word| word.to_string_lossy().into_owned())
        .collect();
    let run = words.iter().position(|word| word == "run")?;
    if words[..run].iter().any(|word| !word.starts_with('-')) || words.iter().any(|w| w == "--") {
        return None;
    }
    let start = run
        + 1
        + words[run + 1..]
            .iter()
            .position(|word| word == unexpected)?;
    if unexpected.starts_with('-') {
        return None;
    }
    let flags = words[run + 1..start].iter().map(|word| quoted(word));
    let command = words[start..].iter().map(|word| quoted(word));
    let mut line = vec!["egress-sandbox".to_owned(), "run".to_owned()];
    line.extend(flags);
    line.push("--".to_owned());
    line.extend(command);
    Some(format!(
        "put the command after --: {}",
        egress_core::text::visible(&line.join(" "))
    ))
}

/// A word as a shell would need it typed: as is when it is plain, else in single quotes.
fn quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}
