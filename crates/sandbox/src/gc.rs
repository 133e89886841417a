//! `gc`: removes the containers, networks and host directories of runs whose owner process
//! is gone.
//!
//! A run removes its own objects on every path it controls; a crash, `kill -9` or power
//! loss is the rest. Objects carry `egress-sandbox.owner=<pid>:<start time>:<boot id>:<pid
//! namespace>` (see `labels`). One engine may serve several hosts, or a container and its
//! host, each with pids of its own, so `gc` removes only what it can prove dead: an owner
//! of its own host identity (same boot, same PID namespace) whose process is gone (or whose
//! pid now belongs to a later process). Everything else is left and reported with the
//! reason: live runs, owners of another host identity, and labels without a host identity
//! (written by versions before it, or by something else) — those may belong to a live run
//! elsewhere; whoever knows they are dead removes them by hand (`docker rm -f`,
//! `docker network rm`). The shared egress network carries no run label and is never swept.

use std::collections::HashMap;

use crate::engine::{ContainerEngine, DockerError, EngineError, ListFilter};
use crate::host_dirs;
use crate::labels::{HostIdentity, OWNER_LABEL, Owner, OwnerLabel, RUN_LABEL};

/// One object `gc` removed (or failed to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    pub kind: &'static str,
    pub name: String,
    pub run: String,
    pub error: Option<String>,
}

/// One object `gc` left alone, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub kind: &'static str,
    pub name: String,
    pub run: String,
    pub reason: SkipReason,
}

/// Why an object was left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// Its owner process runs.
    Live { pid: u32 },
    /// Its owner lives on another host or in another PID namespace: its pid says nothing here.
    OtherHost { owner: HostIdentity },
    /// Its owner label has no host identity (an older egress-sandbox wrote it).
    NoHostIdentity { pid: u32 },
    /// Its owner label is missing or not one egress-sandbox writes.
    UnreadableOwner { label: Option<String> },
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::Live { pid } => write!(f, "its run is live (pid {pid})"),
            SkipReason::OtherHost { owner } => write!(
                f,
                "owned by another host or PID namespace ({owner}); run gc there"
            ),
            SkipReason::NoHostIdentity { pid } => write!(
                f,
                "its owner label (pid {pid}) has no host identity, so it may be a live run \
                 elsewhere; remove it by hand if you know it is dead"
            ),
            SkipReason::UnreadableOwner { label: Some(label) } => write!(
                f,
                "unreadable owner label {:?}; remove it by hand if you know it is dead",
                egress_core::text::visible(label)
            ),
            SkipReason::UnreadableOwner { label: None } => write!(
                f,
                "no owner label; remove it by hand if you know it is dead"
            ),
        }
    }
}

/// What `gc` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcReport {
    pub removed: Vec<Swept>,
    pub skipped: Vec<Skipped>,
}

/// The verdict on one object.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Remove,
    Skip(SkipReason),
}

/// Removes only what is proved dead: an owner of `here` whose process is gone.
fn judge(labels: &HashMap<String, String>, here: &HostIdentity) -> Verdict {
    let Some(label) = labels.get(OWNER_LABEL) else {
        return Verdict::Skip(SkipReason::UnreadableOwner { label: None });
    };
    match Owner::parse(label) {
        OwnerLabel::Owner(owner) if &owner.host != here => {
            Verdict::Skip(SkipReason::OtherHost { owner: owner.host })
        }
        OwnerLabel::Owner(owner) if owner.is_alive_here() => {
            Verdict::Skip(SkipReason::Live { pid: owner.pid })
        }
        OwnerLabel::Owner(_) => Verdict::Remove,
        OwnerLabel::WithoutHost { pid, .. } => Verdict::Skip(SkipReason::NoHostIdentity { pid }),
        OwnerLabel::Unreadable => Verdict::Skip(SkipReason::UnreadableOwner {
            label: Some(label.clone()),
        }),
    }
}

/// Removes leftovers of dead runs of this host identity: containers first, then their
/// networks. Reports what it removed and what it left, with the reason.
pub async fn sweep(
    engine: &dyn ContainerEngine,
    here: &HostIdentity,
) -> Result<GcReport, EngineError> {
    let filter = ListFilter::Label(RUN_LABEL.to_owned());
    let mut report = remove_judged(engine, &filter, |labels| judge(labels, here)).await?;
    // A directory's owner is judged as its containers' are; those of live owners, other
    // hosts and unreadable names are left without a word (they are not Docker's objects).
    report.remove_host_dirs(|owner| {
        matches!(owner, OwnerLabel::Owner(owner) if &owner.host == here && !owner.is_alive_here())
    });
    Ok(report)
}

/// Removes every object of one owner (its label value, `Owner`'s display form), without
/// asking whether it lives: for the watchdog, which saw its process end. (While a dead
/// process is a zombie, the kernel still answers for its pid: `gc`'s check would keep it.)
pub async fn sweep_owner(
    engine: &dyn ContainerEngine,
    owner: &str,
) -> Result<GcReport, EngineError> {
    let filter = ListFilter::Label(format!("{OWNER_LABEL}={owner}"));
    let mut report = remove_judged(engine, &filter, |_| Verdict::Remove).await?;
    report.remove_host_dirs(
        |named| matches!(named, OwnerLabel::Owner(named) if named.to_string() == owner),
    );
    Ok(report)
}

/// Removes the containers, then the networks, that `filters` lists and `judge` condemns.
async fn remove_judged(
    engine: &dyn ContainerEngine,
    filter: &ListFilter,
    judge: impl Fn(&HashMap<String, String>) -> Verdict,
) -> Result<GcReport, EngineError> {
    let mut report = GcReport::default();
    let containers = engine
        .list_containers(filter)
        .await
        .map_err(EngineError::api("list containers"))?;
    for container in containers {
        let remove = || engine.ensure_container_removed(&container.id);
        report
            .settle(
                "container",
                container.name.clone(),
                &container.labels,
                &judge,
                remove,
            )
            .await;
    }
    let networks = engine
        .list_networks(filter)
        .await
        .map_err(EngineError::api("list networks"))?;
    for network in networks {
        let name = if network.name.is_empty() {
            network.id.clone()
        } else {
            network.name.clone()
        };
        let remove = || engine.ensure_network_removed(&network.id);
        report
            .settle("network", name, &network.labels, &judge, remove)
            .await;
    }
    Ok(report)
}

impl GcReport {
    /// Removes the runs' host directories (`host_dirs`) whose owner `condemned` says is
    /// gone. Their run is not recorded with them: reported with an empty `run`.
    fn remove_host_dirs(&mut self, condemned: impl Fn(&OwnerLabel) -> bool) {
        for (path, owner) in host_dirs::find(&std::env::temp_dir()) {
            if !condemned(&owner) {
                continue;
            }
            let error = match std::fs::remove_dir_all(&path) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    Some(error.to_string())
                }
                _ => None,
            };
            self.removed.push(Swept {
                kind: "directory",
                name: path.display().to_string(),
                run: String::new(),
                error,
            });
        }
    }

    /// Judges one object by its labels; removes it (with `remove`) if condemned, and
    /// reports what was done and why.
    async fn settle<F>(
        &mut self,
        kind: &'static str,
        name: String,
        labels: &HashMap<String, String>,
        judge: impl Fn(&HashMap<String, String>) -> Verdict,
        remove: impl FnOnce() -> F,
    ) where
        F: std::future::Future<Output = Result<(), DockerError>>,
    {
        let run = labels.get(RUN_LABEL).cloned().unwrap_or_default();
        match judge(labels) {
            Verdict::Skip(reason) => self.skipped.push(Skipped {
                kind,
                name,
                run,
                reason,
            }),
            Verdict::Remove => {
                let error = remove().await.err().map(|error| error.to_string());
                self.removed.push(Swept {
                    kind,
                    name,
                    run,
                    error,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned_by(owner: &str) -> HashMap<String, String> {
        HashMap::from([(OWNER_LABEL.to_string(), owner.to_string())])
    }

    #[test]
    fn live_owner_is_kept_dead_owner_of_this_host_is_removed() {
        let me = Owner::current().unwrap();
        let here = me.host.clone();
        assert_eq!(
            judge(&me.labels("r-00000001"), &here),
            Verdict::Skip(SkipReason::Live { pid: me.pid })
        );
        let dead = Owner {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        assert_eq!(judge(&dead.labels("r-00000002"), &here), Verdict::Remove);
    }

    #[test]
    fn owners_of_another_host_or_pid_namespace_are_skipped_and_reported_never_removed() {
        let me = Owner::current().unwrap();
        let here = me.host.clone();
        // Dead if judged here (a later start time), but on another boot / namespace the
        // same pid is another process entirely.
        let other_boot = Owner {
            start_time: me.start_time + 1,
            host: HostIdentity {
                boot_id: "00000000-0000-4000-8000-000000000000".into(),
                ..here.clone()
            },
            ..me.clone()
        };
        let other_namespace = Owner {
            start_time: me.start_time + 1,
            host: HostIdentity {
                pid_namespace: here.pid_namespace + 1,
                ..here.clone()
            },
            ..me.clone()
        };
        for foreign in [other_boot, other_namespace] {
            let verdict = judge(&foreign.labels("r-00000003"), &here);
            assert_eq!(
                verdict,
                Verdict::Skip(SkipReason::OtherHost {
                    owner: foreign.host.clone()
                })
            );
            let Verdict::Skip(reason) = verdict else {
                unreachable!()
            };
            assert!(reason.to_string().contains("another host"), "{reason}");
        }
    }

    #[test]
    fn labels_without_a_host_identity_or_unreadable_are_skipped() {
        let here = HostIdentity::current().unwrap();
        // An old-format label of a pid that cannot exist here: still not proof, elsewhere
        // it may be a live run.
        assert_eq!(
            judge(&owned_by("4294967294:1"), &here),
            Verdict::Skip(SkipReason::NoHostIdentity { pid: 4294967294 })
        );
        assert_eq!(
            judge(&owned_by("nope\u{1b}[2K"), &here),
            Verdict::Skip(SkipReason::UnreadableOwner {
                label: Some("nope\u{1b}[2K".into())
            })
        );
        assert!(
            !SkipReason::UnreadableOwner {
                label: Some("nope\u{1b}[2K".into())
            }
            .to_string()
            .contains('\u{1b}')
        );
        assert_eq!(
            judge(&HashMap::new(), &here),
            Verdict::Skip(SkipReason::UnreadableOwner { label: None })
        );
    }
}
