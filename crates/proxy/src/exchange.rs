//! One forwarded HTTP request and its answer (the plain and the inspected doors): the two
//! bodies that cross the proxy, counted, and the request's record written once both are done.
//!
//! An upstream may answer before it has read the whole request body — nginx answers a large
//! upload with an early 413 — and the client goes on sending while the proxy goes on
//! forwarding. A record written when the answer ends would say `bytes_up: 0` for an upload
//! of any size to an allowed host. So the answer's end only hands the record to the upload:
//! it is written when the request body is done too, or when shutdown begins (with what was
//! sent until then), whichever comes first.
//!
//! An inspected host's answer in a run with secrets is scrubbed on its way ([`crate::scrub`]):
//! the reason phrase replaced by the canonical one, headers at once, the body as it streams;
//! the record's `reflected` counts what was replaced.

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
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::audit::{Attempt, Outcome};
use crate::body::{BoxError, ProxyBody};
use crate::policy::Reason;
use crate::refusal::{Refusal, refuse};
use crate::scrub::{Scrubber, drop_reason_phrase, scrub_headers, scrub_text};
use crate::secret_forms::SecretForms;

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
    Counted {
        inner: body,
        meter: upload,
    }
    .boxed()
}

/// Where a [`Counted`] body reports what it delivered and when it ended.
trait Meter<B> {
    /// `bytes` of data went on to the reader.
    fn add(&mut self, bytes: u64);
    /// The body reached its end or failed; it may still be polled, and is dropped later.
    fn ended(&mut self) {}
    /// The body is dropped (after its end, or cut short); `body` is what it wrapped.
    fn dropped(&mut self, body: &B);
}

/// A body passed on frame by frame, the length of each data frame added to its meter: the
/// request body counts into its [`Upload`], the answer into its attempt.
struct Counted<B, T: Meter<B>> {
    inner: B,
    meter: T,
}

impl<B, T> Body for Counted<B, T>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
    T: Meter<B> + Unpin,
{
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
                    let bytes = data.len() as u64;
                    self.meter.add(bytes);
                }
            }
            Poll::Ready(None | Some(Err(_))) => self.meter.ended(),
            Poll::Pending => {}
        }
        polled.map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B, T: Meter<B>> Drop for Counted<B, T> {
    fn drop(&mut self) {
        self.meter.dropped(&self.inner);
    }
}

/// The request body's meter: it says when it is done, for the record that waits for it.
impl Meter<Incoming> for Arc<Upload> {
    fn add(&mut self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
    }

    fn ended(&mut self) {
        self.finish();
    }

    fn dropped(&mut self, _: &Incoming) {
        self.finish();
    }
}

/// The upstream's answer, as [`counted_response`] passes it on; but a 502 when the upstream
/// switched protocols: the proxy removed the request's `Upgrade` (it relays HTTP only), so
/// a `101` would leave the client on a connection nobody relays, its next requests lost.
/// With `secrets` (an inspected host in a run with secrets) the answer is scrubbed of them,
/// and one in an encoding the scrubber cannot read is refused (`upstream_encoding`).
/// A record that waits for its upload does so on `drain`.
pub(crate) async fn answer(
    response: Response<Incoming>,
    mut attempt: Attempt,
    upload: Arc<Upload>,
    drain: Drain,
    secrets: Option<&Arc<SecretForms>>,
) -> Response<ProxyBody> {
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        attempt.set_outcome(Outcome::Failed, Reason::ConnectFailed, None);
        let refusal = Refusal::of(
            &attempt,
            "the upstream switched protocols (101), which the proxy does not relay",
        );
        return refuse(attempt, &refusal).await;
    }
    let secrets = secrets.filter(|secrets| !secrets.is_empty());
    if let Some(secrets) = secrets
        && !response.body().is_end_stream()
        && let Some(coding) = crate::scrub::refuse_encoding(response.headers())
    {
        // The coding is the upstream's text, quoted back to the sandbox: scrubbed too.
        let (coding, reflected) = scrub_text(&coding, secrets);
        set_reflected(&mut attempt, reflected);
        attempt.set_outcome(Outcome::Failed, Reason::UpstreamEncoding, None);
        let refusal = Refusal::of(
            &attempt,
            format!(
                "the upstream answered in `{}` although `identity` was asked for",
                crate::text::visible(&coding)
            ),
        );
        return refuse(attempt, &refusal).await;
    }
    counted_response(response, attempt, upload, drain, secrets.cloned())
}

/// Where a record that waits for its upload waits: a task on the proxy's tracker (so
/// shutdown waits for the record), which ends at the upload's end or when `stop` is
/// cancelled.
#[derive(Clone)]
pub(crate) struct Drain {
    pub tasks: TaskTracker,
    pub stop: CancellationToken,
}

/// The upstream's answer with its body counted (and scrubbed with `secrets`); the attempt's
/// record is written once this body and the request body (`upload`) are both done, or at
/// shutdown.
fn counted_response(
    response: Response<Incoming>,
    attempt: Attempt,
    upload: Arc<Upload>,
    drain: Drain,
    secrets: Option<Arc<SecretForms>>,
) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let scrubbed = match secrets {
        None => Scrubbed {
            inner: body,
            scrubbing: None,
        },
        Some(secrets) => {
            let in_head = drop_reason_phrase(&mut parts.extensions, &secrets)
                + scrub_headers(&mut parts.headers, &secrets);
            if !body.is_end_stream() {
                // A replacement changes the body's length: hyper frames it anew (chunked).
                parts.headers.remove(header::CONTENT_LENGTH);
            }
            Scrubbed::new(body, secrets, in_head)
        }
    };
    let body = Counted {
        inner: scrubbed,
        meter: AnswerMeter {
            record: Some((attempt, drain)),
            upload,
        },
    };
    Response::from_parts(parts, body.boxed())
}

/// An answer being scrubbed: the streaming scrubber, what the head (reason phrase, headers,
/// trailers) had replaced, and a trailers frame waiting for the bytes the scrubber still
/// holds.
struct Scrubbing {
    scrubber: Scrubber,
    in_head: u64,
    queued: Option<Frame<Bytes>>,
}

impl Scrubbing {
    fn replaced(&self) -> u64 {
        self.in_head + self.scrubber.replaced()
    }
}

/// The answer's body as the client gets it: scrubbed when the answer is, passed on as it
/// is otherwise. Generic over the body it reads so the fuzz target runs this very code.
pub(crate) struct Scrubbed<B = Incoming> {
    inner: B,
    scrubbing: Option<Scrubbing>,
}

impl<B> Scrubbed<B> {
    /// `inner` scrubbed of `secrets`; `in_head` is what its head had replaced.
    pub(crate) fn new(inner: B, secrets: Arc<SecretForms>, in_head: u64) -> Self {
        Scrubbed {
            inner,
            scrubbing: Some(Scrubbing {
                scrubber: Scrubber::new(secrets),
                in_head,
                queued: None,
            }),
        }
    }

    /// What was replaced so far: in the head, the body and the trailers.
    pub(crate) fn replaced(&self) -> u64 {
        self.scrubbing.as_ref().map_or(0, Scrubbing::replaced)
    }
}

impl<B> Body for Scrubbed<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    /// The next frame as the client gets it: data scrubbed (never an empty data frame, which
    /// would end a chunked body), what the scrubber held back released at the end and
    /// before trailers.
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(scrubbing) = this.scrubbing.as_mut() else {
            return Pin::new(&mut this.inner).poll_frame(cx).map_err(Into::into);
        };
        if let Some(frame) = scrubbing.queued.take() {
            return Poll::Ready(Some(Ok(frame)));
        }
        loop {
            let frame = match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                Some(Err(error)) => return Poll::Ready(Some(Err(error.into()))),
                None if scrubbing.scrubber.has_pending() => {
                    return Poll::Ready(Some(Ok(Frame::data(scrubbing.scrubber.finish()))));
                }
                None => return Poll::Ready(None),
            };
            match frame.into_data() {
                Ok(data) => {
                    let released = scrubbing.scrubber.push(&data);
                    if !released.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(released))));
                    }
                }
                Err(frame) => {
                    let frame = match frame.into_trailers() {
                        Ok(mut trailers) => {
                            let secrets = scrubbing.scrubber.secrets().clone();
                            scrubbing.in_head += scrub_headers(&mut trailers, &secrets);
                            Frame::trailers(trailers)
                        }
                        Err(other) => other,
                    };
                    if !scrubbing.scrubber.has_pending() {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    scrubbing.queued = Some(frame);
                    return Poll::Ready(Some(Ok(Frame::data(scrubbing.scrubber.finish()))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
            && self
                .scrubbing
                .as_ref()
                .is_none_or(|s| s.queued.is_none() && !s.scrubber.has_pending())
    }

    fn size_hint(&self) -> SizeHint {
        match self.scrubbing {
            Some(_) => SizeHint::default(),
            None => self.inner.size_hint(),
        }
    }
}

/// The answer's meter: the attempt it counts into, whose record is written once the answer
/// and the request body (`upload`) are both done.
struct AnswerMeter {
    /// The attempt, and where its record waits for the upload; taken on drop.
    record: Option<(Attempt, Drain)>,
    upload: Arc<Upload>,
}

impl Meter<Scrubbed> for AnswerMeter {
    fn add(&mut self, bytes: u64) {
        if let Some((attempt, _)) = self.record.as_mut() {
            attempt.bytes_down += bytes;
        }
    }

    /// The answer is done: the record is written now if the upload is done too, else by a
    /// task that waits for the upload's end or for shutdown. The task is on the proxy's
    /// tracker, so the proxy's end waits for the record.
    fn dropped(&mut self, body: &Scrubbed) {
        let Some((mut attempt, drain)) = self.record.take() else {
            return;
        };
        set_reflected(&mut attempt, body.replaced());
        let upload = self.upload.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !upload.done.load(Ordering::Acquire) => {
                let Drain { tasks, stop } = drain;
                let wait = async move {
                    tokio::select! {
                        () = upload.finished.notified() => {}
                        () = stop.cancelled() => {}
                    }
                    attempt.bytes_up = upload.bytes();
                    drop(attempt);
                };
                tasks.spawn_on(wait, &runtime);
            }
            _ => attempt.bytes_up = upload.bytes(),
        }
    }
}

/// The record's `reflected`: absent when nothing was replaced.
fn set_reflected(attempt: &mut Attempt, reflected: u64) {
    if reflected > 0
        && let Some(fields) = attempt.request.as_mut()
    {
        fields.reflected = Some(reflected);
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
    static HOP_BY_HOP: [HeaderName; 9] = [
        header::CONNECTION,
        HeaderName::from_static("proxy-connection"),
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
        HeaderName::from_static("keep-alive"),
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ];
    // One look over the names, then a removal for each one present (a head carries one or
    // two: `Connection`, curl's `Proxy-Connection`), instead of nine lookups, each a hash,
    // for every request and every answer. Removing an absent name changes nothing.
    let mut present: Vec<HeaderName> = Vec::new();
    for name in headers.keys() {
        if HOP_BY_HOP.contains(name) {
            present.push(name.clone());
        }
    }
    if present.is_empty() {
        return;
    }
    if present.contains(&header::CONNECTION) {
        for value in headers.get_all(header::CONNECTION) {
            for token in String::from_utf8_lossy(value.as_bytes()).split(',') {
                if let Ok(name) = HeaderName::try_from(token.trim()) {
                    present.push(name);
                }
            }
        }
    }
    for name in present {
        headers.remove(name);
    }
}
