//! What a run is asked to do, checked completely before Docker is touched.
//!
//! [`RunSpec::builder`] collects the command, policies and limits; [`RunSpecBuilder::build`]
//! parses and merges the policies, applies the policy ceilings to the limits and checks
//! every mount, variable and pin. A spec that builds is one the run can carry out; anything
//! wrong is a [`SpecError`] (exit 125) and nothing has been created.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use egress_proxy::policy::{Diagnostic, Limits, Policy, PolicyError, PolicySet};
use egress_proxy::resolve::PinError;
use egress_proxy::target::HostName;
use egress_proxy::units::format_size;
use ipnet::Ipv4Net;

use egress_proxy::handoff::InlineCertificate;
use egress_proxy::secrets::SecretValue;

use super::credentials::{CredentialError, RunCredentials};
use super::task_files::{self, TaskFile};

/// The run's limits when neither a flag nor a stricter policy sets them (INTERFACE.md).
pub const DEFAULT_LIMITS: RunLimits = RunLimits {
    timeout: Duration::from_secs(30),
    memory: 256 << 20,
    cpus: 1.0,
    pids: 128,
    tmp: 64 << 20,
    output: 1 << 20,
};

/// Audit records the proxy writes for one run before it only counts them (`--audit-limit`,
/// INTERFACE.md B3): bounds the log, the caller's work and the disk whatever the sandbox
/// sends. The proxy's own default, so a run and a bare proxy agree.
pub const DEFAULT_AUDIT_LIMIT: u64 = egress_proxy::audit::DEFAULT_AUDIT_LIMIT;

/// Docker refuses memory limits below 6 MiB; say so before anything is created.
const MIN_MEMORY: u64 = 6 << 20;

/// One argv string of the proxy process must stay below the kernel's MAX_ARG_STRLEN
/// (128 KiB), and policies travel to the proxy container as `--policy-yaml NAME=YAML`.
const MAX_POLICY_ARG: usize = 128 * 1024 - 1;
/// All of the proxy's arguments together stay far below ARG_MAX (2 MiB with an 8 MiB stack).
const MAX_POLICY_ARGS_TOTAL: usize = 1024 * 1024;

/// The subnet pool runs take their /29 from, unless `EGRESS_SANDBOX_SUBNET_POOL` says otherwise.
pub const DEFAULT_SUBNET_POOL: &str = "10.213.0.0/16";
pub const SUBNET_POOL_ENV: &str = "EGRESS_SANDBOX_SUBNET_POOL";

/// The limits a run is held to.
#[derive(Clone, Debug, PartialEq)]
pub struct RunLimits {
    /// Wall time of the command; the container is killed when it is up (exit 124).
    pub timeout: Duration,
    /// Memory, swap included, in bytes.
    pub memory: u64,
    pub cpus: f64,
    pub pids: u64,
    /// Size of the writable `/tmp` tmpfs in bytes.
    pub tmp: u64,
    /// stdout+stderr bytes relayed; the rest is dropped.
    pub output: u64,
}

/// A host path mounted into the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Absolute, canonical host path.
    pub source: PathBuf,
    /// Absolute path in the sandbox.
    pub target: String,
    pub writable: bool,
}

/// A policy exactly as the proxy will receive it: the text that was validated here is the
/// text the proxy parses, so the file cannot change in between.
#[derive(Clone, Debug)]
pub struct PolicySource {
    /// Gives the policy's default name; shown in the proxy's diagnostics.
    pub file_name: String,
    pub yaml: String,
}

/// Why a run cannot be set up as asked. Display is the message for the user.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{0}")]
    Policy(#[from] PolicyError),
    #[error("cannot read policy {path}: {source}")]
    PolicyRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "policy {file} is too large to hand to the proxy ({size} bytes; at most {max} bytes per policy)"
    )]
    PolicyTooLarge {
        file: String,
        size: usize,
        max: usize,
    },
    #[error("the policies are too large to hand to the proxy ({size} bytes in all; at most {max})")]
    PoliciesTooLarge { size: usize, max: usize },
    #[error("{flag} {value} is above the limit of policy {policy} ({key}: {limit})")]
    AboveLimit {
        flag: &'static str,
        value: String,
        policy: String,
        key: &'static str,
        limit: String,
    },
    #[error("invalid {flag} {value:?}: {reason}")]
    Invalid {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error(transparent)]
    Pin(Box<PinError>),
    #[error("no command given to run")]
    NoCommand,
    #[error(transparent)]
    Credentials(#[from] CredentialError),
    /// A `--secret` flag that could not be read (the message never holds the value).
    #[error("{0}")]
    SecretFlag(String),
}

fn invalid(flag: &'static str, value: impl Into<String>, reason: impl Into<String>) -> SpecError {
    SpecError::Invalid {
        flag,
        value: value.into(),
        reason: reason.into(),
    }
}

/// A checked run request. Build one with [`RunSpec::builder`].
#[derive(Clone, Debug)]
pub struct RunSpec {
    pub(crate) command: Vec<String>,
    pub(crate) image: Option<String>,
    pub(crate) policies: Vec<PolicySource>,
    pub(crate) allow: Vec<String>,
    pub(crate) policy_set: PolicySet,
    pub(crate) warnings: Vec<Diagnostic>,
    pub(crate) limits: RunLimits,
    pub(crate) mounts: Vec<Mount>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) workdir: Option<String>,
    pub(crate) resolve: Vec<(HostName, IpAddr)>,
    pub(crate) audit_log: Option<PathBuf>,
    pub(crate) audit_limit: u64,
    pub(crate) egress_network: Option<String>,
    pub(crate) runtime: Option<String>,
    pub(crate) proxy_binary: Option<PathBuf>,
    pub(crate) subnet_pool: Ipv4Net,
    /// Written under /task by the gate before the command runs.
    pub(crate) files: Vec<TaskFile>,
    /// Secrets with their placeholders, upstream CAs: only ever in the proxy's handoff.
    pub(crate) credentials: RunCredentials,
}

impl RunSpec {
    pub fn builder<I, S>(command: I) -> RunSpecBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RunSpecBuilder {
            command: command.into_iter().map(Into::into).collect(),
            ..RunSpecBuilder::default()
        }
    }

    pub fn limits(&self) -> &RunLimits {
        &self.limits
    }

    /// Policy warnings (shadowed rules, broad wildcards …): accepted, worth showing.
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// The merged policy name as audit records carry it (e.g. `openai-agent+cli`).
    pub fn policy_name(&self) -> &str {
        self.policy_set.name()
    }

    /// Records the proxy writes before it only counts them.
    pub fn audit_limit(&self) -> u64 {
        self.audit_limit
    }
}

/// Collects a run request; [`build`](Self::build) checks it.
#[derive(Clone, Debug, Default)]
pub struct RunSpecBuilder {
    command: Vec<String>,
    image: Option<String>,
    policy_files: Vec<PathBuf>,
    inline_policies: Vec<PolicySource>,
    allow: Vec<String>,
    timeout: Option<Duration>,
    memory: Option<u64>,
    cpus: Option<f64>,
    pids: Option<u64>,
    tmp: Option<u64>,
    output: Option<u64>,
    mounts: Vec<(PathBuf, String, bool)>,
    env: Vec<(String, String)>,
    workdir: Option<String>,
    resolve: Vec<(String, IpAddr)>,
    audit_log: Option<PathBuf>,
    audit_limit: Option<u64>,
    egress_network: Option<String>,
    runtime: Option<String>,
    proxy_binary: Option<PathBuf>,
    subnet_pool: Option<Ipv4Net>,
    files: Vec<TaskFile>,
    secrets: Vec<(String, SecretValue)>,
    upstream_ca: Vec<PathBuf>,
    upstream_ca_inline: Vec<InlineCertificate>,
}

impl RunSpecBuilder {
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = Some(image.into());
        self
    }
    /// A policy file (YAML), read and checked by `build`.
    pub fn policy_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.policy_files.push(path.into());
        self
    }
    /// A policy given as text; `file_name` names it in diagnostics and gives its default name.
    pub fn policy_yaml(mut self, file_name: impl Into<String>, yaml: impl Into<String>) -> Self {
        self.inline_policies.push(PolicySource {
            file_name: file_name.into(),
            yaml: yaml.into(),
        });
        self
    }
    /// `HOST[:PORT]`, as `--allow`.
    pub fn allow(mut self, host: impl Into<String>) -> Self {
        self.allow.push(host.into());
        self
    }
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    pub fn memory(mut self, bytes: u64) -> Self {
        self.memory = Some(bytes);
        self
    }
    pub fn cpus(mut self, cpus: f64) -> Self {
        self.cpus = Some(cpus);
        self
    }
    pub fn pids(mut self, pids: u64) -> Self {
        self.pids = Some(pids);
        self
    }
    pub fn tmp(mut self, bytes: u64) -> Self {
        self.tmp = Some(bytes);
        self
    }
    pub fn output_limit(mut self, bytes: u64) -> Self {
        self.output = Some(bytes);
        self
    }
    pub fn mount(
        mut self,
        source: impl Into<PathBuf>,
        target: impl Into<String>,
        writable: bool,
    ) -> Self {
        self.mounts.push((source.into(), target.into(), writable));
        self
    }
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
    pub fn workdir(mut self, dir: impl Into<String>) -> Self {
        self.workdir = Some(dir.into());
        self
    }
    /// The proxy uses `ip` for `name` instead of DNS; the floor still applies.
    pub fn resolve(mut self, name: impl Into<String>, ip: IpAddr) -> Self {
        self.resolve.push((name.into(), ip));
        self
    }
    pub fn audit_log(mut self, path: impl Into<PathBuf>) -> Self {
        self.audit_log = Some(path.into());
        self
    }
    /// Audit records written for the run before the proxy only counts them
    /// [default: [`DEFAULT_AUDIT_LIMIT`]]; at least 1.
    pub fn audit_limit(mut self, records: u64) -> Self {
        self.audit_limit = Some(records);
        self
    }
    pub fn egress_network(mut self, name: impl Into<String>) -> Self {
        self.egress_network = Some(name.into());
        self
    }
    /// The sandbox container's OCI runtime; the run checks the engine has it before it
    /// creates anything.
    pub fn runtime(mut self, name: impl Into<String>) -> Self {
        self.runtime = Some(name.into());
        self
    }
    /// The static egress-sandbox binary the proxy image is built from [default: this process].
    pub fn proxy_binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.proxy_binary = Some(path.into());
        self
    }
    /// Where per-run /29 subnets come from [default: `EGRESS_SANDBOX_SUBNET_POOL` or 10.213.0.0/16].
    pub fn subnet_pool(mut self, pool: Ipv4Net) -> Self {
        self.subnet_pool = Some(pool);
        self
    }

    /// A file for the command, written at `/task/PATH` before it runs; `/task` becomes the
    /// default working directory.
    pub fn file(mut self, path: impl Into<String>, contents: impl Into<Vec<u8>>) -> Self {
        self.files.push(TaskFile {
            path: path.into(),
            contents: contents.into(),
        });
        self
    }

    /// The value of a secret a policy credential names (`--secret`). It goes to the proxy
    /// only; the sandbox's variable `name` holds a random placeholder instead.
    pub fn secret(mut self, name: impl Into<String>, value: SecretValue) -> Self {
        self.secrets.push((name.into(), value));
        self
    }
    /// A PEM CA file the proxy trusts for upstream TLS besides the Mozilla roots
    /// (`--upstream-ca`); read and checked by `build`.
    pub fn upstream_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.upstream_ca.push(path.into());
        self
    }
    /// As [`upstream_ca`](Self::upstream_ca), with the PEM text given (`file` names it in
    /// errors): what `serve` gets in a request.
    pub fn upstream_ca_pem(mut self, file: impl Into<String>, pem: impl Into<String>) -> Self {
        self.upstream_ca_inline.push(InlineCertificate {
            file: file.into(),
            pem: pem.into(),
        });
        self
    }

    /// Reads and merges the policies, applies their ceilings, checks everything else.
    pub fn build(self) -> Result<RunSpec, SpecError> {
        if self.command.is_empty() {
            return Err(SpecError::NoCommand);
        }
        let mut sources = Vec::new();
        let mut policies = Vec::new();
        let mut warnings = Vec::new();
        let mut errors = Vec::new();
        for path in &self.policy_files {
            let (shown, source) = read_policy(path)?;
            match Policy::from_yaml(&shown, &source.yaml) {
                Ok((policy, found)) => {
                    policies.push(policy);
                    warnings.extend(found);
                }
                Err(error) => errors.extend(error.diagnostics),
            }
            sources.push(source);
        }
        for source in self.inline_policies {
            match Policy::from_yaml(&source.file_name, &source.yaml) {
                Ok((policy, found)) => {
                    policies.push(policy);
                    warnings.extend(found);
                }
                Err(error) => errors.extend(error.diagnostics),
            }
            sources.push(source);
        }
        if !self.allow.is_empty() {
            match Policy::from_allow_flags(&self.allow) {
                Ok(policy) => policies.push(policy),
                Err(error) => errors.extend(error.diagnostics),
            }
        }
        if !errors.is_empty() {
            return Err(PolicyError {
                diagnostics: errors,
            }
            .into());
        }
        check_policy_sizes(&sources)?;
        let policy_set = PolicySet::merge(policies);

        let requested = Requested {
            timeout: self.timeout,
            memory: self.memory,
            cpus: self.cpus,
            pids: self.pids,
            tmp: self.tmp,
            output: self.output,
        };
        let limits = resolve_limits(&requested, policy_set.limits(), policy_set.name())?;

        let mounts = self
            .mounts
            .into_iter()
            .map(|(source, target, writable)| check_mount(&source, &target, writable))
            .collect::<Result<Vec<_>, _>>()?;
        for (key, value) in &self.env {
            check_env(key, value)?;
        }
        let credentials = RunCredentials::check(
            &policy_set,
            self.secrets,
            &self.upstream_ca,
            self.upstream_ca_inline,
            &self.env,
        )?;
        if let Some(dir) = &self.workdir
            && !dir.starts_with('/')
        {
            return Err(invalid("--workdir", dir, "must be an absolute path"));
        }
        let mut files_bytes = 0u64;
        for file in &self.files {
            task_files::check_path(&file.path)
                .map_err(|reason| invalid("files", &file.path, reason))?;
            files_bytes += file.contents.len() as u64;
        }
        let files_limit = limits.tmp.min(task_files::MAX_TASK_FILES_BYTES);
        if files_bytes > files_limit {
            return Err(invalid(
                "files",
                format!("{files_bytes} bytes"),
                format!("more than /task holds ({files_limit} bytes: the tmp size, at most 64MiB)"),
            ));
        }
        let workdir = match self.workdir {
            None if !self.files.is_empty() => Some(task_files::TASK_DIR.to_string()),
            workdir => workdir,
        };
        let resolve = self
            .resolve
            .into_iter()
            .map(|(name, ip)| {
                // `::ffff:a.b.c.d` pins `a.b.c.d`, as `parse_pin` has it.
                HostName::parse(&name)
                    .map(|host| (host, ip.to_canonical()))
                    .map_err(|error| {
                        invalid("--resolve", format!("{name}={ip}"), error.to_string())
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(image) = &self.image
            && (image.is_empty() || image.chars().any(char::is_whitespace))
        {
            return Err(invalid("--image", image, "not an image reference"));
        }
        if let Some(network) = &self.egress_network
            && network.is_empty()
        {
            return Err(invalid("--egress-network", network, "empty network name"));
        }
        if let Some(runtime) = &self.runtime
            && (runtime.is_empty() || runtime.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(invalid("--runtime", runtime, "not a runtime name"));
        }
        let audit_limit = self.audit_limit.unwrap_or(DEFAULT_AUDIT_LIMIT);
        if audit_limit == 0 {
            return Err(invalid(
                "--audit-limit",
                "0",
                "must be at least 1: every run keeps a record of its attempts",
            ));
        }
        let subnet_pool = match self.subnet_pool {
            Some(pool) => check_pool(pool, "subnet pool")?,
            None => subnet_pool_from_env()?,
        };

        Ok(RunSpec {
            command: self.command,
            image: self.image,
            policies: sources,
            allow: self.allow,
            policy_set,
            warnings,
            limits,
            mounts,
            env: self.env,
            workdir,
            resolve,
            audit_log: self.audit_log,
            audit_limit,
            egress_network: self.egress_network,
            runtime: self.runtime,
            proxy_binary: self.proxy_binary,
            subnet_pool,
            files: self.files,
            credentials,
        })
    }
}

/// Reads a policy file once; the same text is validated here and parsed by the proxy.
fn read_policy(path: &Path) -> Result<(String, PolicySource), SpecError> {
    let read_error = |source| SpecError::PolicyRead {
        path: path.to_path_buf(),
        source,
    };
    let shown = path.display().to_string();
    let size = std::fs::metadata(path).map_err(read_error)?.len();
    if size > MAX_POLICY_ARG as u64 {
        return Err(SpecError::PolicyTooLarge {
            file: shown,
            size: usize::try_from(size).unwrap_or(usize::MAX),
            max: MAX_POLICY_ARG,
        });
    }
    let yaml = std::fs::read_to_string(path).map_err(read_error)?;
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| shown.clone());
    Ok((shown, PolicySource { file_name, yaml }))
}

fn check_policy_sizes(sources: &[PolicySource]) -> Result<(), SpecError> {
    let mut total = 0;
    for source in sources {
        // "NAME=YAML" plus the terminating NUL.
        let size = source.file_name.len() + 1 + source.yaml.len() + 1;
        if size > MAX_POLICY_ARG {
            return Err(SpecError::PolicyTooLarge {
                file: source.file_name.clone(),
                size,
                max: MAX_POLICY_ARG,
            });
        }
        total += size;
    }
    if total > MAX_POLICY_ARGS_TOTAL {
        return Err(SpecError::PoliciesTooLarge {
            size: total,
            max: MAX_POLICY_ARGS_TOTAL,
        });
    }
    Ok(())
}

struct Requested {
    timeout: Option<Duration>,
    memory: Option<u64>,
    cpus: Option<f64>,
    pids: Option<u64>,
    tmp: Option<u64>,
    output: Option<u64>,
}

/// A flag is refused above the policy ceiling; without a flag, the default applies unless
/// the ceiling is stricter.
fn resolve_limits(
    requested: &Requested,
    ceilings: &Limits,
    policy: &str,
) -> Result<RunLimits, SpecError> {
    fn pick<T: PartialOrd + Copy>(
        flag: &'static str,
        key: &'static str,
        requested: Option<T>,
        ceiling: Option<T>,
        default: T,
        policy: &str,
        show: impl Fn(T) -> String,
    ) -> Result<T, SpecError> {
        match (requested, ceiling) {
            (Some(value), Some(limit)) if value > limit => Err(SpecError::AboveLimit {
                flag,
                value: show(value),
                policy: policy.to_string(),
                key,
                limit: show(limit),
            }),
            (Some(value), _) => Ok(value),
            (None, Some(limit)) if limit < default => Ok(limit),
            (None, _) => Ok(default),
        }
    }
    let d = &DEFAULT_LIMITS;
    let show_duration = |value: Duration| humantime::format_duration(value).to_string();
    let show_size = |value: u64| format_size(value);
    let limits = RunLimits {
        timeout: pick(
            "--timeout",
            "timeout",
            requested.timeout,
            ceilings.timeout,
            d.timeout,
            policy,
            show_duration,
        )?,
        memory: pick(
            "--memory",
            "memory",
            requested.memory,
            ceilings.memory,
            d.memory,
            policy,
            show_size,
        )?,
        cpus: pick(
            "--cpus",
            "cpus",
            requested.cpus,
            ceilings.cpus,
            d.cpus,
            policy,
            |value: f64| value.to_string(),
        )?,
        pids: pick(
            "--pids",
            "pids",
            requested.pids,
            ceilings.pids,
            d.pids,
            policy,
            |value: u64| value.to_string(),
        )?,
        tmp: pick(
            "--tmp",
            "tmp",
            requested.tmp,
            ceilings.tmp,
            d.tmp,
            policy,
            show_size,
        )?,
        output: pick(
            "--output-limit",
            "output",
            requested.output,
            ceilings.output,
            d.output,
            policy,
            show_size,
        )?,
    };
    if limits.timeout.is_zero() {
        return Err(invalid(
            "--timeout",
            show_duration(limits.timeout),
            "must be more than 0",
        ));
    }
    if limits.memory < MIN_MEMORY {
        return Err(invalid(
            "--memory",
            format_size(limits.memory),
            "Docker needs at least 6MiB",
        ));
    }
    if !(limits.cpus.is_finite() && limits.cpus >= 0.01) {
        return Err(invalid(
            "--cpus",
            limits.cpus.to_string(),
            "must be at least 0.01",
        ));
    }
    if limits.pids < 2 {
        // tini and the command.
        return Err(invalid(
            "--pids",
            limits.pids.to_string(),
            "must be at least 2",
        ));
    }
    if limits.tmp == 0 {
        return Err(invalid("--tmp", "0", "must be more than 0"));
    }
    for (flag, value) in [
        ("--memory", limits.memory),
        ("--tmp", limits.tmp),
        ("--pids", limits.pids),
    ] {
        if i64::try_from(value).is_err() {
            return Err(invalid(flag, value.to_string(), "too large"));
        }
    }
    Ok(limits)
}

/// Paths where a mount would break the sandbox's own set-up.
const RESERVED_TARGETS: &[&str] = &[
    "/",
    "/tmp",
    "/proc",
    "/sys",
    "/dev",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/hostname",
    // Where the sandbox's start gate lives (container::GATE_PATH).
    "/.egress-sandbox",
];

fn check_mount(source: &Path, target: &str, writable: bool) -> Result<Mount, SpecError> {
    let shown = format!("{}:{target}", source.display());
    let canonical = std::fs::canonicalize(source)
        .map_err(|error| invalid("--mount", &shown, format!("source: {error}")))?;
    let metadata = std::fs::metadata(&canonical)
        .map_err(|error| invalid("--mount", &shown, format!("source: {error}")))?;
    {
        use std::os::unix::fs::FileTypeExt;
        if metadata.file_type().is_socket() {
            // A socket (the Docker socket above all) would be a way out around the proxy.
            return Err(invalid(
                "--mount",
                &shown,
                "the source is a socket, which would be a way out of the sandbox",
            ));
        }
    }
    if !target.starts_with('/') {
        return Err(invalid(
            "--mount",
            &shown,
            "the target must be an absolute path",
        ));
    }
    let normalized = target.trim_end_matches('/');
    let normalized = if normalized.is_empty() {
        "/"
    } else {
        normalized
    };
    if RESERVED_TARGETS.contains(&normalized)
        || normalized.starts_with("/.egress-sandbox/")
        || normalized.contains(',')
    {
        return Err(invalid(
            "--mount",
            &shown,
            format!("cannot mount over {normalized}"),
        ));
    }
    Ok(Mount {
        source: canonical,
        target: normalized.to_string(),
        writable,
    })
}

/// Variables egress-sandbox sets itself: the proxy is the only way out, overriding them
/// could only make programs fail in confusing ways.
pub(crate) const PROXY_VARIABLES: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

fn check_env(key: &str, value: &str) -> Result<(), SpecError> {
    let shown = format!("{key}={value}");
    if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
        return Err(invalid("--env", shown, "expected KEY=VALUE"));
    }
    if PROXY_VARIABLES.contains(&key) {
        return Err(invalid(
            "--env",
            shown,
            "the proxy variables are set by egress-sandbox",
        ));
    }
    Ok(())
}

fn check_pool(pool: Ipv4Net, what: &str) -> Result<Ipv4Net, SpecError> {
    if pool.prefix_len() > 29 {
        return Err(invalid(
            "subnet pool",
            format!("{what} {pool}"),
            "must be /29 or larger",
        ));
    }
    Ok(pool.trunc())
}

fn subnet_pool_from_env() -> Result<Ipv4Net, SpecError> {
    match std::env::var(SUBNET_POOL_ENV) {
        Ok(value) if !value.trim().is_empty() => {
            let pool: Ipv4Net = value.trim().parse().map_err(|_| {
                invalid(
                    "subnet pool",
                    format!("{SUBNET_POOL_ENV}={value}"),
                    "expected an IPv4 CIDR such as 10.213.0.0/16",
                )
            })?;
            check_pool(pool, SUBNET_POOL_ENV)
        }
        _ => Ok(DEFAULT_SUBNET_POOL.parse().expect("valid default pool")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requested() -> Requested {
        Requested {
            timeout: None,
            memory: None,
            cpus: None,
            pids: None,
            tmp: None,
            output: None,
        }
    }

    #[test]
    fn defaults_apply_without_flags_or_ceilings() {
        let limits = resolve_limits(&requested(), &Limits::default(), "p").unwrap();
        assert_eq!(limits, DEFAULT_LIMITS);
    }

    #[test]
    fn stricter_ceiling_becomes_the_value_looser_one_does_not() {
        let ceilings = Limits {
            timeout: Some(Duration::from_secs(5)),
            memory: Some(1 << 30),
            ..Limits::default()
        };
        let limits = resolve_limits(&requested(), &ceilings, "p").unwrap();
        assert_eq!(limits.timeout, Duration::from_secs(5));
        assert_eq!(limits.memory, DEFAULT_LIMITS.memory);
    }

    #[test]
    fn flag_above_ceiling_is_refused_with_both_values() {
        let ceilings = Limits {
            timeout: Some(Duration::from_secs(30)),
            ..Limits::default()
        };
        let mut asked = requested();
        asked.timeout = Some(Duration::from_secs(600));
        let error = resolve_limits(&asked, &ceilings, "agent").unwrap_err();
        assert_eq!(
            error.to_string(),
            "--timeout 10m is above the limit of policy agent (timeout: 30s)"
        );
    }

    #[test]
    fn flag_below_ceiling_wins() {
        let ceilings = Limits {
            memory: Some(512 << 20),
            ..Limits::default()
        };
        let mut asked = requested();
        asked.memory = Some(384 << 20);
        let limits = resolve_limits(&asked, &ceilings, "p").unwrap();
        assert_eq!(limits.memory, 384 << 20);
    }

    #[test]
    fn nonsense_limits_are_refused() {
        let mut asked = requested();
        asked.memory = Some(1 << 20);
        assert!(resolve_limits(&asked, &Limits::default(), "p").is_err());
        let mut asked = requested();
        asked.timeout = Some(Duration::ZERO);
        assert!(resolve_limits(&asked, &Limits::default(), "p").is_err());
        let mut asked = requested();
        asked.cpus = Some(f64::NAN);
        assert!(resolve_limits(&asked, &Limits::default(), "p").is_err());
    }

    #[test]
    fn mount_checks_source_and_target() {
        let dir = tempfile::tempdir().unwrap();
        let mount = check_mount(dir.path(), "/data/", false).unwrap();
        assert_eq!(mount.target, "/data");
        assert!(check_mount(dir.path(), "relative", false).is_err());
        assert!(check_mount(dir.path(), "/tmp", false).is_err());
        assert!(check_mount(&dir.path().join("missing"), "/data", false).is_err());
        let socket = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert!(check_mount(&socket, "/var/run/docker.sock", false).is_err());
    }

    #[test]
    fn env_refuses_proxy_variables_and_bad_keys() {
        assert!(check_env("FOO", "bar").is_ok());
        assert!(check_env("HTTPS_PROXY", "http://evil").is_err());
        assert!(check_env("", "x").is_err());
    }

    #[test]
    fn oversized_policy_is_refused() {
        let big = PolicySource {
            file_name: "big.yaml".into(),
            yaml: "#".repeat(MAX_POLICY_ARG),
        };
        assert!(matches!(
            check_policy_sizes(&[big]),
            Err(SpecError::PolicyTooLarge { .. })
        ));
    }

    #[test]
    fn audit_limit_defaults_and_refuses_zero() {
        let spec = RunSpec::builder(["true"]).build().unwrap();
        assert_eq!(spec.audit_limit(), DEFAULT_AUDIT_LIMIT);
        let spec = RunSpec::builder(["true"]).audit_limit(5).build().unwrap();
        assert_eq!(spec.audit_limit(), 5);
        let error = RunSpec::builder(["true"])
            .audit_limit(0)
            .build()
            .unwrap_err();
        assert!(
            error.to_string().starts_with("invalid --audit-limit"),
            "{error}"
        );
    }

    #[test]
    fn pins_are_checked_and_mapped_addresses_canonical() {
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        let spec = RunSpec::builder(["true"])
            .resolve("API.test.", mapped)
            .build()
            .unwrap();
        assert_eq!(
            spec.resolve,
            vec![(
                HostName::parse("api.test").unwrap(),
                "203.0.113.7".parse::<IpAddr>().unwrap()
            )]
        );
        let ip: IpAddr = "203.0.113.7".parse().unwrap();
        assert!(
            RunSpec::builder(["true"])
                .resolve("a b", ip)
                .build()
                .is_err()
        );
    }

    #[test]
    fn pool_must_hold_a_slash_29() {
        assert!(check_pool("10.0.0.0/30".parse().unwrap(), "pool").is_err());
        assert_eq!(
            check_pool("10.213.1.9/16".parse().unwrap(), "pool").unwrap(),
            "10.213.0.0/16".parse::<Ipv4Net>().unwrap()
        );
    }
}
