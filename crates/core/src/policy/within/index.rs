//! One rule list indexed for `check_within`: the rules that may cover, or lie inside, a
//! target are looked up instead of found by comparing the target with every rule (43,000
//! `cidr` rules under an UPPER as long took a minute of CPU: every pair of rules was compared).
//!
//! Lookups return candidates, ascending by rule index; callers keep the exact predicate
//! they had on the whole list, so an index can only be too wide, never change a result.

use std::collections::HashMap;

use ipnet::IpNet;

use super::super::block_index::BlockIndex;
use super::super::host_pattern::HostPattern;
use super::super::shadow::proper_suffixes;
use super::super::{Rule, RuleTarget};

pub(super) struct RuleIndex<'a> {
    exact: HashMap<&'a str, Vec<usize>>,
    wildcard: HashMap<&'a str, Vec<usize>>,
    /// Host rules by each proper suffix of their name (exact) or suffix (wildcard): the
    /// rules a wildcard over that suffix reaches, besides the wildcard over the same suffix.
    under: HashMap<&'a str, Vec<usize>>,
    /// The blocks holding a block: one hash lookup per prefix length in use.
    cidr: BlockIndex<usize>,
    /// The blocks by first address, to find those inside a block as one range.
    by_start: Vec<(IpNet, usize)>,
}

impl<'a> RuleIndex<'a> {
    pub(super) fn new(rules: &'a [Rule]) -> Self {
        let mut index = RuleIndex {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            under: HashMap::new(),
            cidr: BlockIndex::default(),
            by_start: Vec::new(),
        };
        for (at, rule) in rules.iter().enumerate() {
            index.push(at, &rule.target);
        }
        // Stable: equal blocks keep rule order.
        index
            .by_start
            .sort_by_key(|(net, _)| (net.network(), net.prefix_len()));
        index
    }

    fn push(&mut self, at: usize, target: &'a RuleTarget) {
        let name = match target {
            RuleTarget::Cidr(net) => {
                self.cidr.push(*net, at);
                self.by_start.push((net.trunc(), at));
                return;
            }
            RuleTarget::Host(HostPattern::Exact(name)) => {
                self.exact.entry(name).or_default().push(at);
                name
            }
            RuleTarget::Host(HostPattern::Wildcard(suffix)) => {
                self.wildcard.entry(suffix).or_default().push(at);
                suffix
            }
        };
        for suffix in proper_suffixes(name) {
            self.under.entry(suffix).or_default().push(at);
        }
    }

    /// Rules for exactly this name (not wildcards), ascending.
    pub(super) fn exact(&self, name: &str) -> &[usize] {
        self.exact.get(name).map_or(&[], Vec::as_slice)
    }

    /// Host rules (exact or wildcard) strictly under `*.suffix`, ascending.
    pub(super) fn hosts_under(&self, suffix: &str) -> &[usize] {
        self.under.get(suffix).map_or(&[], Vec::as_slice)
    }

    /// Rules that may match all of `target`: the same name or block, wildcards over a
    /// parent suffix, blocks holding it. Ascending, no repeats.
    pub(super) fn covering(&self, target: &RuleTarget) -> Vec<usize> {
        let mut found: Vec<usize> = match target {
            RuleTarget::Cidr(net) => self.cidr.containing(*net).copied().collect(),
            RuleTarget::Host(pattern) => self.hosts_covering(pattern),
        };
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Host rules that may match all of `pattern`, in no particular order.
    pub(super) fn hosts_covering(&self, pattern: &HostPattern) -> Vec<usize> {
        let (own, name) = match pattern {
            HostPattern::Exact(name) => (self.exact(name), name),
            HostPattern::Wildcard(suffix) => (self.wildcard(suffix), suffix),
        };
        let parents = proper_suffixes(name).flat_map(|parent| self.wildcard(parent));
        own.iter().chain(parents).copied().collect()
    }

    fn wildcard(&self, suffix: &str) -> &[usize] {
        self.wildcard.get(suffix).map_or(&[], Vec::as_slice)
    }

    /// Rules that may match all of `target` or only part of it (nested names and blocks:
    /// what an allow rule and a deny rule may both match). Ascending, no repeats.
    pub(super) fn overlapping(&self, target: &RuleTarget) -> Vec<usize> {
        let mut found = self.covering(target);
        match target {
            RuleTarget::Cidr(net) => found.extend(self.cidr_inside(*net)),
            RuleTarget::Host(HostPattern::Exact(_)) => {}
            RuleTarget::Host(HostPattern::Wildcard(suffix)) => {
                found.extend(self.hosts_under(suffix));
            }
        }
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Cidr rules whose block holds `net` (in no particular order).
    pub(super) fn cidr_containing(&self, net: IpNet) -> impl Iterator<Item = usize> + '_ {
        self.cidr.containing(net).copied()
    }

    /// Cidr rules whose block lies inside `net` (`net` itself included), ascending by
    /// block. Blocks are nested or disjoint, so those are the blocks starting within `net`
    /// no wider than it.
    pub(super) fn cidr_inside(&self, net: IpNet) -> impl Iterator<Item = usize> + '_ {
        let (first, last) = (net.network(), net.broadcast());
        let start = self
            .by_start
            .partition_point(|(block, _)| block.network() < first);
        self.by_start[start..]
            .iter()
            .take_while(move |(block, _)| block.network() <= last)
            .filter(move |(block, _)| block.prefix_len() >= net.prefix_len())
            .map(|&(_, at)| at)
    }
}
