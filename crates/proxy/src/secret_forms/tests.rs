use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};

use super::*;

/// `?` and `>` put `/`, `+`, `_` and `-` into the base64 forms, `/` the JSON form, a space
/// the form-encoded one.
const SECRET: &str = "sk-live/0123 456789?>>abc";
const PLACEHOLDER: &str = "egress-sandbox-placeholder-00112233445566778899aabbccddeeff";

fn forms() -> SecretForms {
    SecretForms::new([("KEY", SECRET, PLACEHOLDER)])
}

/// Every way an echo encodes the secret, with and without text around it.
fn encodings(secret: &[u8]) -> Vec<(String, String)> {
    let mut out = vec![
        (
            "literal".to_owned(),
            String::from_utf8(secret.to_vec()).unwrap(),
        ),
        ("hex".to_owned(), hex(secret).escape_ascii().to_string()),
        (
            "HEX".to_owned(),
            hex(secret).to_ascii_uppercase().escape_ascii().to_string(),
        ),
        (
            "percent".to_owned(),
            String::from_utf8(percent(secret, Escape::Reserved)).unwrap(),
        ),
        (
            "percent lower".to_owned(),
            String::from_utf8(percent(secret, Escape::Reserved))
                .unwrap()
                .replace("%3F", "%3f")
                .replace("%3E", "%3e"),
        ),
        (
            "percent every byte".to_owned(),
            String::from_utf8(percent(secret, Escape::Every)).unwrap(),
        ),
        (
            "form".to_owned(),
            String::from_utf8(percent(secret, Escape::Form)).unwrap(),
        ),
        (
            "json".to_owned(),
            String::from_utf8(secret.to_vec())
                .unwrap()
                .replace('/', "\\/"),
        ),
    ];
    // The secret behind 0, 1 and 2 bytes of other text, with text after it or at the end
    // of the encoded value, padded or not, in both alphabets.
    for prefix in ["", "B", "Be", "Bearer ", "user:"] {
        for suffix in ["", "x", "xy", "\r\n"] {
            let mut whole = prefix.as_bytes().to_vec();
            whole.extend_from_slice(secret);
            whole.extend_from_slice(suffix.as_bytes());
            for (alphabet, engine) in [
                ("standard", &STANDARD),
                ("url-safe", &URL_SAFE),
                ("url-safe no pad", &URL_SAFE_NO_PAD),
            ] {
                out.push((
                    format!("base64 {alphabet} of {prefix:?}+secret+{suffix:?}"),
                    engine.encode(&whole),
                ));
            }
        }
    }
    out
}

#[test]
fn every_form_at_every_alignment_is_found_and_replaced() {
    let forms = forms();
    for (what, encoded) in encodings(SECRET.as_bytes()) {
        for text in [encoded.clone(), format!("{{\"echo\": \"{encoded}\"}}")] {
            assert_eq!(forms.find(text.as_bytes()), Some("KEY"), "{what}: {text}");
            let (scrubbed, count) = forms
                .replace_all(text.as_bytes())
                .unwrap_or_else(|| panic!("{what}: not replaced"));
            assert!(count >= 1, "{what}");
            assert_eq!(forms.find(&scrubbed), None, "{what}: {text}");
            let redacted = forms.redact(&text);
            assert!(redacted.contains("«secret:KEY»"), "{what}: {redacted}");
        }
    }
}

/// Decodes base64 leniently (any length, no padding): every whole byte the characters give.
fn lenient_base64(text: &[u8]) -> Vec<u8> {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut bits, mut count, mut out) = (0u32, 0, Vec::new());
    for &c in text {
        let Some(value) = alphabet.iter().position(|&a| a == c) else {
            continue;
        };
        bits = (bits << 6) | value as u32;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    out
}

/// An encoded secret decodes to none of its bytes once scrubbed: at most a few bits of its
/// first and last byte stay, in characters shared with the text around it.
#[test]
fn a_scrubbed_base64_echo_no_longer_decodes_to_the_secret() {
    let forms = forms();
    for prefix in ["", "B", "Be", "Bearer "] {
        let encoded = STANDARD.encode(format!("{prefix}{SECRET}"));
        let (scrubbed, _) = forms.replace_all(encoded.as_bytes()).unwrap();
        let decoded = lenient_base64(&scrubbed);
        assert!(
            !decoded
                .windows(3)
                .any(|w| SECRET.as_bytes().windows(3).any(|s| s == w)),
            "{prefix:?}: {decoded:?}"
        );
    }
}

#[test]
fn replacements_keep_the_form() {
    let forms = forms();
    let replaced =
        |text: &str| String::from_utf8(forms.replace_all(text.as_bytes()).unwrap().0).unwrap();
    assert_eq!(
        replaced(&format!("a {SECRET} b")),
        format!("a {PLACEHOLDER} b")
    );
    assert_eq!(
        replaced(&hex(SECRET.as_bytes()).escape_ascii().to_string()),
        hex(PLACEHOLDER.as_bytes()).escape_ascii().to_string()
    );
    assert_eq!(
        replaced(
            &hex(SECRET.as_bytes())
                .escape_ascii()
                .to_string()
                .to_ascii_uppercase()
        ),
        hex(PLACEHOLDER.as_bytes())
            .escape_ascii()
            .to_string()
            .to_ascii_uppercase()
    );
    let encoded = STANDARD.encode(SECRET);
    assert!(
        replaced(&encoded).starts_with(&STANDARD_NO_PAD.encode(&PLACEHOLDER[..57])),
        "{encoded}"
    );
}

#[test]
fn names_match_in_any_case_and_text_without_a_secret_is_untouched() {
    let forms = SecretForms::new([("KEY", "sk-live-0123456789abcdef", PLACEHOLDER)]);
    assert_eq!(
        forms.find(b"SK-LIVE-0123456789ABCDEF.evil.example"),
        Some("KEY")
    );
    assert_eq!(
        forms.find(hex(b"sk-live-0123456789abcdef").as_slice()),
        Some("KEY")
    );
    for clean in [
        "",
        "sk-live-0123456789abcde",
        "sk-live-",
        "nothing to see here",
    ] {
        assert_eq!(forms.find(clean.as_bytes()), None, "{clean}");
        assert_eq!(forms.replace_all(clean.as_bytes()), None, "{clean}");
        assert!(matches!(forms.redact(clean), Cow::Borrowed(_)));
    }
    assert_eq!(
        forms.redact("sk-live-0123456789abcdef.example.com/x"),
        "«secret:KEY».example.com/x"
    );
    let none = SecretForms::default();
    assert!(none.is_empty());
    assert_eq!(none.find(SECRET.as_bytes()), None);
}

#[test]
fn several_secrets_are_told_apart() {
    let forms = SecretForms::new([
        (
            "ONE",
            "first-secret-value-1",
            "egress-sandbox-placeholder-1111111111111111",
        ),
        (
            "TWO",
            "second-secret-value-2",
            "egress-sandbox-placeholder-2222222222222222",
        ),
    ]);
    assert_eq!(forms.find(b"x second-secret-value-2"), Some("TWO"));
    assert_eq!(
        forms.redact("first-secret-value-1/second-secret-value-2"),
        "«secret:ONE»/«secret:TWO»"
    );
}

/// Bytes between the forms: the base64, hex and percent alphabets and some JSON.
const FILLER: &[u8] = b"aZ09+/=_-%Ff \n{}\"";

/// A small deterministic generator (xorshift), so a failure names its seed.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Text of random bytes and encoded forms of the secret, with ASCII case flipped at random,
/// so that the lower-cased search and the case-ignoring automaton are both put to work.
fn random_text(state: &mut u64, forms_of_secret: &[(String, String)]) -> Vec<u8> {
    let mut text = Vec::new();
    while text.len() < 4096 {
        match next(state) % 4 {
            0 => {
                let (_, form) = &forms_of_secret[next(state) as usize % forms_of_secret.len()];
                text.extend_from_slice(form.as_bytes());
            }
            1 => {
                let (_, form) = &forms_of_secret[next(state) as usize % forms_of_secret.len()];
                // A form cut short: no match, but a prefix the searchers must look past.
                let cut = next(state) as usize % form.len().max(1);
                text.extend_from_slice(&form.as_bytes()[..cut]);
            }
            _ => {
                let run = next(state) as usize % 40;
                text.extend((0..run).map(|_| FILLER[next(state) as usize % FILLER.len()]));
            }
        }
    }
    for byte in &mut text {
        if next(state).is_multiple_of(3) && byte.is_ascii_alphabetic() {
            *byte ^= 0x20;
        }
    }
    text
}

#[test]
fn the_fast_search_finds_exactly_what_the_automaton_finds() {
    let forms = forms();
    let automaton = forms.automaton.as_ref().expect("a secret was given");
    let all = encodings(SECRET.as_bytes());
    for seed in 1..=200u64 {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let text = random_text(&mut state, &all);
        let fast: Vec<_> = forms
            .matches(&text)
            .map(|m| (m.start(), m.end(), m.pattern()))
            .collect();
        let reference: Vec<_> = automaton
            .find_iter(&text)
            .map(|m| (m.start(), m.end(), m.pattern()))
            .collect();
        assert_eq!(fast, reference, "seed {seed}");
    }
}

#[test]
fn many_secrets_fall_back_to_the_automaton_and_still_scrub() {
    let secrets: Vec<(String, String, String)> = (0..12)
        .map(|i| {
            (
                format!("KEY{i}"),
                format!("sk-secret-{i:02}-abcdefgh"),
                format!("egress-sandbox-placeholder-{i:02}"),
            )
        })
        .collect();
    let forms =
        SecretForms::new(secrets.iter().map(|(name, value, placeholder)| {
            (name.as_str(), value.as_str(), placeholder.as_str())
        }));
    assert!(
        forms.lower_case_searcher.is_none(),
        "twelve secrets have more forms than the SIMD searcher takes"
    );
    let hex_form = String::from_utf8(hex(secrets[11].1.as_bytes())).unwrap();
    let text = format!("echo: {} and {hex_form}", secrets[3].1);
    let (scrubbed, replaced) = forms.replace_all(text.as_bytes()).expect("two found");
    assert_eq!(replaced, 2);
    let scrubbed = String::from_utf8(scrubbed).unwrap();
    assert!(!scrubbed.contains(&secrets[3].1), "{scrubbed}");
    assert!(scrubbed.contains(&secrets[3].2), "{scrubbed}");
}
