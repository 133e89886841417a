//! Untrusted text made safe to show a person.
//!
//! Hosts, DNS labels, SNI values and paths come from the sandbox, which is hostile. Shown raw
//! on a terminal, an `ESC[2K\r` erases the line the operator is reading and writes a forged
//! one; a U+202E reverses what follows; a U+2028 or NEL starts a new line for some readers.
//! JSON escaping does not help: every JSON reader undoes it. So everything meant for a person
//! (and the audit record's own text fields, at the source) shows such characters as visible
//! escapes instead: `\x1b` for C0 controls and DEL, `\u202e` for C1 controls, bidirectional
//! controls and the line and paragraph separators.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` must never reach a person's screen raw: C0 controls, DEL, C1 controls, the
/// bidirectional controls (embeddings, overrides, isolates, marks) and U+2028/U+2029.
pub fn must_escape(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200e}' | '\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

/// `text` with every character of [`must_escape`] written as a visible escape (`\x1b`,
/// `\u202e`); borrowed unchanged when there is none, which is the common case.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(must_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if must_escape(c) {
            push_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Writes the visible escape for `c`: `\xNN` below U+0080, `\uNNNN` above.
pub(crate) fn push_escape(out: &mut String, c: char) {
    let code = u32::from(c);
    if code < 0x80 {
        let _ = write!(out, "\\x{code:02x}");
    } else {
        let _ = write!(out, "\\u{code:04x}");
    }
}

/// `error` and each of its causes, joined with `: `: how every front end of egress-sandbox
/// says an error on one line. Each error of the tool says only its own step and leaves its
/// cause to [`source`](std::error::Error::source), so walking the chain says every cause
/// once (as anyhow's `{:#}` does). Not made [`visible`]: the caller does that where the line
/// meets a person.
pub fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "api.openai.com:443 not_allowed — bücher.de";
        assert!(matches!(visible(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn terminal_controls_become_visible_escapes() {
        assert_eq!(visible("\u{1b}[2K\rall-clear"), "\\x1b[2K\\x0dall-clear");
        assert_eq!(visible("a\nb\tc\u{7f}\0"), "a\\x0ab\\x09c\\x7f\\x00");
    }

    #[test]
    fn c1_bidi_and_separators_become_visible_escapes() {
        assert_eq!(visible("x\u{85}y"), "x\\u0085y");
        assert_eq!(visible("evil\u{202e}moc.txt"), "evil\\u202emoc.txt");
        assert_eq!(
            visible("\u{2028}\u{2029}\u{2066}\u{2069}\u{200e}\u{200f}\u{61c}\u{9b}"),
            "\\u2028\\u2029\\u2066\\u2069\\u200e\\u200f\\u061c\\u009b"
        );
    }

    #[test]
    fn nothing_escaped_survives_raw() {
        for code in 0..=0x3000u32 {
            let Some(c) = char::from_u32(code) else {
                continue;
            };
            let shown = visible(c.encode_utf8(&mut [0; 4])).into_owned();
            assert!(!shown.chars().any(must_escape), "U+{code:04X} shown raw");
        }
    }

    #[test]
    fn every_cause_follows_its_error_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read x")]
        struct Step(#[source] std::io::Error);
        #[derive(Debug, thiserror::Error)]
        #[error("cannot start")]
        struct Outer(#[source] Step);
        let error = Outer(Step(std::io::Error::other("disk full")));
        assert_eq!(
            with_causes(&error),
            "cannot start: cannot read x: disk full"
        );
        assert_eq!(with_causes(&std::io::Error::other("alone")), "alone");
    }
}
