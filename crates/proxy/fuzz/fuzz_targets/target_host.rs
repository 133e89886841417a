//! Target classification: `Target::parse_host`, `Target::parse_authority`, `HostName::parse`
//! on any string, and what the policy makes of the result.
//!
//! Properties: a classified target re-normalises to itself (from its canonical text, with a
//! trailing dot, in upper case); a name is canonical ASCII within the DNS limits; an IPv6
//! result is never an IPv4-mapped address; error messages never carry a character that must
//! be escaped for a person; an address is never allowed by a host rule.
#![no_main]

use std::net::IpAddr;
use std::sync::OnceLock;

use egress_core::policy::{Policy, PolicySet, Verdict};
use egress_core::target::{HostName, MAX_LABEL_BYTES, MAX_NAME_BYTES, Target};
use egress_core::text::must_escape;
use libfuzzer_sys::fuzz_target;

fn policy() -> &'static PolicySet {
    static POLICY: OnceLock<PolicySet> = OnceLock::new();
    POLICY.get_or_init(|| {
        let flags = ["*.example.com".to_owned(), "api.example.org:443".to_owned()];
        PolicySet::from(Policy::from_allow_flags(&flags).expect("valid flags"))
    })
}

fn assert_printable(text: &str) {
    assert!(
        !text.chars().any(must_escape),
        "text for a person holds a raw control character: {text:?}"
    );
}

fn check_target(target: &Target) {
    let shown = target.to_string();
    assert_printable(&shown);
    assert_eq!(Target::parse_host(&shown).as_ref(), Ok(target), "{shown:?}");
    match target {
        Target::Name(name) => {
            let name = name.as_str();
            assert!(name.len() <= MAX_NAME_BYTES, "{name:?}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)),
                "{name:?}"
            );
            assert!(
                name.split('.')
                    .all(|label| !label.is_empty() && label.len() <= MAX_LABEL_BYTES),
                "{name:?}"
            );
            let dotted = format!("{name}.");
            assert_eq!(
                Target::parse_host(&dotted).as_ref(),
                Ok(target),
                "{dotted:?}"
            );
            let upper = name.to_ascii_uppercase();
            assert_eq!(Target::parse_host(&upper).as_ref(), Ok(target), "{upper:?}");
        }
        Target::Ip(ip) => {
            if let IpAddr::V6(v6) = ip {
                assert!(
                    v6.to_ipv4_mapped().is_none(),
                    "mapped address kept as IPv6: {v6}"
                );
            }
            // A host rule never allows an address, whatever it spells.
            let decision = policy().decide(target, 443);
            assert_ne!(
                decision.verdict,
                Verdict::Allow,
                "{target} allowed by a host rule"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    match Target::parse_host(raw) {
        Ok(target) => {
            check_target(&target);
            let as_name = HostName::parse(raw);
            match &target {
                Target::Name(name) => assert_eq!(as_name.as_ref(), Ok(name)),
                Target::Ip(_) => assert!(as_name.is_err()),
            }
            // ASCII case never changes what a host is.
            if raw.is_ascii() {
                let upper = raw.to_ascii_uppercase();
                assert_eq!(
                    Target::parse_host(&upper).as_ref(),
                    Ok(&target),
                    "{upper:?}"
                );
            }
        }
        Err(error) => assert_printable(&error.to_string()),
    }
    for default_port in [None, Some(443)] {
        match Target::parse_authority(raw, default_port) {
            Ok((target, port)) => {
                assert_ne!(port, 0);
                check_target(&target);
                let again = format!("{target}:{port}");
                assert_eq!(
                    Target::parse_authority(&again, None),
                    Ok((target.clone(), port)),
                    "{again:?}"
                );
            }
            Err(error) => assert_printable(&error.to_string()),
        }
    }
});
