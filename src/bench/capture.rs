//! Warnings a benchmark's calls log, kept as results of those calls instead of lines on stderr:
//! a thread running a call is marked with that call's list, a layer puts every WARN and ERROR
//! event of a marked thread into it, and a filter keeps those events off the printed log (where
//! they would interleave with the progress bar and read as failures of the run). The report
//! lists them per scenario, saying which the scenario's scripted faults explain.

use std::cell::RefCell;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};

/// One call's warnings, shared by the threads that run it.
pub type Warnings = Arc<Mutex<Vec<String>>>;

thread_local! {
    static SINK: RefCell<Option<Warnings>> = const { RefCell::new(None) };
}

/// Marks this thread as running the call whose warnings go to `sink` (`None`: unmarks it).
pub fn mark_thread(sink: Option<Warnings>) {
    SINK.with(|s| *s.borrow_mut() = sink);
}

fn capturing() -> bool {
    SINK.with(|s| s.borrow().is_some())
}

fn kept(meta: &Metadata<'_>) -> bool {
    meta.is_event() && *meta.level() <= Level::WARN
}

/// The layer that keeps the WARN and ERROR events of marked threads. Like [`Printed`], it
/// carries the log filter's level hint (it sees nothing that filter drops).
#[derive(Clone, Copy, Debug)]
pub struct Capture {
    upto: Option<LevelFilter>,
}

impl Capture {
    /// `upto`: the log filter's `max_level_hint` (`None`: it did not say).
    pub fn upto(upto: Option<LevelFilter>) -> Self {
        Capture { upto }
    }
}

impl<S: Subscriber> Layer<S> for Capture {
    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.upto
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if !kept(event.metadata()) {
            return;
        }
        SINK.with(|s| {
            if let Some(sink) = &*s.borrow() {
                let mut line = Line::default();
                event.record(&mut line);
                if let Ok(mut v) = sink.lock() {
                    v.push(line.text());
                }
            }
        });
    }
}

/// The printed log's filter: everything but what [`Capture`] keeps.
///
/// It carries the most verbose level the log's own filter lets through: a per-layer filter
/// without that hint makes the whole subscriber's hint "anything", and then every `log` record
/// of the dependencies (tungstenite's per-frame `trace!`) reaches the subscriber only to be
/// dropped there, a few per cent of an accelerated benchmark's CPU.
#[derive(Clone, Copy, Debug)]
pub struct Printed {
    upto: Option<LevelFilter>,
}

impl Printed {
    /// `upto`: the log filter's `max_level_hint` (`None`: it did not say).
    pub fn upto(upto: Option<LevelFilter>) -> Self {
        Printed { upto }
    }
}

impl<S> Filter<S> for Printed {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        !(kept(meta) && capturing())
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.upto
    }

    fn callsite_enabled(&self, _: &'static Metadata<'static>) -> Interest {
        // Decided per event: the same line is printed on one thread and kept on another.
        Interest::sometimes()
    }
}

/// An event as `message field=value …`.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Line {
    fn text(self) -> String {
        if self.fields.is_empty() {
            self.message
        } else {
            format!("{}{}", self.message, self.fields)
        }
    }
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn a_marked_thread_keeps_its_warnings() {
        let printed = Arc::new(Mutex::new(0usize));
        let p = printed.clone();
        struct Count(Arc<Mutex<usize>>);
        impl<S: Subscriber> Layer<S> for Count {
            fn on_event(&self, _: &Event<'_>, _: Context<'_, S>) {
                *self.0.lock().unwrap() += 1;
            }
        }
        let subscriber = tracing_subscriber::registry()
            .with(Count(p).with_filter(Printed::upto(None)))
            .with(Capture::upto(None));
        let sink: Warnings = Arc::default();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(code = 1011, "model session closed");
            mark_thread(Some(sink.clone()));
            tracing::warn!(code = 1011, "model session closed");
            tracing::info!("not kept");
            mark_thread(None);
        });
        assert_eq!(
            *printed.lock().unwrap(),
            2,
            "the unmarked warning and the info"
        );
        assert_eq!(
            *sink.lock().unwrap(),
            ["model session closed code=1011".to_owned()]
        );
    }

    #[test]
    fn the_subscriber_keeps_the_log_filters_level_hint() {
        let filter = tracing_subscriber::EnvFilter::new("warn");
        let hint = filter.max_level_hint();
        let subscriber = tracing_subscriber::registry()
            .with(filter)
            .with(tracing_subscriber::fmt::layer().with_filter(Printed::upto(hint)))
            .with(Capture::upto(hint));
        assert_eq!(subscriber.max_level_hint(), Some(LevelFilter::WARN));
        let unhinted = tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new("warn"))
            .with(tracing_subscriber::fmt::layer().with_filter(Printed::upto(None)))
            .with(Capture::upto(None));
        assert_eq!(unhinted.max_level_hint(), None);
    }
}
