//! The run CA's certificate, read back with an X.509 parser, and its leaves checked by the
//! same verifier clients use (webpki), over a real TLS handshake.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::*;

fn hosts(names: &[&str]) -> Vec<HostName> {
    names.iter().map(|n| HostName::parse(n).unwrap()).collect()
}

fn verifier(ca: &CertificateDer<'static>) -> Arc<rustls::client::WebPkiServerVerifier> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .unwrap()
}

fn verify(
    ca: &CertificateDer<'static>,
    leaf: &CertificateDer<'static>,
    name: &str,
) -> Result<(), rustls::Error> {
    verifier(ca)
        .verify_server_cert(
            leaf,
            &[],
            &ServerName::try_from(name.to_owned()).unwrap(),
            &[],
            UnixTime::now(),
        )
        .map(|_| ())
}

#[test]
fn the_ca_is_pathlen_0_with_critical_name_constraints_for_exactly_the_inspected_hosts() {
    let lifetime = Duration::from_secs(30 + 3600);
    let ca = RunCa::new(&hosts(&["api.openai.com", "api.anthropic.com"]), lifetime).unwrap();
    let (_, cert) = X509Certificate::from_der(ca.certificate_der()).unwrap();

    let basic = cert
        .basic_constraints()
        .unwrap()
        .expect("basic constraints");
    assert!(basic.value.ca);
    assert_eq!(basic.value.path_len_constraint, Some(0));

    let constraints = cert
        .extensions()
        .iter()
        .find(|ext| matches!(ext.parsed_extension(), ParsedExtension::NameConstraints(_)))
        .expect("name constraints present");
    assert!(constraints.critical, "name constraints must be critical");
    let ParsedExtension::NameConstraints(constraints) = constraints.parsed_extension() else {
        unreachable!()
    };
    let mut permitted: Vec<String> = constraints
        .permitted_subtrees
        .as_ref()
        .expect("permitted subtrees")
        .iter()
        .map(|subtree| match &subtree.base {
            GeneralName::DNSName(name) => name.to_string(),
            other => panic!("unexpected permitted subtree {other:?}"),
        })
        .collect();
    permitted.sort();
    assert_eq!(permitted, ["api.anthropic.com", "api.openai.com"]);
    let excluded = constraints.excluded_subtrees.as_ref().expect("excluded");
    assert_eq!(excluded.len(), 2, "every IPv4 and IPv6 address is excluded");
    assert!(
        excluded
            .iter()
            .all(|s| matches!(s.base, GeneralName::IPAddress(_)))
    );

    let validity = cert.validity();
    let span = validity.not_after.timestamp() - validity.not_before.timestamp();
    assert!(span <= lifetime.as_secs() as i64, "span {span}s");
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    assert!(validity.not_before.timestamp() <= now && now < validity.not_after.timestamp());

    assert!(
        ca.certificate_pem()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
}

#[test]
fn a_leaf_for_another_name_from_a_ca_made_the_same_way_does_not_verify() {
    let now = time::OffsetDateTime::now_utc();
    let (not_before, not_after) = (now - BACKDATE, now + Duration::from_secs(3600));
    let key = KeyPair::generate().unwrap();
    let params = ca_params(&hosts(&["api.openai.com"]), not_before, not_after);
    let ca_cert = params.self_signed(&key).unwrap();
    let issuer = Issuer::new(params, key);
    let sign = |name: &str| {
        let leaf_key = KeyPair::generate().unwrap();
        leaf_params(name, not_before, not_after)
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap()
            .der()
            .clone()
    };
    let ca_der = ca_cert.der().clone();
    verify(&ca_der, &sign("api.openai.com"), "api.openai.com").expect("the inspected name");
    let error = verify(&ca_der, &sign("www.google.com"), "www.google.com").unwrap_err();
    assert!(
        format!("{error:?}").contains("NameConstraint") || format!("{error:?}").contains("Other"),
        "{error:?}"
    );
    // An IP address in a leaf is excluded too.
    let ip_leaf = {
        let leaf_key = KeyPair::generate().unwrap();
        leaf_params("203.0.113.7", not_before, not_after)
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap()
            .der()
            .clone()
    };
    assert!(verify(&ca_der, &ip_leaf, "203.0.113.7").is_err());
}

#[tokio::test]
async fn the_run_ca_serves_a_leaf_that_verifies_for_its_host_only() {
    let ca = RunCa::new(&hosts(&["api.example.com"]), Duration::from_secs(7200)).unwrap();
    let server = ca
        .server_config(&HostName::parse("api.example.com").unwrap())
        .unwrap();
    assert!(
        ca.server_config(&HostName::parse("other.example.com").unwrap())
            .is_none()
    );
    assert_eq!(server.alpn_protocols, [b"http/1.1".to_vec()]);

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.certificate_der().clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let (accepted, connected) = tokio::join!(
        acceptor.accept(server_io),
        connector.connect(ServerName::try_from("api.example.com").unwrap(), client_io),
    );
    accepted.expect("server side");
    let connected = connected.expect("the leaf verifies against the run CA");
    let chain = connected.get_ref().1.peer_certificates().unwrap();
    let (_, leaf) = X509Certificate::from_der(&chain[0]).unwrap();
    assert!(!leaf.is_ca());
    let leaf_validity = leaf.validity();
    let (_, ca_cert) = X509Certificate::from_der(ca.certificate_der()).unwrap();
    assert!(leaf_validity.not_after <= ca_cert.validity().not_after);
}

#[test]
fn a_lifetime_shorter_than_the_backdate_is_refused() {
    assert!(matches!(
        RunCa::new(&hosts(&["a.example.com"]), Duration::from_secs(10)),
        Err(CaError::Lifetime)
    ));
}

/// The run CA of `run --timeout 100000000000000h`: refused, not a panic in the date
/// arithmetic; the longest lifetime there is makes a CA valid for exactly that long.
#[test]
fn a_lifetime_past_the_longest_run_is_refused_and_the_longest_is_made() {
    for seconds in [
        crate::units::MAX_CA_LIFETIME.as_secs() + 1,
        100_000_000_000_000 * 3600 + 3600,
        u64::MAX,
    ] {
        let made = RunCa::new(&hosts(&["a.example.com"]), Duration::from_secs(seconds));
        assert!(matches!(made, Err(CaError::Lifetime)), "{seconds}s");
    }
    let longest = crate::units::MAX_CA_LIFETIME;
    let ca = RunCa::new(&hosts(&["a.example.com"]), longest).unwrap();
    let (_, cert) = X509Certificate::from_der(ca.certificate_der()).unwrap();
    let span = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
    assert_eq!(span, longest.as_secs() as i64);
}

#[test]
fn validity_at_the_ends_of_time_is_an_error_not_a_panic() {
    let lifetime = Duration::from_secs(120);
    for now in [
        time::OffsetDateTime::UNIX_EPOCH,
        time::PrimitiveDateTime::MIN.assume_utc(),
    ] {
        let (not_before, not_after) = validity(now, lifetime).unwrap_or((now, now));
        assert!(not_before <= not_after);
    }
    assert!(matches!(
        validity(time::PrimitiveDateTime::MAX.assume_utc(), lifetime),
        Err(CaError::Dates)
    ));
}

#[test]
fn a_ca_that_cannot_be_made_says_its_cause_once() {
    let generate = CaError::from(rcgen::Error::CouldNotParseCertificate);
    let tls = CaError::Tls {
        host: "api.example".into(),
        source: rustls::Error::General("no such suite".into()),
    };
    for error in [&generate, &tls] {
        let cause = std::error::Error::source(error).unwrap().to_string();
        let shown = error.to_string();
        assert!(!shown.contains(&cause), "{shown}");
        let line = egress_core::text::with_causes(error);
        assert_eq!(line, format!("{shown}: {cause}"));
    }
    assert_eq!(
        tls.to_string(),
        "cannot build the TLS configuration for api.example"
    );
}
