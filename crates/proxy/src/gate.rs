//! The one decision pipeline every door calls: tripwire → classify target → policy →
//! resolve once → floor on every address → connect to a checked address → audit.
//!
//! Doors only turn what a client sent into a [`Target`] and a port (and for a request read
//! in clear, its head); everything that decides is here, so a CONNECT, a plain request, an
//! inspected request, a transparent connection and a DNS query can never disagree about a
//! host. A DNS question is judged by [`Gate::judge_dns`], a plain forwarded request by
//! [`Gate::judge_request`], a request inside an inspected connection by
//! [`Gate::judge_inspected_request`], a connection by [`Gate::decide`] or [`Gate::open`].
//! One tripwire ([`Gate::tripwire`]) looks for the run's secrets and placeholders in all of
//! them. A refused name is never resolved: resolution happens only after the policy allowed
//! the name, and the connection goes to an address that passed the floor, never to a fresh
//! lookup.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::request::Parts;
use tokio::net::TcpStream;

use crate::audit::{Attempt, AuditSink, Outcome, RequestFields};
use crate::floor::Floor;
use crate::policy::{Credential, Decision, PolicySet, Reason, Verdict};
use crate::refusal::Refusal;
use crate::resolve::Resolver;
use crate::secrets::Placeholders;
use crate::target::{HostName, Target};
use crate::text::visible;

/// Methods no `methods:` rule can admit on an inspected host: CONNECT would open a tunnel
/// past the judgement (to wherever the upstream lets it), TRACE and TRACK make the upstream
/// echo the request — with the real credential in it — back to the sandbox.
const NEVER_FORWARDED_METHODS: [&str; 3] = ["CONNECT", "TRACE", "TRACK"];

/// What the tripwire found in what the sandbox sent.
#[derive(Debug, PartialEq, Eq)]
enum Misuse<'a> {
    /// A real secret, in one of its forms: the sandbox should never hold it.
    Secret(&'a str),
    /// The placeholder of a secret whose host this is not.
    Placeholder(&'a str),
}

impl Misuse<'_> {
    /// What the refusal of a request tells the client (a name, never a value).
    fn request_sentence(&self) -> String {
        match self {
            Misuse::Secret(name) => format!(
                "the request carries the real secret {name}, which the sandbox should never hold"
            ),
            Misuse::Placeholder(name) => format!(
                "the request carries the placeholder of {name}, which belongs to another host"
            ),
        }
    }

    /// What the refusal of a connection to a host name tells the client.
    fn name_sentence(&self) -> String {
        match self {
            Misuse::Secret(name) => format!("the host name carries the real secret of {name}"),
            Misuse::Placeholder(name) => format!("the host name carries the placeholder of {name}"),
        }
    }
}

/// The gate's answer to one DNS question, the attempt's record filled in.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DnsVerdict {
    /// Allowed (or report mode), its record's place held: answered with an address.
    Answer(HostName),
    /// The sandbox's own host name: answered with no records, and not recorded.
    OwnName,
    /// Refused (the tripwire, an IP literal, no host name, the policy): NXDOMAIN.
    NoSuchName,
    /// Allowed, but the audit budget has no place left for its record: REFUSED.
    NoRecordPlace,
}

/// A request inside an inspected connection that the gate let through, its record's place
/// held: the policy's decision, and the credential the upstream gets (on its host only).
#[derive(Debug)]
pub(crate) struct InspectedRequest {
    pub(crate) decision: Decision,
    pub(crate) credential: Option<Credential>,
}

pub(crate) struct Gate {
    policy: PolicySet,
    /// The private ranges plus the proxy's `--floor-extra` ranges.
    floor: Floor,
    resolver: Resolver,
    connect_timeout: Duration,
    audit: AuditSink,
    /// The run's placeholders and real secrets, the tripwire's matcher: a name, a DNS
    /// question or a request head that carries one is refused (`credential_misuse`) before
    /// the policy is asked, so a name carrying one is never resolved either.
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

    /// The tripwire, the one every door's check goes through: a real secret of the run (in
    /// any of its forms) in any of `texts`, else the placeholder of a secret other than
    /// `own_secret` (the secret of the target's own credential, which its requests carry).
    /// `texts` is asked twice, so that a secret in a later text wins over a placeholder in
    /// an earlier one.
    fn tripwire<'t, I>(&self, texts: impl Fn() -> I, own_secret: Option<&str>) -> Option<Misuse<'_>>
    where
        I: Iterator<Item = &'t [u8]>,
    {
        let secrets = self.placeholders.secret_forms();
        if let Some(name) = texts().find_map(|text| secrets.find(text)) {
            return Some(Misuse::Secret(name));
        }
        self.placeholders
            .find(texts(), own_secret)
            .map(Misuse::Placeholder)
    }

    /// The tripwire over a request's head (its request line's target and every header
    /// name and value), refused as `credential_misuse`.
    fn check_request_head(
        &self,
        attempt: &mut Attempt,
        parts: &Parts,
        own_secret: Option<&str>,
    ) -> Result<(), Refusal> {
        // A run without secrets has nothing to find: no text to build for every request.
        if self.placeholders.is_empty() {
            return Ok(());
        }
        let uri = parts.uri.to_string();
        let texts = || {
            std::iter::once(uri.as_bytes()).chain(
                parts
                    .headers
                    .iter()
                    .flat_map(|(name, value)| [name.as_str().as_bytes(), value.as_bytes()]),
            )
        };
        match self.tripwire(texts, own_secret) {
            None => Ok(()),
            Some(misuse) => {
                attempt.set_outcome(Outcome::Blocked, Reason::CredentialMisuse, None);
                Err(Refusal::of(attempt, misuse.request_sentence()))
            }
        }
    }

    /// One DNS question, `raw` its labels joined by dots and `name` what the door made of
    /// them (None: they spell no host name), `own_name` the sandbox's own host name. In
    /// this order: the tripwire over the raw bytes (before the name must even parse), the
    /// name's class, the sandbox's own name, the policy, the record's place in the budget.
    pub(crate) fn judge_dns(
        &self,
        attempt: &mut Attempt,
        raw: &[u8],
        name: Option<Target>,
        own_name: Option<&HostName>,
    ) -> DnsVerdict {
        if self.tripwire(|| std::iter::once(raw), None).is_some() {
            attempt.set_outcome(Outcome::Blocked, Reason::CredentialMisuse, None);
            return DnsVerdict::NoSuchName;
        }
        let name = match name {
            Some(Target::Name(name)) => name,
            Some(Target::Ip(_)) => {
                attempt.set_outcome(Outcome::Blocked, Reason::IpLiteral, None);
                return DnsVerdict::NoSuchName;
            }
            None => {
                attempt.set_outcome(Outcome::Blocked, Reason::BadRequest, None);
                return DnsVerdict::NoSuchName;
            }
        };
        if own_name == Some(&name) {
            attempt.forget();
            return DnsVerdict::OwnName;
        }
        attempt.host = name.to_string();
        let decision = self.policy.decide_name(&name);
        attempt.set_decision(&decision);
        if decision.verdict == Verdict::Block {
            return DnsVerdict::NoSuchName;
        }
        // An answer lets the sandbox connect: not without its record's place in the budget.
        if !attempt.hold_record() {
            return DnsVerdict::NoRecordPlace;
        }
        DnsVerdict::Answer(name)
    }

    /// One plain request forwarded as it is (its host not inspected), `path` its path
    /// without the query: the record gets its method and path, then the tripwire over its
    /// head, the policy's verdict on `target:port` with its record's place
    /// ([`Gate::decide`]), and the TLS-port rule ([`Gate::refuse_plain_on_tls_port`]).
    pub(crate) fn judge_request(
        &self,
        attempt: &mut Attempt,
        target: &Target,
        port: u16,
        parts: &Parts,
        path: &str,
    ) -> Result<Decision, Refusal> {
        attempt.request = Some(RequestFields::new(
            visible(parts.method.as_str()),
            visible(path),
        ));
        if let Err(refusal) = self.check_request_head(attempt, parts, None) {
            attempt.host = target.to_string();
            attempt.port = Some(port);
            return Err(refusal);
        }
        let decision = self.decide(attempt, target, port)?;
        self.refuse_plain_on_tls_port(attempt, port)?;
        Ok(decision)
    }

    /// One request to an inspected host (inside its tunnel, or plain HTTP to it), `path`
    /// its path without the query: the record gets its method, path and credential, then
    /// the tripwire (a real secret anywhere, another host's placeholder) before any rule —
    /// a real secret in the path must not be refused as a path — then the policy on the
    /// host, the methods no rule admits, the policy on method and path, and the record's
    /// place in the budget.
    pub(crate) fn judge_inspected_request(
        &self,
        attempt: &mut Attempt,
        name: &HostName,
        port: u16,
        parts: &Parts,
        path: &str,
    ) -> Result<InspectedRequest, Refusal> {
        let target = Target::Name(name.clone());
        let credential = self
            .policy
            .inspection(&target, port)
            .and_then(|inspection| inspection.credential)
            .cloned();
        attempt.host = name.to_string();
        attempt.port = Some(port);
        let mut request = RequestFields::new(visible(parts.method.as_str()), visible(path));
        request.credential = credential.as_ref().map(|c| c.secret.clone());
        attempt.request = Some(request);
        let own_secret = credential.as_ref().map(|c| c.secret.as_str());
        self.check_request_head(attempt, parts, own_secret)?;
        let host_decision = self.policy.decide(&target, port);
        if host_decision.verdict == Verdict::Block {
            attempt.set_decision(&host_decision);
            return Err(Refusal::of(attempt, String::new()));
        }
        // In any letter case: methods are case-sensitive, but an upstream may fold them, and
        // `trace` echoing the real key is TRACE echoing it.
        if NEVER_FORWARDED_METHODS
            .iter()
            .any(|never| never.eq_ignore_ascii_case(parts.method.as_str()))
        {
            attempt.set_outcome(Outcome::Blocked, Reason::MethodNotAllowed, None);
            return Err(Refusal::of(
                attempt,
                format!(
                    "{} is never sent to an inspected host",
                    visible(parts.method.as_str())
                ),
            ));
        }
        let decision = self
            .policy
            .decide_request(&target, port, parts.method.as_str(), path);
        attempt.set_decision(&decision);
        if decision.verdict == Verdict::Block {
            let detail = match decision.reason {
                Reason::BadRequest => {
                    "the path could mean two things (dot segment, encoded `/` or `\\`, or `//`)"
                }
                _ => "",
            };
            return Err(Refusal::of(attempt, detail.to_owned()));
        }
        if !attempt.hold_record() {
            return Err(Refusal::of(attempt, String::new()));
        }
        Ok(InspectedRequest {
            decision,
            credential,
        })
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
        if let Some(Misuse::Secret(secret)) = self.tripwire(|| std::iter::once(raw), None) {
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
            && let Some(misuse) = self.tripwire(|| std::iter::once(name.as_str().as_bytes()), None)
        {
            attempt.set_outcome(Outcome::Blocked, Reason::CredentialMisuse, None);
            return Err(Refusal::of(attempt, misuse.name_sentence()));
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use egress_core::audit::{AuditRecord, Kind, OnAuditLimit};
    use egress_core::policy::Policy;
    use egress_core::secret::placeholder_from;
    use tokio::sync::mpsc::UnboundedReceiver;

    use super::*;
    use crate::audit::AuditDestination;
    use crate::resolve::NameServers;
    use crate::secret_forms::SecretForms;

    /// `api.example.com:443` inspected, with a credential and method and path rules;
    /// `*.open.test` allowed on every lookup; nothing else.
    const POLICY: &str = "version: 1\nname: gate\nallow:\n  - host: api.example.com\n    ports: [443]\n    methods: [GET, TRACE]\n    paths: [\"/v1/**\"]\n  - host: \"*.open.test\"\n    ports: [80]\ncredentials:\n  - host: api.example.com\n    port: 443\n    secret: API_KEY\n";
    const SECRET: &str = "sk-live-0123456789abcdef";
    const CLIENT: &str = "127.0.0.1:40000";

    fn api_placeholder() -> String {
        placeholder_from([0xa1; 16])
    }

    fn other_placeholder() -> String {
        placeholder_from([0xb2; 16])
    }

    /// A gate over [`POLICY`] that resolves and connects nowhere, with the run's secrets
    /// `API_KEY` (the credential's) and `OTHER_KEY` (another host's), and the receiver of
    /// its records.
    fn gate() -> (Gate, UnboundedReceiver<AuditRecord>) {
        let (policy, _) = Policy::from_yaml("gate.yaml", POLICY).expect("the policy parses");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let audit = AuditSink::start(
            AuditDestination::Channel(tx),
            None,
            "gate",
            u64::MAX,
            OnAuditLimit::Reserve,
        )
        .expect("a channel sink starts");
        let (api, other) = (api_placeholder(), other_placeholder());
        let forms = SecretForms::new([
            ("API_KEY", SECRET, api.as_str()),
            ("OTHER_KEY", "sk-other-fedcba9876543210", other.as_str()),
        ]);
        let placeholders =
            Placeholders::new([("API_KEY", api.as_str()), ("OTHER_KEY", other.as_str())])
                .with_secrets(Arc::new(forms));
        let gate = Gate::new(
            PolicySet::from(policy),
            Floor::with_extra(Vec::new()),
            Resolver::new(Vec::new(), &NameServers::None, Duration::from_secs(1)),
            Duration::from_secs(1),
            audit,
        )
        .with_placeholders(placeholders);
        (gate, rx)
    }

    fn new_attempt(gate: &Gate, kind: Kind) -> Attempt {
        let client: SocketAddr = CLIENT.parse().expect("an address");
        Attempt::new(gate.audit(), kind, Some(client))
    }

    /// A DNS question for `raw`, as the DNS door hands it over.
    fn judge_dns(gate: &Gate, raw: &str, own_name: Option<&HostName>) -> (DnsVerdict, Attempt) {
        let mut attempt = new_attempt(gate, Kind::Dns);
        let target = Target::parse_host(raw).ok();
        let verdict = gate.judge_dns(&mut attempt, raw.as_bytes(), target, own_name);
        (verdict, attempt)
    }

    fn head(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut request = http::Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).expect("a request").into_parts().0
    }

    fn api() -> HostName {
        HostName::parse("api.example.com").expect("a name")
    }

    /// An inspected request to `api.example.com:443`, its path as the inspect door splits it.
    fn judge_inspected(gate: &Gate, parts: &Parts) -> (Result<InspectedRequest, Refusal>, Attempt) {
        let mut attempt = new_attempt(gate, Kind::Http);
        let path = parts.uri.path().to_owned();
        let judged = gate.judge_inspected_request(&mut attempt, &api(), 443, parts, &path);
        (judged, attempt)
    }

    #[test]
    fn an_allowed_name_is_answered_with_its_record_held() {
        let (gate, _records) = gate();
        let (verdict, attempt) = judge_dns(&gate, "www.open.test", None);
        assert_eq!(
            verdict,
            DnsVerdict::Answer(HostName::parse("www.open.test").expect("a name"))
        );
        assert_eq!(
            (attempt.decision, attempt.reason, attempt.host.as_str()),
            (Outcome::Allowed, Reason::Rule, "www.open.test")
        );
    }

    #[test]
    fn a_name_the_policy_does_not_allow_is_no_such_name() {
        let (gate, _records) = gate();
        let (verdict, attempt) = judge_dns(&gate, "elsewhere.test", None);
        assert_eq!(verdict, DnsVerdict::NoSuchName);
        assert_eq!(
            (attempt.decision, attempt.reason),
            (Outcome::Blocked, Reason::NotAllowed)
        );
    }

    #[test]
    fn a_name_carrying_a_placeholder_or_a_secret_is_misuse_though_its_host_is_allowed() {
        let (gate, _records) = gate();
        for label in [
            api_placeholder(),
            api_placeholder().to_uppercase(),
            SECRET.to_owned(),
        ] {
            let (verdict, attempt) = judge_dns(&gate, &format!("{label}.open.test"), None);
            assert_eq!(verdict, DnsVerdict::NoSuchName, "{label}");
            assert_eq!(
                (attempt.decision, attempt.reason),
                (Outcome::Blocked, Reason::CredentialMisuse),
                "{label}"
            );
        }
    }

    #[test]
    fn a_dns_question_that_names_no_host_is_refused_by_its_class() {
        let (gate, _records) = gate();
        let (verdict, attempt) = judge_dns(&gate, "10.0.0.1", None);
        assert_eq!(verdict, DnsVerdict::NoSuchName);
        assert_eq!(attempt.reason, Reason::IpLiteral);
        let mut attempt = new_attempt(&gate, Kind::Dns);
        assert_eq!(
            gate.judge_dns(&mut attempt, b"bad name", None, None),
            DnsVerdict::NoSuchName
        );
        assert_eq!(attempt.reason, Reason::BadRequest);
    }

    #[test]
    fn the_sandboxs_own_name_is_answered_without_a_record() {
        let (gate, mut records) = gate();
        let own = HostName::parse("sandbox-1").expect("a name");
        let (verdict, attempt) = judge_dns(&gate, "sandbox-1", Some(&own));
        assert_eq!(verdict, DnsVerdict::OwnName);
        drop(attempt);
        let (_, refused) = judge_dns(&gate, "elsewhere.test", Some(&own));
        drop(refused);
        // Records arrive in order: the first is the refusal's, so the own name wrote none.
        let record = records.blocking_recv().expect("the refusal's record");
        assert_eq!(record.host, "elsewhere.test");
    }

    #[test]
    fn an_inspected_request_on_an_allowed_method_and_path_gets_its_credential() {
        let (gate, _records) = gate();
        let parts = head(
            "GET",
            "/v1/models?key=1",
            &[("x-api-key", &api_placeholder())],
        );
        let (judged, attempt) = judge_inspected(&gate, &parts);
        let judged = judged.expect("allowed");
        assert_eq!(judged.decision.verdict, Verdict::Allow);
        assert_eq!(
            judged.credential.map(|credential| credential.secret),
            Some("API_KEY".to_owned())
        );
        let fields = attempt.request.as_ref().expect("the request's fields");
        assert_eq!(
            (
                fields.method.as_str(),
                fields.path.as_str(),
                fields.credential.as_deref()
            ),
            ("GET", "/v1/models", Some("API_KEY"))
        );
    }

    #[test]
    fn an_inspected_request_off_its_methods_or_paths_is_refused() {
        let (gate, _records) = gate();
        for (method, uri, reason) in [
            ("POST", "/v1/models", Reason::MethodNotAllowed),
            ("GET", "/v2/models", Reason::PathNotAllowed),
            // Listed in `methods`, and still never sent: the upstream would echo the key.
            ("TRACE", "/v1/models", Reason::MethodNotAllowed),
            ("GET", "/v1/../admin", Reason::BadRequest),
        ] {
            let (judged, attempt) = judge_inspected(&gate, &head(method, uri, &[]));
            let refusal = judged.expect_err(uri);
            assert_eq!(
                (refusal.outcome, refusal.reason, attempt.reason),
                (Outcome::Blocked, reason, reason),
                "{method} {uri}"
            );
        }
    }

    #[test]
    fn the_tripwire_refuses_a_real_secret_or_another_hosts_placeholder_before_any_rule() {
        let (gate, _records) = gate();
        let other = other_placeholder();
        let bearer = format!("Bearer {SECRET}");
        for (uri, headers) in [
            // Another host's placeholder, on a path no rule allows either.
            ("/v2/models", vec![("x-api-key", other.as_str())]),
            // The real secret, in a header of the credential's own host.
            ("/v1/models", vec![("authorization", bearer.as_str())]),
            // The real secret in the path.
            (&*format!("/v1/{SECRET}"), vec![]),
        ] {
            let parts = head("GET", uri, &headers);
            let (judged, attempt) = judge_inspected(&gate, &parts);
            let refusal = judged.expect_err(uri);
            assert_eq!(refusal.reason, Reason::CredentialMisuse, "{uri}");
            assert_eq!(attempt.reason, Reason::CredentialMisuse, "{uri}");
        }
    }

    #[test]
    fn a_forwarded_request_is_judged_by_the_tripwire_and_the_policy() {
        let (gate, _records) = gate();
        let target = Target::parse_host("www.open.test").expect("a name");
        let judge = |parts: &Parts| {
            let mut attempt = new_attempt(&gate, Kind::Http);
            let judged = gate.judge_request(&mut attempt, &target, 80, parts, parts.uri.path());
            (judged, attempt)
        };
        let (judged, attempt) = judge(&head("PUT", "/anything", &[]));
        assert_eq!(judged.expect("allowed").verdict, Verdict::Allow);
        assert_eq!(
            attempt
                .request
                .as_ref()
                .map(|fields| fields.method.as_str()),
            Some("PUT")
        );
        // A plain request carries no credential: every placeholder is another host's.
        let (judged, attempt) = judge(&head("GET", "/", &[("x-api-key", &api_placeholder())]));
        assert_eq!(judged.expect_err("misuse").reason, Reason::CredentialMisuse);
        assert_eq!(
            (attempt.host.as_str(), attempt.port),
            ("www.open.test", Some(80))
        );
        let (judged, _) = judge(&head("GET", "/", &[]));
        assert!(judged.is_ok());
        let mut attempt = new_attempt(&gate, Kind::Http);
        let elsewhere = Target::parse_host("elsewhere.test").expect("a name");
        let refusal = gate
            .judge_request(&mut attempt, &elsewhere, 80, &head("GET", "/", &[]), "/")
            .expect_err("not allowed");
        assert_eq!(refusal.reason, Reason::NotAllowed);
    }
}
