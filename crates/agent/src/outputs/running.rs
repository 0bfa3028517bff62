//! The running outputs: one bounded queue (in memory or on disk) and one
//! writer task per output, and the senders inputs queue events with.

use std::fmt;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::budget::ByteBudget;
use super::metrics::OutputHandles;
use super::settings::{MemoryLimits, OutputSettings, shared_disk_paths};
use super::sink::Sink;
#[cfg(test)]
use super::sink::{Blocking, BlockingSink};
use super::writer::{self, Control};
use super::{OutputHealth, OutputMetrics, disk};
use crate::pipeline::event::{Carried, Event};

pub use crate::pipeline::queue::Closed;

impl crate::pipeline::queue::EventQueue for EventSender {
    fn send(&self, ev: Event) -> futures_util::future::BoxFuture<'_, Result<(), Closed>> {
        Box::pin(EventSender::send(self, ev))
    }
}

/// Hands events to one output's queue. Clones share the queue.
#[derive(Clone)]
pub struct EventSender {
    name: Arc<str>,
    pub(super) queue: OutputQueue,
    handles: Arc<OutputHandles>,
    /// Bytes of events held in memory, shared with the writer.
    budget: ByteBudget,
    /// Larger events are dropped.
    max_event_bytes: usize,
    /// Set by [`EventSender::for_input`]: the per-input counter, found once.
    received: Option<prometheus_client::metrics::counter::Counter>,
}

impl fmt::Debug for EventSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventSender")
            .field("output", &self.name)
            .finish_non_exhaustive()
    }
}

impl EventSender {
    /// Queues `ev`, waiting while the queue is full (never drops).
    ///
    /// Cancel-safe: if the future is dropped before it completes, the event
    /// was not queued. Fails only when the output has shut down.
    pub async fn send(&self, mut ev: Event) -> Result<(), Closed> {
        if ev.ndjson().len() > self.max_event_bytes {
            // It could never be queued: refused for good, like a document
            // the server can never take (its input may move past it).
            self.handles.dropped.inc();
            self.handles.health.dropped(
                1,
                Some(format!(
                    "an event of input {} ({} bytes) is larger than max_event_bytes ({})",
                    ev.input_id,
                    ev.ndjson().len(),
                    self.max_event_bytes
                )),
            );
            tracing::warn!(output = %self.name, input = %ev.input_id, bytes = ev.ndjson().len(), max_event_bytes = self.max_event_bytes, "an event larger than max_event_bytes was dropped (counted in leasehold_output_events_dropped_total)");
            ev.arm();
            ev.refuse();
            return Ok(());
        }
        let input = self.received.is_none().then(|| Arc::clone(&ev.input_id));
        self.queue.push(&self.name, ev, &self.budget).await?;
        match (&self.received, input) {
            (Some(counter), _) => {
                counter.inc();
            }
            (None, Some(input)) => self.handles.received(&input),
            (None, None) => {}
        }
        self.handles.set_depth(self.queue.depth());
        self.handles.set_bytes(self.budget.used());
        Ok(())
    }

    /// Bytes of events held in memory now (queue and batch being written).
    pub fn bytes(&self) -> usize {
        self.budget.used()
    }

    /// A sender for one input's events: its per-input metric is looked up
    /// once here instead of at every event.
    pub fn for_input(&self, input: &str) -> EventSender {
        EventSender {
            received: Some(self.handles.received_counter(input)),
            ..self.clone()
        }
    }

    /// The name of the output this sender feeds.
    pub fn output_name(&self) -> &str {
        &self.name
    }

    /// Events queued now.
    pub fn depth(&self) -> usize {
        self.queue.depth()
    }

    /// Whether the output is delivering, and its latest error.
    pub fn health(&self) -> OutputHealth {
        self.handles.health.get()
    }

    /// True once the output no longer accepts events.
    pub fn is_closed(&self) -> bool {
        self.queue.is_closed()
    }
}

/// Where an output's events wait.
#[derive(Clone)]
pub(super) enum OutputQueue {
    Memory(mpsc::Sender<Event>),
    Disk(Arc<disk::DiskQueue>),
}

impl OutputQueue {
    fn depth(&self) -> usize {
        match self {
            OutputQueue::Memory(tx) => queue_depth(tx),
            OutputQueue::Disk(d) => d.depth(),
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            OutputQueue::Memory(tx) => tx.is_closed(),
            OutputQueue::Disk(d) => d.is_closed(),
        }
    }

    async fn push(&self, output: &str, mut ev: Event, budget: &ByteBudget) -> Result<(), Closed> {
        match self {
            OutputQueue::Memory(tx) => {
                // Taken until the writer is done with the event's batch;
                // given back at once if the send does not complete.
                let permit = budget
                    .reserve(budget.cost(ev.ndjson().len()))
                    .await
                    .ok_or(Closed)?;
                let slot = tx.reserve().await.map_err(|_| Closed)?;
                ev.arm();
                slot.send(ev);
                permit.forget();
                Ok(())
            }
            OutputQueue::Disk(d) => {
                let mut warned = false;
                // Taken: a cancelled append discards it (counted).
                ev.arm();
                let (line, Carried { ack, term, meta }) = ev.into_parts();
                // A node-local event stored in the disk queue is delivered
                // for its producer: queue and checkpoint (the filestream
                // registry) live on the same node and survive a restart
                // together. A gated event is not: its checkpoint is the
                // cluster's and the next leader may run elsewhere, so it
                // is acknowledged only once the sink has it, and its
                // term's end discards it from the queue as from memory.
                // Only those keep their routing in memory too: a node-local
                // record read back is parsed by the output that needs it.
                let (mut carried, settle_when_stored) = match term {
                    Some(term) => (
                        Some(Carried {
                            ack,
                            term: Some(term),
                            meta,
                        }),
                        None,
                    ),
                    None => (None, Some(ack)),
                };
                loop {
                    match d.append_carrying(&line, carried.take()).await {
                        Ok(()) => {
                            if let Some(a) = settle_when_stored {
                                a.settle();
                            }
                            return Ok(());
                        }
                        Err((e, _)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                            return Err(Closed);
                        }
                        Err((e, back)) => {
                            carried = back;
                            // A full or failing disk: wait, never drop.
                            if !warned {
                                tracing::error!(output, error = %e, "cannot write to the disk queue; the input waits and retries");
                                warned = true;
                            }
                            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                        }
                    }
                }
            }
        }
    }
}

fn queue_depth<T>(tx: &mpsc::Sender<T>) -> usize {
    tx.max_capacity() - tx.capacity()
}

/// An output about to start: name, queue capacity, sink, disk queue.
struct Planned {
    name: String,
    capacity: usize,
    sink: Box<dyn Sink>,
    disk: Option<Arc<disk::DiskQueue>>,
    memory: MemoryLimits,
}

pub(super) struct Running {
    pub(super) sender: EventSender,
    writer: JoinHandle<usize>,
}

/// The running outputs: one queue and one writer task each.
pub struct Outputs {
    pub(super) running: Vec<Running>,
    close: CancellationToken,
    abort: CancellationToken,
}

impl fmt::Debug for Outputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outputs")
            .field("names", &self.names())
            .finish_non_exhaustive()
    }
}

impl Outputs {
    /// Opens every output (creating directories and files) and spawns one
    /// writer task per output on the current tokio runtime. An error names
    /// the output and the path that could not be opened.
    pub fn start(
        settings: Vec<OutputSettings>,
        metrics: OutputMetrics,
    ) -> std::io::Result<Outputs> {
        if let Some(e) = shared_disk_paths(&settings).first() {
            return Err(std::io::Error::other(e.to_string()));
        }
        let mut planned = Vec::with_capacity(settings.len());
        for s in settings {
            let sink = s
                .kind
                .open()
                .map_err(|e| std::io::Error::new(e.kind(), format!("output `{}`: {e}", s.name)))?;
            let disk = match &s.disk {
                None => None,
                Some(d) => {
                    let path = d.path.as_ref().ok_or_else(|| {
                        std::io::Error::other(format!(
                            "output `{}`: queue.disk.path is not set and no data path was given",
                            s.name
                        ))
                    })?;
                    let lost = metrics.disk_queue_lost_counter(&s.name);
                    let q = disk::DiskQueue::open_counted(path, d.max_size, lost).map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("output `{}`: queue.disk: {e}", s.name),
                        )
                    })?;
                    if q.depth() > 0 {
                        tracing::info!(output = %s.name, events = q.depth(), path = %path.display(), "sending events left in the disk queue by an earlier run");
                    }
                    Some(Arc::new(q))
                }
            };
            planned.push(Planned {
                name: s.name,
                capacity: s.queue_events,
                sink,
                disk,
                memory: s.memory,
            });
        }
        Self::launch_queued(planned, metrics)
    }

    /// Spawns a writer for each (name, queue capacity, sink), queues in
    /// memory.
    #[cfg(test)]
    pub(super) fn launch<S: BlockingSink>(
        sinks: Vec<(String, usize, Box<S>)>,
        metrics: OutputMetrics,
    ) -> std::io::Result<Outputs> {
        Self::launch_queued(
            sinks
                .into_iter()
                .map(|(name, capacity, sink)| Planned {
                    name,
                    capacity,
                    sink: Box::new(Blocking::new(*sink)) as Box<dyn Sink>,
                    disk: None,
                    memory: MemoryLimits::default(),
                })
                .collect(),
            metrics,
        )
    }

    /// Spawns a writer for each (name, capacity, sink, disk queue); an
    /// output with a disk queue also gets a reader feeding its writer.
    fn launch_queued(sinks: Vec<Planned>, metrics: OutputMetrics) -> std::io::Result<Outputs> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| std::io::Error::other(format!("outputs need a tokio runtime: {e}")))?;
        let close = CancellationToken::new();
        let abort = CancellationToken::new();
        let mut running = Vec::with_capacity(sinks.len());
        for Planned {
            name,
            capacity,
            sink,
            disk,
            memory,
        } in sinks
        {
            let (tx, rx) = mpsc::channel(capacity.max(1));
            let budget = ByteBudget::new(memory.queue_bytes);
            let handles = Arc::new(metrics.handles(&name));
            let name: Arc<str> = name.into();
            let control = Control {
                close: close.clone(),
                abort: abort.clone(),
            };
            let queue = match &disk {
                None => OutputQueue::Memory(tx),
                Some(d) => {
                    let max = sink.max_batch().max(1);
                    runtime.spawn(super::disk_feed::feed_from_disk(
                        Arc::clone(&name),
                        Arc::clone(d),
                        tx,
                        max,
                        abort.clone(),
                        Arc::clone(&handles),
                        budget.clone(),
                    ));
                    handles.set_depth(d.depth());
                    OutputQueue::Disk(Arc::clone(d))
                }
            };
            let writer = runtime.spawn(writer::run_writer(
                Arc::clone(&name),
                rx,
                sink,
                control,
                Arc::clone(&handles),
                disk,
                budget.clone(),
            ));
            running.push(Running {
                sender: EventSender {
                    name,
                    queue,
                    handles,
                    budget,
                    max_event_bytes: usize::try_from(memory.max_event_bytes).unwrap_or(usize::MAX),
                    received: None,
                },
                writer,
            });
        }
        Ok(Outputs {
            running,
            close,
            abort,
        })
    }

    /// A sender to the output called `name`.
    pub fn sender(&self, name: &str) -> Option<EventSender> {
        self.find(name).map(|r| r.sender.clone())
    }

    /// Drops the per-input series of `input` from every output's metrics:
    /// the input is gone for good (its pod went).
    pub fn forget_input(&self, input: &str) {
        for r in &self.running {
            r.sender.handles.forget_input(input);
        }
    }

    /// The names of the outputs, in the order they were configured.
    pub fn names(&self) -> Vec<String> {
        self.running
            .iter()
            .map(|r| r.sender.name.to_string())
            .collect()
    }

    /// Events queued now in the output called `name`.
    pub fn depth(&self, name: &str) -> Option<usize> {
        self.find(name).map(|r| r.sender.depth())
    }

    /// Whether the output called `name` keeps its queue on disk (what it
    /// cannot write before a shutdown is sent after the next start).
    pub fn has_disk_queue(&self, name: &str) -> bool {
        self.find(name)
            .is_some_and(|r| matches!(r.sender.queue, OutputQueue::Disk(_)))
    }

    fn find(&self, name: &str) -> Option<&Running> {
        self.running.iter().find(|r| &*r.sender.name == name)
    }

    /// Closes the queues (later sends fail with [`Closed`]) and lets the
    /// writers write what is queued and flush (fsync for files) until
    /// `deadline`. Returns, per output, how many queued events were left
    /// unwritten: 0 unless the deadline passed first.
    pub async fn shutdown(self, deadline: tokio::time::Instant) -> Vec<(String, usize)> {
        self.close.cancel();
        for r in &self.running {
            if let OutputQueue::Disk(d) = &r.sender.queue {
                d.close();
            }
        }
        let running_disks: Vec<Arc<disk::DiskQueue>> = self
            .running
            .iter()
            .filter_map(|r| match &r.sender.queue {
                OutputQueue::Disk(d) => Some(Arc::clone(d)),
                OutputQueue::Memory(_) => None,
            })
            .collect();
        let mut left = Vec::with_capacity(self.running.len());
        for Running { sender, mut writer } in self.running {
            let result = match tokio::time::timeout_at(deadline, &mut writer).await {
                Ok(result) => result,
                Err(_) => {
                    self.abort.cancel();
                    // A hung disk answers no more: its callers stop waiting.
                    for r in &running_disks {
                        r.abort();
                    }
                    writer.await
                }
            };
            let n = match result {
                Ok(n) => n,
                Err(e) => {
                    tracing::error!(output = %sender.name, error = %e, "output writer ended abnormally");
                    0
                }
            };
            // A disk queue keeps everything not acknowledged; what was
            // written is fsynced unless the deadline passes first.
            let n = match &sender.queue {
                OutputQueue::Disk(d) => {
                    match tokio::time::timeout_at(deadline, d.sync()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(output = %sender.name, error = %e, "cannot fsync the disk queue at shutdown; a machine crash now could lose its last second");
                        }
                        Err(_) => {
                            d.abort();
                            tracing::warn!(output = %sender.name, "the disk queue did not fsync before the shutdown deadline; a machine crash now could lose its last second");
                        }
                    }
                    d.depth()
                }
                OutputQueue::Memory(_) => n,
            };
            left.push((sender.name.to_string(), n));
        }
        left
    }
}
