//! The writer's behaviour through `Outputs`: acknowledgements follow
//! delivery, ended terms are never sent, full queues wait, failed writes
//! are retried, shutdown drains or counts what it left.

use std::future::Future;
use std::sync::Mutex;
use std::task::Poll;

use serde_json::{Map, Value};
use tokio::time::Instant;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::super::disk::DiskQueue;
use super::super::file::tests::{all_lines, line};
use super::super::file::{FileSink, RotationBlocker};
use super::super::sink::{Answers, BlockingSink, Outgoing};
use super::super::{Closed, FileSettings, OutputKind, OutputMetrics, OutputSettings, Outputs};
use crate::pipeline::ack::Ack;
use crate::pipeline::event::{Event, GatedTerm};

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
    fn send(&mut self, out: &Outgoing) -> Answers {
        let _ = self.entered.send(out.len());
        let _ = self.gate.recv();
        self.written
            .lock()
            .unwrap()
            .extend(out.lines().iter().cloned());
        Answers::delivered(out.len())
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
    use crate::pipeline::event::GatedTerm;
    use tokio_util::task::TaskTracker;
    let r = Arc::new(Recorder::default());
    let ended = CancellationToken::new();
    let step_down = TaskTracker::new();
    let term = GatedTerm::new(ended.clone(), step_down.clone());
    let mut g = gated(8);
    let tx = g.outputs.sender("gated").unwrap();
    tx.send(
        ev(0)
            .with_ack(Ack::new(r.clone(), 0))
            .with_term(term.clone()),
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
                .with_term(term.clone()),
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

/// The settings of a `file` output named `default` holding `queue_events`
/// in memory, or its queue on disk in `disk`.
fn file_output(
    file: FileSettings,
    queue_events: usize,
    disk: Option<std::path::PathBuf>,
) -> Vec<OutputSettings> {
    vec![OutputSettings {
        name: "default".into(),
        kind: OutputKind::file(file),
        queue_events,
        memory: Default::default(),
        disk: disk.map(|path| super::super::DiskSettings {
            path: Some(path),
            max_size: 1 << 20,
        }),
    }]
}

/// A `file` output named `default` with its queue on disk in `queue`.
fn with_disk_queue(
    file: FileSettings,
    queue: std::path::PathBuf,
    metrics: OutputMetrics,
) -> Outputs {
    Outputs::start(file_output(file, 8, Some(queue)), metrics).unwrap()
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
    let outputs =
        Outputs::start(file_output(settings.clone(), 10_000, None), metrics.clone()).unwrap();
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
    let outputs = Outputs::start(file_output(settings.clone(), 64, None), metrics.clone()).unwrap();
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
    let gated_line =
        |n: u32| format!("{{\"n\":{n},\"leader\":{{\"lease\":\"l\",\"term\":1}}}}\n").into_bytes();
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
    let running = GatedTerm::new(CancellationToken::new(), TaskTracker::new());
    let over = CancellationToken::new();
    over.cancel();
    let ended = GatedTerm::new(over, TaskTracker::new());
    tx.send(
        Event::from_line("gated".into(), gated_line(3), Ack::untracked())
            .with_ack(Ack::new(r.clone(), 3))
            .with_term(running),
    )
    .await
    .unwrap();
    tx.send(
        Event::from_line("gated".into(), gated_line(4), Ack::untracked())
            .with_ack(Ack::new(r.clone(), 4))
            .with_term(ended),
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
    let ended = GatedTerm::new(over, TaskTracker::new());
    tx.send(
        Event::from_line(
            "gated".into(),
            b"{\"n\":1,\"leader\":{\"lease\":\"l\",\"term\":1}}\n".to_vec(),
            Ack::untracked(),
        )
        .with_ack(Ack::new(r.clone(), 1))
        .with_term(ended),
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
        fn send(&mut self, out: &Outgoing) -> Answers {
            for (k, line) in out.lines().iter().enumerate() {
                let meta = out.meta(k);
                let (mut routed, mut parsed) = (Vec::new(), Vec::new());
                bulk::append(&mut routed, line, meta);
                bulk::append(&mut parsed, line, None);
                self.0
                    .lock()
                    .unwrap()
                    .push((routed, parsed, meta.is_some()));
            }
            Answers::delivered(out.len())
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

#[tokio::test]
async fn start_fails_naming_the_output_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"").unwrap();
    let err = Outputs::start(
        file_output(FileSettings::new(plain.join("sub")), 1, None),
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
    let err =
        Outputs::launch(vec![("o".into(), 1, Box::new(sink))], OutputMetrics::new()).unwrap_err();
    assert!(err.to_string().contains("tokio runtime"), "{err}");
}
