//! Keeps a run's real secrets out of what inspected upstreams answer: each form of a secret
//! ([`SecretForms`]) in a response header or body reaches the sandbox as the placeholder in
//! that form.
//!
//! Bodies stream through a [`Scrubber`] with a bounded window: it holds back the longest
//! form's length less one byte, so a secret cut by any chunk or read boundary (one byte per
//! chunk included) is still whole when it is matched, and nothing is ever buffered beyond
//! that. Scrubbing reads the bytes as they come, so a compressed answer could not be read:
//! the inspect door asks for `identity`, and [`refuse_encoding`] names an answer that is
//! encoded anyway, which the door refuses.

use std::sync::Arc;

use bytes::Bytes;
use http::Extensions;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::ext::ReasonPhrase;

use crate::secret_forms::SecretForms;

/// The streaming side: bytes in, bytes out with every form replaced.
pub(crate) struct Scrubber {
    forms: Arc<SecretForms>,
    /// Bytes read but not yet released: at most the longest form's length less one after
    /// each [`Scrubber::push`].
    pending: Vec<u8>,
    /// Occurrences replaced so far.
    replaced: u64,
}

impl Scrubber {
    pub(crate) fn new(forms: Arc<SecretForms>) -> Self {
        Scrubber {
            forms,
            pending: Vec::new(),
            replaced: 0,
        }
    }

    /// Takes the next chunk; returns what can be released now (maybe nothing).
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.pending.extend_from_slice(chunk);
        let hold = self.forms.longest().saturating_sub(1);
        match self.pending.len().checked_sub(hold) {
            Some(release) if release > 0 => self.release(release),
            _ => Bytes::new(),
        }
    }

    /// The end of the stream: releases what was held back.
    pub(crate) fn finish(&mut self) -> Bytes {
        self.release(self.pending.len())
    }

    pub(crate) fn secrets(&self) -> &Arc<SecretForms> {
        &self.forms
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    pub(crate) fn replaced(&self) -> u64 {
        self.replaced
    }

    fn release(&mut self, release: usize) -> Bytes {
        let mut out = Vec::with_capacity(release + self.forms.longest());
        let (consumed, replaced) = self.forms.replace_into(&self.pending, release, &mut out);
        self.replaced += replaced;
        self.pending.drain(..consumed);
        Bytes::from(out)
    }
}

/// Replaces every form of a secret in header names and values; returns how many. A name
/// that would no longer be a valid header name after the replacement is dropped.
pub(crate) fn scrub_headers(headers: &mut HeaderMap, forms: &SecretForms) -> u64 {
    if forms.is_empty() {
        return 0;
    }
    let mut replaced = 0;
    let mut scrubbed = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers.drain().scan(None, |last, (name, value)| {
        if let Some(name) = name {
            *last = Some(name);
        }
        Some((last.clone().expect("the first entry has its name"), value))
    }) {
        let name = match forms.replace_all(name.as_str().as_bytes()) {
            None => Some(name),
            Some((text, count)) => {
                replaced += count;
                HeaderName::from_bytes(&text).ok()
            }
        };
        let value = match forms.replace_all(value.as_bytes()) {
            None => Some(value),
            Some((text, count)) => {
                replaced += count;
                HeaderValue::from_bytes(&text).ok()
            }
        };
        if let (Some(name), Some(value)) = (name, value) {
            scrubbed.append(name, value);
        }
    }
    *headers = scrubbed;
    replaced
}

/// Takes the upstream's reason phrase out of an answer's extensions; returns how many forms
/// of a secret it held. Without it hyper writes the canonical phrase for the status code: the
/// phrase is free text an echo can fill, and no client reads meaning from it. Every other
/// extension goes too, since hyper's server writes what they say (header case) as sent.
pub(crate) fn drop_reason_phrase(extensions: &mut Extensions, forms: &SecretForms) -> u64 {
    let phrase = extensions.remove::<ReasonPhrase>();
    extensions.clear();
    phrase
        .and_then(|phrase| forms.replace_all(phrase.as_bytes()))
        .map_or(0, |(_, replaced)| replaced)
}

/// `text` with each form of a secret replaced by its placeholder, and how many were: for
/// upstream text the proxy quotes in an answer of its own.
pub(crate) fn scrub_text(text: &str, forms: &SecretForms) -> (String, u64) {
    match forms.replace_all(text.as_bytes()) {
        None => (text.to_owned(), 0),
        Some((scrubbed, replaced)) => (String::from_utf8_lossy(&scrubbed).into_owned(), replaced),
    }
}

/// The content or transfer coding of an answer the scrubber cannot read (anything but
/// `identity`, and `chunked` framing), if any.
pub(crate) fn refuse_encoding(headers: &HeaderMap) -> Option<String> {
    let codings = |name: header::HeaderName| {
        headers
            .get_all(name)
            .iter()
            .flat_map(|value| {
                String::from_utf8_lossy(value.as_bytes())
                    .split(',')
                    .map(|coding| coding.trim().to_ascii_lowercase())
                    .filter(|coding| !coding.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    let content = codings(header::CONTENT_ENCODING)
        .into_iter()
        .find(|coding| coding != "identity");
    let transfer = codings(header::TRANSFER_ENCODING)
        .into_iter()
        .find(|coding| coding != "chunked" && coding != "identity");
    content.or(transfer)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sk-live-0123456789abcdef";
    const PLACEHOLDER: &str = "egress-sandbox-placeholder-00112233445566778899aabbccddeeff";

    fn forms() -> Arc<SecretForms> {
        Arc::new(SecretForms::new([("KEY", SECRET, PLACEHOLDER)]))
    }

    fn stream(chunks: &[&[u8]]) -> (Vec<u8>, u64) {
        let mut scrubber = Scrubber::new(forms());
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend_from_slice(&scrubber.push(chunk));
        }
        out.extend_from_slice(&scrubber.finish());
        (out, scrubber.replaced())
    }

    #[test]
    fn a_secret_cut_anywhere_is_replaced_whole() {
        let body = format!("{{\"authorization\": \"Bearer {SECRET}\", \"again\": \"{SECRET}\"}}");
        let expected = body.replace(SECRET, PLACEHOLDER);
        for cut in 0..=body.len() {
            let (head, tail) = body.as_bytes().split_at(cut);
            assert_eq!(
                stream(&[head, tail]),
                (expected.clone().into_bytes(), 2),
                "cut at {cut}"
            );
        }
        let bytes: Vec<&[u8]> = body.as_bytes().chunks(1).collect();
        assert_eq!(stream(&bytes), (expected.into_bytes(), 2));
    }

    #[test]
    fn the_window_stays_bounded_and_clean_text_passes_unchanged() {
        let mut scrubber = Scrubber::new(forms());
        let text = vec![b'x'; 100_000];
        let mut out = Vec::new();
        for chunk in text.chunks(4096) {
            out.extend_from_slice(&scrubber.push(chunk));
            assert!(scrubber.pending.len() < forms().longest());
        }
        out.extend_from_slice(&scrubber.finish());
        assert_eq!(out, text);
        assert_eq!(scrubber.replaced(), 0);
    }

    #[test]
    fn headers_are_scrubbed_by_name_and_value() {
        let mut headers = HeaderMap::new();
        headers.insert("x-echo-auth", format!("Bearer {SECRET}").parse().unwrap());
        headers.append("x-echo-auth", "plain".parse().unwrap());
        headers.insert(
            HeaderName::from_bytes(format!("x-{SECRET}").as_bytes()).unwrap(),
            "1".parse().unwrap(),
        );
        assert_eq!(scrub_headers(&mut headers, &forms()), 2);
        let values: Vec<_> = headers.get_all("x-echo-auth").iter().collect();
        assert_eq!(values, [&format!("Bearer {PLACEHOLDER}"), "plain"]);
        assert!(headers.contains_key(format!("x-{PLACEHOLDER}").as_str()));
    }

    #[test]
    fn only_identity_answers_can_be_scrubbed() {
        let with = |name: &'static str, value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(name, HeaderValue::from_static(value));
            refuse_encoding(&headers)
        };
        assert_eq!(with("content-encoding", "identity"), None);
        assert_eq!(with("transfer-encoding", "chunked"), None);
        assert_eq!(with("content-encoding", "gzip").as_deref(), Some("gzip"));
        assert_eq!(
            with("content-encoding", "identity, BR").as_deref(),
            Some("br")
        );
        assert_eq!(
            with("transfer-encoding", "gzip, chunked").as_deref(),
            Some("gzip")
        );
        assert_eq!(refuse_encoding(&HeaderMap::new()), None);
    }
}
