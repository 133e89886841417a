//! The private-address floor: addresses no allowlisted *name* may lead to unless a `cidr`
//! rule names them. This is what stops `allowed.example → 169.254.169.254` (DNS rebinding,
//! cloud metadata) and `allowed.example → 127.0.0.1` (the proxy's own host).
//!
//! Every IPv6 form that carries an IPv4 address a host stack may end up talking to
//! (IPv4-mapped, IPv4-compatible, SIIT-translated, NAT64, 6to4, Teredo) is judged by the IPv4
//! address inside it, so `[::ffff:127.0.0.1]` or `[64:ff9b::a9fe:a9fe]` cannot walk around
//! the IPv4 list.
//!
//! A proxy's `Floor` adds its extra ranges
//! (the proxy's `ProxyConfig::floor_extra`): addresses that are
//! public but lead back to the machine running the sandbox, judged the same way.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[cfg(test)]
mod tests;

/// True when `addr` is behind the private-address floor (the list in
/// `docs/src/reference/policy.md`, IPv4 embedded in IPv6 checked as IPv4: mapped, compatible, NAT64
/// 64:ff9b::/96, 6to4 2002::/16, Teredo).
pub fn is_private(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => is_private_v4(v4),
        IpAddr::V6(v6) => is_private_v6(v6),
    }
}

/// The floor of one proxy: the private ranges, plus the ranges given with `--floor-extra`
/// (the engine host's own addresses, the egress gateway: public addresses that still lead
/// to the machine running the sandbox). An extra range is judged exactly like a private one,
/// IPv4 carried in IPv6 included, and a `cidr` allow rule covering an address exempts it
/// the same way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Floor {
    extra: Vec<ipnet::IpNet>,
}

impl Floor {
    /// The private ranges and `extra`. An IPv6 range of IPv4-mapped addresses
    /// (`::ffff:a.b.c.d/96+n`) is kept as the IPv4 range it names.
    pub fn with_extra(extra: impl IntoIterator<Item = ipnet::IpNet>) -> Floor {
        Floor {
            extra: extra.into_iter().map(as_ipv4_if_mapped).collect(),
        }
    }

    /// The extra ranges, as given (mapped IPv6 ranges as IPv4).
    #[cfg(test)]
    pub fn extra(&self) -> &[ipnet::IpNet] {
        &self.extra
    }

    /// True when `addr` is behind this floor: private (see [`is_private`]) or in an extra
    /// range, directly or through an IPv4 address it carries.
    pub fn holds(&self, addr: IpAddr) -> bool {
        is_private(addr) || self.in_extra(addr)
    }

    fn in_extra(&self, addr: IpAddr) -> bool {
        if self.extra.is_empty() {
            return false;
        }
        let covered = |addr: IpAddr| self.extra.iter().any(|net| net.contains(&addr));
        covered(addr)
            || match addr {
                IpAddr::V6(v6) => embedded_ipv4_of(v6)
                    .is_some_and(|carried| carried.iter().any(|&v4| covered(IpAddr::V4(v4)))),
                IpAddr::V4(_) => false,
            }
    }
}

/// `--floor-extra` text: a CIDR range (`203.0.113.7/32`, `2001:db8::/64`) or a single
/// address (a /32 or /128).
pub fn parse_extra(raw: &str) -> Result<ipnet::IpNet, FloorError> {
    let raw = raw.trim();
    if let Ok(net) = raw.parse::<ipnet::IpNet>() {
        return Ok(net.trunc());
    }
    raw.parse::<IpAddr>()
        .map(ipnet::IpNet::from)
        .map_err(|_| FloorError::BadRange(raw.to_owned()))
}

/// Why a floor range (an address or CIDR range given to widen or narrow the floor) was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FloorError {
    /// The text is neither an IP address nor a CIDR range.
    #[error("{0:?} is not an IP address or CIDR range (e.g. 203.0.113.7 or 203.0.113.0/24)")]
    BadRange(String),
}

fn as_ipv4_if_mapped(net: ipnet::IpNet) -> ipnet::IpNet {
    match net {
        ipnet::IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(net, ipnet::IpNet::V4),
            None => net,
        },
        _ => net,
    }
}

/// IPv4 ranges that are not ordinary public unicast destinations (IANA special-purpose
/// registry), as (network, prefix length).
const PRIVATE_V4: &[(Ipv4Addr, u8)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8),       // "this network"
    (Ipv4Addr::new(10, 0, 0, 0), 8),      // RFC 1918
    (Ipv4Addr::new(100, 64, 0, 0), 10),   // CGNAT, RFC 6598
    (Ipv4Addr::new(127, 0, 0, 0), 8),     // loopback
    (Ipv4Addr::new(169, 254, 0, 0), 16),  // link-local, incl. 169.254.169.254 metadata
    (Ipv4Addr::new(172, 16, 0, 0), 12),   // RFC 1918
    (Ipv4Addr::new(192, 0, 0, 0), 24),    // IETF protocol assignments
    (Ipv4Addr::new(192, 0, 2, 0), 24),    // TEST-NET-1 (documentation)
    (Ipv4Addr::new(192, 88, 99, 0), 24),  // 6to4 relay anycast (deprecated)
    (Ipv4Addr::new(192, 168, 0, 0), 16),  // RFC 1918
    (Ipv4Addr::new(198, 18, 0, 0), 15),   // benchmarking
    (Ipv4Addr::new(198, 51, 100, 0), 24), // TEST-NET-2 (documentation)
    (Ipv4Addr::new(203, 0, 113, 0), 24),  // TEST-NET-3 (documentation)
    (Ipv4Addr::new(224, 0, 0, 0), 4),     // multicast
    (Ipv4Addr::new(240, 0, 0, 0), 4),     // reserved, incl. 255.255.255.255 broadcast
];

fn is_private_v4(addr: Ipv4Addr) -> bool {
    let bits = u32::from(addr);
    PRIVATE_V4
        .iter()
        .any(|&(net, len)| prefix_matches_v4(bits, u32::from(net), len))
}

fn prefix_matches_v4(bits: u32, net: u32, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    };
    bits & mask == net & mask
}

fn prefix_matches_v6(bits: u128, net: u128, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    };
    bits & mask == net & mask
}

/// IPv6 ranges that are private outright (no IPv4 inside to judge).
const PRIVATE_V6: &[(u128, u8)] = &[
    (0xfc00 << 112, 7),           // unique local fc00::/7
    (0xfe80 << 112, 10),          // link-local fe80::/10
    (0xfec0 << 112, 10),          // site-local fec0::/10 (deprecated)
    (0xff00 << 112, 8),           // multicast ff00::/8
    (0x0100 << 112, 64),          // discard-only 100::/64
    (0x0064_ff9b_0001 << 80, 48), // local-use NAT64 64:ff9b:1::/48
    (0x2001_0db8 << 96, 32),      // documentation 2001:db8::/32
    (0x3fff << 112, 20),          // documentation 3fff::/20
    (0x5f00 << 112, 16),          // SRv6 SIDs 5f00::/16
    (0x2001_0002 << 96, 48),      // benchmarking 2001:2::/48
    (0x2001_0010 << 96, 28),      // ORCHID 2001:10::/28
    (0x2001_0020 << 96, 28),      // ORCHIDv2 2001:20::/28
];

fn is_private_v6(addr: Ipv6Addr) -> bool {
    let bits = u128::from(addr);
    if let Some(v4) = embedded_ipv4(bits) {
        return v4.iter().any(|&v4| is_private_v4(v4));
    }
    // The rest of 2001::/23 (IETF protocol assignments) besides Teredo, handled above.
    if prefix_matches_v6(bits, 0x2001 << 112, 23) {
        return true;
    }
    PRIVATE_V6
        .iter()
        .any(|&(net, len)| prefix_matches_v6(bits, net, len))
}

/// The IPv4 addresses an IPv6 address carries, if it is one of the forms that reach IPv4
/// hosts (mapped, compatible, SIIT, NAT64, 6to4, Teredo), e.g. for deny `cidr` rules that
/// must hold for every spelling of an address.
pub(crate) fn embedded_ipv4_of(addr: Ipv6Addr) -> Option<[Ipv4Addr; 2]> {
    embedded_ipv4(u128::from(addr))
}

/// The IPv4 addresses an IPv6 address carries (the same one twice unless Teredo: its
/// server, then its client), for the forms that reach IPv4 hosts ([`IPV4_CARRIERS`], the
/// one list of them). `::` and `::1` fall in the IPv4-compatible range and come out as
/// `0.0.0.0`/`0.0.0.1`, which the IPv4 list refuses.
fn embedded_ipv4(bits: u128) -> Option<[Ipv4Addr; 2]> {
    let mut carried = IPV4_CARRIERS
        .iter()
        .filter(|carrier| carrier.holds(bits))
        .map(|carrier| carrier.ipv4_in(bits));
    let first = carried.next()?;
    Some([first, carried.next().unwrap_or(first)])
}

/// One IPv6 form that carries an IPv4 address (the forms of [`embedded_ipv4`]): its block,
/// where the 32 bits of the IPv4 address start (bits from the top), and whether they are
/// stored inverted.
struct Ipv4Carrier {
    form: &'static str,
    block: (u128, u8),
    offset: u8,
    inverted: bool,
}

impl Ipv4Carrier {
    fn holds(&self, bits: u128) -> bool {
        let (block, len) = self.block;
        prefix_matches_v6(bits, block, len)
    }

    /// The 32 bits at `offset`, inverted back if the form stores them inverted.
    fn field(&self, bits: u128) -> u32 {
        let field = (bits >> (96 - self.offset)) as u32;
        if self.inverted { !field } else { field }
    }

    fn ipv4_in(&self, bits: u128) -> Ipv4Addr {
        Ipv4Addr::from(self.field(bits))
    }
}

/// Teredo's two entries share a block: the server comes first, then the client.
const IPV4_CARRIERS: &[Ipv4Carrier] = &[
    Ipv4Carrier {
        form: "IPv4-compatible",
        block: (0, 96),
        offset: 96,
        inverted: false,
    },
    Ipv4Carrier {
        form: "IPv4-mapped",
        block: (0xffff << 32, 96),
        offset: 96,
        inverted: false,
    },
    Ipv4Carrier {
        form: "SIIT",
        block: (0xffff_0000 << 32, 96),
        offset: 96,
        inverted: false,
    },
    Ipv4Carrier {
        form: "NAT64",
        block: (0x0064_ff9b << 96, 96),
        offset: 96,
        inverted: false,
    },
    Ipv4Carrier {
        form: "6to4",
        block: (0x2002 << 112, 16),
        offset: 16,
        inverted: false,
    },
    Ipv4Carrier {
        form: "Teredo server",
        block: (0x2001_0000 << 96, 32),
        offset: 32,
        inverted: false,
    },
    Ipv4Carrier {
        form: "Teredo client",
        block: (0x2001_0000 << 96, 32),
        offset: 96,
        inverted: true,
    },
];

/// IPv4 addresses that addresses of an IPv6 block carry in one form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CarriedIpv4 {
    /// The form's name, e.g. `NAT64`.
    pub form: &'static str,
    /// The part of the block in that form.
    pub part: ipnet::Ipv6Net,
    /// Every IPv4 address some address of `part` carries.
    pub ipv4: ipnet::Ipv4Net,
}

/// The IPv4 addresses the addresses of `net` carry, per form: what deny `cidr` rules, which
/// judge an IPv6 address by the IPv4 address inside it, refuse of an IPv6 block. Bits of the
/// IPv4 field that `net` leaves open make the IPv4 block wider (`64:ff9b::/96` carries
/// `0.0.0.0/0`).
pub(crate) fn ipv4_carried_by(net: ipnet::Ipv6Net) -> Vec<CarriedIpv4> {
    IPV4_CARRIERS
        .iter()
        .filter_map(|carrier| {
            let (bits, len) = carrier.block;
            let block = ipnet::Ipv6Net::new(Ipv6Addr::from(bits), len).expect("a valid block");
            let part = if block.contains(&net) {
                net
            } else if net.contains(&block) {
                block
            } else {
                return None;
            };
            let fixed = part.prefix_len().saturating_sub(carrier.offset).min(32);
            let field = carrier.field(u128::from(part.network()));
            let ipv4 = ipnet::Ipv4Net::new(Ipv4Addr::from(field), fixed)
                .expect("a prefix of at most 32")
                .trunc();
            Some(CarriedIpv4 {
                form: carrier.form,
                part,
                ipv4,
            })
        })
        .collect()
}

/// True when some address in `net` is behind the floor: used to warn about `cidr` allow
/// rules that open private ranges. IPv6 blocks that overlap a form carrying IPv4 (mapped,
/// NAT64, 6to4, Teredo …) count as overlapping, since they can carry private IPv4.
pub(crate) fn overlaps_private(net: ipnet::IpNet) -> bool {
    match net {
        ipnet::IpNet::V4(net) => {
            let bits = u32::from(net.network());
            PRIVATE_V4.iter().any(|&(private, len)| {
                prefix_matches_v4(bits, u32::from(private), len.min(net.prefix_len()))
            })
        }
        ipnet::IpNet::V6(net) => {
            let bits = u128::from(net.network());
            PRIVATE_V6
                .iter()
                .chain(IPV4_CARRYING_V6)
                .any(|&(private, len)| prefix_matches_v6(bits, private, len.min(net.prefix_len())))
        }
    }
}

/// IPv6 blocks that carry IPv4 addresses (see [`embedded_ipv4`]) or are otherwise special.
const IPV4_CARRYING_V6: &[(u128, u8)] = &[
    (0, 96),                 // IPv4-compatible, incl. :: and ::1
    (0xffff << 32, 96),      // IPv4-mapped
    (0xffff_0000 << 32, 96), // SIIT
    (0x0064_ff9b << 96, 96), // NAT64
    (0x2002 << 112, 16),     // 6to4
    (0x2001 << 112, 23),     // IETF assignments, incl. Teredo
];
