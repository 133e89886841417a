//! The run CA: born in the proxy, able to sign only the inspected host names, and gone
//! before the first connection.
//!
//! [`RunCa::new`] makes a fresh ECDSA P-256 key, a CA certificate that is `CA:TRUE,
//! pathlen 0` with critical X.509 Name Constraints permitting exactly the inspected names
//! (and excluding every IP address), then one leaf per inspected name — and drops the CA
//! key. Only the CA *certificate* ever leaves the process (the ready line). Nothing can be
//! signed after start-up, whatever happens to the process later.
//!
//! Validity is bounded by the run: not before one minute ago (clock skew between the
//! containers is nil, they share a kernel), not after `lifetime` minus that minute, so the
//! whole span never exceeds `lifetime` (the run's time limit plus one hour).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    NameConstraints,
};
use rustls::ServerConfig;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::target::HostName;
use crate::units::MAX_CA_LIFETIME;

/// How far back `not_before` is set.
const BACKDATE: Duration = Duration::from_secs(60);

/// Why the run CA, or a leaf it signs for an inspected host, could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaError {
    /// Generating a key or signing a certificate failed.
    #[error("cannot create the run CA")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the leaf for an inspected host.
    #[error("cannot build the TLS configuration for {host}")]
    Tls {
        /// The inspected host the leaf is for.
        host: String,
        /// What rustls said.
        source: rustls::Error,
    },
    /// The lifetime asked for (`CredentialConfig::ca_lifetime`) is out of bounds.
    #[error(
        "the run CA's lifetime must be longer than {BACKDATE:?} and at most {}",
        humantime::format_duration(MAX_CA_LIFETIME)
    )]
    Lifetime,
    /// The clock is so far off that no certificate date can hold the validity.
    #[error("the run CA's validity from this clock's time is past any date a certificate holds")]
    Dates,
}

/// `notBefore` and `notAfter` of a CA made at `now` that lives `lifetime`: from one minute
/// ago, the whole span `lifetime`. A lifetime of at most a minute, or above
/// [`MAX_CA_LIFETIME`], is refused; the dates are computed without overflow whatever
/// `now` and `lifetime` are.
pub(crate) fn validity(
    now: time::OffsetDateTime,
    lifetime: Duration,
) -> Result<(time::OffsetDateTime, time::OffsetDateTime), CaError> {
    if lifetime <= BACKDATE || lifetime > MAX_CA_LIFETIME {
        return Err(CaError::Lifetime);
    }
    let span = time::Duration::try_from(lifetime).map_err(|_| CaError::Lifetime)?;
    let backdate = time::Duration::try_from(BACKDATE).map_err(|_| CaError::Lifetime)?;
    let not_before = now.checked_sub(backdate).ok_or(CaError::Dates)?;
    let not_after = not_before.checked_add(span).ok_or(CaError::Dates)?;
    Ok((not_before, not_after))
}

/// The CA certificate and a ready TLS server configuration per inspected name.
pub(crate) struct RunCa {
    certificate_pem: String,
    #[cfg(test)]
    certificate_der: rustls::pki_types::CertificateDer<'static>,
    servers: HashMap<HostName, Arc<ServerConfig>>,
}

impl std::fmt::Debug for RunCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunCa")
            .field("hosts", &self.servers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl RunCa {
    /// A CA for exactly `hosts` (not empty), valid for at most `lifetime` from one minute ago.
    pub(crate) fn new(hosts: &[HostName], lifetime: Duration) -> Result<RunCa, CaError> {
        let (not_before, not_after) = validity(time::OffsetDateTime::now_utc(), lifetime)?;

        let ca_key = KeyPair::generate()?;
        let ca_params = ca_params(hosts, not_before, not_after);
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let mut servers = HashMap::with_capacity(hosts.len());
        for host in hosts {
            let leaf_key = KeyPair::generate()?;
            let params = leaf_params(host.as_str(), not_before, not_after)?;
            let leaf = params.signed_by(&leaf_key, &issuer)?;
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
            let chain = vec![leaf.der().clone(), ca_cert.der().clone()];
            let mut config = ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|source| CaError::Tls {
                host: host.to_string(),
                source,
            })?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|source| CaError::Tls {
                host: host.to_string(),
                source,
            })?;
            // HTTP/1.1 only: every request is judged on its own, as on the plain door.
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            servers.insert(host.clone(), Arc::new(config));
        }
        // `issuer` (and with it the CA key) is dropped here: nothing more can be signed.
        drop(issuer);
        Ok(RunCa {
            certificate_pem: ca_cert.pem(),
            #[cfg(test)]
            certificate_der: ca_cert.der().clone(),
            servers,
        })
    }

    /// The CA certificate, PEM: what the sandbox adds to its trust bundle.
    pub(crate) fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    #[cfg(test)]
    pub(crate) fn certificate_der(&self) -> &rustls::pki_types::CertificateDer<'static> {
        &self.certificate_der
    }

    /// The TLS server configuration presenting `host`'s leaf, if `host` is inspected.
    pub(crate) fn server_config(&self, host: &HostName) -> Option<Arc<ServerConfig>> {
        self.servers.get(host).cloned()
    }
}

/// The CA certificate's parameters: `CA:TRUE, pathlen 0`, may sign certificates (and
/// CRLs) only, Name Constraints (rcgen marks them critical) permitting exactly `hosts` as DNS
/// names and excluding every IPv4 and IPv6 address.
pub(crate) fn ca_params(
    hosts: &[HostName],
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "egress-sandbox run CA");
    name.push(DnType::OrganizationName, "egress-sandbox");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = not_before;
    params.not_after = not_after;
    params.name_constraints = Some(NameConstraints {
        permitted_subtrees: hosts
            .iter()
            .map(|host| GeneralSubtree::DnsName(host.as_str().to_owned()))
            .collect(),
        excluded_subtrees: vec![
            GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])),
            GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])),
        ],
    });
    params
}

/// A server leaf for `host`: not a CA, server authentication only.
pub(crate) fn leaf_params(
    host: &str,
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(vec![host.to_owned()])?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, host);
    params.distinguished_name = name;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before;
    params.not_after = not_after;
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

#[cfg(test)]
mod tests;
