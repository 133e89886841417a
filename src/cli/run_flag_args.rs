//! The run flags of `run`, `mcp` and `serve` as clap arguments, built from the library's one
//! list of them (`egress_sandbox::run_flags::table`): each front end takes the flags its
//! help text is given for, in the list's order.

use std::marker::PhantomData;
use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use egress_sandbox::run_flags::given::FlagValues;
use egress_sandbox::run_flags::table::{RUN_FLAGS, RunFlag};
use egress_sandbox::run_flags::value::{FlagValue, ValueKind};

/// A command that takes run flags, and what its help says of each (`None`: it has no such
/// flag).
pub trait FrontEnd {
    fn help(flag: &RunFlag) -> Option<&'static str>;
}

/// `egress-sandbox run`: every flag.
#[derive(Clone, Debug)]
pub struct Run;

/// `egress-sandbox mcp`: the flags that bound every call.
#[derive(Clone, Debug)]
pub struct Mcp;

/// `egress-sandbox serve`: the flags that shape the pool and default the requests.
#[derive(Clone, Debug)]
pub struct Serve;

impl FrontEnd for Run {
    fn help(flag: &RunFlag) -> Option<&'static str> {
        Some(flag.help.run)
    }
}

impl FrontEnd for Mcp {
    fn help(flag: &RunFlag) -> Option<&'static str> {
        flag.help.mcp
    }
}

impl FrontEnd for Serve {
    fn help(flag: &RunFlag) -> Option<&'static str> {
        flag.help.serve
    }
}

/// The run flags `F` was given.
#[derive(Clone, Debug)]
pub struct RunFlags<F> {
    pub values: FlagValues,
    front_end: PhantomData<F>,
}

impl<F> RunFlags<F> {
    pub fn new(values: FlagValues) -> RunFlags<F> {
        RunFlags {
            values,
            front_end: PhantomData,
        }
    }
}

fn argument(flag: &'static RunFlag, help: &'static str) -> Arg {
    let arg = Arg::new(flag.long)
        .long(flag.long)
        .value_name(flag.value_name)
        .help(help)
        .action(if flag.repeatable {
            ArgAction::Append
        } else {
            ArgAction::Set
        });
    let arg = match flag.short {
        Some(short) => arg.short(short),
        None => arg,
    };
    match flag.value {
        ValueKind::Text => arg.value_parser(clap::value_parser!(String)),
        ValueKind::Path => arg.value_parser(clap::value_parser!(PathBuf)),
        ValueKind::Count => arg.value_parser(clap::value_parser!(u64)),
        ValueKind::Decimal => arg.value_parser(clap::value_parser!(f64)),
    }
}

/// The values of `flag` in `matches`, in the order given.
fn values_of(matches: &ArgMatches, flag: &RunFlag) -> Vec<FlagValue> {
    fn all<T: Clone + Send + Sync + 'static>(
        matches: &ArgMatches,
        flag: &RunFlag,
        value: fn(T) -> FlagValue,
    ) -> Vec<FlagValue> {
        matches
            .get_many::<T>(flag.long)
            .into_iter()
            .flatten()
            .cloned()
            .map(value)
            .collect()
    }
    match flag.value {
        ValueKind::Text => all(matches, flag, FlagValue::Text),
        ValueKind::Path => all(matches, flag, FlagValue::Path),
        ValueKind::Count => all(matches, flag, FlagValue::Count),
        ValueKind::Decimal => all(matches, flag, FlagValue::Decimal),
    }
}

impl<F: FrontEnd> FromArgMatches for RunFlags<F> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = RunFlags::new(FlagValues::default());
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for flag in RUN_FLAGS.into_iter().filter(|flag| F::help(flag).is_some()) {
            let given = values_of(matches, flag);
            if !given.is_empty() {
                self.values.remove(flag);
                for value in given {
                    self.values.push(flag, value);
                }
            }
        }
        Ok(())
    }
}

impl<F: FrontEnd> Args for RunFlags<F> {
    fn augment_args(command: Command) -> Command {
        RUN_FLAGS
            .into_iter()
            .fold(command, |command, flag| match F::help(flag) {
                Some(help) => command.arg(argument(flag, help)),
                None => command,
            })
    }

    fn augment_args_for_update(command: Command) -> Command {
        Self::augment_args(command)
    }
}
