//! TLS toward the upstream of an inspected host: the proxy originates it, and verifies the
//! upstream against the bundled Mozilla roots (webpki-roots: the proxy image has no system
//! store) plus any `--upstream-ca`. A certificate that does not verify ends the attempt as
//! `failed`/`upstream_tls`; nothing is ever sent to an unverified upstream.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::target::HostName;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamCaError {
    #[error("{name}: no PEM certificate in it")]
    Empty { name: String },
    #[error("{name}: not a PEM certificate: {detail}")]
    Pem { name: String, detail: String },
    #[error("{name}: not a usable CA certificate: {detail}")]
    Unusable { name: String, detail: String },
    #[error("cannot build the upstream TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// Extra CA certificates trusted for upstream TLS, parsed from PEM text; `name` is the
/// source shown in errors (a file name).
pub fn parse_upstream_ca(
    name: &str,
    pem: &str,
) -> Result<Vec<CertificateDer<'static>>, UpstreamCaError> {
    let mut certificates = Vec::new();
    for item in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        certificates.push(item.map_err(|error| UpstreamCaError::Pem {
            name: name.to_owned(),
            detail: error.to_string(),
        })?);
    }
    if certificates.is_empty() {
        return Err(UpstreamCaError::Empty {
            name: name.to_owned(),
        });
    }
    let mut probe = RootCertStore::empty();
    for certificate in &certificates {
        probe
            .add(certificate.clone())
            .map_err(|error| UpstreamCaError::Unusable {
                name: name.to_owned(),
                detail: error.to_string(),
            })?;
    }
    Ok(certificates)
}

/// The upstream TLS client: Mozilla roots + `extra`, HTTP/1.1 by ALPN.
pub(crate) fn client_config(
    extra: &[CertificateDer<'static>],
) -> Result<Arc<ClientConfig>, UpstreamCaError> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for certificate in extra {
        roots.add(certificate.clone())?;
    }
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// TLS over an already connected (and gate-checked) TCP stream, verified for `host`.
pub(crate) async fn connect_tls(
    config: &Arc<ClientConfig>,
    host: &HostName,
    stream: TcpStream,
) -> std::io::Result<TlsStream<TcpStream>> {
    let name = ServerName::try_from(host.as_str().to_owned())
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidInput, error))?;
    TlsConnector::from(config.clone())
        .connect(name, stream)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_ca_files_must_hold_pem_certificates() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        assert_eq!(parse_upstream_ca("ca.pem", &pem).unwrap().len(), 1);
        assert!(matches!(
            parse_upstream_ca("ca.pem", "hello"),
            Err(UpstreamCaError::Empty { .. })
        ));
        assert!(
            parse_upstream_ca(
                "ca.pem",
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
            )
            .is_err()
        );
        assert!(client_config(&parse_upstream_ca("ca.pem", &pem).unwrap()).is_ok());
    }
}
