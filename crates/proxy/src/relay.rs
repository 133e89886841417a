//! Copying a tunnel's bytes both ways, counting them, until both sides are done or the
//! proxy shuts down.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::splice::{self, PipePool};

/// Bytes moved so far: `up` = client → upstream, `down` = upstream → client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Transferred {
    pub up: u64,
    pub down: u64,
}

/// Relays until both directions have ended (a side's EOF is passed on as a half-close), one
/// side fails, or shutdown. The counts are kept in `moved` as they happen, so a tunnel cut
/// short still reports what went through. Uses splice(2) with two pipes from `pipes` (given
/// back when the tunnel ends, if empty), else a user-space copy with a buffer of the pool's
/// capacity per direction.
pub(crate) async fn relay(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    pipes: &PipePool,
    moved: &mut Transferred,
    stop: &CancellationToken,
) {
    relay_bounded(client, upstream, pipes, moved, stop, None).await;
}

/// [`relay`], also ended when no byte has moved either way for `idle` (when given): a raw
/// door's connection holds a place under the proxy's limits, and a program that opens one
/// and forgets it must not keep that place for the whole run.
pub(crate) async fn relay_bounded(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    pipes: &PipePool,
    moved: &mut Transferred,
    stop: &CancellationToken,
    idle: Option<Duration>,
) {
    let up = AtomicU64::new(moved.up);
    let down = AtomicU64::new(moved.down);
    let pair = match (pipes.take(), pipes.take()) {
        (Ok(up_pipe), Ok(down_pipe)) => Ok((up_pipe, down_pipe)),
        (Err(error), other) | (other, Err(error)) => {
            if let Ok(pipe) = other {
                pipes.put(pipe);
            }
            Err(error)
        }
    };
    let idle_end = idle_watch(idle, &up, &down);
    let result = match pair {
        Ok((mut up_pipe, mut down_pipe)) => {
            let (client, upstream) = (&*client, &*upstream);
            let both = async {
                tokio::try_join!(
                    splice::pump(client, upstream, &mut up_pipe, &up),
                    splice::pump(upstream, client, &mut down_pipe, &down),
                )
            };
            let result = tokio::select! {
                result = both => result.map(|_| ()),
                () = idle_end => Ok(()),
                () = stop.cancelled() => Ok(()),
            };
            pipes.put(up_pipe);
            pipes.put(down_pipe);
            result
        }
        Err(error) => {
            tracing::debug!(%error, "no pipes for splice; copying through user space");
            let buffer_bytes = pipes.capacity();
            let (mut client_read, mut client_write) = client.split();
            let (mut upstream_read, mut upstream_write) = upstream.split();
            let both = async {
                tokio::try_join!(
                    pump(&mut client_read, &mut upstream_write, buffer_bytes, &up),
                    pump(&mut upstream_read, &mut client_write, buffer_bytes, &down),
                )
            };
            tokio::select! {
                result = both => result.map(|_| ()),
                () = idle_end => Ok(()),
                () = stop.cancelled() => Ok(()),
            }
        }
    };
    moved.up = up.into_inner();
    moved.down = down.into_inner();
    if let Err(error) = result {
        tracing::debug!(%error, "tunnel ended with an error");
    }
}

/// Ends once `idle` passes with neither count moving; never without `idle`. It looks a few
/// times per `idle`, so a silent connection ends between `idle` and 1.25 × `idle`.
async fn idle_watch(idle: Option<Duration>, up: &AtomicU64, down: &AtomicU64) {
    let Some(idle) = idle else {
        return std::future::pending().await;
    };
    let moved = || up.load(Ordering::Relaxed) + down.load(Ordering::Relaxed);
    let mut seen = moved();
    let mut quiet_since = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval(idle / 4);
    loop {
        ticks.tick().await;
        let now = moved();
        if now != seen {
            seen = now;
            quiet_since = tokio::time::Instant::now();
        } else if quiet_since.elapsed() >= idle {
            return;
        }
    }
}

async fn pump<R, W>(
    reader: &mut R,
    writer: &mut W,
    buffer_bytes: usize,
    count: &AtomicU64,
) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; buffer_bytes];
    loop {
        let n = reader.read(&mut buffer).await?;
        if n == 0 {
            // Half-close: the other direction may still have bytes to deliver.
            let _ = writer.shutdown().await;
            return Ok(());
        }
        writer.write_all(&buffer[..n]).await?;
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_sockets::socket_pair;
    use tokio::io::AsyncWriteExt;

    /// One tunnel: the client sends `request` and half-closes; the upstream reads it to the
    /// end, then answers `response` and closes. Returns what each side got and the counts.
    async fn tunnel(
        pipes: &PipePool,
        request: &[u8],
        response: &[u8],
    ) -> (Vec<u8>, Vec<u8>, Transferred) {
        let (mut client, mut proxy_client) = socket_pair().await;
        let (mut proxy_upstream, mut upstream) = socket_pair().await;
        let stop = CancellationToken::new();
        let mut moved = Transferred::default();
        let client_side = async {
            client.write_all(request).await.unwrap();
            client.shutdown().await.unwrap();
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            got
        };
        let upstream_side = async {
            let mut got = Vec::new();
            // The client's half-close arrives as EOF while the way back is still open.
            upstream.read_to_end(&mut got).await.unwrap();
            upstream.write_all(response).await.unwrap();
            upstream.shutdown().await.unwrap();
            got
        };
        let relayed = relay(
            &mut proxy_client,
            &mut proxy_upstream,
            pipes,
            &mut moved,
            &stop,
        );
        let ((), at_client, at_upstream) = tokio::join!(relayed, client_side, upstream_side);
        (at_upstream, at_client, moved)
    }

    #[tokio::test]
    async fn a_tunnel_relays_both_ways_exactly_through_half_close_and_counts() {
        let pipes = PipePool::new(4, 64 * 1024);
        let request: Vec<u8> = (0..700_000u32).map(|i| (i % 253) as u8).collect();
        let response: Vec<u8> = (0..2_500_000u32).map(|i| (i % 241) as u8).collect();
        let (at_upstream, at_client, moved) = tunnel(&pipes, &request, &response).await;
        assert!(
            at_upstream == request,
            "upstream got {} of {} bytes",
            at_upstream.len(),
            request.len()
        );
        assert!(
            at_client == response,
            "client got {} of {} bytes",
            at_client.len(),
            response.len()
        );
        assert_eq!(
            moved,
            Transferred {
                up: request.len() as u64,
                down: response.len() as u64
            }
        );
        // Both pipes came back empty, and the next tunnel runs on them.
        assert_eq!(pipes.idle(), 2);
        let (at_upstream, at_client, moved) = tunnel(&pipes, b"second", b"answer").await;
        assert_eq!(
            (at_upstream.as_slice(), at_client.as_slice()),
            (&b"second"[..], &b"answer"[..])
        );
        assert_eq!(moved, Transferred { up: 6, down: 6 });
        assert_eq!(pipes.idle(), 2);
    }
}
