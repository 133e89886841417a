//! The answer scrubber: arbitrary secrets (one or two, printable, at least the shortest length
//! a policy accepts), a body of arbitrary text and forms of the secrets (every form, in any
//! letter case, some cut short), cut into data frames at arbitrary points (one byte per frame
//! included, empty frames too), and trailers, go through the body the inspect door streams
//! answers through. Framing is hyper's: whatever the upstream used (`Content-Length`,
//! chunked, read to the close), the scrubber sees data frames and trailers, as here.
//!
//! Properties, against a reference written here (leftmost-longest, ASCII case ignored, a hex
//! replacement upper case when its match has no lower-case letter):
//! - the scrubbed body is the same however the input is cut, and equals the reference;
//! - the count (the record's `reflected`) is the reference's, at least one when a form was
//!   put in, and zero with the output equal to the input when no form is there;
//! - no form of a secret is left in the output except across a placeholder the scrubber
//!   wrote (a placeholder's form may end with what a secret's form starts with; completing it
//!   takes the rest of the secret, which only its holder has);
//! - no empty data frame (it would end a chunked body), trailers last and scrubbed.
#![no_main]

use bytes::Bytes;
use egress_proxy::fuzzing::scrub::{Form, Secrets, forms};
use egress_core::secret::MIN_SECRET_BYTES;
use egress_core::secret::placeholder_from;
use http::{HeaderMap, HeaderName, HeaderValue};
use hyper::body::Frame;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;

const MAX_SECRET_BYTES: usize = 40;
const MAX_PARTS: usize = 24;

/// The forms the proxy looks for, as `SecretForms` keeps them: none empty, the first of
/// each (lower-cased) text kept.
fn run_forms(secrets: &[(String, String)]) -> Vec<Form> {
    let mut seen = std::collections::HashSet::new();
    secrets
        .iter()
        .flat_map(|(secret, placeholder)| forms(secret, placeholder))
        .filter(|form| !form.needle.is_empty() && seen.insert(form.needle.to_ascii_lowercase()))
        .collect()
}

/// The longest form matching `text` at its start, ignoring ASCII case.
fn form_at<'f>(forms: &'f [Form], text: &[u8]) -> Option<&'f Form> {
    forms
        .iter()
        .filter(|form| {
            text.len() >= form.needle.len()
                && text[..form.needle.len()].eq_ignore_ascii_case(&form.needle)
        })
        .max_by_key(|form| form.needle.len())
}

/// The reference scrubber: the output, how many forms were replaced, and where the
/// replacements sit in the output.
fn reference(forms: &[Form], text: &[u8]) -> (Vec<u8>, u64, Vec<std::ops::Range<usize>>) {
    let (mut out, mut count, mut written) = (Vec::new(), 0, Vec::new());
    let mut at = 0;
    while at < text.len() {
        match form_at(forms, &text[at..]) {
            Some(form) => {
                let matched = &text[at..at + form.needle.len()];
                let start = out.len();
                if form.hex && !matched.iter().any(u8::is_ascii_lowercase) {
                    out.extend(form.replacement.iter().map(u8::to_ascii_uppercase));
                } else {
                    out.extend_from_slice(&form.replacement);
                }
                written.push(start..out.len());
                at += form.needle.len();
                count += 1;
            }
            None => {
                out.push(text[at]);
                at += 1;
            }
        }
    }
    (out, count, written)
}

/// A printable secret (spaces included) of a length the proxy accepts.
fn secret(u: &mut Unstructured) -> Result<String> {
    let length = u.int_in_range(MIN_SECRET_BYTES..=MAX_SECRET_BYTES)?;
    (0..length)
        .map(|_| Ok(char::from(b' ' + u.int_in_range(0..=94u8)?)))
        .collect()
}

/// Text in the letter case `u` picks: as it is, upper, lower, or mixed.
fn recase(u: &mut Unstructured, text: &[u8]) -> Result<Vec<u8>> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => text.to_vec(),
        1 => text.to_ascii_uppercase(),
        2 => text.to_ascii_lowercase(),
        _ => text
            .iter()
            .map(|byte| match u.arbitrary::<bool>() {
                Ok(true) => byte.to_ascii_uppercase(),
                _ => byte.to_ascii_lowercase(),
            })
            .collect(),
    })
}

/// A body of raw text and forms (some cut short); how many whole forms went in.
fn body(u: &mut Unstructured, forms: &[Form]) -> Result<(Vec<u8>, usize)> {
    let (mut body, mut whole) = (Vec::new(), 0);
    for _ in 0..u.int_in_range(0..=MAX_PARTS)? {
        match u.int_in_range(0..=2u8)? {
            0 => {
                let length = u.int_in_range(0..=32usize)?;
                body.extend_from_slice(u.bytes(length)?);
            }
            kind => {
                let form = u.choose(forms)?;
                let mut text = recase(u, &form.needle)?;
                if kind == 2 {
                    text.truncate(u.int_in_range(0..=form.needle.len())?);
                } else {
                    whole += 1;
                }
                body.extend_from_slice(&text);
            }
        }
    }
    Ok((body, whole))
}

/// `body` cut at arbitrary points into data frames (empty ones too).
fn frames(u: &mut Unstructured, body: &[u8]) -> Result<Vec<Frame<Bytes>>> {
    let mut cuts: Vec<usize> = Vec::new();
    if u.arbitrary::<bool>()? {
        cuts.extend(0..=body.len());
    } else {
        for _ in 0..u.int_in_range(0..=16usize)? {
            cuts.push(u.int_in_range(0..=body.len())?);
        }
    }
    cuts.push(body.len());
    cuts.sort_unstable();
    let mut at = 0;
    Ok(cuts
        .into_iter()
        .map(|cut| {
            let frame = Frame::data(Bytes::copy_from_slice(&body[at..cut]));
            at = cut;
            frame
        })
        .collect())
}

fn data_of(frames: &[Frame<Bytes>]) -> Vec<u8> {
    frames
        .iter()
        .filter_map(Frame::data_ref)
        .flat_map(|data| data.iter().copied())
        .collect()
}

fn check(u: &mut Unstructured) -> Result<()> {
    let mut secrets = Vec::new();
    for _ in 0..u.int_in_range(1..=2u8)? {
        secrets.push((secret(u)?, placeholder_from(u.arbitrary()?)));
    }
    let named: Vec<(&str, &str, &str)> = secrets
        .iter()
        .map(|(secret, placeholder)| ("KEY", secret.as_str(), placeholder.as_str()))
        .collect();
    let scrubber = Secrets::new(&named);
    let forms = run_forms(&secrets);
    let (input, whole) = body(u, &forms)?;
    let (expected, count, written) = reference(&forms, &input);

    // The same body cut two ways, and a trailer holding a form.
    let (first, first_count) = scrubber.scrub_frames(frames(u, &input)?);
    let (second, second_count) = scrubber.scrub_frames(frames(u, &input)?);
    let trailer_form = u.choose(&forms)?.needle.clone();
    let mut trailer_value = b"x ".to_vec();
    trailer_value.extend_from_slice(&trailer_form);
    let mut with_trailers = frames(u, &input)?;
    let mut trailers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_bytes(&trailer_value) {
        trailers.insert(HeaderName::from_static("x-echo"), value);
    }
    with_trailers.push(Frame::trailers(trailers.clone()));
    let (third, third_count) = scrubber.scrub_frames(with_trailers);

    for output in [&first, &second, &third] {
        for frame in output.iter() {
            if let Some(data) = frame.data_ref() {
                assert!(!data.is_empty(), "an empty data frame ends a chunked body");
            }
        }
        assert_eq!(
            data_of(output),
            expected,
            "input {:?}",
            String::from_utf8_lossy(&input)
        );
    }
    assert_eq!(first_count, count);
    assert_eq!(second_count, count);
    if whole > 0 {
        assert!(count >= 1, "{whole} forms put in, none replaced");
    }
    if count == 0 {
        assert_eq!(expected, input);
    }
    let output = data_of(&first);
    for start in 0..output.len() {
        if let Some(form) = form_at(&forms, &output[start..]) {
            let end = start + form.needle.len();
            assert!(
                written
                    .iter()
                    .any(|placeholder| placeholder.start < end && start < placeholder.end),
                "a form of a secret survived at {start}: {:?}",
                String::from_utf8_lossy(&output)
            );
        }
    }

    // Trailers come last, scrubbed as a header map is.
    let (last, data_frames) = third.split_last().expect("at least the trailers");
    assert!(
        data_frames.iter().all(Frame::is_data),
        "trailers before data"
    );
    let sent = last.trailers_ref().expect("the trailers frame last");
    let mut scrubbed = trailers.clone();
    let in_trailers = scrubber.scrub_headers(&mut scrubbed);
    assert_eq!(sent, &scrubbed);
    assert_eq!(third_count, count + in_trailers);
    if !trailers.is_empty() {
        assert!(in_trailers >= 1, "the trailer's form was not replaced");
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = check(&mut Unstructured::new(data));
});
