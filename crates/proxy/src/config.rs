//! Everything the proxy needs, typed and checked before a port is bound.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::audit::AuditDestination;
use crate::policy::PolicySet;
use crate::resolve::NameServers;
use crate::target::HostName;
use egress_core::handoff::Handoff;
use egress_core::secret::{Secret, SecretValue};

/// DNS queries per second per client unless [`ProxyConfig::dns_rate`] says otherwise.
pub use crate::dns_rate::DEFAULT_DNS_RATE;

/// The proxy's configuration. Build it with [`ProxyConfig::new`] (and a run's handoff with
/// [`ProxyConfig::merge_handoff`]) and adjust the public fields; every bound has a default
/// that suits a sandboxed run. `#[non_exhaustive]`: a new setting, with its default, is not
/// a breaking change.
#[non_exhaustive]
pub struct ProxyConfig {
    /// The merged policy every door asks.
    pub policy: PolicySet,
    /// The explicit proxy listener (CONNECT and absolute-form HTTP).
    pub listen: SocketAddr,
    /// The DNS responder (UDP and TCP on the same address), if any.
    pub dns_listen: Option<SocketAddr>,
    /// The address the DNS responder gives for allowed names: where the transparent
    /// listeners are, so programs that ignore proxy variables still reach the proxy.
    pub dns_answer: Option<IpAddr>,
    /// Transparent listeners: TLS routed by SNI, HTTP by `Host`.
    pub transparent_listen: Vec<SocketAddr>,
    /// Raw doors: any TCP protocol, the target named by the address the
    /// connection arrived on (the DNS responder's per-name answer,
    /// `name_addresses`) and the listener's port. With any raw door (bound here or
    /// passed in), the DNS responder answers each allowed name with an address of its own.
    pub raw_listen: Vec<SocketAddr>,
    /// Take every door from the sandbox instead of binding `listen`, `dns_listen` and
    /// `transparent_listen`: a Unix socket at this path receives one pass of listening
    /// sockets ([`crate::PassedListeners`]). `dns_answer` must then be given.
    pub listeners_from: Option<std::path::PathBuf>,
    /// Where audit records go.
    pub audit: AuditDestination,
    /// Written into every audit record's `run`.
    pub run_id: Option<String>,
    /// Attempt records written per run; past it one `limit` record, then refusals are only
    /// counted (the `end` record's `dropped`). At least 1.
    pub audit_limit: u64,
    /// What new egress gets past `audit_limit`: records from a reserve of its own, or
    /// refused. Either way nothing leaves without its record.
    pub on_audit_limit: crate::audit::OnAuditLimit,
    /// DNS queries per second per client, every loopback address being one client (a run's
    /// sandbox is one client, whichever of its loopback addresses it sends from), for
    /// refusals and for first lookups of allowed names each (repeats within the answer's
    /// TTL are free and unrecorded); over it a query is answered REFUSED, counted as
    /// dropped, and gets no record. At least 1.
    pub dns_rate: u32,
    /// Names pinned to addresses ([`egress_core::pin::parse_pin`]); the floor still applies
    /// to them.
    pub pins: Vec<(HostName, IpAddr)>,
    /// Where unpinned names are resolved.
    pub name_servers: NameServers,
    /// Ranges added to the private-address floor ([`crate::floor::parse_extra`]): the engine host's own
    /// addresses and the egress gateway, which lead back to the machine running the sandbox
    /// although they may be public. Refused as `private_address` unless a `cidr` allow rule
    /// covers them.
    pub floor_extra: Vec<ipnet::IpNet>,
    /// Bounds on what happens before a tunnel or request is established.
    pub limits: ProxyLimits,
    /// Secret values, upstream CAs and the run CA's lifetime, for inspected hosts.
    pub credentials: crate::secrets::CredentialConfig,
    /// The sandbox's own host name, when its resolv.conf names this proxy: a lookup of it
    /// is answered NOERROR with no records and writes no audit record (its address is in
    /// the sandbox's /etc/hosts; glibc asks DNS only for what that file lacks, AAAA). It
    /// names the sandbox itself, leads nowhere, and Docker's resolver answered it so.
    pub sandbox_hostname: Option<HostName>,
}

/// Bounds on everything that happens before a tunnel or request is established. After it,
/// nothing but the run's own limits: a tunnel lives until either side closes or shutdown.
/// Start from [`ProxyLimits::default`] and adjust the fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProxyLimits {
    /// A client must send a complete request head within this time, so idle or slow
    /// connections (slowloris) cannot hold connection slots. Also the keep-alive idle time.
    pub head_timeout: Duration,
    /// Raw door connections open at once; each also holds a place under `max_connections`.
    /// Beyond it a raw connection is reset and one `limit` record is written.
    pub max_raw_connections: usize,
    /// A raw door connection on which no byte moved either way for this long is closed.
    pub raw_idle_timeout: Duration,
    /// Largest request head accepted (request line + headers); larger ones get 431.
    pub max_head_bytes: usize,
    /// Connections served at once over all TCP listeners; beyond it a connection gets 503
    /// (explicit listener) or is closed, and one `limit` record is written.
    pub max_connections: usize,
    /// A tunnel on a TLS port must deliver its ClientHello within this time.
    pub client_hello_timeout: Duration,
    /// Largest ClientHello accepted. Post-quantum key shares make real ones ~2 KiB; 16 KiB
    /// is one full TLS record plus room.
    pub max_client_hello_bytes: usize,
    /// Connecting to an allowed upstream must succeed within this time (else 504 `timeout`).
    pub connect_timeout: Duration,
    /// One DNS lookup, retries included, must finish within this time (else 502).
    pub resolve_timeout: Duration,
    /// Relay buffer per direction. Larger buffers mean fewer system calls per byte.
    pub relay_buffer_bytes: usize,
    /// On shutdown, open connections get this long to finish writing before they are cut.
    pub shutdown_grace: Duration,
    /// Idle upstream connections kept for plain HTTP requests to the same target and port
    /// (0 = none): reuse saves a connect per small request. `ab` at 1,000 clients opened a
    /// new upstream connection for 39 % of its requests with 64 kept, 11 % with 256, 7 % with
    /// 1,024 (3.4 % at 100 clients with 64).
    pub max_idle_upstreams: usize,
    /// An idle upstream connection older than this is not reused; servers close idle
    /// connections themselves after a few seconds, and a dead one would cost a retry.
    pub upstream_idle_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            head_timeout: Duration::from_secs(10),
            max_raw_connections: 256,
            raw_idle_timeout: Duration::from_secs(600),
            max_head_bytes: 64 * 1024,
            max_connections: 1024,
            client_hello_timeout: Duration::from_secs(10),
            max_client_hello_bytes: 16 * 1024 + 512,
            connect_timeout: Duration::from_secs(10),
            resolve_timeout: Duration::from_secs(5),
            relay_buffer_bytes: 256 * 1024,
            shutdown_grace: Duration::from_millis(500),
            max_idle_upstreams: 256,
            upstream_idle_timeout: Duration::from_secs(4),
        }
    }
}

impl ProxyConfig {
    /// Merges a run's [`Handoff`] into this configuration, built from the proxy's own
    /// settings: the handoff's pins follow the configuration's, its secrets come first
    /// (with the placeholders it names, `new_placeholder()` for the others), its CAs are
    /// added, its run id, audit limit, CA lifetime and sandbox host name replace the
    /// configuration's, and unless the doors are passed in ([`ProxyConfig::listeners_from`])
    /// each of its `door_ports` becomes a transparent listener at `listen`'s address.
    ///
    /// The handoff's `policies` and `allow` are not merged here: the policy is built before
    /// the configuration ([`ProxyConfig::new`]), so the caller loads them with its own.
    pub fn merge_handoff(
        &mut self,
        handoff: Handoff,
        mut new_placeholder: impl FnMut() -> String,
    ) -> Result<(), HandoffError> {
        for pin in &handoff.pins {
            self.pins
                .push(egress_core::pin::check_pin(&pin.name, pin.addr).map_err(HandoffError::Pin)?);
        }
        if let Some(run_id) = handoff.run_id {
            self.run_id = Some(run_id);
        }
        self.merge_credentials(
            handoff.secrets,
            handoff.placeholders,
            handoff.upstream_ca,
            &mut new_placeholder,
        )?;
        if let Some(seconds) = handoff.ca_lifetime_s {
            let lifetime = Duration::from_secs(seconds);
            if lifetime > crate::units::MAX_CA_LIFETIME {
                return Err(HandoffError::CaLifetime(seconds));
            }
            self.credentials.ca_lifetime = lifetime;
        }
        match handoff.audit_limit {
            Some(0) => return Err(HandoffError::AuditLimitZero),
            Some(limit) => self.audit_limit = limit,
            None => {}
        }
        if let Some(on_limit) = handoff.on_audit_limit {
            self.on_audit_limit = on_limit;
        }
        if let Some(raw) = handoff.sandbox_hostname {
            let name = HostName::parse(&raw)
                .map_err(|error| HandoffError::SandboxHostname { raw, error })?;
            self.sandbox_hostname = Some(name);
        }
        if self.listeners_from.is_none() {
            for port in handoff.door_ports {
                let door = SocketAddr::new(self.listen.ip(), port);
                if !self.transparent_listen.contains(&door) {
                    self.transparent_listen.push(door);
                }
            }
        }
        Ok(())
    }

    fn merge_credentials(
        &mut self,
        handed: egress_core::handoff::Secrets,
        mut placeholders: BTreeMap<String, String>,
        upstream_ca: Vec<egress_core::handoff::InlineCertificate>,
        new_placeholder: &mut impl FnMut() -> String,
    ) -> Result<(), HandoffError> {
        let own = &mut self.credentials.secrets;
        let mut secrets = Vec::with_capacity(handed.0.len() + own.len());
        for (name, value) in handed.0 {
            if own.iter().any(|secret| secret.name == name) {
                return Err(HandoffError::SecretTwice(name));
            }
            let placeholder = placeholders
                .remove(&name)
                .unwrap_or_else(&mut *new_placeholder);
            secrets.push(Secret {
                name,
                value: SecretValue::new(value),
                placeholder,
            });
        }
        for mut secret in own.drain(..) {
            if let Some(placeholder) = placeholders.remove(&secret.name) {
                secret.placeholder = placeholder;
            }
            secrets.push(secret);
        }
        *own = secrets;
        for inline in upstream_ca {
            self.credentials
                .upstream_ca
                .extend(egress_core::upstream_ca::parse_upstream_ca(
                    &inline.file,
                    &inline.pem,
                )?);
        }
        Ok(())
    }

    /// A proxy on `listen` with `policy`, audit records on stdout, no DNS responder, no
    /// transparent listeners, the system resolver, default limits.
    pub fn new(policy: PolicySet, listen: SocketAddr) -> Self {
        ProxyConfig {
            policy,
            listen,
            dns_listen: None,
            dns_answer: None,
            transparent_listen: Vec::new(),
            raw_listen: Vec::new(),
            listeners_from: None,
            audit: AuditDestination::Stdout,
            run_id: None,
            audit_limit: crate::audit::DEFAULT_AUDIT_LIMIT,
            on_audit_limit: crate::audit::OnAuditLimit::default(),
            dns_rate: crate::dns_rate::DEFAULT_DNS_RATE,
            pins: Vec::new(),
            name_servers: NameServers::System,
            floor_extra: Vec::new(),
            limits: ProxyLimits::default(),
            credentials: crate::secrets::CredentialConfig::default(),
            sandbox_hostname: None,
        }
    }
}

/// Why a handoff could not be read, or not merged into a configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandoffError {
    /// The handoff line could not be read or parsed.
    #[error(transparent)]
    Read(#[from] egress_core::handoff::ReadError),
    /// One of the handoff's `pins`.
    #[error("the run's configuration on stdin has the pin {0}")]
    Pin(egress_core::pin::PinError),
    /// A secret of the handoff that the configuration already has.
    #[error("the secret {0} is given twice: in the run's configuration on stdin and before it")]
    SecretTwice(String),
    /// One of the handoff's inline upstream CAs is not a certificate.
    #[error(transparent)]
    UpstreamCa(#[from] egress_core::upstream_ca::UpstreamCaError),
    /// The handoff's `audit_limit` is 0: a run writes at least one attempt record.
    #[error("the run's configuration on stdin has audit_limit 0; at least 1")]
    AuditLimitZero,
    /// The handoff's `ca_lifetime_s` is above the longest a run CA may live.
    #[error(
        "the run's configuration on stdin has ca_lifetime_s {0}; at most {max} (the longest \
         time limit plus an hour)",
        max = crate::units::MAX_CA_LIFETIME.as_secs()
    )]
    CaLifetime(u64),
    #[error("the run's configuration on stdin has sandbox_hostname {raw:?}: {error}")]
    /// The handoff's `sandbox_hostname` is not a host name.
    SandboxHostname {
        /// The value as handed over.
        raw: String,
        /// Why it is not a host name.
        error: crate::target::TargetError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use egress_core::handoff::{InlineCertificate, Secrets};

    fn config() -> ProxyConfig {
        let policy = crate::policy::Policy::from_allow_flags(&["a.test".into()]).unwrap();
        ProxyConfig::new(PolicySet::from(policy), "10.0.0.2:3128".parse().unwrap())
    }

    fn placeholders() -> impl FnMut() -> String {
        let mut made = 0;
        move || {
            made += 1;
            format!("fresh-placeholder-{made}")
        }
    }

    #[test]
    fn a_handoff_adds_to_the_configuration_and_replaces_its_run_settings() {
        let mut config = config();
        config.pins.push((
            HostName::parse("own.test").unwrap(),
            "127.0.0.2".parse().unwrap(),
        ));
        config.credentials.secrets.push(Secret {
            name: "OWN".into(),
            value: SecretValue::new("own-secret-value".into()),
            placeholder: "own-placeholder-0000".into(),
        });
        let handoff = Handoff {
            pins: vec![egress_core::handoff::Pin {
                name: "handed.test".into(),
                addr: "127.0.0.3".parse().unwrap(),
            }],
            run_id: Some("run-1".into()),
            secrets: Secrets([("HANDED".to_owned(), "handed-secret-value".to_owned())].into()),
            placeholders: [("OWN".to_owned(), "handed-placeholder-00".to_owned())].into(),
            audit_limit: Some(7),
            on_audit_limit: Some(crate::audit::OnAuditLimit::Refuse),
            ca_lifetime_s: Some(60),
            sandbox_hostname: Some("sandbox-1a2b".into()),
            door_ports: vec![8443, 8443],
            ..Handoff::default()
        };
        config.merge_handoff(handoff, placeholders()).unwrap();

        let pins: Vec<String> = config
            .pins
            .iter()
            .map(|(name, _)| name.as_str().to_owned())
            .collect();
        assert_eq!(pins, ["own.test", "handed.test"]);
        assert_eq!(config.run_id.as_deref(), Some("run-1"));
        let secrets: Vec<(&str, &str)> = config
            .credentials
            .secrets
            .iter()
            .map(|secret| (secret.name.as_str(), secret.placeholder.as_str()))
            .collect();
        assert_eq!(
            secrets,
            [
                ("HANDED", "fresh-placeholder-1"),
                ("OWN", "handed-placeholder-00")
            ]
        );
        assert_eq!(config.audit_limit, 7);
        assert_eq!(config.on_audit_limit, crate::audit::OnAuditLimit::Refuse);
        assert_eq!(config.credentials.ca_lifetime, Duration::from_secs(60));
        assert_eq!(config.sandbox_hostname.unwrap().as_str(), "sandbox-1a2b");
        assert_eq!(
            config.transparent_listen,
            ["10.0.0.2:8443".parse().unwrap()]
        );
    }

    /// A run CA lifetime past the longest run is refused at the handoff, naming the field,
    /// before any certificate arithmetic.
    #[test]
    fn a_handoff_ca_lifetime_past_the_longest_run_is_refused() {
        let longest = crate::units::MAX_CA_LIFETIME.as_secs();
        for seconds in [longest + 1, u64::MAX] {
            let handoff = Handoff {
                ca_lifetime_s: Some(seconds),
                ..Handoff::default()
            };
            let error = config().merge_handoff(handoff, placeholders()).unwrap_err();
            assert!(matches!(error, HandoffError::CaLifetime(s) if s == seconds));
            assert!(error.to_string().contains("ca_lifetime_s"), "{error}");
        }
        let handoff = Handoff {
            ca_lifetime_s: Some(longest),
            ..Handoff::default()
        };
        let mut config = config();
        config.merge_handoff(handoff, placeholders()).unwrap();
        assert_eq!(
            config.credentials.ca_lifetime,
            crate::units::MAX_CA_LIFETIME
        );
    }

    #[test]
    fn passed_listeners_take_no_door_ports_from_a_handoff() {
        let mut config = config();
        config.listeners_from = Some("/run/doors.sock".into());
        let handoff = Handoff {
            door_ports: vec![8443],
            ..Handoff::default()
        };
        config.merge_handoff(handoff, placeholders()).unwrap();
        assert!(config.transparent_listen.is_empty());
    }

    #[test]
    fn a_handoff_that_cannot_merge_says_which_field() {
        let merge = |handoff: Handoff| {
            let mut config = config();
            config.credentials.secrets.push(Secret {
                name: "KEY".into(),
                value: SecretValue::new("own-secret-value".into()),
                placeholder: "own-placeholder-0000".into(),
            });
            config.merge_handoff(handoff, placeholders()).unwrap_err()
        };
        let handoff = Handoff {
            audit_limit: Some(0),
            ..Handoff::default()
        };
        assert!(matches!(merge(handoff), HandoffError::AuditLimitZero));
        let handoff = Handoff {
            pins: vec![egress_core::handoff::Pin {
                name: "203.0.113.9".into(),
                addr: "203.0.113.9".parse().unwrap(),
            }],
            ..Handoff::default()
        };
        assert!(matches!(merge(handoff), HandoffError::Pin(_)));
        let handoff = Handoff {
            secrets: Secrets([("KEY".to_owned(), "handed-secret-value".to_owned())].into()),
            ..Handoff::default()
        };
        assert!(matches!(merge(handoff), HandoffError::SecretTwice(name) if name == "KEY"));
        let handoff = Handoff {
            sandbox_hostname: Some("not a name".into()),
            ..Handoff::default()
        };
        assert!(matches!(
            merge(handoff),
            HandoffError::SandboxHostname { .. }
        ));
        let handoff = Handoff {
            upstream_ca: vec![InlineCertificate {
                file: "ca.pem".into(),
                pem: "no certificate".into(),
            }],
            ..Handoff::default()
        };
        assert!(matches!(merge(handoff), HandoffError::UpstreamCa(_)));
    }
}
