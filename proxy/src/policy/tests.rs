use std::net::IpAddr;

use super::*;
use crate::target::{HostName, Target};

fn policy(yaml: &str) -> Policy {
    match Policy::from_yaml("test.yaml", yaml) {
        Ok((policy, _)) => policy,
        Err(error) => panic!("policy refused:\n{error}"),
    }
}

fn set(yaml: &str) -> PolicySet {
    PolicySet::merge(vec![policy(yaml)])
}

fn decide(set: &PolicySet, host: &str, port: u16) -> (Verdict, Reason, Option<String>) {
    let target = Target::parse_host(host).expect("valid target");
    let decision = set.decide(&target, port);
    (
        decision.verdict,
        decision.reason,
        decision.rule.map(|rule| rule.to_string()),
    )
}

#[test]
fn smoke_exact_and_wildcard() {
    let set = set(
        "version: 1\nname: t\nallow:\n  - host: api.x.com\n  - host: \"*.y.com\"\n    ports: [443, 8443]\n",
    );
    assert_eq!(
        decide(&set, "API.X.com.", 443),
        (Verdict::Allow, Reason::Rule, Some("t:allow[0]".into()))
    );
    assert_eq!(decide(&set, "evilapi.x.com", 443).1, Reason::NotAllowed);
    assert_eq!(decide(&set, "api.x.com", 80).1, Reason::PortNotAllowed);
    assert_eq!(decide(&set, "a.b.y.com", 8443).0, Verdict::Allow);
    assert_eq!(decide(&set, "y.com", 443).1, Reason::NotAllowed);
    assert_eq!(decide(&set, "127.1", 443).1, Reason::IpLiteral);
    assert_eq!(
        set.decide_name(&HostName::parse("q.y.com").unwrap())
            .verdict,
        Verdict::Allow
    );
    let addr: IpAddr = "127.0.0.1".parse().unwrap();
    assert_eq!(set.check_address(addr, 443).reason, Reason::PrivateAddress);
}
