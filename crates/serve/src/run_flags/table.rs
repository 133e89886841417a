//! The one list of a run's flags ([`RUN_FLAGS`]): each flag's name, value, help and request
//! field, and what it does to a [`RunSpecBuilder`]. The command line of `run`, `mcp` and
//! `serve` is built from it (`src/cli.rs` in the binary), `serve`'s request check takes
//! the fields that carry a flag's value as is from it, and so does `run --server` when it
//! turns flags into a request. A flag added here is a flag of all three.

use super::value::{FlagValue, ValueKind};
use super::{duration, env, mount, resolve, size};
use crate::secret_flags::read_secret_flag;
use egress_sandbox::{RunSpecBuilder, SpecError};

/// One flag of a run.
pub struct RunFlag {
    /// `--LONG` on the command line.
    pub long: &'static str,
    /// `-SHORT`, if it has one.
    pub short: Option<char>,
    /// The value's placeholder in help (`DURATION`).
    pub value_name: &'static str,
    /// What the command line takes as the value.
    pub value: ValueKind,
    /// Given any number of times (each value kept, in order), or at most once.
    pub repeatable: bool,
    /// What each front end's help says of it; a front end without text has no such flag.
    pub help: Help,
    /// How a `serve` request carries it.
    pub request: RequestField,
    /// What its values do to the run; `None`: the front end acts on it itself (`--report`,
    /// `--server`).
    pub apply: Option<Apply>,
}

/// A flag's effect on the run: one value at a time, in the order given.
pub type Apply = fn(RunSpecBuilder, &FlagValue) -> Result<RunSpecBuilder, SpecError>;

/// What `run --help`, `mcp --help` and `serve --help` say of a flag: one sentence or more,
/// the last without its full stop (as clap shows a doc comment).
pub struct Help {
    /// `run`'s help; every flag has one.
    pub run: &'static str,
    /// `mcp`'s flags bound every call; `None`: a call cannot be given it.
    pub mcp: Option<&'static str>,
    /// `serve`'s flags are the pool's and the default of requests that name none.
    pub serve: Option<&'static str>,
}

/// How a `serve` request (`POST /v1/runs`) carries a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestField {
    /// Field NAME holds the flag's value as the flag takes it (a string or number; a list
    /// of them for a repeatable flag): checked through the flag's own [`RunFlag::apply`].
    Same(&'static str),
    /// Field NAME holds it in a form of its own (policy text, not a file; an `env` object
    /// …), handled by code of its own in the request check and in `run --server`.
    Own(&'static str),
    /// Not in a request: the front end that took the flag acts on it.
    None,
}

impl RunFlag {
    /// The request field, if a request carries the flag.
    pub fn field(&self) -> Option<&'static str> {
        match self.request {
            RequestField::Same(field) | RequestField::Own(field) => Some(field),
            RequestField::None => None,
        }
    }
}

/// The request field that names `flag` (`--output-limit` → `output_limit`), for messages
/// in the request's terms; a name no flag has is returned without its dashes.
pub fn field_of_flag(flag: &str) -> &str {
    let long = flag.trim_start_matches('-');
    RUN_FLAGS
        .iter()
        .find(|run_flag| run_flag.long == long)
        .and_then(|run_flag| run_flag.field())
        .unwrap_or(long)
}

/// Help of a flag only `run` has.
const fn run_only(run: &'static str) -> Help {
    Help {
        run,
        mcp: None,
        serve: None,
    }
}

/// `--policy FILE`/`-p`: a policy file; repeatable, the policies merge. A request carries
/// the text in `policies`.
pub const POLICY: RunFlag = RunFlag {
    long: "policy",
    short: Some('p'),
    value_name: "FILE",
    value: ValueKind::Path,
    repeatable: true,
    help: Help {
        run: "Policy file (YAML); repeatable, policies merge",
        mcp: Some("Policy file (YAML); repeatable, policies merge"),
        serve: None,
    },
    request: RequestField::Own("policies"),
    apply: Some(|builder, value| Ok(builder.policy_file(value.path()))),
};

/// `--allow HOST[:PORT]`: one more allowed destination; repeatable.
pub const ALLOW: RunFlag = RunFlag {
    long: "allow",
    short: None,
    value_name: "HOST[:PORT]",
    value: ValueKind::Text,
    repeatable: true,
    help: Help {
        run: "Allow HOST[:PORT] (port default 443); repeatable",
        mcp: Some("Allow HOST[:PORT] (port default 443); repeatable"),
        serve: None,
    },
    request: RequestField::Same("allow"),
    apply: Some(|builder, value| Ok(builder.allow(value.text()))),
};

/// `--image`: the sandbox image instead of the built-in base image.
pub const IMAGE: RunFlag = RunFlag {
    long: "image",
    short: None,
    value_name: "IMAGE",
    value: ValueKind::Text,
    repeatable: false,
    help: Help {
        run: "Sandbox image; default: the built-in base image (Debian, python3, curl)",
        mcp: Some("Sandbox image; default: the built-in base image (Debian, python3, node, curl)"),
        serve: None,
    },
    request: RequestField::Same("image"),
    apply: Some(|builder, value| Ok(builder.image(value.text()))),
};

/// `--timeout`: the run's time limit. A request's `timeout` also takes a number of seconds.
pub const TIMEOUT: RunFlag = RunFlag {
    long: "timeout",
    short: None,
    value_name: "DURATION",
    value: ValueKind::Text,
    repeatable: false,
    help: Help {
        run: "Time limit, e.g. 500ms, 10s, 2m [default: 30s]",
        mcp: Some("Time limit of every run, and the most a call may ask for [default: 30s]"),
        serve: None,
    },
    // A number of seconds too.
    request: RequestField::Own("timeout"),
    apply: Some(|builder, value| Ok(builder.timeout(duration("--timeout", &value.text())?))),
};

/// `--memory`: the sandbox container's memory limit.
pub const MEMORY: RunFlag = RunFlag {
    long: "memory",
    short: None,
    value_name: "SIZE",
    value: ValueKind::Text,
    repeatable: false,
    help: Help {
        run: "Memory limit, e.g. 256MiB [default: 256MiB]",
        mcp: Some("Memory limit, e.g. 256MiB [default: 256MiB]"),
        serve: None,
    },
    request: RequestField::Same("memory"),
    apply: Some(|builder, value| Ok(builder.memory(size("--memory", &value.text())?))),
};

/// `--cpus`: the sandbox container's CPU limit.
pub const CPUS: RunFlag = RunFlag {
    long: "cpus",
    short: None,
    value_name: "N",
    value: ValueKind::Decimal,
    repeatable: false,
    help: Help {
        run: "CPUs [default: 1]",
        mcp: Some("CPUs [default: 1]"),
        serve: None,
    },
    request: RequestField::Same("cpus"),
    apply: Some(|builder, value| match value {
        FlagValue::Decimal(cpus) => Ok(builder.cpus(*cpus)),
        other => Err(not_a_number("--cpus", other)),
    }),
};

/// `--pids`: the sandbox container's process limit.
pub const PIDS: RunFlag = RunFlag {
    long: "pids",
    short: None,
    value_name: "N",
    value: ValueKind::Count,
    repeatable: false,
    help: Help {
        run: "Process limit [default: 128]",
        mcp: Some("Process limit [default: 128]"),
        serve: None,
    },
    request: RequestField::Same("pids"),
    apply: Some(|builder, value| match value {
        FlagValue::Count(pids) => Ok(builder.pids(*pids)),
        other => Err(not_a_number("--pids", other)),
    }),
};

/// `--tmp`: the size of the sandbox's writable `/tmp`.
pub const TMP: RunFlag = RunFlag {
    long: "tmp",
    short: None,
    value_name: "SIZE",
    value: ValueKind::Text,
    repeatable: false,
    help: Help {
        run: "Size of the writable /tmp [default: 64MiB]",
        mcp: Some("Size of the writable /tmp [default: 64MiB]"),
        serve: None,
    },
    request: RequestField::Same("tmp"),
    apply: Some(|builder, value| Ok(builder.tmp(size("--tmp", &value.text())?))),
};

/// `--output-limit`: the bytes of stdout and stderr relayed; the rest is dropped.
pub const OUTPUT_LIMIT: RunFlag = RunFlag {
    long: "output-limit",
    short: None,
    value_name: "SIZE",
    value: ValueKind::Text,
    repeatable: false,
    help: Help {
        run: "Bytes of stdout+stderr relayed; the rest is dropped with a marker [default: 1MiB]",
        mcp: Some(
            "Bytes of stdout+stderr a call returns: the head and tail of each stream, with a marker of the bytes cut [default: 32KiB]",
        ),
        serve: None,
    },
    request: RequestField::Same("output_limit"),
    apply: Some(|builder, value| Ok(builder.output_limit(size("--output-limit", &value.text())?))),
};

/// `--mount SRC:DST[:rw]`: a host path in the sandbox, read-only unless `:rw`; repeatable.
pub const MOUNT: RunFlag = RunFlag {
    long: "mount",
    short: None,
    value_name: "SRC:DST[:rw]",
    value: ValueKind::Text,
    repeatable: true,
    help: Help {
        run: "Mount SRC at DST, read-only unless :rw; repeatable",
        mcp: Some("Mount SRC at DST, read-only unless :rw; repeatable"),
        serve: None,
    },
    // `run --server` makes a relative source absolute: the daemon's directory is not ours.
    request: RequestField::Own("mounts"),
    apply: Some(|builder, value| {
        let (source, target, writable) = mount(&value.text())?;
        Ok(builder.mount(source, target, writable))
    }),
};

/// `--env KEY=VALUE`: an environment variable of the sandbox; repeatable. A request carries
/// an object or a list of pairs in `env`.
pub const ENV: RunFlag = RunFlag {
    long: "env",
    short: None,
    value_name: "KEY=VALUE",
    value: ValueKind::Text,
    repeatable: true,
    help: Help {
        run: "Set KEY=VALUE in the sandbox; nothing else from the host environment enters",
        mcp: Some("Set KEY=VALUE in the sandbox; repeatable"),
        serve: None,
    },
    // An object or a list of pairs.
    request: RequestField::Own("env"),
    apply: Some(|builder, value| {
        let (key, value) = env(&value.text())?;
        Ok(builder.env(key, value))
    }),
};

/// `--workdir`: the command's working directory inside the sandbox; a flag of `run` only.
pub const WORKDIR: RunFlag = RunFlag {
    long: "workdir",
    short: None,
    value_name: "DIR",
    value: ValueKind::Text,
    repeatable: false,
    help: run_only("Working directory inside the sandbox"),
    request: RequestField::Same("workdir"),
    apply: Some(|builder, value| Ok(builder.workdir(value.text()))),
};

/// `--audit-log FILE`: the run's audit records appended to FILE; not in a request.
pub const AUDIT_LOG: RunFlag = RunFlag {
    long: "audit-log",
    short: None,
    value_name: "FILE",
    value: ValueKind::Path,
    repeatable: false,
    help: run_only("Append this run's audit records (JSON lines) to FILE"),
    // `run --server` appends the records the daemon streams.
    request: RequestField::None,
    apply: Some(|builder, value| Ok(builder.audit_log(value.path()))),
};

/// `--audit-limit`: the audit records written for a run before the rest are only counted.
pub const AUDIT_LIMIT: RunFlag = RunFlag {
    long: "audit-limit",
    short: None,
    value_name: "N",
    value: ValueKind::Count,
    repeatable: false,
    help: Help {
        run: "Audit records written for the run; past it the proxy only counts refused attempts (the report and summary say how many were dropped), and --on-audit-limit says what new egress gets [default: 100000]",
        mcp: Some("Audit records written per run [default: 100000]"),
        serve: None,
    },
    request: RequestField::Same("audit_limit"),
    apply: Some(|builder, value| match value {
        FlagValue::Count(records) => Ok(builder.audit_limit(*records)),
        other => Err(not_a_number("--audit-limit", other)),
    }),
};

/// `--on-audit-limit reserve|refuse`: what new egress gets past `--audit-limit`.
pub const ON_AUDIT_LIMIT: RunFlag = RunFlag {
    long: "on-audit-limit",
    short: None,
    value_name: "reserve|refuse",
    value: ValueKind::Text,
    repeatable: false,
    help: Help {
        run: "Past --audit-limit: `reserve` keeps writing allowed attempts' records from a reserve of as many again and refuses new egress once it is spent; `refuse` refuses new egress at once. Nothing leaves unrecorded either way [default: reserve]",
        mcp: Some(
            "Past the audit limit: reserve (allowed attempts keep their records) or refuse (new egress refused) [default: reserve]",
        ),
        serve: None,
    },
    request: RequestField::Same("on_audit_limit"),
    apply: Some(|builder, value| {
        let raw = value.text();
        raw.parse()
            .map(|on_limit| builder.on_audit_limit(on_limit))
            .map_err(|error| super::invalid("--on-audit-limit", &raw, error))
    }),
};

/// `--report FILE`: the JSON run report written to FILE by the front end; not in a request.
pub const REPORT: RunFlag = RunFlag {
    long: "report",
    short: None,
    value_name: "FILE",
    value: ValueKind::Path,
    repeatable: false,
    help: run_only("Write a JSON run report to FILE"),
    request: RequestField::None,
    apply: None,
};

/// `--resolve NAME=IP`: the proxy uses IP for NAME instead of DNS; repeatable. A request
/// carries an object NAME → IP in `resolve`.
pub const RESOLVE: RunFlag = RunFlag {
    long: "resolve",
    short: None,
    value_name: "NAME=IP",
    value: ValueKind::Text,
    repeatable: true,
    help: Help {
        run: "The proxy uses IP for NAME instead of DNS; the floor still applies. Repeatable",
        mcp: Some("The proxy uses IP for NAME instead of DNS; the floor still applies. Repeatable"),
        serve: None,
    },
    // An object NAME → IP.
    request: RequestField::Own("resolve"),
    apply: Some(|builder, value| {
        let (name, ip) = resolve(&value.text())?;
        Ok(builder.resolve(name.as_str(), ip))
    }),
};

/// `--egress-network`: the Docker network the proxy reaches the outside through.
pub const EGRESS_NETWORK: RunFlag = RunFlag {
    long: "egress-network",
    short: None,
    value_name: "NAME",
    value: ValueKind::Text,
    repeatable: false,
    help: Help {
        run: "Docker network the proxy uses to reach the outside [default: a bridge the tool manages]",
        mcp: Some(
            "Docker network the proxy uses to reach the outside [default: a bridge the tool manages]",
        ),
        serve: Some(
            "The network the proxies reach the outside through, for the pool's slots and requests that name none [default: egress-sandbox-egress]",
        ),
    },
    request: RequestField::Same("egress_network"),
    apply: Some(|builder, value| Ok(builder.egress_network(value.text()))),
};

/// `--runtime`: the sandbox container's OCI runtime (one the engine has).
pub const RUNTIME: RunFlag = RunFlag {
    long: "runtime",
    short: None,
    value_name: "NAME",
    value: ValueKind::Text,
    repeatable: false,
    help: Help {
        run: "OCI runtime of the sandbox container (one the engine has, e.g. runc, runsc) [default: the engine's default]",
        mcp: Some(
            "OCI runtime of the sandbox container (e.g. runsc) [default: the engine's default]",
        ),
        serve: Some(
            "OCI runtime of the pool's slots and of requests that name none (e.g. runsc) [default: the engine's default]",
        ),
    },
    request: RequestField::Same("runtime"),
    apply: Some(|builder, value| Ok(builder.runtime(value.text()))),
};

/// `--secret`: a secret a policy credential uses, its value read by the front end that took
/// the flag; repeatable. A request carries the values in `secrets`.
pub const SECRET: RunFlag = RunFlag {
    long: "secret",
    short: None,
    value_name: "NAME[=env:VAR|=file:PATH]",
    value: ValueKind::Text,
    repeatable: true,
    help: Help {
        run: "A secret a policy credential uses: NAME (this process's env var NAME), NAME=env:VAR or NAME=file:PATH (one trailing newline dropped); repeatable. Only the proxy gets the value; the sandbox's env var NAME holds a random placeholder",
        mcp: Some(
            "A secret a policy credential uses: NAME, NAME=env:VAR or NAME=file:PATH; repeatable. Only the proxy gets the value",
        ),
        serve: None,
    },
    // The values, read by the front end that took the flags.
    request: RequestField::Own("secrets"),
    apply: Some(|builder, value| {
        let (name, value) = read_secret_flag(&value.text())
            .map_err(|error| SpecError::SecretFlag(error.to_string()))?;
        Ok(builder.secret(name, value))
    }),
};

/// `--upstream-ca FILE`: an extra PEM CA the proxy trusts upstream; repeatable. A request
/// carries the PEM text in `upstream_ca`.
pub const UPSTREAM_CA: RunFlag = RunFlag {
    long: "upstream-ca",
    short: None,
    value_name: "FILE",
    value: ValueKind::Path,
    repeatable: true,
    help: Help {
        run: "Extra PEM CA the proxy trusts for upstream TLS of inspected hosts (besides the Mozilla roots); repeatable",
        mcp: Some("Extra PEM CA the proxy trusts for upstream TLS of inspected hosts; repeatable"),
        serve: None,
    },
    // The PEM text, read by the front end that took the flags.
    request: RequestField::Own("upstream_ca"),
    apply: Some(|builder, value| Ok(builder.upstream_ca(value.path()))),
};

/// `--server SOCKET`: runs through the `serve` daemon on SOCKET; not in a request.
pub const SERVER: RunFlag = RunFlag {
    long: "server",
    short: None,
    value_name: "SOCKET",
    value: ValueKind::Path,
    repeatable: false,
    help: Help {
        run: "Run through the `egress-sandbox serve` daemon listening on SOCKET (same output, report, audit log and exit codes; stdin is read to its end first). Default: $EGRESS_SANDBOX_SERVER when set and not empty",
        mcp: Some(
            "Run through the `egress-sandbox serve` daemon on SOCKET instead of a pool of this server's own",
        ),
        serve: None,
    },
    request: RequestField::None,
    apply: None,
};

/// Every run flag, in the order help lists them.
pub const RUN_FLAGS: [&RunFlag; 22] = [
    &POLICY,
    &ALLOW,
    &IMAGE,
    &TIMEOUT,
    &MEMORY,
    &CPUS,
    &PIDS,
    &TMP,
    &OUTPUT_LIMIT,
    &MOUNT,
    &ENV,
    &WORKDIR,
    &AUDIT_LOG,
    &AUDIT_LIMIT,
    &ON_AUDIT_LIMIT,
    &REPORT,
    &RESOLVE,
    &EGRESS_NETWORK,
    &RUNTIME,
    &SECRET,
    &UPSTREAM_CA,
    &SERVER,
];

/// A value of the wrong kind for `flag` (only a caller that built
/// [`FlagValues`](super::given::FlagValues) by hand can give one).
fn not_a_number(flag: &'static str, value: &FlagValue) -> SpecError {
    SpecError::Invalid {
        flag,
        value: value.text(),
        reason: "expected a number".into(),
    }
}
