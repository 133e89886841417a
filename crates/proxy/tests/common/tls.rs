//! TLS on loopback for the inspect door's tests: a test CA and its leaves, a TLS upstream
//! that echoes each request head, CONNECT tunnels and clients that trust chosen roots.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{HANG, TestProxy};

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A CA for test upstreams, and leaves it signs.
pub struct TestCa {
    pub cert: CertificateDer<'static>,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test upstream CA");
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            cert: cert.der().clone(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    pub fn server_config(&self, name: &str) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// A TLS upstream that answers every request with its own head as the body.
#[derive(Clone)]
pub struct TlsEcho {
    pub addr: SocketAddr,
    pub heads: Arc<Mutex<Vec<String>>>,
    pub connections: Arc<AtomicUsize>,
}

impl TlsEcho {
    pub async fn start(bind: &str, config: Arc<rustls::ServerConfig>) -> TlsEcho {
        let listener = TcpListener::bind(bind).await.unwrap();
        let echo = TlsEcho {
            addr: listener.local_addr().unwrap(),
            heads: Arc::default(),
            connections: Arc::default(),
        };
        let state = echo.clone();
        tokio::spawn(async move {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            while let Ok((stream, _)) = listener.accept().await {
                state.connections.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                let heads = state.heads.clone();
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(stream).await {
                        serve_echo(tls, heads).await;
                    }
                });
            }
        });
        echo
    }

    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

pub async fn serve_echo<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    heads: Arc<Mutex<Vec<String>>>,
) {
    let mut pending = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        while let Some(end) = super::find(&pending, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).into_owned();
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if pending.len() < end + 4 + length {
                break;
            }
            pending.drain(..end + 4 + length);
            heads.lock().unwrap().push(head.clone());
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{head}",
                head.len()
            );
            if stream.write_all(response.as_bytes()).await.is_err() {
                return;
            }
        }
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => pending.extend_from_slice(&buffer[..n]),
        }
    }
}

/// CONNECT through the proxy, then TLS trusting only `roots`, with SNI `name`.
pub async fn tunnel(
    proxy: SocketAddr,
    name: &str,
    port: u16,
    roots: &[CertificateDer<'static>],
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, std::io::Error> {
    let stream = connected_tunnel(proxy, name, port).await;
    tls_client(stream, name, roots).await
}

pub async fn tls_client(
    stream: TcpStream,
    name: &str,
    roots: &[CertificateDer<'static>],
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, std::io::Error> {
    let mut store = rustls::RootCertStore::empty();
    for root in roots {
        store.add(root.clone()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(name.to_owned()).unwrap(), stream)
        .await
}

/// A CONNECT answered 200, its head read to the last byte.
pub async fn connected_tunnel(proxy: SocketAddr, name: &str, port: u16) -> TcpStream {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream
        .write_all(
            format!("CONNECT {name}:{port} HTTP/1.1\r\nHost: {name}:{port}\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while super::find(&head, b"\r\n\r\n").is_none() {
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    stream
}

pub fn run_ca(proxy: &TestProxy) -> CertificateDer<'static> {
    let pem = proxy.running().ca_certificate_pem().expect("a run CA");
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

/// Sends one request on `stream` and reads one response (Content-Length or chunked).
pub async fn request<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, text: &str) -> String {
    stream.write_all(text.as_bytes()).await.unwrap();
    let mut pending = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        if let Some(end) = super::find(&pending, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if head.contains("transfer-encoding: chunked") {
                // A scrubbed answer is re-framed: read to the last chunk.
                if pending[end + 4..].ends_with(b"0\r\n\r\n") {
                    return String::from_utf8_lossy(&pending).into_owned();
                }
            } else if pending.len() >= end + 4 + length {
                return String::from_utf8_lossy(&pending[..end + 4 + length]).into_owned();
            }
        }
        let n = tokio::time::timeout(HANG, stream.read(&mut buffer))
            .await
            .expect("a response in time")
            .unwrap();
        assert!(
            n > 0,
            "closed before a response: {}",
            String::from_utf8_lossy(&pending)
        );
        pending.extend_from_slice(&buffer[..n]);
    }
}
