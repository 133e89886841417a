//! Versioned JSON objects: what the library hands its helper binary (the proxy's handoff, the
//! launcher's signal) carries the version of its format in a `v` key beside the fields.
//!
//! The library and the helper are separate binaries, so one can be rebuilt without the
//! other. A reader checks `v` before it reads any field: a helper of another version is told
//! so in words, not with a complaint about a field it does not know. An object without `v`
//! is of no version this crate reads, and refused the same way.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The key that holds an object's format version.
pub const VERSION_KEY: &str = "v";

/// Why a versioned object could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The object is of another version of its format (or names none: `found` is `None`).
    #[error("it is version {}, this reader's is {expected}", shown_version(*found))]
    Version {
        /// The version the object declares; `None` when it declares none.
        found: Option<u64>,
        /// The version this reader reads.
        expected: u32,
    },
    /// The object is of this version but not a valid one.
    #[error(transparent)]
    Invalid(#[from] serde_json::Error),
}

/// A version as an error says it: its number, or that there is none.
pub fn shown_version(version: Option<u64>) -> String {
    match version {
        Some(number) => number.to_string(),
        None => "none (no `v` key)".to_owned(),
    }
}

/// `body` (which serialises as an object) as JSON, with `"v": version` in front of its fields.
pub fn to_versioned_json<T: Serialize>(version: u32, body: &T) -> Vec<u8> {
    #[derive(Serialize)]
    struct Versioned<'a, T> {
        v: u32,
        #[serde(flatten)]
        body: &'a T,
    }
    serde_json::to_vec(&Versioned { v: version, body }).expect("a wire object always serialises")
}

/// Reads a versioned object of version `expected`: the version is checked first, then the
/// fields, with whatever strictness `T` asks for (`deny_unknown_fields`).
pub fn from_versioned_json<T: DeserializeOwned>(
    bytes: &[u8],
    expected: u32,
) -> Result<T, WireError> {
    let mut object: Map<String, Value> = serde_json::from_slice(bytes)?;
    let found = match object.remove(VERSION_KEY) {
        None => None,
        Some(Value::Number(number)) if number.as_u64().is_some() => number.as_u64(),
        Some(other) => {
            return Err(WireError::Invalid(serde::de::Error::custom(format!(
                "`v` must be a version number, not {other}"
            ))));
        }
    };
    if found != Some(u64::from(expected)) {
        return Err(WireError::Version { found, expected });
    }
    Ok(serde_json::from_value(Value::Object(object))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        #[serde(default)]
        name: String,
    }

    #[test]
    fn the_version_goes_first_and_the_body_comes_back() {
        let body = Body { name: "x".into() };
        let json = to_versioned_json(3, &body);
        assert_eq!(json, br#"{"v":3,"name":"x"}"#);
        assert_eq!(from_versioned_json::<Body>(&json, 3).unwrap(), body);
    }

    #[test]
    fn another_version_is_refused_before_any_field_is_read() {
        let error = from_versioned_json::<Body>(br#"{"v":2,"unknown":1}"#, 3).unwrap_err();
        assert!(
            matches!(
                error,
                WireError::Version {
                    found: Some(2),
                    expected: 3
                }
            ),
            "{error:?}"
        );
        assert_eq!(error.to_string(), "it is version 2, this reader's is 3");
        let error = from_versioned_json::<Body>(br#"{"name":"x"}"#, 3).unwrap_err();
        assert!(
            matches!(error, WireError::Version { found: None, .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("no `v` key"), "{error}");
    }

    #[test]
    fn a_bad_version_value_or_field_is_invalid() {
        for bad in [
            &br#"{"v":"3"}"#[..],
            br#"{"v":-3}"#,
            br#"{"v":3,"unknown":1}"#,
            b"[3]",
            b"{",
        ] {
            assert!(
                matches!(
                    from_versioned_json::<Body>(bad, 3),
                    Err(WireError::Invalid(_))
                ),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
