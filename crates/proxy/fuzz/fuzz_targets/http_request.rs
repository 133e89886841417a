//! The HTTP request head and its target: bytes go through hyper's HTTP/1 server (with the
//! proxy's head limits) on an in-memory connection, and every request hyper accepts goes
//! through the doors' own target functions: `CONNECT` authority, absolute URI, `Host`.
//!
//! Properties: a target re-parses to itself from its canonical `host:port`; its port is not
//! 0; an absolute `http://` URI and the explicit door agree with the transparent door given
//! the same URI; what a refusal records as the host holds no character that must be escaped
//! for a person (the audit record's host, contract 1).
#![no_main]

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use egress_core::audit::raw_host_for_log;
use egress_proxy::fuzzing::{RequestDoor, connect_authority, request_target};
use egress_core::target::Target;
use egress_core::text::must_escape;
use http::{Method, Request, Response};
use http_body_util::Empty;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection whose client sends `input` and then closes; what the server writes is
/// discarded.
struct Scripted {
    input: Bytes,
}

impl AsyncRead for Scripted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.input.len().min(buf.remaining());
        let now = self.input.split_to(n);
        buf.put_slice(&now);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn check_target(target: &Target, port: u16) {
    assert_ne!(port, 0);
    let again = format!("{target}:{port}");
    assert!(!again.chars().any(must_escape), "{again:?}");
    assert_eq!(
        Target::parse_authority(&again, None),
        Ok((target.clone(), port)),
        "{again:?}"
    );
}

fn check_refusal(raw: &[u8]) {
    let host = raw_host_for_log(raw);
    assert!(
        !host.chars().any(must_escape),
        "a refusal's audit host holds a raw control character: {host:?}"
    );
}

/// What the doors make of one request hyper accepted.
fn judge<B>(request: &Request<B>) {
    if request.method() == Method::CONNECT {
        let uri = request.uri();
        // As `connect::handle`: authority-form only.
        match (uri.authority(), uri.scheme(), uri.path_and_query()) {
            (Some(authority), None, None) => match connect_authority(authority.as_str()) {
                Ok((target, port)) => check_target(&target, port),
                Err(_) => check_refusal(authority.as_str().as_bytes()),
            },
            _ => check_refusal(uri.to_string().as_bytes()),
        }
        return;
    }
    let explicit = request_target(RequestDoor::Explicit, request);
    let transparent = request_target(RequestDoor::Transparent { port: 8080 }, request);
    for result in [&explicit, &transparent] {
        match result {
            Ok((target, port)) => check_target(target, *port),
            Err((raw, _, _)) => check_refusal(raw),
        }
    }
    // With an absolute URI both doors read the same authority, except that the transparent
    // door (listening on 8080 here) refuses a URL naming another port.
    if request.uri().scheme().is_some() {
        let expected = explicit.as_ref().ok().filter(|(_, port)| *port == 8080);
        assert_eq!(expected, transparent.as_ref().ok(), "{}", request.uri());
    }
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
}

fuzz_target!(|data: &[u8]| {
    // Judged when hyper hands the request over, not in the response future: hyper may close
    // on the client's EOF before it polls that future.
    let service = service_fn(|request: Request<hyper::body::Incoming>| {
        judge(&request);
        std::future::ready(Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())))
    });
    // As `http::serve` with the proxy's default limits.
    let max_head = egress_proxy::ProxyLimits::default().max_head_bytes;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_header_size(max_head)
        .max_buf_size(max_head.max(8192))
        .half_close(false);
    let connection = builder
        .serve_connection(
            TokioIo::new(Scripted {
                input: Bytes::copy_from_slice(data),
            }),
            service,
        )
        .with_upgrades();
    RUNTIME.with(|rt| {
        let _ = rt.block_on(connection);
    });
});
