//! A client of the daemon's API over its Unix socket (what `run --server` uses): one
//! connection per request, the run's events handed to the caller as they arrive.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::request::RunRequest;
use egress_sandbox::Interruption;
use egress_sandbox::private_dir::{self, User};

/// One line of the run's event stream. `record` and `report` keep their exact JSON text.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event {
    /// A policy warning; warnings come before `started`.
    Warning {
        /// The warning's text.
        text: String,
    },
    /// The run exists; the first event after the warnings.
    Started {
        /// The run's id, the one [`Client::cancel`] takes.
        run: String,
    },
    /// A chunk of the command's output.
    Output {
        /// `stdout` or `stderr`.
        stream: String,
        /// The chunk's bytes, base64.
        b64: String,
    },
    /// One record of the proxy's audit log.
    Audit {
        /// The record's JSON as the proxy wrote it.
        record: Box<RawValue>,
    },
    /// The run ended; the last event of a run that started.
    Exit {
        /// The run report's JSON, as `run` writes it.
        report: Box<RawValue>,
        /// The one-line summary (`egress-sandbox: exit 0 after …`).
        summary: String,
        /// The run's objects that could not be removed; empty when the line has none.
        teardown_errors: Vec<String>,
    },
    /// The set-up failed; `field` names the request field at fault when one is.
    Error {
        /// The failure, with its causes.
        error: String,
        /// The request field whose value was refused; `None` when the engine or host failed.
        field: Option<String>,
    },
}

/// An event line as it is on the wire; an internally tagged enum cannot hold raw JSON.
#[derive(Deserialize)]
struct Line {
    event: String,
    text: Option<String>,
    run: Option<String>,
    stream: Option<String>,
    b64: Option<String>,
    record: Option<Box<RawValue>>,
    report: Option<Box<RawValue>>,
    summary: Option<String>,
    #[serde(default)]
    teardown_errors: Vec<String>,
    error: Option<String>,
    field: Option<String>,
}

impl Event {
    /// `None` for a line that is not a known event with its fields.
    fn parse(line: &[u8]) -> Option<Event> {
        let line: Line = serde_json::from_slice(line).ok()?;
        Some(match line.event.as_str() {
            "warning" => Event::Warning { text: line.text? },
            "started" => Event::Started { run: line.run? },
            "output" => Event::Output {
                stream: line.stream?,
                b64: line.b64?,
            },
            "audit" => Event::Audit {
                record: line.record?,
            },
            "exit" => Event::Exit {
                report: line.report?,
                summary: line.summary?,
                teardown_errors: line.teardown_errors,
            },
            "error" => Event::Error {
                error: line.error?,
                field: line.field,
            },
            _ => return None,
        })
    }
}

/// A 400 (or other refusal) from the daemon.
#[derive(Debug, Deserialize)]
pub struct Refusal {
    /// Why, as the daemon words it (the body's text when it is not JSON).
    pub error: String,
    /// The request field at fault; empty when none is.
    #[serde(default)]
    pub field: String,
    /// Policy diagnostics (`FILE:LINE:COL: error: …`), when a policy was refused.
    #[serde(default)]
    pub diagnostics: Vec<String>,
}

/// Why a request to the daemon got no answer, or a refusal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The socket cannot be read or connected to (missing, or nobody listens).
    #[error("cannot reach the egress-sandbox daemon at {socket}")]
    Connect {
        /// The daemon's socket.
        socket: PathBuf,
        /// The failure to read or connect to it.
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{socket} is owned by {owner}, not by you or root: it may be another user's fake \
         daemon, so nothing was sent to it; use a socket of a daemon run by you or by root"
    )]
    /// The socket file is owned by a user other than this process's and root; nothing was sent.
    UntrustedSocket {
        /// The daemon's socket.
        socket: PathBuf,
        /// The socket file's owner.
        owner: User,
    },
    #[error(
        "the process answering on {socket} runs as {peer}, not as you or root: it may be \
         another user's fake daemon, so nothing was sent to it; use a socket of a daemon run \
         by you or by root"
    )]
    /// The process that accepted the connection runs as a user other than this process's
    /// and root; nothing was sent.
    UntrustedPeer {
        /// The daemon's socket.
        socket: PathBuf,
        /// The user the accepting process runs as.
        peer: User,
    },
    /// The HTTP exchange with the daemon failed.
    #[error("the egress-sandbox daemon failed")]
    Http(#[from] hyper::Error),
    /// The daemon answered with a status other than 200.
    #[error("the daemon refused the request ({status}): {}", refusal.error)]
    Refused {
        /// The answer's status.
        status: StatusCode,
        /// The answer's body.
        refusal: Refusal,
    },
    /// A line of the run's stream that is not a known event with its fields (its text).
    #[error("the daemon sent a line that is not an event: {0}")]
    BadEvent(String),
    /// The run's stream ended before its `exit` or `error` event.
    #[error("the daemon's stream ended before the run's end")]
    Truncated,
}

/// Whether `uid` may serve this process: its own user, or root (who could read the
/// request anyway).
fn trusted(uid: u32) -> bool {
    uid == 0 || uid == private_dir::current_uid()
}

/// The daemon at `socket`. Every request first checks that the socket and the process
/// answering on it belong to this process's user or to root ([`ClientError::UntrustedSocket`],
/// [`ClientError::UntrustedPeer`]).
#[derive(Clone, Debug)]
pub struct Client {
    socket: PathBuf,
}

impl Client {
    /// A client of the daemon at `socket`; nothing is checked or connected before a request.
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client {
            socket: socket.into(),
        }
    }

    /// The socket this client sends its requests to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether the socket file (a link's target) is owned by this process's user or root:
    /// anyone else may be a fake daemon waiting for a request's secrets.
    pub fn check_owner(&self) -> Result<(), ClientError> {
        let metadata = std::fs::metadata(&self.socket).map_err(|source| ClientError::Connect {
            socket: self.socket.clone(),
            source,
        })?;
        if trusted(metadata.uid()) {
            Ok(())
        } else {
            Err(ClientError::UntrustedSocket {
                socket: self.socket.clone(),
                owner: User::of(metadata.uid()),
            })
        }
    }

    /// A connection to the daemon, checked before a byte is written: the file's owner
    /// first, then the process that accepted (the file may have been swapped in between).
    async fn connect(&self) -> Result<tokio::net::UnixStream, ClientError> {
        self.check_owner()?;
        let connect_error = |source| ClientError::Connect {
            socket: self.socket.clone(),
            source,
        };
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(connect_error)?;
        let peer = stream.peer_cred().map_err(connect_error)?.uid();
        if !trusted(peer) {
            return Err(ClientError::UntrustedPeer {
                socket: self.socket.clone(),
                peer: User::of(peer),
            });
        }
        Ok(stream)
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<http::Response<hyper::body::Incoming>, ClientError> {
        let stream = self.connect().await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "daemon connection ended with an error");
            }
        });
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "egress-sandbox")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .expect("a valid request");
        Ok(sender.send_request(request).await?)
    }

    /// Runs `request`; `on_event` sees every event in order. Returns when the stream ends
    /// with `exit` or `error` (that last event is also passed to `on_event`).
    pub async fn run(
        &self,
        request: &RunRequest,
        mut on_event: impl FnMut(Event),
    ) -> Result<(), ClientError> {
        let body = serde_json::to_vec(request).expect("a request always serialises");
        let mut last_seen = false;
        self.run_raw(body.into(), |line| {
            let event = Event::parse(line)
                .ok_or_else(|| ClientError::BadEvent(String::from_utf8_lossy(line).into_owned()))?;
            last_seen = matches!(event, Event::Exit { .. } | Event::Error { .. });
            on_event(event);
            Ok(last_seen)
        })
        .await
    }

    /// Posts `body` (a JSON request as bytes) to `/v1/runs` and hands each event line
    /// (without its newline) to `on_line`, until it answers `true` (the last event) or
    /// fails. A stream that ends first is [`ClientError::Truncated`].
    pub async fn run_raw(
        &self,
        body: Bytes,
        mut on_line: impl FnMut(&[u8]) -> Result<bool, ClientError>,
    ) -> Result<(), ClientError> {
        let response = self.send(Method::POST, "/v1/runs", body).await?;
        let status = response.status();
        let mut body = response.into_body();
        if status != StatusCode::OK {
            let bytes = body.collect().await?.to_bytes();
            let refusal = serde_json::from_slice(&bytes).unwrap_or_else(|_| Refusal {
                error: String::from_utf8_lossy(&bytes).trim().to_string(),
                field: String::new(),
                diagnostics: Vec::new(),
            });
            return Err(ClientError::Refused { status, refusal });
        }
        let mut pending = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            while let Some(newline) = pending.iter().position(|&b| b == b'\n') {
                let line = pending.split_to(newline + 1);
                if on_line(&line[..newline])? {
                    return Ok(());
                }
            }
        }
        Err(ClientError::Truncated)
    }

    /// `GET path` (`/v1/health`, `/metrics`): the status and the body.
    pub async fn get(&self, path: &str) -> Result<(StatusCode, Bytes), ClientError> {
        let response = self.send(Method::GET, path, Bytes::new()).await?;
        let status = response.status();
        Ok((status, response.into_body().collect().await?.to_bytes()))
    }

    /// `DELETE /v1/runs/{id}`: the run ends as interrupted (by SIGTERM with `terminate`).
    pub async fn cancel(&self, run: &str, signal: Interruption) -> Result<(), ClientError> {
        let path = match signal {
            Interruption::Terminate => format!("/v1/runs/{run}?signal=TERM"),
            Interruption::OutputClosed => format!("/v1/runs/{run}?signal=PIPE"),
            _ => format!("/v1/runs/{run}"),
        };
        let response = self.send(Method::DELETE, &path, Bytes::new()).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        if status == StatusCode::OK {
            return Ok(());
        }
        let refusal = serde_json::from_slice(&bytes).unwrap_or_else(|_| Refusal {
            error: String::from_utf8_lossy(&bytes).into_owned(),
            field: String::new(),
            diagnostics: Vec::new(),
        });
        Err(ClientError::Refused { status, refusal })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket nobody listens on: the message says the step, the chain its cause once.
    #[tokio::test]
    async fn an_unreachable_daemon_is_said_with_its_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let client = Client::new(dir.path().join("nobody.sock"));
        let error = client.get("/v1/health").await.unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("cannot reach the egress-sandbox daemon at"),
            "{message}"
        );
        assert!(!message.contains("No such file"), "{message}");
        let shown = egress_core::text::with_causes(&error);
        assert_eq!(shown.matches("No such file").count(), 1, "{shown}");
    }
}
