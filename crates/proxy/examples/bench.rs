//! Load generator and upstream for `bench/proxy.sh`, all on loopback.
//!
//! ```text
//! bench serve ADDR                                   HTTP upstream: /big?bytes=N, /small
//! bench throughput [--proxy ADDR] TARGET BYTES       one download (CONNECT when proxied)
//! bench latency [--proxy ADDR] TARGET COUNT          sequential small requests, new
//!                                                    connection each (absolute-form when proxied)
//! bench proxy LISTEN PORT RELAY_BYTES                the library proxy allowing 127.0.0.1:PORT,
//!                                                    to try relay buffer sizes
//! ```
//! Results are one JSON line on stdout.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error + Send + Sync>;

const CHUNK: usize = 1024 * 1024;

fn main() -> Result<(), Error> {
    // BENCH_RUNTIME=current runs everything on one thread (no cross-thread wake-ups).
    let runtime = match std::env::var("BENCH_RUNTIME").as_deref() {
        Ok("current") => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        _ => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
    };
    runtime.block_on(run())
}

async fn run() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (proxy, rest): (Option<String>, Vec<String>) =
        match args.iter().position(|a| a == "--proxy") {
            Some(i) => {
                let mut rest = args.clone();
                let proxy = rest.remove(i + 1);
                rest.remove(i);
                (Some(proxy), rest)
            }
            None => (None, args),
        };
    match rest
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["serve", addr] => serve(addr).await,
        ["proxy", listen, port, buffer] => run_proxy(listen, port.parse()?, buffer.parse()?).await,
        ["throughput", target, bytes] => throughput(proxy.as_deref(), target, bytes.parse()?).await,
        ["latency", target, count] => latency(proxy.as_deref(), target, count.parse()?).await,
        _ => {
            Err("usage: bench serve ADDR | bench throughput|latency [--proxy ADDR] TARGET N".into())
        }
    }
}

async fn run_proxy(listen: &str, port: u16, relay_bytes: usize) -> Result<(), Error> {
    use egress_core::policy::{Policy, PolicySet};
    let yaml = format!("version: 1\nallow:\n  - cidr: 127.0.0.1/32\n    ports: [{port}]\n");
    let (policy, _) = Policy::from_yaml("bench.yaml", &yaml)?;
    let mut config = egress_proxy::ProxyConfig::new(PolicySet::from(policy), listen.parse()?);
    config.audit = egress_proxy::AuditDestination::File("/dev/null".into());
    config.limits.relay_buffer_bytes = relay_bytes;
    let running = egress_proxy::Proxy::bind(config).await?;
    println!("{{\"listen\":\"{}\"}}", running.local_addrs().listen);
    tokio::signal::ctrl_c().await?;
    running.shutdown().await;
    Ok(())
}

async fn serve(addr: &str) -> Result<(), Error> {
    let listener = TcpListener::bind(addr).await?;
    println!("{{\"listen\":\"{}\"}}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = serve_connection(stream).await;
        });
    }
}

/// Keep-alive HTTP/1.1: proxies that pool upstream connections may use it.
async fn serve_connection(mut stream: TcpStream) -> Result<(), Error> {
    let zeros = vec![0u8; CHUNK];
    let mut pending = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
            let n = stream.read(&mut buffer).await?;
            if n == 0 {
                return Ok(());
            }
            pending.extend_from_slice(&buffer[..n]);
            continue;
        };
        let head = String::from_utf8_lossy(&pending[..end]).into_owned();
        pending.drain(..end + 4);
        let path = head.split(' ').nth(1).unwrap_or("/");
        if let Some(bytes) = path.strip_prefix("/big?bytes=") {
            let mut left: u64 = bytes.parse()?;
            stream
                .write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {left}\r\n\r\n").as_bytes())
                .await?;
            while left > 0 {
                let n = left.min(CHUNK as u64) as usize;
                stream.write_all(&zeros[..n]).await?;
                left -= n as u64;
            }
        } else {
            stream
                .write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok",
                )
                .await?;
        }
        if head.to_ascii_lowercase().contains("connection: close") {
            return Ok(());
        }
    }
}

/// Reads a response head; returns what was read past it.
async fn read_head(stream: &mut TcpStream) -> Result<(String, Vec<u8>), Error> {
    let mut pending = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).into_owned();
            return Ok((head, pending[end + 4..].to_vec()));
        }
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            return Err("closed before a response head".into());
        }
        pending.extend_from_slice(&buffer[..n]);
    }
}

async fn throughput(proxy: Option<&str>, target: &str, bytes: u64) -> Result<(), Error> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(proxy.unwrap_or(target)).await?;
    stream.set_nodelay(true)?;
    if proxy.is_some() {
        stream
            .write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
            .await?;
        let (head, _) = read_head(&mut stream).await?;
        if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
            return Err(format!("CONNECT refused: {head}").into());
        }
    }
    stream
        .write_all(format!("GET /big?bytes={bytes} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await?;
    let (head, early) = read_head(&mut stream).await?;
    if !head.contains(" 200 ") {
        return Err(format!("download refused: {head}").into());
    }
    let mut got = early.len() as u64;
    let mut buffer = vec![0u8; CHUNK];
    while got < bytes {
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            return Err(format!("closed after {got} of {bytes} bytes").into());
        }
        got += n as u64;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{{\"bytes\":{got},\"seconds\":{seconds:.3},\"mib_per_s\":{:.1}}}",
        got as f64 / seconds / (1024.0 * 1024.0)
    );
    Ok(())
}

async fn latency(proxy: Option<&str>, target: &str, count: usize) -> Result<(), Error> {
    let request = match proxy {
        Some(_) => format!(
            "GET http://{target}/small HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"
        ),
        None => format!("GET /small HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"),
    };
    let mut samples: Vec<Duration> = Vec::with_capacity(count);
    let mut buffer = vec![0u8; 16 * 1024];
    for _ in 0..count {
        let started = Instant::now();
        let mut stream = TcpStream::connect(proxy.unwrap_or(target)).await?;
        stream.set_nodelay(true)?;
        stream.write_all(request.as_bytes()).await?;
        let n = stream.read(&mut buffer).await?;
        samples.push(started.elapsed());
        if n == 0
            || !buffer.starts_with(b"HTTP/1.")
            || !buffer[..n].windows(5).any(|w| w == b" 200 ")
        {
            return Err(format!("bad answer: {}", String::from_utf8_lossy(&buffer[..n])).into());
        }
        while stream.read(&mut buffer).await? > 0 {}
    }
    samples.sort();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "{{\"count\":{count},\"median_us\":{:.0},\"p90_us\":{:.0}}}",
        micros(samples[count / 2]),
        micros(samples[count * 9 / 10])
    );
    Ok(())
}
