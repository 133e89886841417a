//! Port numbers and port lists, as rules, `tls.ports`, credentials and `--allow` flags
//! write them.

use serde_saphyr::Spanned;

use super::Findings;

/// A port list: each 1–65535, not empty. Repeats are dropped with a warning.
pub(super) fn parse_port_list(
    findings: &mut Findings<'_>,
    ports: &Spanned<Vec<Spanned<String>>>,
    key: &str,
) -> Option<Vec<u16>> {
    if ports.value.is_empty() {
        findings.error_at(
            &ports.referenced,
            format!("`{key}` is empty; omit it for the default, or list ports"),
        );
        return None;
    }
    let mut parsed = Vec::with_capacity(ports.value.len());
    let mut ok = true;
    for port in &ports.value {
        match parse_port(&port.value) {
            Ok(value) if parsed.contains(&value) => {
                findings.warning_at(&port.referenced, format!("port {value} is listed twice"));
            }
            Ok(value) => parsed.push(value),
            Err(message) => {
                findings.error_at(&port.referenced, message);
                ok = false;
            }
        }
    }
    parsed.sort_unstable();
    ok.then_some(parsed)
}

/// One port: decimal digits only (surrounding spaces allowed), 1–65535.
pub(crate) fn parse_port(raw: &str) -> Result<u16, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "port `{}` is not a number in 1–65535",
            raw.escape_default()
        ));
    }
    match trimmed.parse::<u32>() {
        Ok(value @ 1..=65535) => Ok(value as u16),
        _ => Err(format!("port {trimmed} is outside 1–65535")),
    }
}
