//! `egress-sandbox proxy`: the proxy alone, on any host (also what runs in the proxy
//! container when this binary is the helper). The flags are read here; the proxy itself is
//! the helper's ([`egress_sandbox_helper::proxy`]), the same code the helper binary runs.

use std::process::ExitCode;

use anyhow::Result;
use egress_sandbox_helper::proxy::ProxyOptions;

use crate::cli::ProxyArgs;
use egress_sandbox::options::read_secret_flag;

pub fn run(args: ProxyArgs) -> Result<ExitCode> {
    Ok(egress_sandbox_helper::proxy::run(options_from_args(args)?)?)
}

/// The flags as the helper's options; `--secret` values are read here, from this process's
/// environment and files.
fn options_from_args(args: ProxyArgs) -> Result<ProxyOptions> {
    let secrets = args
        .secrets
        .iter()
        .map(|raw| read_secret_flag(raw))
        .collect::<Result<_, _>>()?;
    Ok(ProxyOptions {
        listen: args.listen,
        listeners_from: args.listeners_from,
        policies: args.policies,
        policy_yaml: args.policy_yaml,
        allow: args.allow,
        audit_log: args.audit_log,
        resolve: args.resolve,
        dns_listen: args.dns_listen,
        dns_answer: args.dns_answer,
        transparent_listen: args.transparent_listen,
        raw_listen: args.raw_listen,
        floor_extra: args.floor_extra,
        run_id: args.run_id,
        audit_limit: args.audit_limit,
        on_audit_limit: args.on_audit_limit,
        dns_rate: args.dns_rate,
        config_stdin: args.config_stdin,
        secrets,
        upstream_ca: args.upstream_ca,
        ca_cert_out: args.ca_cert_out,
    })
}
