//! Refusals: why an attempt went no further, and the answer a client gets for it.
//!
//! The [`gate`](crate::gate) produces a [`Refusal`] (and has already recorded the attempt);
//! every HTTP-speaking door answers it with `refusal_response`, so a refusal looks the same
//! whichever door it came through.

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full};

use crate::audit::{Attempt, Outcome};
use crate::body::ProxyBody;
use crate::policy::Reason;

/// Why an attempt went no further, for the client's answer. The attempt itself already
/// carries the outcome and reason for the audit record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub outcome: Outcome,
    pub reason: Reason,
    /// What the client asked for, as logged.
    pub host: String,
    pub detail: String,
}

impl Refusal {
    /// The refusal of `attempt` as its outcome and reason stand, naming what the client
    /// asked for (`host:port`, or the host alone when no port applies).
    pub(crate) fn of(attempt: &Attempt, detail: impl Into<String>) -> Refusal {
        Refusal {
            outcome: attempt.decision,
            reason: attempt.reason,
            host: match attempt.port {
                Some(port) => format!("{}:{port}", attempt.host),
                None => attempt.host.clone(),
            },
            detail: detail.into(),
        }
    }

    /// The HTTP status a door answers with: 403 for policy refusals, 400 for malformed or
    /// unsupported requests, 502/504 when an allowed upstream cannot be reached.
    pub(crate) fn status(&self) -> u16 {
        match self.reason {
            Reason::BadRequest | Reason::Unsupported => 400,
            Reason::Limit | Reason::AuditLimit => 503,
            Reason::ResolveFailed
            | Reason::ConnectFailed
            | Reason::UpstreamTls
            | Reason::UpstreamEncoding => 502,
            Reason::Timeout => 504,
            _ => 403,
        }
    }
}

/// Writes the attempt's record and waits for it, then answers with [`refusal_response`]:
/// whoever sees a 403 (or 400, 502, 504) finds its record in the log. Every door answers a
/// refusal through this.
pub(crate) async fn refuse(attempt: Attempt, refusal: &Refusal) -> Response<ProxyBody> {
    attempt.record().await;
    refusal_response(refusal)
}

/// The answer to a refused or failed attempt: status by reason, `X-Egress-Blocked` naming
/// the reason, and a body that says which host and why.
pub(crate) fn refusal_response(refusal: &Refusal) -> Response<ProxyBody> {
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::FORBIDDEN);
    let host = if refusal.host.is_empty() {
        "the request".to_owned()
    } else {
        refusal.host.escape_debug().to_string()
    };
    let body = format!(
        "egress-sandbox: {host} {} ({}): {}{}{}\n",
        refusal.outcome.as_str(),
        refusal.reason,
        refusal.reason.explain(),
        if refusal.detail.is_empty() { "" } else { "; " },
        refusal.detail.escape_debug(),
    );
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        "x-egress-blocked",
        HeaderValue::from_static(refusal.reason.as_str()),
    );
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if matches!(refusal.reason, Reason::BadRequest | Reason::Unsupported) {
        // After a malformed request we cannot trust where the next one starts.
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
