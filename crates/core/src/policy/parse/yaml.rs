//! Reading the YAML itself: serde-saphyr's options and budget, which keep a hostile file
//! from making the parser hang, and its errors reworded as policy diagnostics.

use serde_saphyr::Location;

use super::MAX_POLICY_BYTES;
use crate::policy::Diagnostic;

/// Parser options: duplicate keys refused, a single document, small structural budget and
/// alias replay bounded so an alias bomb fails within milliseconds. Merge keys (`<<`) are
/// refused: a key written next to `<<` silently wins over the merged one, and
/// `<<: [{host: a}, {host: b}]` keeps only `a`, so a deny rule a reviewer reads as two can
/// refuse one host. Anchors and aliases of plain values (one ports list) stay allowed.
pub(super) fn parser_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        duplicate_keys: serde_saphyr::options::DuplicateKeyPolicy::Error,
        merge_keys: serde_saphyr::options::MergeKeyPolicy::Error,
        strict_booleans: true,
        // A `!!binary` scalar stays its visible text: a reviewer must see the host a rule
        // allows, not a base64 blob that decodes to it.
        ignore_binary_tag_for_string: true,
        reject_unsupported_tags: true,
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_reader_input_bytes: Some(MAX_POLICY_BYTES),
            max_events: 400_000,
            max_nodes: 200_000,
            max_depth: 16,
            max_documents: 1,
            max_aliases: 10_000,
            max_anchors: 1_000,
            max_recorded_anchor_events: 10_000,
            max_recorded_anchor_bytes: 64 * 1024,
            max_total_scalar_bytes: MAX_POLICY_BYTES,
            // Refused above; no budget to spend.
            max_merge_keys: 0,
            // One anchored ports list reused by every rule is legitimate; the replay caps
            // below are what bound the work.
            enforce_alias_anchor_ratio: false,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 100_000,
            max_replay_stack_depth: 8,
            max_alias_expansions_per_anchor: 10_000,
        },
    }
}

/// Whether the scalar at `location` is written in quotes (`"1"`, `'1'`): YAML makes it a
/// string where the unquoted form would be a number.
pub(super) fn quoted_scalar_at(text: &str, location: &Location) -> bool {
    let (line, column) = position(location);
    text.lines()
        .nth(line.saturating_sub(1))
        .and_then(|line| line.chars().nth(column.saturating_sub(1)))
        .is_some_and(|c| c == '"' || c == '\'')
}

pub(super) fn position(location: &Location) -> (usize, usize) {
    (
        usize::try_from(location.line()).unwrap_or(usize::MAX),
        usize::try_from(location.column()).unwrap_or(usize::MAX),
    )
}

/// A serde-saphyr error as a diagnostic: its location, its message without the trailing
/// "at line L, column C" (the location is already in front) and without hints about
/// library options.
pub(super) fn yaml_error(file: &str, error: &serde_saphyr::Error) -> Diagnostic {
    let (line, column) = error
        .location()
        .map(|location| position(&location))
        .filter(|&(line, column)| line > 0 && column > 0)
        .unwrap_or((1, 1));
    let mut message = error.without_snippet().to_string();
    if let Some(cut) = message.find(" (defined at line ") {
        // Reached through an alias: say where the anchor is.
        message.truncate(cut);
        if let Some(locations) = error.locations() {
            let (line, column) = position(&locations.defined_location);
            message.push_str(&format!(
                " (through an alias of the anchor at {line}:{column})"
            ));
        }
    } else if let Some(cut) = message.rfind(" at line ")
        && message[cut + " at line ".len()..]
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b',' || b == b' ' || b.is_ascii_lowercase())
    {
        message.truncate(cut);
    }
    let message = message
        .replace(", set DuplicateKeyPolicy in Options if acceptable", "")
        .replace("expected string scalar", "expected a single value here")
        .replace("budget breached: ", "parser budget exceeded: ")
        .replace(
            "YAML merge keys are not allowed by configured policy",
            "merge keys (`<<`) are not accepted in a policy (what they merge is easy to misread); write each rule and key out",
        )
        .replace(
            "expected mapping start",
            "expected a mapping (`key: value` lines, e.g. `host: api.example.com`) here",
        )
        .replace(
            "expected sequence start",
            "expected a list (`- item` lines, or `[a, b]`) here",
        );
    let mut message = message.lines().next().unwrap_or_default().to_owned();
    if message.starts_with("parser budget exceeded: Documents") {
        message = "a policy is one YAML document; a second one (`---`) begins here".to_owned();
    }
    Diagnostic::error(file, line, column, format!("YAML: {message}"))
}
