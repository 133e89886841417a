//! Moving a tunnel's bytes with splice(2): socket → pipe → socket inside the kernel, never
//! through a user-space buffer.
//!
//! Measured on the 2-core build machine (bench/proxy.sh, 1 GiB over loopback): a user-space
//! relay with 256 KiB buffers reached ~0.4× a direct download, since every byte is copied
//! into and out of the proxy; splice lifts that (see the report's figures). rustix's
//! `splice` is a safe wrapper, so this module needs no `unsafe`.
//!
//! The sockets stay tokio's: readiness comes from the reactor (`readable`/`writable`), and
//! `try_io` clears it when the kernel says EAGAIN, exactly as tokio's own reads do.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::net::Shutdown as Direction;
use rustix::pipe::{PipeFlags, SpliceFlags, fcntl_setpipe_size, pipe_with, splice};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// A kernel pipe that carries one direction of a tunnel.
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Its capacity: the most one splice moves at once.
    capacity: usize,
    /// Bytes spliced in and not yet spliced out. Only a pipe holding nothing goes back to a
    /// [`PipePool`]: no byte of one tunnel can ever come out in another.
    held: usize,
}

impl Pipe {
    /// A non-blocking pipe of about `capacity` bytes (the kernel may round it, or keep its
    /// default of 64 KiB when the request exceeds `/proc/sys/fs/pipe-max-size`).
    pub(crate) fn new(capacity: usize) -> io::Result<Pipe> {
        let (read, write) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
        let capacity = fcntl_setpipe_size(&write, capacity).unwrap_or(64 * 1024);
        Ok(Pipe {
            read,
            write,
            capacity,
            held: 0,
        })
    }

    /// True when every byte spliced in was spliced out again.
    pub(crate) fn is_empty(&self) -> bool {
        self.held == 0
    }
}

/// Empty pipes of closed tunnels, kept for the next tunnels: a fresh CONNECT then costs no
/// `pipe2`, `F_SETPIPE_SZ` and `close` calls (eight per tunnel). A pipe that may still hold
/// bytes (a tunnel cut short mid-chunk) is closed instead of kept.
pub(crate) struct PipePool {
    idle: Mutex<Vec<Pipe>>,
    /// Pipes kept at most; beyond it returned pipes are closed.
    keep: usize,
    /// The capacity new pipes are made with.
    capacity: usize,
}

impl PipePool {
    /// A pool that keeps up to `keep` idle pipes and makes new ones of `capacity` bytes.
    pub(crate) fn new(keep: usize, capacity: usize) -> PipePool {
        PipePool {
            idle: Mutex::new(Vec::new()),
            keep,
            capacity,
        }
    }

    /// The capacity asked for new pipes (also the user-space copy's buffer size).
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// An empty pipe: a kept one, else a new one.
    pub(crate) fn take(&self) -> io::Result<Pipe> {
        let kept = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        match kept {
            Some(pipe) => Ok(pipe),
            None => Pipe::new(self.capacity),
        }
    }

    /// Keeps `pipe` for a later tunnel if it is empty and the pool has room; else closes it.
    pub(crate) fn put(&self, pipe: Pipe) {
        if !pipe.is_empty() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.keep
        {
            idle.push(pipe);
        }
    }

    /// Pipes kept right now.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.idle.lock().map(|idle| idle.len()).unwrap_or(0)
    }
}

const FLAGS: SpliceFlags = SpliceFlags::MOVE.union(SpliceFlags::NONBLOCK);

/// Moves bytes from `from` to `to` until `from` reaches EOF (then half-closes `to`), adding
/// each delivered chunk to `count` as it goes. The pipe must be empty on entry; it is empty
/// again when this returns `Ok`, and [`Pipe::is_empty`] tells after an error or a cancel.
pub(crate) async fn pump(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &mut Pipe,
    count: &AtomicU64,
) -> io::Result<()> {
    debug_assert!(pipe.is_empty(), "a pump starts with an empty pipe");
    loop {
        if fill(from, pipe).await? == 0 {
            let _ = rustix::net::shutdown(to, Direction::Write);
            return Ok(());
        }
        drain(to, pipe, count).await?;
    }
}

/// Splices what `from` has (up to the pipe's capacity) into the empty `pipe`; 0 at EOF.
async fn fill(from: &TcpStream, pipe: &mut Pipe) -> io::Result<usize> {
    loop {
        // The pipe is empty here, so EAGAIN can only mean the socket has nothing to read.
        from.readable().await?;
        match from.try_io(Interest::READABLE, || {
            splice(from, None, &pipe.write, None, pipe.capacity, FLAGS).map_err(io::Error::from)
        }) {
            Ok(n) => {
                pipe.held += n;
                return Ok(n);
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        }
    }
}

/// Splices everything `pipe` holds into `to`, counting each delivered chunk.
async fn drain(to: &TcpStream, pipe: &mut Pipe, count: &AtomicU64) -> io::Result<()> {
    while pipe.held > 0 {
        to.writable().await?;
        match to.try_io(Interest::WRITABLE, || {
            splice(&pipe.read, None, to, None, pipe.held, FLAGS).map_err(io::Error::from)
        }) {
            Ok(n) => {
                pipe.held -= n;
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_sockets::socket_pair;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What the kernel says the pipe holds.
    fn in_pipe(pipe: &Pipe) -> u64 {
        rustix::io::ioctl_fionread(&pipe.read).unwrap()
    }

    #[tokio::test]
    async fn pump_moves_every_byte_counts_it_and_passes_on_eof() {
        let (mut source, from) = socket_pair().await;
        let (to, mut sink) = socket_pair().await;
        let payload: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut pipe = Pipe::new(64 * 1024).unwrap();
        let count = AtomicU64::new(0);
        let send = async {
            source.write_all(&payload).await.unwrap();
            source.shutdown().await.unwrap();
        };
        let receive = async {
            let mut got = Vec::new();
            sink.read_to_end(&mut got).await.unwrap();
            got
        };
        let (pumped, (), got) = tokio::join!(pump(&from, &to, &mut pipe, &count), send, receive);
        pumped.unwrap();
        assert!(
            got == payload,
            "{} bytes arrived of {}",
            got.len(),
            payload.len()
        );
        assert_eq!(count.into_inner(), payload.len() as u64);
        assert!(pipe.is_empty());
        assert_eq!(in_pipe(&pipe), 0);
    }

    #[tokio::test]
    async fn only_empty_pipes_are_kept_for_later_tunnels() {
        let pool = PipePool::new(2, 64 * 1024);
        let (mut source, from) = socket_pair().await;
        let (to, mut sink) = socket_pair().await;
        source.write_all(b"left in the pipe").await.unwrap();
        let mut pipe = pool.take().unwrap();
        assert_eq!(fill(&from, &mut pipe).await.unwrap(), 16);
        assert_eq!(in_pipe(&pipe), 16);
        // A tunnel cut short here leaves bytes in its pipe: that pipe is closed, not kept.
        let mut cut_short = Pipe::new(64 * 1024).unwrap();
        source.write_all(b"cut").await.unwrap();
        fill(&from, &mut cut_short).await.unwrap();
        pool.put(cut_short);
        assert_eq!(pool.idle(), 0);
        let count = AtomicU64::new(0);
        drain(&to, &mut pipe, &count).await.unwrap();
        assert_eq!((count.into_inner(), in_pipe(&pipe)), (16, 0));
        let mut got = [0u8; 16];
        sink.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"left in the pipe");
        pool.put(pipe);
        assert_eq!(pool.idle(), 1);
        for _ in 0..3 {
            pool.put(Pipe::new(64 * 1024).unwrap());
        }
        assert_eq!(pool.idle(), 2, "at most `keep` pipes are kept");
        let reused = pool.take().unwrap();
        assert!(reused.is_empty());
        assert_eq!(in_pipe(&reused), 0);
        assert_eq!(pool.idle(), 1);
    }
}
