//! The writer task behind each output's bounded queue: it takes what is
//! queued in batches, writes a batch with one blocking call off the async
//! threads, and retries a failed batch with exponential backoff until it is
//! written. Nothing that reached the queue is dropped.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use tokio_util::task::task_tracker::TaskTrackerToken;

use super::budget::ByteBudget;
use super::disk::DiskQueue;
use super::metrics::OutputHandles;
use crate::pipeline::ack::Ack;
use crate::pipeline::event::{Event, Meta, TermFence};

/// Most events taken from the queue for one write.
pub(super) const MAX_BATCH: usize = 2048;
/// First wait after a failed write.
pub(super) const BACKOFF_START: Duration = Duration::from_millis(100);
/// Longest wait between retries.
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Lines to write; `done` counts those settled, from the front: written,
/// or (for a server that judges each document) found already present or
/// refused for good. `dropped` and `duplicates` count those among `done`.
#[derive(Debug, Default)]
pub(super) struct Batch {
    pub(super) lines: Vec<Vec<u8>>,
    pub(super) done: usize,
    /// Settled lines the server refused for good (e.g. a mapping error).
    pub(super) dropped: usize,
    /// Settled lines the server already held (same `_id`): delivered.
    pub(super) duplicates: usize,
    /// Why the server refused the latest dropped line (redacted), for
    /// `/status`.
    pub(super) drop_reason: Option<String>,
    /// How long the server asked to wait before the next attempt
    /// (`Retry-After`); the writer waits at least its own backoff.
    pub(super) retry_after: Option<Duration>,
    /// The lines' acknowledgements, in the lines' order, each `None` once
    /// settled; sinks only mark those they refuse for good
    /// ([`Batch::drop_pending`]).
    pub(super) acks: Vec<Option<Ack>>,
    /// The lines' leadership terms, in the lines' order (empty when no
    /// line has one); sinks never touch them.
    pub(super) fences: Vec<Option<Arc<TermFence>>>,
    /// The lines' routing, in the lines' order (empty when no line has
    /// one): what a sink may use instead of parsing a line.
    pub(super) metas: Vec<Option<Box<Meta>>>,
}

impl Batch {
    /// Lines not written yet.
    pub(super) fn pending(&self) -> &[Vec<u8>] {
        &self.lines[self.done..]
    }

    /// The routing of pending line `k` (counted from the first pending),
    /// when it was known as the event was produced.
    pub(super) fn pending_meta(&self, k: usize) -> Option<&Meta> {
        self.metas.get(self.done + k).and_then(|m| m.as_deref())
    }

    pub(super) fn remaining(&self) -> usize {
        self.lines.len() - self.done
    }

    /// Moves the pending lines whose flag in `settled` is true (one flag
    /// per pending line, in order) in front of the others and counts them
    /// as done: for servers that judge each document of a request.
    pub(super) fn settle(&mut self, settled: &[bool]) {
        let flags = || settled.iter().chain(std::iter::repeat(&false));
        let moved = reorder_tail(&mut self.lines, self.done, flags());
        reorder_tail(&mut self.acks, self.done, flags());
        reorder_tail(&mut self.fences, self.done, flags());
        reorder_tail(&mut self.metas, self.done, flags());
        self.done += moved;
    }

    /// Adds an event's line (with its acknowledgement and term, if any).
    pub(super) fn push(&mut self, event: Event) {
        let (line, carried) = event.into_parts();
        self.acks.push(Some(carried.ack));
        push_sparse(&mut self.fences, self.lines.len(), carried.fence);
        push_sparse(&mut self.metas, self.lines.len(), carried.meta);
        self.lines.push(line);
    }

    /// Removes the pending lines whose leadership term has ended, without
    /// acknowledging them (their input's successor re-reads them from the
    /// last acknowledged checkpoint); returns how many.
    pub(super) fn discard_ended_terms(&mut self) -> usize {
        if self.fences.len() <= self.done {
            return 0;
        }
        let over: Vec<bool> = self.fences[self.done..]
            .iter()
            .map(|f| f.as_ref().is_some_and(|f| f.is_over()))
            .collect();
        let n = over.iter().filter(|&&o| o).count();
        if n == 0 {
            return 0;
        }
        let keep = || over.iter().map(|o| !o);
        self.lines = retain_tail(std::mem::take(&mut self.lines), self.done, keep());
        self.acks = retain_tail(std::mem::take(&mut self.acks), self.done, keep());
        self.fences = retain_tail(std::mem::take(&mut self.fences), self.done, keep());
        self.metas = retain_tail(std::mem::take(&mut self.metas), self.done, keep());
        n
    }

    /// Guards holding the step-down of every term among the pending lines,
    /// one per term.
    pub(super) fn hold_terms(&self) -> Vec<TaskTrackerToken> {
        let mut seen: Vec<&Arc<TermFence>> = Vec::new();
        for f in self.fences.iter().skip(self.done).flatten() {
            if !seen.iter().any(|s| Arc::ptr_eq(s, f)) {
                seen.push(f);
            }
        }
        seen.into_iter().map(|f| f.hold()).collect()
    }

    /// Counts pending line `k` (counted from the first pending) as
    /// refused for good: once settled it is acknowledged as dropped.
    pub(super) fn drop_pending(&mut self, k: usize) {
        self.dropped += 1;
        if let Some(Some(a)) = self.acks.get_mut(self.done + k) {
            a.mark_dropped();
        }
    }

    /// Acknowledges the lines settled from index `from` up to `done`.
    pub(super) fn acknowledge_from(&mut self, from: usize) {
        let end = self.done.min(self.acks.len());
        for ack in self.acks.iter_mut().take(end).skip(from) {
            if let Some(a) = ack.take() {
                a.settle();
            }
        }
    }
}

/// Appends `item` to a list kept parallel to `len` lines but allocated
/// only once some line has an item: `None`s fill in before the first.
fn push_sparse<T>(items: &mut Vec<Option<T>>, len: usize, item: Option<T>) {
    if item.is_some() && items.len() < len {
        items.resize_with(len, || None);
    }
    if item.is_some() || !items.is_empty() {
        items.push(item);
    }
}

/// Reorders `items[from..]` so those whose flag is true come first,
/// keeping the order within each part; returns how many moved ahead. A
/// list shorter than `from` (a sparse one never filled) is left alone.
fn reorder_tail<'a, T>(
    items: &mut Vec<T>,
    from: usize,
    flags: impl Iterator<Item = &'a bool>,
) -> usize {
    if items.len() <= from {
        return 0;
    }
    let (mut yes, mut no) = (Vec::new(), Vec::new());
    for (item, &ok) in items.split_off(from).into_iter().zip(flags) {
        if ok {
            yes.push(item);
        } else {
            no.push(item);
        }
    }
    let moved = yes.len();
    items.extend(yes);
    items.extend(no);
    moved
}

/// `items` with the entries from `from` on kept only where `keep` says so.
fn retain_tail<T>(mut items: Vec<T>, from: usize, keep: impl Iterator<Item = bool>) -> Vec<T> {
    if items.len() <= from {
        return items;
    }
    let tail = items.split_off(from);
    items.extend(
        tail.into_iter()
            .zip(keep)
            .filter(|(_, k)| *k)
            .map(|(i, _)| i),
    );
    items
}

/// The longest `Retry-After` honoured; a longer one is cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Where an output's lines go. The writer awaits each write and gives up
/// on it at once when aborted; a network sink does its requests on the
/// runtime (no thread blocked waiting for an answer), and a sink whose
/// writes block (a file, standard output) runs them on tokio's blocking
/// threads through [`Blocking`].
pub(super) trait Sink: Send + 'static {
    /// Writes the pending lines of `batch`, advancing `batch.done` past
    /// every line known to be written whole, also when failing part way.
    fn write<'a>(&'a mut self, batch: &'a mut Batch) -> BoxFuture<'a, io::Result<()>>;
    /// Makes what was written durable (fsync for files).
    fn sync(&mut self) -> BoxFuture<'_, io::Result<()>>;
    /// What the sink writes to, for messages (a path or `stdout`).
    fn target(&self) -> String;
    /// Most lines handed to one [`Sink::write`].
    fn max_batch(&self) -> usize {
        MAX_BATCH
    }
    /// First and longest wait between retries of a failed write.
    fn backoff(&self) -> (Duration, Duration) {
        (BACKOFF_START, BACKOFF_MAX)
    }
    /// Makes this sink one of several lanes its writer runs at once, each
    /// taking its own batches from the queue (as Beats' output workers
    /// do), and returns the sinks of the other lanes: a network sink keeps
    /// its requests in flight without waiting for a whole batch. Only
    /// asked when nothing needs its writes in order (a memory queue). No
    /// other lane unless the sink says so.
    fn split_lanes(&mut self) -> Vec<Box<dyn Sink>> {
        Vec::new()
    }
}

/// A sink whose methods block: wrapped in [`Blocking`] to become a
/// [`Sink`].
pub(super) trait BlockingSink: Send + 'static {
    /// As [`Sink::write`], blocking.
    fn write(&mut self, batch: &mut Batch) -> io::Result<()>;
    /// As [`Sink::sync`], blocking.
    fn sync(&mut self) -> io::Result<()>;
    /// As [`Sink::target`].
    fn target(&self) -> String;
    /// As [`Sink::max_batch`].
    fn max_batch(&self) -> usize {
        MAX_BATCH
    }
}

/// Runs a [`BlockingSink`] on tokio's blocking threads, one call at a time.
pub(super) struct Blocking<S> {
    /// `None` only while a call runs, or after a call was abandoned (the
    /// writer is gone then too).
    inner: Option<S>,
    target: String,
    max_batch: usize,
}

impl<S: BlockingSink> Blocking<S> {
    pub(super) fn new(sink: S) -> Blocking<S> {
        Blocking {
            target: sink.target(),
            max_batch: sink.max_batch(),
            inner: Some(sink),
        }
    }

    /// Runs `call` on the sink on a blocking thread.
    async fn run<T: Send + 'static>(
        &mut self,
        call: impl FnOnce(&mut S) -> T + Send + 'static,
    ) -> io::Result<T> {
        let mut sink = self
            .inner
            .take()
            .ok_or_else(|| io::Error::other("the sink was lost by an abandoned write"))?;
        let joined = tokio::task::spawn_blocking(move || {
            let out = call(&mut sink);
            (sink, out)
        })
        .await;
        match joined {
            Ok((sink, out)) => {
                self.inner = Some(sink);
                Ok(out)
            }
            Err(e) => Err(io::Error::other(format!("a write panicked: {e}"))),
        }
    }
}

impl<S: BlockingSink> Sink for Blocking<S> {
    fn write<'a>(&'a mut self, batch: &'a mut Batch) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(async move {
            let taken = std::mem::take(batch);
            let (back, result) = self
                .run(move |s| {
                    let mut b = taken;
                    let r = s.write(&mut b);
                    (b, r)
                })
                .await?;
            *batch = back;
            result
        })
    }

    fn sync(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move { self.run(|s| s.sync()).await? })
    }

    fn target(&self) -> String {
        self.target.clone()
    }

    fn max_batch(&self) -> usize {
        self.max_batch
    }
}

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
                while batch.lines.len() < max_batch {
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
            let taken = batch.lines.len();
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

/// Writes `batch` until every line is settled, retrying with backoff;
/// `Some(unwritten)` when aborted first.
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
        if batch.remaining() == 0 {
            return None;
        }
        let (done, dropped, duplicates) = (batch.done, batch.dropped, batch.duplicates);
        // If the write is abandoned its progress is unknown: count all.
        let pending = batch.remaining();
        let started = std::time::Instant::now();
        let result = tokio::select! {
            biased;
            r = sink.write(batch) => r,
            _ = control.abort.cancelled() => return Some(pending),
        };
        metrics.latency.observe(started.elapsed().as_secs_f64());
        // Acknowledged before the terms' step-down may complete, so a
        // leader's last checkpoint includes what it delivered.
        batch.acknowledge_from(done);
        drop(holds);
        let newly_dropped = batch.dropped - dropped;
        metrics
            .written
            .inc_by((batch.done - done - newly_dropped) as u64);
        metrics.dropped.inc_by(newly_dropped as u64);
        if newly_dropped > 0 {
            metrics
                .health
                .dropped(newly_dropped as u64, batch.drop_reason.take());
        }
        metrics
            .duplicates
            .inc_by((batch.duplicates - duplicates) as u64);
        match result {
            Ok(()) => {
                metrics.health.succeeded();
                return None;
            }
            Err(e) => {
                let target = sink.target();
                // At least our backoff; longer if the server asked.
                let wait = batch
                    .retry_after
                    .take()
                    .map_or(backoff, |r| r.min(MAX_RETRY_AFTER).max(backoff));
                tracing::warn!(
                    output = %name,
                    target = %target,
                    error = %e,
                    pending = batch.remaining(),
                    retry_in_ms = wait.as_millis() as u64,
                    "output write failed; retrying",
                );
                metrics.health.failed(e.to_string());
                metrics.errors.inc();
                metrics.failed.inc_by(batch.remaining() as u64);
                tokio::select! {
                    biased;
                    _ = control.abort.cancelled() => return Some(batch.remaining()),
                    _ = tokio::time::sleep(wait) => {}
                }
                backoff = (backoff * 2).min(backoff_max);
            }
        }
    }
}

/// Hands the lines of a disk queue to its writer in order, until the
/// queue is closed and read to its end or the writer is gone.
pub(super) async fn feed_from_disk(
    name: Arc<str>,
    disk: Arc<DiskQueue>,
    tx: mpsc::Sender<Event>,
    max: usize,
    abort: CancellationToken,
    metrics: Arc<OutputHandles>,
    budget: ByteBudget,
) {
    let input: Arc<str> = Arc::from("queue.disk");
    let earlier_term = TermFence::of_an_earlier_run();
    let mut warned = false;
    loop {
        let read = tokio::select! {
            biased;
            _ = abort.cancelled() => return,
            r = disk.next_records(max) => r,
        };
        let records = match read {
            Ok(Some(lines)) => lines,
            Ok(None) => return,
            Err(e) => {
                // Reported once in the log and kept in `/status` (the
                // output is failing) until a read succeeds; a shutdown
                // stops the retries.
                let why = format!("cannot read the disk queue: {e}");
                if !warned {
                    tracing::error!(output = %name, "{why}; retrying every second");
                    warned = true;
                }
                metrics.health.failed(why);
                tokio::select! {
                    biased;
                    _ = abort.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                continue;
            }
        };
        warned = false;
        for record in records {
            // The hand-over to the writer holds its bytes too.
            let permit = tokio::select! {
                biased;
                _ = abort.cancelled() => return,
                p = budget.reserve(budget.cost(record.line.len())) => p,
            };
            let Some(permit) = permit else { return };
            let gated_of_earlier_run =
                record.carried.is_none() && record.earlier_run && is_gated(&record.line);
            let mut event = match record.carried {
                Some(carried) => Event::from_carried(Arc::clone(&input), record.line, carried),
                None => Event::from_line(Arc::clone(&input), record.line, Ack::untracked()),
            };
            if gated_of_earlier_run {
                // Its term ended with the run that stored it, and its
                // checkpoint never moved past it: the writer discards it.
                event = event.with_fence(Arc::clone(&earlier_term));
            }
            if tx.send(event).await.is_err() {
                return;
            }
            permit.forget();
        }
    }
}

/// Whether a stored document comes from a leader-gated input: only those
/// carry the `leader` stamp (a payload cannot set it).
fn is_gated(line: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Stamp {
        leader: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Stamp>(line).is_ok_and(|s| s.leader.is_some())
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::Mutex;
    use std::task::Poll;

    use serde_json::{Map, Value};
    use tokio::time::Instant;

    use super::super::file::tests::{all_lines, line};
    use super::super::file::{FileSink, RotationBlocker};
    use super::super::{Closed, FileSettings, OutputKind, OutputMetrics, OutputSettings, Outputs};
    use super::*;

    /// An event whose NDJSON line is `line(n)`: exactly 100 bytes.
    fn ev(n: usize) -> Event {
        let text = String::from_utf8(line(n)).unwrap();
        let doc: Map<String, Value> = serde_json::from_str(text.trim_end()).unwrap();
        let e = Event::new(Arc::from(format!("input-{}", n % 2)), doc, Ack::untracked());
        assert_eq!(e.to_ndjson(), line(n));
        e
    }

    /// Records what it writes; every write first reports that it started
    /// and then waits for a go-ahead (or for the gate to be dropped).
    struct GateSink {
        written: Arc<Mutex<Vec<Vec<u8>>>>,
        entered: mpsc::UnboundedSender<usize>,
        gate: std::sync::mpsc::Receiver<()>,
    }

    impl BlockingSink for GateSink {
        fn write(&mut self, batch: &mut Batch) -> io::Result<()> {
            let _ = self.entered.send(batch.remaining());
            let _ = self.gate.recv();
            self.written
                .lock()
                .unwrap()
                .extend(batch.pending().iter().cloned());
            batch.done = batch.lines.len();
            Ok(())
        }
        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn target(&self) -> String {
            "gate".into()
        }
    }

    struct Gated {
        outputs: Outputs,
        written: Arc<Mutex<Vec<Vec<u8>>>>,
        entered: mpsc::UnboundedReceiver<usize>,
        gate: std::sync::mpsc::Sender<()>,
        metrics: OutputMetrics,
    }

    fn gated(capacity: usize) -> Gated {
        let written = Arc::new(Mutex::new(Vec::new()));
        let (entered_tx, entered) = mpsc::unbounded_channel();
        let (gate, gate_rx) = std::sync::mpsc::channel();
        let sink = GateSink {
            written: Arc::clone(&written),
            entered: entered_tx,
            gate: gate_rx,
        };
        let metrics = OutputMetrics::new();
        let outputs = Outputs::launch(
            vec![("gated".to_string(), capacity, Box::new(sink))],
            metrics.clone(),
        )
        .unwrap();
        Gated {
            outputs,
            written,
            entered,
            gate,
            metrics,
        }
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    /// Polls `fut` exactly once.
    async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut *fut).poll(cx))).await
    }

    #[test]
    fn settled_lines_move_in_front_of_those_left_to_retry() {
        let mut batch = Batch {
            lines: vec![line(0), line(1), line(2), line(3), line(4)],
            done: 1,
            ..Batch::default()
        };
        batch.settle(&[false, true, false, true]);
        assert_eq!(batch.done, 3);
        assert_eq!(
            batch.lines,
            [line(0), line(2), line(4), line(1), line(3)],
            "settled before, settled now, then the rest in order"
        );
        // Flags missing at the end count as not settled.
        batch.settle(&[true]);
        assert_eq!(batch.done, 4);
        assert_eq!(batch.pending(), [line(3)]);
    }

    #[test]
    fn only_settled_lines_are_acknowledged_and_acks_follow_their_lines() {
        use crate::pipeline::ack::{Ack, tests::Recorder};
        let r = Arc::new(Recorder::default());
        let mut batch = Batch::default();
        batch.push(ev(0)); // no acknowledgement
        for n in 1..5 {
            batch.push(ev(n).with_ack(Ack::new(r.clone(), n as u64)));
        }
        assert_eq!(batch.acks.len(), batch.lines.len());
        // The server took lines 2 and 4 of 0..5.
        batch.settle(&[false, false, true, false, true]);
        batch.acknowledge_from(0);
        assert_eq!(*r.0.lock().unwrap(), [2, 4]);
        assert_eq!(batch.pending(), [line(0), line(1), line(3)]);
        batch.settle(&[true, true, true]);
        batch.acknowledge_from(2);
        assert_eq!(*r.0.lock().unwrap(), [2, 4, 1, 3]);
    }

    #[tokio::test]
    async fn written_events_are_acknowledged_and_unwritten_ones_are_not() {
        use crate::pipeline::ack::{Ack, tests::Recorder};
        let r = Arc::new(Recorder::default());
        let mut g = gated(8);
        let tx = g.outputs.sender("gated").unwrap();
        tx.send(ev(0).with_ack(Ack::new(r.clone(), 0)))
            .await
            .unwrap();
        assert_eq!(g.entered.recv().await, Some(1));
        tx.send(ev(1).with_ack(Ack::new(r.clone(), 1)))
            .await
            .unwrap();
        assert!(r.0.lock().unwrap().is_empty(), "nothing is written yet");
        g.gate.send(()).unwrap();
        // Event 1 waits in the queue; a shutdown that gives up leaves it.
        assert_eq!(g.entered.recv().await, Some(1));
        let left = g
            .outputs
            .shutdown(Instant::now() + Duration::from_millis(50))
            .await;
        assert_eq!(left, [("gated".to_string(), 1)]);
        assert_eq!(*r.0.lock().unwrap(), [0], "only the written event");
    }

    /// A term's events queued behind a write are not sent once the term
    /// ended, and are not acknowledged; the write under way when it ended
    /// holds the step-down until it is answered.
    #[tokio::test]
    async fn a_terms_queued_events_are_not_sent_after_it_ended() {
        use crate::pipeline::ack::{Ack, tests::Recorder};
        use crate::pipeline::event::TermFence;
        use tokio_util::task::TaskTracker;
        let r = Arc::new(Recorder::default());
        let ended = CancellationToken::new();
        let step_down = TaskTracker::new();
        let fence = TermFence::new(ended.clone(), step_down.clone());
        let mut g = gated(8);
        let tx = g.outputs.sender("gated").unwrap();
        tx.send(
            ev(0)
                .with_ack(Ack::new(r.clone(), 0))
                .with_fence(fence.clone()),
        )
        .await
        .unwrap();
        // The write of event 0 is under way; 1 and 2 (and 3, of no term)
        // wait behind it.
        assert_eq!(g.entered.recv().await, Some(1));
        for n in 1..3 {
            tx.send(
                ev(n)
                    .with_ack(Ack::new(r.clone(), n as u64))
                    .with_fence(fence.clone()),
            )
            .await
            .unwrap();
        }
        tx.send(ev(3)).await.unwrap();
        // The term ends: its step-down waits for the write under way.
        ended.cancel();
        step_down.close();
        let mut waiting = Box::pin(step_down.wait());
        assert!(
            poll_once(&mut waiting).await.is_pending(),
            "the write holds the step-down"
        );
        g.gate.send(()).unwrap();
        waiting.await;
        assert_eq!(
            *r.0.lock().unwrap(),
            [0],
            "the write under way was answered and acknowledged"
        );
        // Only event 3 (no term) is written after that.
        assert_eq!(g.entered.recv().await, Some(1));
        g.gate.send(()).unwrap();
        g.outputs.shutdown(far()).await;
        assert_eq!(*g.written.lock().unwrap(), [line(0), line(3)]);
        assert_eq!(
            *r.0.lock().unwrap(),
            [0],
            "events not sent are not acknowledged"
        );
        assert_eq!(g.metrics.events_term_ended("gated"), 2);
    }

    /// A `file` output named `default` with its queue on disk in `queue`.
    fn with_disk_queue(
        file: FileSettings,
        queue: std::path::PathBuf,
        metrics: OutputMetrics,
    ) -> Outputs {
        Outputs::start(
            vec![OutputSettings {
                name: "default".into(),
                kind: OutputKind::File(file),
                queue_events: 8,
                memory: Default::default(),
                disk: Some(super::super::DiskSettings {
                    path: Some(queue),
                    max_size: 1 << 20,
                }),
            }],
            metrics,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_node_local_event_stored_in_the_disk_queue_is_acknowledged_at_once() {
        use crate::pipeline::ack::{Ack, tests::Recorder};
        let dir = tempfile::tempdir().unwrap();
        let r = Arc::new(Recorder::default());
        let outputs = with_disk_queue(
            FileSettings::new(dir.path().join("out")),
            dir.path().join("queue"),
            OutputMetrics::new(),
        );
        let tx = outputs.sender("default").unwrap();
        tx.send(ev(0).with_ack(Ack::new(r.clone(), 5)))
            .await
            .unwrap();
        assert_eq!(
            *r.0.lock().unwrap(),
            [5],
            "stored is delivered: it survives a restart"
        );
        outputs.shutdown(far()).await;
    }

    #[tokio::test]
    async fn a_hung_disk_does_not_hold_shutdown_past_its_deadline() {
        use super::super::running::OutputQueue;
        let dir = tempfile::tempdir().unwrap();
        let outputs = with_disk_queue(
            FileSettings::new(dir.path().join("out")),
            dir.path().join("queue"),
            OutputMetrics::new(),
        );
        let tx = outputs.sender("default").unwrap();
        tx.send(ev(0)).await.unwrap();
        let OutputQueue::Disk(d) = &outputs.running[0].sender.queue else {
            panic!("a disk queue");
        };
        // The disk stops answering: its thread is stuck.
        let stall = d.stall();
        let sending = tokio::spawn({
            let tx = tx.clone();
            async move { tx.send(ev(1)).await }
        });
        let started = std::time::Instant::now();
        let left = outputs
            .shutdown(Instant::now() + Duration::from_millis(300))
            .await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(left.len(), 1);
        let sent = tokio::time::timeout(Duration::from_secs(2), sending)
            .await
            .expect("the waiting send gave up")
            .unwrap();
        assert!(sent.is_err(), "not stored: the input keeps it");
        drop(stall);
    }

    #[tokio::test]
    async fn a_full_queue_makes_send_wait_and_nothing_is_dropped() {
        let mut g = gated(2);
        let tx = g.outputs.sender("gated").unwrap();
        assert_eq!(tx.output_name(), "gated");
        tx.send(ev(0)).await.unwrap();
        // The writer holds event 0 and is stuck writing it.
        assert_eq!(g.entered.recv().await, Some(1));
        tx.send(ev(1)).await.unwrap();
        tx.send(ev(2)).await.unwrap();
        assert_eq!(g.outputs.depth("gated"), Some(2));
        assert_eq!(g.metrics.queue_depth("gated"), 2);
        {
            let mut waiting = Box::pin(tx.send(ev(99)));
            assert!(poll_once(&mut waiting).await.is_pending());
            assert!(poll_once(&mut waiting).await.is_pending());
            // Dropped before completing: event 99 was not queued.
        }
        assert_eq!(g.outputs.depth("gated"), Some(2));

        let mut later = Box::pin({
            let tx = tx.clone();
            async move {
                tx.send(ev(3)).await?;
                tx.send(ev(4)).await
            }
        });
        assert!(poll_once(&mut later).await.is_pending());
        // Let every write through.
        drop(g.gate);
        later.await.unwrap();

        assert_eq!(g.outputs.shutdown(far()).await, [("gated".to_string(), 0)]);
        let want: Vec<Vec<u8>> = (0..5).map(line).collect();
        assert_eq!(*g.written.lock().unwrap(), want);
        assert_eq!(g.metrics.events_written("gated"), 5);
        assert_eq!(g.metrics.events_received("gated", "input-0"), 3);
        assert_eq!(g.metrics.events_received("gated", "input-1"), 2);
        assert_eq!(tx.send(ev(5)).await, Err(Closed));
        assert!(tx.is_closed());
    }

    #[tokio::test]
    async fn shutdown_after_the_deadline_counts_what_was_left() {
        let mut g = gated(10);
        let tx = g.outputs.sender("gated").unwrap();
        tx.send(ev(0)).await.unwrap();
        assert_eq!(g.entered.recv().await, Some(1));
        for n in 1..4 {
            tx.send(ev(n)).await.unwrap();
        }
        // The write of event 0 never finishes before the deadline.
        let left = g
            .outputs
            .shutdown(Instant::now() + Duration::from_millis(50))
            .await;
        assert_eq!(left, [("gated".to_string(), 4)]);
        assert_eq!(tx.send(ev(4)).await, Err(Closed));
        g.gate.send(()).unwrap();
    }

    #[tokio::test]
    async fn shutdown_drains_everything_queued_into_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let settings = FileSettings {
            number_of_files: 1024,
            ..FileSettings::new(dir.path().join("out"))
        };
        let metrics = OutputMetrics::new();
        let outputs = Outputs::start(
            vec![OutputSettings {
                name: "default".into(),
                kind: OutputKind::File(settings.clone()),
                queue_events: 10_000,
                memory: Default::default(),
                disk: None,
            }],
            metrics.clone(),
        )
        .unwrap();
        assert_eq!(outputs.names(), ["default"]);
        assert!(outputs.sender("other").is_none());
        assert_eq!(outputs.depth("other"), None);
        let tx = outputs.sender("default").unwrap();
        let n = 5000;
        for i in 0..n {
            tx.send(ev(i)).await.unwrap();
        }
        assert_eq!(outputs.shutdown(far()).await, [("default".to_string(), 0)]);
        assert_eq!(all_lines(&settings), (0..n).map(line).collect::<Vec<_>>());
        assert_eq!(metrics.events_written("default"), n as u64);
        assert_eq!(metrics.queue_depth("default"), 0);
        assert_eq!(tx.send(ev(0)).await, Err(Closed));
    }

    #[tokio::test]
    async fn a_failing_write_is_retried_until_it_succeeds_and_writes_each_event_once() {
        let dir = tempfile::tempdir().unwrap();
        let settings = FileSettings {
            rotate_every_kb: 1,
            number_of_files: 3,
            ..FileSettings::new(dir.path().join("out"))
        };
        let metrics = OutputMetrics::new();
        let outputs = Outputs::start(
            vec![OutputSettings {
                name: "default".into(),
                kind: OutputKind::File(settings.clone()),
                queue_events: 64,
                memory: Default::default(),
                disk: None,
            }],
            metrics.clone(),
        )
        .unwrap();
        let blocker = RotationBlocker::install(&settings);
        let tx = outputs.sender("default").unwrap();
        for i in 0..25 {
            tx.send(ev(i)).await.unwrap();
        }
        // Ten lines fill the first file; the rotation before the eleventh
        // fails until the blocker is removed.
        let give_up = Instant::now() + Duration::from_secs(30);
        while metrics.write_errors("default") < 2 {
            assert!(Instant::now() < give_up, "no write error seen");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(metrics.events_written("default"), 10);
        assert!(metrics.events_failed("default") >= metrics.write_errors("default"));
        blocker.remove();
        assert_eq!(outputs.shutdown(far()).await, [("default".to_string(), 0)]);
        assert_eq!(all_lines(&settings), (0..25).map(line).collect::<Vec<_>>());
        assert_eq!(metrics.events_written("default"), 25);
    }

    /// Gated events in a disk queue end with their term like those in
    /// memory: a stored event whose term ended is not sent and not
    /// acknowledged, and the gated records an earlier run left (their term
    /// ended with it) are discarded at start; node-local records of the
    /// earlier run are sent.
    #[tokio::test]
    async fn gated_events_in_a_disk_queue_end_with_their_term() {
        use crate::pipeline::ack::{Ack, tests::Recorder};
        use tokio_util::task::TaskTracker;
        let dir = tempfile::tempdir().unwrap();
        let queue_dir = dir.path().join("queue");
        let gated_line = |n: u32| {
            format!("{{\"n\":{n},\"leader\":{{\"lease\":\"l\",\"term\":1}}}}\n").into_bytes()
        };
        // What an earlier run stored and never delivered.
        let earlier = DiskQueue::open(&queue_dir, super::super::disk::DEFAULT_MAX_SIZE).unwrap();
        earlier.append(&gated_line(1)).await.unwrap();
        earlier.append(&line(2)).await.unwrap();
        earlier.close_and_join();

        // A small file whose rotation is blocked: once fillers fill it,
        // what follows is stored in the queue and cannot be delivered until
        // the blocker goes.
        let settings = FileSettings {
            rotate_every_kb: 1,
            number_of_files: 3,
            ..FileSettings::new(dir.path().join("out"))
        };
        let metrics = OutputMetrics::new();
        let outputs = with_disk_queue(settings.clone(), queue_dir.clone(), metrics.clone());
        let blocker = RotationBlocker::install(&settings);
        let tx = outputs.sender("default").unwrap();
        let fillers = 10..30;
        for i in fillers.clone() {
            tx.send(ev(i)).await.unwrap();
        }
        let r = Arc::new(Recorder::default());
        let running = TermFence::new(CancellationToken::new(), TaskTracker::new());
        let over = CancellationToken::new();
        over.cancel();
        let ended = TermFence::new(over, TaskTracker::new());
        tx.send(
            Event::from_line("gated".into(), gated_line(3), Ack::untracked())
                .with_ack(Ack::new(r.clone(), 3))
                .with_fence(running),
        )
        .await
        .unwrap();
        tx.send(
            Event::from_line("gated".into(), gated_line(4), Ack::untracked())
                .with_ack(Ack::new(r.clone(), 4))
                .with_fence(ended),
        )
        .await
        .unwrap();
        // Both are stored once the writer has failed twice on the
        // blocked rotation (the fillers come first).
        let give_up = Instant::now() + Duration::from_secs(30);
        while metrics.write_errors("default") < 2 {
            assert!(Instant::now() < give_up, "no write error seen");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            !r.0.lock().unwrap().contains(&3),
            "a gated event is not acknowledged when stored, only when delivered"
        );
        blocker.remove();
        assert_eq!(outputs.shutdown(far()).await, [("default".to_string(), 0)]);
        let mut want = vec![line(2)];
        want.extend(fillers.map(line));
        want.push(gated_line(3));
        assert_eq!(
            all_lines(&settings),
            want,
            "the earlier run's node-local record, the fillers and the running term's event"
        );
        assert_eq!(
            *r.0.lock().unwrap(),
            [3],
            "the ended term's event is not acknowledged"
        );
        assert_eq!(metrics.events_term_ended("default"), 2);
        // Discarded is acknowledged to the queue: nothing comes back.
        let again = DiskQueue::open(&queue_dir, super::super::disk::DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(again.depth(), 0);
    }

    /// A batch holding only events of ended terms never reaches the sink,
    /// and is still settled in the disk queue: nothing is left to send
    /// again at the next start.
    #[tokio::test]
    async fn a_batch_of_ended_terms_alone_is_settled_in_the_disk_queue() {
        use crate::pipeline::ack::{Ack, tests::Recorder};
        use tokio_util::task::TaskTracker;
        let dir = tempfile::tempdir().unwrap();
        let queue_dir = dir.path().join("queue");
        let settings = FileSettings::new(dir.path().join("out"));
        let metrics = OutputMetrics::new();
        let outputs = with_disk_queue(settings.clone(), queue_dir.clone(), metrics.clone());
        let tx = outputs.sender("default").unwrap();
        let r = Arc::new(Recorder::default());
        let over = CancellationToken::new();
        over.cancel();
        let ended = TermFence::new(over, TaskTracker::new());
        tx.send(
            Event::from_line(
                "gated".into(),
                b"{\"n\":1,\"leader\":{\"lease\":\"l\",\"term\":1}}\n".to_vec(),
                Ack::untracked(),
            )
            .with_ack(Ack::new(r.clone(), 1))
            .with_fence(ended),
        )
        .await
        .unwrap();
        assert_eq!(outputs.shutdown(far()).await, [("default".to_string(), 0)]);
        assert!(all_lines(&settings).is_empty());
        assert!(r.0.lock().unwrap().is_empty());
        assert_eq!(metrics.events_term_ended("default"), 1);
        let again = DiskQueue::open(&queue_dir, super::super::disk::DEFAULT_MAX_SIZE).unwrap();
        assert_eq!(again.depth(), 0);
    }

    /// The routing an event carries from its producer makes the bulk
    /// request that parsing its line would (same index, `_id` and source,
    /// `@metadata` cut out), for every way an input produces events; an
    /// event whose payload names its own data stream carries none.
    #[tokio::test]
    async fn routing_known_when_produced_makes_the_bulk_request_parsing_would() {
        use super::super::elasticsearch::bulk;
        use crate::inputs::DataStream;
        use crate::monitor::metrics::AgentMetrics;
        use crate::pipeline::publisher::{AgentFields, EventSink, TermStamp, payload_fields};
        use tokio_util::task::TaskTracker;

        type Bodies = Arc<Mutex<Vec<(Vec<u8>, Vec<u8>, bool)>>>;
        struct BulkBodies(Bodies);
        impl BlockingSink for BulkBodies {
            fn write(&mut self, batch: &mut Batch) -> io::Result<()> {
                for (k, line) in batch.pending().iter().enumerate() {
                    let meta = batch.pending_meta(k);
                    let (mut routed, mut parsed) = (Vec::new(), Vec::new());
                    bulk::append(&mut routed, line, meta);
                    bulk::append(&mut parsed, line, None);
                    self.0
                        .lock()
                        .unwrap()
                        .push((routed, parsed, meta.is_some()));
                }
                batch.done = batch.lines.len();
                Ok(())
            }
            fn sync(&mut self) -> io::Result<()> {
                Ok(())
            }
            fn target(&self) -> String {
                "bulk bodies".into()
            }
        }
        let bodies = Bodies::default();
        let outputs = Outputs::launch(
            vec![("default".into(), 64, Box::new(BulkBodies(bodies.clone())))],
            OutputMetrics::new(),
        )
        .unwrap();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = AgentMetrics::register(&mut registry);
        let agent = AgentFields {
            id: "id-1".into(),
            name: "agent-a".into(),
            version: "1".into(),
            node: "node-a".into(),
        };
        let stream = DataStream {
            kind: "metrics".into(),
            dataset: "kubernetes.state_pod".into(),
            namespace: "prod".into(),
        };
        let sink = |term: Option<TermStamp>| {
            EventSink::new(
                "in",
                "exec",
                &agent,
                &stream,
                term,
                CancellationToken::new(),
                Arc::new(outputs.sender("default").unwrap().for_input("in")),
                metrics.input_counters("in"),
            )
        };
        let local = sink(None);
        let gated = sink(Some(TermStamp {
            lease: "l".into(),
            term: 3,
            token: CancellationToken::new(),
            tracker: TaskTracker::new(),
        }));
        let map = |text: &str| -> Map<String, Value> { serde_json::from_str(text).unwrap() };
        let forged = r#"{"a":"x\"y","@metadata":{"_id":"forged"},"n":[1,{"m":null}]}"#;
        local
            .emit_at(1_000_000, "obj-1", map(forged))
            .await
            .unwrap();
        gated
            .emit_at(2_000_000, "obj-2", map(forged))
            .await
            .unwrap();
        local.emit(map(r#"{"b":2}"#)).await.unwrap();
        local
            .emit(map(r#"{"c":3,"data_stream":{"dataset":"own"}}"#))
            .await
            .unwrap();
        local
            .emit_message("hello \"world\"", Some("cut"))
            .await
            .unwrap();
        local
            .emit_fields(Some(3_000_000), &payload_fields(&map(r#"{"d":4}"#)), None)
            .await
            .unwrap();
        local
            .with_data_stream(&DataStream {
                kind: "logs".into(),
                dataset: String::new(),
                namespace: "ns".into(),
            })
            .emit(map(r#"{"e":5}"#))
            .await
            .unwrap();
        assert_eq!(outputs.shutdown(far()).await, [("default".to_string(), 0)]);
        let bodies = bodies.lock().unwrap();
        assert_eq!(bodies.len(), 7);
        // The same action line; the same source document (parsing may
        // order its keys otherwise).
        for (routed, parsed, _) in bodies.iter() {
            let split = |body: &[u8]| -> (String, Value) {
                let text = String::from_utf8(body.to_vec()).unwrap();
                let (action, source) = text.trim_end().split_once('\n').unwrap();
                (action.to_string(), serde_json::from_str(source).unwrap())
            };
            assert_eq!(split(routed), split(parsed));
        }
        let routed: Vec<bool> = bodies.iter().map(|b| b.2).collect();
        assert_eq!(routed, [true, true, true, false, true, true, true]);
        let first = String::from_utf8_lossy(&bodies[0].0).into_owned();
        assert!(
            first.starts_with(r#"{"create":{"_index":"metrics-kubernetes.state_pod-prod","_id":""#),
            "{first}"
        );
        assert!(
            !first.contains("@metadata") && !first.contains("forged"),
            "{first}"
        );
        assert!(
            String::from_utf8_lossy(&bodies[6].0)
                .starts_with(r#"{"create":{"_index":"logs-generic-ns"}}"#)
        );
    }

    #[test]
    fn only_documents_stamped_with_a_term_are_gated() {
        assert!(is_gated(
            b"{\"a\":1,\"leader\":{\"lease\":\"l\",\"term\":2}}\n"
        ));
        assert!(!is_gated(b"{\"a\":{\"leader\":1}}\n"));
        assert!(!is_gated(b"not json\n"));
    }

    #[tokio::test]
    async fn start_fails_naming_the_output_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"").unwrap();
        let err = Outputs::start(
            vec![OutputSettings {
                name: "default".into(),
                kind: OutputKind::File(FileSettings::new(plain.join("sub"))),
                queue_events: 1,
                memory: Default::default(),
                disk: None,
            }],
            OutputMetrics::new(),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("output `default`"), "{msg}");
        assert!(msg.contains(&*plain.to_string_lossy()), "{msg}");
    }

    #[test]
    fn start_needs_a_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let sink = FileSink::open(FileSettings::new(dir.path())).unwrap();
        let err = Outputs::launch(vec![("o".into(), 1, Box::new(sink))], OutputMetrics::new())
            .unwrap_err();
        assert!(err.to_string().contains("tokio runtime"), "{err}");
    }
}
