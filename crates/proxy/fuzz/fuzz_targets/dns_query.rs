//! The DNS responder: `fuzzing::dns_respond` on any datagram, against a small policy.
//!
//! Properties: every reply parses as a DNS message, carries the query's id and is a
//! response; only an allowed name gets an answer, and only the proxy's address, never a name
//! that carries the run's placeholder (tripwire); nothing
//! is answered to a response or to a datagram too short to carry an id; the sandbox's own
//! host name gets no answer records; the audit host holds no character that must be
//! escaped for a person.
#![no_main]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Mutex, OnceLock};

use egress_core::audit::{AuditRecord, OnAuditLimit};

use egress_proxy::{AuditDestination, AuditSink};
use egress_proxy::fuzzing::dns_respond;
use egress_core::policy::{Policy, PolicySet, Verdict};
use egress_proxy::fuzzing::Placeholders;
use egress_core::target::HostName;
use egress_core::text::must_escape;
use hickory_proto::op::{Message, MessageType};
use hickory_proto::rr::RData;
use libfuzzer_sys::fuzz_target;
use tokio::sync::mpsc::UnboundedReceiver;

const ANSWER: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 2);
/// Short, unlike a real one, so that the fuzzer finds names that carry it.
const PLACEHOLDER: &str = "ph-0a";
/// The sandbox's own host name, short for the same reason.
const OWN_NAME: &str = "sb-0a";

struct State {
    policy: PolicySet,
    placeholders: Placeholders,
    own_name: HostName,
    audit: AuditSink,
    records: Mutex<UnboundedReceiver<AuditRecord>>,
}

fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| {
        let flags = ["allowed.test".to_owned(), "*.wild.test".to_owned()];
        let policy = PolicySet::from(Policy::from_allow_flags(&flags).expect("flags"));
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let audit = AuditSink::start(
            AuditDestination::Channel(tx),
            None,
            "fuzz",
            u64::MAX,
            OnAuditLimit::Reserve,
        )
        .expect("sink");
        State {
            policy,
            placeholders: Placeholders::new([("KEY", PLACEHOLDER)]),
            own_name: HostName::parse(OWN_NAME).expect("a name"),
            audit,
            records: Mutex::new(rx),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let state = state();
    let client: SocketAddr = "10.200.0.3:5353".parse().expect("address");
    let reply = dns_respond(
        data,
        client,
        &state.policy,
        &state.placeholders,
        Some(&state.own_name),
        ANSWER,
        &state.audit,
    );
    let request = Message::from_vec(data);
    match reply {
        None => assert!(
            data.len() < 12 || request.is_ok_and(|r| r.metadata.message_type != MessageType::Query),
            "a query went unanswered"
        ),
        Some(reply) => {
            let reply = Message::from_vec(&reply).expect("the reply parses");
            assert_eq!(reply.metadata.id, u16::from_be_bytes([data[0], data[1]]));
            assert_eq!(reply.metadata.message_type, MessageType::Response);
            for answer in &reply.answers {
                assert_eq!(answer.data, RData::A(ANSWER.into()), "{answer:?}");
                let name = HostName::parse(&answer.name.to_ascii()).expect("a name");
                assert_ne!(name, state.own_name, "the sandbox's own name answered");
                let verdict = state.policy.decide_name(&name).verdict;
                assert_eq!(verdict, Verdict::Allow, "{} answered", answer.name);
                let carries = state.placeholders.find([answer.name.to_ascii().as_bytes()], None);
                assert!(carries.is_none(), "{} answered", answer.name);
            }
        }
    }
    // Records are written by the audit thread: check those that have arrived. A violation
    // names the host, which is what reproduces it.
    let mut records = state.records.lock().expect("records");
    while let Ok(record) = records.try_recv() {
        assert!(
            !record.host.chars().any(must_escape),
            "audit host holds a raw control character: {:?}",
            record.host
        );
    }
});
