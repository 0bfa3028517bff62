//! The agent's own log records, held for `agent.monitoring.logs` to ship
//! (Elastic's `logs-elastic_agent-*`). A tracing layer copies each record
//! here while a consumer has the tap open; otherwise it costs one atomic
//! load. The tap is bounded: when the consumer falls behind (its output is
//! down), the oldest records go and are counted, so logging never blocks
//! and never grows memory.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

/// How many records wait at most.
pub const CAPACITY: usize = 4096;
/// The longest message kept of one record, in bytes.
const MESSAGE_LIMIT: usize = 8 << 10;

/// One log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// When it was logged, µs since the epoch.
    pub at_us: i64,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub level: &'static str,
    /// The module that logged it (`log.logger`).
    pub target: String,
    /// The message, then its other fields as `key=value`.
    pub message: String,
}

/// The records waiting for their consumer.
pub struct LogTap {
    open: AtomicBool,
    waiting: Mutex<VecDeque<Record>>,
    dropped: AtomicU64,
    arrived: tokio::sync::Notify,
}

static TAP: LogTap = LogTap {
    open: AtomicBool::new(false),
    waiting: Mutex::new(VecDeque::new()),
    dropped: AtomicU64::new(0),
    arrived: tokio::sync::Notify::const_new(),
};

/// The process's tap.
pub fn tap() -> &'static LogTap {
    &TAP
}

impl LogTap {
    /// Starts keeping records (the consumer started).
    pub fn open(&self) {
        self.open.store(true, Ordering::Release);
    }

    /// Stops keeping records and forgets those waiting.
    #[cfg(test)]
    pub fn close(&self) {
        self.open.store(false, Ordering::Release);
        if let Ok(mut w) = self.waiting.lock() {
            w.clear();
        }
    }

    /// Keeps `record` if the tap is open, the oldest going when full.
    pub fn push(&self, record: Record) {
        if !self.open.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut w) = self.waiting.lock() {
            if w.len() >= CAPACITY {
                w.pop_front();
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            w.push_back(record);
        }
        self.arrived.notify_one();
    }

    /// Takes the records waiting, and how many were dropped since the
    /// last call.
    pub fn take(&self) -> (Vec<Record>, u64) {
        let records = self
            .waiting
            .lock()
            .map(|mut w| w.drain(..).collect())
            .unwrap_or_default();
        (records, self.dropped.swap(0, Ordering::Relaxed))
    }

    /// Waits until a record arrives (or one arrived since the last wait).
    pub async fn arrived(&self) {
        self.arrived.notified().await;
    }
}

/// The tracing layer that feeds [`tap`].
pub struct TapLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for TapLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        if !TAP.open.load(Ordering::Acquire) {
            return;
        }
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut message = fields.message;
        if !fields.rest.is_empty() {
            if !message.is_empty() {
                message.push(' ');
            }
            message.push_str(&fields.rest);
        }
        cut(&mut message, MESSAGE_LIMIT);
        TAP.push(Record {
            at_us: now_us(),
            level: level_name(*meta.level()),
            target: meta.target().to_string(),
            message,
        });
    }
}

/// Now, in µs since the epoch.
fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn level_name(level: tracing::Level) -> &'static str {
    match level {
        tracing::Level::ERROR => "error",
        tracing::Level::WARN => "warn",
        tracing::Level::INFO => "info",
        tracing::Level::DEBUG => "debug",
        tracing::Level::TRACE => "trace",
    }
}

fn cut(text: &mut String, limit: usize) {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

/// A record's `message` and its other fields.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.pair(field, format_args!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            self.pair(field, format_args!("{value:?}"));
        }
    }
}

impl Fields {
    fn pair(&mut self, field: &Field, value: std::fmt::Arguments<'_>) {
        if !self.rest.is_empty() {
            self.rest.push(' ');
        }
        let _ = write!(self.rest, "{}={value}", field.name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::prelude::*;

    #[test]
    fn records_are_kept_only_while_open_and_the_oldest_go_when_full() {
        let tap = LogTap {
            open: AtomicBool::new(false),
            waiting: Mutex::new(VecDeque::new()),
            dropped: AtomicU64::new(0),
            arrived: tokio::sync::Notify::new(),
        };
        let record = |i: usize| Record {
            at_us: i as i64,
            level: "info",
            target: "t".into(),
            message: format!("m{i}"),
        };
        tap.push(record(0));
        assert!(tap.take().0.is_empty(), "closed: nothing kept");
        tap.open();
        for i in 0..CAPACITY + 3 {
            tap.push(record(i));
        }
        let (records, dropped) = tap.take();
        assert_eq!(records.len(), CAPACITY);
        assert_eq!(dropped, 3);
        assert_eq!(records[0].message, "m3");
        assert_eq!(tap.take(), (Vec::new(), 0));
    }

    #[test]
    fn the_layer_keeps_level_target_message_and_fields() {
        let subscriber = tracing_subscriber::registry().with(TapLayer);
        tap().open();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(input = "audit-log", attempt = 3, "output refused the batch");
        });
        let (records, _) = tap().take();
        tap().close();
        let r = records
            .iter()
            .find(|r| r.message.starts_with("output refused the batch"))
            .expect("the record");
        assert_eq!(r.level, "warn");
        assert_eq!(
            r.message,
            "output refused the batch input=\"audit-log\" attempt=3"
        );
        assert!(r.target.contains("logtap"), "{}", r.target);
    }
}
