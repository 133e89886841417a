//! The `host:` of a rule: an exact name or `*.suffix`, validated so that a rule can only
//! mean what it looks like it means.
//!
//! A wildcard matches at label boundaries only: `*.x.com` matches `a.x.com` and `a.b.x.com`,
//! never `x.com` itself and never `evilx.com`. Wildcards over a public suffix (`*.com`,
//! `*.co.uk`: ICANN section of the Public Suffix List) are refused in allow rules; wildcards
//! over shared hosting (PSL private section, or the curated [`SHARED_HOSTING`] list) are
//! accepted with a warning, because anyone can put a host there.

use std::fmt;

use crate::target::{Target, TargetError};

/// Domains where unrelated parties get their own names (buckets, pages, tunnels). A wildcard
/// over one of them, or over a parent of one, allows whatever anyone hosts there.
pub const SHARED_HOSTING: &[&str] = &[
    "s3.amazonaws.com",
    "amazonaws.com",
    "cloudfront.net",
    "elasticbeanstalk.com",
    "githubusercontent.com",
    "github.io",
    "gitlab.io",
    "blob.core.windows.net",
    "web.core.windows.net",
    "azurewebsites.net",
    "azureedge.net",
    "azurefd.net",
    "storage.googleapis.com",
    "googleapis.com",
    "appspot.com",
    "web.app",
    "firebaseapp.com",
    "cloudfunctions.net",
    "run.app",
    "herokuapp.com",
    "vercel.app",
    "netlify.app",
    "pages.dev",
    "workers.dev",
    "r2.dev",
    "trycloudflare.com",
    "ngrok.io",
    "ngrok-free.app",
    "ngrok.app",
    "fly.dev",
    "onrender.com",
    "railway.app",
    "repl.co",
    "glitch.me",
    "surge.sh",
    "digitaloceanspaces.com",
    "fastly.net",
    "akamaized.net",
    "b-cdn.net",
    "pythonanywhere.com",
    "blogspot.com",
];

/// What a `host:` matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this normalised name.
    Exact(String),
    /// Any name with one or more labels before this normalised suffix.
    Wildcard(String),
}

impl HostPattern {
    /// True when every name this pattern matches is also matched by `other`.
    pub fn is_covered_by(&self, other: &HostPattern) -> bool {
        match (self, other) {
            (HostPattern::Exact(a), HostPattern::Exact(b)) => a == b,
            (HostPattern::Exact(a), HostPattern::Wildcard(suffix)) => {
                is_strict_subdomain(a, suffix)
            }
            (HostPattern::Wildcard(_), HostPattern::Exact(_)) => false,
            (HostPattern::Wildcard(a), HostPattern::Wildcard(b)) => {
                a == b || is_strict_subdomain(a, b)
            }
        }
    }
}

/// `name` ends with `.suffix` (a label boundary), and is not `suffix` itself.
pub(super) fn is_strict_subdomain(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(name) => f.write_str(name),
            HostPattern::Wildcard(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

/// The registrable domain of a normalised name by the Public Suffix List
/// (`a.b.example.co.uk` → `example.co.uk`, `x.bucket.s3.amazonaws.com` →
/// `bucket.s3.amazonaws.com`); None for a public suffix itself. `policy suggest` groups
/// sibling names by it before it considers a wildcard.
pub fn registrable_domain(name: &str) -> Option<&str> {
    psl::domain_str(name)
}

/// Which list a pattern is in: public-suffix wildcards are refused only where they allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PatternUse {
    /// The pattern is in an `allow` rule.
    Allow,
    /// The pattern is in a `deny` rule.
    Deny,
}

/// A checked pattern and the warnings it deserves.
#[derive(Debug)]
pub struct CheckedPattern {
    /// The parsed pattern.
    pub pattern: HostPattern,
    /// Warnings about the pattern, as messages for a diagnostic.
    pub warnings: Vec<String>,
}

/// Parses and validates a `host:` value. The error is the user-facing message.
pub fn parse_host_pattern(raw: &str, used_in: PatternUse) -> Result<CheckedPattern, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err("`host` is empty".to_owned());
    }
    if trimmed != raw {
        return Err(format!("`host` has leading or trailing spaces: `{raw}`"));
    }
    if raw == "*" || raw == "*." {
        return Err(
            "`*` alone would allow every host; list the hosts (or `*.example.com`)".to_owned(),
        );
    }
    if raw.contains("://") {
        return Err(format!(
            "`{raw}` contains a scheme; write only the host name, e.g. `api.example.com`"
        ));
    }
    if raw.contains('@') {
        return Err(format!(
            "`{raw}` contains userinfo (`…@`); write only the host name"
        ));
    }
    if raw.contains(['/', '?', '#']) {
        return Err(format!(
            "`{raw}` contains a path; a rule matches a host, write only the host name"
        ));
    }
    if raw.starts_with('[') || raw.matches(':').count() > 1 {
        return Err(format!(
            "`{raw}` is an IP address; use a `cidr` rule for addresses"
        ));
    }
    if raw.contains(':') {
        return Err(format!(
            "`{raw}` contains a port; put ports in `ports: [N]` instead"
        ));
    }
    let (is_wildcard, rest) = match raw.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    if rest.contains('*') || (!is_wildcard && raw.contains('*')) {
        return Err(format!(
            "`{raw}`: `*` is only allowed as the whole first label, as in `*.example.com`"
        ));
    }
    let name = match Target::parse_host(rest) {
        Ok(Target::Name(name)) => name,
        Ok(Target::Ip(ip)) => {
            return Err(format!(
                "`{raw}` is an IP address ({ip}); use a `cidr` rule for addresses"
            ));
        }
        Err(TargetError::NumericNotAddress) => {
            return Err(format!(
                "`{raw}` ends in a number, so clients treat it as an IP address; use a `cidr` rule"
            ));
        }
        Err(error) => return Err(format!("`{raw}` is not a valid host name: {error}")),
    };
    let name = name.as_str().to_owned();
    if !is_wildcard {
        return Ok(CheckedPattern {
            pattern: HostPattern::Exact(name),
            warnings: Vec::new(),
        });
    }
    let mut warnings = Vec::new();
    if used_in == PatternUse::Allow {
        check_wildcard_suffix(raw, &name, &mut warnings)?;
    }
    Ok(CheckedPattern {
        pattern: HostPattern::Wildcard(name),
        warnings,
    })
}

/// Refuses wildcards over a TLD or an ICANN public suffix; warns for shared hosting.
fn check_wildcard_suffix(
    raw: &str,
    suffix: &str,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    if !suffix.contains('.') {
        return Err(format!(
            "`{raw}` covers a whole top-level domain; list the hosts you need"
        ));
    }
    if let Some(public) = psl::suffix(suffix.as_bytes())
        && public.as_bytes() == suffix.as_bytes()
    {
        match public.typ() {
            Some(psl::Type::Icann) | None => {
                return Err(format!(
                    "`{raw}` covers the public suffix `{suffix}`, under which anyone can register names; list the hosts you need"
                ));
            }
            Some(psl::Type::Private) => {
                warnings.push(format!(
                    "`{raw}` covers `{suffix}`, a shared hosting domain (Public Suffix List, private section): anyone can host a name there"
                ));
                return Ok(());
            }
        }
    }
    if let Some(shared) = SHARED_HOSTING
        .iter()
        .find(|shared| **shared == suffix || is_strict_subdomain(shared, suffix))
    {
        warnings.push(format!(
            "`{raw}` covers `{shared}`, a shared hosting or storage domain: anyone can host a name there"
        ));
    }
    Ok(())
}
