//! The `elasticsearch` output: `_bulk` `create` into data streams named
//! `{type}-{dataset}-{namespace}`, on Elasticsearch or OpenSearch.
//!
//! Delivery is at least once and, for events with a deterministic id
//! (`@metadata._id`), effectively once: a replay after a crash handover is
//! answered 409 and counted as delivered. Per document, only a 400 (a
//! mapping conflict), and a 413 to a request of that document alone, are
//! dropped and counted; every other refusal (429,
//! 5xx, a write block's 403, a missing index's 404) is retried with
//! backoff, by the outputs' one rule (`outputs::retry`). A server that is
//! down or refuses whole requests keeps the batch: the queue fills and
//! inputs wait.

mod answer;
pub(super) mod bulk;
mod client;
mod request_size;
pub mod settings;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use hyper::StatusCode;

use super::kind::{OutputKind, OutputType, SinkSettings, same};
use super::sink::{Answer, Answers, Outgoing, Sink};
use bulk::ItemAnswer;
use client::{Client, RequestError, status_error};
use request_size::RequestSize;
pub use settings::ElasticsearchSettings;

use crate::redact::Redactor;

/// The `elasticsearch` output type.
pub(crate) const TYPE: OutputType = OutputType {
    name: "elasticsearch",
    keys: &settings::KEYS,
    parse: |base, keys, errors| OutputKind::new(settings::parse(base, keys, errors)),
    notes: settings::notes,
};

impl SinkSettings for ElasticsearchSettings {
    fn type_name(&self) -> &'static str {
        "elasticsearch"
    }

    fn open(&self) -> io::Result<Box<dyn Sink>> {
        Ok(Box::new(
            ElasticsearchSink::new(self.clone()).map_err(io::Error::other)?,
        ))
    }

    /// An Elastic preset sizes the queue too.
    fn queue_events(&self, configured: usize) -> usize {
        self.preset.map_or(configured, |p| p.queue_events)
    }

    fn same_as(&self, other: &dyn SinkSettings) -> bool {
        same(self, other)
    }
}

/// Requests per worker in one batch when the sink is its writer's only
/// lane (a disk queue, read in order): the writer waits for a whole batch
/// before it takes the next, so a batch spans several rounds of requests
/// to keep every worker busy between the waits. Otherwise each of `worker`
/// lanes sends one request at a time.
const REQUESTS_PER_WORKER: usize = 4;

/// The sink of one `elasticsearch` output (a clone is another lane of it).
#[derive(Clone)]
pub(super) struct ElasticsearchSink {
    client: Arc<Client>,
    bulk_max_size: usize,
    worker: usize,
    backoff: (Duration, Duration),
    /// Documents per request now, for every lane: halved by a 413,
    /// grown back by accepted requests.
    request_size: Arc<RequestSize>,
    /// One of `worker` lanes, each with one request in flight; else the
    /// only one, with `worker` requests in flight.
    lane: bool,
    /// Keeps the output's credentials out of its errors (a server may
    /// quote what it was sent).
    redactor: Redactor,
}

impl ElasticsearchSink {
    /// A sink for `settings`; errors name the setting that cannot be used.
    pub(super) fn new(settings: ElasticsearchSettings) -> Result<Self, String> {
        let bulk_max_size = settings.bulk_max_size.max(1);
        let worker = settings.worker.max(1);
        let backoff = (settings.backoff_init, settings.backoff_max);
        let redactor = settings.redactor();
        Ok(ElasticsearchSink {
            redactor,
            client: Arc::new(Client::new(settings)?),
            bulk_max_size,
            worker,
            backoff,
            request_size: Arc::new(RequestSize::new(bulk_max_size)),
            lane: false,
        })
    }

    /// Requests in flight in one write.
    fn in_flight(&self) -> usize {
        if self.lane { 1 } else { self.worker }
    }

    /// Sends the lines in requests of `request_size`, [`Self::in_flight`]
    /// at a time, and returns each line's outcome (`None`: not known to be
    /// written, retry) with the first whole-request error.
    async fn bulk(&self, out: &Outgoing) -> (Vec<Option<ItemAnswer>>, Option<String>) {
        let lines = out.lines();
        let mut outcomes: Vec<Option<ItemAnswer>> = vec![None; lines.len()];
        if let Err(e) = self.client.server().await {
            if matches!(e, RequestError::Unreachable(_)) {
                self.client.forget_server();
            }
            return (outcomes, Some(e.to_string()));
        }
        let size = self.request_size.get();
        let chunks: Vec<(usize, &[Vec<u8>])> = lines
            .chunks(size)
            .enumerate()
            .map(|(i, c)| (i * size, c))
            .collect();
        let mut first_error = None;
        // `worker` requests in flight; the next starts as soon as one ends.
        // Boxed so the requests' future is `Send` for every lifetime of
        // the batch (the writer awaits it on the runtime).
        type Answer = (
            usize,
            usize,
            Result<(StatusCode, hyper::body::Bytes), RequestError>,
        );
        let requests: Vec<BoxFuture<'_, Answer>> = chunks
            .into_iter()
            .map(|(start, chunk)| -> BoxFuture<'_, Answer> {
                let client = Arc::clone(&self.client);
                // The body is built when the request starts, not before.
                Box::pin(async move {
                    let mut body = Vec::with_capacity(chunk.iter().map(|l| l.len() + 64).sum());
                    for (k, line) in chunk.iter().enumerate() {
                        bulk::append(&mut body, line, out.meta(start + k));
                    }
                    (start, chunk.len(), client.bulk(body, chunk.len()).await)
                })
            })
            .collect();
        let mut answers = futures_util::stream::iter(requests).buffer_unordered(self.in_flight());
        while let Some((start, n, result)) = answers.next().await {
            match result {
                Ok((status, answer)) if status.is_success() => match bulk::judge(&answer, n) {
                    Ok(items) => {
                        self.request_size.accepted();
                        for (k, o) in items.into_iter().enumerate() {
                            outcomes[start + k] = Some(o);
                        }
                    }
                    Err(why) => {
                        first_error.get_or_insert(why);
                    }
                },
                Ok((status, answer)) if status == StatusCode::PAYLOAD_TOO_LARGE && n == 1 => {
                    // One document the server will never take: dropped
                    // for good, with why (never its content).
                    outcomes[start] = Some(ItemAnswer::Dropped {
                        status: status.as_u16(),
                        reason: format!(
                            "the document alone is larger than the server accepts ({}; raise its http.max_content_length, or cut such lines at the input)",
                            status_error(status, &answer, "/_bulk")
                        ),
                    });
                }
                Ok((status, answer)) => {
                    if status == StatusCode::PAYLOAD_TOO_LARGE {
                        self.request_size.too_large(n);
                    }
                    first_error.get_or_insert(status_error(status, &answer, "/_bulk").to_string());
                }
                Err(e) => {
                    if matches!(e, RequestError::Unreachable(_)) {
                        self.client.forget_server();
                    }
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        (outcomes, first_error)
    }
}

impl Sink for ElasticsearchSink {
    fn send(&mut self, out: Arc<Outgoing>) -> BoxFuture<'_, Answers> {
        Box::pin(async move {
            let (outcomes, request_error) = self.bulk(&out).await;
            self.answers(outcomes, request_error)
        })
    }

    fn sync(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn target(&self) -> String {
        self.redactor.redact(&self.client.hosts())
    }

    fn max_batch(&self) -> usize {
        if self.lane {
            self.bulk_max_size
        } else {
            self.bulk_max_size * self.worker * REQUESTS_PER_WORKER
        }
    }

    fn split_lanes(&mut self) -> Vec<Box<dyn Sink>> {
        self.lane = true;
        (1..self.worker)
            .map(|_| -> Box<dyn Sink> { Box::new(self.clone()) })
            .collect()
    }

    fn backoff(&self) -> (Duration, Duration) {
        self.backoff
    }
}

impl ElasticsearchSink {
    /// The server's answers as the writer takes them: per document, and
    /// why those left to retry were not taken (redacted).
    fn answers(&self, outcomes: Vec<Option<ItemAnswer>>, request_error: Option<String>) -> Answers {
        let mut item_retry: Option<(u16, String)> = None;
        let lines = outcomes
            .into_iter()
            .map(|outcome| match outcome {
                Some(ItemAnswer::Written) => Answer::Delivered,
                Some(ItemAnswer::Duplicate) => Answer::Duplicate,
                Some(ItemAnswer::Dropped { status, reason }) => {
                    Answer::Drop(format!("HTTP {status}: {}", self.redactor.redact(&reason)).into())
                }
                Some(ItemAnswer::Retry { status, reason }) => {
                    item_retry.get_or_insert((status, reason));
                    Answer::Retry
                }
                None => Answer::Retry,
            })
            .collect::<Vec<_>>();
        let error = match (request_error, item_retry) {
            (Some(e), _) => Some(e),
            (None, Some((status, reason))) => Some(format!(
                "the server refused documents for now (HTTP {status}: {reason})"
            )),
            (None, None) => None,
        };
        Answers {
            lines,
            error: error.map(|e| self.redactor.redact(&e)),
            retry_after: None,
        }
    }
}
