//! The crate graph is the layering: each workspace crate depends only on the crates below it,
//! and what an embedder compiles stays lean. Read from `cargo metadata` (the arrows) and
//! `cargo tree -p` (what one crate's build compiles), so a new `[dependencies]` line that
//! crosses a layer fails here with the arrow named.
//!
//! - `egress-core`: pure (no tokio, hyper or rustls), depends on no workspace crate.
//! - `egress-proxy`, `egress-sandbox`, `egress-audit`: on `egress-core` only. The sandbox
//!   library never compiles the proxy: its helper binary runs it.
//! - `egress-sandbox-helper`: that binary, on `egress-core`, `egress-proxy` and
//!   `egress-sandbox`, and lean: none of the command line's crates.
//! - `egress-serve`: on `egress-core` and `egress-sandbox`.
//! - `egress-sandbox-cli`: on every crate; nothing depends on it.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// The workspace arrows allowed (normal dependencies), by crate.
const ALLOWED: &[(&str, &[&str])] = &[
    ("egress-core", &[]),
    ("egress-proxy", &["egress-core"]),
    ("egress-sandbox", &["egress-core"]),
    ("egress-audit", &["egress-core"]),
    (
        "egress-sandbox-helper",
        &["egress-core", "egress-proxy", "egress-sandbox"],
    ),
    ("egress-serve", &["egress-core", "egress-sandbox"]),
    (
        "egress-sandbox-cli",
        &[
            "egress-core",
            "egress-proxy",
            "egress-sandbox",
            "egress-sandbox-helper",
            "egress-serve",
            "egress-audit",
        ],
    ),
];

/// Crates a library must not compile, through any chain of normal dependencies.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("egress-core", &["tokio", "hyper", "rustls", "bollard"]),
    (
        "egress-sandbox",
        &[
            "egress-proxy",
            "clap",
            "rmcp",
            "anyhow",
            "tracing-subscriber",
            "hickory-resolver",
            "rcgen",
            "rustls",
        ],
    ),
    (
        "egress-audit",
        &["tokio", "hyper", "bollard", "rustls", "clap"],
    ),
    (
        "egress-sandbox-helper",
        &[
            "egress-serve",
            "egress-audit",
            "clap",
            "rmcp",
            "anyhow",
            "tracing-subscriber",
        ],
    ),
    ("egress-serve", &["egress-proxy", "clap", "rmcp", "rcgen"]),
];

struct Graph {
    /// Package id → name.
    names: BTreeMap<String, String>,
    /// Package id → ids of its normal (non-dev, non-build) dependencies.
    normal: BTreeMap<String, BTreeSet<String>>,
    /// Workspace member names → ids.
    members: BTreeMap<String, String>,
}

fn graph() -> Graph {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
    let names: BTreeMap<String, String> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|package| {
            (
                package["id"].as_str().unwrap().to_owned(),
                package["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let members = metadata["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| {
            let id = id.as_str().unwrap().to_owned();
            (names[&id].clone(), id)
        })
        .collect();
    let mut normal = BTreeMap::new();
    for node in metadata["resolve"]["nodes"].as_array().unwrap() {
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|dep| {
                dep["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|kind| kind["kind"].is_null())
            })
            .map(|dep| dep["pkg"].as_str().unwrap().to_owned())
            .collect();
        normal.insert(node["id"].as_str().unwrap().to_owned(), deps);
    }
    Graph {
        names,
        normal,
        members,
    }
}

impl Graph {
    fn id(&self, name: &str) -> &str {
        self.members
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not a workspace member"))
    }
}

#[test]
fn every_workspace_crate_is_in_the_layering() {
    let graph = graph();
    let listed: BTreeSet<&str> = ALLOWED.iter().map(|(name, _)| *name).collect();
    let members: BTreeSet<&str> = graph.members.keys().map(String::as_str).collect();
    assert_eq!(
        members, listed,
        "a crate was added or removed: place it here"
    );
}

#[test]
fn workspace_crates_depend_only_downwards() {
    let graph = graph();
    let mut wrong = Vec::new();
    for (name, allowed) in ALLOWED {
        for dep in &graph.normal[graph.id(name)] {
            let dep = &graph.names[dep];
            if graph.members.contains_key(dep) && !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{name} → {dep}"));
            }
        }
    }
    assert!(wrong.is_empty(), "arrows across the layering: {wrong:?}");
}

/// The crates `cargo build -p NAME` compiles (normal dependencies, with the features NAME
/// itself asks for: an embedder's build, not the workspace's, where the command line turns
/// on the sandbox library's `clap` feature).
fn compiled_by(name: &str) -> BTreeSet<String> {
    let output = Command::new(env!("CARGO"))
        .args([
            "tree", "--locked", "-p", name, "-e", "normal", "--prefix", "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|crate_name| *crate_name != name)
        .map(str::to_owned)
        .collect()
}

#[test]
fn libraries_compile_nothing_of_the_layers_above() {
    let mut wrong = Vec::new();
    for (name, forbidden) in FORBIDDEN {
        let compiled = compiled_by(name);
        assert!(
            compiled.contains("serde") || *name == "egress-core",
            "{name}: cargo tree listed nothing: {compiled:?}"
        );
        for crate_name in *forbidden {
            if compiled.contains(*crate_name) {
                wrong.push(format!("{name} compiles {crate_name}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}
