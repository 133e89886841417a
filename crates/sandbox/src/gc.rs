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
use std::path::Path;

use crate::engine::{ContainerEngine, DockerError, EngineError, ListFilter};
use crate::host_dirs;
use crate::labels::{HostIdentity, OWNER_LABEL, Owner, OwnerLabel, RUN_LABEL};

/// One object `gc` removed (or failed to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    /// `container`, `network` or `directory` (a run's host directory).
    pub kind: &'static str,
    /// The object's name; a directory's path.
    pub name: String,
    /// The run it belongs to, from its run label; empty for a directory.
    pub run: String,
    /// Why removing it failed; `None` when it was removed.
    pub error: Option<String>,
}

/// One object `gc` left alone, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// `container` or `network`.
    pub kind: &'static str,
    /// The object's name.
    pub name: String,
    /// The run it belongs to, from its run label.
    pub run: String,
    /// Why it was left alone.
    pub reason: SkipReason,
}

/// Why an object was left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// Its owner process runs.
    Live {
        /// The owner's pid.
        pid: u32,
    },
    /// Its owner lives on another host or in another PID namespace: its pid says nothing here.
    OtherHost {
        /// The host identity the owner label names.
        owner: HostIdentity,
    },
    /// Its owner label has no host identity, so whether its owner lives cannot be told.
    NoHostIdentity {
        /// The pid the label names.
        pid: u32,
    },
    /// Its owner label is missing or not one egress-sandbox writes.
    UnreadableOwner {
        /// The label as found; `None` when the object has none.
        label: Option<String>,
    },
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
    /// The objects removed, or tried and failed.
    pub removed: Vec<Swept>,
    /// The objects left alone.
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
    sweep_in(engine, here, &std::env::temp_dir()).await
}

/// [`sweep`], with the runs' host directories looked for in `temp_dir`.
async fn sweep_in(
    engine: &dyn ContainerEngine,
    here: &HostIdentity,
    temp_dir: &Path,
) -> Result<GcReport, EngineError> {
    let filter = ListFilter::Label(RUN_LABEL.to_owned());
    let mut report = remove_judged(engine, &filter, |labels| judge(labels, here)).await?;
    // A directory's owner is judged as its containers' are; those of live owners, other
    // hosts and unreadable names are left without a word (they are not Docker's objects).
    report.remove_host_dirs(temp_dir, |owner| {
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
    sweep_owner_in(engine, owner, &std::env::temp_dir()).await
}

/// [`sweep_owner`], with the runs' host directories looked for in `temp_dir`.
async fn sweep_owner_in(
    engine: &dyn ContainerEngine,
    owner: &str,
    temp_dir: &Path,
) -> Result<GcReport, EngineError> {
    let filter = ListFilter::Label(format!("{OWNER_LABEL}={owner}"));
    let mut report = remove_judged(engine, &filter, |_| Verdict::Remove).await?;
    report.remove_host_dirs(
        temp_dir,
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
    fn remove_host_dirs(&mut self, temp_dir: &Path, condemned: impl Fn(&OwnerLabel) -> bool) {
        for (path, owner) in host_dirs::find(temp_dir) {
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
    use crate::labels::SHARED_LABEL;
    use crate::network::EGRESS_NETWORK;
    use crate::testing::FakeEngine;

    /// Objects of one run of `owner` on the fake: its network and its two containers on it.
    fn run_of(fake: &FakeEngine, owner: &Owner, id: &str) {
        let names = crate::labels::RunNames::for_id(id);
        fake.add_network(&names.network, owner.labels(id));
        for container in [&names.proxy, &names.sandbox] {
            fake.add_container(container, owner.labels(id), &[&names.network]);
        }
    }

    /// A run directory of `owner` in `temp_dir`, as `host_dirs` makes one.
    fn run_dir(temp_dir: &Path, owner: &Owner, name: &str) -> std::path::PathBuf {
        let dir = temp_dir.join(format!("egress-sandbox-run-{name}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("owner"), owner.to_string()).unwrap();
        dir
    }

    /// `gc` on the fake engine removes a dead owner's run (containers, then the network
    /// they were on) and its directory; a live run, another host's run, an object without
    /// a run label and the shared egress network stay.
    #[tokio::test]
    async fn gc_sweeps_only_the_objects_whose_owner_is_gone() {
        let fake = FakeEngine::local();
        let me = Owner::current().unwrap();
        let here = me.host.clone();
        let dead = Owner {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        let elsewhere = Owner {
            host: HostIdentity {
                boot_id: "00000000-0000-4000-8000-000000000000".into(),
                ..here.clone()
            },
            ..dead.clone()
        };
        let shared = HashMap::from([(SHARED_LABEL.to_string(), "egress".to_string())]);
        fake.add_network(EGRESS_NETWORK, shared);
        run_of(&fake, &dead, "r-00000001");
        run_of(&fake, &me, "r-00000002");
        run_of(&fake, &elsewhere, "r-00000003");
        fake.add_container("someone-elses", HashMap::new(), &[]);
        let temp_dir = tempfile::tempdir().unwrap();
        let dead_dir = run_dir(temp_dir.path(), &dead, "dead");
        let live_dir = run_dir(temp_dir.path(), &me, "live");

        let report = sweep_in(&fake, &here, temp_dir.path()).await.unwrap();

        let removed: Vec<_> = report
            .removed
            .iter()
            .map(|swept| (swept.kind, swept.name.as_str(), swept.error.is_none()))
            .collect();
        let dead_dir_name = dead_dir.display().to_string();
        assert_eq!(
            removed,
            [
                ("container", "egress-run-r-00000001-proxy", true),
                ("container", "egress-run-r-00000001-sandbox", true),
                ("network", "egress-run-r-00000001", true),
                ("directory", dead_dir_name.as_str(), true),
            ]
        );
        let kept_runs: Vec<_> = report
            .skipped
            .iter()
            .map(|skipped| (skipped.run.as_str(), &skipped.reason))
            .collect();
        assert!(kept_runs.iter().all(|(run, reason)| match *run {
            "r-00000002" => matches!(reason, SkipReason::Live { .. }),
            "r-00000003" => matches!(reason, SkipReason::OtherHost { .. }),
            _ => false,
        }));
        assert_eq!(kept_runs.len(), 6, "{kept_runs:?}");
        assert_eq!(
            fake.containers(),
            [
                "egress-run-r-00000002-proxy",
                "egress-run-r-00000002-sandbox",
                "egress-run-r-00000003-proxy",
                "egress-run-r-00000003-sandbox",
                "someone-elses",
            ]
        );
        assert_eq!(
            fake.networks(),
            [
                "egress-run-r-00000002",
                "egress-run-r-00000003",
                EGRESS_NETWORK
            ]
        );
        assert!(!dead_dir.exists());
        assert!(live_dir.exists());
    }

    /// The watchdog's sweep removes every object of its owner without asking whether it
    /// lives (a zombie's pid still answers), and nobody else's.
    #[tokio::test]
    async fn the_watchdogs_sweep_removes_every_object_of_its_owner_alive_or_not() {
        let fake = FakeEngine::local();
        let me = Owner::current().unwrap();
        let other = Owner {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        run_of(&fake, &me, "r-00000004");
        run_of(&fake, &other, "r-00000005");
        let temp_dir = tempfile::tempdir().unwrap();
        let mine = run_dir(temp_dir.path(), &me, "mine");
        let theirs = run_dir(temp_dir.path(), &other, "theirs");

        let report = sweep_owner_in(&fake, &me.to_string(), temp_dir.path())
            .await
            .unwrap();

        assert_eq!(report.removed.len(), 4, "{:?}", report.removed);
        assert!(report.removed.iter().all(|swept| swept.error.is_none()));
        assert_eq!(
            fake.containers(),
            [
                "egress-run-r-00000005-proxy",
                "egress-run-r-00000005-sandbox"
            ]
        );
        assert_eq!(fake.networks(), ["egress-run-r-00000005"]);
        assert!(!mine.exists());
        assert!(theirs.exists());
    }

    /// A container gc cannot remove is reported with the engine's words, and its network,
    /// still in use, too; the listing failing fails the sweep.
    #[tokio::test]
    async fn gc_reports_what_the_engine_refuses_to_remove() {
        use crate::testing::{Call, Method, injected_error};
        let fake = FakeEngine::local();
        let me = Owner::current().unwrap();
        let dead = Owner {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        run_of(&fake, &dead, "r-00000006");
        // gc removes by id: the first removal is the proxy's (listed first).
        let removal = Call::new(Method::RemoveContainer, "");
        fake.fail_nth(Method::RemoveContainer, 1, injected_error(&removal));
        let temp_dir = tempfile::tempdir().unwrap();
        let report = sweep_in(&fake, &me.host, temp_dir.path()).await.unwrap();
        let failed: Vec<_> = report
            .removed
            .iter()
            .filter(|swept| swept.error.is_some())
            .map(|swept| swept.name.as_str())
            .collect();
        assert_eq!(
            failed,
            ["egress-run-r-00000006-proxy", "egress-run-r-00000006"]
        );
        assert_eq!(fake.containers(), ["egress-run-r-00000006-proxy"]);

        let listing = Call::new(Method::ListContainers, "");
        fake.fail_nth(Method::ListContainers, 1, injected_error(&listing));
        let error = sweep_in(&fake, &me.host, temp_dir.path())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("list containers"), "{error}");
    }

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
