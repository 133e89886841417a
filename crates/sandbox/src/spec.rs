//! What a run is asked to do, checked completely before Docker is touched.
//!
//! [`RunSpec::builder`] collects the command, policies and limits; [`RunSpecBuilder::build`]
//! parses and merges the policies, applies the policy ceilings to the limits and checks
//! every mount, variable and pin. A spec that builds is one the run can carry out; anything
//! wrong is a [`SpecError`] (exit 125) and nothing has been created.
//!
//! The checks live with what they check: `limits`, `mounts`, `env`, `policies` and the
//! `subnet_pool` (submodules). The strings a front end is given (`30s`, `512m`, `SRC:DST:rw`)
//! are parsed by [`RunOptions`](crate::options::RunOptions); this module takes typed values.

mod env;
mod limits;
mod mode_notices;
mod mounts;
mod policies;
mod subnet_pool;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use egress_core::audit::OnAuditLimit;
use egress_core::policy::{CredentialConflicts, Diagnostic, Policy, PolicyError, PolicySet};
use egress_core::target::HostName;
use ipnet::Ipv4Net;

use egress_core::handoff::InlineCertificate;
use egress_core::secret::SecretValue;

use crate::credentials::{CredentialError, RunCredentials};
use crate::options::{Field, Names, SecretError};
use crate::task_files::{self, TaskFile};
use egress_core::units::MAX_DURATION;

use env::check_env;
pub use limits::{DEFAULT_LIMITS, MIN_MEMORY, MIN_TMP, RunLimits};
use limits::{Requested, resolve_limits, resolve_runtime};
pub use mounts::Mount;
use mounts::check_mount;
pub use policies::PolicySource;
use policies::{check_policy_sizes, read_policy};
pub use subnet_pool::{DEFAULT_SUBNET_POOL, SUBNET_POOL_ENV};
use subnet_pool::{check_pool, subnet_pool_from_env};

/// Audit records the proxy writes for one run before it only counts them (`--audit-limit`,
/// `docs/src/reference/audit-record.md`): bounds the log, the caller's work and the disk whatever
/// the sandbox sends. The proxy's own default, so a run and a bare proxy agree.
pub const DEFAULT_AUDIT_LIMIT: u64 = egress_core::audit::DEFAULT_AUDIT_LIMIT;

/// Why a run cannot be set up as asked. Display is the message for the user.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// A policy does not parse or check, with every diagnostic found.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A policy file could not be read. The read's error is part of the message (not a
    /// `source()`), so every caller shows it, once.
    #[error("cannot read policy {path}: {cause}")]
    PolicyRead {
        /// The file asked for.
        path: PathBuf,
        /// The read's error.
        cause: std::io::Error,
    },
    /// One policy is longer than one argument of the proxy process may be.
    #[error(
        "policy {file} is too large to hand to the proxy ({size} bytes; at most {max} bytes per policy)"
    )]
    PolicyTooLarge {
        /// The policy's file name.
        file: String,
        /// Its size as the proxy's argument, in bytes.
        size: usize,
        /// The most one policy may take, in bytes.
        max: usize,
    },
    /// The policies together are longer than the proxy's arguments may be.
    #[error("the policies are too large to hand to the proxy ({size} bytes in all; at most {max})")]
    PoliciesTooLarge {
        /// Their size as the proxy's arguments, in bytes.
        size: usize,
        /// The most they may take together, in bytes.
        max: usize,
    },
    /// A limit asked for is above the ceiling a policy sets.
    #[error("{field} {value} is above the limit of policy {policy} ({key}: {limit})")]
    AboveLimit {
        /// The setting of the limit.
        field: Field,
        /// The value asked for, as a person writes it.
        value: String,
        /// The merged policy's name.
        policy: String,
        /// The policy's key for the limit (`memory`, …).
        key: &'static str,
        /// The policy's ceiling, as a person writes it.
        limit: String,
    },
    /// The runtime asked for is not one the policies allow.
    #[error("--runtime {name} is not allowed by policy {policy} (runtime: {allowed})")]
    RuntimeNotAllowed {
        /// The runtime asked for.
        name: String,
        /// The merged policy's name.
        policy: String,
        /// The runtimes the policies allow, joined with `, `.
        allowed: String,
    },
    /// The policies merged allow no runtime in common.
    #[error(
        "policies {policy} require different runtimes (limits: runtime): no run can satisfy them all"
    )]
    RuntimesConflict {
        /// The merged policy's name.
        policy: String,
    },
    /// A value that is not valid for its setting.
    #[error("invalid {field} {value:?}: {reason}")]
    Invalid {
        /// The setting the value was given for.
        field: Field,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A number of seconds that is not a time limit.
    #[error("invalid {field} {seconds}: a number of seconds more than 0 and at most {}", MAX_DURATION.as_secs())]
    Seconds {
        /// The setting the number was given for.
        field: Field,
        /// The number given.
        seconds: f64,
    },
    /// A pin (`--resolve NAME=IP`, a request's `resolve` entry) that does not parse as the
    /// proxy parses one.
    #[error("--resolve {:?}: {reason}", pin_as_typed(name, address.as_deref()))]
    Pin {
        /// The name as given.
        name: String,
        /// The address as given; `None` for a flag without `=`.
        address: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// The command to run is empty.
    #[error("no command given to run")]
    NoCommand,
    /// The secrets or upstream CAs could not be read, or do not fit the policies.
    #[error(transparent)]
    Credentials(#[from] CredentialError),
    /// A secret that could not be read or used (the message never holds the value).
    #[error(transparent)]
    Secret(#[from] SecretError),
}

/// A pin as the command line types it: `NAME=IP`, or `NAME` alone.
fn pin_as_typed(name: &str, address: Option<&str>) -> String {
    match address {
        Some(address) => format!("{name}={address}"),
        None => name.to_owned(),
    }
}

impl SpecError {
    /// The setting at fault.
    pub fn field(&self) -> Field {
        match self {
            SpecError::Policy(policy) => {
                if policy
                    .diagnostics
                    .iter()
                    .all(|found| found.file == "--allow")
                {
                    Field::Allow
                } else {
                    Field::Policies
                }
            }
            SpecError::AboveLimit { field, .. }
            | SpecError::Invalid { field, .. }
            | SpecError::Seconds { field, .. } => *field,
            SpecError::RuntimeNotAllowed { .. } | SpecError::RuntimesConflict { .. } => {
                Field::Runtime
            }
            SpecError::Pin { .. } => Field::Resolve,
            SpecError::NoCommand => Field::Argv,
            SpecError::Credentials(credential) => credential.field(),
            SpecError::Secret(_) => Field::Secrets,
            SpecError::PolicyRead { .. }
            | SpecError::PolicyTooLarge { .. }
            | SpecError::PoliciesTooLarge { .. } => Field::Policies,
        }
    }

    /// The message in `names`' terms (its `Display` is the command line's). Policy
    /// diagnostics name files and lines, the same in every front end.
    pub fn message(&self, names: Names) -> String {
        if names == Names::Flags {
            return self.to_string();
        }
        match self {
            SpecError::AboveLimit {
                field,
                value,
                policy,
                key,
                limit,
            } => format!(
                "{} {value} is above the limit of policy {policy} ({key}: {limit})",
                field.name()
            ),
            SpecError::Invalid {
                field,
                value,
                reason,
            } => format!("invalid {} {value:?}: {reason}", field.name()),
            SpecError::Seconds { field, seconds } => format!(
                "invalid {} {seconds}: a number of seconds more than 0 and at most {}",
                field.name(),
                MAX_DURATION.as_secs()
            ),
            SpecError::Pin {
                name,
                address: Some(address),
                reason,
            } => format!("invalid resolve {name:?}: {address:?}: {reason}"),
            SpecError::Credentials(credential) => credential.message(names),
            SpecError::Secret(secret) => secret.message(names),
            other => other.to_string(),
        }
    }
}

fn invalid(field: Field, value: impl Into<String>, reason: impl Into<String>) -> SpecError {
    SpecError::Invalid {
        field,
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
    /// Lines about the policy mode, said at the run's start (`mode_notices`).
    pub(crate) notices: Vec<String>,
    pub(crate) limits: RunLimits,
    pub(crate) mounts: Vec<Mount>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) workdir: Option<String>,
    pub(crate) resolve: Vec<(HostName, IpAddr)>,
    pub(crate) audit_log: Option<PathBuf>,
    pub(crate) audit_limit: u64,
    pub(crate) on_audit_limit: OnAuditLimit,
    pub(crate) egress_network: Option<String>,
    pub(crate) runtime: Option<String>,
    pub(crate) subnet_pool: Ipv4Net,
    /// Written under /task by the launcher before the command runs.
    pub(crate) files: Vec<TaskFile>,
    /// Secrets with their placeholders, upstream CAs: only ever in the proxy's handoff.
    pub(crate) credentials: RunCredentials,
}

impl RunSpec {
    /// A request to run `command` (argv, no shell) with the defaults; `build` checks it.
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

    /// The limits the run is held to, the policies' ceilings applied.
    pub fn limits(&self) -> &RunLimits {
        &self.limits
    }

    /// The secrets and upstream CAs as read and checked, for a front end that hands the run
    /// to a daemon which may not see this process's environment or files (`run --server`).
    pub fn credentials(&self) -> &RunCredentials {
        &self.credentials
    }

    /// Policy warnings (shadowed rules, broad wildcards …): accepted, worth showing.
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// Lines a run says on stderr before it starts (the API: `warning` events): that report
    /// mode opens egress to every public host, or that a merge turned a report-mode policy
    /// into enforce. Each starts `egress-sandbox: `.
    pub fn notices(&self) -> &[String] {
        &self.notices
    }

    /// The merged policy name as audit records carry it (e.g. `openai-agent+cli`).
    pub fn policy_name(&self) -> &str {
        self.policy_set.name()
    }

    /// Records the proxy writes before it only counts them.
    pub fn audit_limit(&self) -> u64 {
        self.audit_limit
    }

    /// What new egress gets once the audit limit is reached (`--on-audit-limit`).
    pub fn on_audit_limit(&self) -> OnAuditLimit {
        self.on_audit_limit
    }

    /// The image the command runs in; `None`: the base image.
    pub fn image(&self) -> Option<&str> {
        self.image.as_deref()
    }

    /// The OCI runtime the sandbox runs under; `None`: the engine's default.
    pub fn runtime(&self) -> Option<&str> {
        self.runtime.as_deref()
    }

    /// The egress network the proxy reaches upstreams through; `None`: the tool's own.
    pub fn egress_network(&self) -> Option<&str> {
        self.egress_network.as_deref()
    }

    /// The directory the command starts in; `None`: the image's own.
    pub fn workdir(&self) -> Option<&str> {
        self.workdir.as_deref()
    }

    /// Files written under `/task` before the command starts.
    pub fn files(&self) -> &[TaskFile] {
        &self.files
    }

    /// The same run on another egress network (a pool's slots take the daemon's).
    pub fn with_egress_network(mut self, network: Option<String>) -> RunSpec {
        self.egress_network = network;
        self
    }
}

/// Collects a run request; [`build`](Self::build) checks it. A limit left unset gets its
/// default, or a policy's ceiling where that is lower; one set above a ceiling is refused.
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
    on_audit_limit: Option<OnAuditLimit>,
    egress_network: Option<String>,
    runtime: Option<String>,
    subnet_pool: Option<Ipv4Net>,
    files: Vec<TaskFile>,
    secrets: Vec<(String, SecretValue)>,
    upstream_ca: Vec<PathBuf>,
    upstream_ca_inline: Vec<InlineCertificate>,
}

impl RunSpecBuilder {
    /// The image the command runs in, a local image the engine has [default: the base image].
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
    /// The command's wall time, after which the sandbox is killed (exit 124) [default: 30s].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Memory, swap included, in bytes [default: 256 MiB]; at least [`MIN_MEMORY`].
    pub fn memory(mut self, bytes: u64) -> Self {
        self.memory = Some(bytes);
        self
    }
    /// CPUs the sandbox may use, fractions allowed [default: 1].
    pub fn cpus(mut self, cpus: f64) -> Self {
        self.cpus = Some(cpus);
        self
    }
    /// Processes and threads the sandbox may have at once [default: 128].
    pub fn pids(mut self, pids: u64) -> Self {
        self.pids = Some(pids);
        self
    }
    /// Size of the writable `/tmp` in bytes [default: 64 MiB]; at least [`MIN_TMP`].
    pub fn tmp(mut self, bytes: u64) -> Self {
        self.tmp = Some(bytes);
        self
    }
    /// stdout and stderr bytes relayed before the rest is dropped [default: 1 MiB].
    pub fn output_limit(mut self, bytes: u64) -> Self {
        self.output = Some(bytes);
        self
    }
    /// A host path `source` mounted at `target` in the sandbox, read-only unless `writable`;
    /// checked by `build`.
    pub fn mount(
        mut self,
        source: impl Into<PathBuf>,
        target: impl Into<String>,
        writable: bool,
    ) -> Self {
        self.mounts.push((source.into(), target.into(), writable));
        self
    }
    /// A variable set in the sandbox; the proxy variables egress-sandbox sets are refused.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
    /// The directory the command starts in, an absolute path [default: the image's own, or
    /// `/task` when the run has files].
    pub fn workdir(mut self, dir: impl Into<String>) -> Self {
        self.workdir = Some(dir.into());
        self
    }
    /// The proxy uses `ip` for `name` instead of DNS; the floor still applies.
    pub fn resolve(mut self, name: impl Into<String>, ip: IpAddr) -> Self {
        self.resolve.push((name.into(), ip));
        self
    }
    /// A file the run's audit lines are appended to (`--audit-log`).
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
    /// What new egress gets once the audit limit is reached [default: `reserve`]: its
    /// records from a reserve of its own, or refused. Nothing leaves unrecorded either way.
    pub fn on_audit_limit(mut self, on_limit: OnAuditLimit) -> Self {
        self.on_audit_limit = Some(on_limit);
        self
    }
    /// The Docker network the proxy reaches upstreams through [default: the tool's own].
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
        let merged = self.merge_policies()?;
        let policy_set = &merged.policy_set;
        let requested = Requested {
            timeout: self.timeout,
            memory: self.memory,
            cpus: self.cpus,
            pids: self.pids,
            tmp: self.tmp,
            output: self.output,
        };
        let limits = resolve_limits(&requested, policy_set.limits(), policy_set.name())?;
        let runtime = resolve_runtime(
            self.runtime.clone(),
            policy_set.limits().runtime.as_deref(),
            policy_set.name(),
        )?;
        let mounts = self
            .mounts
            .iter()
            .map(|(source, target, writable)| check_mount(source, target, *writable))
            .collect::<Result<Vec<_>, _>>()?;
        for (key, value) in &self.env {
            check_env(key, value)?;
        }
        let credentials = RunCredentials::check(
            policy_set,
            self.secrets.clone(),
            &self.upstream_ca,
            self.upstream_ca_inline.clone(),
            &self.env,
        )?;
        check_workdir_and_argv(&self.command, self.workdir.as_deref())?;
        check_task_files(&self.files, limits.tmp)?;
        let resolve = check_pins(&self.resolve)?;
        check_names(
            self.image.as_deref(),
            self.egress_network.as_deref(),
            runtime.as_deref(),
        )?;
        let audit_limit = self.audit_limit.unwrap_or(DEFAULT_AUDIT_LIMIT);
        if audit_limit == 0 {
            return Err(invalid(
                Field::AuditLimit,
                "0",
                "must be at least 1: every run keeps a record of its attempts",
            ));
        }
        let subnet_pool = match self.subnet_pool {
            Some(pool) => check_pool(pool, "subnet pool")?,
            None => subnet_pool_from_env()?,
        };
        let workdir = match self.workdir {
            None if !self.files.is_empty() => Some(task_files::TASK_DIR.to_string()),
            workdir => workdir,
        };
        Ok(RunSpec {
            command: self.command,
            image: self.image,
            policies: merged.sources,
            allow: self.allow,
            policy_set: merged.policy_set,
            warnings: merged.warnings,
            notices: merged.notices,
            limits,
            mounts,
            env: self.env,
            workdir,
            resolve,
            audit_log: self.audit_log,
            audit_limit,
            on_audit_limit: self.on_audit_limit.unwrap_or_default(),
            egress_network: self.egress_network,
            runtime,
            subnet_pool,
            files: self.files,
            credentials,
        })
    }

    /// The policy files read, the inline policies and the `--allow` flags parsed, and all
    /// merged; every diagnostic of every policy when any is refused.
    fn merge_policies(&self) -> Result<MergedPolicies, SpecError> {
        // A file's diagnostics name it as given (its path); an inline policy by its name.
        let mut named = Vec::new();
        for path in &self.policy_files {
            named.push(read_policy(path)?);
        }
        for source in &self.inline_policies {
            named.push((source.file_name.clone(), source.clone()));
        }
        let mut policies = Vec::new();
        let mut warnings = Vec::new();
        let mut errors = Vec::new();
        for (shown, source) in &named {
            match Policy::from_yaml(shown, &source.yaml) {
                Ok((policy, found)) => {
                    policies.push(policy);
                    warnings.extend(found);
                }
                Err(error) => errors.extend(error.diagnostics),
            }
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
        let sources: Vec<PolicySource> = named.into_iter().map(|(_, source)| source).collect();
        check_policy_sizes(&sources)?;
        let notices = mode_notices::mode_notices(&policies);
        // Conflicting credentials are refused where the proxy starts: it merges these same
        // policies from its handoff and names the first conflict.
        let policy_set = PolicySet::merge(policies)
            .unwrap_or_else(CredentialConflicts::into_set_refused_by_proxy);
        Ok(MergedPolicies {
            sources,
            policy_set,
            warnings,
            notices,
        })
    }
}

/// The run's policies as read, merged, and what reading them found.
struct MergedPolicies {
    sources: Vec<PolicySource>,
    policy_set: PolicySet,
    warnings: Vec<Diagnostic>,
    notices: Vec<String>,
}

/// The working directory is absolute and cannot climb; neither it nor an argument holds a
/// NUL byte (no command line can carry one; an API request can, and Docker would fail on it
/// only after the network and the proxy exist). The message quotes the value with `{:?}`,
/// which escapes the NUL (and any other control) once.
fn check_workdir_and_argv(command: &[String], workdir: Option<&str>) -> Result<(), SpecError> {
    if let Some(dir) = workdir {
        if !dir.starts_with('/') {
            return Err(invalid(Field::Workdir, dir, "must be an absolute path"));
        }
        // As a mount's target: a `..` could climb anywhere, so it is refused, not resolved.
        if dir.split('/').any(|part| part == "..") {
            return Err(invalid(Field::Workdir, dir, "must not contain `..`"));
        }
    }
    let nul = |field: Field, value: &str| Err(invalid(field, value, "cannot hold a NUL byte"));
    if let Some(arg) = command.iter().find(|arg| arg.contains('\0')) {
        return nul(Field::Argv, arg);
    }
    if let Some(dir) = workdir.filter(|dir| dir.contains('\0')) {
        return nul(Field::Workdir, dir);
    }
    Ok(())
}

/// Each task file's path is relative and under /task, given once, and the files together
/// fit in /task (the tmp size, at most 64MiB).
fn check_task_files(files: &[TaskFile], tmp: u64) -> Result<(), SpecError> {
    let mut files_bytes = 0u64;
    for file in files {
        task_files::check_path(&file.path)
            .map_err(|reason| invalid(Field::Files, &file.path, reason))?;
        files_bytes += file.contents.len() as u64;
    }
    task_files::check_paths(files.iter().map(|file| file.path.as_str()))
        .map_err(|(path, reason)| invalid(Field::Files, &path, reason))?;
    let files_limit = tmp.min(task_files::MAX_TASK_FILES_BYTES);
    if files_bytes > files_limit {
        return Err(invalid(
            Field::Files,
            format!("{files_bytes} bytes"),
            format!("more than /task holds ({files_limit} bytes: the tmp size, at most 64MiB)"),
        ));
    }
    Ok(())
}

/// Each pinned name normalised as any target is; `::ffff:a.b.c.d` pins `a.b.c.d`, as
/// `parse_pin` has it.
fn check_pins(pins: &[(String, IpAddr)]) -> Result<Vec<(HostName, IpAddr)>, SpecError> {
    pins.iter()
        .map(|(name, ip)| {
            HostName::parse(name)
                .map(|host| (host, ip.to_canonical()))
                .map_err(|error| invalid(Field::Resolve, format!("{name}={ip}"), error.to_string()))
        })
        .collect()
}

/// The image, the egress network and the runtime are names Docker could take, not empty
/// and not read as a flag of its own.
fn check_names(
    image: Option<&str>,
    network: Option<&str>,
    runtime: Option<&str>,
) -> Result<(), SpecError> {
    if let Some(image) = image
        && (image.is_empty()
            || image.starts_with('-')
            || image.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(invalid(Field::Image, image, "not an image reference"));
    }
    if let Some(network) = network
        && (network.is_empty() || network.chars().any(char::is_control))
    {
        return Err(invalid(Field::EgressNetwork, network, "not a network name"));
    }
    if let Some(runtime) = runtime
        && (runtime.is_empty() || runtime.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(invalid(Field::Runtime, runtime, "not a runtime name"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every refusal says each cause once, whether printed alone or with its chain.
    #[test]
    fn each_cause_is_said_once() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.yaml");
        let bad_ca = dir.path().join("ca.pem");
        std::fs::write(&bad_ca, "not a certificate").unwrap();
        let errors = [
            RunSpec::builder(["true"])
                .policy_file(&missing)
                .build()
                .unwrap_err(),
            RunSpec::builder(["true"])
                .upstream_ca(&missing)
                .build()
                .unwrap_err(),
            RunSpec::builder(["true"])
                .upstream_ca(&bad_ca)
                .build()
                .unwrap_err(),
            RunSpec::builder(["true"])
                .policy_yaml("p.yaml", "version: 2\n")
                .build()
                .unwrap_err(),
        ];
        for error in errors {
            let shown = crate::with_causes(&error);
            assert_eq!(
                shown,
                error.to_string(),
                "the message holds its cause: {shown}"
            );
        }
        let read = RunSpec::builder(["true"])
            .policy_file(&missing)
            .build()
            .unwrap_err();
        let shown = crate::with_causes(&read);
        assert_eq!(shown.matches("No such file").count(), 1, "{shown}");
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
}
