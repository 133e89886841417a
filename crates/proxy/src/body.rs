//! The body type every response and forwarded request of the proxy has, in a module of its
//! own so the doors, the refusal answers and the upstream pool can share it without
//! depending on each other.

use bytes::Bytes;
use http_body_util::combinators::BoxBody;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every body the proxy answers with: a refusal text or an upstream's streamed body.
pub(crate) type ProxyBody = BoxBody<Bytes, BoxError>;
