//! Per-request rules on an allow rule: `methods: [POST, GET]` and `paths: [...]`, and the
//! one reading of a request path the proxy is willing to judge.
//!
//! A path pattern is literal segments, optionally ending in `/*` (exactly one more non-empty
//! segment) or `/**` (anything below, at any depth, including nothing after the slash).
//! The query string is never matched. A request path that could mean two things to two
//! servers — a dot segment (`.`/`..`, also percent-encoded, also with `;parameters` as in
//! `..;x`), an encoded `/` or `\` (`%2F`, `%5C`), a raw `\`, an empty segment (`//`), an
//! encoded control byte (`%00`), an encoded `%` (`%25`: a server or a gateway that decodes
//! twice reads `%252e%252e` as `..`), escapes that do not decode to UTF-8 (overlong forms
//! such as `%c0%ae` for `.`) — is refused as `bad_request` before any rule is asked: the
//! proxy never guesses which path the upstream will see.

// Request paths come from the sandbox: no index or unwrap here may panic on one.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use std::fmt;

/// Longest method token accepted in a policy.
const MAX_METHOD_BYTES: usize = 32;
/// Longest path pattern accepted in a policy.
const MAX_PATH_PATTERN_BYTES: usize = 2048;

/// What follows the literal prefix of a path pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum PathTail {
    /// The path is exactly the prefix.
    Exact,
    /// `prefix/*`: one more non-empty segment.
    OneSegment,
    /// `prefix/**`: `prefix/` followed by anything.
    AnyDepth,
}

/// One `paths:` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PathPattern {
    /// For `Exact` the whole path; otherwise the prefix up to and including its last `/`.
    pub(crate) prefix: String,
    pub(crate) tail: PathTail,
}

impl PathPattern {
    /// `path` must already have passed [`check_request_path`] (no query).
    pub(crate) fn matches(&self, path: &str) -> bool {
        match self.tail {
            PathTail::Exact => path == self.prefix,
            PathTail::OneSegment => path
                .strip_prefix(self.prefix.as_str())
                .is_some_and(|rest| !rest.is_empty() && !rest.contains('/')),
            PathTail::AnyDepth => path.starts_with(self.prefix.as_str()),
        }
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.prefix)?;
        match self.tail {
            PathTail::Exact => Ok(()),
            PathTail::OneSegment => f.write_str("*"),
            PathTail::AnyDepth => f.write_str("**"),
        }
    }
}

/// The `methods`/`paths` of one allow rule. `None` = not restricted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct RequestRules {
    /// The methods allowed, upper-case; `None` allows every method.
    pub methods: Option<Vec<String>>,
    /// The path patterns allowed; `None` allows every path.
    pub paths: Option<Vec<PathPattern>>,
}

impl RequestRules {
    /// True when the rule restricts requests at all (and so makes its host inspected).
    pub(crate) fn restricts(&self) -> bool {
        self.methods.is_some() || self.paths.is_some()
    }

    /// Whether the rule allows the request method `method`.
    pub(crate) fn admits_method(&self, method: &str) -> bool {
        self.methods
            .as_ref()
            .is_none_or(|methods| methods.iter().any(|m| m == method))
    }

    /// Whether the rule allows the request path `path` (already checked by [`check_request_path`]).
    pub(crate) fn admits_path(&self, path: &str) -> bool {
        self.paths
            .as_ref()
            .is_none_or(|paths| paths.iter().any(|p| p.matches(path)))
    }
}

/// A `methods:` entry: an upper-case HTTP token; CONNECT never reaches an inspected host.
pub(crate) fn parse_method(raw: &str) -> Result<String, String> {
    let shown = crate::text::visible(raw);
    if raw.is_empty() {
        return Err("a method is empty".to_owned());
    }
    if raw.len() > MAX_METHOD_BYTES {
        return Err(format!(
            "method `{shown}` is longer than {MAX_METHOD_BYTES} bytes"
        ));
    }
    if !raw
        .bytes()
        .all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "`{shown}` is not an HTTP method (letters only, e.g. `GET`, `POST`)"
        ));
    }
    if raw.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(format!(
            "HTTP methods are case-sensitive and upper case: write `{}`",
            raw.to_ascii_uppercase()
        ));
    }
    if raw == "CONNECT" {
        return Err(
            "`CONNECT` opens a tunnel; it is never a request to an inspected host".to_owned(),
        );
    }
    Ok(raw.to_owned())
}

/// A `paths:` entry: starts with `/`; literal segments, `*`/`**` only as the whole last
/// segment; nothing a request path would be refused for (dot segments, `//`, encoded `/`
/// or `\`), no query or fragment.
pub(crate) fn parse_path_pattern(raw: &str) -> Result<PathPattern, String> {
    let shown = crate::text::visible(raw);
    if raw.len() > MAX_PATH_PATTERN_BYTES {
        return Err(format!(
            "path pattern is longer than {MAX_PATH_PATTERN_BYTES} bytes"
        ));
    }
    if !raw.starts_with('/') {
        return Err(format!("path pattern `{shown}` must start with `/`"));
    }
    if raw.contains(['?', '#']) {
        return Err(format!(
            "path pattern `{shown}` holds a query or fragment; the query string is never matched"
        ));
    }
    let (prefix, tail) = if let Some(prefix) = raw.strip_suffix("/**") {
        (format!("{prefix}/"), PathTail::AnyDepth)
    } else if let Some(prefix) = raw.strip_suffix("/*") {
        (format!("{prefix}/"), PathTail::OneSegment)
    } else {
        (raw.to_owned(), PathTail::Exact)
    };
    if prefix.contains('*') {
        return Err(format!(
            "path pattern `{shown}`: `*` and `**` may only be the whole last segment (`/v1/models/*`, `/v1/files/**`)"
        ));
    }
    // The literal part must itself be a path the proxy would judge; otherwise the rule
    // could never match (or would look like it matched something it does not).
    if let Err(problem) = check_path_segments(&prefix) {
        return Err(format!("path pattern `{shown}`: {problem}"));
    }
    Ok(PathPattern { prefix, tail })
}

/// Why a request path cannot be judged. The door refuses the request as `bad_request`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum PathError {
    /// The path does not start with `/`.
    #[error("the request path must start with `/`")]
    NotAbsolute,
    /// The path holds an empty segment (`//`).
    #[error("the request path holds an empty segment (`//`)")]
    EmptySegment,
    #[error(
        "the request path holds a dot segment (`.` or `..`, maybe percent-encoded or with `;parameters`)"
    )]
    /// The path holds a `.` or `..` segment, in any spelling.
    DotSegment,
    /// The path holds an encoded `/` or `\`.
    #[error("the request path holds an encoded `/` or `\\` (`%2F`, `%5C`)")]
    EncodedSeparator,
    /// The path holds a `\`.
    #[error("the request path holds a `\\`")]
    Backslash,
    /// The path holds a malformed percent escape.
    #[error("the request path holds a bad percent escape")]
    BadEscape,
    #[error(
        "the request path holds a non-canonical escape (`%25`, an encoded `%`, or escapes that are not UTF-8, such as overlong `%c0%ae`)"
    )]
    /// The path holds an escape that has a shorter or a UTF-8 spelling.
    NonCanonical,
    #[error(
        "the request path holds a character that is not allowed in a URL path (or an encoded control byte)"
    )]
    /// The path holds a byte a URL path may not hold.
    BadByte,
}

/// The path of a request target (origin-form, query removed by the caller) checked so
/// that one reading exists: what the proxy matches is what the upstream serves.
pub(crate) fn check_request_path(path: &str) -> Result<(), PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    check_segments(path)
}

/// The path part of a request target: everything before `?` (and `#`, which a client
/// should not send; it is cut too).
pub fn split_path(path_and_query: &str) -> &str {
    let end = path_and_query
        .find(['?', '#'])
        .unwrap_or(path_and_query.len());
    &path_and_query[..end]
}

fn check_path_segments(path: &str) -> Result<(), String> {
    check_segments(path).map_err(|error| {
        let text = error.to_string();
        text.strip_prefix("the request path ")
            .map_or(text.clone(), |rest| format!("it {rest}"))
    })
}

/// Walks the segments after the leading `/`. The last segment may be empty (a trailing
/// slash, `/v1/models/`); no other may.
fn check_segments(path: &str) -> Result<(), PathError> {
    let body = &path[1..];
    if body.is_empty() {
        return Ok(());
    }
    let segments: Vec<&str> = body.split('/').collect();
    let last = segments.len() - 1;
    for (index, segment) in segments.iter().enumerate() {
        if segment.is_empty() && index != last {
            return Err(PathError::EmptySegment);
        }
        let decoded = decode_segment(segment)?;
        // Servlet containers (Tomcat, Jetty, Spring) drop a segment's `;parameters`
        // before resolving dots: to them `..;x` is `..`.
        let before_parameters = decoded.split(';').next().unwrap_or_default();
        if before_parameters == "." || before_parameters == ".." {
            return Err(PathError::DotSegment);
        }
    }
    Ok(())
}

/// Percent-decodes one segment just enough to see what it means; refuses encoded
/// separators, raw backslashes and bytes no URL path holds.
fn decode_segment(segment: &str) -> Result<String, PathError> {
    let bytes = segment.as_bytes();
    let mut decoded = String::with_capacity(segment.len());
    // The segment fully decoded, to check that it is UTF-8.
    let mut fully_decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        match byte {
            b'%' => {
                let hex = bytes
                    .get(index + 1..index + 3)
                    .and_then(|pair| std::str::from_utf8(pair).ok())
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                    .ok_or(PathError::BadEscape)?;
                fully_decoded.push(hex);
                match hex {
                    b'/' | b'\\' => return Err(PathError::EncodedSeparator),
                    b'%' => return Err(PathError::NonCanonical),
                    // An encoded NUL or control byte: servers cut or mangle paths at them.
                    0x00..=0x1f | 0x7f => return Err(PathError::BadByte),
                    b'.' => decoded.push('.'),
                    b';' => decoded.push(';'),
                    // Any other escape is kept as an opaque character: it cannot turn the
                    // segment into `.` or `..`.
                    _ => decoded.push('%'),
                }
                index += 3;
            }
            b'\\' => return Err(PathError::Backslash),
            0x00..=0x20 | 0x7f..=0xff | b'"' | b'<' | b'>' | b'^' | b'`' | b'{' | b'|' | b'}' => {
                return Err(PathError::BadByte);
            }
            _ => {
                decoded.push(byte as char);
                fully_decoded.push(byte);
                index += 1;
            }
        }
    }
    // Rust's UTF-8 check refuses overlong forms, surrogates and stray continuation bytes.
    if std::str::from_utf8(&fully_decoded).is_err() {
        return Err(PathError::NonCanonical);
    }
    Ok(decoded)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pattern(raw: &str) -> PathPattern {
        parse_path_pattern(raw).unwrap_or_else(|error| panic!("{raw}: {error}"))
    }

    #[test]
    fn exact_one_segment_and_any_depth_patterns_match_as_documented() {
        let exact = pattern("/v1/chat/completions");
        assert!(exact.matches("/v1/chat/completions"));
        assert!(!exact.matches("/v1/chat/completions/"));
        assert!(!exact.matches("/v1/chat/completionsX"));
        assert!(!exact.matches("/v1/chat"));

        let one = pattern("/v1/models/*");
        assert!(one.matches("/v1/models/gpt-4o"));
        assert!(!one.matches("/v1/models/"));
        assert!(!one.matches("/v1/models"));
        assert!(!one.matches("/v1/models/a/b"));
        assert!(!one.matches("/v1/modelsX/a"));

        let deep = pattern("/v1/files/**");
        assert!(deep.matches("/v1/files/"));
        assert!(deep.matches("/v1/files/a"));
        assert!(deep.matches("/v1/files/a/b/c"));
        assert!(!deep.matches("/v1/files"));
        assert!(!deep.matches("/v1/filesX/a"));

        assert!(pattern("/**").matches("/anything/at/all"));
        assert!(pattern("/*").matches("/one"));
        assert!(!pattern("/*").matches("/one/two"));
    }

    #[test]
    fn bad_path_patterns_are_refused_with_the_reason() {
        for (raw, expected) in [
            ("v1/models", "must start with `/`"),
            ("/v1/*/files", "whole last segment"),
            ("/v1/mod*", "whole last segment"),
            ("/v1/***", "whole last segment"),
            ("/v1//models", "empty segment"),
            ("/v1/../admin", "dot segment"),
            ("/v1/%2e%2E/admin", "dot segment"),
            ("/v1/a%2Fb", "encoded"),
            ("/v1/a%5cb", "encoded"),
            ("/v1/a\\b", "`\\`"),
            ("/v1/models?x=1", "query"),
            ("/v1/a b", "not allowed"),
            ("/v1/%zz", "percent escape"),
        ] {
            let error = parse_path_pattern(raw).expect_err(raw);
            assert!(error.contains(expected), "{raw}: {error}");
        }
    }

    #[test]
    fn request_paths_with_two_readings_are_refused() {
        for (path, expected) in [
            ("/v1/../admin", PathError::DotSegment),
            ("/v1/./x", PathError::DotSegment),
            ("/v1/..", PathError::DotSegment),
            ("/v1/%2e%2e/admin", PathError::DotSegment),
            ("/v1/.%2E/admin", PathError::DotSegment),
            ("/v1/a%2fb", PathError::EncodedSeparator),
            ("/v1/a%5Cb", PathError::EncodedSeparator),
            ("/v1/a\\b", PathError::Backslash),
            ("//evil/x", PathError::EmptySegment),
            ("/v1//x", PathError::EmptySegment),
            ("*", PathError::NotAbsolute),
            ("/v1/%4", PathError::BadEscape),
            ("/v1/..;/admin", PathError::DotSegment),
            ("/v1/.;x=1/admin", PathError::DotSegment),
            ("/v1/%2e%2e;/admin", PathError::DotSegment),
            ("/v1/%2e%2e%3b/admin", PathError::DotSegment),
            ("/v1/..%3Bjsessionid=1/admin", PathError::DotSegment),
            ("/v1/..%00/admin", PathError::BadByte),
            ("/v1/a%0d%0aX:1", PathError::BadByte),
            ("/v1/a%7F", PathError::BadByte),
            ("/v1/%252e%252e/admin", PathError::NonCanonical),
            ("/v1/..%252fadmin", PathError::NonCanonical),
            ("/v1/%25", PathError::NonCanonical),
            ("/v1/%c0%ae%c0%ae/admin", PathError::NonCanonical),
            ("/v1/%C0%AF", PathError::NonCanonical),
            ("/v1/%e0%80%ae", PathError::NonCanonical),
            ("/v1/%ed%a0%80", PathError::NonCanonical),
            ("/v1/%80", PathError::NonCanonical),
            ("/v1/caf%c3", PathError::NonCanonical),
            ("/v1/caf%c3x%a9", PathError::NonCanonical),
        ] {
            assert_eq!(check_request_path(path), Err(expected), "{path}");
        }
        for path in [
            "/",
            "/v1/models/",
            "/v1/a.b/..c/.d",
            "/v1/%41bc",
            "/v1/chat",
            "/v1/chat;v=2",
            "/v1/..x;/y",
            "/v1/a%3Bb",
            "/v1/caf%C3%A9",
            "/v1/%E2%82%AC%41",
        ] {
            assert_eq!(check_request_path(path), Ok(()), "{path}");
        }
    }

    #[test]
    fn the_query_is_cut_before_matching() {
        assert_eq!(split_path("/v1/models?key=secret"), "/v1/models");
        assert_eq!(split_path("/v1/models#frag"), "/v1/models");
        assert_eq!(split_path("/v1/models"), "/v1/models");
    }

    #[test]
    fn methods_are_upper_case_tokens_and_never_connect() {
        assert_eq!(parse_method("POST").unwrap(), "POST");
        assert!(parse_method("post").unwrap_err().contains("`POST`"));
        assert!(parse_method("CONNECT").unwrap_err().contains("tunnel"));
        assert!(
            parse_method("GE T")
                .unwrap_err()
                .contains("not an HTTP method")
        );
        assert!(parse_method("").is_err());
        assert!(parse_method(&"A".repeat(40)).is_err());
    }
}
