use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;

fn name(raw: &str) -> String {
    match Target::parse_host(raw) {
        Ok(Target::Name(name)) => name.as_str().to_owned(),
        other => panic!("{raw:?} should be a name, got {other:?}"),
    }
}

fn ip(raw: &str) -> IpAddr {
    match Target::parse_host(raw) {
        Ok(Target::Ip(ip)) => ip,
        other => panic!("{raw:?} should be an address, got {other:?}"),
    }
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

fn err(raw: &str) -> TargetError {
    match Target::parse_host(raw) {
        Err(error) => error,
        Ok(target) => panic!("{raw:?} should be refused, got {target:?}"),
    }
}

#[test]
fn names_are_lowercased_and_lose_one_trailing_dot() {
    assert_eq!(name("API.Example.COM."), "api.example.com");
    assert_eq!(name("api.example.com"), "api.example.com");
    assert_eq!(name("localhost"), "localhost");
    assert_eq!(
        name("_acme-challenge.x-y.example"),
        "_acme-challenge.x-y.example"
    );
    assert_eq!(err("api.example.com.."), TargetError::EmptyLabel);
    assert_eq!(err("."), TargetError::Empty);
    assert_eq!(err(""), TargetError::Empty);
}

#[test]
fn idn_becomes_punycode() {
    assert_eq!(name("bücher.de"), "xn--bcher-kva.de");
    assert_eq!(name("BÜCHER.de"), "xn--bcher-kva.de");
    assert_eq!(name("xn--bcher-kva.de"), "xn--bcher-kva.de");
    // Ideographic full stop is a dot to IDNA.
    assert_eq!(name("bücher。de"), "xn--bcher-kva.de");
    assert_eq!(
        HostName::parse("例え.テスト").unwrap().as_str(),
        "xn--r8jz45g.xn--zckzah"
    );
}

#[test]
fn idna_mapping_drops_ignored_code_points() {
    // UTS #46 maps zero-width space to nothing, as browsers do: one name, one spelling.
    assert_eq!(name("a\u{200b}b.com"), "ab.com");
}

#[test]
fn idn_that_spells_an_address_is_an_address() {
    // Fullwidth digits and ideographic dots map to ASCII: this is 127.0.0.1.
    assert_eq!(ip("１２７。０。０。１"), v4(127, 0, 0, 1));
}

#[test]
fn non_ascii_that_fails_idna_is_refused() {
    assert_eq!(err("a\u{e000}b.com"), TargetError::Idna); // private use: disallowed
    assert_eq!(err("xn--a.com\u{fffd}"), TargetError::Idna);
    // Fullwidth `＠` maps to `@`, which has no place in a host.
    assert_eq!(err("a＠b.com"), TargetError::Idna);
}

#[test]
fn dotted_quad_and_inet_aton_spellings_are_addresses() {
    assert_eq!(ip("127.0.0.1"), v4(127, 0, 0, 1));
    assert_eq!(ip("127.0.0.1."), v4(127, 0, 0, 1));
    assert_eq!(ip("2852039166"), v4(169, 254, 169, 254));
    assert_eq!(ip("0x7f000001"), v4(127, 0, 0, 1));
    assert_eq!(ip("0X7F000001"), v4(127, 0, 0, 1));
    assert_eq!(ip("0177.0.0.1"), v4(127, 0, 0, 1));
    assert_eq!(ip("0177.0000.0.01"), v4(127, 0, 0, 1));
    assert_eq!(ip("127.1"), v4(127, 0, 0, 1));
    assert_eq!(ip("127.0.1"), v4(127, 0, 0, 1));
    assert_eq!(ip("0x7f.1"), v4(127, 0, 0, 1));
    assert_eq!(ip("0x7f.0.0x0.01"), v4(127, 0, 0, 1));
    assert_eq!(ip("169.254.43518"), v4(169, 254, 169, 254));
    assert_eq!(ip("0xa9.0xfe.0xa9.0xfe"), v4(169, 254, 169, 254));
    assert_eq!(ip("0"), v4(0, 0, 0, 0));
    assert_eq!(ip("0x"), v4(0, 0, 0, 0));
    assert_eq!(ip("4294967295"), v4(255, 255, 255, 255));
    assert_eq!(ip("10.0xffffff"), v4(10, 255, 255, 255));
}

#[test]
fn numeric_hosts_that_are_not_addresses_are_never_names() {
    for raw in [
        "4294967296",
        "1.2.3.4.5",
        "256.0.0.1",
        "1.256.1",
        "1.2.65536",
        "08.0.0.1",
        "example.123",
        "example.0x1f",
        "a.b.0x",
        "99999999999999999999999",
    ] {
        let error = err(raw);
        assert!(
            matches!(
                error,
                TargetError::NumericNotAddress | TargetError::BadByte { .. }
            ),
            "{raw:?}: {error:?}"
        );
    }
    assert_eq!(err("example.123"), TargetError::NumericNotAddress);
    // A numeric label elsewhere is fine; hex-looking words are ordinary labels.
    assert_eq!(name("123.example.com"), "123.example.com");
    assert_eq!(name("cafe.beef"), "cafe.beef");
    assert_eq!(name("0x1.example"), "0x1.example");
    // Not hex after `0x`: a name to inet_aton and WHATWG alike.
    assert_eq!(name("0x1g"), "0x1g");
}

#[test]
fn ipv6_literals_in_every_form() {
    assert_eq!(ip("[::1]"), IpAddr::V6(Ipv6Addr::LOCALHOST));
    assert_eq!(ip("::1"), IpAddr::V6(Ipv6Addr::LOCALHOST));
    assert_eq!(
        ip("[2001:DB8::1]"),
        "2001:db8::1".parse::<IpAddr>().unwrap()
    );
    // IPv4-mapped becomes the IPv4 address; compatible stays IPv6 (the floor reads it).
    assert_eq!(ip("[::ffff:127.0.0.1]"), v4(127, 0, 0, 1));
    assert_eq!(ip("::ffff:7f00:1"), v4(127, 0, 0, 1));
    assert_eq!(
        ip("[::127.0.0.1]"),
        "::127.0.0.1".parse::<IpAddr>().unwrap()
    );
    assert_eq!(err("[fe80::1%eth0]"), TargetError::Ipv6ZoneId);
    assert_eq!(err("fe80::1%25eth0"), TargetError::Ipv6ZoneId);
    assert_eq!(err("[::1"), TargetError::BadIpv6);
    assert_eq!(err("[127.0.0.1]"), TargetError::BadIpv6);
    assert_eq!(err("[example.com]"), TargetError::BadIpv6);
    assert_eq!(err("::1::2"), TargetError::BadIpv6);
    // A colon in something that is not an IPv6 address is a bad byte of a name.
    assert!(matches!(
        err("::g"),
        TargetError::BadByte { position: 0, .. }
    ));
}

#[test]
fn bad_bytes_are_refused_with_their_position() {
    for (raw, position) in [
        ("a b.com", 1),
        ("a%2e.com", 1),
        ("user@host", 4),
        ("host/path", 4),
        ("a\\b", 1),
        ("\"quoted\"", 0),
        ("it's.com", 2),
        ("evil.com\r\nX-Injected: 1", 8),
        ("nul\0.com", 3),
        ("tab\t.com", 3),
        ("*.example.com", 0),
    ] {
        match err(raw) {
            TargetError::BadByte {
                position: found, ..
            } => {
                assert_eq!(found, position, "{raw:?}")
            }
            other => panic!("{raw:?}: {other:?}"),
        }
    }
    // Non-ASCII input with an ASCII troublemaker: refused before IDNA, same position.
    match err("bü cher.de") {
        TargetError::BadByte { found, position } => {
            assert_eq!(position, 3);
            assert_eq!(found, "a space");
        }
        other => panic!("{other:?}"),
    }
    assert!(err("a\u{7f}b").to_string().contains("control character"));
}

#[test]
fn lengths_are_bounded() {
    let label63 = "a".repeat(63);
    assert_eq!(name(&format!("{label63}.com")).len(), 67);
    assert_eq!(
        err(&format!("{}.com", "a".repeat(64))),
        TargetError::LabelTooLong { len: 64 }
    );
    // 4 labels of 63 + 3 dots = 255 > 253.
    let long = [label63.as_str(); 4].join(".");
    assert!(matches!(err(&long), TargetError::TooLong { len: 255, .. }));
    let max = format!("{}.{}.{}.{}", label63, label63, label63, "a".repeat(61));
    assert_eq!(name(&max).len(), 253);
    assert_eq!(name(&format!("{max}.")).len(), 253);
    let huge = "a".repeat(100_000);
    assert!(matches!(err(&huge), TargetError::TooLong { .. }));
}

#[test]
fn host_name_parse_refuses_addresses() {
    assert_eq!(
        HostName::parse("127.1"),
        Err(TargetError::IpLiteral(v4(127, 0, 0, 1)))
    );
    assert!(matches!(
        HostName::parse("[::1]"),
        Err(TargetError::IpLiteral(_))
    ));
    assert_eq!(
        HostName::parse("Example.COM").unwrap().as_str(),
        "example.com"
    );
}

fn authority(raw: &str, default: Option<u16>) -> Result<(String, u16), TargetError> {
    Target::parse_authority(raw, default).map(|(target, port)| (target.to_string(), port))
}

#[test]
fn authorities_with_and_without_ports() {
    assert_eq!(
        authority("Example.com:443", None),
        Ok(("example.com".into(), 443))
    );
    assert_eq!(
        authority("example.com", Some(80)),
        Ok(("example.com".into(), 80))
    );
    assert_eq!(
        authority("example.com", None),
        Err(TargetError::MissingPort)
    );
    assert_eq!(authority("[::1]:8443", None), Ok(("[::1]".into(), 8443)));
    assert_eq!(authority("[::1]", Some(443)), Ok(("[::1]".into(), 443)));
    assert_eq!(authority("127.1:80", None), Ok(("127.0.0.1".into(), 80)));
    assert_eq!(
        authority("2852039166:80", None),
        Ok(("169.254.169.254".into(), 80))
    );
    assert_eq!(
        authority("::1:443", None),
        Err(TargetError::Ipv6NeedsBrackets)
    );
    assert_eq!(
        authority("::1", Some(443)),
        Err(TargetError::Ipv6NeedsBrackets)
    );
    assert_eq!(authority("[::1]x", None), Err(TargetError::BadIpv6));
}

#[test]
fn authorities_refuse_ports_out_of_range_and_garbage() {
    assert_eq!(
        authority("a.com:0", None),
        Err(TargetError::PortOutOfRange(0))
    );
    assert_eq!(
        authority("a.com:65536", None),
        Err(TargetError::PortOutOfRange(65536))
    );
    assert_eq!(
        authority("a.com:99999", None),
        Err(TargetError::PortOutOfRange(99999))
    );
    assert_eq!(
        authority("a.com:", None),
        Err(TargetError::BadPort(String::new()))
    );
    assert_eq!(
        authority("a.com:+80", None),
        Err(TargetError::BadPort("+80".into()))
    );
    assert_eq!(
        authority("a.com:8o", None),
        Err(TargetError::BadPort("8o".into()))
    );
    assert_eq!(
        authority("a.com:123456", None),
        Err(TargetError::BadPort("123456".into()))
    );
    assert_eq!(authority("a.com:443", None), Ok(("a.com".into(), 443)));
    assert_eq!(authority("a.com:00443", None), Ok(("a.com".into(), 443)));
    assert_eq!(authority(":443", None), Err(TargetError::Empty));
}

#[test]
fn authorities_refuse_schemes_userinfo_and_paths() {
    assert_eq!(authority("https://a.com", None), Err(TargetError::Scheme));
    assert_eq!(
        authority("user:pw@a.com:443", None),
        Err(TargetError::Userinfo)
    );
    assert_eq!(
        authority("a.com@evil.com:443", None),
        Err(TargetError::Userinfo)
    );
    assert_eq!(authority("a.com/x:443", None), Err(TargetError::Path));
    assert_eq!(authority("a.com:443/", None), Err(TargetError::Path));
    assert_eq!(authority("a.com:443?x", None), Err(TargetError::Path));
    assert_eq!(authority("a.com#x", Some(1)), Err(TargetError::Path));
}

#[test]
fn display_brackets_ipv6() {
    assert_eq!(Target::parse_host("::1").unwrap().to_string(), "[::1]");
    assert_eq!(
        Target::parse_host("0x7f000001").unwrap().to_string(),
        "127.0.0.1"
    );
}
