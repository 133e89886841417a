//! Audit logs drawn for a person: one self-contained HTML page, readable from a file with no
//! server — inline CSS and SVG, no script, nothing fetched (the page's Content-Security-Policy
//! forbids it, so even a mistake here could not make the page load anything).
//!
//! Per run (a file may hold several): totals, a timeline of attempts per second stacked by
//! decision, and the hosts with their counts and reasons, refusals first. Every text that
//! came from a log (hosts, run ids, policy names, reasons, file names) is untrusted — the
//! sandbox chose the hosts — so it goes through [`text`]: control and bidi characters made
//! visible, then HTML-escaped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use egress_core::audit::{AuditLine, Outcome, epoch_millis};

use super::log::AuditLog;

/// Timeline bars at most; a longer run gets wider buckets (the axis says how wide).
const MAX_BUCKETS: i64 = 600;
/// Hosts listed per run at most (refusals first, so they are the ones shown); the rest are
/// counted in a line below the table.
pub const MAX_HOST_ROWS: usize = 1000;

const DECISIONS: [Outcome; 4] = [
    Outcome::Blocked,
    Outcome::WouldBlock,
    Outcome::Failed,
    Outcome::Allowed,
];

/// Untrusted text → safe HTML text: control and bidi characters as visible escapes, then
/// `& < > " '` as entities (safe in element content and in quoted attributes).
pub fn text(raw: &str) -> String {
    let visible = egress_core::text::visible(raw);
    let mut out = String::with_capacity(visible.len());
    for c in visible.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Counts per decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `allowed` attempts.
    pub allowed: u64,
    /// `blocked` attempts.
    pub blocked: u64,
    /// `would_block` attempts.
    pub would_block: u64,
    /// `failed` attempts, and those of a decision this version does not know.
    pub failed: u64,
}

impl Counts {
    fn add(&mut self, decision: Outcome) {
        *self.get_mut(decision) += 1;
    }

    fn get_mut(&mut self, decision: Outcome) -> &mut u64 {
        match decision {
            Outcome::Allowed => &mut self.allowed,
            Outcome::Blocked => &mut self.blocked,
            Outcome::WouldBlock => &mut self.would_block,
            // An outcome this version does not know: neither let through nor refused.
            _ => &mut self.failed,
        }
    }

    fn get(&self, decision: Outcome) -> u64 {
        match decision {
            Outcome::Allowed => self.allowed,
            Outcome::Blocked => self.blocked,
            Outcome::WouldBlock => self.would_block,
            _ => self.failed,
        }
    }

    /// Attempts of every decision.
    pub fn total(&self) -> u64 {
        self.allowed + self.blocked + self.would_block + self.failed
    }

    fn refusals(&self) -> u64 {
        self.blocked + self.would_block
    }
}

/// One host:port of a run.
#[derive(Debug, Default)]
struct HostRow {
    counts: Counts,
    /// Reason → attempts, for refusals and failures (an allowed attempt's reason is `rule`).
    reasons: BTreeMap<String, u64>,
    kinds: BTreeSet<&'static str>,
}

/// Everything shown for one run.
#[derive(Debug, Default)]
struct RunView {
    id: Option<String>,
    policies: BTreeSet<String>,
    counts: Counts,
    /// (milliseconds since the epoch, decision) of every attempt with a readable time.
    times: Vec<(i64, Outcome)>,
    hosts: BTreeMap<(String, Option<u16>), HostRow>,
    limit: Option<u64>,
    end: Option<(u64, u64)>,
}

/// The page for everything in `log`. `sources` are the file names shown in the header.
pub fn render(log: &AuditLog, sources: &[String]) -> String {
    let runs = group_by_run(log);
    let mut total = Counts::default();
    let mut dropped = 0;
    for run in &runs {
        total.allowed += run.counts.allowed;
        total.blocked += run.counts.blocked;
        total.would_block += run.counts.would_block;
        total.failed += run.counts.failed;
        dropped += run.end.map_or(0, |(_, d)| d);
    }
    let mut page = String::with_capacity(16 * 1024);
    page.push_str(HEAD);
    page.push_str("<h1>egress-sandbox audit report</h1>\n<p class=\"sources\">From ");
    for (index, source) in sources.iter().enumerate() {
        if index > 0 {
            page.push_str(", ");
        }
        let _ = write!(page, "<code>{}</code>", text(source));
    }
    page.push_str("</p>\n<section class=\"totals\">\n<h2>All runs</h2>\n");
    let _ = writeln!(
        page,
        "<p>{} in {} run{}.</p>",
        plural(total.total(), "attempt"),
        runs.len(),
        if runs.len() == 1 { "" } else { "s" }
    );
    counts_table(&mut page, &total, dropped);
    if !log.skipped.is_empty() {
        let _ = writeln!(
            page,
            "<p class=\"warn\">{} not audit records and not counted (first: <code>{}:{}</code>).</p>",
            plural(log.skipped.len() as u64, "line"),
            text(&log.skipped[0].file.display().to_string()),
            log.skipped[0].line
        );
    }
    page.push_str("</section>\n");
    for run in &runs {
        run_section(&mut page, run);
    }
    page.push_str("</body>\n</html>\n");
    page
}

fn group_by_run(log: &AuditLog) -> Vec<RunView> {
    let mut order: Vec<Option<String>> = Vec::new();
    let mut runs: BTreeMap<Option<String>, RunView> = BTreeMap::new();
    for located in &log.entries {
        let id = located.record.run().map(str::to_owned);
        let run = runs.entry(id.clone()).or_insert_with(|| {
            order.push(id.clone());
            RunView {
                id: id.clone(),
                ..RunView::default()
            }
        });
        match &located.record {
            AuditLine::Attempt(attempt) => {
                run.counts.add(attempt.decision);
                if let Some(policy) = &attempt.policy {
                    run.policies.insert(policy.clone());
                }
                if let Some(at) = epoch_millis(&attempt.ts) {
                    run.times.push((at, attempt.decision));
                }
                let row = run
                    .hosts
                    .entry((attempt.host.clone(), attempt.port))
                    .or_default();
                row.counts.add(attempt.decision);
                if attempt.decision != Outcome::Allowed {
                    *row.reasons.entry(attempt.reason.to_string()).or_default() += 1;
                }
                row.kinds.insert(attempt.kind.as_str());
            }
            AuditLine::Limit(limit) => run.limit = Some(limit.limit),
            AuditLine::End(end) => run.end = Some((end.records, end.dropped)),
            // A kind of line this version draws nothing for: its run is still listed.
            _ => {}
        }
    }
    order
        .into_iter()
        .filter_map(|id| runs.remove(&id))
        .collect()
}

fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn counts_table(page: &mut String, counts: &Counts, dropped: u64) {
    page.push_str("<table class=\"counts\"><tr>");
    for decision in DECISIONS {
        let _ = write!(page, "<th class=\"{0}\">{0}</th>", decision.as_str());
    }
    page.push_str("<th>dropped</th></tr>\n<tr>");
    for decision in DECISIONS {
        let _ = write!(page, "<td>{}</td>", counts.get(decision));
    }
    let _ = writeln!(page, "<td>{dropped}</td></tr></table>");
}

fn run_section(page: &mut String, run: &RunView) {
    let id = run
        .id
        .as_deref()
        .map_or_else(|| "(no run id)".to_owned(), text);
    let _ = writeln!(
        page,
        "<section class=\"run\">\n<h2>Run <code>{id}</code></h2>"
    );
    if !run.policies.is_empty() {
        page.push_str("<p>Policy: ");
        for (index, policy) in run.policies.iter().enumerate() {
            if index > 0 {
                page.push_str(", ");
            }
            let _ = write!(page, "<code>{}</code>", text(policy));
        }
        page.push_str("</p>\n");
    }
    if let (Some(first), Some(last)) = (
        run.times.iter().map(|t| t.0).min(),
        run.times.iter().map(|t| t.0).max(),
    ) {
        let _ = writeln!(
            page,
            "<p>{} from {} to {} (UTC).</p>",
            plural(run.counts.total(), "attempt"),
            clock(first),
            clock(last)
        );
    }
    counts_table(page, &run.counts, run.end.map_or(0, |(_, d)| d));
    if let Some(limit) = run.limit {
        let _ = writeln!(
            page,
            "<p class=\"warn\">The audit limit of {limit} records was reached: later attempts were counted, not written.</p>"
        );
    }
    match run.end {
        Some((_, dropped)) if dropped > 0 => {
            let _ = writeln!(
                page,
                "<p class=\"warn\">{} counted but not written (audit limit or DNS rate).</p>",
                plural(dropped, "attempt")
            );
        }
        Some(_) => {}
        None if run.id.is_some() => page.push_str(
            "<p class=\"note\">No end record: the run was cut short, is still going, or the log is incomplete (<code>audit verify</code> checks).</p>\n",
        ),
        None => {}
    }
    timeline(page, &run.times);
    hosts_table(page, run);
    page.push_str("</section>\n");
}

/// `HH:MM:SS.mmm` of an epoch time in milliseconds.
fn clock(ms: i64) -> String {
    let Ok(ms) = u64::try_from(ms) else {
        return "?".to_owned();
    };
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    let full = humantime::format_rfc3339_millis(at).to_string();
    // 2026-11-29T18:40:43.123Z → 2026-11-29 18:40:43.123
    full.trim_end_matches('Z').replacen('T', " ", 1)
}

const BAR_AREA_WIDTH: i64 = 760;
const BAR_AREA_HEIGHT: i64 = 120;
const LEFT: i64 = 36;
const TOP: i64 = 8;

/// Attempts per bucket (one second, or wider for long runs), stacked by decision.
fn timeline(page: &mut String, times: &[(i64, Outcome)]) {
    let (Some(first), Some(last)) = (
        times.iter().map(|t| t.0).min(),
        times.iter().map(|t| t.0).max(),
    ) else {
        page.push_str("<p class=\"note\">No attempts with a readable time.</p>\n");
        return;
    };
    let start = first.div_euclid(1000);
    let seconds = last.div_euclid(1000) - start + 1;
    let bucket_seconds = (seconds + MAX_BUCKETS - 1) / MAX_BUCKETS;
    let buckets = usize::try_from((seconds + bucket_seconds - 1) / bucket_seconds).unwrap_or(1);
    let mut stacks = vec![Counts::default(); buckets];
    for &(at, decision) in times {
        let index = usize::try_from((at.div_euclid(1000) - start) / bucket_seconds).unwrap_or(0);
        stacks[index.min(buckets - 1)].add(decision);
    }
    let peak = stacks.iter().map(Counts::total).max().unwrap_or(1).max(1);
    let bucket_words = if bucket_seconds == 1 {
        "second".to_owned()
    } else {
        format!("{bucket_seconds} seconds")
    };
    let _ = writeln!(
        page,
        "<h3>Attempts per {bucket_words}</h3>\n<svg class=\"timeline\" role=\"img\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">\n<title>Attempts per {bucket_words} by decision</title>",
        LEFT + BAR_AREA_WIDTH + 8,
        TOP + BAR_AREA_HEIGHT + 24,
        LEFT + BAR_AREA_WIDTH + 8,
        TOP + BAR_AREA_HEIGHT + 24,
    );
    let base = TOP + BAR_AREA_HEIGHT;
    let _ = writeln!(
        page,
        "<line x1=\"{LEFT}\" y1=\"{base}\" x2=\"{}\" y2=\"{base}\" class=\"axis\"/><line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{base}\" class=\"axis\"/>",
        LEFT + BAR_AREA_WIDTH
    );
    let _ = writeln!(
        page,
        "<text x=\"{}\" y=\"{}\" class=\"label\" text-anchor=\"end\">{peak}</text><text x=\"{}\" y=\"{base}\" class=\"label\" text-anchor=\"end\">0</text>",
        LEFT - 4,
        TOP + 10,
        LEFT - 4
    );
    let slot = BAR_AREA_WIDTH as f64 / buckets as f64;
    let bar_width = (slot * 0.8).clamp(1.0, 24.0);
    for (index, stack) in stacks.iter().enumerate() {
        if stack.total() == 0 {
            continue;
        }
        let x = LEFT as f64 + slot * index as f64 + (slot - bar_width) / 2.0;
        let mut y = base as f64;
        for decision in DECISIONS {
            let count = stack.get(decision);
            if count == 0 {
                continue;
            }
            let height = BAR_AREA_HEIGHT as f64 * count as f64 / peak as f64;
            y -= height;
            let second = (start + index as i64 * bucket_seconds) * 1000;
            let _ = writeln!(
                page,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bar_width:.1}\" height=\"{height:.1}\" class=\"{}\"><title>{}: {count} {}</title></rect>",
                decision.as_str(),
                clock(second),
                decision.as_str()
            );
        }
    }
    let _ = writeln!(
        page,
        "<text x=\"{LEFT}\" y=\"{}\" class=\"label\">{}</text><text x=\"{}\" y=\"{}\" class=\"label\" text-anchor=\"end\">{}</text>\n</svg>",
        base + 16,
        clock(start * 1000),
        LEFT + BAR_AREA_WIDTH,
        base + 16,
        clock(last)
    );
    page.push_str("<p class=\"legend\">");
    for decision in DECISIONS {
        let _ = write!(
            page,
            "<span class=\"swatch {0}\"></span>{0} ",
            decision.as_str()
        );
    }
    page.push_str("</p>\n");
}

fn hosts_table(page: &mut String, run: &RunView) {
    let mut rows: Vec<(&(String, Option<u16>), &HostRow)> = run.hosts.iter().collect();
    // Refusals first (most refused first), then failures, then the rest by volume.
    rows.sort_by(|a, b| {
        b.1.counts
            .refusals()
            .cmp(&a.1.counts.refusals())
            .then(b.1.counts.failed.cmp(&a.1.counts.failed))
            .then(b.1.counts.total().cmp(&a.1.counts.total()))
            .then(a.0.cmp(b.0))
    });
    page.push_str(
        "<h3>Hosts</h3>\n<table class=\"hosts\">\n<tr><th>host</th><th>port</th><th>kind</th>",
    );
    for decision in DECISIONS {
        let _ = write!(page, "<th class=\"{0}\">{0}</th>", decision.as_str());
    }
    page.push_str("<th>reasons</th></tr>\n");
    for ((host, port), row) in rows.iter().take(MAX_HOST_ROWS) {
        let class = if row.counts.refusals() > 0 {
            " class=\"refused\""
        } else {
            ""
        };
        let port = port.map_or_else(|| "-".to_owned(), |p| p.to_string());
        let kinds: Vec<&str> = row.kinds.iter().copied().collect();
        let _ = write!(
            page,
            "<tr{class}><td class=\"host\">{}</td><td>{port}</td><td>{}</td>",
            text(host),
            kinds.join(", ")
        );
        for decision in DECISIONS {
            let count = row.counts.get(decision);
            if count == 0 {
                page.push_str("<td></td>");
            } else {
                let _ = write!(page, "<td>{count}</td>");
            }
        }
        let reasons: Vec<String> = row
            .reasons
            .iter()
            .map(|(reason, count)| format!("{} ×{count}", text(reason)))
            .collect();
        let _ = writeln!(page, "<td>{}</td></tr>", reasons.join(", "));
    }
    page.push_str("</table>\n");
    if rows.len() > MAX_HOST_ROWS {
        let _ = writeln!(
            page,
            "<p class=\"note\">{} more host:port pairs not shown (none refused more than the last row).</p>",
            rows.len() - MAX_HOST_ROWS
        );
    }
}

const HEAD: &str = r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>egress-sandbox audit report</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1d1d1f; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
code { font: 13px ui-monospace, monospace; background: #f3f3f5; padding: 0 3px; word-break: break-all; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid #d8d8dc; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f3f3f5; font-weight: 600; }
td.host { text-align: left; font-family: ui-monospace, monospace; word-break: break-all; max-width: 420px; }
table.hosts td:nth-child(3), table.hosts td:last-child, table.hosts th:first-child, table.hosts th:nth-child(3), table.hosts th:last-child { text-align: left; }
tr.refused td.host { color: #b3261e; font-weight: 600; }
th.blocked { color: #b3261e; } th.would_block { color: #a15c00; } th.failed { color: #555; } th.allowed { color: #1b6e2c; }
.warn { color: #a15c00; font-weight: 600; }
.note, .sources { color: #555; }
svg.timeline { display: block; max-width: 100%; height: auto; }
svg .axis { stroke: #888; stroke-width: 1; }
svg .label { font: 11px system-ui, sans-serif; fill: #555; }
rect.blocked, .swatch.blocked { fill: #d93025; background: #d93025; }
rect.would_block, .swatch.would_block { fill: #f29900; background: #f29900; }
rect.failed, .swatch.failed { fill: #9aa0a6; background: #9aa0a6; }
rect.allowed, .swatch.allowed { fill: #34a853; background: #34a853; }
.swatch { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 12px; }
</style>
</head>
<body>
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::read_into;
    use std::path::Path;

    fn record(run: &str, host: &str, decision: &str, ts: &str) -> String {
        serde_json::json!({
            "v": 1, "ts": ts, "run": run, "policy": "p", "kind": "connect",
            "client": null, "host": host, "port": 443, "decision": decision,
            "reason": if decision == "allowed" { "rule" } else { "not_allowed" },
            "rule": null, "addr": null, "bytes_up": 0, "bytes_down": 0, "duration_ms": 0
        })
        .to_string()
    }

    fn page(lines: &[String]) -> String {
        let mut log = AuditLog::default();
        read_into(Path::new("a.log"), lines.join("\n").as_bytes(), &mut log).unwrap();
        render(&log, &["a.log".to_owned()])
    }

    #[test]
    fn hostile_hosts_are_escaped_and_control_characters_made_visible() {
        let html = page(&[record(
            "r-<b>",
            "<script>alert(1)</script>\u{1b}[31m\u{202e}x",
            "blocked",
            "2026-11-29T18:40:43.123Z",
        )]);
        assert!(!html.contains("<script>"));
        assert!(!html.contains("<b>"));
        assert!(!html.contains('\u{1b}'));
        assert!(!html.contains('\u{202e}'));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[31m\\u202ex"));
        assert!(html.contains("r-&lt;b&gt;"));
    }

    #[test]
    fn refusals_come_first_and_each_run_has_its_own_section() {
        let html = page(&[
            record(
                "r-1",
                "ok.example.org",
                "allowed",
                "2026-11-29T18:40:43.000Z",
            ),
            record(
                "r-1",
                "ok.example.org",
                "allowed",
                "2026-11-29T18:40:43.500Z",
            ),
            record(
                "r-1",
                "bad.example.org",
                "blocked",
                "2026-11-29T18:40:45.000Z",
            ),
            record(
                "r-2",
                "other.example.org",
                "would_block",
                "2026-11-29T18:41:00.000Z",
            ),
        ]);
        assert_eq!(html.matches("<section class=\"run\">").count(), 2);
        let bad = html.find("bad.example.org").unwrap();
        let ok = html.find("ok.example.org").unwrap();
        assert!(
            bad < ok,
            "the refused host is listed before the allowed one"
        );
        // One second with two allowed attempts, one with a blocked one: two bars in run 1.
        let run_one = &html[..html.find("r-2").unwrap()];
        assert_eq!(run_one.matches("<rect").count(), 2);
        assert!(run_one.contains("<title>2026-11-29 18:40:43.000: 2 allowed</title>"));
    }

    #[test]
    fn a_long_run_gets_wider_buckets_not_more_bars() {
        let mut lines = Vec::new();
        for minute in 0..59 {
            lines.push(record(
                "r-1",
                "a.example.org",
                "allowed",
                &format!("2026-11-29T18:{minute:02}:00.000Z"),
            ));
        }
        let html = page(&lines);
        assert!(html.contains("Attempts per 6 seconds"));
        assert_eq!(html.matches("<rect").count(), 59);
    }
}
