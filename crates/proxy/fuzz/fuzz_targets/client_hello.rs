//! The ClientHello/SNI reader: `sni::read_client_hello` and `sni::extension_types` on any
//! bytes, whole or delivered in two pieces.
//!
//! Properties: the result does not depend on how the bytes arrive (all at once, or a prefix
//! first and the rest from the stream); a hello that reads keeps exactly the bytes it was
//! given as a prefix of the input (they are replayed upstream unchanged) and its extensions
//! parse; a server name is printable and, when it is a valid host name, passes the check
//! against itself unless ECH is present.
#![no_main]

use std::time::Duration;

use egress_proxy::fuzzing::sni::{self, ClientHello, SniError};
use egress_core::target::{HostName, Target};
use egress_core::text::must_escape;
use libfuzzer_sys::fuzz_target;

/// The proxy's default bound on a ClientHello.
fn max_bytes() -> usize {
    egress_proxy::ProxyLimits::default().max_client_hello_bytes
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = runtime();
}

fn read(initial: &[u8], rest: &[u8]) -> Result<ClientHello, SniError> {
    let mut stream = rest;
    RUNTIME.with(|rt| {
        rt.block_on(sni::read_client_hello(
            &mut stream,
            initial.to_vec(),
            max_bytes(),
            Duration::from_secs(10),
        ))
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = sni::extension_types(data);
    let whole = read(data, &[]);
    let split_at = data
        .first()
        .map_or(0, |&b| usize::from(b) % (data.len() + 1));
    let (first, rest) = data.split_at(split_at);
    let pieces = read(first, rest);
    match (&whole, &pieces) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.server_name, b.server_name);
            assert_eq!(a.ech, b.ech);
        }
        (Err(_), Err(_)) => {}
        _ => panic!("the result depends on how the bytes arrive: {whole:?} vs {pieces:?}"),
    }
    for hello in [whole, pieces].into_iter().flatten() {
        assert!(
            data.starts_with(&hello.bytes),
            "the hello's bytes are not the input's"
        );
        assert!(sni::extension_types(&hello.bytes).is_some());
        if let Some(name) = &hello.server_name {
            assert!(!name.chars().any(must_escape), "{name:?}");
            if let Ok(host) = HostName::parse(name) {
                let checked = sni::check(&Target::Name(host), &hello);
                assert_eq!(checked.is_ok(), !hello.ech, "{checked:?}");
            }
        }
    }
});
