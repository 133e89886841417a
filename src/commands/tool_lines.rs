//! The tool's own lines on stderr (the summary, warnings, progress), kept apart from the
//! command's output so the command cannot hide them or run into them.
//!
//! The command's output is relayed through [`Tracked`] writers, which note whether each
//! stream (and the terminal, when a stream is one) was left at the start of a line. Before
//! each of its own lines the tool then writes:
//!
//! - on a terminal, a reset of character sets and attributes ([`RESET`]: a command that
//!   ended with "concealed", "black on black", any colour, or the DEC line-drawing set in
//!   use cannot hide the line) and a line end if the terminal's last byte from the
//!   command was not one;
//! - otherwise, a line end only if the command's last byte on stderr was not one, so the
//!   line always starts a line of its own and a log of the stream stays byte-exact
//!   otherwise.

use std::io::{IsTerminal, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

/// Makes the terminal show the next text as written: G0 and G1 designated US ASCII
/// (`ESC ( B`, `ESC ) B`), G0 in use (SI, also undoing a locking shift to G2 or G3), and
/// every character attribute reset (SGR 0). A soft reset (DECSTR) would reset these too,
/// but also turns auto-wrap off on a VT510 and xterm, which the user's shell would keep
/// after the run.
const RESET: &str = "\x1b(B\x1b)B\x0f\x1b[0m";

/// [`RESET`] and a line end.
const RESET_AND_LINE_END: &str = "\x1b(B\x1b)B\x0f\x1b[0m\n";

/// Whether the command's output left stderr, and the terminal, at the start of a line.
/// Process-wide: one run per process writes to this process's stdout and stderr.
static STDERR_AT_LINE_START: AtomicBool = AtomicBool::new(true);
static TERMINAL_AT_LINE_START: AtomicBool = AtomicBool::new(true);

/// One of this process's output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn is_terminal(self) -> bool {
        match self {
            Stream::Stdout => std::io::stdout().is_terminal(),
            Stream::Stderr => std::io::stderr().is_terminal(),
        }
    }
}

/// Notes that the command's `bytes` went to `stream` (call after writing them).
pub(crate) fn note_output(stream: Stream, bytes: &[u8], on_terminal: bool) {
    let Some(&last) = bytes.last() else {
        return;
    };
    let at_line_start = last == b'\n';
    if stream == Stream::Stderr {
        STDERR_AT_LINE_START.store(at_line_start, Ordering::Relaxed);
    }
    if on_terminal {
        TERMINAL_AT_LINE_START.store(at_line_start, Ordering::Relaxed);
    }
}

/// What goes before a tool line: see the module doc.
fn prefix(stderr_is_terminal: bool) -> &'static str {
    let at_line_start = if stderr_is_terminal {
        TERMINAL_AT_LINE_START.load(Ordering::Relaxed)
            && STDERR_AT_LINE_START.load(Ordering::Relaxed)
    } else {
        STDERR_AT_LINE_START.load(Ordering::Relaxed)
    };
    match (stderr_is_terminal, at_line_start) {
        (true, true) => RESET,
        (true, false) => RESET_AND_LINE_END,
        (false, true) => "",
        (false, false) => "\n",
    }
}

/// Writes `line` (already safe to show: see `text::visible`) and a line end on stderr, on
/// a line of its own and, on a terminal, with character sets and attributes reset.
pub(crate) fn print_line(line: &str) {
    let text = format!("{}{line}\n", prefix(std::io::stderr().is_terminal()));
    // Nothing better to do when stderr is gone.
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
    STDERR_AT_LINE_START.store(true, Ordering::Relaxed);
    TERMINAL_AT_LINE_START.store(true, Ordering::Relaxed);
}

/// A writer of the command's output that notes where each write left its stream.
pub(crate) struct Tracked<W> {
    inner: W,
    stream: Stream,
    on_terminal: bool,
}

impl<W> Tracked<W> {
    pub(crate) fn new(inner: W, stream: Stream) -> Tracked<W> {
        Tracked {
            inner,
            stream,
            on_terminal: stream.is_terminal(),
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Tracked<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let written = Pin::new(&mut this.inner).poll_write(cx, bytes);
        if let Poll::Ready(Ok(count)) = written {
            note_output(this.stream, &bytes[..count], this.on_terminal);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Whether `stream` is a terminal (for callers that write the command's output
/// themselves, then call [`note_output`]).
pub(crate) fn is_terminal(stream: Stream) -> bool {
    stream.is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state is process-wide, so one test walks through every case in order.
    #[test]
    fn a_tool_line_resets_the_terminal_and_ends_an_open_line() {
        note_output(Stream::Stderr, b"partial", false);
        assert_eq!(prefix(false), "\n", "an open line on stderr is ended");
        note_output(Stream::Stderr, b"done\n", false);
        assert_eq!(prefix(false), "", "a closed line gets nothing added");
        assert_eq!(prefix(true), RESET);
        note_output(Stream::Stdout, b"\x1b[8mprompt> ", true);
        assert_eq!(prefix(false), "", "stdout is not stderr off a terminal");
        assert_eq!(
            prefix(true),
            RESET_AND_LINE_END,
            "on a terminal the open line of either stream is ended"
        );
        note_output(Stream::Stdout, b"", true);
        assert_eq!(
            prefix(true),
            RESET_AND_LINE_END,
            "an empty write changes nothing"
        );
        note_output(Stream::Stdout, b"\n", true);
        assert_eq!(prefix(true), RESET);
    }
}
