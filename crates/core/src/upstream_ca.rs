//! Extra CA certificates trusted for upstream TLS (`--upstream-ca`, the handoff's
//! `upstream_ca`), checked where they are given so a bad file fails before a run starts.

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// Why a PEM text is not a usable set of CA certificates; `name` is its source (a file name).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamCaError {
    /// The file holds no PEM certificate.
    #[error("{name}: no PEM certificate in it")]
    Empty {
        /// The file's name.
        name: String,
    },
    /// The file is not valid PEM.
    #[error("{name}: not a PEM certificate: {detail}")]
    Pem {
        /// The file's name.
        name: String,
        /// What the PEM parser reports.
        detail: String,
    },
    /// A certificate in the file cannot serve as a trust anchor.
    #[error("{name}: not a usable CA certificate: {detail}")]
    Unusable {
        /// The file's name.
        name: String,
        /// Why it cannot.
        detail: String,
    },
}

/// Extra CA certificates trusted for upstream TLS, parsed from PEM text; each must be one
/// a TLS client can take as a trust anchor.
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
    for certificate in &certificates {
        webpki::anchor_from_trusted_cert(certificate).map_err(|error| {
            UpstreamCaError::Unusable {
                name: name.to_owned(),
                detail: error.to_string(),
            }
        })?;
    }
    Ok(certificates)
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
    }
}
