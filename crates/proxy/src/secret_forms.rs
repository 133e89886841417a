//! The forms a run's real secrets take in text, and one matcher for all of them: what the
//! response scrubber replaces with the placeholder, what the request tripwire refuses, and
//! what an audit record shows as `«secret:NAME»`.
//!
//! The forms are those an echo produces without meaning to: the literal value; hex (either
//! case); percent-encoding (reserved bytes only, or every byte, either hex case; `+` for a
//! space as forms do); JSON's `\/`; and base64 in the standard and the URL-safe alphabet at
//! each of the three byte alignments. An echo often encodes the whole header
//! (`base64("Bearer <key>")`), so the secret's bytes rarely start a base64 group: for each
//! alignment the matcher looks for the characters that depend on the secret's bits alone,
//! which is also why padding never matters. Matching ignores ASCII letter case (hex digits
//! and host names come in either case; a secret of at least [`MIN_SECRET_BYTES`] bytes does
//! not turn up in ordinary text by chance, in any case).
//!
//! Scrubbing runs over every byte of every inspected answer, so it does not step through
//! them with the automaton: it lower-cases the text into a scratch copy and searches that
//! for the lower-cased forms with a SIMD searcher (Teddy), which skips text that cannot hold
//! a form many times faster. Lower-casing both sides is exactly what ignoring ASCII case
//! means, and it keeps every byte where it was, so both searches find the same matches.
//!
//! What is not found: a secret transformed in any other way (cut in pieces, reversed, split
//! over DNS labels, encoded twice, compressed, encrypted); see the security docs' known limits.

use std::borrow::Cow;
use std::collections::HashSet;

use aho_corasick::packed;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, Match, MatchKind, Span};
use base64::Engine;
use base64::engine::GeneralPurpose;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

pub(crate) use egress_core::secret::MIN_SECRET_BYTES;

/// One needle: which secret, and what replaces it in an answer to the sandbox.
#[derive(Debug)]
struct Form {
    secret: usize,
    /// The placeholder in the same form (same encoding, alphabet and alignment).
    replacement: Vec<u8>,
    /// Hex: the replacement follows the matched text's letter case.
    hex: bool,
}

/// Every form of every real secret of a run, in one automaton.
#[derive(Debug, Default)]
pub(crate) struct SecretForms {
    /// None when the run has no secret.
    automaton: Option<AhoCorasick>,
    /// The same needles in lower case, for searching lower-cased text fast; None when the
    /// CPU has no SIMD Teddy supports or there are more needles than it takes (64).
    lower_case_searcher: Option<packed::Searcher>,
    forms: Vec<Form>,
    names: Vec<String>,
    /// The longest needle: a stream keeps this many bytes less one back to see a match
    /// that a read boundary cuts.
    longest: usize,
}

impl SecretForms {
    /// The forms of each `(name, value, placeholder)`.
    pub(crate) fn new<'a>(secrets: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) -> Self {
        let mut needles: Vec<Vec<u8>> = Vec::new();
        let mut forms = Vec::new();
        let mut names = Vec::new();
        let mut seen = HashSet::new();
        for (index, (name, value, placeholder)) in secrets.into_iter().enumerate() {
            names.push(name.to_owned());
            for (needle, replacement, hex) in forms_of(value.as_bytes(), placeholder.as_bytes()) {
                if needle.is_empty() || !seen.insert(needle.to_ascii_lowercase()) {
                    continue;
                }
                needles.push(needle);
                forms.push(Form {
                    secret: index,
                    replacement,
                    hex,
                });
            }
        }
        if needles.is_empty() {
            return SecretForms::default();
        }
        let longest = needles.iter().map(Vec::len).max().unwrap_or(0);
        // A DFA: the fastest search, and small for a few dozen short needles; every byte of
        // every inspected answer goes through it. No prefilter: the needles start with
        // letters and digits in either case, which text is full of, so a prefilter would stop
        // at nearly every byte (measured: a few times slower on base64 text).
        let automaton = AhoCorasickBuilder::new()
            .kind(Some(AhoCorasickKind::DFA))
            .prefilter(false)
            .match_kind(MatchKind::LeftmostLongest)
            .ascii_case_insensitive(true)
            .build(&needles)
            .expect("a few hundred short needles always build");
        let lower_case_searcher = packed::Config::new()
            .match_kind(packed::MatchKind::LeftmostLongest)
            .builder()
            .extend(needles.iter().map(|needle| needle.to_ascii_lowercase()))
            .build();
        SecretForms {
            automaton: Some(automaton),
            lower_case_searcher,
            forms,
            names,
            longest,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.automaton.is_none()
    }

    /// The length of the longest form: a streaming reader holds back one byte less.
    pub(crate) fn longest(&self) -> usize {
        self.longest
    }

    /// The name of a secret found in `text`, in any form.
    pub(crate) fn find(&self, text: &[u8]) -> Option<&str> {
        let found = self.automaton.as_ref()?.find(text)?;
        Some(&self.names[self.forms[found.pattern().as_usize()].secret])
    }

    /// `text` with each form of a secret replaced by `«secret:NAME»`: what a record holds
    /// where a secret sat.
    pub(crate) fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let Some(automaton) = &self.automaton else {
            return Cow::Borrowed(text);
        };
        if automaton.find(text).is_none() {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for found in automaton.find_iter(text) {
            // Needles are ASCII, so match bounds are character boundaries.
            out.push_str(&text[at..found.start()]);
            let name = &self.names[self.forms[found.pattern().as_usize()].secret];
            out.push_str(&format!("«secret:{name}»"));
            at = found.end();
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }

    /// `text` with each form of a secret replaced by the placeholder in that form, and how
    /// many were replaced; None when there was none.
    pub(crate) fn replace_all(&self, text: &[u8]) -> Option<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        let (consumed, replaced) = self.replace_into(text, text.len(), &mut out);
        if replaced == 0 {
            return None;
        }
        out.extend_from_slice(&text[consumed..]);
        Some((out, replaced))
    }

    /// Copies `text` into `out` with matches replaced, up to `release`: matches that start
    /// before it are replaced whole, even when they end after it. Returns how far `text`
    /// was consumed (at least `release`, unless a match ends before it ends) and how many
    /// matches were replaced.
    pub(crate) fn replace_into(
        &self,
        text: &[u8],
        release: usize,
        out: &mut Vec<u8>,
    ) -> (usize, u64) {
        let mut at = 0;
        let mut replaced = 0;
        for found in self.matches(text) {
            if found.start() >= release {
                break;
            }
            out.extend_from_slice(&text[at..found.start()]);
            let form = &self.forms[found.pattern().as_usize()];
            if form.hex && !text[found.range()].iter().any(u8::is_ascii_lowercase) {
                out.extend(form.replacement.iter().map(u8::to_ascii_uppercase));
            } else {
                out.extend_from_slice(&form.replacement);
            }
            at = found.end();
            replaced += 1;
        }
        let end = release.max(at);
        out.extend_from_slice(&text[at..end]);
        (end, replaced)
    }

    /// The leftmost-longest matches in `text`, ignoring ASCII case: searched in a
    /// lower-cased copy with the SIMD searcher when there is one.
    fn matches<'t>(&'t self, text: &'t [u8]) -> Box<dyn Iterator<Item = Match> + 't> {
        match (&self.lower_case_searcher, &self.automaton) {
            (Some(searcher), _) => {
                let lowered = text.to_ascii_lowercase();
                let mut at = 0;
                Box::new(std::iter::from_fn(move || {
                    let found = searcher.find_in(&lowered, Span::from(at..lowered.len()))?;
                    at = found.end();
                    Some(found)
                }))
            }
            (None, Some(automaton)) => Box::new(automaton.find_iter(text)),
            (None, None) => Box::new(std::iter::empty()),
        }
    }
}

/// (needle, replacement, is hex) for each form of `secret`, the replacement being
/// `placeholder` in that form.
pub(crate) fn forms_of(secret: &[u8], placeholder: &[u8]) -> Vec<(Vec<u8>, Vec<u8>, bool)> {
    let mut forms = vec![
        (secret.to_vec(), placeholder.to_vec(), false),
        (hex(secret), hex(placeholder), true),
        (
            percent(secret, Escape::Reserved),
            percent(placeholder, Escape::Reserved),
            false,
        ),
        (
            percent(secret, Escape::Every),
            percent(placeholder, Escape::Every),
            false,
        ),
    ];
    if secret.contains(&b' ') {
        forms.push((
            percent(secret, Escape::Form),
            percent(placeholder, Escape::Form),
            false,
        ));
    }
    if secret.contains(&b'/') {
        let mut json = Vec::with_capacity(secret.len() * 2);
        for &byte in secret {
            if byte == b'/' {
                json.push(b'\\');
            }
            json.push(byte);
        }
        forms.push((json, placeholder.to_vec(), false));
    }
    for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
        for alignment in 0..3 {
            forms.push((
                base64_core(secret, alignment, &engine),
                base64_core(placeholder, alignment, &engine),
                false,
            ));
        }
    }
    forms
}

fn hex(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .flat_map(|byte| format!("{byte:02x}").into_bytes())
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Escape {
    /// Every byte but RFC 3986's unreserved ones (`encodeURIComponent`, `quote(safe="")`).
    Reserved,
    /// As `Reserved`, a space as `+` (HTML forms, `quote_plus`).
    Form,
    /// Every byte.
    Every,
}

fn percent(bytes: &[u8], escape: Escape) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() * 3);
    for &byte in bytes {
        let unreserved = byte.is_ascii_alphanumeric() || b"-._~".contains(&byte);
        if escape == Escape::Form && byte == b' ' {
            out.push(b'+');
        } else if unreserved && escape != Escape::Every {
            out.push(byte);
        } else {
            out.extend(format!("%{byte:02X}").into_bytes());
        }
    }
    out
}

/// The base64 characters of `bytes` that depend on its bits alone when it starts
/// `alignment` bytes into a base64 group: whatever comes before and after it in the
/// encoded text, these characters are there.
fn base64_core(bytes: &[u8], alignment: usize, engine: &GeneralPurpose) -> Vec<u8> {
    let mut shifted = vec![0; alignment];
    shifted.extend_from_slice(bytes);
    let encoded = engine.encode(&shifted).into_bytes();
    let first = (8 * alignment).div_ceil(6);
    let end = 8 * (alignment + bytes.len()) / 6;
    encoded.get(first..end).unwrap_or_default().to_vec()
}

#[cfg(test)]
mod tests;
