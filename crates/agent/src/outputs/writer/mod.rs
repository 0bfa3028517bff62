//! The writer behind each output's bounded queue: its lanes take what is
//! queued in batches, give each batch to the sink, and settle the sink's
//! answers line by line: acknowledge what was delivered, acknowledge as
//! dropped what was refused for good, send the rest again with
//! exponential backoff (or the receiver's `Retry-After`), and never send
//! a line whose leadership term has ended. Every sink is settled here and
//! only here; nothing that reached the queue is lost.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::batch::Batch;
use super::budget::ByteBudget;
use super::disk::DiskQueue;
use super::metrics::OutputHandles;
use super::sink::Sink;
use crate::pipeline::event::Event;

/// The longest `Retry-After` honoured; a longer one is cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Shutdown signals shared by the writers: `close` stops taking new events
/// and drains the queue; `abort` gives up on whatever is left.
#[derive(Clone, Debug)]
pub(super) struct Control {
    pub(super) close: CancellationToken,
    pub(super) abort: CancellationToken,
}

/// Runs one output's writer until its queue is closed and drained (then
/// syncs and returns 0) or until aborted (then returns how many queued
/// events were not written).
///
/// With a disk queue, `rx` is fed by [`feed_from_disk`]: each delivered
/// batch is acknowledged to the disk queue, closing is left to the feeder
/// (it ends once the queue is closed and read to its end), and what is
/// left when aborted stays on disk for the next start.
pub(super) async fn run_writer(
    name: Arc<str>,
    rx: mpsc::Receiver<Event>,
    sink: Box<dyn Sink>,
    control: Control,
    metrics: Arc<OutputHandles>,
    disk: Option<Arc<DiskQueue>>,
    budget: ByteBudget,
) -> usize {
    // A disk queue is acknowledged in the order it was read: one lane.
    let mut sink = sink;
    let mut sinks = if disk.is_some() {
        Vec::new()
    } else {
        sink.split_lanes()
    };
    sinks.insert(0, sink);
    let queue = Arc::new(tokio::sync::Mutex::new(LaneFeed { rx, closed: false }));
    let lanes = sinks.into_iter().map(|sink| Lane {
        name: Arc::clone(&name),
        queue: Arc::clone(&queue),
        sink,
        control: control.clone(),
        metrics: Arc::clone(&metrics),
        disk: disk.clone(),
        budget: budget.clone(),
    });
    let mut running = tokio::task::JoinSet::new();
    for lane in lanes {
        running.spawn(lane.run());
    }
    let mut unwritten = 0;
    while let Some(done) = running.join_next().await {
        match done {
            Ok(n) => unwritten += n,
            Err(e) => {
                // A lane's batch is lost to its panic; the others go on.
                tracing::error!(output = %name, error = %e, "an output lane failed");
            }
        }
    }
    metrics.set_depth(0);
    unwritten + queue.lock().await.rx.len()
}

/// The queue the lanes of one writer take their batches from, one lane at
/// a time.
struct LaneFeed {
    rx: mpsc::Receiver<Event>,
    /// Closing was seen: senders waiting for room failed.
    closed: bool,
}

/// One lane of a writer: takes a batch, writes it until it is settled,
/// then takes the next.
struct Lane {
    name: Arc<str>,
    queue: Arc<tokio::sync::Mutex<LaneFeed>>,
    sink: Box<dyn Sink>,
    control: Control,
    metrics: Arc<OutputHandles>,
    disk: Option<Arc<DiskQueue>>,
    budget: ByteBudget,
}

impl Lane {
    /// Runs until the queue is closed and drained (then syncs and returns
    /// 0) or until aborted (then returns how many events of its batch
    /// were not written; the queue's own are counted by the writer).
    async fn run(self) -> usize {
        let Lane {
            name,
            queue,
            mut sink,
            control,
            metrics,
            disk,
            budget,
        } = self;
        loop {
            let max_batch = sink.max_batch().max(1);
            let mut batch = Batch::default();
            // The bytes the batch's events took from the budget, given
            // back once the batch is done (written, settled or discarded).
            let mut held = 0;
            {
                let mut queued = tokio::select! {
                    biased;
                    _ = control.abort.cancelled() => return 0,
                    q = queue.lock() => q,
                };
                let LaneFeed { rx, closed } = &mut *queued;
                let first = loop {
                    tokio::select! {
                        biased;
                        // Given up: what is queued is left (a disk queue keeps it).
                        _ = control.abort.cancelled() => return 0,
                        _ = control.close.cancelled(), if !*closed => {
                            // Senders waiting for room now fail; what is queued stays.
                            if disk.is_none() {
                                rx.close();
                            }
                            *closed = true;
                        }
                        ev = rx.recv() => break ev,
                    }
                };
                let Some(first) = first else { break };
                held += budget.cost(first.ndjson().len()) as usize;
                batch.push(first);
                while batch.len() < max_batch {
                    match rx.try_recv() {
                        Ok(ev) => {
                            held += budget.cost(ev.ndjson().len()) as usize;
                            batch.push(ev);
                        }
                        Err(_) => break,
                    }
                }
                metrics.set_depth(disk.as_ref().map_or(rx.len(), |d| d.depth()));
            }
            // What the disk queue is told was delivered: every line taken.
            let taken = batch.len();
            metrics.batches.inc();
            if let Some(unwritten) =
                write_until_settled(&name, &mut *sink, &mut batch, &control, &metrics).await
            {
                return unwritten;
            }
            // Every line taken is settled: delivered, or discarded because its
            // term ended (a batch of those alone never reaches the sink).
            if let Some(d) = &disk {
                let acked = tokio::select! {
                    biased;
                    _ = control.abort.cancelled() => return 0,
                    r = d.ack(taken) => r,
                };
                if let Err(e) = acked {
                    tracing::error!(output = %name, error = %e, "cannot record delivery in the disk queue; these events will be sent again after a restart");
                }
                metrics.set_depth(d.depth());
            }
            budget.release(held);
            metrics.set_bytes(budget.used());
        }
        let target = sink.target();
        tokio::select! {
            biased;
            r = sink.sync() => {
                if let Err(e) = r {
                    tracing::warn!(output = %name, path = %target, error = %e, "output flush failed");
                }
            }
            _ = control.abort.cancelled() => {}
        }
        0
    }
}

/// Gives `batch` to the sink until every line is settled, retrying with
/// backoff; `Some(unsent)` when aborted first.
async fn write_until_settled(
    name: &Arc<str>,
    sink: &mut dyn Sink,
    batch: &mut Batch,
    control: &Control,
    metrics: &OutputHandles,
) -> Option<usize> {
    let (backoff_start, backoff_max) = sink.backoff();
    let mut backoff = backoff_start;
    loop {
        // The terms being written hold their step-down until the
        // attempt ends; lines of a term already over are not sent.
        let holds = batch.hold_terms();
        let ended = batch.discard_ended_terms();
        if ended > 0 {
            metrics.term_ended.inc_by(ended as u64);
            tracing::info!(output = %name, events = ended, "not sending events of a leadership term that has ended; the next leader reads them again");
        }
        if batch.is_empty() {
            return None;
        }
        // If the attempt is abandoned its progress is unknown: count all.
        let pending = batch.len();
        let started = std::time::Instant::now();
        let answers = tokio::select! {
            biased;
            a = sink.send(batch.outgoing()) => a,
            _ = control.abort.cancelled() => return Some(pending),
        };
        metrics.latency.observe(started.elapsed().as_secs_f64());
        // Acknowledged before the terms' step-down may complete, so a
        // leader's last checkpoint includes what it delivered.
        let settled = batch.settle(&answers);
        drop(holds);
        metrics.written.inc_by(settled.delivered as u64);
        metrics.duplicates.inc_by(settled.duplicates as u64);
        if settled.dropped > 0 {
            metrics.dropped.inc_by(settled.dropped as u64);
            metrics.health.dropped(
                settled.dropped as u64,
                settled.last_drop.map(|r| r.to_string()),
            );
            tracing::warn!(
                output = %name,
                dropped = settled.dropped,
                first_reason = settled.first_drop.as_deref().unwrap_or(""),
                "events refused for good by the receiver were dropped (counted in leasehold_output_events_dropped_total)",
            );
        }
        if batch.is_empty() {
            metrics.health.succeeded();
            return None;
        }
        let target = sink.target();
        let error = format!(
            "{} events not delivered: {}",
            batch.len(),
            answers.error.as_deref().unwrap_or("no answer for them")
        );
        // At least our backoff; longer if the receiver asked.
        let wait = answers
            .retry_after
            .map_or(backoff, |r| r.min(MAX_RETRY_AFTER).max(backoff));
        tracing::warn!(
            output = %name,
            target = %target,
            error = %error,
            pending = batch.len(),
            retry_in_ms = wait.as_millis() as u64,
            "output write failed; retrying",
        );
        metrics.health.failed(error);
        metrics.errors.inc();
        metrics.failed.inc_by(batch.len() as u64);
        tokio::select! {
            biased;
            _ = control.abort.cancelled() => return Some(batch.len()),
            _ = tokio::time::sleep(wait) => {}
        }
        backoff = (backoff * 2).min(backoff_max);
    }
}

#[cfg(test)]
mod tests;
