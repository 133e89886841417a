//! [`Field`]: one setting of a run, by which errors name what is at fault, and the name each
//! front end gives it.

use std::fmt;

/// One setting of a run: what a refusal of [`SpecError`](crate::SpecError) or
/// [`RunError`](crate::RunError) is about. A front end names it in its own terms
/// ([`Names`]): the command line by its flag (`--output-limit`), a `serve` request by its
/// field (`output_limit`), which is the [`RunOptions`](super::RunOptions) field's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// The command and its arguments.
    Argv,
    /// The policies (`--policy`, `policies`).
    Policies,
    /// The allowed destinations (`--allow`).
    Allow,
    /// The sandbox image.
    Image,
    /// The time limit.
    Timeout,
    /// The memory limit.
    Memory,
    /// The CPU limit.
    Cpus,
    /// The process limit.
    Pids,
    /// The size of `/tmp`.
    Tmp,
    /// The bytes of output relayed.
    OutputLimit,
    /// Host paths in the sandbox (`--mount`, `mounts`).
    Mounts,
    /// The sandbox's environment.
    Env,
    /// The command's working directory.
    Workdir,
    /// The file the run's audit records are appended to (the command line's only).
    AuditLog,
    /// The audit records written before the rest are only counted.
    AuditLimit,
    /// What new egress gets past the audit limit.
    OnAuditLimit,
    /// Names pinned to addresses.
    Resolve,
    /// The network the proxy reaches the outside through.
    EgressNetwork,
    /// The sandbox container's OCI runtime.
    Runtime,
    /// The secrets a policy's credentials use (`--secret`, `secrets`).
    Secrets,
    /// Extra CAs the proxy trusts upstream.
    UpstreamCa,
    /// Files written under /task (a request's only).
    Files,
    /// The command's stdin (a request's only).
    Stdin,
    /// The range the run's network is taken from (the library's and
    /// `EGRESS_SANDBOX_SUBNET_POOL`; no front end carries it).
    SubnetPool,
}

/// Whose terms a message names a [`Field`] in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    /// The command line's: `--output-limit`.
    Flags,
    /// A request's (and [`RunOptions`](super::RunOptions)'s): `output_limit`.
    Fields,
}

impl Field {
    /// The field's name in a `serve` request and in [`RunOptions`](super::RunOptions).
    pub fn name(self) -> &'static str {
        match self {
            Field::Argv => "argv",
            Field::Policies => "policies",
            Field::Allow => "allow",
            Field::Image => "image",
            Field::Timeout => "timeout",
            Field::Memory => "memory",
            Field::Cpus => "cpus",
            Field::Pids => "pids",
            Field::Tmp => "tmp",
            Field::OutputLimit => "output_limit",
            Field::Mounts => "mounts",
            Field::Env => "env",
            Field::Workdir => "workdir",
            Field::AuditLog => "audit_log",
            Field::AuditLimit => "audit_limit",
            Field::OnAuditLimit => "on_audit_limit",
            Field::Resolve => "resolve",
            Field::EgressNetwork => "egress_network",
            Field::Runtime => "runtime",
            Field::Secrets => "secrets",
            Field::UpstreamCa => "upstream_ca",
            Field::Files => "files",
            Field::Stdin => "stdin",
            Field::SubnetPool => "subnet_pool",
        }
    }

    /// The command line's flag for the field (`--output-limit`); a field no flag carries
    /// is named as a person would say it (`argv`, `files`, `subnet pool`).
    pub fn flag(self) -> &'static str {
        match self {
            Field::Argv => "argv",
            Field::Policies => "--policy",
            Field::Allow => "--allow",
            Field::Image => "--image",
            Field::Timeout => "--timeout",
            Field::Memory => "--memory",
            Field::Cpus => "--cpus",
            Field::Pids => "--pids",
            Field::Tmp => "--tmp",
            Field::OutputLimit => "--output-limit",
            Field::Mounts => "--mount",
            Field::Env => "--env",
            Field::Workdir => "--workdir",
            Field::AuditLog => "--audit-log",
            Field::AuditLimit => "--audit-limit",
            Field::OnAuditLimit => "--on-audit-limit",
            Field::Resolve => "--resolve",
            Field::EgressNetwork => "--egress-network",
            Field::Runtime => "--runtime",
            Field::Secrets => "--secret",
            Field::UpstreamCa => "--upstream-ca",
            Field::Files => "files",
            Field::Stdin => "stdin",
            Field::SubnetPool => "subnet pool",
        }
    }

    /// The field in `names`' terms.
    pub fn named(self, names: Names) -> &'static str {
        match names {
            Names::Flags => self.flag(),
            Names::Fields => self.name(),
        }
    }
}

/// The command line's flag: what the library's own messages say.
impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.flag())
    }
}
