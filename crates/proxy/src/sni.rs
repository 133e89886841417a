//! Reading the TLS ClientHello that opens a tunnel, without terminating TLS.
//!
//! The bytes are read into a buffer bounded in size and time, parsed by rustls's `Acceptor`
//! (which validates the message and yields the SNI), scanned by hand for the ECH extension
//! (rustls does not expose it), and later replayed upstream unchanged when the check passes.
// Reads bytes from the sandbox: a malformed input must be an error, never a panic.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use std::time::Duration;

use rustls::server::Acceptor;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::target::{HostName, Target};

/// TLS record content type of a handshake record: the first byte of any ClientHello.
const HANDSHAKE_RECORD: u8 = 0x16;
/// Handshake message type ClientHello.
const CLIENT_HELLO: u8 = 0x01;
/// `encrypted_client_hello` (draft-ietf-tls-esni): with it the SNI we see is only the
/// outer, public name, so it cannot be compared with the CONNECT host.
const ECH_EXTENSION: u16 = 0xfe0d;

/// A ClientHello as read from the client: the exact bytes to replay and what was in it.
#[derive(Debug)]
pub struct ClientHello {
    /// Every byte read, the ClientHello's records whole: replayed to the upstream.
    pub bytes: Vec<u8>,
    /// The `server_name` extension's host name, if the ClientHello has one.
    pub server_name: Option<String>,
    /// It offers encrypted client hello, which would hide the real name.
    pub ech: bool,
}

/// Why a connection's first bytes are not a ClientHello the TLS doors accept.
#[derive(Debug, thiserror::Error)]
pub enum SniError {
    /// The first byte is not a TLS handshake record.
    #[error("the client did not send TLS")]
    NotTls,
    /// The records or the handshake message do not parse.
    #[error("the ClientHello is not valid: {0}")]
    Invalid(String),
    /// Longer than the limit (`ProxyLimits::max_client_hello_bytes`).
    #[error("the ClientHello exceeds {0} bytes")]
    TooLarge(usize),
    /// Not complete within `ProxyLimits::client_hello_timeout`.
    #[error("no complete ClientHello within {0:?}")]
    Timeout(Duration),
    /// `received` tells a client that left without trying anything (0) from one that
    /// started a ClientHello and gave up, which is judged like any other bad ClientHello.
    /// A reset or any other read error is a close too: how the client left must not decide
    /// whether half a ClientHello is refused (a reset had kept the record `allowed`).
    #[error("the client closed after {received} bytes, before a complete ClientHello")]
    Closed {
        /// The bytes the client sent before it left.
        received: usize,
    },
    /// It offers ECH: the name it means could not be checked.
    #[error("the ClientHello uses encrypted client hello (ECH)")]
    Ech,
    /// It names no server, so there is nothing to check against the target.
    #[error("the ClientHello carries no server name")]
    MissingName,
    /// It names another host than the one the connection was judged for.
    #[error("the ClientHello names {0:?}")]
    Mismatch(String),
}

/// Reads one ClientHello: `initial` holds bytes the client already sent; more are read from
/// `stream` until rustls has the whole message, at most `max_bytes` in all and within
/// `timeout`.
pub async fn read_client_hello<R: AsyncRead + Unpin>(
    stream: &mut R,
    initial: Vec<u8>,
    max_bytes: usize,
    timeout: Duration,
) -> Result<ClientHello, SniError> {
    tokio::time::timeout(timeout, read_until_complete(stream, initial, max_bytes))
        .await
        .map_err(|_| SniError::Timeout(timeout))?
}

async fn read_until_complete<R: AsyncRead + Unpin>(
    stream: &mut R,
    mut bytes: Vec<u8>,
    max_bytes: usize,
) -> Result<ClientHello, SniError> {
    let mut acceptor = Acceptor::default();
    let mut fed = 0;
    let mut chunk = vec![0u8; 4096];
    loop {
        if bytes
            .first()
            .is_some_and(|&first| first != HANDSHAKE_RECORD)
        {
            return Err(SniError::NotTls);
        }
        while fed < bytes.len() {
            let mut rest = bytes.get(fed..).unwrap_or_default();
            let n = acceptor
                .read_tls(&mut rest)
                .map_err(|error| SniError::Invalid(error.to_string()))?;
            if n == 0 {
                break;
            }
            fed += n;
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let server_name = accepted.client_hello().server_name().map(str::to_owned);
                let ech = extension_types(&bytes)
                    .ok_or_else(|| SniError::Invalid("unparsable extensions".into()))?
                    .contains(&ECH_EXTENSION);
                return Ok(ClientHello {
                    bytes,
                    server_name,
                    ech,
                });
            }
            Ok(None) => {}
            Err((error, _alert)) => return Err(SniError::Invalid(error.to_string())),
        }
        if bytes.len() >= max_bytes {
            return Err(SniError::TooLarge(max_bytes));
        }
        let want = chunk.len().min(max_bytes - bytes.len());
        let free = chunk.get_mut(..want).unwrap_or_default();
        let n = stream.read(free).await.unwrap_or(0);
        if n == 0 {
            return Err(SniError::Closed {
                received: bytes.len(),
            });
        }
        bytes.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
}

/// Does the ClientHello fit the host the client asked the proxy for? A name must be the SNI
/// exactly (after normalisation); an IP target (allowed only by a `cidr` rule) may carry any
/// SNI or none. ECH always fails: the real name is hidden.
pub fn check(expected: &Target, hello: &ClientHello) -> Result<(), SniError> {
    if hello.ech {
        return Err(SniError::Ech);
    }
    let Target::Name(expected) = expected else {
        return Ok(());
    };
    let Some(sent) = &hello.server_name else {
        return Err(SniError::MissingName);
    };
    match HostName::parse(sent) {
        Ok(name) if &name == expected => Ok(()),
        _ => Err(SniError::Mismatch(sent.clone())),
    }
}

/// The extension types of the first ClientHello in `records` (TLS records as sent), or
/// `None` if they do not parse. The handshake message may span several records.
pub fn extension_types(records: &[u8]) -> Option<Vec<u16>> {
    let mut message = Vec::new();
    let mut rest = Reader(records);
    while rest.0.len() >= 5 {
        if rest.u8()? != HANDSHAKE_RECORD {
            return None;
        }
        rest.take(2)?; // legacy_record_version
        let len = rest.u16()?;
        message.extend_from_slice(rest.take(len)?);
        if let Some(&[_, high, middle, low]) = message.first_chunk::<4>() {
            let total = 4 + (usize::from(high) << 16 | usize::from(middle) << 8 | usize::from(low));
            if message.len() >= total {
                message.truncate(total);
                break;
            }
        }
    }
    let mut reader = Reader(message.as_slice());
    if reader.u8()? != CLIENT_HELLO {
        return None;
    }
    let body_len = reader.u24()?;
    let mut body = Reader(reader.take(body_len)?);
    body.take(2 + 32)?; // legacy_version, random
    let session_id = usize::from(body.u8()?);
    body.take(session_id)?;
    let suites = body.u16()?;
    body.take(suites)?;
    let compression = usize::from(body.u8()?);
    body.take(compression)?;
    if body.0.is_empty() {
        return Some(Vec::new());
    }
    let extensions_len = body.u16()?;
    let mut extensions = Reader(body.take(extensions_len)?);
    let mut types = Vec::new();
    while !extensions.0.is_empty() {
        types.push(u16::try_from(extensions.u16()?).ok()?);
        let len = extensions.u16()?;
        extensions.take(len)?;
    }
    Some(types)
}

/// A cursor over untrusted bytes that fails instead of panicking.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.0.split_at_checked(n)?;
        self.0 = tail;
        Some(head)
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, tail) = self.0.split_first_chunk::<N>()?;
        self.0 = tail;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.array().map(|[b]| b)
    }
    fn u16(&mut self) -> Option<usize> {
        self.array().map(|b| usize::from(u16::from_be_bytes(b)))
    }
    fn u24(&mut self) -> Option<usize> {
        self.array().map(|[high, middle, low]| {
            usize::from(high) << 16 | usize::from(middle) << 8 | usize::from(low)
        })
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;

    include!("../tests/common/client_hello.rs");

    async fn read(bytes: Vec<u8>) -> Result<ClientHello, SniError> {
        let mut empty: &[u8] = &[];
        read_client_hello(&mut empty, bytes, 16 * 1024, Duration::from_secs(1)).await
    }

    #[tokio::test]
    async fn reads_the_server_name() {
        let hello = read(client_hello(Some("API.example.com"), false))
            .await
            .unwrap();
        assert_eq!(hello.server_name.as_deref(), Some("api.example.com"));
        assert!(!hello.ech);
        let expected = Target::parse_host("api.example.com").unwrap();
        check(&expected, &hello).unwrap();
        let other = Target::parse_host("other.example.com").unwrap();
        assert!(matches!(check(&other, &hello), Err(SniError::Mismatch(_))));
    }

    #[tokio::test]
    async fn reads_a_hello_split_across_reads_and_records() {
        let whole = client_hello(Some("a.example"), false);
        // Re-frame the handshake message into two records, and deliver it in small reads.
        let message = &whole[5..];
        let (first, second) = message.split_at(20);
        let mut framed = Vec::new();
        for part in [first, second] {
            framed.extend([0x16, 0x03, 0x01]);
            framed.extend((part.len() as u16).to_be_bytes());
            framed.extend(part);
        }
        assert_eq!(extension_types(&framed), extension_types(&whole));
        let (start, rest) = framed.split_at(3);
        let mut stream: &[u8] = rest;
        let hello = read_client_hello(
            &mut stream,
            start.to_vec(),
            16 * 1024,
            Duration::from_secs(1),
        )
        .await
        .unwrap();
        assert_eq!(hello.server_name.as_deref(), Some("a.example"));
        assert_eq!(hello.bytes, framed);
    }

    #[tokio::test]
    async fn detects_ech_and_missing_names() {
        let hello = read(client_hello(Some("a.example"), true)).await.unwrap();
        assert!(hello.ech);
        let expected = Target::parse_host("a.example").unwrap();
        assert!(matches!(check(&expected, &hello), Err(SniError::Ech)));
        let hello = read(client_hello(None, false)).await.unwrap();
        assert!(matches!(
            check(&expected, &hello),
            Err(SniError::MissingName)
        ));
        let ip = Target::parse_host("127.0.0.1").unwrap();
        check(&ip, &hello).unwrap();
    }

    #[tokio::test]
    async fn refuses_other_bytes() {
        assert!(matches!(
            read(b"GET / HTTP/1.1\r\n\r\n".to_vec()).await,
            Err(SniError::NotTls)
        ));
        let mut truncated = client_hello(Some("a.example"), false);
        truncated.truncate(30);
        assert!(matches!(
            read(truncated).await,
            Err(SniError::Closed { received }) if received > 0
        ));
        let mut garbage = vec![0x16, 0x03, 0x01, 0x00, 0x05];
        garbage.extend([0xff; 5]);
        assert!(matches!(read(garbage).await, Err(SniError::Invalid(_))));
    }

    #[tokio::test]
    async fn a_read_error_after_part_of_a_client_hello_is_a_close_with_its_bytes() {
        struct Resets;
        impl AsyncRead for Resets {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                _: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::task::Poll::Ready(Err(std::io::ErrorKind::ConnectionReset.into()))
            }
        }
        let mut half = client_hello(Some("a.example"), false);
        half.truncate(30);
        let result = read_client_hello(&mut Resets, half, 4096, Duration::from_secs(1)).await;
        assert!(
            matches!(result, Err(SniError::Closed { received: 30 })),
            "{result:?}"
        );
        let result = read_client_hello(&mut Resets, Vec::new(), 4096, Duration::from_secs(1)).await;
        assert!(
            matches!(result, Err(SniError::Closed { received: 0 })),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn bounds_the_size() {
        let mut huge = vec![0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3f, 0xfc];
        huge.resize(8 * 1024, 0);
        let mut stream: &[u8] = &[0u8; 64 * 1024];
        let result = read_client_hello(&mut stream, huge, 4 * 1024, Duration::from_secs(1)).await;
        assert!(matches!(result, Err(SniError::TooLarge(_))), "{result:?}");
    }

    #[test]
    fn extension_scan_never_panics_on_truncation() {
        let whole = client_hello(Some("a.example"), true);
        for cut in 0..whole.len() {
            let _ = extension_types(&whole[..cut]);
        }
        assert!(extension_types(&whole).unwrap().contains(&ECH_EXTENSION));
    }
}
