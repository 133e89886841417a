//! The run flags of `run`, `mcp` and `serve` as clap arguments, built from the library's one
//! list of them (`egress_serve::run_flags::table`): each front end takes the flags its
//! help text is given for, in the list's order.

use std::marker::PhantomData;
use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use egress_serve::run_flags::given::FlagValues;
use egress_serve::run_flags::table::{RUN_FLAGS, RunFlag};
use egress_serve::run_flags::value::{FlagValue, ValueKind};

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

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;
    use crate::cli::{Cli, Command as Subcommand};
    use egress_serve::run_flags::table;

    /// clap's own consistency checks of the whole command line, run flags included.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Each front end takes the flags its help is given for, in the table's order, and
    /// repeated flags keep every value in order.
    #[test]
    fn each_front_end_takes_its_flags_from_the_table() {
        let longs = |name: &str| -> Vec<String> {
            let command = Cli::command();
            let sub = command.find_subcommand(name).unwrap();
            sub.get_arguments()
                .filter_map(|arg| arg.get_long())
                .filter(|long| RUN_FLAGS.iter().any(|flag| flag.long == *long))
                .map(str::to_owned)
                .collect()
        };
        let expected = |help: fn(&RunFlag) -> Option<&'static str>| -> Vec<String> {
            RUN_FLAGS
                .iter()
                .filter(|flag| help(flag).is_some())
                .map(|flag| flag.long.to_owned())
                .collect()
        };
        assert_eq!(longs("run"), expected(Run::help));
        assert_eq!(longs("mcp"), expected(Mcp::help));
        assert_eq!(longs("serve"), ["egress-network", "runtime"]);
        assert!(!longs("mcp").contains(&"report".to_owned()));

        let cli = Cli::parse_from([
            "egress-sandbox",
            "run",
            "--allow",
            "a.test",
            "-p",
            "p.yaml",
            "--allow",
            "b.test",
            "--cpus",
            "1.5",
            "--pids",
            "9",
            "--",
            "true",
        ]);
        let Subcommand::Run(args) = cli.command else {
            panic!("not run");
        };
        let flags = &args.flags.values;
        assert_eq!(
            flags.all(&table::ALLOW),
            [
                FlagValue::Text("a.test".into()),
                FlagValue::Text("b.test".into())
            ]
        );
        assert_eq!(flags.path(&table::POLICY), Some("p.yaml".into()));
        assert_eq!(flags.get(&table::CPUS), Some(&FlagValue::Decimal(1.5)));
        assert_eq!(flags.get(&table::PIDS), Some(&FlagValue::Count(9)));
        assert_eq!(args.command, ["true"]);
    }
}
