//! `gc`: removes the containers and networks of runs whose owner process is gone.
//!
//! A run removes its own objects on every path it controls; a crash, `kill -9` or power
//! loss is the rest. Objects carry `egress-sandbox.owner=<pid>:<start time>`; when that
//! process no longer exists (or the pid now belongs to a later process), the run is dead.
//! Live runs are left alone, as is the shared egress network.

use std::collections::HashMap;

use super::docker::{Engine, EngineError};
use super::labels::{OWNER_LABEL, Owner, RUN_LABEL};

/// One object `gc` removed (or failed to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    pub kind: &'static str,
    pub name: String,
    pub run: String,
    pub error: Option<String>,
}

/// Whether the object with these labels belongs to a run that is gone. An owner label that
/// cannot be read counts as gone: no live run writes one like that.
fn is_orphan(labels: &HashMap<String, String>) -> bool {
    match labels
        .get(OWNER_LABEL)
        .and_then(|owner| Owner::parse(owner))
    {
        Some(owner) => !owner.is_alive(),
        None => true,
    }
}

/// Removes leftovers of dead runs: containers first, then their networks.
pub async fn sweep(engine: &Engine) -> Result<Vec<Swept>, EngineError> {
    let filters = HashMap::from([("label", vec![RUN_LABEL])]);
    let mut swept = Vec::new();

    for container in engine.list_containers(&filters).await? {
        let labels = container.labels.unwrap_or_default();
        if !is_orphan(&labels) {
            continue;
        }
        let Some(id) = container.id else { continue };
        let name = container
            .names
            .and_then(|names| names.into_iter().next())
            .map(|name| name.trim_start_matches('/').to_string())
            .unwrap_or_else(|| id.clone());
        let error = engine
            .remove_container(&id)
            .await
            .err()
            .map(|e| e.to_string());
        swept.push(Swept {
            kind: "container",
            name,
            run: labels.get(RUN_LABEL).cloned().unwrap_or_default(),
            error,
        });
    }

    for network in engine.list_networks(&filters).await? {
        let labels = network.labels.unwrap_or_default();
        if !is_orphan(&labels) {
            continue;
        }
        let Some(id) = network.id else { continue };
        let name = network.name.unwrap_or_else(|| id.clone());
        let error = engine
            .remove_network(&id)
            .await
            .err()
            .map(|e| e.to_string());
        swept.push(Swept {
            kind: "network",
            name,
            run: labels.get(RUN_LABEL).cloned().unwrap_or_default(),
            error,
        });
    }
    Ok(swept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_owner_is_kept_dead_or_unreadable_is_swept() {
        let me = Owner::current().unwrap();
        let live = me.labels("r-00000001");
        assert!(!is_orphan(&live));
        let dead = Owner {
            start_time: me.start_time + 1,
            ..me
        }
        .labels("r-00000002");
        assert!(is_orphan(&dead));
        let unreadable = HashMap::from([(OWNER_LABEL.to_string(), "nope".to_string())]);
        assert!(is_orphan(&unreadable));
    }
}
