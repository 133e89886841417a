//! `mcp`'s bounds: `run`'s settings ([`RunOptions`]) as flags, with the help of the few
//! whose meaning differs for a server whose every call they bound.

use clap::{ArgMatches, Args, Command, FromArgMatches};
use egress_sandbox::RunOptions;

/// The settings that bound every call of `egress-sandbox mcp`.
#[derive(Clone, Debug)]
pub struct McpBounds {
    pub options: RunOptions,
}

/// (argument, help) for the settings whose help `mcp` says differently.
const MCP_HELP: [(&str, &str); 4] = [
    (
        "timeout",
        "Time limit of every run, and the most a call may ask for [default: 30s]",
    ),
    (
        "output_limit",
        "Bytes of stdout+stderr a call returns: the head and tail of each stream, with a marker of the bytes cut [default: 32KiB]",
    ),
    (
        "workdir",
        "Working directory inside the sandbox of every call [default: /task when the call writes files]",
    ),
    (
        "audit_limit",
        "Audit records written per run [default: 100000]",
    ),
];

impl FromArgMatches for McpBounds {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        RunOptions::from_arg_matches(matches).map(|options| McpBounds { options })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.options.update_from_arg_matches(matches)
    }
}

impl Args for McpBounds {
    fn augment_args(command: Command) -> Command {
        MCP_HELP
            .into_iter()
            .fold(RunOptions::augment_args(command), |command, (id, help)| {
                command.mut_arg(id, |arg| arg.help(help))
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
    use egress_sandbox::options::{PolicyText, TimeLimit};

    /// clap's own consistency checks of the whole command line, run settings included.
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    fn longs(name: &str) -> Vec<String> {
        let command = Cli::command();
        let sub = command.find_subcommand(name).unwrap();
        sub.get_arguments()
            .filter_map(|arg| arg.get_long())
            .map(str::to_owned)
            .collect()
    }

    /// `run` and `mcp` take the same settings (`RunOptions`), `mcp` with its own help for
    /// those whose meaning differs and without what a call's result stands for; `serve`
    /// only the pool's.
    #[test]
    fn run_and_mcp_take_the_same_settings() {
        let settings: Vec<String> = RunOptions::augment_args(Command::new("x"))
            .get_arguments()
            .filter_map(|arg| arg.get_long())
            .map(str::to_owned)
            .collect();
        let run = longs("run");
        let mcp = longs("mcp");
        for long in &settings {
            assert!(run.contains(long) && mcp.contains(long), "--{long}");
        }
        for own in ["audit-log", "report"] {
            assert!(run.contains(&own.to_owned()) && !mcp.contains(&own.to_owned()));
        }
        let serve = longs("serve");
        assert!(
            serve.contains(&"egress-network".to_owned()) && serve.contains(&"runtime".to_owned())
        );
        assert!(!serve.contains(&"allow".to_owned()));
        let command = Cli::command();
        let mcp = command.find_subcommand("mcp").unwrap();
        let timeout = mcp
            .get_arguments()
            .find(|arg| arg.get_id() == "timeout")
            .unwrap();
        assert!(
            timeout
                .get_help()
                .unwrap()
                .to_string()
                .contains("the most a call may ask for"),
            "mcp's own help"
        );
    }

    /// Flags land in the typed settings, repeated ones in order.
    #[test]
    fn flags_parse_into_the_run_options() {
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
            "--timeout",
            "5s",
            "--report",
            "r.json",
            "--",
            "true",
        ]);
        let Subcommand::Run(args) = cli.command else {
            panic!("not run");
        };
        let options = &args.options;
        assert_eq!(options.allow, ["a.test", "b.test"]);
        assert_eq!(options.policies, [PolicyText::File("p.yaml".into())]);
        assert_eq!((options.cpus, options.pids), (Some(1.5), Some(9)));
        assert_eq!(options.timeout, Some(TimeLimit::Text("5s".into())));
        assert_eq!(args.report, Some("r.json".into()));
        assert_eq!(args.command, ["true"]);
    }
}
