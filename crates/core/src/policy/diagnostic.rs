//! Findings about a policy, each pinned to a line and column of its source, in the one-line
//! `FILE:LINE:COL: error: message` form compilers use (editors and CI annotate it).

use std::fmt;

use crate::text::visible;

/// How bad a finding is: an error refuses the policy, a warning is reported and accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// The policy is refused.
    Error,
    /// The policy is accepted; the finding is reported.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// One finding: Display is exactly `FILE:LINE:COL: error: message` (or `warning:`). LINE and COL
/// count from 1; both are 0 for a finding about the file as a whole (it cannot be read, it is too
/// large), shown as `FILE: error: message`. For `--allow` flags FILE is `--allow`, LINE the flag's
/// position (1 = first flag) and COL the byte column in the flag's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file the finding is in (`--allow` for an `--allow` flag), escaped for a terminal.
    pub file: String,
    /// The line, from 1; 0 for a finding about the whole file.
    pub line: usize,
    /// The column, from 1; 0 for a finding about the whole file.
    pub column: usize,
    /// Whether the finding refuses the policy.
    pub severity: Severity,
    /// What is wrong, escaped for a terminal.
    pub message: String,
}

impl Diagnostic {
    /// `file` and `message` may quote what a policy holds (a host, a name), and a policy may
    /// come from someone else: characters that must not reach a terminal raw are escaped
    /// here, once, for every reader of the diagnostic (found by the `policy_yaml` fuzz target).
    pub fn error(file: &str, line: usize, column: usize, message: impl Into<String>) -> Self {
        Diagnostic {
            file: visible(file).into_owned(),
            line,
            column,
            severity: Severity::Error,
            message: visible(&message.into()).into_owned(),
        }
    }

    /// A warning finding, escaped as [`Diagnostic::error`] escapes.
    pub fn warning(file: &str, line: usize, column: usize, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(file, line, column, message)
        }
    }

    /// Whether this finding refuses the policy.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(f, "{}: {}: {}", self.file, self.severity, self.message);
        }
        write!(
            f,
            "{}:{}:{}: {}: {}",
            self.file, self.line, self.column, self.severity, self.message
        )
    }
}

/// A refused policy: one or more error diagnostics; Display = one line per diagnostic.
/// Warnings found alongside the errors are kept too, after the errors, so a reviewer sees
/// everything at once.
#[derive(Clone, Debug, thiserror::Error)]
pub struct PolicyError {
    /// The findings: the errors first, then the warnings.
    pub diagnostics: Vec<Diagnostic>,
}

impl PolicyError {
    pub(crate) fn single(diagnostic: Diagnostic) -> Self {
        PolicyError {
            diagnostics: vec![diagnostic],
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, diagnostic) in self.diagnostics.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            diagnostic.fmt(f)?;
        }
        Ok(())
    }
}
