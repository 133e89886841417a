//! What a run says at its start about the policy mode it runs in: report mode opens egress
//! to every public host, and merging a report-mode policy with an enforcing one (another
//! file, `--allow` flags) turns the whole run to enforce. Both are documented; both surprise
//! whoever did not read that page, so the run says so on stderr (the API: `warning` events).

use egress_core::policy::{Mode, Policy};
use egress_core::text::visible;

/// The lines for a run of `policies` (as merged: report mode only if every one is).
pub(super) fn mode_notices(policies: &[Policy]) -> Vec<String> {
    let reporting: Vec<&str> = policies
        .iter()
        .filter(|policy| policy.mode() == Mode::Report)
        .map(Policy::name)
        .collect();
    if reporting.is_empty() {
        return Vec::new();
    }
    if reporting.len() == policies.len() {
        return vec![format!(
            "egress-sandbox: report mode: egress is open to every public host (policy {}); \
             only deny rules and the private-address floor refuse anything, and what the \
             allow rules would refuse is recorded as would_block",
            visible(&names(&reporting))
        )];
    }
    let enforcing: Vec<&str> = policies
        .iter()
        .filter(|policy| policy.mode() == Mode::Enforce)
        .map(Policy::name)
        .collect();
    vec![format!(
        "egress-sandbox: warning: policy {} is in report mode, but merged with {} (enforce) \
         the run enforces: only what the allow rules name is reachable",
        visible(&names(&reporting)),
        visible(&names(&enforcing)),
    )]
}

fn names(names: &[&str]) -> String {
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, mode: &str) -> Policy {
        let yaml = format!("version: 1\nname: {name}\nmode: {mode}\nallow:\n  - host: a.test\n");
        Policy::from_yaml("p.yaml", &yaml).unwrap().0
    }

    #[test]
    fn report_mode_is_said_and_a_merge_into_enforce_is_warned_naming_the_policy() {
        assert!(mode_notices(&[policy("strict", "enforce")]).is_empty());
        let report = mode_notices(&[policy("watch", "report"), policy("more", "report")]);
        assert_eq!(report.len(), 1);
        assert!(
            report[0].starts_with(
                "egress-sandbox: report mode: egress is open to every public host (policy \
                 watch, more); only deny rules and the private-address floor refuse anything"
            ),
            "{report:?}"
        );
        let flags = Policy::from_allow_flags(&["b.test".into()]).unwrap();
        let merged = mode_notices(&[policy("watch", "report"), flags]);
        assert_eq!(
            merged,
            [
                "egress-sandbox: warning: policy watch is in report mode, but merged with cli \
              (enforce) the run enforces: only what the allow rules name is reachable"
            ]
        );
    }
}
