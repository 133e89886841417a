//! The one decision pipeline every door calls: classify target → policy → resolve once →
//! floor on every address → connect to a checked address → audit.
//!
//! Doors only turn what a client sent into a [`Target`] and a port; everything that decides
//! is here, so a CONNECT, a plain request, a transparent connection and a DNS query can never
//! disagree about a host. A refused name is never resolved: resolution happens only after the
//! policy allowed the name, and the connection goes to an address that passed the floor,
//! never to a fresh lookup.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::audit::{Attempt, AuditSink, Outcome};
use crate::floor::Floor;
use crate::policy::{Decision, PolicySet, Reason, Verdict};
use crate::refusal::Refusal;
use crate::resolve::Resolver;
use crate::secrets::Placeholders;
use crate::target::Target;

pub(crate) struct Gate {
    policy: PolicySet,
    /// The private ranges plus the proxy's `--floor-extra` ranges.
    floor: Floor,
    resolver: Resolver,
    connect_timeout: Duration,
    audit: AuditSink,
    /// The run's placeholders and real secrets: a name that carries either is refused
    /// (`credential_misuse`) before the policy is asked, so it is never resolved either.
    placeholders: Placeholders,
}

impl Gate {
    pub(crate) fn new(
        policy: PolicySet,
        floor: Floor,
        resolver: Resolver,
        connect_timeout: Duration,
        audit: AuditSink,
    ) -> Self {
        Gate {
            policy,
            floor,
            resolver,
            connect_timeout,
            audit,
            placeholders: Placeholders::default(),
        }
    }

    /// The gate with the run's placeholders for its tripwire.
    pub(crate) fn with_placeholders(mut self, placeholders: Placeholders) -> Self {
        self.placeholders = placeholders;
        self
    }

    pub(crate) fn policy(&self) -> &PolicySet {
        &self.policy
    }

    pub(crate) fn audit(&self) -> &AuditSink {
        &self.audit
    }

    pub(crate) fn placeholders(&self) -> &Placeholders {
        &self.placeholders
    }

    /// Marks `attempt` as malformed (`bad_request`) or `unsupported`, logging `raw` as its
    /// host, and returns the refusal to answer with.
    pub(crate) fn refuse_request(
        &self,
        attempt: &mut Attempt,
        raw: &[u8],
        reason: Reason,
        detail: impl Into<String>,
    ) -> Refusal {
        if attempt.host.is_empty() {
            attempt.set_raw_host(raw);
        }
        // A secret in what could not even be parsed is misuse first: the sandbox holds it.
        if let Some(secret) = self.placeholders.secret_forms().find(raw) {
            attempt.set_outcome(Outcome::Blocked, Reason::CredentialMisuse, None);
            return Refusal::of(
                attempt,
                format!("the request carries the real secret {secret}"),
            );
        }
        attempt.set_outcome(Outcome::Blocked, reason, None);
        Refusal {
            outcome: Outcome::Blocked,
            reason,
            host: attempt.host.clone(),
            detail: detail.into(),
        }
    }

    /// The policy's verdict on `target:port`, recorded in `attempt`, and for an attempt
    /// it lets through, the place of its record in the audit budget
    /// ([`Attempt::hold_record`]): nothing leaves without its record. No I/O.
    pub(crate) fn decide(
        &self,
        attempt: &mut Attempt,
        target: &Target,
        port: u16,
    ) -> Result<Decision, Refusal> {
        let decision = self.verdict(attempt, target, port)?;
        if !attempt.hold_record() {
            return Err(Refusal::of(attempt, String::new()));
        }
        Ok(decision)
    }

    /// The policy's verdict on `target:port`, recorded in `attempt`, holding no place for
    /// its record: for a door that lets nothing through itself (it hands the connection
    /// on, or only records what the kernel refused). No I/O.
    pub(crate) fn verdict(
        &self,
        attempt: &mut Attempt,
        target: &Target,
        port: u16,
    ) -> Result<Decision, Refusal> {
        attempt.host = target.to_string();
        attempt.port = Some(port);
        if let Target::Name(name) = target
            && let Some(secret) = self.placeholders.find([name.as_str().as_bytes()], None)
        {
            attempt.set_outcome(Outcome::Blocked, Reason::CredentialMisuse, None);
            let what = match self
                .placeholders
                .secret_forms()
                .find(name.as_str().as_bytes())
            {
                Some(_) => "real secret",
                None => "placeholder",
            };
            return Err(Refusal::of(
                attempt,
                format!("the host name carries the {what} of {secret}"),
            ));
        }
        let decision = self.policy.decide(target, port);
        attempt.set_decision(&decision);
        if decision.verdict == Verdict::Block {
            return Err(Refusal::of(attempt, String::new()));
        }
        Ok(decision)
    }

    /// Plain (non-TLS) HTTP to a port the policy reserves for TLS is refused as
    /// `sni_mismatch`, exactly like non-TLS bytes in a CONNECT tunnel to that port, so the
    /// doors agree on the TLS-port rule (`tls.ports` with `sni: strict`).
    pub(crate) fn refuse_plain_on_tls_port(
        &self,
        attempt: &mut Attempt,
        port: u16,
    ) -> Result<(), Refusal> {
        if self.policy.reserves_for_tls(port) {
            attempt.set_outcome(Outcome::Blocked, Reason::SniMismatch, None);
            return Err(Refusal::of(
                attempt,
                format!("port {port} is reserved for TLS, and this request is plain HTTP"),
            ));
        }
        Ok(())
    }

    /// The whole pipeline for one attempt: decide, resolve once, check every address, and
    /// connect to the first checked address that answers.
    pub(crate) async fn open(
        &self,
        attempt: &mut Attempt,
        target: &Target,
        port: u16,
    ) -> Result<TcpStream, Refusal> {
        let decision = self.decide(attempt, target, port)?;
        self.connect_decided(attempt, target, port, &decision).await
    }

    /// Resolve → floor → connect for a target the policy already let through. Nothing
    /// connects without its record's place (held by the decision already; checked again so
    /// that no door can skip it).
    pub(crate) async fn connect_decided(
        &self,
        attempt: &mut Attempt,
        target: &Target,
        port: u16,
        decision: &Decision,
    ) -> Result<TcpStream, Refusal> {
        if !attempt.hold_record() {
            return Err(Refusal::of(attempt, String::new()));
        }
        let addresses = match target {
            Target::Ip(ip) => vec![*ip],
            Target::Name(name) => match self.resolver.resolve(name).await {
                Ok(addresses) => addresses,
                Err(error) => {
                    tracing::debug!(%error, "resolution failed");
                    attempt.set_outcome(Outcome::Failed, Reason::ResolveFailed, None);
                    return Err(Refusal::of(attempt, error.to_string()));
                }
            },
        };
        let checked = self.check_addresses(attempt, &addresses, port)?;
        // The attempt keeps the policy's decision (allow rule, or would_block in report mode).
        attempt.set_decision(decision);
        self.connect_checked(attempt, &checked, port).await
    }

    /// Every resolved address goes through the floor and deny rules; only those that pass
    /// may be connected to. None passing refuses the attempt with the first address's reason.
    fn check_addresses(
        &self,
        attempt: &mut Attempt,
        addresses: &[IpAddr],
        port: u16,
    ) -> Result<Vec<IpAddr>, Refusal> {
        let mut passed = Vec::new();
        let mut first_refusal: Option<Decision> = None;
        for &ip in addresses {
            let verdict = self.policy.check_address_against(&self.floor, ip, port);
            if verdict.verdict == Verdict::Block {
                tracing::debug!(%ip, reason = %verdict.reason, "address refused");
                first_refusal.get_or_insert(verdict);
            } else {
                passed.push(ip);
            }
        }
        if passed.is_empty() {
            let verdict = first_refusal.expect("a resolution is never empty");
            attempt.set_decision(&verdict);
            attempt.addr = None;
            // Which addresses goes to the record only, never into the answer: the sandbox
            // has no business learning where an allowed name points inside a network.
            attempt.refused_addrs = addresses.to_vec();
            return Err(Refusal::of(attempt, "the name resolves to such an address"));
        }
        Ok(passed)
    }

    async fn connect_checked(
        &self,
        attempt: &mut Attempt,
        addresses: &[IpAddr],
        port: u16,
    ) -> Result<TcpStream, Refusal> {
        let deadline = tokio::time::Instant::now() + self.connect_timeout;
        let mut failure = (Reason::ConnectFailed, String::new());
        for &ip in addresses {
            let addr = SocketAddr::new(ip, port);
            match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => {
                    // Small requests and TLS handshakes must not wait for Nagle.
                    let _ = stream.set_nodelay(true);
                    attempt.addr = Some(addr);
                    return Ok(stream);
                }
                Ok(Err(error)) => {
                    failure = (
                        Reason::ConnectFailed,
                        format!("connecting to {addr}: {error}"),
                    );
                }
                Err(_) => {
                    failure = (
                        Reason::Timeout,
                        format!(
                            "connecting to {addr} took longer than {:?}",
                            self.connect_timeout
                        ),
                    );
                    break;
                }
            }
        }
        attempt.set_outcome(Outcome::Failed, failure.0, None);
        Err(Refusal::of(attempt, failure.1))
    }
}
