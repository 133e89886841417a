use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;

fn private(raw: &str) -> bool {
    is_private(
        raw.parse::<IpAddr>()
            .unwrap_or_else(|_| panic!("bad test address {raw}")),
    )
}

/// Every IPv6 spelling that carries `v4`.
fn embedded_forms(v4: Ipv4Addr) -> Vec<Ipv6Addr> {
    let bits = u128::from(u32::from(v4));
    let [a, b, c, d] = v4.octets();
    vec![
        v4.to_ipv6_mapped(),
        v4.to_ipv6_compatible(),
        Ipv6Addr::from((0xffff_0000u128 << 32) | bits), // SIIT ::ffff:0:a.b.c.d
        Ipv6Addr::from((0x0064_ff9bu128 << 96) | bits), // NAT64 64:ff9b::a.b.c.d
        Ipv6Addr::new(
            0x2002,
            u16::from_be_bytes([a, b]),
            u16::from_be_bytes([c, d]),
            0,
            0,
            0,
            0,
            1,
        ),
        // Teredo: server 192.0.2.1 would itself be private, so use a public server and put
        // the address in the (inverted) client field.
        Ipv6Addr::from(
            (0x2001_0000u128 << 96) | (0x0808_0808u128 << 64) | u128::from(!u32::from(v4)),
        ),
    ]
}

#[test]
fn every_private_ipv4_range_is_private_at_both_ends_and_in_every_ipv6_form() {
    for &(net, len) in PRIVATE_V4 {
        let first = u32::from(net);
        let last = first | (u32::MAX.checked_shr(u32::from(len)).unwrap_or(0));
        for addr in [first, last, first + (last - first) / 2] {
            let v4 = Ipv4Addr::from(addr);
            assert!(is_private(IpAddr::V4(v4)), "{v4} ({net}/{len})");
            for v6 in embedded_forms(v4) {
                assert!(is_private(IpAddr::V6(v6)), "{v6} carrying {v4}");
            }
        }
    }
}

#[test]
fn named_addresses_from_design() {
    for raw in [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "100.127.255.255",
        "0.0.0.0",
        "224.0.0.1",
        "239.255.255.250",
        "255.255.255.255",
        "240.0.0.1",
        "192.0.2.1",
        "198.51.100.1",
        "203.0.113.7",
        "198.18.0.1",
        "::",
        "::1",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "febf::1",
        "fec0::1",
        "ff02::1",
        "2001:db8::1",
        "3fff::1",
        "100::1",
        "64:ff9b:1::1",
        "2001:2::1",
        "2001:10::1",
        "2001:1::1",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "2002:7f00:1::",
        "2002:a9fe:a9fe::1",
    ] {
        assert!(private(raw), "{raw} should be private");
    }
}

#[test]
fn public_addresses_pass() {
    for raw in [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "169.253.255.255",
        "192.0.3.1",
        "192.169.0.1",
        "198.20.0.1",
        "223.255.255.255",
        "2606:4700:4700::1111",
        "2a00:1450:4001::200e",
        "::ffff:8.8.8.8",
        "::8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
        "2001:db9::1",
        "fbff:ffff::1",
    ] {
        assert!(!private(raw), "{raw} should be public");
    }
    for v6 in embedded_forms(Ipv4Addr::new(8, 8, 4, 4)) {
        assert!(!is_private(IpAddr::V6(v6)), "{v6}");
    }
}

#[test]
fn teredo_with_private_server_is_private() {
    // 2001:0:c000:0201:: → server 192.0.2.1 (documentation range).
    assert!(private("2001:0:c000:201::f7f7:f7f7"));
}

#[test]
fn cidr_overlap_with_the_floor() {
    let overlaps = |raw: &str| overlaps_private(raw.parse().unwrap());
    assert!(overlaps("10.0.0.0/8"));
    assert!(overlaps("10.1.2.3/32"));
    assert!(overlaps("0.0.0.0/0"));
    assert!(overlaps("172.0.0.0/8"));
    assert!(overlaps("127.0.0.1/32"));
    assert!(overlaps("::/0"));
    assert!(overlaps("::ffff:0:0/96"));
    assert!(overlaps("fd00::/8"));
    assert!(!overlaps("8.8.8.0/24"));
    assert!(!overlaps("93.184.216.0/24"));
    assert!(!overlaps("2606:4700::/32"));
}

fn extra_floor(ranges: &[&str]) -> Floor {
    Floor::with_extra(ranges.iter().map(|raw| parse_extra(raw).unwrap()))
}

#[test]
fn extra_ranges_are_behind_the_floor_in_every_ipv6_form() {
    // 93.184.216.0/24 and 8.8.4.4 are ordinary public addresses, outside the private list.
    let floor = extra_floor(&["93.184.216.0/24", "8.8.4.4", "2606:2800:220:1::/64"]);
    for raw in ["93.184.216.0", "93.184.216.34", "93.184.216.255", "8.8.4.4"] {
        let v4: Ipv4Addr = raw.parse().unwrap();
        assert!(
            !is_private(IpAddr::V4(v4)),
            "{v4} must be public for this test"
        );
        assert!(floor.holds(IpAddr::V4(v4)), "{v4}");
        for v6 in embedded_forms(v4) {
            assert!(floor.holds(IpAddr::V6(v6)), "{v6} carrying {v4}");
        }
    }
    assert!(floor.holds("2606:2800:220:1::248".parse().unwrap()));
    for raw in [
        "93.184.215.255",
        "93.184.217.0",
        "8.8.4.5",
        "8.8.8.8",
        "2606:2800:220:2::1",
    ] {
        assert!(!floor.holds(raw.parse().unwrap()), "{raw}");
    }
    // The private ranges stay.
    assert!(floor.holds("10.0.0.1".parse().unwrap()));
    assert!(Floor::default().holds("169.254.169.254".parse().unwrap()));
    assert!(!Floor::default().holds("93.184.216.34".parse().unwrap()));
}

#[test]
fn extra_ranges_parse_as_cidr_or_single_address() {
    assert_eq!(parse_extra("8.8.4.4").unwrap().to_string(), "8.8.4.4/32");
    assert_eq!(
        parse_extra(" 2001:4860::8888 ").unwrap().to_string(),
        "2001:4860::8888/128"
    );
    // Host bits are dropped: the range is what counts.
    assert_eq!(
        parse_extra("93.184.216.34/24").unwrap().to_string(),
        "93.184.216.0/24"
    );
    for bad in [
        "",
        "example.com",
        "1.2.3.4/33",
        "1.2.3",
        "::1/129",
        "1.2.3.4/",
    ] {
        assert_eq!(
            parse_extra(bad),
            Err(FloorError::BadRange(bad.trim().to_owned())),
            "{bad:?}"
        );
    }
    // An IPv4-mapped IPv6 range is the IPv4 range it names, so addresses judged as IPv4
    // (the policy canonicalises mapped addresses) still meet it.
    let floor = extra_floor(&["::ffff:8.8.4.0/120"]);
    assert_eq!(floor.extra()[0].to_string(), "8.8.4.0/24");
    assert!(floor.holds("8.8.4.4".parse().unwrap()));
    assert!(floor.holds("64:ff9b::808:404".parse().unwrap()));
}

#[test]
fn a_cidr_allow_rule_exempts_an_extra_range_as_it_does_a_private_one() {
    use crate::policy::{Policy, PolicySet, Reason, Verdict};
    let policy = |yaml: &str| {
        let (policy, _) = Policy::from_yaml("t.yaml", yaml).unwrap();
        PolicySet::from(policy)
    };
    let floor = extra_floor(&["93.184.216.0/24"]);
    let names_only = policy("version: 1\nname: t\nallow:\n  - host: a.com\n");
    for raw in [
        "93.184.216.34",
        "::ffff:93.184.216.34",
        "64:ff9b::5db8:d822",
    ] {
        let decision = names_only.check_address_against(&floor, raw.parse().unwrap(), 443);
        assert_eq!(
            (decision.verdict, decision.reason, decision.rule),
            (Verdict::Block, Reason::PrivateAddress, None),
            "{raw}"
        );
        // Without the extra range it is an ordinary public address.
        assert_eq!(
            names_only.check_address(raw.parse().unwrap(), 443).verdict,
            Verdict::Allow
        );
    }
    let exempted = policy(
        "version: 1\nname: t\nallow:\n  - host: a.com\n  - cidr: 93.184.216.34/32\n    ports: [443]\n",
    );
    let decision = exempted.check_address_against(&floor, "93.184.216.34".parse().unwrap(), 443);
    assert_eq!(decision.verdict, Verdict::Allow);
    assert_eq!(
        decision.rule.map(|rule| rule.to_string()),
        Some("t:allow[1]".into())
    );
    // The exemption is per address and per port, as for private ranges.
    let other = exempted.check_address_against(&floor, "93.184.216.35".parse().unwrap(), 443);
    assert_eq!(other.reason, Reason::PrivateAddress);
    let port = exempted.check_address_against(&floor, "93.184.216.34".parse().unwrap(), 80);
    assert_eq!(port.reason, Reason::PrivateAddress);
}

/// `ipv4_carried_by` and the floor's own reading of an address agree on every form, and a
/// block carries every IPv4 address its open bits allow.
#[test]
fn ipv4_carried_by_a_block_matches_embedded_ipv4_of_its_addresses() {
    for v4 in ["10.1.2.3", "8.8.4.4", "255.255.255.255", "0.0.0.1"] {
        let v4: Ipv4Addr = v4.parse().unwrap();
        for form in embedded_forms(v4) {
            let carried: Vec<Ipv4Addr> = ipv4_carried_by(ipnet::Ipv6Net::from(form))
                .iter()
                .map(|carried| {
                    assert_eq!(carried.ipv4.prefix_len(), 32, "{form}");
                    carried.ipv4.addr()
                })
                .collect();
            let embedded = embedded_ipv4_of(form).expect("a carrying form");
            assert!(!carried.is_empty(), "{form}");
            assert!(
                carried.iter().all(|v4| embedded.contains(v4)),
                "{form}: {carried:?} vs {embedded:?}"
            );
            assert!(embedded.iter().all(|v4| carried.contains(v4)), "{form}");
        }
    }
    let carried = |net: &str| -> Vec<(&'static str, String)> {
        ipv4_carried_by(net.parse().unwrap())
            .iter()
            .map(|c| (c.form, c.ipv4.to_string()))
            .collect()
    };
    assert_eq!(carried("64:ff9b::/96"), [("NAT64", "0.0.0.0/0".to_owned())]);
    assert_eq!(
        carried("64:ff9b::a00:0/104"),
        [("NAT64", "10.0.0.0/8".to_owned())]
    );
    assert_eq!(
        carried("2002:a00::/24"),
        [("6to4", "10.0.0.0/8".to_owned())]
    );
    assert_eq!(
        carried("2001:0:808:808::/64"),
        [
            ("Teredo server", "8.8.8.8/32".to_owned()),
            ("Teredo client", "0.0.0.0/0".to_owned())
        ]
    );
    assert_eq!(carried("2001:db8::/32"), []);
    // A block around a form carries all of it.
    assert!(carried("::/0").contains(&("6to4", "0.0.0.0/0".to_owned())));
}
