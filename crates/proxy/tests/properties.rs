//! Properties of classification, normalisation, wildcard matching, the floor, and the
//! bounds on durations and sizes (with the arithmetic made of them), checked on
//! generated inputs (proptest) where a rule is easier to state than a list of cases. The fuzz
//! targets in `proxy/fuzz` cover arbitrary bytes; these cover structured families of inputs
//! that random bytes rarely hit (every spelling of an address, every embedding of it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use egress_core::floor;
use egress_core::policy::{Policy, PolicySet, Reason, Verdict};
use egress_core::target::{HostName, Target};
use egress_core::units::{self, MAX_CA_LIFETIME, MAX_DURATION, MAX_SIZE};
use egress_proxy::fuzzing::run_ca_validity;
use proptest::prelude::*;

fn policy(yaml: &str) -> PolicySet {
    let (policy, _) = Policy::from_yaml("properties.yaml", yaml).expect("a valid test policy");
    PolicySet::from(policy)
}

/// Digits as fullwidth characters (U+FF10…), which IDNA maps to ASCII digits.
fn fullwidth(text: &str) -> String {
    text.chars()
        .map(|c| match c.to_digit(10) {
            Some(d) => char::from_u32(0xff10 + d).expect("fullwidth digit"),
            None => c,
        })
        .collect()
}

/// Every way a resolver or URL parser could be handed `addr` (README, "Addresses are never
/// names"): `inet_aton` forms in decimal, hex and octal, short forms, mixed radixes, a
/// trailing dot, fullwidth digits and ideographic full stops, and IPv4-mapped IPv6.
fn spellings(addr: Ipv4Addr) -> Vec<String> {
    let [a, b, c, d] = addr.octets();
    let v = u32::from(addr);
    let low16 = u32::from(c) << 8 | u32::from(d);
    let low24 = u32::from(b) << 16 | low16;
    let (hi, lo) = ((v >> 16) as u16, v as u16);
    let dotted = format!("{a}.{b}.{c}.{d}");
    vec![
        dotted.clone(),
        format!("{dotted}."),
        format!("{v}"),
        format!("0x{v:x}"),
        format!("0X{v:X}"),
        format!("0{v:o}"),
        format!("0x{a:02x}.0x{b:x}.0x{c:X}.0x{d:x}"),
        format!("0{a:o}.0{b:o}.0{c:o}.0{d:o}"),
        format!("000{a:o}.{b}.0x{c:x}.{d}"),
        format!("{a}.{b}.{low16}"),
        format!("{a}.{low24}"),
        format!("0x{a:x}.0{low24:o}"),
        fullwidth(&dotted),
        fullwidth(&dotted).replace('.', "。"),
        fullwidth(&format!("{v}")),
        format!("{a}．{b}．{c}．{d}"),
        format!("[::ffff:{dotted}]"),
        format!("::ffff:{dotted}"),
        format!("[::FFFF:{hi:X}:{lo:X}]"),
        format!("[0:0:0:0:0:ffff:{hi:x}:{lo:x}]"),
    ]
}

/// A DNS label of the kind policies name: lowercase letters and digits, not all digits.
fn label() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,10}[a-z0-9]|[a-z]"
}

/// The IPv6 forms that carry `v4` for a host stack: mapped, compatible, SIIT, NAT64, 6to4
/// (any subnet and interface bits), and Teredo with `v4` as the client behind `server`.
fn embedded_forms(v4: Ipv4Addr, noise: u128, server: Ipv4Addr) -> Vec<Ipv6Addr> {
    let bits = u128::from(u32::from(v4));
    let low80 = noise & ((1u128 << 80) - 1);
    let teredo_flags_port = (noise as u32 as u128) << 32;
    vec![
        v4.to_ipv6_mapped(),
        v4.to_ipv6_compatible(),
        Ipv6Addr::from((0xffff_0000u128 << 32) | bits),
        Ipv6Addr::from((0x0064_ff9bu128 << 96) | bits),
        Ipv6Addr::from((0x2002u128 << 112) | (bits << 80) | low80),
        Ipv6Addr::from(
            (0x2001_0000u128 << 96)
                | (u128::from(u32::from(server)) << 64)
                | teredo_flags_port
                | u128::from(!u32::from(v4)),
        ),
    ]
}

/// A public Teredo server (Microsoft's), so that only the client address decides.
const PUBLIC_TEREDO_SERVER: Ipv4Addr = Ipv4Addr::new(65, 54, 227, 120);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every spelling of one IPv4 address is that address, as a host and as an authority,
    /// and a `cidr` rule covering it allows every spelling alike.
    #[test]
    fn every_spelling_of_an_address_classifies_the_same(addr in any::<u32>().prop_map(Ipv4Addr::from)) {
        let expected = Target::Ip(IpAddr::V4(addr));
        let set = policy(&format!(
            "version: 1\nallow:\n  - cidr: {}/24\n    ports: [80]\n",
            Ipv4Addr::from(u32::from(addr) & 0xffff_ff00)
        ));
        for spelling in spellings(addr) {
            prop_assert_eq!(Target::parse_host(&spelling), Ok(expected.clone()), "{}", spelling);
            prop_assert!(HostName::parse(&spelling).is_err(), "{} is a name", spelling);
            let authority = if spelling.contains(':') && !spelling.starts_with('[') {
                format!("[{spelling}]:80")
            } else {
                format!("{spelling}:80")
            };
            prop_assert_eq!(
                Target::parse_authority(&authority, None),
                Ok((expected.clone(), 80)),
                "{}", authority
            );
            let target = Target::parse_host(&spelling).expect("classified above");
            prop_assert_eq!(set.decide(&target, 80).verdict, Verdict::Allow, "{}", spelling);
            prop_assert_eq!(set.decide(&target, 81).reason, Reason::PortNotAllowed, "{}", spelling);
        }
    }

    /// Normalising is idempotent: whatever a host classifies as, its canonical text
    /// classifies as the same thing, and a name's canonical text is itself.
    #[test]
    fn normalising_twice_equals_once(
        raw in prop_oneof![
            "[a-zA-Z0-9._-]{1,40}",
            "([a-zA-Z0-9ßüäöéа-я\u{ff10}-\u{ff19}\u{ff21}-\u{ff3a}-]{1,12}[.。．]){0,4}[a-zA-Z0-9üа-я]{1,12}\\.?",
            "\\[?[0-9a-fA-F:.]{2,40}\\]?",
            "[0-9xX.]{1,20}",
            "\\PC{1,30}",
        ]
    ) {
        if let Ok(target) = Target::parse_host(&raw) {
            let canonical = target.to_string();
            prop_assert_eq!(Target::parse_host(&canonical), Ok(target.clone()), "{:?} → {}", raw, canonical);
            if let Target::Name(name) = &target {
                let again = HostName::parse(name.as_str()).expect("a canonical name parses");
                prop_assert_eq!(again.as_str(), name.as_str());
                prop_assert_eq!(HostName::parse(&raw), Ok(name.clone()));
            }
        }
    }

    /// `*.suffix` matches exactly the names with one or more labels before the suffix: not
    /// the suffix itself, not its parent, not a name that merely ends in the same letters.
    #[test]
    fn a_wildcard_matches_exactly_the_names_below_its_suffix(
        suffix in prop::collection::vec(label(), 1..3),
        prefix in prop::collection::vec(label(), 0..4),
        glued in label(),
    ) {
        let suffix = format!("{}.example", suffix.join("."));
        let set = policy(&format!("version: 1\nallow:\n  - host: \"*.{suffix}\"\n"));
        let name = if prefix.is_empty() {
            suffix.clone()
        } else {
            format!("{}.{suffix}", prefix.join("."))
        };
        let judged = |raw: &str| {
            let name = HostName::parse(raw).expect("a generated name is valid");
            (set.decide_name(&name).verdict, set.decide(&Target::Name(name), 443).verdict)
        };
        let expected = if prefix.is_empty() { Verdict::Block } else { Verdict::Allow };
        prop_assert_eq!(judged(&name), (expected, expected), "{}", name);
        prop_assert_eq!(judged(&name.to_ascii_uppercase()), (expected, expected), "{}", name);
        prop_assert_eq!(judged(&format!("{glued}{suffix}")), (Verdict::Block, Verdict::Block));
        let parent = suffix.split_once('.').map(|(_, parent)| parent).unwrap_or_default();
        prop_assert_eq!(judged(parent), (Verdict::Block, Verdict::Block), "{}", parent);
    }

    /// The floor judges an IPv4 address and every IPv6 form that carries it the same, and a
    /// deny `cidr` naming the IPv4 address holds for every form.
    #[test]
    fn the_floor_judges_an_address_and_its_embedded_forms_the_same(
        v4 in any::<u32>().prop_map(Ipv4Addr::from),
        noise in any::<u128>(),
    ) {
        let private = floor::is_private(IpAddr::V4(v4));
        let empty = policy("version: 1\n");
        let denying = policy(&format!(
            "version: 1\nallow:\n  - cidr: 0.0.0.0/0\n  - cidr: ::/0\ndeny:\n  - cidr: {v4}/32\n"
        ));
        let plain = empty.check_address(IpAddr::V4(v4), 443).verdict;
        for form in embedded_forms(v4, noise, PUBLIC_TEREDO_SERVER) {
            let form = IpAddr::V6(form);
            prop_assert_eq!(floor::is_private(form), private, "{} vs {}", form, v4);
            prop_assert_eq!(empty.check_address(form, 443).verdict, plain, "{}", form);
            let denied = denying.check_address(form, 443);
            prop_assert_eq!((denied.verdict, denied.reason), (Verdict::Block, Reason::Denied), "{}", form);
            let target = Target::Ip(form);
            prop_assert_eq!(denying.decide(&target, 443).reason, Reason::Denied, "{}", form);
        }
    }

    /// The cidr index finds what looking at every rule in order finds: the first allow
    /// rule whose block holds the address and takes the port (else a port miss names the
    /// first block holding it), and a deny block refusing first. Blocks of mixed lengths
    /// around one address, so that several hold it.
    #[test]
    fn cidr_rules_decide_as_a_look_at_every_rule_in_order(
        addr in any::<u32>(),
        rules in proptest::collection::vec((0u8..=32, any::<u32>(), any::<bool>(), any::<bool>()), 1..24),
    ) {
        let addr = Ipv4Addr::from(addr | 0x0100_0000); // never 0.0.0.0/8
        let mut allow = Vec::new();
        let mut deny = Vec::new();
        for (prefix, noise, near, port_80) in &rules {
            // Half the blocks hold the address, the rest are anywhere.
            let base = if *near { u32::from(addr) } else { *noise };
            let mask = if *prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
            let block = format!("{}/{prefix}", Ipv4Addr::from(base & mask));
            let holds = *prefix == 0 || (u32::from(addr) & mask) == (base & mask);
            if *port_80 {
                allow.push((block, holds, 80u16));
            } else if !allow.is_empty() && allow.len() % 3 == 0 {
                deny.push((block, holds));
            } else {
                allow.push((block, holds, 443u16));
            }
        }
        let mut yaml = String::from("version: 1\nname: p\nallow:\n");
        for (block, _, port) in &allow {
            yaml.push_str(&format!("  - cidr: {block}\n    ports: [{port}]\n"));
        }
        if !deny.is_empty() {
            yaml.push_str("deny:\n");
            for (block, _) in &deny {
                yaml.push_str(&format!("  - cidr: {block}\n"));
            }
        }
        let set = policy(&yaml);
        let target = Target::Ip(IpAddr::V4(addr));
        for port in [80u16, 443] {
            let decision = set.decide(&target, port);
            let expected = if let Some(index) = deny.iter().position(|(_, holds)| *holds) {
                (Verdict::Block, Reason::Denied, Some(format!("p:deny[{index}]")))
            } else if let Some(index) = allow.iter().position(|(_, holds, p)| *holds && *p == port) {
                (Verdict::Allow, Reason::Rule, Some(format!("p:allow[{index}]")))
            } else if let Some(index) = allow.iter().position(|(_, holds, _)| *holds) {
                (Verdict::Block, Reason::PortNotAllowed, Some(format!("p:allow[{index}]")))
            } else {
                (Verdict::Block, Reason::IpLiteral, None)
            };
            let got = (decision.verdict, decision.reason, decision.rule.map(|r| r.to_string()));
            prop_assert_eq!(got, expected, "{}:{}\n{}", addr, port, yaml);
        }
    }
}

/// A number as people (or attackers) write one: small, at the bounds, past `u64`, or with
/// a fraction or exponent.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        (0u64..1_000_000).prop_map(|n| n.to_string()),
        "[0-9]{1,40}",
        (any::<u32>(), 0u32..1000).prop_map(|(n, f)| format!("{n}.{f}")),
        (any::<u16>(), any::<i8>()).prop_map(|(n, e)| format!("{n}e{e}")),
        Just("-1".to_owned()),
    ]
}

const DURATION_UNITS: &[&str] = &[
    "", "ns", "us", "ms", "s", "sec", "m", "min", "h", "hr", "d", "days", "w", "week", "M",
    "month", "y", "year", "years", "x",
];

const SIZE_UNITS: &[&str] = &[
    "", "B", "k", "kB", "KiB", "M", "MB", "MiB", "G", "GB", "GiB", "T", "TiB", "P", "PB", "PiB",
    "E", "EB", "EiB", "Z", "ZiB", "x",
];

/// One to three `NUMBER UNIT` terms, with or without spaces between them.
fn written(units: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::collection::vec((number(), prop::sample::select(units), any::<bool>()), 1..4).prop_map(
        |terms| {
            terms
                .into_iter()
                .map(|(n, unit, space)| format!("{n}{}{unit}", if space { " " } else { "" }))
                .collect::<Vec<_>>()
                .join(" ")
        },
    )
}

/// The arithmetic a duration goes through: a deadline from now, and the run CA's
/// lifetime and dates for a run that long. None of it may overflow for an accepted value.
fn assert_usable(duration: std::time::Duration) -> Result<(), TestCaseError> {
    prop_assert!(
        !duration.is_zero() && duration <= MAX_DURATION,
        "{:?}",
        duration
    );
    prop_assert!(std::time::Instant::now().checked_add(duration).is_some());
    prop_assert!(std::time::SystemTime::now().checked_add(duration).is_some());
    let lifetime = units::ca_lifetime(duration);
    prop_assert!(lifetime <= MAX_CA_LIFETIME, "{:?}", lifetime);
    let (not_before, not_after) = run_ca_validity(lifetime).map_err(TestCaseError::fail)?;
    prop_assert_eq!(not_after - not_before, lifetime.as_secs() as i64);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever is written, a duration is refused or within bounds, and every use of an
    /// accepted one (deadline, CA lifetime and dates) is computed.
    #[test]
    fn every_written_duration_is_refused_or_bounded_and_usable(raw in written(DURATION_UNITS)) {
        if let Ok(duration) = units::parse_duration(&raw) {
            assert_usable(duration)?;
        }
    }

    /// Seconds as serve's JSON and MCP's arguments carry them: any `f64`.
    #[test]
    fn every_number_of_seconds_is_refused_or_bounded_and_usable(
        seconds in prop_oneof![any::<f64>(), 0.0f64..1_000_000.0, Just(f64::MAX)],
    ) {
        if let Ok(duration) = units::duration_from_seconds(&seconds.to_string(), seconds) {
            assert_usable(duration)?;
        }
    }

    /// Whatever is written, a size is refused or within bounds: Docker's signed byte
    /// counts hold it, and so does a sum of the three sizes of a run.
    #[test]
    fn every_written_size_is_refused_or_bounded(raw in written(SIZE_UNITS)) {
        if let Ok(size) = units::parse_size(&raw) {
            prop_assert!(size > 0 && size <= MAX_SIZE, "{}", size);
            prop_assert!(i64::try_from(size.checked_mul(3).unwrap()).is_ok());
        }
    }

    /// Any lifetime handed to the proxy (the handoff's `ca_lifetime_s`, a `u64`): the run
    /// CA's dates are computed or refused, never a panic, and refused exactly outside
    /// (1 minute, MAX_CA_LIFETIME].
    #[test]
    fn every_ca_lifetime_is_refused_or_gives_dates_that_span_it(seconds in prop_oneof![
        any::<u64>(),
        0u64..=MAX_CA_LIFETIME.as_secs() + 10,
    ]) {
        let lifetime = std::time::Duration::from_secs(seconds);
        let accepted = seconds > 60 && lifetime <= MAX_CA_LIFETIME;
        match run_ca_validity(lifetime) {
            Ok((not_before, not_after)) => {
                prop_assert!(accepted, "{}", seconds);
                prop_assert_eq!(not_after - not_before, seconds as i64);
            }
            Err(_) => prop_assert!(!accepted, "{}", seconds),
        }
    }
}
