//! The run's real secret never reaches the sandbox, and never leaves it: an inspected
//! upstream that hands the key back (in a header, a JSON body, chunked bodies cut anywhere,
//! base64, percent-encoding, hex; in the reason phrase, a header name, a 1xx answer, a
//! trailer, a content coding; in ranges) is scrubbed, its record says `reflected`; a request that
//! carries the key in any form, to any host, by any door, is refused `credential_misuse`
//! and its record shows `«secret:NAME»` where the key sat.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use common::tls::{TestCa, run_ca, tls_client, tunnel};
use common::{HANG, Site, TestProxy, exchange, status};
use egress_core::audit::{AuditRecord, Kind, Outcome};
use egress_core::policy::{Policy, PolicySet, Reason};
use egress_core::secret::{Secret, SecretValue};
use egress_proxy::{CredentialConfig, Proxy, ProxyConfig};
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// Reserved characters, so that percent-encoding changes it.
const SECRET: &str = "sk-test/secret+value=1234?x";
/// A secret that can sit in a host name.
const NAME_SECRET: &str = "sk-test-tripwire-value-1234";
const PLACEHOLDER: &str = "egress-sandbox-placeholder-0123456789abcdef0123456789abcdef";

fn credentials(secret: &str, ca: Option<&TestCa>) -> CredentialConfig {
    let mut credentials = CredentialConfig::new(vec![Secret {
        name: "API_KEY".into(),
        value: SecretValue::new(secret.into()),
        placeholder: PLACEHOLDER.into(),
    }]);
    credentials.upstream_ca = ca.map(|ca| vec![ca.cert.clone()]).unwrap_or_default();
    credentials.ca_lifetime = Duration::from_secs(7200);
    credentials
}

async fn start_proxy(yaml: &str, secret: &str, ca: Option<&TestCa>) -> TestProxy {
    let credentials = credentials(secret, ca);
    TestProxy::start_with(
        yaml,
        &[
            ("api.example.com", "127.0.0.1"),
            ("other.example.com", "127.0.0.1"),
        ],
        move |config| {
            config.credentials = credentials;
            config.dns_listen = Some("127.0.0.1:0".parse().unwrap());
            config.dns_answer = Some("10.9.8.7".parse().unwrap());
        },
    )
    .await
}

/// A proxy whose `api.example.com` is the reflector on 127.0.0.2:P, reached by CONNECT and
/// by a transparent listener on 127.0.0.1:P (the proxy's own address, as a sandbox's :443).
async fn start_transparent_proxy(port: u16, ca: &TestCa) -> (TestProxy, SocketAddr) {
    let credentials = credentials(SECRET, Some(ca));
    let proxy = TestProxy::start_with(
        &api_yaml(port),
        &[("api.example.com", "127.0.0.2")],
        move |config| {
            config.credentials = credentials;
            config.transparent_listen = vec![SocketAddr::from(([127, 0, 0, 1], port))];
        },
    )
    .await;
    let listener = proxy.running().local_addrs().transparent[0];
    (proxy, listener)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn percent(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The body lines `/v1/encoded` answers with: the `Authorization` value `auth` in each
/// encoding, base64 at each of the three alignments in both alphabets.
fn encoded_lines(auth: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for prefix in ["", "x", "xy"] {
        let whole = format!("{prefix}{auth}");
        lines.push(STANDARD.encode(&whole));
        lines.push(URL_SAFE_NO_PAD.encode(&whole));
    }
    lines.push(percent(auth));
    lines.push(hex(auth.as_bytes()));
    lines.push(hex(auth.as_bytes()).to_ascii_uppercase());
    lines
}

/// One answer of the reflecting upstream: head lines and body pieces (each piece its own
/// chunk when chunked, each written and flushed on its own).
fn reflection(path: &str, auth: &str) -> (Vec<String>, Vec<Vec<u8>>, bool) {
    let json = format!("{{\"authorization\": \"{auth}\"}}").into_bytes();
    match path {
        "/v1/header" => (
            vec![format!("X-Echo-Auth: {auth}")],
            vec![b"ok".to_vec()],
            false,
        ),
        "/v1/json" => (vec![], vec![json], false),
        "/v1/split" => {
            // Cut in the middle of the secret.
            let middle = json.len() / 2;
            (
                vec![],
                vec![json[..middle].to_vec(), json[middle..].to_vec()],
                true,
            )
        }
        "/v1/bytewise" => (vec![], json.chunks(1).map(<[u8]>::to_vec).collect(), true),
        "/v1/gzip" => (vec!["Content-Encoding: gzip".to_owned()], vec![json], false),
        "/v1/encoded" => (
            vec![],
            vec![encoded_lines(auth).join("\n").into_bytes()],
            false,
        ),
        "/v1/reason" | "/v1/informational" => (vec![], vec![b"ok".to_vec()], false),
        "/v1/header-name" => (
            vec![format!("X-{}: 1", hex(auth.as_bytes()))],
            vec![b"ok".to_vec()],
            false,
        ),
        "/v1/trailer" => (
            vec!["Trailer: X-Echo-Auth".to_owned()],
            vec![b"ok".to_vec()],
            true,
        ),
        "/v1/coding" => (
            vec![format!("Content-Encoding: {auth}")],
            vec![b"ok".to_vec()],
            false,
        ),
        _ => (vec![], vec![b"nothing".to_vec()], false),
    }
}

/// The status line the reflector answers `path` with: `/v1/reason` hands the key back as
/// the reason phrase.
fn status_line(path: &str, auth: &str) -> String {
    match path {
        "/v1/reason" => format!("HTTP/1.1 200 {auth}"),
        _ => "HTTP/1.1 200 OK".to_owned(),
    }
}

/// What the reflector sends before the final answer: `/v1/informational` hands the key back
/// in a 103's reason phrase and headers.
fn informational(path: &str, auth: &str) -> String {
    match path {
        "/v1/informational" => {
            format!("HTTP/1.1 103 {auth}\r\nLink: <{auth}>\r\nX-Echo-Auth: {auth}\r\n\r\n")
        }
        _ => String::new(),
    }
}

/// A `Range: bytes=FIRST-[LAST]` header of `head`, as the byte range of a body of `length`.
fn asked_range(head: &str, length: usize) -> Option<std::ops::Range<usize>> {
    let value = head.lines().find_map(|line| {
        line.split_once(':')
            .filter(|(name, _)| name.eq_ignore_ascii_case("range"))
            .map(|(_, value)| value.trim().to_owned())
    })?;
    let (first, last) = value.strip_prefix("bytes=")?.split_once('-')?;
    let first: usize = first.parse().ok()?;
    let end = match last {
        "" => length,
        last => last.parse::<usize>().ok()?.saturating_add(1).min(length),
    };
    (first < end).then_some(first..end)
}

/// A TLS upstream that answers each request with its `Authorization` header handed back
/// as the path asks ([`reflection`]), and keeps each request head.
async fn start_reflector(ca: &TestCa) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    start_reflector_at(ca, "127.0.0.1:0").await
}

async fn start_reflector_at(ca: &TestCa, bind: &str) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads: Arc<Mutex<Vec<String>>> = Arc::default();
    let acceptor = tokio_rustls::TlsAcceptor::from(ca.server_config("api.example.com"));
    let kept = heads.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let heads = kept.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    reflect(tls, heads).await;
                }
            });
        }
    });
    (addr, heads)
}

async fn reflect<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, heads: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while common::find(&head, b"\r\n\r\n").is_none() {
        if stream.read_exact(&mut byte).await.is_err() {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    heads.lock().unwrap().push(head.clone());
    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
    let auth = head
        .lines()
        .find_map(|line| {
            line.split_once(':')
                .filter(|(name, _)| name.eq_ignore_ascii_case("authorization"))
                .map(|(_, value)| value.trim().to_owned())
        })
        .unwrap_or_default();
    let (lines, mut pieces, chunked) = reflection(&path, &auth);
    let mut out = informational(&path, &auth);
    let length: usize = pieces.iter().map(Vec::len).sum();
    // An honest server: a range asked for is what it answers.
    match asked_range(&head, length).filter(|_| !chunked) {
        Some(range) => {
            out.push_str("HTTP/1.1 206 Partial Content\r\n");
            out.push_str(&format!(
                "Content-Range: bytes {}-{}/{length}\r\n",
                range.start,
                range.end - 1
            ));
            pieces = vec![pieces.concat()[range].to_vec()];
        }
        None => out.push_str(&format!("{}\r\n", status_line(&path, &auth))),
    }
    out.push_str("Connection: close\r\n");
    for line in lines {
        out.push_str(&format!("{line}\r\n"));
    }
    if chunked {
        out.push_str("Transfer-Encoding: chunked\r\n\r\n");
    } else {
        let length: usize = pieces.iter().map(Vec::len).sum();
        out.push_str(&format!("Content-Length: {length}\r\n\r\n"));
    }
    let _ = stream.write_all(out.as_bytes()).await;
    for piece in pieces {
        let framed = if chunked {
            let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
            framed.extend_from_slice(&piece);
            framed.extend_from_slice(b"\r\n");
            framed
        } else {
            piece
        };
        let _ = stream.write_all(&framed).await;
        let _ = stream.flush().await;
    }
    if chunked {
        let trailer = match path.as_str() {
            "/v1/trailer" => format!("X-Echo-Auth: {auth}\r\n"),
            _ => String::new(),
        };
        let _ = stream
            .write_all(format!("0\r\n{trailer}\r\n").as_bytes())
            .await;
    }
    let _ = stream.shutdown().await;
}

fn api_yaml(port: u16) -> String {
    format!(
        "version: 1\nname: test\nallow:\n  - host: api.example.com\n    ports: [{port}]\n    paths: [\"/v1/**\"]\n  - cidr: 127.0.0.0/8\n    ports: [{port}]\ncredentials:\n  - host: api.example.com\n    port: {port}\n    secret: API_KEY\ntls:\n  ports: [{port}]\n"
    )
}

/// The head (lower-cased) and the body (de-chunked) of one answer read to the close.
async fn get(proxy: &TestProxy, port: u16, path: &str) -> (String, Vec<u8>) {
    let (head, body, _) = get_with(proxy, port, path, "").await;
    (head, body)
}

/// [`get`] with `extra` header lines in the request, also returning all the answer's bytes.
async fn get_with(
    proxy: &TestProxy,
    port: u16,
    path: &str,
    extra: &str,
) -> (String, Vec<u8>, Vec<u8>) {
    let tls = tunnel(proxy.addr, "api.example.com", port, &[run_ca(proxy)])
        .await
        .unwrap();
    ask(tls, path, extra).await
}

/// One request with the placeholder on `stream` (TLS to `api.example.com`, by any door): the
/// answer's head (lower-cased), its body (de-chunked) and every byte that came back.
async fn ask<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    path: &str,
    extra: &str,
) -> (String, Vec<u8>, Vec<u8>) {
    stream.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer {PLACEHOLDER}\r\nAccept-Encoding: gzip, br\r\n{extra}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(HANG, stream.read_to_end(&mut raw))
        .await
        .expect("the answer ends in time");
    let end = common::find(&raw, b"\r\n\r\n").expect("a head");
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let mut body = raw[end + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (head, body, raw)
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line_end = common::find(raw, b"\r\n").expect("a chunk size");
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap(), 16).unwrap();
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&raw[line_end + 2..line_end + 2 + size]);
        raw = &raw[line_end + 2 + size + 2..];
    }
}

/// Whether `raw` holds the secret in any form the scrubber knows a test can check by eye:
/// literal, percent-encoded, hex (either case).
fn holds_secret(raw: &[u8]) -> bool {
    let text = String::from_utf8_lossy(raw).to_ascii_lowercase();
    [
        SECRET.to_ascii_lowercase(),
        percent(SECRET).to_ascii_lowercase(),
        hex(SECRET.as_bytes()),
    ]
    .iter()
    .any(|form| text.contains(form))
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    common::find(haystack, needle.as_bytes()).is_some()
}

fn assert_no_secret_in_records(records: &[AuditRecord], secret: &str) {
    for record in records {
        let line = record.to_line().to_ascii_lowercase();
        assert!(!line.contains(&secret.to_ascii_lowercase()), "{line}");
        assert!(!line.contains(&hex(secret.as_bytes())), "{line}");
    }
}

#[tokio::test]
async fn a_key_handed_back_by_an_inspected_upstream_reaches_the_sandbox_as_its_placeholder() {
    let ca = TestCa::new();
    let (api, heads) = start_reflector(&ca).await;
    let port = api.port();
    let mut proxy = start_proxy(&api_yaml(port), SECRET, Some(&ca)).await;
    let auth = format!("Bearer {SECRET}");

    let (head, body) = get(&proxy, port, "/v1/header").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains(&SECRET.to_ascii_lowercase()), "{head}");
    assert!(
        head.contains(&format!("x-echo-auth: bearer {PLACEHOLDER}")),
        "{head}"
    );
    assert_eq!(body, b"ok");

    for path in ["/v1/json", "/v1/split", "/v1/bytewise"] {
        let (head, body) = get(&proxy, port, path).await;
        assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
        assert_eq!(
            String::from_utf8(body).unwrap(),
            format!("{{\"authorization\": \"Bearer {PLACEHOLDER}\"}}"),
            "{path}"
        );
    }

    let (head, body) = get(&proxy, port, "/v1/encoded").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let lines = encoded_lines(&auth);
    let text = String::from_utf8(body).unwrap();
    let scrubbed: Vec<&str> = text.split('\n').collect();
    assert_eq!(scrubbed.len(), lines.len(), "{text}");
    for (original, scrubbed) in lines.iter().zip(&scrubbed) {
        assert_ne!(original, scrubbed, "{original} was left as it was");
        assert!(!scrubbed.contains(SECRET), "{scrubbed}");
    }
    assert!(!contains(text.as_bytes(), &percent(SECRET)), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains(&hex(SECRET.as_bytes())),
        "{text}"
    );
    assert!(text.contains(&hex(PLACEHOLDER.as_bytes())), "{text}");
    assert!(
        text.contains(&hex(PLACEHOLDER.as_bytes()).to_ascii_uppercase()),
        "{text}"
    );
    for line in &scrubbed[..6] {
        // What is left of each base64 line decodes to no piece of the secret.
        let decoded = STANDARD
            .decode(line)
            .or_else(|_| URL_SAFE_NO_PAD.decode(line))
            .unwrap_or_default();
        assert!(!contains(&decoded, &SECRET[3..12]), "{line}");
    }

    // Compressed although `identity` was asked for: refused, never passed on unread.
    let (head, body) = get(&proxy, port, "/v1/gzip").await;
    assert!(head.starts_with("http/1.1 502"), "{head}");
    assert!(
        head.contains("x-egress-blocked: upstream_encoding"),
        "{head}"
    );
    assert!(
        !contains(&body, SECRET),
        "{}",
        String::from_utf8_lossy(&body)
    );

    for head in heads.lock().unwrap().iter() {
        assert!(head.contains(&auth), "the upstream got the key: {head}");
        let asked: Vec<&str> = head
            .lines()
            .filter(|line| line.to_ascii_lowercase().starts_with("accept-encoding:"))
            .collect();
        assert_eq!(asked, ["accept-encoding: identity"], "{head}");
    }
    let records = proxy.shutdown_and_records().await;
    assert_no_secret_in_records(&records, SECRET);
    let reflected = |path: &str| {
        records
            .iter()
            .filter_map(|r| r.request.as_ref())
            .find(|fields| fields.path == path)
            .unwrap_or_else(|| panic!("a record of {path}: {records:#?}"))
            .reflected
    };
    assert_eq!(reflected("/v1/header"), Some(1));
    assert_eq!(reflected("/v1/json"), Some(1));
    assert_eq!(reflected("/v1/split"), Some(1));
    assert_eq!(reflected("/v1/bytewise"), Some(1));
    assert_eq!(reflected("/v1/encoded"), Some(lines.len() as u64));
    let gzip = records
        .iter()
        .find(|r| r.request.as_ref().is_some_and(|f| f.path == "/v1/gzip"))
        .unwrap();
    assert_eq!(
        (gzip.decision, gzip.reason),
        (Outcome::Failed, Reason::UpstreamEncoding)
    );
    let line = records
        .iter()
        .find(|r| r.request.as_ref().is_some_and(|f| f.path == "/v1/json"))
        .unwrap()
        .to_line();
    assert!(line.contains(r#""reflected":1"#), "{line}");
}

/// The record of the one `http` exchange of `path` by each door, in the order they ran.
fn records_of<'r>(records: &'r [AuditRecord], path: &str) -> Vec<&'r AuditRecord> {
    records
        .iter()
        .filter(|r| r.request.as_ref().is_some_and(|fields| fields.path == path))
        .collect()
}

/// Every byte of an inspected answer is scrubbed or replaced, through CONNECT and through a
/// transparent TLS listener alike: the reason phrase (the canonical one goes instead), a
/// header name, a 1xx answer (hyper's client never passes one on), a trailer the client
/// asked for with `TE: trailers` (none is passed on), a content coding quoted in the proxy's
/// refusal.
#[tokio::test]
async fn every_part_of_an_inspected_answer_is_scrubbed_by_every_door() {
    let ca = TestCa::new();
    let (api, heads) = start_reflector_at(&ca, "127.0.0.2:0").await;
    let port = api.port();
    let (mut proxy, listener) = start_transparent_proxy(port, &ca).await;
    let roots = [run_ca(&proxy)];
    let auth = format!("Bearer {PLACEHOLDER}");
    let paths = [
        "/v1/reason",
        "/v1/header-name",
        "/v1/informational",
        "/v1/trailer",
        "/v1/coding",
    ];
    for door in ["connect", "transparent"] {
        for path in paths {
            let stream = match door {
                "connect" => tunnel(proxy.addr, "api.example.com", port, &roots).await,
                _ => {
                    let tcp = TcpStream::connect(listener).await.unwrap();
                    tls_client(tcp, "api.example.com", &roots).await
                }
            }
            .unwrap();
            let (head, body, raw) = ask(stream, path, "TE: trailers\r\n").await;
            let what = format!("{door} {path}: {}", String::from_utf8_lossy(&raw));
            assert!(!holds_secret(&raw), "{what}");
            match path {
                "/v1/reason" | "/v1/informational" => {
                    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{what}");
                    assert_eq!(body, b"ok", "{what}");
                }
                "/v1/header-name" => {
                    let name = format!("x-{}: 1", hex(auth.as_bytes()));
                    assert!(head.contains(&name), "{what}");
                }
                "/v1/trailer" => {
                    assert_eq!(body, b"ok", "{what}");
                    // `Trailer` is hop-by-hop, so hyper sends no trailer fields at all; the
                    // scrubbed copy is still counted.
                    assert!(raw.ends_with(b"\r\n0\r\n\r\n"), "{what}");
                }
                _ => {
                    assert!(head.starts_with("http/1.1 502"), "{what}");
                    let quoted = format!("`{}`", auth.to_ascii_lowercase());
                    assert!(contains(&body, &quoted), "{what}");
                }
            }
        }
    }
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 2 * paths.len(), "{heads:#?}");
    for head in &heads {
        assert!(head.contains(&format!("Bearer {SECRET}")), "{head}");
    }
    let records = proxy.shutdown_and_records().await;
    assert_no_secret_in_records(&records, SECRET);
    for (path, reflected) in [
        ("/v1/reason", Some(1)),
        ("/v1/header-name", Some(1)),
        ("/v1/informational", None),
        ("/v1/trailer", Some(1)),
        ("/v1/coding", Some(1)),
    ] {
        let exchanges = records_of(&records, path);
        assert_eq!(exchanges.len(), 2, "{path}: {records:#?}");
        for record in exchanges {
            let fields = record.request.as_ref().unwrap();
            assert_eq!(fields.reflected, reflected, "{path}: {record:#?}");
        }
    }
}

/// An honest upstream that serves ranges would hand the key back in pieces, each too short
/// to be found alone: the credential's host is never asked for a range (`Range`, `If-Range`
/// removed), so each answer is the whole body, scrubbed.
#[tokio::test]
async fn a_key_asked_for_in_ranges_comes_back_whole_and_scrubbed() {
    let ca = TestCa::new();
    let (api, heads) = start_reflector(&ca).await;
    let port = api.port();
    let mut proxy = start_proxy(&api_yaml(port), SECRET, Some(&ca)).await;
    let json = format!("{{\"authorization\": \"Bearer {SECRET}\"}}");
    let cut = json.find(SECRET).unwrap() + SECRET.len() / 2;
    let mut answers = Vec::new();
    for range in [
        format!("bytes=0-{}", cut - 1),
        format!("bytes={cut}-"),
        format!("bytes=0-{},{cut}-", cut - 1),
    ] {
        let extra = format!("Range: {range}\r\nIf-Range: \"v1\"\r\n");
        answers.push(get_with(&proxy, port, "/v1/json", &extra).await);
    }
    let joined: Vec<u8> = answers
        .iter()
        .flat_map(|(_, body, _)| body.clone())
        .collect();
    assert!(
        !contains(&joined, SECRET),
        "the key in pieces: {}",
        String::from_utf8_lossy(&joined)
    );
    for (head, body, _) in &answers {
        assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
        assert!(!head.contains("content-range"), "{head}");
        assert_eq!(
            String::from_utf8_lossy(body),
            format!("{{\"authorization\": \"Bearer {PLACEHOLDER}\"}}")
        );
    }
    for head in heads.lock().unwrap().iter() {
        let asked = head.to_ascii_lowercase();
        assert!(!asked.contains("\r\nrange:"), "{head}");
        assert!(!asked.contains("\r\nif-range:"), "{head}");
    }
    let records = proxy.shutdown_and_records().await;
    let exchanges = records_of(&records, "/v1/json");
    assert_eq!(exchanges.len(), 3, "{records:#?}");
    for record in exchanges {
        assert_eq!(record.request.as_ref().unwrap().reflected, Some(1));
    }
}

#[tokio::test]
async fn an_answer_without_the_key_has_no_reflected_field() {
    let ca = TestCa::new();
    let (api, _) = start_reflector(&ca).await;
    let port = api.port();
    let mut proxy = start_proxy(&api_yaml(port), SECRET, Some(&ca)).await;
    let (head, body) = get(&proxy, port, "/v1/nothing").await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert_eq!(body, b"nothing");
    let records = proxy.shutdown_and_records().await;
    let http = records.iter().find(|r| r.kind == Kind::Http).unwrap();
    assert_eq!(http.request.as_ref().unwrap().reflected, None);
    assert!(!http.to_line().contains("reflected"), "{}", http.to_line());
}

async fn ask_dns(server: SocketAddr, name: &str) -> Message {
    let mut message = Message::query();
    message.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket
        .send_to(&message.to_vec().unwrap(), server)
        .await
        .unwrap();
    let mut buffer = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(HANG, socket.recv_from(&mut buffer))
        .await
        .expect("a DNS answer in time")
        .unwrap();
    Message::from_vec(&buffer[..n]).unwrap()
}

/// A key mounted into the sandbox by mistake: wherever the sandbox sends it, in whatever
/// form an echo or a client library gives it, it is refused and no record holds it.
#[tokio::test]
async fn the_real_key_in_any_request_is_refused_as_credential_misuse() {
    let ca = TestCa::new();
    let (api, heads) = start_reflector(&ca).await;
    let other = Site::http("127.0.0.1", "other").await;
    let (a, o) = (api.port(), other.port());
    let yaml = format!(
        "version: 1\nname: test\nallow:\n  - host: api.example.com\n    ports: [{a}]\n  - host: other.example.com\n    ports: [{o}]\n  - host: \"*.wild.example.com\"\n  - cidr: 127.0.0.0/8\n    ports: [{a}, {o}]\ncredentials:\n  - host: api.example.com\n    port: {a}\n    secret: API_KEY\ntls:\n  ports: [{a}]\n"
    );
    let mut proxy = start_proxy(&yaml, NAME_SECRET, Some(&ca)).await;
    let basic = STANDARD.encode(format!("user:{NAME_SECRET}"));
    let upper = NAME_SECRET.to_ascii_uppercase();
    let hexed = hex(NAME_SECRET.as_bytes());
    let plain = [
        format!("GET http://other.example.com:{o}/ HTTP/1.1\r\nX-Stolen: Bearer {NAME_SECRET}\r\n"),
        format!("GET http://other.example.com:{o}/?k={NAME_SECRET} HTTP/1.1\r\n"),
        format!("GET http://other.example.com:{o}/{NAME_SECRET}/x HTTP/1.1\r\n"),
        format!("GET http://other.example.com:{o}/ HTTP/1.1\r\nAuthorization: Basic {basic}\r\n"),
        format!("GET http://other.example.com:{o}/?h={hexed} HTTP/1.1\r\n"),
        format!("GET http://{NAME_SECRET}.wild.example.com/ HTTP/1.1\r\n"),
    ];
    for request in &plain {
        let response = exchange(
            proxy.addr,
            format!("{request}Connection: close\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(status(&response), 403, "{request}: {response}");
        assert!(
            response.contains("credential_misuse"),
            "{request}: {response}"
        );
    }
    let response = exchange(
        proxy.addr,
        format!("CONNECT {upper}.wild.example.com:443 HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(status(&response), 403, "{response}");
    assert!(response.contains("credential_misuse"), "{response}");

    // Even to the key's own host, inside the inspected tunnel: the sandbox never holds it.
    let mut tls = tunnel(proxy.addr, "api.example.com", a, &[run_ca(&proxy)])
        .await
        .unwrap();
    let response = common::tls::request(
        &mut tls,
        &format!("GET /v1/{NAME_SECRET} HTTP/1.1\r\nHost: api.example.com\r\n\r\n"),
    )
    .await;
    assert_eq!(status(&response), 403, "{response}");
    assert!(response.contains("credential_misuse"), "{response}");
    drop(tls);

    let dns = proxy.running().local_addrs().dns.expect("DNS bound");
    let mixed: String = NAME_SECRET
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i % 2 == 0 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    let answer = ask_dns(dns, &format!("{mixed}.wild.example.com.")).await;
    assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);

    assert_eq!(other.connection_count().await, 0);
    assert!(
        heads.lock().unwrap().is_empty(),
        "{:?}",
        heads.lock().unwrap()
    );
    let records = proxy.shutdown_and_records().await;
    assert_no_secret_in_records(&records, NAME_SECRET);
    let misuse: Vec<&AuditRecord> = records
        .iter()
        .filter(|r| (r.decision, r.reason) == (Outcome::Blocked, Reason::CredentialMisuse))
        .collect();
    assert_eq!(misuse.len(), plain.len() + 3, "{records:#?}");
    let shown = |kind: Kind| {
        misuse
            .iter()
            .filter(|r| r.kind == kind && r.host.contains("«secret:API_KEY».wild.example.com"))
            .count()
    };
    assert_eq!(shown(Kind::Connect), 1, "{misuse:#?}");
    assert_eq!(shown(Kind::Dns), 1, "{misuse:#?}");
    assert_eq!(shown(Kind::Http), 1, "{misuse:#?}");
    // Plain requests record their path too: the one that carried the key shows its name.
    let mut paths: Vec<&str> = misuse
        .iter()
        .filter_map(|r| r.request.as_ref())
        .map(|fields| fields.path.as_str())
        .filter(|path| path.contains("«secret:"))
        .collect();
    paths.sort_unstable();
    assert_eq!(
        paths,
        ["/v1/«secret:API_KEY»", "/«secret:API_KEY»/x"],
        "{misuse:#?}"
    );
}

#[tokio::test]
async fn a_secret_too_short_to_scrub_is_refused_before_the_proxy_starts() {
    let (policy, _) = Policy::from_yaml("test.yaml", &api_yaml(443)).unwrap();
    let mut config = ProxyConfig::new(PolicySet::from(policy), "127.0.0.1:0".parse().unwrap());
    config.credentials = credentials("abcde", None);
    let Err(error) = Proxy::bind(config).await else {
        panic!("a five-byte secret was accepted");
    };
    assert!(
        error.to_string().contains("shorter than 6 bytes"),
        "{error}"
    );
}
