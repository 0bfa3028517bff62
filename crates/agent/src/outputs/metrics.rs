//! Output metrics on `prometheus-client`, every family labelled with the
//! output's name.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::health::HealthHandle;

/// Bounds (seconds) of the write-duration histogram: a file write takes
/// microseconds, a bulk request to a busy cluster seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutputLabels {
    output: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InputLabels {
    output: String,
    input: String,
}

/// The output metric families. Clones share their values.
///
/// Counters `leasehold_output_events_written_total{output}` (acknowledged
/// by the destination, duplicates included),
/// `leasehold_output_events_duplicate_total{output}` (the server already
/// held the document's `_id`), `leasehold_output_events_dropped_total{output}`
/// (refused for good, e.g. a mapping conflict),
/// `leasehold_output_events_term_ended_total{output}` (queued by a
/// leader-gated input whose term ended before they were written; the
/// successor re-reads them), `leasehold_output_events_failed_total{output}` (events whose write
/// attempt failed; they are retried), `leasehold_output_write_errors_total{output}`
/// (failed write attempts), `leasehold_output_batches_total{output}` and
/// `leasehold_output_events_received_total{output,input}`,
/// `leasehold_output_disk_queue_records_lost_total{output}` (records of a
/// `queue.disk` set aside as damaged, never sent); the gauge
/// `leasehold_output_queue_depth{output}`; the histogram
/// `leasehold_output_write_duration_seconds{output}` (one write attempt).
#[derive(Clone, Debug)]
pub struct OutputMetrics {
    written: Family<OutputLabels, Counter>,
    duplicates: Family<OutputLabels, Counter>,
    dropped: Family<OutputLabels, Counter>,
    term_ended: Family<OutputLabels, Counter>,
    failed: Family<OutputLabels, Counter>,
    errors: Family<OutputLabels, Counter>,
    batches: Family<OutputLabels, Counter>,
    depth: Family<OutputLabels, Gauge>,
    bytes: Family<OutputLabels, Gauge>,
    latency: Family<OutputLabels, Histogram, fn() -> Histogram>,
    received: Family<InputLabels, Counter>,
    disk_lost: Family<OutputLabels, Counter>,
}

impl Default for OutputMetrics {
    fn default() -> Self {
        OutputMetrics {
            written: Family::default(),
            duplicates: Family::default(),
            dropped: Family::default(),
            term_ended: Family::default(),
            failed: Family::default(),
            errors: Family::default(),
            batches: Family::default(),
            depth: Family::default(),
            bytes: Family::default(),
            latency: Family::new_with_constructor(|| Histogram::new(LATENCY_BUCKETS)),
            received: Family::default(),
            disk_lost: Family::default(),
        }
    }
}

impl OutputMetrics {
    /// Metrics that are not exported anywhere.
    pub fn new() -> Self {
        Self::default()
    }

    /// Metrics registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::new();
        registry.register(
            "leasehold_output_events_written",
            "Events written by an output",
            m.written.clone(),
        );
        registry.register(
            "leasehold_output_events_duplicate",
            "Events the destination already held (same _id): delivered before",
            m.duplicates.clone(),
        );
        registry.register(
            "leasehold_output_events_dropped",
            "Events the destination refused for good (e.g. a mapping conflict)",
            m.dropped.clone(),
        );
        registry.register(
            "leasehold_output_events_term_ended",
            "Events of a leadership term that ended before they were written; not sent (the next leader re-reads them)",
            m.term_ended.clone(),
        );
        registry.register(
            "leasehold_output_batches",
            "Batches taken from an output's queue",
            m.batches.clone(),
        );
        registry.register(
            "leasehold_output_write_duration_seconds",
            "Duration of one write attempt of an output (a bulk request, a file write)",
            m.latency.clone(),
        );
        registry.register(
            "leasehold_output_events_failed",
            "Events whose write attempt failed (they are retried)",
            m.failed.clone(),
        );
        registry.register(
            "leasehold_output_write_errors",
            "Write attempts of an output that failed",
            m.errors.clone(),
        );
        registry.register(
            "leasehold_output_queue_depth",
            "Events waiting in an output's queue",
            m.depth.clone(),
        );
        registry.register(
            "leasehold_output_queue_bytes",
            "Bytes of events an output holds in memory (queue and the batch being written), bounded by queue.mem.bytes",
            m.bytes.clone(),
        );
        registry.register(
            "leasehold_output_events_received",
            "Events queued to an output, by input",
            m.received.clone(),
        );
        registry.register(
            "leasehold_output_disk_queue_records_lost",
            "Records of an output's disk queue set aside as damaged (not sent; the segment is kept as <name>.bad)",
            m.disk_lost.clone(),
        );
        m
    }

    /// Events written so far by `output`.
    pub fn events_written(&self, output: &str) -> u64 {
        self.written.get(&labels(output)).map_or(0, |c| c.get())
    }

    /// Events of failed write attempts so far by `output`.
    pub fn events_failed(&self, output: &str) -> u64 {
        self.failed.get(&labels(output)).map_or(0, |c| c.get())
    }

    /// Events dropped so far by `output` (refused for good).
    pub fn events_dropped(&self, output: &str) -> u64 {
        self.dropped.get(&labels(output)).map_or(0, |c| c.get())
    }

    /// Events `output` did not send because their term had ended.
    pub fn events_term_ended(&self, output: &str) -> u64 {
        self.term_ended.get(&labels(output)).map_or(0, |c| c.get())
    }

    /// Events `output` found already delivered (same `_id`).
    pub fn events_duplicate(&self, output: &str) -> u64 {
        self.duplicates.get(&labels(output)).map_or(0, |c| c.get())
    }

    /// Failed write attempts so far by `output`.
    pub fn write_errors(&self, output: &str) -> u64 {
        self.errors.get(&labels(output)).map_or(0, |c| c.get())
    }

    /// The queue depth last recorded for `output`.
    pub fn queue_depth(&self, output: &str) -> i64 {
        self.depth.get(&labels(output)).map_or(0, |g| g.get())
    }

    /// Events queued so far to `output` by `input`.
    pub fn events_received(&self, output: &str, input: &str) -> u64 {
        let key = InputLabels {
            output: output.to_string(),
            input: input.to_string(),
        };
        self.received.get(&key).map_or(0, |c| c.get())
    }

    /// Records of `output`'s disk queue set aside as damaged so far.
    pub fn disk_queue_records_lost(&self, output: &str) -> u64 {
        self.disk_lost.get(&labels(output)).map_or(0, |c| c.get())
    }

    /// The counter `output`'s disk queue adds its damaged records to.
    pub(super) fn disk_queue_lost_counter(&self, output: &str) -> Counter {
        self.disk_lost.get_or_create(&labels(output)).clone()
    }

    /// The metrics of one output, resolved once.
    pub(super) fn handles(&self, output: &str) -> OutputHandles {
        let l = labels(output);
        OutputHandles {
            output: output.to_string(),
            written: self.written.get_or_create(&l).clone(),
            duplicates: self.duplicates.get_or_create(&l).clone(),
            dropped: self.dropped.get_or_create(&l).clone(),
            term_ended: self.term_ended.get_or_create(&l).clone(),
            batches: self.batches.get_or_create(&l).clone(),
            latency: self.latency.get_or_create(&l).clone(),
            health: HealthHandle::default(),
            failed: self.failed.get_or_create(&l).clone(),
            errors: self.errors.get_or_create(&l).clone(),
            depth: self.depth.get_or_create(&l).clone(),
            bytes: self.bytes.get_or_create(&l).clone(),
            received: self.received.clone(),
        }
    }
}

fn labels(output: &str) -> OutputLabels {
    OutputLabels {
        output: output.to_string(),
    }
}

/// One output's metrics.
#[derive(Debug)]
pub(super) struct OutputHandles {
    output: String,
    pub(super) written: Counter,
    pub(super) duplicates: Counter,
    pub(super) dropped: Counter,
    pub(super) term_ended: Counter,
    pub(super) batches: Counter,
    pub(super) latency: Histogram,
    pub(super) health: HealthHandle,
    pub(super) failed: Counter,
    pub(super) errors: Counter,
    depth: Gauge,
    bytes: Gauge,
    received: Family<InputLabels, Counter>,
}

impl OutputHandles {
    pub(super) fn set_bytes(&self, bytes: usize) {
        self.bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    pub(super) fn set_depth(&self, depth: usize) {
        self.depth.set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// The `received` counter of `input`, to keep instead of looking it up
    /// per event.
    pub(super) fn received_counter(&self, input: &str) -> Counter {
        let key = InputLabels {
            output: self.output.clone(),
            input: input.to_string(),
        };
        self.received.get_or_create(&key).clone()
    }

    /// Drops the `received` series of `input` (an input gone for good).
    pub(super) fn forget_input(&self, input: &str) {
        self.received.remove(&InputLabels {
            output: self.output.clone(),
            input: input.to_string(),
        });
    }

    pub(super) fn received(&self, input: &str) {
        let key = InputLabels {
            output: self.output.clone(),
            input: input.to_string(),
        };
        self.received.get_or_create(&key).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_exported_with_output_labels() {
        let mut registry = Registry::default();
        let m = OutputMetrics::register(&mut registry);
        let h = m.handles("default");
        h.written.inc_by(3);
        h.dropped.inc();
        h.duplicates.inc_by(2);
        h.errors.inc();
        h.failed.inc_by(2);
        h.set_depth(5);
        h.received("in-1");
        m.disk_queue_lost_counter("default").inc_by(4);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "leasehold_output_events_written_total{output=\"default\"} 3",
            "leasehold_output_events_dropped_total{output=\"default\"} 1",
            "leasehold_output_events_duplicate_total{output=\"default\"} 2",
            "leasehold_output_events_failed_total{output=\"default\"} 2",
            "leasehold_output_write_errors_total{output=\"default\"} 1",
            "leasehold_output_queue_depth{output=\"default\"} 5",
            "leasehold_output_events_received_total{output=\"default\",input=\"in-1\"} 1",
            "leasehold_output_disk_queue_records_lost_total{output=\"default\"} 4",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert_eq!(m.events_written("default"), 3);
        assert_eq!(m.events_dropped("default"), 1);
        assert_eq!(m.events_duplicate("default"), 2);
        assert_eq!(m.events_received("default", "in-1"), 1);
        assert_eq!(m.queue_depth("default"), 5);
        assert_eq!(m.disk_queue_records_lost("default"), 4);
        assert_eq!(m.events_written("other"), 0);
    }
}
