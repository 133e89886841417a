//! `proxy`: the proxy alone (what runs in the proxy container, and `egress-sandbox proxy`).
//! Checks everything before binding, prints one readiness line on stdout once every
//! listener is bound, then serves until SIGTERM or SIGINT.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use egress_core::audit::{DEFAULT_AUDIT_LIMIT, OnAuditLimit};
use egress_core::floor;
use egress_core::handoff::{Handoff, ReadError};
use egress_core::pin::parse_pin;
use egress_core::policy::{Diagnostic, Policy, PolicyError, PolicySet};
use egress_core::secret::{Secret, SecretValue, new_placeholder};
use egress_core::upstream_ca::parse_upstream_ca;
use egress_proxy::{
    AuditDestination, BoundProxy, CredentialConfig, DEFAULT_DNS_RATE, HandoffError, ProxyConfig,
    ProxyError,
};

use crate::Failure;

/// Everything the proxy is started with, as its flags give it: the library's arguments (the
/// helper's `proxy` mode takes those only) or the `egress-sandbox proxy` command's flags.
/// Values are checked by [`run`], each error naming its flag.
#[derive(Debug)]
pub struct ProxyOptions {
    /// `--listen ADDR`: the explicit proxy listener; required unless `listeners_from`.
    pub listen: Option<String>,
    /// `--listeners-from PATH`: bind nothing, take every door passed to a socket made here.
    pub listeners_from: Option<PathBuf>,
    /// `-p FILE`: policy files.
    pub policies: Vec<PathBuf>,
    /// `--policy-yaml NAME=YAML`: inline policies.
    pub policy_yaml: Vec<String>,
    /// `--allow HOST[:PORT]`.
    pub allow: Vec<String>,
    /// `--audit-log FILE|-`: where audit records go (`-`: stdout).
    pub audit_log: String,
    /// `--resolve NAME=IP` pins.
    pub resolve: Vec<String>,
    /// `--dns-listen ADDR`.
    pub dns_listen: Option<String>,
    /// `--dns-answer IP`.
    pub dns_answer: Option<String>,
    /// `--transparent-listen ADDR`.
    pub transparent_listen: Vec<String>,
    /// `--raw-listen ADDR`.
    pub raw_listen: Vec<String>,
    /// `--floor-extra CIDR`.
    pub floor_extra: Vec<String>,
    /// `--run-id ID`.
    pub run_id: Option<String>,
    /// `--audit-limit N` (at least 1).
    pub audit_limit: u64,
    /// `--on-audit-limit`.
    pub on_audit_limit: OnAuditLimit,
    /// `--dns-rate N` (at least 1).
    pub dns_rate: u32,
    /// `--config-stdin`: read the run's handoff line from stdin before binding.
    pub config_stdin: bool,
    /// `--secret` values, read by the front end: (name, value).
    pub secrets: Vec<(String, SecretValue)>,
    /// `--upstream-ca FILE`.
    pub upstream_ca: Vec<PathBuf>,
    /// `--ca-cert-out FILE`.
    pub ca_cert_out: Option<PathBuf>,
}

impl Default for ProxyOptions {
    /// No listener, no policy; the defaults of `egress-sandbox proxy`'s flags otherwise.
    fn default() -> Self {
        ProxyOptions {
            listen: None,
            listeners_from: None,
            policies: Vec::new(),
            policy_yaml: Vec::new(),
            allow: Vec::new(),
            audit_log: "-".to_owned(),
            resolve: Vec::new(),
            dns_listen: None,
            dns_answer: None,
            transparent_listen: Vec::new(),
            raw_listen: Vec::new(),
            floor_extra: Vec::new(),
            run_id: None,
            audit_limit: DEFAULT_AUDIT_LIMIT,
            on_audit_limit: OnAuditLimit::Reserve,
            dns_rate: DEFAULT_DNS_RATE,
            config_stdin: false,
            secrets: Vec::new(),
            upstream_ca: Vec::new(),
            ca_cert_out: None,
        }
    }
}

/// Checks `options`, binds, says it is ready, serves until SIGTERM or SIGINT.
pub fn run(options: ProxyOptions) -> Result<ExitCode, Failure> {
    let ca_cert_out = options.ca_cert_out.clone();
    let config = config_from_options(options)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Failure::context("cannot start the async runtime"))?;
    runtime.block_on(serve(config, ca_cert_out))
}

/// Exit status of a proxy that served, but could not write its whole audit log: what it
/// let through is not all on record, which its caller must not take for a clean end.
const AUDIT_INCOMPLETE: u8 = 1;

async fn serve(config: ProxyConfig, ca_cert_out: Option<PathBuf>) -> Result<ExitCode, Failure> {
    // Watched before the ready line: a SIGTERM right after it must still end in a clean
    // shutdown (tunnel records, the end record), not the default action.
    let stop = StopSignals::watch()?;
    let listeners_from = config.listeners_from.clone();
    let bound = BoundProxy::bind(config).await.map_err(in_flags)?;
    let ready = ready_line(&bound, listeners_from.as_deref(), ca_cert_out.as_deref())?;
    {
        // The run side waits for exactly this line before it starts the sandbox; it must
        // precede every audit record on stdout.
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{ready}")
            .and_then(|()| stdout.flush())
            .map_err(Failure::context("cannot write the readiness line"))?;
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

/// The readiness line: where the proxy listens (or takes its doors from), the run CA's
/// certificate when some host is inspected (also written to `ca_cert_out`), the secrets'
/// placeholders.
fn ready_line(
    bound: &BoundProxy,
    listeners_from: Option<&std::path::Path>,
    ca_cert_out: Option<&std::path::Path>,
) -> Result<serde_json::Value, Failure> {
    let addrs = bound.local_addrs();
    let mut ready = match listeners_from {
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
        if let Some(path) = ca_cert_out {
            std::fs::write(path, ca).map_err(Failure::context(format!(
                "cannot write the CA certificate to {}",
                path.display()
            )))?;
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
    Ok(ready)
}

/// A bind error as this command's user gave it: the library names the `dns_answer` field,
/// the command its flag.
fn in_flags(error: ProxyError) -> Failure {
    match error {
        ProxyError::PassedNeedsDnsAnswer => Failure::new(
            "a proxy whose listeners are passed in needs an address to answer DNS with (--dns-answer IPv4)",
        ),
        ProxyError::DnsAnswer(listen) => Failure::new(format!(
            "the DNS responder on {listen} needs an address to answer with (--dns-answer IPv4) when it listens on an unspecified or IPv6 address"
        )),
        ProxyError::DnsAnswerV6(ip) => Failure::new(format!(
            "--dns-answer {ip} must be an IPv4 address: the sandbox has no IPv6"
        )),
        other => Failure::from_error(&other),
    }
}

/// SIGTERM and SIGINT, watched from creation on.
struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn watch() -> Result<StopSignals, Failure> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())
                .map_err(Failure::context("cannot watch SIGTERM"))?,
            interrupt: signal(SignalKind::interrupt())
                .map_err(Failure::context("cannot watch SIGINT"))?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

/// The handoff line from stdin, when `--config-stdin` asks for one.
fn read_handoff(config_stdin: bool) -> Result<Handoff, Failure> {
    if !config_stdin {
        return Ok(Handoff::default());
    }
    Handoff::read_line(std::io::stdin().lock()).map_err(|error| match &error {
        ReadError::Version { .. } => Failure::new(format!(
            "{error} (this proxy is {}: run the helper built with the library that runs it)",
            crate::version_line()
        )),
        _ => Failure::from_error(&error),
    })
}

/// Turns the options and the run's handoff into a checked configuration; nothing is bound
/// yet. The handoff's policies load with the options'; the rest it merges
/// ([`ProxyConfig::merge_handoff`]).
fn config_from_options(mut options: ProxyOptions) -> Result<ProxyConfig, Failure> {
    let mut handoff = read_handoff(options.config_stdin)?;
    options.allow.append(&mut handoff.allow);
    let credentials = credential_config(&mut options)?;
    let inline: Vec<(String, String)> = options
        .policy_yaml
        .iter()
        .map(|raw| {
            raw.split_once('=')
                .map(|(name, yaml)| (name.to_owned(), yaml.to_owned()))
                .ok_or_else(|| Failure::new("--policy-yaml needs NAME=YAML"))
        })
        .chain(
            std::mem::take(&mut handoff.policies)
                .into_iter()
                .map(|p| Ok((p.file, p.yaml))),
        )
        .collect::<Result<_, _>>()?;
    let policy = load_policies(&options.policies, &inline, &options.allow)?;
    let listen = match &options.listen {
        Some(raw) => parse_addr("--listen", raw)?,
        // Nothing is bound when the doors are passed in (--listeners-from).
        None => SocketAddr::from(([0, 0, 0, 0], 0)),
    };
    let mut config = ProxyConfig::new(policy, listen);
    config.listeners_from = options.listeners_from.clone();
    config.credentials = credentials;
    set_listeners(&mut config, &options)?;
    config.audit = match options.audit_log.as_str() {
        "-" => AuditDestination::Stdout,
        path => AuditDestination::File(PathBuf::from(path)),
    };
    config.run_id = options.run_id;
    config.audit_limit = options.audit_limit;
    config.on_audit_limit = options.on_audit_limit;
    config.dns_rate = options.dns_rate;
    config.floor_extra = options
        .floor_extra
        .iter()
        .map(|raw| {
            floor::parse_extra(raw).map_err(|error| Failure::new(format!("--floor-extra: {error}")))
        })
        .collect::<Result<_, _>>()?;
    config.pins = options
        .resolve
        .iter()
        .map(|raw| parse_pin(raw).map_err(|error| Failure::new(format!("--resolve {error}"))))
        .collect::<Result<_, _>>()?;
    config
        .merge_handoff(handoff, new_placeholder)
        .map_err(|error| match error {
            // The handoff's pins and secrets join the flags'; an error names the flag.
            HandoffError::Pin(error) => Failure::new(format!("--resolve {error}")),
            HandoffError::SecretTwice(name) => {
                Failure::new(format!("--secret {name} is given twice"))
            }
            other => Failure::from_error(&other),
        })?;
    Ok(config)
}

/// The DNS responder's address and answer, the transparent listeners and raw doors.
fn set_listeners(config: &mut ProxyConfig, options: &ProxyOptions) -> Result<(), Failure> {
    config.dns_listen = options
        .dns_listen
        .as_deref()
        .map(|raw| parse_addr("--dns-listen", raw))
        .transpose()?;
    config.dns_answer = options
        .dns_answer
        .as_deref()
        .map(|raw| {
            raw.parse::<IpAddr>()
                .map_err(|_| Failure::new(format!("--dns-answer {raw:?}: expected an IP address")))
        })
        .transpose()?;
    config.transparent_listen = options
        .transparent_listen
        .iter()
        .map(|raw| parse_addr("--transparent-listen", raw))
        .collect::<Result<_, _>>()?;
    config.raw_listen = options
        .raw_listen
        .iter()
        .map(|raw| parse_addr("--raw-listen", raw))
        .collect::<Result<_, _>>()?;
    Ok(())
}

/// Secrets (each with a fresh placeholder) and upstream CAs (`--upstream-ca` files).
fn credential_config(options: &mut ProxyOptions) -> Result<CredentialConfig, Failure> {
    let mut secrets: Vec<Secret> = Vec::new();
    for (name, value) in std::mem::take(&mut options.secrets) {
        if secrets.iter().any(|other| other.name == name) {
            return Err(Failure::new(format!("--secret {name} is given twice")));
        }
        secrets.push(Secret {
            name,
            value,
            placeholder: new_placeholder(),
        });
    }
    let mut certificates = Vec::new();
    for path in &options.upstream_ca {
        let text = std::fs::read_to_string(path).map_err(Failure::context(format!(
            "--upstream-ca {}: cannot read",
            path.display()
        )))?;
        certificates.extend(
            parse_upstream_ca(&path.display().to_string(), &text)
                .map_err(|error| Failure::from_error(&error))?,
        );
    }
    let mut credentials = CredentialConfig::new(secrets);
    credentials.upstream_ca = certificates;
    Ok(credentials)
}

/// Policies from `-p` files, inline `(file name, YAML)` pairs (`--policy-yaml`, the handoff)
/// and `--allow` flags, merged. Warnings go to stderr; any error refuses to start.
fn load_policies(
    files: &[PathBuf],
    inline: &[(String, String)],
    allow: &[String],
) -> Result<PolicySet, Failure> {
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
        return Err(Failure::new(
            "invalid policy (the errors above); the proxy did not start",
        ));
    }
    if policies.is_empty() {
        tracing::warn!("no policy given: every attempt will be refused");
    }
    PolicySet::merge(policies)
        .map_err(|conflicts| Failure::new(format!("invalid policy: {conflicts}")))
}

/// Listen addresses are IP:port only: no name lookup happens in this binary.
fn parse_addr(flag: &str, raw: &str) -> Result<SocketAddr, Failure> {
    raw.parse().map_err(|_| {
        Failure::new(format!(
            "{flag} {raw:?}: expected IP:PORT, e.g. 127.0.0.1:3128 or [::1]:3128"
        ))
    })
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
