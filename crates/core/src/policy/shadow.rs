//! Warnings for rules that cannot change a decision: a rule repeated, a rule covered by a
//! wider one with the same ports, an allow rule that a deny rule always overrides. They are
//! usually a sign that the author meant something else. Indexed by suffix, so a policy with
//! 10,000 rules is checked in linear time.

use std::collections::HashMap;

use super::block_index::BlockIndex;
use super::host_pattern::HostPattern;
use super::{Diagnostic, Rule, RuleTarget};

/// Exact names, wildcard suffixes and cidr blocks of one list, to find covering rules
/// quickly.
struct Coverage<'a> {
    rules: &'a [Rule],
    exact: HashMap<&'a str, Vec<usize>>,
    wildcard: HashMap<&'a str, Vec<usize>>,
    /// By block: a block's covering blocks are looked up, not found by comparing it with
    /// every other block (46,000 cidr rules took 17 s to load).
    cidr: BlockIndex<usize>,
}

impl<'a> Coverage<'a> {
    fn new(rules: &'a [Rule]) -> Self {
        let mut exact: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut wildcard: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut cidr = BlockIndex::default();
        for (index, rule) in rules.iter().enumerate() {
            match &rule.target {
                RuleTarget::Host(HostPattern::Exact(name)) => {
                    exact.entry(name).or_default().push(index)
                }
                RuleTarget::Host(HostPattern::Wildcard(suffix)) => {
                    wildcard.entry(suffix).or_default().push(index)
                }
                RuleTarget::Cidr(net) => cidr.push(*net, index),
            }
        }
        Coverage {
            rules,
            exact,
            wildcard,
            cidr,
        }
    }

    /// Indices (ascending) of rules in this list that match everything `rule` matches,
    /// on at least its ports. `skip` is excluded (the rule itself).
    fn covering(&self, rule: &Rule, skip: Option<usize>) -> Vec<usize> {
        let mut found = Vec::new();
        let mut push = |index: usize| {
            let other = &self.rules[index];
            // A rule with `methods`/`paths` covers nothing for sure; and a wildcard never
            // widens what an exact rule with `methods`/`paths` narrows (exact rules decide).
            let wildcard_over_narrow = rule.request.restricts()
                && matches!(other.target, RuleTarget::Host(HostPattern::Wildcard(_)));
            let widens = !other.request.restricts() && !wildcard_over_narrow;
            if Some(index) != skip && widens && rule.ports.is_subset_of(&other.ports) {
                found.push(index);
            }
        };
        match &rule.target {
            RuleTarget::Host(HostPattern::Exact(name)) => {
                self.exact
                    .get(name.as_str())
                    .into_iter()
                    .flatten()
                    .for_each(|&i| push(i));
                for suffix in proper_suffixes(name) {
                    self.wildcard
                        .get(suffix)
                        .into_iter()
                        .flatten()
                        .for_each(|&i| push(i));
                }
            }
            RuleTarget::Host(HostPattern::Wildcard(suffix)) => {
                self.wildcard
                    .get(suffix.as_str())
                    .into_iter()
                    .flatten()
                    .for_each(|&i| push(i));
                for parent in proper_suffixes(suffix) {
                    self.wildcard
                        .get(parent)
                        .into_iter()
                        .flatten()
                        .for_each(|&i| push(i));
                }
            }
            RuleTarget::Cidr(net) => {
                self.cidr.containing(*net).for_each(|&i| push(i));
            }
        }
        found.sort_unstable();
        found
    }
}

/// `a.b.c` → `b.c`, `c`.
pub(super) fn proper_suffixes(name: &str) -> impl Iterator<Item = &str> {
    name.match_indices('.')
        .map(move |(dot, _)| &name[dot + 1..])
}

pub(crate) fn shadow_warnings(file: &str, allow: &[Rule], deny: &[Rule]) -> Vec<Diagnostic> {
    let mut warnings = Vec::new();
    for (list_name, rules) in [("allow", allow), ("deny", deny)] {
        let coverage = Coverage::new(rules);
        for (index, rule) in rules.iter().enumerate() {
            let covering = coverage.covering(rule, Some(index));
            let Some(&other_index) = covering.first() else {
                continue;
            };
            let other = &rules[other_index];
            let identical = other.target == rule.target && other.ports == rule.ports;
            let message = if identical {
                if other_index > index {
                    // Reported at the later copy.
                    continue;
                }
                format!(
                    "{list_name}[{index}] repeats {list_name}[{other_index}] (line {})",
                    other.line
                )
            } else {
                format!(
                    "{list_name}[{index}] ({rule}) is already covered by {list_name}[{other_index}] ({other}, line {})",
                    other.line
                )
            };
            warnings.push(Diagnostic::warning(file, rule.line, rule.column, message));
        }
    }
    let deny_coverage = Coverage::new(deny);
    for (index, rule) in allow.iter().enumerate() {
        if let Some(&deny_index) = deny_coverage.covering(rule, None).first() {
            warnings.push(Diagnostic::warning(
                file,
                rule.line,
                rule.column,
                format!(
                    "allow[{index}] ({rule}) can never match: deny[{deny_index}] ({}, line {}) refuses all of it",
                    deny[deny_index], deny[deny_index].line
                ),
            ));
        }
    }
    warnings
}
