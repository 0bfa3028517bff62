//! The `otlp` output: events as OTLP logs and metrics, to an OpenTelemetry
//! Collector or any OTLP receiver, over gRPC or HTTP.
//!
//! An export the receiver refuses (no answer, 5xx, 429, a wrong path, an
//! expired token: see `outputs::retry`) keeps the batch and is retried
//! with backoff, honouring `Retry-After`; only one refused as malformed
//! (HTTP 400, gRPC `INVALID_ARGUMENT`) is dropped and counted, as are
//! records the receiver reports rejected in a partial success. See
//! `convert` for how events map to OTLP.

mod convert;
mod encode;
mod export_error;
mod grpc;
pub mod settings;
mod transport;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use super::kind::{OutputKind, OutputType, SinkSettings, no_notes, same};
use super::sink::{Answer, Answers, Outgoing, Sink};
use crate::redact::Redactor;
use encode::{LogsEncoder, Pushed};
pub use settings::OtlpSettings;
use transport::{ExportError, Transport};

/// The `otlp` output type.
pub(crate) const TYPE: OutputType = OutputType {
    name: "otlp",
    keys: &settings::KEYS,
    parse: |base, keys, errors| OutputKind::new(settings::parse(base, keys, errors)),
    notes: no_notes,
};

impl SinkSettings for OtlpSettings {
    fn type_name(&self) -> &'static str {
        "otlp"
    }

    fn open(&self) -> io::Result<Box<dyn Sink>> {
        Ok(Box::new(
            OtlpSink::new(self.clone()).map_err(io::Error::other)?,
        ))
    }

    fn same_as(&self, other: &dyn SinkSettings) -> bool {
        same(self, other)
    }
}

/// The sink of one `otlp` output (a clone is another lane of it).
#[derive(Clone)]
pub(super) struct OtlpSink {
    endpoint: String,
    transport: Transport,
    bulk_max_size: usize,
    /// Export requests in flight at once: each of `num_consumers` lanes
    /// of the writer sends one; a sink that is its writer's only lane (a
    /// disk queue, read in order) sends them all.
    num_consumers: usize,
    /// One of several lanes.
    lane: bool,
    backoff: (Duration, Duration),
    /// Keeps the output's credentials out of its errors.
    redactor: Redactor,
}

impl OtlpSink {
    /// A sink for `settings`; errors name the setting that cannot be used.
    /// Connections are made on first use.
    pub(super) fn new(settings: OtlpSettings) -> Result<Self, String> {
        let transport = Transport::new(&settings)?;
        Ok(OtlpSink {
            endpoint: settings.endpoint.clone(),
            transport,
            bulk_max_size: settings.bulk_max_size.max(1),
            num_consumers: settings.num_consumers.max(1),
            lane: false,
            backoff: (settings.backoff_init, settings.backoff_max),
            redactor: settings.redactor(),
        })
    }
}

/// One export request of a batch and what became of it.
struct Part {
    /// The pending lines it carried (indexes in the batch's pending ones).
    lines: Vec<usize>,
    /// What the receiver counts of it: records, or data points.
    units: usize,
    what: &'static str,
    sent: Sent,
}

/// Exports the lines of `chunk` (pending lines `start..`): log records
/// encoded straight from their lines (`encode`), metric documents
/// converted into data points (`convert`); one request for each kind
/// present.
async fn export_chunk(
    transport: &Transport,
    chunk: &[Vec<u8>],
    start: usize,
    now_ns: u64,
) -> Vec<Part> {
    let mut logs = LogsEncoder::default();
    let mut log_lines = Vec::new();
    let mut metric_docs = Vec::new();
    for (k, line) in chunk.iter().enumerate() {
        match logs.push(line, now_ns) {
            Pushed::Record => log_lines.push(start + k),
            Pushed::Metric => metric_docs.push(k),
        }
    }
    let mut metrics = None;
    if !metric_docs.is_empty() {
        let lines: Vec<&[u8]> = metric_docs.iter().map(|&k| chunk[k].as_slice()).collect();
        let c = convert::convert(&lines, now_ns);
        // A metric document without numbers is a log record.
        let records = c.logs.resource_logs.iter().flat_map(|r| {
            let resource = convert::source_attributes(r);
            r.scope_logs
                .iter()
                .flat_map(move |s| s.log_records.iter().map(move |rec| (resource, rec)))
        });
        for ((resource, record), &i) in records.zip(&c.log_lines) {
            logs.push_record(resource, record);
            log_lines.push(start + metric_docs[i]);
        }
        if !c.metric_lines.is_empty() {
            let lines = c.metric_lines.iter().map(|&i| start + metric_docs[i]);
            metrics = Some((c.metrics, lines.collect::<Vec<_>>(), c.points));
        }
    }
    let mut parts = Vec::with_capacity(2);
    if !logs.is_empty() {
        let units = logs.len();
        let sent = match transport.logs(logs.finish()).await {
            Ok(rejected) => Sent::Accepted(rejected),
            Err(e) => Sent::Failed(e),
        };
        parts.push(Part {
            lines: log_lines,
            units,
            what: "log records",
            sent,
        });
    }
    if let Some((req, lines, points)) = metrics {
        let sent = match transport.metrics(req).await {
            Ok(rejected) => Sent::Accepted(rejected),
            Err(e) => Sent::Failed(e),
        };
        parts.push(Part {
            lines,
            units: points,
            what: "data points",
            sent,
        });
    }
    parts
}

/// What became of one export request.
enum Sent {
    /// Accepted; the receiver rejected this many of its items.
    Accepted(u64),
    /// Failed as a whole.
    Failed(ExportError),
}

impl Sink for OtlpSink {
    fn send(&mut self, out: Arc<Outgoing>) -> BoxFuture<'_, Answers> {
        Box::pin(async move { self.export(&out).await })
    }

    fn sync(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn target(&self) -> String {
        self.redactor.redact(&self.endpoint)
    }

    fn max_batch(&self) -> usize {
        self.bulk_max_size * self.in_flight()
    }

    fn split_lanes(&mut self) -> Vec<Box<dyn Sink>> {
        self.lane = true;
        (1..self.num_consumers)
            .map(|_| -> Box<dyn Sink> { Box::new(self.clone()) })
            .collect()
    }

    fn backoff(&self) -> (Duration, Duration) {
        self.backoff
    }
}

impl OtlpSink {
    /// Requests in flight in one write.
    fn in_flight(&self) -> usize {
        if self.lane { 1 } else { self.num_consumers }
    }

    /// Exports the lines, in requests of `bulk_max_size` with
    /// [`Self::in_flight`] in flight, and answers per line by what the
    /// receiver said of each request.
    async fn export(&self, out: &Outgoing) -> Answers {
        let now_ns = u64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(0);
        let n = out.len();
        let size = self.bulk_max_size;
        let transport = &self.transport;
        // Boxed so the requests' future is `Send` for every lifetime of
        // the lines (as the `elasticsearch` output's).
        let requests: Vec<BoxFuture<'_, Vec<Part>>> = out
            .lines()
            .chunks(size)
            .enumerate()
            .map(|(c, chunk)| -> BoxFuture<'_, Vec<Part>> {
                Box::pin(export_chunk(transport, chunk, c * size, now_ns))
            })
            .collect();
        let mut answers = futures_util::stream::iter(requests).buffer_unordered(self.in_flight());
        let mut parts = Vec::new();
        while let Some(p) = answers.next().await {
            parts.extend(p);
        }
        drop(answers);

        let mut lines = vec![Answer::Retry; n];
        let mut error: Option<ExportError> = None;
        // What a partial success counts: log records are documents; metric
        // documents carry several data points each, and the receiver counts
        // points.
        for Part {
            lines: indexes,
            units,
            what,
            sent,
        } in parts
        {
            match sent {
                Sent::Accepted(rejected) => {
                    for &i in &indexes {
                        lines[i] = Answer::Delivered;
                    }
                    if rejected > 0 {
                        // Which items were rejected is not said: count the
                        // documents in proportion, rounded up.
                        let rejected = (rejected as usize).min(units);
                        let docs = rejected
                            .saturating_mul(indexes.len())
                            .div_ceil(units.max(1))
                            .min(indexes.len());
                        let why: Arc<str> = format!(
                            "the receiver rejected {rejected} of {units} {what} (partial success)"
                        )
                        .into();
                        // Which ones is not said either: the last ones.
                        for &i in &indexes[indexes.len() - docs..] {
                            lines[i] = Answer::Drop(Arc::clone(&why));
                        }
                    }
                }
                Sent::Failed(e) if !e.retryable => {
                    let why: Arc<str> = self.redactor.redact(&e.message).into();
                    for &i in &indexes {
                        lines[i] = Answer::Drop(Arc::clone(&why));
                    }
                }
                Sent::Failed(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        Answers {
            lines,
            retry_after: error.as_ref().and_then(|e| e.retry_after),
            error: error.map(|e| self.redactor.redact(&e.message)),
        }
    }
}
