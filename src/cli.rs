//! The command line, as the book's command reference (`docs/src/reference/cli.md`) describes it.
//! Values that need more than a string-to-type conversion (policies, sizes, durations) are parsed
//! and checked by the commands before anything is started.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use egress_sandbox::RunOptions;
pub use mcp_bounds::McpBounds;

mod mcp_bounds;

#[derive(Debug, Parser)]
#[command(
    name = "egress-sandbox",
    version,
    about = "Run untrusted code in a throwaway Docker container whose only way out is an allowlisting egress proxy"
)]
pub struct Cli {
    /// More diagnostics on stderr (-v info, -vv debug, -vvv trace). EGRESS_SANDBOX_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run COMMAND in a sandbox whose only way out is the proxy.
    Run(RunArgs),
    /// Check policy files, or ask what a policy does with a target.
    Policy(PolicyArgs),
    /// Run the proxy alone (also what runs inside the proxy container).
    Proxy(Box<ProxyArgs>),
    /// Read audit logs.
    Audit(AuditArgs),
    /// Remove networks and containers of runs that are gone.
    Gc(GcArgs),
    /// Serve runs over a local API (HTTP + JSON on a Unix socket).
    Serve(ServeArgs),
    /// Check that runs can work here: engine, storage, runtimes (and the wiring a run
    /// gets under each), images, egress network, temp directory, cgroup controllers.
    Doctor(DoctorArgs),
    /// Serve runs to an agent as an MCP server on stdio (tools run_code and run_command);
    /// the flags bound every run, a call cannot widen them.
    Mcp(McpArgs),
    /// Runs inside the sandbox as its entrypoint: waits until `run` says the proxy is
    /// ready (a signal on stdin), then executes COMMAND (followed by the signal's
    /// command, with its environment and working directory) in its place.
    #[command(name = "sandbox-launcher", hide = true)]
    SandboxLauncher(SandboxLauncherArgs),
    /// Started by `run` and `serve`: removes the objects of OWNER once its stdin ends,
    /// unless OWNER said first that it removed them itself (it was killed otherwise).
    #[command(hide = true)]
    Watchdog(WatchdogArgs),
    /// The helper handshake: one line naming this binary's version and the formats it reads
    /// (`egress-sandbox-helper VERSION handoff N launch M`), as the helper binary answers it.
    #[command(hide = true)]
    Version,
}

#[derive(Debug, Args)]
pub struct WatchdogArgs {
    /// The owner label's value (`pid:start time:boot id:pid namespace`) of the process
    /// watched over.
    #[arg(long, value_name = "STAMP")]
    pub owner: String,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The API socket [default: /run/egress-sandbox/api.sock as root, else
    /// $XDG_RUNTIME_DIR/egress-sandbox.sock, else $TMPDIR/egress-sandbox-<uid>/api.sock]. Its
    /// directory must be yours and writable by no one else (a missing one is made 0700).
    /// Access to the socket is access to the Docker host.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Make the socket 0660 for GROUP (name or number) instead of 0600.
    #[arg(long = "socket-group", value_name = "GROUP")]
    pub socket_group: Option<String>,
    /// Also serve GET /metrics (Prometheus text) on this TCP address.
    #[arg(long = "metrics-listen", value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Warm slots kept ready: a proxy waiting for its policy and a sandbox (no network)
    /// waiting for its command (0: every run is set up when it comes).
    #[arg(long, value_name = "N", default_value_t = egress_serve::DEFAULT_POOL)]
    pub pool: usize,
    /// The network the proxies reach the outside through, for the pool's slots and requests
    /// that name none [default: egress-sandbox-egress]
    #[arg(long = "egress-network", value_name = "NAME")]
    pub egress_network: Option<String>,
    /// OCI runtime of the pool's slots and of requests that name none (e.g. runsc)
    /// [default: the engine's default]
    #[arg(long, value_name = "NAME")]
    pub runtime: Option<String>,
    /// Runs live at once (from the request until its answer; the removal of its objects
    /// after is not counted); a request beyond gets 503 with Retry-After. At least 1.
    #[arg(long = "max-runs", value_name = "N", default_value_t = egress_serve::DEFAULT_MAX_RUNS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_runs: usize,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// The bounds of every call: `run`'s settings (not `--audit-log` and `--report`, which a
    /// call's result stands for).
    #[command(flatten)]
    pub bounds: McpBounds,
    /// Run through the `egress-sandbox serve` daemon on SOCKET instead of a pool of this
    /// server's own
    #[arg(long, value_name = "SOCKET")]
    pub server: Option<PathBuf>,
    /// Warm slots of this server's own pool (without --server), all ready before the host is
    /// answered; 0 for a host that opens a session per call (each call one cold run).
    #[arg(long, value_name = "N", default_value_t = egress_serve::DEFAULT_POOL)]
    pub pool: usize,
    /// Calls running at once; more wait for their turn. At least 1.
    #[arg(long = "max-runs", value_name = "N", default_value_t = 8,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_runs: usize,
}

impl McpArgs {
    /// The bounds as `run`'s arguments, for a command the call gives (checked by `run`'s
    /// code).
    pub fn run_args(&self) -> RunArgs {
        RunArgs {
            options: self.bounds.options.clone(),
            audit_log: None,
            report: None,
            server: None,
            command: vec!["true".into()],
        }
    }
}

#[derive(Debug, Args)]
pub struct SandboxLauncherArgs {
    /// Bind the proxy's doors on the sandbox's loopback and pass them to the proxy's Unix
    /// socket at PATH before the command runs (a sandbox with no network).
    #[arg(long = "pass-listeners", value_name = "PATH")]
    pub pass_listeners: Option<PathBuf>,
    /// The command and its arguments, or what goes before the signal's command (the
    /// image's entrypoint; may be empty).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// The run's settings: what a `serve` request carries too.
    #[command(flatten)]
    pub options: RunOptions,
    /// Append this run's audit records (JSON lines) to FILE
    #[arg(long = "audit-log", value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Write a JSON run report to FILE
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Run through the `egress-sandbox serve` daemon listening on SOCKET (same output,
    /// report, audit log and exit codes; stdin is read to its end first). Default:
    /// $EGRESS_SANDBOX_SERVER when set and not empty
    #[arg(long, value_name = "SOCKET")]
    pub server: Option<PathBuf>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate policy files: exit 0 when valid (warnings allowed), 1 otherwise.
    Check {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Also an error: any allow rule that UPPER.yaml (an organisation's ceiling) would
        /// not allow, counting UPPER's deny rules.
        #[arg(long, value_name = "UPPER.yaml")]
        within: Option<PathBuf>,
    },
    /// Draft a commented policy from audit logs (report-mode runs, refusals), for review.
    Suggest {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// `name:` of the draft.
        #[arg(long, value_name = "NAME", default_value = "suggested")]
        name: String,
        /// Suggest `*.domain` once this many sibling names under one registrable domain were
        /// seen (never over a public suffix or shared hosting); 0 = never.
        #[arg(long = "wildcard-after", value_name = "N", default_value_t = 5)]
        wildcard_after: usize,
    },
    /// Print what the policies decide for [METHOD] TARGET (host[:port] or URL): exit 0
    /// allowed, 1 blocked or would_block, 2 invalid input (a flag, target or policy that
    /// cannot be used; nothing is decided).
    Test {
        /// Policy file (YAML); repeatable, policies merge as in a run.
        #[arg(short, long = "policy", value_name = "FILE")]
        policies: Vec<PathBuf>,
        /// Allow HOST[:PORT] (port default 443), as `run --allow`; repeatable.
        #[arg(long = "allow", value_name = "HOST[:PORT]")]
        allow: Vec<String>,
        /// `[METHOD] TARGET`: with a METHOD (e.g. `POST https://host/path`), the request is
        /// judged too (method and path rules, inspection, credential).
        #[arg(value_name = "[METHOD] TARGET", num_args = 1..=2, required = true)]
        words: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Address of the explicit proxy listener (CONNECT and absolute-form HTTP).
    #[arg(long, value_name = "ADDR", required_unless_present = "listeners_from")]
    pub listen: Option<String>,
    /// Bind no listener: take every door from the sandbox, passed once to a Unix socket made
    /// at PATH (how a local run's proxy serves a sandbox that has no network).
    #[arg(long = "listeners-from", value_name = "PATH", hide = true,
          conflicts_with_all = ["listen", "dns_listen", "transparent_listen", "raw_listen"], requires = "dns_answer")]
    pub listeners_from: Option<PathBuf>,
    /// Policy file; repeatable.
    #[arg(short, long = "policy", value_name = "FILE")]
    pub policies: Vec<PathBuf>,
    /// Policy given inline as YAML text (how the run hands policies to its proxy container).
    #[arg(long = "policy-yaml", value_name = "YAML", hide = true)]
    pub policy_yaml: Vec<String>,
    /// Allow HOST[:PORT]; repeatable.
    #[arg(long = "allow", value_name = "HOST[:PORT]")]
    pub allow: Vec<String>,
    /// Where audit records go: a file (appended) or - for stdout.
    #[arg(long = "audit-log", value_name = "FILE|-", default_value = "-")]
    pub audit_log: String,
    /// Pin NAME to IP instead of resolving it; the floor still applies. Repeatable.
    #[arg(long = "resolve", value_name = "NAME=IP")]
    pub resolve: Vec<String>,
    /// Address of the DNS responder (UDP and TCP).
    #[arg(long = "dns-listen", value_name = "ADDR")]
    pub dns_listen: Option<String>,
    /// Address the DNS responder gives for allowed names [default: the --dns-listen address].
    #[arg(long = "dns-answer", value_name = "IP")]
    pub dns_answer: Option<String>,
    /// Transparent listener (TLS routed by SNI, HTTP by Host); repeatable, e.g. 10.0.0.2:443.
    #[arg(long = "transparent-listen", value_name = "ADDR")]
    pub transparent_listen: Vec<String>,
    /// Raw door (any TCP protocol; the target is the allowed name the DNS responder gave the
    /// address reached, the port the listener's); repeatable, e.g. 127.100.0.1:5432. With
    /// one, the responder answers each allowed name with an address of its own in
    /// 127.100.0.0/16.
    #[arg(long = "raw-listen", value_name = "ADDR")]
    pub raw_listen: Vec<String>,
    /// Add CIDR (or one IP) to the private-address floor: allowed names leading there are
    /// refused as private_address unless a cidr rule covers the address; repeatable. For the
    /// engine host's own addresses and the egress gateway.
    #[arg(long = "floor-extra", value_name = "CIDR")]
    pub floor_extra: Vec<String>,
    /// Run id written into every audit record.
    #[arg(long = "run-id", value_name = "ID")]
    pub run_id: Option<String>,
    /// Audit records written at most before refusals are only counted; past it one `limit`
    /// record (the `end` record's `dropped` counts what was not written).
    #[arg(long = "audit-limit", value_name = "N", default_value_t = egress_core::audit::DEFAULT_AUDIT_LIMIT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub audit_limit: u64,
    /// Past --audit-limit: `reserve` writes the records of allowed attempts from a reserve of
    /// as many again and refuses new egress once that is spent; `refuse` refuses new egress
    /// at once. Nothing leaves without its record either way.
    #[arg(long = "on-audit-limit", value_name = "reserve|refuse", default_value_t = egress_core::audit::OnAuditLimit::Reserve,
          value_parser = clap::builder::ValueParser::new(|raw: &str| raw.parse::<egress_core::audit::OnAuditLimit>()))]
    pub on_audit_limit: egress_core::audit::OnAuditLimit,
    /// DNS queries per second per client, every loopback address counting as one client:
    /// refusals in bursts of a quarter second's worth, first lookups of allowed names at
    /// the same rate in bursts of two seconds' worth (repeats within 30 s are free and not
    /// recorded); over it the query is answered REFUSED and counted as dropped, with no record.
    #[arg(long = "dns-rate", value_name = "N", default_value_t = egress_proxy::DEFAULT_DNS_RATE,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub dns_rate: u32,
    /// Read the run's configuration (policies, pins, run id) as one JSON line from stdin
    /// before binding (how a run hands it to its proxy container; `handoff` module).
    #[arg(long = "config-stdin", hide = true)]
    pub config_stdin: bool,
    /// A secret a policy credential uses: NAME (this process's env var NAME),
    /// NAME=env:VAR or NAME=file:PATH (one trailing newline dropped); repeatable.
    #[arg(long = "secret", value_name = "NAME[=env:VAR|=file:PATH]")]
    pub secrets: Vec<String>,
    /// Extra PEM CA trusted for upstream TLS of inspected hosts (besides the Mozilla roots).
    #[arg(long = "upstream-ca", value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,
    /// Also write the run CA's certificate (PEM) to FILE when some host is inspected.
    #[arg(long = "ca-cert-out", value_name = "FILE")]
    pub ca_cert_out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Refused attempts grouped by host, port and reason.
    Summary {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Check every run's chain (order, gaps, hashes, end record); exit 0 intact, 1 with one
    /// line per break.
    Verify {
        /// A run report whose `audit_head` must be the hash of its run's end record;
        /// repeatable.
        #[arg(long = "report", value_name = "REPORT.json")]
        reports: Vec<PathBuf>,
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Every record as an event for a SIEM (OCSF JSON lines on stdout).
    Export {
        /// Output format.
        #[arg(long, value_enum, value_name = "FORMAT", default_value = "ocsf")]
        format: ExportFormat,
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// One self-contained HTML page (totals, timeline, hosts, refusals first) per set of logs.
    Report {
        /// Where to write the page.
        #[arg(long, value_name = "OUT.html")]
        html: PathBuf,
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
}

/// Formats of `audit export`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// OCSF 1.5.0 events: Network (4001), HTTP (4002), DNS (4003), Event Log (1008) Activity.
    Ocsf,
}

#[derive(Debug, Args)]
pub struct GcArgs {}

#[derive(Debug, Args)]
pub struct DoctorArgs {}
