//! The documentation tells the truth about itself: every Markdown file the sources cite is in
//! the repository, every relative link and `#anchor` in the book (`docs/src`) and in
//! README.md resolves, every page of the book is in its SUMMARY.md, and the command
//! reference holds every flag the binary's `--help` shows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book() -> PathBuf {
    repo().join("docs/src")
}

/// Every file under `dir` whose name ends with one of `suffixes`, sorted.
fn files_under(dir: &Path, suffixes: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                // Build output (a fuzz workspace's own target/) is not source.
                if !path.ends_with("target") {
                    pending.push(path);
                }
            } else if suffixes
                .iter()
                .any(|suffix| path.to_string_lossy().ends_with(suffix))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The words in `text` that name a Markdown file: a run of path characters ending `.md`.
fn cited_markdown_files(text: &str) -> BTreeSet<String> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut cited = BTreeSet::new();
    for (index, _) in text.match_indices(".md") {
        let after = text[index + 3..].chars().next();
        if after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let start = text[..index]
            .char_indices()
            .rev()
            .find(|&(_, c)| !is_path_char(c))
            .map_or(0, |(at, c)| at + c.len_utf8());
        let name = text[start..index + 3].trim_start_matches("./");
        if name.len() > 3 && !name.starts_with('.') {
            cited.insert(name.to_owned());
        }
    }
    cited
}

/// A cited name resolves from the repository root, or (a bare file name) is a file of that
/// name somewhere in the repository's documents.
fn cited_file_exists(name: &str) -> bool {
    if repo().join(name).is_file() {
        return true;
    }
    !name.contains('/')
        && files_under(&book(), &[".md"])
            .iter()
            .any(|page| page.file_name().is_some_and(|file| file == name))
}

#[test]
fn every_markdown_file_the_sources_cite_exists() {
    let mut missing = Vec::new();
    let mut sources = Vec::new();
    for dir in ["src", "crates", "tests", "bench", "clients"] {
        sources.extend(files_under(
            &repo().join(dir),
            &[".rs", ".py", ".mjs", ".sh", ".toml"],
        ));
    }
    sources.push(repo().join(".ci/run"));
    // This file names missing pages on purpose, to test the checks.
    sources.retain(|source| !source.ends_with("tests/docs.rs"));
    for source in &sources {
        for name in cited_markdown_files(&read(source)) {
            if !cited_file_exists(&name) {
                missing.push(format!("{} cites {name}", source.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "files cited but not in the repository:\n{}",
        missing.join("\n")
    );
}

/// The scanner finds what a comment cites, and the check refuses a file that is not there.
#[test]
fn the_citation_scan_finds_names_and_refuses_missing_ones() {
    let missing = ["NOT", "HERE.md"].concat();
    let text =
        format!("//! see `docs/src/reference/reasons.md` and README.md, not {missing}; x.mdx no");
    let cited = cited_markdown_files(&text);
    assert_eq!(
        cited,
        BTreeSet::from([
            "README.md".to_owned(),
            missing.clone(),
            "docs/src/reference/reasons.md".to_owned()
        ])
    );
    assert!(cited_file_exists("docs/src/reference/reasons.md"));
    assert!(!cited_file_exists(&missing));
}

/// A link in a Markdown text: its target as written and the line it is on.
struct Link {
    target: String,
    line: usize,
}

/// Markdown text with fenced code blocks and inline code spans blanked out (links there are
/// examples, not links).
fn without_code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced {
            out.push('\n');
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                out.push(' ');
            } else {
                out.push(if in_code { ' ' } else { c });
            }
        }
        out.push('\n');
    }
    out
}

/// Inline links `[text](target)` outside code.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (number, line) in without_code(text).lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push(Link {
                target: after[..end].trim().to_owned(),
                line: number + 1,
            });
            rest = &after[end..];
        }
    }
    found
}

/// The ids mdBook gives the headings of a page: the heading's text lower-cased, spaces as
/// `-`, anything but letters, digits, `_` and `-` dropped; a repeated id gets `-1`, `-2`…
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let visible = link_text_only(heading);
        let id: String = visible
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c.to_ascii_lowercase())
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let count = seen.entry(id.clone()).or_insert(0);
        ids.insert(if *count == 0 {
            id.clone()
        } else {
            format!("{id}-{count}")
        });
        *count += 1;
    }
    ids
}

/// A heading's text as rendered: `[text](target)` becomes `text`.
fn link_text_only(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](") else {
            break;
        };
        let Some(end) = rest[open + close..].find(')') else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..open + close]);
        rest = &rest[open + close + end + 1..];
    }
    out.push_str(rest);
    out
}

/// The pages SUMMARY.md lists, relative to `docs/src`.
fn summary_pages() -> BTreeSet<PathBuf> {
    links(&read(&book().join("SUMMARY.md")))
        .into_iter()
        .map(|link| PathBuf::from(link.target))
        .collect()
}

/// Problems with the links of the Markdown file `page`.
fn broken_links(page: &Path, listed: &BTreeSet<PathBuf>) -> Vec<String> {
    let text = read(page);
    let dir = page.parent().unwrap();
    let mut broken = Vec::new();
    for link in links(&text) {
        let target = link.target.as_str();
        if target.is_empty()
            || target.contains("://")
            || target.starts_with("mailto:")
            || target.starts_with('<')
        {
            continue;
        }
        let at = format!("{}:{}: `{target}`", page.display(), link.line);
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target, None),
        };
        if path.starts_with('/') {
            broken.push(format!("{at}: absolute; links are relative"));
            continue;
        }
        let file = if path.is_empty() {
            page.to_path_buf()
        } else {
            dir.join(path)
        };
        if !file.exists() {
            broken.push(format!("{at}: no such file"));
            continue;
        }
        let in_book = file.canonicalize().ok().and_then(|file| {
            file.strip_prefix(book().canonicalize().unwrap())
                .ok()
                .map(Path::to_path_buf)
        });
        if let Some(relative) = &in_book
            && page.starts_with(book())
            && relative.extension().is_some_and(|ext| ext == "md")
            && !listed.contains(relative)
        {
            broken.push(format!("{at}: the page is not in SUMMARY.md"));
        }
        if let Some(anchor) = anchor {
            if file.extension().is_none_or(|ext| ext != "md") {
                broken.push(format!("{at}: an anchor into a file that is not Markdown"));
            } else if !heading_ids(&read(&file)).contains(anchor) {
                broken.push(format!("{at}: no heading with that id"));
            }
        }
    }
    broken
}

#[test]
fn every_link_and_anchor_in_the_book_and_the_readme_resolves() {
    let listed = summary_pages();
    let mut pages = files_under(&book(), &[".md"]);
    pages.push(repo().join("README.md"));
    let broken: Vec<String> = pages
        .iter()
        .flat_map(|page| broken_links(page, &listed))
        .collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let listed = summary_pages();
    let unlisted: Vec<String> = files_under(&book(), &[".md"])
        .into_iter()
        .map(|page| page.strip_prefix(book()).unwrap().to_path_buf())
        .filter(|page| page != Path::new("SUMMARY.md") && !listed.contains(page))
        .map(|page| page.display().to_string())
        .collect();
    assert!(
        unlisted.is_empty(),
        "pages mdBook would not render (add them to docs/src/SUMMARY.md): {unlisted:?}"
    );
}

/// The checker itself: a missing page, a missing anchor and an unlisted page are found.
#[test]
fn the_link_check_finds_broken_links() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "# Title: `a` b\n\n## Same\n## Same\n\n[ok](#title-a-b) [ok](#same-1) \
         [bad](#nowhere) [gone](gone.md) `[code](gone.md)`\n\n```\n[fenced](gone.md)\n```\n",
    )
    .unwrap();
    let broken = broken_links(&page, &BTreeSet::new());
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].ends_with("`#nowhere`: no heading with that id"));
    assert!(broken[1].ends_with("`gone.md`: no such file"));
}

/// `## \`egress-sandbox CMD\`` sections of the command reference, by command words.
fn reference_sections() -> BTreeMap<String, String> {
    let text = read(&book().join("reference/cli.md"));
    let mut sections = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(title) = line
            .strip_prefix("## `egress-sandbox")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            if let Some((name, body)) = current.take() {
                sections.insert(name, body);
            }
            current = Some((title.trim().to_owned(), String::new()));
        } else if let Some((_, body)) = &mut current {
            body.push_str(line);
            body.push('\n');
        }
    }
    if let Some((name, body)) = current {
        sections.insert(name, body);
    }
    sections
}

/// Long flags in a `--help` text (`--policy`, `--allow`, …).
fn long_flags(help: &str) -> BTreeSet<String> {
    help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|word| word.starts_with("--") && word.len() > 2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_command_reference_holds_every_flag_of_every_command_it_documents() {
    let sections = reference_sections();
    for must in [
        "",
        "run",
        "policy test",
        "audit export",
        "serve",
        "gc",
        "proxy",
    ] {
        assert!(sections.contains_key(must), "no section for `{must}`");
    }
    let mut missing = Vec::new();
    for (command, body) in &sections {
        let output = Command::new(env!("CARGO_BIN_EXE_egress-sandbox"))
            .args(command.split_whitespace())
            .arg("--help")
            .output()
            .unwrap();
        assert!(output.status.success(), "{command} --help");
        let help = String::from_utf8(output.stdout).unwrap();
        for flag in long_flags(&help) {
            if !long_flags(body).contains(&flag) {
                missing.push(format!("egress-sandbox {command} {flag}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "flags missing from docs/src/reference/cli.md:\n{}",
        missing.join("\n")
    );
}
