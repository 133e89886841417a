//! `GET /metrics`: Prometheus text (OpenMetrics) through `prometheus-client`.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathLabel {
    path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    decision: String,
    reason: String,
}

/// The daemon's counters; cheap to update from every run.
pub(crate) struct Metrics {
    registry: Mutex<Registry>,
    runs: Family<StatusLabel, Counter>,
    attempts: Family<AttemptLabels, Counter>,
    run_seconds: Histogram,
    setup_seconds: Histogram,
    active: Gauge,
    tearing_down: Gauge,
    pool_ready: Gauge,
    starts: Family<PathLabel, Counter>,
    refused_busy: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("egress_sandbox");
        let runs = Family::<StatusLabel, Counter>::default();
        registry.register(
            "runs",
            "Runs finished, by report status (setup_failed: refused by Docker after the request was accepted)",
            runs.clone(),
        );
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "attempts",
            "Egress attempts seen in audit records, by decision and reason",
            attempts.clone(),
        );
        // 50 ms … ~100 s.
        let run_seconds = Histogram::new(exponential_buckets(0.05, 2.0, 12));
        registry.register(
            "run_duration_seconds",
            "How long commands ran (sandbox start to end)",
            run_seconds.clone(),
        );
        let setup_seconds = Histogram::new(exponential_buckets(0.01, 2.0, 12));
        registry.register(
            "setup_duration_seconds",
            "From the request to the command being let go",
            setup_seconds.clone(),
        );
        let active = Gauge::default();
        registry.register(
            "runs_active",
            "Runs accepted and not yet answered",
            active.clone(),
        );
        let tearing_down = Gauge::default();
        registry.register(
            "runs_tearing_down",
            "Runs answered whose objects (containers, host directories, a run network if any) are being removed",
            tearing_down.clone(),
        );
        let pool_ready = Gauge::default();
        registry.register(
            "pool_slots_ready",
            "Warm slots ready to be claimed (proxy and gated sandbox started, doors directory made)",
            pool_ready.clone(),
        );
        let starts = Family::<PathLabel, Counter>::default();
        registry.register(
            "run_starts",
            "Runs accepted, by set-up path: warm (a pool slot) or cold",
            starts.clone(),
        );
        let refused_busy = Counter::default();
        registry.register(
            "runs_refused_busy",
            "Run requests refused (503) because --max-runs runs were live",
            refused_busy.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            refused_busy,
            pool_ready,
            starts,
            runs,
            attempts,
            run_seconds,
            setup_seconds,
            active,
            tearing_down,
        }
    }

    pub(crate) fn run_finished(&self, status: &str, run_seconds: Option<f64>) {
        self.runs
            .get_or_create(&StatusLabel {
                status: status.to_string(),
            })
            .inc();
        if let Some(seconds) = run_seconds {
            self.run_seconds.observe(seconds);
        }
    }

    /// One accepted run, set up in a warm slot or cold.
    pub(crate) fn run_start(&self, warm: bool) {
        let path = if warm { "warm" } else { "cold" };
        self.starts
            .get_or_create(&PathLabel { path: path.into() })
            .inc();
    }

    pub(crate) fn pool_ready(&self) -> &Gauge {
        &self.pool_ready
    }

    pub(crate) fn setup_done(&self, seconds: f64) {
        self.setup_seconds.observe(seconds);
    }

    /// Counts one audit record line (records without a decision, such as `end`, are not
    /// attempts).
    pub(crate) fn audit_record(&self, line: &[u8]) {
        #[derive(serde::Deserialize)]
        struct Attempt {
            decision: Option<String>,
            reason: Option<String>,
        }
        if let Ok(Attempt {
            decision: Some(decision),
            reason,
        }) = serde_json::from_slice::<Attempt>(line)
        {
            self.attempts
                .get_or_create(&AttemptLabels {
                    decision,
                    reason: reason.unwrap_or_default(),
                })
                .inc();
        }
    }

    pub(crate) fn active(&self) -> &Gauge {
        &self.active
    }

    pub(crate) fn tearing_down(&self) -> &Gauge {
        &self.tearing_down
    }

    pub(crate) fn refused_busy(&self) -> &Counter {
        &self.refused_busy
    }

    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().expect("metrics registry lock");
        prometheus_client::encoding::text::encode(&mut text, &registry)
            .expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_attempts_are_counted_by_their_labels() {
        let metrics = Metrics::new();
        metrics.run_finished("exited", Some(0.2));
        metrics.run_finished("exited", Some(0.3));
        metrics.run_finished("timeout", Some(2.0));
        metrics.audit_record(br#"{"decision":"blocked","reason":"not_allowed","host":"x"}"#);
        metrics.audit_record(br#"{"kind":"end","records":1}"#);
        metrics.setup_done(0.4);
        let text = metrics.encode();
        assert!(
            text.contains(r#"egress_sandbox_runs_total{status="exited"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"egress_sandbox_runs_total{status="timeout"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"egress_sandbox_attempts_total{decision="blocked",reason="not_allowed"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains("egress_sandbox_run_duration_seconds_count 3"),
            "{text}"
        );
        assert!(
            text.contains("egress_sandbox_setup_duration_seconds_count 1"),
            "{text}"
        );
    }
}
