//! The `503` answers to `POST /v1/runs`: nothing was created, and the request may succeed
//! later. Each carries `Retry-After` (whole seconds) and an `{"error"}` body: no request
//! field is at fault, so none is named.
//!
//! - busy (`--max-runs` runs live): when the soonest live run reaches its time limit,
//!   1 s to 5 s ([`crate::live_runs::Busy`]);
//! - engine down (it did not answer the image check): [`ENGINE_RETRY_AFTER`];
//! - stopping: this daemon takes no more runs, and it closes the connection so that a
//!   retry cannot reach it; [`STOPPING_RETRY_AFTER`] is for a daemon started in its place
//!   at the same socket (by a supervisor). With none, the retry finds no daemon.

use std::time::Duration;

use http::{StatusCode, header};

use super::live_runs::Busy;
use super::{Body, json_response};

/// How long a caller waits before asking a daemon whose engine did not answer.
pub(crate) const ENGINE_RETRY_AFTER: Duration = Duration::from_secs(3);
/// How long a caller waits before asking again at a stopping daemon's socket.
pub(crate) const STOPPING_RETRY_AFTER: Duration = Duration::from_secs(5);

/// A 503 body: the reason only.
#[derive(serde::Serialize)]
struct Unavailable<'a> {
    error: &'a str,
}

fn unavailable(error: &str, retry_after: Duration) -> http::Response<Body> {
    let mut response = json_response(StatusCode::SERVICE_UNAVAILABLE, &Unavailable { error });
    response.headers_mut().insert(
        header::RETRY_AFTER,
        header::HeaderValue::from(retry_after.as_secs().max(1)),
    );
    response
}

/// Every live place is held.
pub(crate) fn busy(busy: &Busy) -> http::Response<Body> {
    unavailable(
        &format!(
            "the daemon has its limit of {} runs live (serve --max-runs); try again when one \
             has ended",
            busy.max
        ),
        busy.retry_after,
    )
}

/// The engine did not answer a check the request needed.
pub(crate) fn engine_down(error: &str) -> http::Response<Body> {
    unavailable(error, ENGINE_RETRY_AFTER)
}

/// The daemon is stopping.
pub(crate) fn stopping() -> http::Response<Body> {
    let mut response = unavailable(
        "the daemon is stopping: it takes no more runs (a daemon started in its place may)",
        STOPPING_RETRY_AFTER,
    );
    response.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn parts(response: http::Response<Body>) -> (http::HeaderMap, serde_json::Value) {
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        (parts.headers, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn every_503_says_when_to_ask_again_and_names_no_field() {
        let answers = [
            busy(&Busy {
                max: 2,
                retry_after: Duration::from_secs(7),
            }),
            engine_down("cannot reach the Docker engine"),
            stopping(),
        ];
        let mut retry_after = Vec::new();
        for answer in answers {
            assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
            let (headers, body) = parts(answer).await;
            retry_after.push(headers[header::RETRY_AFTER].to_str().unwrap().to_owned());
            let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["error"], "{body}");
            assert!(!body["error"].as_str().unwrap().is_empty());
        }
        assert_eq!(retry_after, ["7", "3", "5"]);
    }

    #[tokio::test]
    async fn a_stopping_daemon_closes_the_connection_a_retry_would_reuse() {
        let (headers, body) = parts(stopping()).await;
        assert_eq!(headers[header::CONNECTION], "close");
        assert!(
            body["error"].as_str().unwrap().contains("stopping"),
            "{body}"
        );
    }
}
