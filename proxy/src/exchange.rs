//! One forwarded HTTP request and its answer (the plain and the inspected doors): the two
//! bodies that cross the proxy, counted, and the request's record written once both are done.
//!
//! An upstream may answer before it has read the whole request body — nginx answers a large
//! upload with an early 413 — and the client goes on sending while the proxy goes on
//! forwarding. A record written when the answer ends would say `bytes_up: 0` for an upload
//! of any size to an allowed host. So the answer's end only hands the record to the upload:
//! it is written when the request body is done too, or when shutdown begins (with what was
//! sent until then), whichever comes first.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName};
use http::{Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::Notify;

use crate::audit::{Attempt, Outcome};
use crate::body::{BoxError, ProxyBody};
use crate::policy::Reason;
use crate::refusal::{Refusal, refuse};
use crate::shutdown::Shutdown;

/// The request body's side of an exchange: what it has sent upstream and whether it is done.
#[derive(Default)]
pub(crate) struct Upload {
    bytes: AtomicU64,
    done: AtomicBool,
    finished: Notify,
}

impl Upload {
    pub(crate) fn new() -> Arc<Upload> {
        Arc::default()
    }

    fn finish(&self) {
        if !self.done.swap(true, Ordering::AcqRel) {
            // A stored permit: the record's waiter may start waiting after this.
            self.finished.notify_one();
        }
    }

    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }
}

/// `body` as the upstream gets it, counting what it delivers into `upload`.
pub(crate) fn counting_body(body: Incoming, upload: Arc<Upload>) -> ProxyBody {
    CountingBody {
        inner: body,
        upload,
    }
    .boxed()
}

/// A request body that counts what it delivers upstream and says when it is done.
struct CountingBody {
    inner: Incoming,
    upload: Arc<Upload>,
}

impl Body for CountingBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.upload
                        .bytes
                        .fetch_add(data.len() as u64, Ordering::AcqRel);
                }
            }
            Poll::Ready(None | Some(Err(_))) => self.upload.finish(),
            Poll::Pending => {}
        }
        polled.map_err(BoxError::from)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for CountingBody {
    fn drop(&mut self) {
        self.upload.finish();
    }
}

/// The upstream's answer, as [`counted_response`] passes it on; but a 502 when the upstream
/// switched protocols: the proxy removed the request's `Upgrade` (it relays HTTP only), so
/// a `101` would leave the client on a connection nobody relays, its next requests lost.
pub(crate) async fn answer(
    response: Response<Incoming>,
    mut attempt: Attempt,
    upload: Arc<Upload>,
    shutdown: Shutdown,
) -> Response<ProxyBody> {
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        attempt.set_outcome(Outcome::Failed, Reason::ConnectFailed, None);
        let refusal = Refusal::of(
            &attempt,
            "the upstream switched protocols (101), which the proxy does not relay",
        );
        return refuse(attempt, &refusal).await;
    }
    counted_response(response, attempt, upload, shutdown)
}

/// The upstream's answer with its body counted; the attempt's record is written once this
/// body and the request body (`upload`) are both done, or at shutdown.
fn counted_response(
    response: Response<Incoming>,
    attempt: Attempt,
    upload: Arc<Upload>,
    shutdown: Shutdown,
) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let body = CountedBody {
        inner: body,
        record: Some((attempt, shutdown)),
        upload,
    };
    Response::from_parts(parts, body.boxed())
}

/// A response body that counts what it delivers into the attempt it owns.
struct CountedBody {
    inner: Incoming,
    /// The attempt, and the hold on shutdown its record keeps until written; taken on drop.
    record: Option<(Attempt, Shutdown)>,
    upload: Arc<Upload>,
}

impl Body for CountedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
            && let Some((attempt, _)) = self.record.as_mut()
        {
            attempt.bytes_down += data.len() as u64;
        }
        polled.map_err(BoxError::from)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for CountedBody {
    /// The answer is done: the record is written now if the upload is done too, else by a
    /// task that waits for the upload's end or for shutdown. The task holds a [`Shutdown`],
    /// so the proxy's end waits for the record.
    fn drop(&mut self) {
        let Some((mut attempt, mut shutdown)) = self.record.take() else {
            return;
        };
        let upload = self.upload.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !upload.done.load(Ordering::Acquire) => {
                runtime.spawn(async move {
                    tokio::select! {
                        () = upload.finished.notified() => {}
                        () = shutdown.wait() => {}
                    }
                    attempt.bytes_up = upload.bytes();
                    drop(attempt);
                });
            }
            _ => attempt.bytes_up = upload.bytes(),
        }
    }
}

/// The path and query the upstream is asked for: an absolute URL with no path
/// (`http://host:8080?x=1`) asks for `/` with its query kept, as a browser does.
pub(crate) fn origin_form(uri: &Uri) -> String {
    let path = Some(uri.path())
        .filter(|path| path.starts_with('/'))
        .unwrap_or("/");
    match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    }
}

/// Removes headers that belong to one hop: those named in `Connection`, and the fixed list.
/// `Transfer-Encoding` goes too: hyper frames each side's body itself.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|value| {
            String::from_utf8_lossy(value.as_bytes())
                .split(',')
                .filter_map(|token| HeaderName::try_from(token.trim()).ok())
                .collect::<Vec<_>>()
        })
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        HeaderName::from_static("keep-alive"),
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}
