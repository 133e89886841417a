//! The run's table of loopback addresses, one per allowed name.
//!
//! A program that ignores the proxy variables resolves a name through the DNS responder and
//! connects to whatever address it got, on whatever port. For the :443 and :80 doors the
//! bytes say where they are going (SNI, `Host`); for any other protocol only the address
//! can. So the responder answers each allowed name with an address of its own from
//! [`NAME_BLOCK`], a block of the sandbox's loopback nothing else uses, and the raw doors
//! ([`crate::doors::raw`]) map the address a connection arrived on back to the name.
//!
//! The table lives in the proxy, one per run, and only grows: an address once given to a
//! name stays that name's for the run (a program may cache an answer for as long as it
//! likes). It is bounded ([`MAX_NAMES`]): past it the responder answers as it would with no
//! table (the proxy's own address), where the :443 and :80 doors still work and the raw
//! doors find no name and refuse.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use crate::target::HostName;

/// The block names are given addresses from: 127.100.0.0/16, inside the sandbox's own
/// loopback (the whole of 127.0.0.0/8 reaches it) and apart from 127.0.0.1, where the
/// explicit proxy and the DNS responder listen.
pub(crate) const NAME_BLOCK: (Ipv4Addr, u8) = (Ipv4Addr::new(127, 100, 0, 0), 16);

/// Names one run may be given addresses for. A policy names a few hosts; this bounds what a
/// program walking a wildcard rule's names (`a.x.com`, `b.x.com`, …) can make the table hold.
pub(crate) const MAX_NAMES: usize = 4096;

/// Name ↔ address, both ways, for one run.
#[derive(Debug, Default)]
pub(crate) struct NameAddresses {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    by_name: HashMap<HostName, Ipv4Addr>,
    by_address: HashMap<Ipv4Addr, HostName>,
}

impl NameAddresses {
    pub(crate) fn new() -> NameAddresses {
        NameAddresses::default()
    }

    /// The address of `name`, given now if it has none yet; `None` once the table is full.
    pub(crate) fn address_of(&self, name: &HostName) -> Option<Ipv4Addr> {
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(address) = table.by_name.get(name) {
            return Some(*address);
        }
        if table.by_name.len() >= MAX_NAMES {
            return None;
        }
        // The n-th name gets block + n + 1: never the block's own address.
        let offset = u32::try_from(table.by_name.len()).ok()? + 1;
        let address = Ipv4Addr::from(u32::from(NAME_BLOCK.0) + offset);
        table.by_name.insert(name.clone(), address);
        table.by_address.insert(address, name.clone());
        Some(address)
    }

    /// The name `address` was given to, if any.
    pub(crate) fn name_at(&self, address: Ipv4Addr) -> Option<HostName> {
        let table = self
            .table
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        table.by_address.get(&address).cloned()
    }

    /// Whether `address` is in [`NAME_BLOCK`].
    pub(crate) fn in_block(address: Ipv4Addr) -> bool {
        let (base, prefix) = NAME_BLOCK;
        let mask = u32::MAX << (32 - u32::from(prefix));
        u32::from(address) & mask == u32::from(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> HostName {
        HostName::parse(text).unwrap()
    }

    #[test]
    fn each_name_keeps_one_address_of_its_own_and_maps_back() {
        let table = NameAddresses::new();
        let first = table.address_of(&name("api.test")).unwrap();
        let second = table.address_of(&name("db.test")).unwrap();
        assert_ne!(first, second);
        assert_eq!(table.address_of(&name("api.test")), Some(first));
        assert_eq!(table.name_at(first), Some(name("api.test")));
        assert_eq!(table.name_at(second), Some(name("db.test")));
        for address in [first, second] {
            assert!(NameAddresses::in_block(address), "{address}");
            assert_ne!(address, Ipv4Addr::LOCALHOST);
        }
        assert_eq!(table.name_at(Ipv4Addr::LOCALHOST), None);
        assert_eq!(table.name_at(Ipv4Addr::new(127, 100, 0, 200)), None);
    }

    #[test]
    fn a_full_table_gives_no_new_address_but_keeps_the_old_ones() {
        let table = NameAddresses::new();
        let addresses: Vec<Ipv4Addr> = (0..MAX_NAMES)
            .map(|n| table.address_of(&name(&format!("n{n}.test"))).unwrap())
            .collect();
        let distinct: std::collections::HashSet<_> = addresses.iter().collect();
        assert_eq!(distinct.len(), MAX_NAMES);
        assert!(addresses.iter().all(|a| NameAddresses::in_block(*a)));
        assert_eq!(table.address_of(&name("one-more.test")), None);
        assert_eq!(table.address_of(&name("n7.test")), Some(addresses[7]));
    }

    #[test]
    fn the_block_is_apart_from_the_doors_address() {
        assert!(!NameAddresses::in_block(Ipv4Addr::LOCALHOST));
        assert!(NameAddresses::in_block(Ipv4Addr::new(127, 100, 3, 4)));
        assert!(!NameAddresses::in_block(Ipv4Addr::new(127, 101, 0, 1)));
    }
}
