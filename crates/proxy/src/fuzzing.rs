//! Entry points for the fuzz targets (`proxy/fuzz`) and the property tests: thin wrappers
//! over crate-private parsers, so that they exercise exactly the functions the doors run
//! rather than copies. Not a stable API; hidden from the documentation.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use http::Request;

use crate::audit::AuditSink;
pub use crate::secrets::Placeholders;
use crate::target::HostName;

use crate::policy::{HostPattern, Policy, Reason};
use crate::target::Target;

/// The ClientHello reader the TLS doors run, and its checks.
pub mod sni {
    pub use crate::sni::{ClientHello, SniError, check, extension_types, read_client_hello};
}

/// Which door a request came in on (mirrors the private `http::Door`).
#[derive(Clone, Copy, Debug)]
pub enum RequestDoor {
    /// The explicit proxy listener: absolute-form requests.
    Explicit,
    /// A transparent HTTP listener on this port: origin-form requests routed by `Host`.
    Transparent { port: u16 },
}

/// What the HTTP doors make of a request's target: `Ok((target, port))`, or the raw bytes
/// that go in the audit record, the reason and the detail for the client.
pub fn request_target<B>(
    door: RequestDoor,
    request: &Request<B>,
) -> Result<(Target, u16), (Vec<u8>, Reason, &'static str)> {
    let door = match door {
        RequestDoor::Explicit => crate::shared::Door::Explicit,
        RequestDoor::Transparent { port } => crate::shared::Door::Transparent { port },
    };
    crate::doors::http::request_target(door, request)
}

/// What the `CONNECT` door makes of its authority (`host:port`, port required).
pub fn connect_authority(authority: &str) -> Result<(Target, u16), &'static str> {
    crate::doors::connect::parse_connect_authority(authority)
}

/// The `host:` patterns of a policy's allow and deny rules, in file order.
pub fn host_patterns(policy: &Policy) -> Vec<HostPattern> {
    policy.host_patterns()
}

/// The DNS responder's answer to one query message (`None` = dropped), its record queued:
/// with the run's `policy`, `placeholders` and the sandbox's `own_name`, no raw doors.
pub fn dns_respond(
    query: &[u8],
    client: SocketAddr,
    policy: &crate::policy::PolicySet,
    placeholders: &Placeholders,
    own_name: Option<&HostName>,
    answer: Ipv4Addr,
    audit: &AuditSink,
) -> Option<Vec<u8>> {
    // A gate that connects nowhere: the responder never resolves or connects.
    let gate = crate::gate::Gate::new(
        policy.clone(),
        crate::floor::Floor::with_extra(Vec::new()),
        crate::resolve::Resolver::new(
            Vec::new(),
            &crate::resolve::NameServers::None,
            Duration::ZERO,
        ),
        Duration::ZERO,
        audit.clone(),
    )
    .with_placeholders(placeholders.clone());
    let context = crate::doors::dns::AnswerContext {
        gate: &gate,
        own_name,
        names: None,
    };
    crate::doors::dns::respond(query, client, context, answer)
}

/// The run CA's `notBefore` and `notAfter` (Unix seconds) for a CA made now that lives
/// `lifetime`, as the proxy computes them, or why it would refuse.
pub fn run_ca_validity(lifetime: std::time::Duration) -> Result<(i64, i64), String> {
    crate::ca::validity(time::OffsetDateTime::now_utc(), lifetime)
        .map(|(not_before, not_after)| (not_before.unix_timestamp(), not_after.unix_timestamp()))
        .map_err(|error| error.to_string())
}

/// The answer scrubber of the inspect door: the body it streams frame by frame
/// (`exchange::Scrubbed`), and the forms of a secret it looks for.
pub mod scrub {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};

    use bytes::Bytes;
    use http::HeaderMap;
    use hyper::body::{Body, Frame};

    use crate::exchange::Scrubbed;
    use crate::secret_forms::SecretForms;

    /// One form of a secret: the text looked for (in any ASCII letter case), what replaces
    /// it, and whether it is hex (the replacement then follows the match's letter case).
    #[derive(Clone, Debug)]
    pub struct Form {
        pub needle: Vec<u8>,
        pub replacement: Vec<u8>,
        pub hex: bool,
    }

    /// The forms of `secret`, each with `placeholder` in that form (empty ones included).
    pub fn forms(secret: &str, placeholder: &str) -> Vec<Form> {
        crate::secret_forms::forms_of(secret.as_bytes(), placeholder.as_bytes())
            .into_iter()
            .map(|(needle, replacement, hex)| Form {
                needle,
                replacement,
                hex,
            })
            .collect()
    }

    /// An upstream's answer body as hyper's client hands it over: these frames, each ready.
    struct Frames(VecDeque<Frame<Bytes>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    /// A run's secrets as the scrubber holds them, made once (name, value, placeholder).
    pub struct Secrets(Arc<SecretForms>);

    impl Secrets {
        pub fn new(secrets: &[(&str, &str, &str)]) -> Secrets {
            Secrets(Arc::new(SecretForms::new(secrets.iter().copied())))
        }

        /// A body's frames once scrubbed, as the sandbox is sent them, and how many
        /// occurrences were replaced (the record's `reflected`).
        pub fn scrub_frames(&self, frames: Vec<Frame<Bytes>>) -> (Vec<Frame<Bytes>>, u64) {
            let mut body = Scrubbed::new(Frames(frames.into()), self.0.clone(), 0);
            let mut context = Context::from_waker(Waker::noop());
            let mut out = Vec::new();
            loop {
                match Pin::new(&mut body).poll_frame(&mut context) {
                    Poll::Ready(Some(Ok(frame))) => out.push(frame),
                    Poll::Ready(Some(Err(error))) => {
                        panic!("a body of ready frames failed: {error}")
                    }
                    Poll::Ready(None) => break,
                    Poll::Pending => panic!("a body of ready frames is pending"),
                }
            }
            assert!(body.is_end_stream(), "the scrubbed body ended unfinished");
            (out, body.replaced())
        }

        /// Header names and values scrubbed, as the answer's head and trailers are.
        pub fn scrub_headers(&self, headers: &mut HeaderMap) -> u64 {
            crate::scrub::scrub_headers(headers, &self.0)
        }
    }
}
