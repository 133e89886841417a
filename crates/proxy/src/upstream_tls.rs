//! TLS toward the upstream of an inspected host: the proxy originates it, and verifies the
//! upstream against the bundled Mozilla roots (webpki-roots: the proxy image has no system
//! store) plus any `--upstream-ca`. A certificate that does not verify ends the attempt as
//! `failed`/`upstream_tls`; nothing is ever sent to an unverified upstream.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::target::HostName;

/// The upstream TLS client: Mozilla roots + `extra`, HTTP/1.1 by ALPN.
pub(crate) fn client_config(
    extra: &[CertificateDer<'static>],
) -> Result<Arc<ClientConfig>, rustls::Error> {
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
    fn a_parsed_upstream_ca_builds_a_client_configuration() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        let parsed = egress_core::upstream_ca::parse_upstream_ca("ca.pem", &pem).unwrap();
        assert!(client_config(&parsed).is_ok());
    }
}
