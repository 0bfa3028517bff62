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
pub mod settings;
mod transport;

use std::io;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::queue::{Batch, Sink};
use crate::redact::Redactor;
pub use settings::OtlpSettings;
use transport::{ExportError, Transport};

/// The sink of one `otlp` output.
pub(super) struct OtlpSink {
    name: String,
    endpoint: String,
    transport: Transport,
    bulk_max_size: usize,
    backoff: (Duration, Duration),
    /// Keeps the output's credentials out of its errors.
    redactor: Redactor,
}

impl OtlpSink {
    /// A sink for `settings`; errors name the setting that cannot be used.
    /// Called within the runtime (the gRPC channel is made lazily on it).
    pub(super) fn new(name: &str, settings: OtlpSettings) -> Result<Self, String> {
        let transport = Transport::new(&settings)?;
        Ok(OtlpSink {
            name: name.to_string(),
            endpoint: settings.endpoint.clone(),
            transport,
            bulk_max_size: settings.bulk_max_size.max(1),
            backoff: (settings.backoff_init, settings.backoff_max),
            redactor: settings.redactor(),
        })
    }
}

/// What became of one export request.
enum Sent {
    /// Accepted; the receiver rejected this many of its items.
    Accepted(u64),
    /// Failed as a whole.
    Failed(ExportError),
}

impl Sink for OtlpSink {
    fn write<'a>(&'a mut self, batch: &'a mut Batch) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(self.export(batch))
    }

    fn sync(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn target(&self) -> String {
        self.redactor.redact(&self.endpoint)
    }

    fn max_batch(&self) -> usize {
        self.bulk_max_size
    }

    fn backoff(&self) -> (Duration, Duration) {
        self.backoff
    }
}

impl OtlpSink {
    /// Exports the pending lines of `batch` and settles them by the answers.
    async fn export(&mut self, batch: &mut Batch) -> io::Result<()> {
        let now_ns = u64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(0);
        let lines: Vec<&[u8]> = batch.pending().iter().map(Vec::as_slice).collect();
        let c = convert::convert(&lines, now_ns);
        let n = lines.len();
        let transport = &mut self.transport;
        let (logs, metrics) = {
            let logs = if c.log_lines.is_empty() {
                None
            } else {
                Some(match transport.logs(c.logs).await {
                    Ok(rejected) => Sent::Accepted(rejected),
                    Err(e) => Sent::Failed(e),
                })
            };
            let metrics = if c.metric_lines.is_empty() {
                None
            } else {
                Some(match transport.metrics(c.metrics).await {
                    Ok(rejected) => Sent::Accepted(rejected),
                    Err(e) => Sent::Failed(e),
                })
            };
            (logs, metrics)
        };

        let mut settled = vec![false; n];
        let mut error: Option<ExportError> = None;
        // What a partial success counts: log records are documents; metric
        // documents carry several data points each, and the receiver counts
        // points.
        let points = c.points;
        for (sent, indexes, what, units) in [
            (logs, &c.log_lines, "log records", c.log_lines.len()),
            (metrics, &c.metric_lines, "data points", points),
        ] {
            match sent {
                None => {}
                Some(Sent::Accepted(rejected)) => {
                    for &i in indexes {
                        settled[i] = true;
                    }
                    if rejected > 0 {
                        // Which items were rejected is not said: count the
                        // documents in proportion, rounded up.
                        let rejected = (rejected as usize).min(units);
                        let docs = rejected
                            .saturating_mul(indexes.len())
                            .div_ceil(units.max(1))
                            .min(indexes.len());
                        // Which ones is not said either: the last ones.
                        for &i in &indexes[indexes.len() - docs..] {
                            batch.drop_pending(i);
                        }
                        batch.drop_reason = Some(format!(
                            "the receiver rejected {rejected} of {units} {what} (partial success)"
                        ));
                        tracing::warn!(output = %self.name, rejected, of = units, documents = docs, "the receiver rejected some {what} (partial success); their documents are dropped and counted");
                    }
                }
                Some(Sent::Failed(e)) if !e.retryable => {
                    for &i in indexes {
                        settled[i] = true;
                    }
                    for &i in indexes {
                        batch.drop_pending(i);
                    }
                    batch.drop_reason = Some(self.redactor.redact(&e.message));
                    tracing::warn!(output = %self.name, dropped = indexes.len(), error = %self.redactor.redact(&e.message), "the receiver refused {what} for good; they are dropped and counted");
                }
                Some(Sent::Failed(e)) => {
                    error.get_or_insert(e);
                }
            }
        }
        batch.settle(&settled);
        match error {
            None => Ok(()),
            Some(e) => {
                batch.retry_after = e.retry_after;
                Err(io::Error::other(format!(
                    "{} events not exported: {}",
                    batch.remaining(),
                    self.redactor.redact(&e.message)
                )))
            }
        }
    }
}
