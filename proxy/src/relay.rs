//! Copying a tunnel's bytes both ways, counting them, until both sides are done or the
//! proxy shuts down.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::shutdown::Shutdown;
use crate::splice::{self, Pipe};

/// Bytes moved so far: `up` = client → upstream, `down` = upstream → client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transferred {
    pub up: u64,
    pub down: u64,
}

/// Relays until both directions have ended (a side's EOF is passed on as a half-close), one
/// side fails, or shutdown. The counts are kept in `moved` as they happen, so a tunnel cut
/// short still reports what went through. Uses splice(2) when two pipes can be had, else a
/// user-space copy with `buffer_bytes` per direction.
pub async fn relay(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    buffer_bytes: usize,
    moved: &mut Transferred,
    shutdown: &mut Shutdown,
) {
    let Transferred { up, down } = moved;
    let result = match (Pipe::new(buffer_bytes), Pipe::new(buffer_bytes)) {
        (Ok(up_pipe), Ok(down_pipe)) => {
            let (client, upstream) = (&*client, &*upstream);
            let both = async {
                tokio::try_join!(
                    splice::pump(client, upstream, &up_pipe, up),
                    splice::pump(upstream, client, &down_pipe, down),
                )
            };
            tokio::select! {
                result = both => result.map(|_| ()),
                () = shutdown.wait() => Ok(()),
            }
        }
        (Err(error), _) | (_, Err(error)) => {
            tracing::debug!(%error, "no pipes for splice; copying through user space");
            let (mut client_read, mut client_write) = client.split();
            let (mut upstream_read, mut upstream_write) = upstream.split();
            let both = async {
                tokio::try_join!(
                    pump(&mut client_read, &mut upstream_write, buffer_bytes, up),
                    pump(&mut upstream_read, &mut client_write, buffer_bytes, down),
                )
            };
            tokio::select! {
                result = both => result.map(|_| ()),
                () = shutdown.wait() => Ok(()),
            }
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "tunnel ended with an error");
    }
}

async fn pump<R, W>(
    reader: &mut R,
    writer: &mut W,
    buffer_bytes: usize,
    count: &mut u64,
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
        *count += n as u64;
    }
}
