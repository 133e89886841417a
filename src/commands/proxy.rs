//! `egress-sandbox proxy`: the proxy alone, on any host (also what runs in the proxy
//! container). Checks everything before binding, prints one readiness line on stdout once
//! every listener is bound, then serves until SIGTERM or SIGINT.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use egress_core::floor;
use egress_core::handoff::Handoff;
use egress_core::pin::parse_pin;
use egress_core::policy::{Diagnostic, Policy, PolicyError, PolicySet};
use egress_core::secret::Secret;
use egress_core::upstream_ca::parse_upstream_ca;
use egress_proxy::HandoffError;
use egress_proxy::audit::AuditDestination;
use egress_proxy::secrets::CredentialConfig;
use egress_proxy::{BoundProxy, ProxyConfig, ProxyError};

use crate::cli::ProxyArgs;
use egress_core::secret::new_placeholder;
use egress_serve::secret_flags::read_secret_flag;

pub fn run(args: ProxyArgs) -> Result<ExitCode> {
    let ca_cert_out = args.ca_cert_out.clone();
    let config = config_from_args(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config, ca_cert_out))
}

/// Exit status of a proxy that served, but could not write its whole audit log: what it
/// let through is not all on record, which its caller must not take for a clean end.
const AUDIT_INCOMPLETE: u8 = 1;

async fn serve(config: ProxyConfig, ca_cert_out: Option<PathBuf>) -> Result<ExitCode> {
    // Watched before the ready line: a SIGTERM right after it must still end in a clean
    // shutdown (tunnel records, the end record), not the default action.
    let stop = StopSignals::watch()?;
    let listeners_from = config.listeners_from.clone();
    let bound = BoundProxy::bind(config).await.map_err(in_flags)?;
    let addrs = bound.local_addrs();
    let mut ready = match &listeners_from {
        Some(path) => serde_json::json!({
            "ready": true,
            "listeners_from": path.display().to_string(),
        }),
        None => serde_json::json!({
            "ready": true,
            "listen": addrs.listen.to_string(),
            "dns": addrs.dns.map(|a| a.to_string()),
            "transparent": addrs.transparent.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "raw": addrs.raw.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }),
    };
    if let Some(ca) = bound.ca_certificate_pem() {
        ready["ca"] = serde_json::Value::from(ca);
        if let Some(path) = &ca_cert_out {
            std::fs::write(path, ca).with_context(|| {
                format!("cannot write the CA certificate to {}", path.display())
            })?;
        }
    }
    let placeholders = bound.placeholders();
    if !placeholders.is_empty() {
        ready["placeholders"] = serde_json::Value::Object(
            placeholders
                .into_iter()
                .map(|(name, placeholder)| (name, serde_json::Value::from(placeholder)))
                .collect(),
        );
    }
    {
        // The run side waits for exactly this line before it starts the sandbox; it must
        // precede every audit record on stdout.
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{ready}").context("cannot write the readiness line")?;
        stdout.flush().context("cannot write the readiness line")?;
    }
    let running = bound.start();
    stop.wait().await;
    tracing::info!("shutting down");
    let audit = running.audit_sink();
    running.shutdown().await;
    match audit.write_errors() {
        0 => Ok(ExitCode::SUCCESS),
        errors => {
            eprintln!(
                "egress-sandbox: error: the audit log is incomplete: {errors} write(s) failed (see the errors above); `audit verify` shows where lines are missing"
            );
            Ok(ExitCode::from(AUDIT_INCOMPLETE))
        }
    }
}

/// A bind error as this command's user gave it: the library names the `dns_answer` field,
/// the command its flag.
fn in_flags(error: ProxyError) -> anyhow::Error {
    match error {
        ProxyError::PassedNeedsDnsAnswer => anyhow!(
            "a proxy whose listeners are passed in needs an address to answer DNS with (--dns-answer IPv4)"
        ),
        ProxyError::DnsAnswer(listen) => anyhow!(
            "the DNS responder on {listen} needs an address to answer with (--dns-answer IPv4) when it listens on an unspecified or IPv6 address"
        ),
        ProxyError::DnsAnswerV6(ip) => {
            anyhow!("--dns-answer {ip} must be an IPv4 address: the sandbox has no IPv6")
        }
        other => other.into(),
    }
}

/// SIGTERM and SIGINT, watched from creation on.
struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn watch() -> Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

/// Turns the flags and the run's handoff into a checked configuration; nothing is bound
/// yet. The handoff's policies load with the flags'; the rest it merges
/// ([`ProxyConfig::merge_handoff`]).
fn config_from_args(mut args: ProxyArgs) -> Result<ProxyConfig> {
    let mut handoff = if args.config_stdin {
        Handoff::read_line(std::io::stdin().lock())?
    } else {
        Handoff::default()
    };
    args.allow.append(&mut handoff.allow);
    let credentials = credential_config(&args)?;
    let inline: Vec<(String, String)> = args
        .policy_yaml
        .iter()
        .map(|raw| {
            raw.split_once('=')
                .map(|(name, yaml)| (name.to_owned(), yaml.to_owned()))
                .ok_or_else(|| anyhow!("--policy-yaml needs NAME=YAML"))
        })
        .chain(
            std::mem::take(&mut handoff.policies)
                .into_iter()
                .map(|p| Ok((p.file, p.yaml))),
        )
        .collect::<Result<_>>()?;
    let policy = load_policies(&args.policies, &inline, &args.allow)?;
    let listen = match &args.listen {
        Some(raw) => parse_addr("--listen", raw)?,
        // Nothing is bound when the doors are passed in (--listeners-from).
        None => SocketAddr::from(([0, 0, 0, 0], 0)),
    };
    let mut config = ProxyConfig::new(policy, listen);
    config.listeners_from = args.listeners_from.clone();
    config.credentials = credentials;
    config.dns_listen = args
        .dns_listen
        .as_deref()
        .map(|raw| parse_addr("--dns-listen", raw))
        .transpose()?;
    config.dns_answer = args
        .dns_answer
        .as_deref()
        .map(|raw| {
            raw.parse::<IpAddr>()
                .map_err(|_| anyhow!("--dns-answer {raw:?}: expected an IP address"))
        })
        .transpose()?;
    config.transparent_listen = args
        .transparent_listen
        .iter()
        .map(|raw| parse_addr("--transparent-listen", raw))
        .collect::<Result<_>>()?;
    config.raw_listen = args
        .raw_listen
        .iter()
        .map(|raw| parse_addr("--raw-listen", raw))
        .collect::<Result<_>>()?;
    config.audit = match args.audit_log.as_str() {
        "-" => AuditDestination::Stdout,
        path => AuditDestination::File(PathBuf::from(path)),
    };
    config.run_id = args.run_id;
    config.audit_limit = args.audit_limit;
    config.on_audit_limit = args.on_audit_limit;
    config.dns_rate = args.dns_rate;
    config.floor_extra = args
        .floor_extra
        .iter()
        .map(|raw| floor::parse_extra(raw).map_err(|error| anyhow!("--floor-extra: {error}")))
        .collect::<Result<_>>()?;
    config.pins = args
        .resolve
        .iter()
        .map(|raw| parse_pin(raw).map_err(|error| anyhow!("--resolve {error}")))
        .collect::<Result<_>>()?;
    config
        .merge_handoff(handoff, new_placeholder)
        .map_err(|error| match error {
            // The handoff's pins and secrets join the flags'; an error names the flag.
            HandoffError::Pin(error) => anyhow!("--resolve {error}"),
            HandoffError::SecretTwice(name) => anyhow!("--secret {name} is given twice"),
            other => other.into(),
        })?;
    Ok(config)
}

/// Secrets (`--secret` flags, each with a fresh placeholder) and upstream CAs
/// (`--upstream-ca` files).
fn credential_config(args: &ProxyArgs) -> Result<CredentialConfig> {
    let mut secrets: Vec<Secret> = Vec::new();
    for raw in &args.secrets {
        let (name, value) = read_secret_flag(raw)?;
        if secrets.iter().any(|other| other.name == name) {
            bail!("--secret {name} is given twice");
        }
        secrets.push(Secret {
            name,
            value,
            placeholder: new_placeholder(),
        });
    }
    let mut certificates = Vec::new();
    for path in &args.upstream_ca {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--upstream-ca {}: cannot read", path.display()))?;
        certificates.extend(parse_upstream_ca(&path.display().to_string(), &text)?);
    }
    Ok(CredentialConfig {
        secrets,
        upstream_ca: certificates,
        ..CredentialConfig::default()
    })
}

/// Policies from `-p` files, inline `(file name, YAML)` pairs (`--policy-yaml`, the handoff)
/// and `--allow` flags, merged. Warnings go to stderr; any error refuses to start.
fn load_policies(
    files: &[PathBuf],
    inline: &[(String, String)],
    allow: &[String],
) -> Result<PolicySet> {
    let mut policies = Vec::new();
    let mut failures = Vec::new();
    let mut accept = |loaded: Result<(Policy, Vec<Diagnostic>), PolicyError>| match loaded {
        Ok((policy, warnings)) => {
            for warning in warnings {
                // Quotes policy text: shown with its controls as visible escapes.
                eprintln!("{}", egress_core::text::visible(&warning.to_string()));
            }
            policies.push(policy);
        }
        Err(error) => failures.push(error.to_string()),
    };
    for file in files {
        accept(Policy::load(file));
    }
    for (name, yaml) in inline {
        accept(Policy::from_yaml(name, yaml));
    }
    if !allow.is_empty() {
        accept(Policy::from_allow_flags(allow).map(|policy| (policy, Vec::new())));
    }
    if !failures.is_empty() {
        // One diagnostic per line, as `run` and `policy check` print them (joined into the
        // error, their line breaks showed as `\x0a`).
        for line in failures.iter().flat_map(|failure| failure.lines()) {
            eprintln!("{}", egress_core::text::visible(line));
        }
        bail!("invalid policy (the errors above); the proxy did not start");
    }
    if policies.is_empty() {
        tracing::warn!("no policy given: every attempt will be refused");
    }
    PolicySet::merge(policies).map_err(|conflicts| anyhow!("invalid policy: {conflicts}"))
}

/// Listen addresses are IP:port only: no name lookup happens in this binary.
fn parse_addr(flag: &str, raw: &str) -> Result<SocketAddr> {
    raw.parse()
        .map_err(|_| anyhow!("{flag} {raw:?}: expected IP:PORT, e.g. 127.0.0.1:3128 or [::1]:3128"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_must_be_ip_and_port() {
        assert!(parse_addr("--listen", "127.0.0.1:3128").is_ok());
        assert!(parse_addr("--listen", "[::1]:3128").is_ok());
        assert!(parse_addr("--listen", "localhost:3128").is_err());
        assert!(parse_addr("--listen", "127.0.0.1").is_err());
    }

    #[test]
    fn inline_policies_keep_any_file_name() {
        let inline = [("a=b.yaml".to_owned(), "version: 1\n".to_owned())];
        let policy = load_policies(&[], &inline, &[]).unwrap();
        assert!(!policy.name().is_empty(), "merged: {}", policy.name());
    }
}
