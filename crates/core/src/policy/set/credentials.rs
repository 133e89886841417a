//! The credentials of merged policies: one per host and port, and a [`CredentialConflict`]
//! wherever two policies give one host and port different credentials. A set with
//! conflicts is never handed out as a merge's success: [`PolicySet::merge`] returns it
//! inside [`CredentialConflicts`], its error.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::super::{Credential, Policy};
use super::PolicySet;
use crate::target::HostName;

/// Two policies give one host and port different credentials: which one a request gets
/// would be a guess.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CredentialConflict {
    /// The later policy, whose credential the set does not keep.
    pub policy: Arc<str>,
    /// The host both credentials are for.
    pub host: HostName,
    /// The port both credentials are for.
    pub port: u16,
    /// The secret the later policy's credential names.
    pub secret: String,
    /// The secret of the credential the set keeps (the earlier policy's).
    pub kept_secret: String,
}

impl fmt::Display for CredentialConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy {}: the credential for {}:{} differs from another policy's ({} vs {})",
            self.policy, self.host, self.port, self.secret, self.kept_secret
        )
    }
}

/// The error of [`PolicySet::merge`]: the merged policies hold at least one
/// [`CredentialConflict`]. Displayed as the first conflict, the one a refusal names.
#[derive(Debug)]
pub struct CredentialConflicts {
    /// The set as merged; its index holds the conflicts (never empty here).
    set: PolicySet,
}

impl CredentialConflicts {
    pub(super) fn new(set: PolicySet) -> CredentialConflicts {
        debug_assert!(!set.index.conflicts.is_empty());
        CredentialConflicts { set }
    }

    /// Every conflict, in the order of the policies.
    pub fn conflicts(&self) -> &[CredentialConflict] {
        &self.set.index.conflicts
    }

    /// The merged set in spite of its conflicts, for a caller that hands the same policies
    /// to a proxy and leaves the refusal to it. The set keeps its conflicts, so a proxy given
    /// this very set refuses to bind too.
    pub fn into_set_refused_by_proxy(self) -> PolicySet {
        self.set
    }
}

impl fmt::Display for CredentialConflicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.conflicts().first() {
            Some(first) => first.fmt(f),
            None => f.write_str("conflicting credentials"),
        }
    }
}

impl std::error::Error for CredentialConflicts {}

/// One credential per (host, port), and the conflicts of the policies that disagree.
pub(super) struct MergedCredentials {
    pub(super) by_target: HashMap<(String, u16), Credential>,
    pub(super) conflicts: Vec<CredentialConflict>,
}

/// Keeps the first policy's credential for each host and port; a later one that differs
/// in secret, header or value is a conflict (one that agrees is the same credential).
pub(super) fn merge_credentials(policies: &[Policy]) -> MergedCredentials {
    let mut by_target: HashMap<(String, u16), Credential> = HashMap::new();
    let mut conflicts = Vec::new();
    for policy in policies {
        for credential in &policy.credentials {
            let key = (credential.host.as_str().to_owned(), credential.port);
            match by_target.get(&key) {
                Some(kept)
                    if (&kept.secret, &kept.header, &kept.value)
                        != (&credential.secret, &credential.header, &credential.value) =>
                {
                    conflicts.push(CredentialConflict {
                        policy: Arc::clone(&policy.name),
                        host: credential.host.clone(),
                        port: credential.port,
                        secret: credential.secret.clone(),
                        kept_secret: kept.secret.clone(),
                    });
                }
                Some(_) => {}
                None => {
                    by_target.insert(key, credential.clone());
                }
            }
        }
    }
    MergedCredentials {
        by_target,
        conflicts,
    }
}
