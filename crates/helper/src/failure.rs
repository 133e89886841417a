//! [`Failure`]: why a mode could not do its work, already in words.

use std::error::Error;
use std::fmt;

/// Why a mode could not do its work: one message, its causes joined with `: ` (each said
/// once, as the `egress-sandbox` command says its errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(String);

impl Failure {
    /// A failure said in `message`.
    pub fn new(message: impl Into<String>) -> Failure {
        Failure(message.into())
    }

    /// `error` and its causes, each said once: every error says only its own part and
    /// leaves its cause to `source()` ([`egress_core::text::with_causes`]).
    pub fn from_error(error: &(dyn Error + 'static)) -> Failure {
        Failure(egress_core::text::with_causes(error))
    }

    /// `context`, then `error` and its causes.
    pub fn in_context(context: impl fmt::Display, error: &(dyn Error + 'static)) -> Failure {
        let cause = Failure::from_error(error);
        Failure(format!("{context}: {}", cause.0))
    }

    /// For `map_err`: the error under `context`.
    pub fn context<E: Error + 'static>(context: impl fmt::Display) -> impl FnOnce(E) -> Failure {
        move |error| Failure::in_context(context, &error)
    }

    /// Says the failure on stderr as the `egress-sandbox` command says its errors, its
    /// controls as visible escapes (messages quote paths and policy text).
    pub fn report(&self) {
        eprintln!(
            "{}",
            egress_core::text::visible(&format!("egress-sandbox: error: {}", self.0))
        );
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Failure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Step(std::io::Error);
    impl fmt::Display for Step {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("cannot read x")
        }
    }
    impl Error for Step {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone (os error 2)");
        let failure = Failure::in_context("cannot serve", &Step(io));
        assert_eq!(
            failure.to_string(),
            "cannot serve: cannot read x: gone (os error 2)"
        );
        // Nothing is matched by its text: a cause worded like its error is still said.
        let failure = Failure::in_context("cannot serve", &std::io::Error::other("cannot serve"));
        assert_eq!(failure.to_string(), "cannot serve: cannot serve");
    }
}
