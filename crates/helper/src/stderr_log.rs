//! The helper's diagnostics: `tracing` warnings and errors, one line each on stderr.
//!
//! The `egress-sandbox` command logs through `tracing-subscriber` at `warn` unless told
//! otherwise; the helper is never told otherwise (the proxy container's environment is empty),
//! so this small subscriber says the same events without compiling a formatter: the
//! proxy's stderr is what the library shows when the proxy fails to start.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Installs the subscriber for this process, unless one is installed already.
pub fn init() {
    let _ = tracing::subscriber::set_global_default(StderrWarnings::default());
}

/// Writes events of level WARN and ERROR to stderr; spans are not kept.
#[derive(Default)]
pub struct StderrWarnings {
    next_span: AtomicU64,
}

impl StderrWarnings {
    /// The line an event is written as: `WARN message key=value …`.
    pub fn line(event: &Event<'_>) -> String {
        let mut fields = Fields::default();
        event.record(&mut fields);
        format!(
            "{:>5} {}{}",
            event.metadata().level(),
            fields.message,
            fields.others
        )
    }
}

impl Subscriber for StderrWarnings {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::WARN)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        eprintln!(
            "{}",
            egress_core::text::visible(&StderrWarnings::line(event))
        );
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// An event's fields: the message as is, the others as ` name=value` after it.
#[derive(Default)]
struct Fields {
    message: String,
    others: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.others, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.others, " {}={value:?}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// [`StderrWarnings`]' choices, with the lines kept instead of written.
    #[derive(Default, Clone)]
    struct Kept {
        inner: Arc<StderrWarnings>,
        lines: Arc<Mutex<Vec<String>>>,
    }

    impl Subscriber for Kept {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            self.inner.enabled(metadata)
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            self.inner.new_span(span)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            self.lines.lock().unwrap().push(StderrWarnings::line(event));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn warnings_are_one_line_with_their_fields_and_info_is_not_said() {
        let kept = Kept::default();
        tracing::subscriber::with_default(kept.clone(), || {
            let error = "refused";
            tracing::info!("shutting down");
            tracing::warn!(%error, port = 5, "accept failed");
            tracing::error!("gone");
        });
        assert_eq!(
            *kept.lines.lock().unwrap(),
            [" WARN accept failed error=refused port=5", "ERROR gone"]
        );
    }
}
