//! Audit logs drawn for a person: one self-contained HTML page, readable from a file with no
//! server — inline CSS and SVG, no script, nothing fetched (the page's Content-Security-Policy
//! forbids it, so even a mistake here could not make the page load anything).
//!
//! Per run (a file may hold several): totals, a timeline of attempts per second stacked by
//! decision, and the hosts with their counts and reasons, refusals first. Every text that
//! came from a log (hosts, run ids, policy names, reasons, file names) is untrusted — the
//! sandbox chose the hosts — so it goes through `shown`: control and bidi characters made
//! visible; the template (maud) HTML-escapes every text it inserts.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use egress_core::audit::{AuditLine, Outcome, epoch_millis};
use maud::{DOCTYPE, Markup, PreEscaped, html};

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

/// Untrusted text as a person may see it: control and bidi characters as visible escapes.
/// The template escapes it for HTML (`& < > "`), as it does every text it is given.
fn shown(raw: &str) -> Cow<'_, str> {
    egress_core::text::visible(raw)
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
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="Content-Security-Policy"
                    content="default-src 'none'; style-src 'unsafe-inline'";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "egress-sandbox audit report" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "egress-sandbox audit report" }
                p.sources {
                    "From "
                    @for (index, source) in sources.iter().enumerate() {
                        @if index > 0 { ", " }
                        code { (shown(source)) }
                    }
                }
                section.totals {
                    h2 { "All runs" }
                    p {
                        (plural(total.total(), "attempt")) " in " (runs.len()) " run"
                        @if runs.len() != 1 { "s" } "."
                    }
                    (counts_table(&total, dropped))
                    @if let Some(first) = log.skipped.first() {
                        p.warn {
                            (plural(log.skipped.len() as u64, "line"))
                            " not audit records and not counted (first: "
                            code { (shown(&first.file.display().to_string())) ":" (first.line) }
                            ")."
                        }
                    }
                }
                @for run in &runs { (run_section(run)) }
            }
        }
    };
    let mut page = page.into_string();
    page.push('\n');
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

fn counts_table(counts: &Counts, dropped: u64) -> Markup {
    html! {
        table.counts {
            tr {
                @for decision in DECISIONS { th class=(decision.as_str()) { (decision.as_str()) } }
                th { "dropped" }
            }
            tr {
                @for decision in DECISIONS { td { (counts.get(decision)) } }
                td { (dropped) }
            }
        }
    }
}

fn run_section(run: &RunView) -> Markup {
    let span = run
        .times
        .iter()
        .map(|t| t.0)
        .min()
        .zip(run.times.iter().map(|t| t.0).max());
    html! {
        section.run {
            h2 { "Run " code { (run.id.as_deref().map_or("(no run id)".into(), shown)) } }
            @if !run.policies.is_empty() {
                p {
                    "Policy: "
                    @for (index, policy) in run.policies.iter().enumerate() {
                        @if index > 0 { ", " }
                        code { (shown(policy)) }
                    }
                }
            }
            @if let Some((first, last)) = span {
                p {
                    (plural(run.counts.total(), "attempt")) " from " (clock(first)) " to "
                    (clock(last)) " (UTC)."
                }
            }
            (counts_table(&run.counts, run.end.map_or(0, |(_, d)| d)))
            @if let Some(limit) = run.limit {
                p.warn {
                    "The audit limit of " (limit)
                    " records was reached: later attempts were counted, not written."
                }
            }
            @match run.end {
                Some((_, dropped)) if dropped > 0 => {
                    p.warn {
                        (plural(dropped, "attempt"))
                        " counted but not written (audit limit or DNS rate)."
                    }
                }
                None if run.id.is_some() => {
                    p.note {
                        "No end record: the run was cut short, is still going, or the log is \
                         incomplete (" code { "audit verify" } " checks)."
                    }
                }
                _ => {}
            }
            (timeline(&run.times))
            (hosts_table(run))
        }
    }
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
fn timeline(times: &[(i64, Outcome)]) -> Markup {
    let (Some(first), Some(last)) = (
        times.iter().map(|t| t.0).min(),
        times.iter().map(|t| t.0).max(),
    ) else {
        return html! { p.note { "No attempts with a readable time." } };
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
    let (width, height) = (LEFT + BAR_AREA_WIDTH + 8, TOP + BAR_AREA_HEIGHT + 24);
    let base = TOP + BAR_AREA_HEIGHT;
    let slot = BAR_AREA_WIDTH as f64 / buckets as f64;
    let bar_width = (slot * 0.8).clamp(1.0, 24.0);
    // Each decision's part of each bucket's bar, stacked from the axis up.
    let mut bars = Vec::new();
    for (index, stack) in stacks.iter().enumerate() {
        let x = LEFT as f64 + slot * index as f64 + (slot - bar_width) / 2.0;
        let second = (start + index as i64 * bucket_seconds) * 1000;
        let mut y = base as f64;
        for decision in DECISIONS {
            let count = stack.get(decision);
            if count > 0 {
                let height = BAR_AREA_HEIGHT as f64 * count as f64 / peak as f64;
                y -= height;
                bars.push((x, y, height, decision, second, count));
            }
        }
    }
    html! {
        h3 { "Attempts per " (bucket_words) }
        svg.timeline role="img" viewBox={ "0 0 " (width) " " (height) } width=(width)
            height=(height) xmlns="http://www.w3.org/2000/svg" {
            title { "Attempts per " (bucket_words) " by decision" }
            line x1=(LEFT) y1=(base) x2=(LEFT + BAR_AREA_WIDTH) y2=(base) class="axis" {}
            line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(base) class="axis" {}
            text x=(LEFT - 4) y=(TOP + 10) class="label" text-anchor="end" { (peak) }
            text x=(LEFT - 4) y=(base) class="label" text-anchor="end" { "0" }
            @for (x, y, height, decision, second, count) in bars {
                rect x=(format!("{x:.1}")) y=(format!("{y:.1}")) width=(format!("{bar_width:.1}"))
                    height=(format!("{height:.1}")) class=(decision.as_str()) {
                    title { (clock(second)) ": " (count) " " (decision.as_str()) }
                }
            }
            text x=(LEFT) y=(base + 16) class="label" { (clock(start * 1000)) }
            text x=(LEFT + BAR_AREA_WIDTH) y=(base + 16) class="label" text-anchor="end" {
                (clock(last))
            }
        }
        p.legend {
            @for decision in DECISIONS {
                span class={ "swatch " (decision.as_str()) } {} (decision.as_str()) " "
            }
        }
    }
}

fn hosts_table(run: &RunView) -> Markup {
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
    html! {
        h3 { "Hosts" }
        table.hosts {
            tr {
                th { "host" } th { "port" } th { "kind" }
                @for decision in DECISIONS { th class=(decision.as_str()) { (decision.as_str()) } }
                th { "reasons" }
            }
            @for ((host, port), row) in rows.iter().take(MAX_HOST_ROWS) {
                tr class=[(row.counts.refusals() > 0).then_some("refused")] {
                    td.host { (shown(host)) }
                    td { @match port { Some(port) => (port), None => "-" } }
                    td { (row.kinds.iter().copied().collect::<Vec<_>>().join(", ")) }
                    @for decision in DECISIONS {
                        td { @match row.counts.get(decision) { 0 => {}, count => (count) } }
                    }
                    td {
                        @for (index, (reason, count)) in row.reasons.iter().enumerate() {
                            @if index > 0 { ", " }
                            (shown(reason)) " ×" (count)
                        }
                    }
                }
            }
        }
        @if rows.len() > MAX_HOST_ROWS {
            p.note {
                (rows.len() - MAX_HOST_ROWS)
                " more host:port pairs not shown (none refused more than the last row)."
            }
        }
    }
}

/// The page's style sheet: inline, as the Content-Security-Policy allows nothing else.
const STYLE: &str = r#"
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

    /// Every text a log brings is escaped wherever the page shows it: the template escapes
    /// what it inserts, so no field can open an element.
    #[test]
    fn every_text_from_a_log_is_escaped() {
        let mut attempt: serde_json::Value = serde_json::from_str(&record(
            "r<i>1",
            "h<i>.example",
            "blocked",
            "2026-11-29T18:40:43.123Z",
        ))
        .unwrap();
        attempt["policy"] = "p<i>\"q".into();
        attempt["reason"] = "new<i>reason".into();
        let lines = [attempt.to_string(), "<i>not a record".to_owned()];
        let mut log = AuditLog::default();
        read_into(Path::new("<i>.log"), lines.join("\n").as_bytes(), &mut log).unwrap();
        let html = render(&log, &["<i>.log".to_owned()]);
        assert!(!html.contains("<i>"), "{html}");
        for escaped in [
            "r&lt;i&gt;1",
            "h&lt;i&gt;.example",
            "p&lt;i&gt;&quot;q",
            "new&lt;i&gt;reason ×1",
            "<code>&lt;i&gt;.log</code>",
            "<code>&lt;i&gt;.log:2</code>",
        ] {
            assert!(html.contains(escaped), "{escaped} not in {html}");
        }
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
