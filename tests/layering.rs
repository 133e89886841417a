//! Imports run one way, in both crates: no module depends, through any chain of `use`s and
//! paths, on a module that depends back on it (the proxy's doors on `server`, a stage of a
//! run on the run that drives it). Circles crept in before (issues 7 and 8 asked for them
//! gone); this test names the modules of any new one.
//!
//! It reads the sources as text: `crate::a::b` and `super::a` paths (braced groups too) in
//! code before a file's `#[cfg(test)]`, comments skipped, each mapped to the deepest module
//! file that exists. A module using its own ancestors (`mod.rs` re-exports) is not a circle.
//!
//! The binary crate's library (the modules `src/lib.rs` reaches through `mod` declarations)
//! does not depend on its command line: embedders compile no clap, and the CLI stays a thin
//! layer over the library rather than the other way round.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The module path of a source file below `root` (`sandbox/run.rs` → `sandbox::run`,
/// `sandbox/mod.rs` → `sandbox`, `lib.rs` → ``); `None` for test-only files.
fn module_of(root: &Path, file: &Path) -> Option<Vec<String>> {
    let relative = file.strip_prefix(root).ok()?.with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.iter().any(|part| part == "tests") {
        return None;
    }
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    Some(parts)
}

fn source_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            source_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// The code of a file that counts: before its tests, without comment lines.
fn code(text: &str) -> String {
    let before_tests = text.split("#[cfg(test)]").next().unwrap_or_default();
    before_tests
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Paths that follow each `prefix` (`crate::` or `super::`): `a::b` for `crate::a::b`, and one
/// per member of a braced group (`crate::{a, b::c}` → `a`, `b::c`).
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut paths = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let preceded_by_ident = code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        if preceded_by_ident {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut member = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        paths.push(std::mem::take(&mut member));
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && is_path_char(c) {
                    member.push(c);
                } else if depth == 0 && !c.is_whitespace() && !member.is_empty() {
                    // `a::b as c`, `a::{…}`: the path ends here
                    member.push(' ');
                }
            }
            paths.push(member);
        } else {
            paths.push(rest.chars().take_while(|&c| is_path_char(c)).collect());
        }
    }
    paths
        .into_iter()
        .map(|path| {
            path.split(' ')
                .next()
                .unwrap_or_default()
                .trim_end_matches(':')
                .to_owned()
        })
        .filter(|path| !path.is_empty())
        .collect()
}

fn import_graph(root: &Path) -> Graph {
    let mut files = Vec::new();
    source_files(root, &mut files);
    let mut raw: BTreeMap<Vec<String>, Vec<Vec<String>>> = BTreeMap::new();
    for file in files {
        let Some(module) = module_of(root, &file) else {
            continue;
        };
        let code = code(&std::fs::read_to_string(&file).expect("a readable source file"));
        let parent = &module[..module.len().saturating_sub(1)];
        let mut targets = Vec::new();
        for path in paths_after(&code, "crate::") {
            targets.push(path.split("::").map(str::to_owned).collect());
        }
        for path in paths_after(&code, "super::") {
            let mut target = parent.to_vec();
            target.extend(path.split("::").map(str::to_owned));
            targets.push(target);
        }
        raw.insert(module, targets);
    }
    let modules: BTreeSet<Vec<String>> = raw.keys().cloned().collect();
    let mut graph = Graph::new();
    for (module, targets) in &raw {
        let edges = graph.entry(module.join("::")).or_default();
        for target in targets {
            // The deepest module file the path names (the rest is an item inside it).
            let mut target = target.clone();
            while !target.is_empty() && !modules.contains(&target) {
                target.pop();
            }
            let is_ancestor = module.starts_with(&target);
            if !target.is_empty() && !is_ancestor {
                edges.insert(target.join("::"));
            }
        }
    }
    graph
}

/// A circle of modules, if there is one (depth-first search).
fn find_circle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        module: &str,
        graph: &Graph,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        marks.insert(module.to_owned(), Mark::Open);
        stack.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            match marks.get(next) {
                Some(Mark::Open) => {
                    let start = stack.iter().position(|m| m == next).unwrap_or(0);
                    let mut circle = stack[start..].to_vec();
                    circle.push(next.clone());
                    return Some(circle);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(circle) = visit(next, graph, marks, stack) {
                        return Some(circle);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(module.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for module in graph.keys() {
        if !marks.contains_key(module) {
            let mut stack = Vec::new();
            if let Some(circle) = visit(module, graph, &mut marks, &mut stack) {
                return Some(circle);
            }
        }
    }
    None
}

fn assert_no_circle(crate_dir: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(crate_dir);
    let graph = import_graph(&root);
    assert!(
        graph.len() > 10,
        "read too few modules below {}",
        root.display()
    );
    if let Some(circle) = find_circle(&graph) {
        panic!(
            "import circle in {crate_dir}: {} (move what both need into a module of its own)",
            circle.join(" → ")
        );
    }
}

/// The module files a crate root reaches through `mod NAME;` declarations (not inline
/// `mod NAME { … }` blocks), the root included: `NAME.rs` or `NAME/mod.rs` beside a root or
/// `mod.rs` file, below `NAME/` for any other file.
fn reachable_modules(root_file: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![root_file.to_path_buf()];
    while let Some(file) = pending.pop() {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        let dir = file.parent().expect("a file in a directory");
        let stem = file.file_stem().expect("a file name").to_string_lossy();
        let children_dir = if matches!(stem.as_ref(), "lib" | "main" | "mod") {
            dir.to_path_buf()
        } else {
            dir.join(stem.as_ref())
        };
        for line in code(&text).lines() {
            let Some(name) = declared_module(line) else {
                continue;
            };
            let flat = children_dir.join(format!("{name}.rs"));
            let nested = children_dir.join(name).join("mod.rs");
            let child = if flat.is_file() { flat } else { nested };
            assert!(
                child.is_file(),
                "no file for `mod {name};` in {}",
                file.display()
            );
            pending.push(child);
        }
        found.push(file);
    }
    found
}

/// `NAME` of a `mod NAME;` line, whatever its visibility.
fn declared_module(line: &str) -> Option<&str> {
    let line = line.trim();
    let rest = line.strip_prefix("pub ").unwrap_or(line);
    let rest = rest
        .strip_prefix("pub(crate) ")
        .or_else(|| rest.strip_prefix("pub(super) "))
        .unwrap_or(rest);
    let name = rest.strip_prefix("mod ")?.strip_suffix(';')?.trim();
    name.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
        .then_some(name)
}

/// What in a library file's code (tests included: they build with the library) ties it to
/// the command line: a path into the CLI's modules, clap, or a declaration of those modules.
fn cli_dependencies(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for path in paths_after(code, "crate::") {
        let first = path.split("::").next().unwrap_or_default();
        if CLI_MODULES.contains(&first) {
            found.push(format!("crate::{path}"));
        }
    }
    for line in code.lines() {
        if let Some(name) = declared_module(line)
            && CLI_MODULES.contains(&name)
        {
            found.push(line.trim().to_owned());
        }
    }
    let mentions_clap = code.match_indices("clap").any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + "clap".len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    });
    if mentions_clap {
        found.push("clap".to_owned());
    }
    found
}

/// The binary target's own modules (`src/main.rs`): the command line and its front ends.
const CLI_MODULES: [&str; 4] = ["cli", "commands", "mcp", "logging"];

#[test]
fn the_binary_crates_library_does_not_depend_on_its_command_line() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let library = reachable_modules(&src.join("lib.rs"));
    assert!(
        library.len() > 30,
        "read too few library modules: {library:?}"
    );
    let mut found = Vec::new();
    for file in &library {
        let text = std::fs::read_to_string(file).expect("a readable source file");
        let code: String = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for dependency in cli_dependencies(&code) {
            found.push(format!(
                "{}: {dependency}",
                file.strip_prefix(&src).unwrap_or(file).display()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "the library depends on the command line (move the CLI part into the binary, \
         `src/main.rs`, or the domain logic into the library):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_cli_check_finds_clap_and_cli_paths() {
    let code = "use clap::Parser;\nuse crate::cli::RunArgs;\npub mod commands;\nmod sandbox;";
    assert_eq!(
        cli_dependencies(code),
        ["crate::cli::RunArgs", "pub mod commands;", "clap"]
    );
    assert!(cli_dependencies("use crate::sandbox::Sandbox;\nlet eclapse = 1;").is_empty());
}

#[test]
fn the_binary_crate_has_no_import_circle() {
    assert_no_circle("src");
}

#[test]
fn the_proxy_crate_has_no_import_circle() {
    assert_no_circle("proxy/src");
}

#[test]
fn the_check_finds_a_circle_and_reads_braced_groups() {
    let code = "use crate::{a::X, b};\nuse super::c::{self, Y};\nlet z = crate::d::f();";
    assert_eq!(paths_after(code, "crate::"), ["a::X", "b", "d::f"]);
    assert_eq!(paths_after(code, "super::"), ["c"]);
    let mut graph = Graph::new();
    graph.insert("server".into(), ["http".into()].into());
    graph.insert("http".into(), ["gate".into()].into());
    graph.insert("gate".into(), ["server".into()].into());
    assert_eq!(
        find_circle(&graph).expect("a circle"),
        ["gate", "server", "http", "gate"]
    );
}
