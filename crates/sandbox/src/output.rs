//! Relays the sandbox's stdout and stderr to the caller, live, with one byte cap across both.
//!
//! Frames are written as they arrive and never collected, so a command that prints 100 MB
//! costs the caller a frame's worth of memory. Past the cap the rest is read and dropped
//! (the command is not blocked on a full pipe) and one marker line goes to stderr.
//!
//! A caller that reads slowly slows the command down (the relay waits on its sink), until
//! the run is over (time limit, interrupt, cancel): then the rest is read and dropped, see
//! `relay`.

use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::engine::{DockerError, OutputFrame};

/// Where the command's output goes, and what it reads on its stdin. Made with
/// [`stdio`](Self::stdio) or [`new`](Self::new), then [`with_events`](Self::with_events) /
/// [`with_stdin`](Self::with_stdin).
#[non_exhaustive]
pub struct OutputSinks {
    /// Where the command's stdout goes.
    pub stdout: Box<dyn AsyncWrite + Send + Unpin>,
    /// Where the command's stderr goes.
    pub stderr: Box<dyn AsyncWrite + Send + Unpin>,
    /// Forwarded to the command's stdin until it ends, then the command sees EOF; `None`:
    /// EOF at once. Needs a local engine (the launcher's attached stdin); ignored otherwise.
    pub stdin: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// Receives the run's id, its start and end, and each audit record as it comes; a
    /// full channel makes a running command's run wait (see
    /// [`with_events`](Self::with_events)).
    pub events: Option<tokio::sync::mpsc::Sender<super::events::RunEvent>>,
    /// A write refused as a broken pipe (the reader went away) ends the run
    /// ([`Interruption::OutputClosed`](super::Interruption::OutputClosed)); otherwise the
    /// rest of that stream is dropped and the command runs on.
    pub(crate) closed_pipe_ends_run: bool,
}

impl OutputSinks {
    /// This process's stdin, stdout and stderr.
    pub fn stdio() -> OutputSinks {
        OutputSinks {
            stdout: Box::new(tokio::io::stdout()),
            stderr: Box::new(tokio::io::stderr()),
            stdin: Some(Box::new(tokio::io::stdin())),
            events: None,
            // As a command in a shell pipeline: `run … | head` ends when `head` has.
            closed_pipe_ends_run: true,
        }
    }

    /// Any two writers (a buffer, a file, a channel adapter …).
    pub fn new(
        stdout: impl AsyncWrite + Send + Unpin + 'static,
        stderr: impl AsyncWrite + Send + Unpin + 'static,
    ) -> OutputSinks {
        OutputSinks {
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
            stdin: None,
            events: None,
            closed_pipe_ends_run: false,
        }
    }

    /// Follows the run live through `events`, a channel of the capacity the caller picks
    /// (`tokio::sync::mpsc::channel(capacity)`; a few hundred events absorb a burst of
    /// DNS records).
    ///
    /// No event is dropped: while the command runs a full channel makes the run wait for
    /// the receiver, so a slow receiver slows the run's audit stream, never grows memory;
    /// once the command is over nothing waits, and the last events are delivered, in order,
    /// as room comes. The receiver reads until the channel closes; a dropped receiver only
    /// ends the events. The `--audit-log` file is written whatever the channel does. See
    /// [`events`](super::events#backpressure).
    pub fn with_events(
        mut self,
        events: tokio::sync::mpsc::Sender<super::events::RunEvent>,
    ) -> OutputSinks {
        self.events = Some(events);
        self
    }

    /// Feeds `input` to the command's stdin (closed when `input` ends).
    pub fn with_stdin(mut self, input: impl AsyncRead + Send + Unpin + 'static) -> OutputSinks {
        self.stdin = Some(Box::new(input));
        self
    }
}

/// What the command wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OutputStats {
    /// Bytes the command wrote to stdout, including any dropped past the cap.
    pub stdout_bytes: u64,
    /// Bytes the command wrote to stderr, including any dropped past the cap.
    pub stderr_bytes: u64,
    /// Whether the cap was reached and output dropped.
    pub truncated: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Channel {
    Stdout,
    Stderr,
}

/// The cap, as a pure state machine: how much of each chunk may still pass.
struct OutputCap {
    limit: u64,
    relayed: u64,
    stats: OutputStats,
    /// The last relayed byte, so the marker starts on a line of its own.
    last_byte: Option<u8>,
}

impl OutputCap {
    fn new(limit: u64) -> OutputCap {
        OutputCap {
            limit,
            relayed: 0,
            stats: OutputStats::default(),
            last_byte: None,
        }
    }

    /// How many leading bytes of `chunk` to relay, and whether this chunk crossed the cap
    /// (the marker is due).
    fn admit(&mut self, channel: Channel, chunk: &[u8]) -> (usize, bool) {
        let len = chunk.len() as u64;
        match channel {
            Channel::Stdout => self.stats.stdout_bytes += len,
            Channel::Stderr => self.stats.stderr_bytes += len,
        }
        if self.stats.truncated {
            return (0, false);
        }
        let room = self.limit - self.relayed;
        if len <= room {
            self.relayed += len;
            if let Some(&last) = chunk.last() {
                self.last_byte = Some(last);
            }
            return (chunk.len(), false);
        }
        let pass = room as usize;
        self.relayed = self.limit;
        self.stats.truncated = true;
        if pass > 0 {
            self.last_byte = Some(chunk[pass - 1]);
        }
        (pass, true)
    }

    fn marker(&self) -> String {
        let newline = match self.last_byte {
            Some(b'\n') | None => "",
            Some(_) => "\n",
        };
        format!(
            "{newline}[egress-sandbox: output truncated after {} bytes]\n",
            self.limit
        )
    }
}

/// A sink that stops being written to after its first error (a closed pipe, say) while the
/// relay keeps draining the container.
struct Sink {
    writer: Box<dyn AsyncWrite + Send + Unpin>,
    broken: bool,
    /// Cancelled when a write meets a broken pipe, if that is to end the run.
    closed: Option<CancellationToken>,
}

impl Sink {
    async fn write(&mut self, bytes: &[u8]) {
        if self.broken || bytes.is_empty() {
            return;
        }
        let result = async {
            self.writer.write_all(bytes).await?;
            self.writer.flush().await
        }
        .await;
        if let Err(error) = result {
            tracing::debug!(%error, "output sink closed; dropping the rest");
            self.broken = true;
            if error.kind() == std::io::ErrorKind::BrokenPipe
                && let Some(closed) = &self.closed
            {
                closed.cancel();
            }
        }
    }
}

/// How the sandbox's output stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// The engine closed it after the container's stdout and stderr closed. The sandbox's
    /// init (`--init`, PID 1) holds both until it exits, and its exit kills every other
    /// process of the container: the command is over.
    Eof,
    /// The attach connection failed; the command may still be running.
    Error,
}

/// Relays `frames` into `sinks` until the stream ends.
///
/// Once `run_over` is cancelled (the run is being killed) nothing more is written: a write
/// still waiting on its sink is dropped, and the rest of the stream is read into nothing.
/// The engine cannot finish killing a container whose attached output is not read: its
/// exit waits for the copy of the container's output, which waits for this stream. So a
/// caller that reads nothing (a pipe into `sleep`, an API client that stopped reading)
/// would otherwise hold the kill, and with it the run's end and teardown, for as long as
/// it does not read.
pub(crate) async fn relay<S>(
    mut frames: S,
    sinks: OutputSinks,
    limit: u64,
    run_over: CancellationToken,
    output_closed: CancellationToken,
) -> (OutputStats, StreamEnd)
where
    S: Stream<Item = Result<OutputFrame, DockerError>> + Unpin,
{
    let mut cap = OutputCap::new(limit);
    let closed = sinks.closed_pipe_ends_run.then_some(output_closed);
    let mut stdout = Sink {
        writer: sinks.stdout,
        broken: false,
        closed: closed.clone(),
    };
    let mut stderr = Sink {
        writer: sinks.stderr,
        broken: false,
        closed,
    };
    while let Some(frame) = frames.next().await {
        let (channel, message) = match frame {
            Ok(OutputFrame::Stdout(message)) => (Channel::Stdout, message),
            Ok(OutputFrame::Stderr(message)) => (Channel::Stderr, message),
            Err(error) => {
                tracing::debug!(%error, "output stream ended with an error");
                return (cap.stats, StreamEnd::Error);
            }
        };
        let (pass, crossed) = cap.admit(channel, &message);
        let marker = crossed.then(|| cap.marker());
        let write = async {
            let sink = match channel {
                Channel::Stdout => &mut stdout,
                Channel::Stderr => &mut stderr,
            };
            sink.write(&message[..pass]).await;
            if let Some(marker) = marker {
                stderr.write(marker.as_bytes()).await;
            }
        };
        tokio::select! {
            () = write => {}
            () = run_over.cancelled() => {
                tracing::debug!("the run is over; dropping the rest of its output");
                stdout.broken = true;
                stderr.broken = true;
            }
        }
    }
    (cap.stats, StreamEnd::Eof)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn cap_counts_across_both_streams() {
        let mut cap = OutputCap::new(10);
        assert_eq!(cap.admit(Channel::Stdout, b"12345"), (5, false));
        assert_eq!(cap.admit(Channel::Stderr, b"abcdefgh"), (5, true));
        assert_eq!(cap.admit(Channel::Stdout, b"more"), (0, false));
        assert_eq!(
            cap.stats,
            OutputStats {
                stdout_bytes: 9,
                stderr_bytes: 8,
                truncated: true
            }
        );
        assert_eq!(
            cap.marker(),
            "\n[egress-sandbox: output truncated after 10 bytes]\n"
        );
    }

    #[test]
    fn exactly_at_the_cap_is_not_truncated() {
        let mut cap = OutputCap::new(4);
        assert_eq!(cap.admit(Channel::Stdout, b"abc\n"), (4, false));
        assert!(!cap.stats.truncated);
        assert_eq!(cap.admit(Channel::Stdout, b"x"), (0, true));
        assert_eq!(
            cap.marker(),
            "[egress-sandbox: output truncated after 4 bytes]\n"
        );
    }

    #[tokio::test]
    async fn relay_splits_streams_and_marks_truncation_once() {
        let frames = futures_util::stream::iter(vec![
            Ok(OutputFrame::Stdout(Bytes::from_static(b"hello\n"))),
            Ok(OutputFrame::Stderr(Bytes::from_static(b"oops\n"))),
            Ok(OutputFrame::Stdout(Bytes::from_static(b"0123456789"))),
            Ok(OutputFrame::Stdout(Bytes::from_static(b"dropped"))),
        ]);
        let (out_writer, mut out_reader) = tokio::io::duplex(1 << 16);
        let (err_writer, mut err_reader) = tokio::io::duplex(1 << 16);
        let (stats, end) = relay(
            frames,
            OutputSinks::new(out_writer, err_writer),
            15,
            CancellationToken::new(),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(end, StreamEnd::Eof);
        let mut out = String::new();
        let mut err = String::new();
        use tokio::io::AsyncReadExt;
        out_reader.read_to_string(&mut out).await.unwrap();
        err_reader.read_to_string(&mut err).await.unwrap();
        assert_eq!(out, "hello\n0123");
        assert_eq!(
            err,
            "oops\n\n[egress-sandbox: output truncated after 15 bytes]\n"
        );
        assert_eq!(stats.stdout_bytes, 23);
        assert!(stats.truncated);
    }

    /// A reader that went away (`run … | head`) ends a run whose sinks are the process's
    /// own (as SIGPIPE ends a command in a pipeline); other sinks only drop the rest.
    #[tokio::test]
    async fn a_broken_pipe_ends_the_run_only_for_sinks_that_ask() {
        for ends_run in [true, false] {
            let frames = futures_util::stream::iter(
                (0..3).map(|_| Ok(OutputFrame::Stdout(Bytes::from_static(b"line\n")))),
            );
            let (reader, writer) = std::os::unix::net::UnixStream::pair().unwrap();
            drop(reader);
            writer.set_nonblocking(true).unwrap();
            let writer = tokio::net::UnixStream::from_std(writer).unwrap();
            let mut sinks = OutputSinks::new(writer, tokio::io::sink());
            sinks.closed_pipe_ends_run = ends_run;
            let closed = CancellationToken::new();
            let (stats, end) = relay(
                frames,
                sinks,
                1 << 20,
                CancellationToken::new(),
                closed.clone(),
            )
            .await;
            assert_eq!(end, StreamEnd::Eof);
            assert_eq!(stats.stdout_bytes, 15, "the rest is still drained");
            assert_eq!(closed.is_cancelled(), ends_run);
        }
    }

    #[tokio::test]
    async fn once_the_run_is_over_output_nobody_reads_is_drained_into_nothing() {
        let frames = futures_util::stream::iter(
            (0..100).map(|_| Ok(OutputFrame::Stdout(Bytes::from(vec![b'y'; 1 << 16])))),
        );
        // Kept open and never read: the first write waits forever.
        let (out_writer, _out_reader) = tokio::io::duplex(1024);
        let run_over = CancellationToken::new();
        let relay = tokio::spawn(relay(
            frames,
            OutputSinks::new(out_writer, tokio::io::sink()),
            1 << 30,
            run_over.clone(),
            CancellationToken::new(),
        ));
        run_over.cancel();
        let (stats, end) = tokio::time::timeout(std::time::Duration::from_secs(10), relay)
            .await
            .expect("the relay still waits on its sink")
            .unwrap();
        assert_eq!(end, StreamEnd::Eof);
        assert_eq!(stats.stdout_bytes, 100 << 16);
    }
}
