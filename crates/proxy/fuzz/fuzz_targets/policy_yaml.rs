//! Policy YAML: `Policy::from_yaml` on any text, then merging and deciding.
//!
//! Properties: every diagnostic is one line `fuzz.yaml:LINE:COL: …` with no character that
//! must be escaped for a person (policies may come from someone else: `policy check` prints
//! them); a rule's host is canonical (it normalises to itself); parsing is deterministic;
//! a parsed policy merges and decides its own hosts without panicking.
#![no_main]

use egress_proxy::fuzzing::host_patterns;
use egress_core::policy::{HostPattern, Policy, PolicySet};
use egress_core::target::HostName;
use egress_core::text::must_escape;
use libfuzzer_sys::fuzz_target;

fn check_diagnostic(line: &str) {
    assert!(line.starts_with("fuzz.yaml:"), "{line:?}");
    assert!(!line.contains('\n'), "a diagnostic spans lines: {line:?}");
    assert!(
        !line.chars().any(must_escape),
        "a diagnostic holds a raw control character: {line:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = Policy::from_yaml("fuzz.yaml", text);
    match &parsed {
        Ok((policy, warnings)) => {
            for warning in warnings {
                check_diagnostic(&warning.to_string());
            }
            assert!(
                !policy.name().chars().any(must_escape),
                "{:?}",
                policy.name()
            );
            for pattern in host_patterns(policy) {
                let (HostPattern::Exact(name) | HostPattern::Wildcard(name)) = &pattern;
                let normalised = HostName::parse(name).map(|n| n.as_str().to_owned());
                assert_eq!(normalised.as_ref(), Ok(name), "rule host is not canonical");
            }
            let set = PolicySet::from(policy.clone());
            for pattern in host_patterns(policy) {
                if let HostPattern::Exact(name) = pattern {
                    let name = HostName::parse(&name).expect("canonical");
                    let _ = set.decide_name(&name);
                }
            }
        }
        Err(error) => {
            assert!(!error.diagnostics.is_empty());
            for diagnostic in &error.diagnostics {
                check_diagnostic(&diagnostic.to_string());
            }
        }
    }
    let again = Policy::from_yaml("fuzz.yaml", text);
    assert_eq!(
        format!("{parsed:?}"),
        format!("{again:?}"),
        "parsing is not deterministic"
    );
});
