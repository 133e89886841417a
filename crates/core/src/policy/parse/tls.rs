//! The `tls:` section: which CONNECT ports must carry TLS, and how strictly its SNI is
//! checked.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::super::{SniCheck, TlsSettings};
use super::Findings;
use super::ports::parse_port_list;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    ports: Option<Spanned<Vec<Spanned<String>>>>,
    sni: Option<Spanned<String>>,
}

pub(super) fn build_tls(findings: &mut Findings<'_>, raw: RawTls) -> TlsSettings {
    let mut tls = TlsSettings::default();
    if let Some(ports) = raw.ports {
        // An empty list is meaningful here: no port requires TLS.
        if ports.value.is_empty() {
            tls.ports.clear();
        } else if let Some(parsed) = parse_port_list(findings, &ports, "tls.ports") {
            tls.ports = parsed;
        }
    }
    if let Some(sni) = raw.sni {
        match sni.value.as_str() {
            "strict" => tls.sni = SniCheck::Strict,
            "off" => tls.sni = SniCheck::Off,
            other => findings.error_at(
                &sni.referenced,
                format!("unknown `sni` check `{other}`; use `strict` or `off`"),
            ),
        }
    }
    tls
}
