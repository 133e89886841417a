//! Servers the tests start themselves: `Upstream` (a tiny HTTP or HTTPS site that answers
//! every request with a known body and records what it was asked) and `Canary` (a listener
//! that must never be reached; it records every connection it accepts). Both run on one
//! tokio runtime per test process and stop when dropped.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::task::AbortHandle;
use tokio_rustls::TlsAcceptor;

/// Bytes of request head an upstream reads at most.
const MAX_REQUEST_HEAD: usize = 16 << 10;
/// How long an upstream waits for a request head.
const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(10);

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new().expect("tokio runtime"))
}

/// Binds `addr` (port 0: any free port) for a server task on the shared runtime.
fn bind(addr: SocketAddr) -> TcpListener {
    let listener = StdListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    listener.set_nonblocking(true).expect("non-blocking");
    let _runtime = runtime().enter();
    TcpListener::from_std(listener).expect("tokio listener")
}

/// A listener that must never be reached: every accepted connection is recorded and closed.
pub struct Canary {
    pub addr: SocketAddr,
    accepted: Arc<Mutex<Vec<SocketAddr>>>,
    task: AbortHandle,
}

impl Canary {
    pub fn bind(addr: impl Into<SocketAddr>) -> Self {
        let listener = bind(addr.into());
        let addr = listener.local_addr().expect("canary address");
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&accepted);
        let task = runtime()
            .spawn(async move {
                while let Ok((stream, peer)) = listener.accept().await {
                    record.lock().expect("canary lock").push(peer);
                    drop(stream);
                }
            })
            .abort_handle();
        Canary {
            addr,
            accepted,
            task,
        }
    }

    /// Peers of every connection accepted so far.
    pub fn accepted(&self) -> Vec<SocketAddr> {
        self.accepted.lock().expect("canary lock").clone()
    }

    pub fn assert_untouched(&self) {
        let accepted = self.accepted();
        assert!(
            accepted.is_empty(),
            "canary {} accepted connections from {accepted:?}",
            self.addr
        );
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request an upstream served.
#[derive(Debug, Clone)]
pub struct Request {
    /// The request line and headers.
    pub head: String,
    /// The server name the client sent in its TLS ClientHello (HTTPS upstreams).
    pub sni: Option<String>,
}

/// A site: answers every HTTP/1.1 request with 200 and `body`, and records each request.
pub struct Upstream {
    pub addr: SocketAddr,
    pub body: String,
    requests: Arc<Mutex<Vec<Request>>>,
    task: AbortHandle,
}

impl Upstream {
    /// Plain HTTP on `addr`.
    pub fn http(addr: impl Into<SocketAddr>, body: &str) -> Self {
        Self::start(addr.into(), body, None)
    }

    /// HTTPS on `addr` with a self-signed certificate for `names` (clients use -k).
    pub fn https(addr: impl Into<SocketAddr>, names: &[&str], body: &str) -> Self {
        Self::start(addr.into(), body, Some(tls_acceptor(names)))
    }

    /// HTTPS on `addr` with a certificate for `names` signed by a fresh test CA; the CA's
    /// certificate (PEM) comes with it, for `--upstream-ca`.
    pub fn https_with_test_ca(
        addr: impl Into<SocketAddr>,
        names: &[&str],
        body: &str,
    ) -> (Self, String) {
        Self::https_with_test_ca_reason(addr, names, "OK", body)
    }

    /// As [`Upstream::https_with_test_ca`], its status line `200 <reason>`: an
    /// [`ECHO_AUTHORIZATION`] in `reason` is replaced as in the body.
    pub fn https_with_test_ca_reason(
        addr: impl Into<SocketAddr>,
        names: &[&str],
        reason: &str,
        body: &str,
    ) -> (Self, String) {
        let (acceptor, ca_pem) = tls_acceptor_with_test_ca(names);
        let status_line = format!("HTTP/1.1 200 {reason}");
        let upstream = Self::start_answering(addr.into(), &status_line, body, Some(acceptor));
        (upstream, ca_pem)
    }

    fn start(addr: SocketAddr, body: &str, tls: Option<TlsAcceptor>) -> Self {
        Self::start_answering(addr, "HTTP/1.1 200 OK", body, tls)
    }

    fn start_answering(
        addr: SocketAddr,
        status_line: &str,
        body: &str,
        tls: Option<TlsAcceptor>,
    ) -> Self {
        let listener = bind(addr);
        let addr = listener.local_addr().expect("upstream address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&requests);
        let response = Arc::new(format!(
            "{status_line}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ));
        let task = runtime()
            .spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (record, response, tls) =
                        (Arc::clone(&record), Arc::clone(&response), tls.clone());
                    tokio::spawn(async move {
                        match tls {
                            Some(acceptor) => {
                                if let Ok(stream) = acceptor.accept(stream).await {
                                    let sni = stream.get_ref().1.server_name().map(str::to_owned);
                                    serve(stream, sni, &record, &response).await;
                                }
                            }
                            None => serve(stream, None, &record, &response).await,
                        }
                    });
                }
            })
            .abort_handle();
        Upstream {
            addr,
            body: body.to_owned(),
            requests,
            task,
        }
    }

    /// Every request served so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("upstream lock").clone()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Put in an upstream's body, it becomes the request's `Authorization` value, which the
/// answer also carries in an `x-echo-auth` header: an upstream that hands the key back. Put in
/// its reason phrase, it becomes the value there alone.
pub const ECHO_AUTHORIZATION: &str = "{echo-authorization}";

/// `response` with [`ECHO_AUTHORIZATION`] in its status line and body replaced as it says
/// (the length adjusted); as it is when it holds none.
fn echo_authorization(head: &str, response: &str) -> String {
    let Some((response_head, body)) = response.split_once("\r\n\r\n") else {
        return response.to_owned();
    };
    if !response.contains(ECHO_AUTHORIZATION) {
        return response.to_owned();
    }
    let value = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("authorization")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    let status_line = response_head
        .lines()
        .next()
        .unwrap_or_default()
        .replace(ECHO_AUTHORIZATION, &value);
    if !body.contains(ECHO_AUTHORIZATION) {
        return format!(
            "{status_line}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    }
    let body = body.replace(ECHO_AUTHORIZATION, &value);
    format!(
        "{status_line}\r\ncontent-type: application/json\r\nx-echo-auth: {value}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Reads one request head (bounded in bytes and time), records it, answers, closes.
async fn serve(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    sni: Option<String>,
    record: &Mutex<Vec<Request>>,
    response: &str,
) {
    let mut head = Vec::new();
    let read_head = async {
        let mut buffer = [0u8; 4096];
        while !head.windows(4).any(|window| window == b"\r\n\r\n") {
            match stream.read(&mut buffer).await {
                Ok(read @ 1..) if head.len() + read <= MAX_REQUEST_HEAD => {
                    head.extend_from_slice(&buffer[..read])
                }
                _ => return false,
            }
        }
        true
    };
    if !matches!(
        tokio::time::timeout(REQUEST_HEAD_TIMEOUT, read_head).await,
        Ok(true)
    ) {
        return;
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let response = echo_authorization(&head, response);
    record
        .lock()
        .expect("upstream lock")
        .push(Request { head, sni });
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn tls_acceptor(names: &[&str]) -> TlsAcceptor {
    let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    let certified = rcgen::generate_simple_self_signed(names).expect("self-signed certificate");
    let certificate: CertificateDer<'static> = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(vec![certificate], key)
    .expect("server certificate");
    TlsAcceptor::from(Arc::new(config))
}

/// A leaf for `names` signed by a fresh CA, and the CA's certificate as PEM.
fn tls_acceptor_with_test_ca(names: &[&str]) -> (TlsAcceptor, String) {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "egress-sandbox e2e upstream CA");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().expect("leaf key");
    let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    let leaf = rcgen::CertificateParams::new(names)
        .expect("leaf names")
        .signed_by(&key, &issuer)
        .expect("leaf certificate");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
    .expect("server certificate");
    (TlsAcceptor::from(Arc::new(config)), ca_cert.pem())
}
