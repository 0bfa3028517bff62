//! Where an input's events go: it stamps the common fields, serializes the
//! event once, and queues it on the input's output. It refuses events once
//! the input's leadership term has ended, so a stepped-down leader
//! produces nothing.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::pipeline::ack::{Ack, Tally};
use crate::pipeline::event::{Carried, Event, GatedTerm, Meta, data_stream_index};
use crate::pipeline::processing::{Chain, InputProcessors};
use crate::pipeline::queue::EventQueue;
use crate::pipeline::routing::DataStream;

/// The agent's own fields on every event.
#[derive(Debug, Clone)]
pub struct AgentFields {
    /// `agent.id`.
    pub id: String,
    /// `agent.name`: the identity used in elections.
    pub name: String,
    /// `agent.version`.
    pub version: String,
    /// The node the agent runs on (`NODE_NAME`, else the host name): part
    /// of the ids of node-local documents, so the same metric of two
    /// nodes is two documents.
    pub node: String,
}

impl AgentFields {
    /// The node name as the shipped DaemonSet gives it (`NODE_NAME` from
    /// the downward API), else the host name.
    pub fn node_name() -> String {
        std::env::var("NODE_NAME")
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_default()
    }
}

/// The election term an input's events belong to.
#[derive(Debug, Clone)]
pub struct TermStamp {
    /// The Lease name.
    pub lease: String,
    /// `leaseTransitions` of the term.
    pub term: i64,
    /// Cancelled at the term's step-down.
    pub token: CancellationToken,
    /// The term's step-down waits for it to empty: outputs hold it while
    /// they write the term's events.
    pub tracker: TaskTracker,
}

/// Why an event was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The input is being stopped and may no longer wait for queue room.
    Stopped,
    /// The term the input runs under has ended.
    TermEnded,
    /// The output is shut down.
    OutputClosed,
}

/// The Elasticsearch index of `ds`.
fn index_of(ds: &DataStream) -> String {
    data_stream_index(Some(&ds.kind), Some(&ds.dataset), Some(&ds.namespace))
}

/// Keys the runtime sets; a payload cannot override them (`data_stream`
/// excepted: a payload may route itself).
const OWN_KEYS: [&str; 4] = ["@timestamp", "agent", "input", "leader"];

/// True for a key no payload sets in a document: those the runtime sets
/// itself, `@metadata`, and `data_stream` (see [`payload_fields`]).
pub fn reserved_payload_key(k: &str) -> bool {
    OWN_KEYS.contains(&k) || k == "@metadata" || k == "data_stream"
}

/// Appends the payload's fields (`,"k":v` each), leaving out the keys the
/// runtime sets itself.
fn push_payload(line: &mut Vec<u8>, payload: &Map<String, Value>) {
    push_payload_except(line, payload, &[]);
}

/// As [`push_payload`], leaving out `skip` too.
fn push_payload_except(line: &mut Vec<u8>, payload: &Map<String, Value>, skip: &[&str]) {
    for (k, v) in payload {
        if OWN_KEYS.contains(&k.as_str()) || k == "@metadata" || skip.contains(&k.as_str()) {
            continue;
        }
        push_pair(line, k, v);
    }
}

/// Appends one `,"key":value` pair.
pub fn push_pair(line: &mut Vec<u8>, key: &str, value: &Value) {
    line.push(b',');
    let _ = serde_json::to_writer(&mut *line, key);
    line.push(b':');
    let _ = serde_json::to_writer(&mut *line, value);
}

/// A payload as the `,"key":value` pairs [`EventSink::emit_fields`] takes,
/// without the keys the runtime sets itself.
/// `data_stream` is left out too: such documents go to their input's.
pub fn payload_fields(payload: &Map<String, Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() * 32);
    push_payload_except(&mut out, payload, &["data_stream"]);
    out
}

/// One top-level field added to every event of an input.
#[derive(Debug)]
struct AddedField {
    key: String,
    value: Value,
    /// `,"key":value`, serialized once.
    bytes: Vec<u8>,
    /// Where `value` starts in `bytes`: `bytes[1..value_at]` is `"key":`,
    /// what a serialized payload holding the key contains.
    value_at: usize,
}

impl AddedField {
    /// `"key":` as serialized.
    fn quoted_key(&self) -> &[u8] {
        &self.bytes[1..self.value_at]
    }
}

/// Merges `added` (a provider's fields) into `mine` (a payload's value of
/// the same top-level key): maps merge at every depth and the provider's
/// value wins wherever both have one, so a payload (a log line a Pod
/// wrote) can add keys under `kubernetes` but never claim another Pod,
/// namespace or container.
fn overlay(mine: &mut Value, added: &Value) {
    match (mine, added) {
        (Value::Object(m), Value::Object(a)) => {
            for (k, v) in a {
                match m.get_mut(k) {
                    Some(existing) => overlay(existing, v),
                    None => {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (mine, added) => *mine = added.clone(),
    }
}

/// `fields` (serialized `,"key":value` pairs) with the added fields whose
/// key is one of its top-level keys merged in (see [`overlay`]), or `None`
/// when it has none of them: a key named only inside a value (a nested
/// `"kubernetes":` in a decoded line) is not the payload's own.
fn merged_fields<'a>(fields: &[u8], added: &'a [AddedField]) -> Option<(Vec<u8>, Vec<&'a str>)> {
    // The common case costs one substring search per added key.
    if !added
        .iter()
        .any(|f| memchr::memmem::find(fields, f.quoted_key()).is_some())
    {
        return None;
    }
    let body = fields.strip_prefix(b",")?;
    let mut object = Vec::with_capacity(body.len() + 2);
    object.push(b'{');
    object.extend_from_slice(body);
    object.push(b'}');
    let Ok(mut payload) = serde_json::from_slice::<Map<String, Value>>(&object) else {
        return None;
    };
    let mut merged = Vec::new();
    for f in added {
        if let Some(mine) = payload.get_mut(&f.key) {
            overlay(mine, &f.value);
            merged.push(f.key.as_str());
        }
    }
    if merged.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(fields.len() + 64);
    for (k, v) in &payload {
        push_pair(&mut out, k, v);
    }
    Some((out, merged))
}

/// A document being written: its head, then the `,"key":value` pairs the
/// input appends (see [`EventSink::begin_fields`]).
pub struct BegunLine {
    line: Vec<u8>,
    head: usize,
}

impl BegunLine {
    /// Where the input appends its `,"key":value` pairs.
    pub fn pairs(&mut self) -> &mut Vec<u8> {
        &mut self.line
    }
}

/// The counters of one input's events: refused after its term ended, and
/// how the others ended (the monitoring layer registers them).
#[derive(Debug, Clone, Default)]
pub struct InputCounters {
    /// Events refused because the input's term had ended.
    pub refused: Counter,
    /// Events queued and how they ended.
    pub tally: Tally,
}

/// An input's handle for producing events.
#[derive(Clone)]
pub struct EventSink {
    input_id: Arc<str>,
    /// `"agent":{…},"input":{…},"leader":{…}` serialized once.
    common: Arc<[u8]>,
    /// `"data_stream":{…}` serialized once.
    data_stream: Arc<[u8]>,
    /// The index of that data stream, beside every event that goes there.
    index: Arc<str>,
    term: Option<TermStamp>,
    /// The term every event is bound to, shared by all of them.
    gated: Option<Arc<GatedTerm>>,
    /// For node-local inputs, the node: mixed into document ids. Gated
    /// inputs leave it out, so a successor's replay of a document has the
    /// same id wherever it runs.
    id_node: Option<Arc<str>>,
    abandon: CancellationToken,
    sender: Arc<dyn EventQueue>,
    refused: Counter,
    /// This input's events queued and how they ended, counted by their
    /// acknowledgements.
    tally: Arc<Tally>,
    /// Fields added to every event (see [`EventSink::with_fields`]).
    added: Option<Arc<Vec<AddedField>>>,
    /// The input's processors, and the chain that runs on this sink's
    /// data stream (see [`EventSink::with_processors`]).
    processors: Option<(Arc<InputProcessors>, Arc<Chain>)>,
}

impl EventSink {
    /// A sink for input `input_id` of `input_type`. `abandon` fires when a
    /// stopping input may no longer wait for room in a full queue.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        input_id: &str,
        input_type: &str,
        agent: &AgentFields,
        data_stream: &DataStream,
        term: Option<TermStamp>,
        abandon: CancellationToken,
        sender: Arc<dyn EventQueue>,
        counters: InputCounters,
    ) -> Self {
        let mut common = Vec::new();
        let mut field = |key: &str, value: Value| {
            if !common.is_empty() {
                common.push(b',');
            }
            common.extend_from_slice(json!(key).to_string().as_bytes());
            common.push(b':');
            common.extend_from_slice(value.to_string().as_bytes());
        };
        field(
            "agent",
            json!({"id": agent.id, "name": agent.name, "version": agent.version}),
        );
        field("input", json!({"id": input_id, "type": input_type}));
        if let Some(t) = &term {
            field("leader", json!({"lease": t.lease, "term": t.term}));
        }
        let ds = format!(
            "\"data_stream\":{}",
            json!({"type": data_stream.kind, "dataset": data_stream.dataset, "namespace": data_stream.namespace})
        );
        let gated = term
            .as_ref()
            .map(|t| GatedTerm::new(t.token.clone(), t.tracker.clone()));
        let id_node = term.is_none().then(|| Arc::from(agent.node.as_str()));
        EventSink {
            input_id: input_id.into(),
            common: common.into(),
            data_stream: ds.into_bytes().into(),
            index: index_of(data_stream).into(),
            term,
            gated,
            id_node,
            abandon,
            sender,
            refused: counters.refused,
            tally: Arc::new(counters.tally),
            added: None,
            processors: None,
        }
    }

    /// The same sink writing to another data stream (a stream of an input
    /// with several).
    pub fn with_data_stream(&self, data_stream: &DataStream) -> EventSink {
        let ds = format!(
            "\"data_stream\":{}",
            json!({"type": data_stream.kind, "dataset": data_stream.dataset, "namespace": data_stream.namespace})
        );
        EventSink {
            data_stream: ds.into_bytes().into(),
            index: index_of(data_stream).into(),
            processors: self.processors.as_ref().map(|(p, _)| {
                (
                    Arc::clone(p),
                    Arc::new(Chain::for_dataset(p, &data_stream.dataset)),
                )
            }),
            ..self.clone()
        }
    }

    /// The same sink running `processors` on every event before it is
    /// queued: those of the stream writing to `dataset` (and of every
    /// stream a derived sink writes to), then the input's.
    pub fn with_processors(mut self, processors: Arc<InputProcessors>, dataset: &str) -> EventSink {
        let chain = Arc::new(Chain::for_dataset(&processors, dataset));
        self.processors = Some((processors, chain));
        self
    }

    /// Queues a document produced for wall-clock time `at_us` (a periodic
    /// input's aligned timestamp) with a deterministic id, carried as
    /// `@metadata._id` as Beats do, so a sink can drop replays. The id of
    /// a node-local input's document also names the node: every pod of a
    /// DaemonSet runs the same input id.
    pub async fn emit_at(
        &self,
        at_us: i64,
        id: &str,
        payload: Map<String, Value>,
    ) -> Result<(), Refused> {
        self.emit_at_acked(at_us, id, payload, None).await
    }

    /// As [`EventSink::emit_at`], acknowledged through `ack` once its
    /// output delivered it: for stream inputs whose checkpoint may move
    /// only past delivered events.
    pub async fn emit_at_acked(
        &self,
        at_us: i64,
        id: &str,
        payload: Map<String, Value>,
        ack: Option<Ack>,
    ) -> Result<(), Refused> {
        let payload = self.with_added(payload);
        let mut line = self.start_line_at(Some(at_us), 208 + payload.len() * 48);
        let metadata_from = line.len();
        line.extend_from_slice(b",\"@metadata\":{\"_id\":");
        let id: Box<str> = match &self.id_node {
            Some(node) => crate::pipeline::event::document_id(&[id, node]).into(),
            None => id.into(),
        };
        let _ = serde_json::to_writer(&mut line, &id);
        line.push(b'}');
        let metadata = metadata_from..line.len();
        push_payload(&mut line, &payload);
        self.push_added(&mut line, |f| payload.contains_key(&f.key));
        let routes_itself = payload.contains_key("data_stream");
        self.finish_line(&mut line, routes_itself);
        let mut event = Event::from_line(self.input_id.clone(), line, self.ack(ack));
        if !routes_itself {
            event = event.with_meta(Meta {
                index: Arc::clone(&self.index),
                id: Some(id),
                metadata: Some(metadata),
            });
        }
        self.queue_event(event).await
    }

    /// The producing input's id.
    pub fn input_id(&self) -> &str {
        &self.input_id
    }

    /// True once events would be refused for leadership reasons.
    pub fn term_ended(&self) -> bool {
        self.term.as_ref().is_some_and(|t| t.token.is_cancelled())
    }

    /// Stamps `payload` and queues it, waiting while the output's queue is
    /// full. The payload's own `agent`, `input`, `leader` and `@timestamp`
    /// are replaced by the agent's.
    pub async fn emit(&self, payload: Map<String, Value>) -> Result<(), Refused> {
        let payload = self.with_added(payload);
        let mut line = self.start_line(64 + payload.len() * 32);
        push_payload(&mut line, &payload);
        self.push_added(&mut line, |f| payload.contains_key(&f.key));
        let routes_itself = payload.contains_key("data_stream");
        self.finish_line(&mut line, routes_itself);
        let event = Event::from_line(self.input_id.clone(), line, self.ack(None));
        if routes_itself {
            self.queue_event(event).await
        } else {
            self.queue_event(self.routed(event)).await
        }
    }

    /// Queues an event whose payload is `message` (and `error.message`
    /// when given): the common case of line-oriented inputs, without
    /// building a map.
    pub async fn emit_message(&self, message: &str, error: Option<&str>) -> Result<(), Refused> {
        let mut line = self.start_line(message.len() + 16);
        line.extend_from_slice(b",\"message\":");
        super::json_text::push_str(&mut line, message);
        if let Some(e) = error {
            line.extend_from_slice(b",\"error\":{\"message\":");
            let _ = serde_json::to_writer(&mut line, e);
            line.push(b'}');
        }
        self.push_added(&mut line, |_| false);
        self.finish_line(&mut line, false);
        self.queue(line).await
    }

    /// Queues a document whose payload is already serialized as
    /// `,"key":value` pairs (see [`payload_fields`]), stamped `at_us` (now
    /// when `None`), and acknowledged through `ack` once its output
    /// delivered it: for inputs that shape many documents per second and
    /// replay what was not delivered.
    pub async fn emit_fields(
        &self,
        at_us: Option<i64>,
        fields: &[u8],
        ack: Option<Ack>,
    ) -> Result<(), Refused> {
        let mut line = self.begin_fields(at_us, fields.len());
        line.pairs().extend_from_slice(fields);
        self.emit_begun(line, ack).await
    }

    /// A document begun for [`EventSink::emit_begun`]: its head
    /// (`{"@timestamp":…`) written, room reserved for `hint` bytes of
    /// pairs, which the caller appends through [`BegunLine::pairs`]. A
    /// line-oriented input writes each document once this way, instead of
    /// building its pairs apart and having them copied.
    pub fn begin_fields(&self, at_us: Option<i64>, hint: usize) -> BegunLine {
        let line = self.start_line_at(at_us, hint);
        BegunLine {
            head: line.len(),
            line,
        }
    }

    /// Finishes a line from [`EventSink::begin_fields`] (the fields every
    /// event gets, its data stream and the agent's fields) and queues it,
    /// as [`EventSink::emit_fields`].
    pub async fn emit_begun(&self, begun: BegunLine, ack: Option<Ack>) -> Result<(), Refused> {
        let BegunLine { mut line, head } = begun;
        // A decoded payload may carry a top-level key of its own
        // (`"kubernetes":`): merged with the provider's, whose values win,
        // as with a map payload.
        match self
            .added
            .as_ref()
            .and_then(|added| merged_fields(&line[head..], added))
        {
            Some((merged, keys)) => {
                line.truncate(head);
                line.extend_from_slice(&merged);
                self.push_added(&mut line, |f| keys.contains(&f.key.as_str()));
            }
            None => self.push_added(&mut line, |_| false),
        }
        self.finish_line(&mut line, false);
        let event = self.routed(Event::from_line(self.input_id.clone(), line, self.ack(ack)));
        self.queue_event(event).await
    }

    /// The same sink adding `fields` (a map of top-level keys, e.g. the
    /// `kubernetes` and `container` fields of a provider's mapping) to
    /// every event. A payload with its own top-level value of such a key
    /// is merged with it, the added values winning (see [`overlay`]): what
    /// a Pod writes cannot change which Pod its data says it came from.
    pub fn with_fields(mut self, fields: &leasehold_policy::Value) -> EventSink {
        let Ok(Value::Object(m)) = serde_json::to_value(fields) else {
            return self;
        };
        let parts = m
            .into_iter()
            .map(|(k, v)| {
                let mut bytes = Vec::new();
                bytes.push(b',');
                let _ = serde_json::to_writer(&mut bytes, &k);
                bytes.push(b':');
                let value_at = bytes.len();
                let _ = serde_json::to_writer(&mut bytes, &v);
                AddedField {
                    value_at,
                    key: k,
                    value: v,
                    bytes,
                }
            })
            .collect();
        self.added = Some(Arc::new(parts));
        self
    }

    /// Whether every event gets top-level field `key` added (an input that
    /// would derive a poorer one itself leaves it to the sink).
    pub fn adds(&self, key: &str) -> bool {
        self.added
            .as_ref()
            .is_some_and(|a| a.iter().any(|f| f.key == key))
    }

    /// `payload` with the added fields merged into its values of the same
    /// key (the added values win).
    fn with_added(&self, mut payload: Map<String, Value>) -> Map<String, Value> {
        for f in self.added.iter().flat_map(|a| a.iter()) {
            if let Some(mine) = payload.get_mut(&f.key) {
                overlay(mine, &f.value);
            }
        }
        payload
    }

    /// Appends the added fields whose key the payload does not have.
    fn push_added(&self, line: &mut Vec<u8>, present: impl Fn(&AddedField) -> bool) {
        for f in self.added.iter().flat_map(|a| a.iter()) {
            if !present(f) {
                line.extend_from_slice(&f.bytes);
            }
        }
    }

    fn start_line(&self, payload_hint: usize) -> Vec<u8> {
        self.start_line_at(None, payload_hint)
    }

    /// `{"@timestamp":"…"` at `at_us` (now when `None`), with room for
    /// the payload and the fields every event gets.
    fn start_line_at(&self, at_us: Option<i64>, payload_hint: usize) -> Vec<u8> {
        let mut line =
            Vec::with_capacity(48 + payload_hint + self.common.len() + self.data_stream.len());
        line.extend_from_slice(b"{\"@timestamp\":\"");
        let us = at_us.unwrap_or_else(|| jiff::Timestamp::now().as_microsecond());
        crate::pipeline::event::push_rfc3339_us(&mut line, us);
        line.push(b'"');
        line
    }

    fn finish_line(&self, line: &mut Vec<u8>, payload_has_data_stream: bool) {
        if !payload_has_data_stream {
            line.push(b',');
            line.extend_from_slice(&self.data_stream);
        }
        line.push(b',');
        line.extend_from_slice(&self.common);
        line.extend_from_slice(b"}\n");
    }

    async fn queue(&self, line: Vec<u8>) -> Result<(), Refused> {
        self.queue_event(self.routed(Event::from_line(
            self.input_id.clone(),
            line,
            self.ack(None),
        )))
        .await
    }

    /// The acknowledgement an event carries: the input's own when it
    /// keeps a checkpoint, else one that is only counted.
    fn ack(&self, own: Option<Ack>) -> Ack {
        own.unwrap_or_else(Ack::untracked).counted(&self.tally)
    }

    /// `event` (without an id) with the routing of this sink's data stream.
    fn routed(&self, event: Event) -> Event {
        event.with_meta(Meta {
            index: Arc::clone(&self.index),
            id: None,
            metadata: None,
        })
    }

    async fn queue_event(&self, mut event: Event) -> Result<(), Refused> {
        if let Some((_, chain)) = self.processors.as_ref().filter(|(_, c)| !c.is_empty()) {
            let input = Arc::clone(&event.input_id);
            let (line, carried) = event.into_parts();
            // A script seen slow may take up to its deadline: off the async
            // workers, so other inputs keep flowing meanwhile. One event at
            // a time still, so the order of the input's events holds.
            let applied = if chain.blocks() {
                let chain = chain.clone();
                let original = line.clone();
                match tokio::task::spawn_blocking(move || chain.apply(&original)).await {
                    Ok(applied) => applied,
                    // A processor that panicked: the event goes on as it came.
                    Err(e) => {
                        tracing::error!(input = %input, error = %e, "a processor failed on an event; it is sent unprocessed");
                        Some(line)
                    }
                }
            } else {
                chain.apply(&line)
            };
            match applied {
                // Dropped by a processor: handled, never queued (its
                // producer moves past it; not counted as produced).
                None => {
                    carried.ack.settle();
                    return Ok(());
                }
                // Its routing may have changed: the output reads it again.
                Some(line) => {
                    event = Event::from_carried(
                        input,
                        line,
                        Carried {
                            meta: None,
                            ..carried
                        },
                    );
                }
            }
        }
        if let Some(f) = &self.gated {
            event = event.with_term(Arc::clone(f));
        }
        // A term already over refuses at once, even if the queue has room.
        if self.term.as_ref().is_some_and(|t| t.token.is_cancelled()) {
            self.refused.inc();
            return Err(Refused::TermEnded);
        }
        // An event of no term waits for nothing but room (no token made
        // per event to stand for a term that never ends).
        let term_over = async {
            match &self.term {
                Some(t) => t.token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = term_over => {
                self.refused.inc();
                Err(Refused::TermEnded)
            }
            () = self.abandon.cancelled() => Err(Refused::Stopped),
            r = self.sender.send(event) => match r {
                Ok(()) => Ok(()),
                Err(_) => Err(Refused::OutputClosed),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::{FileSettings, OutputKind, OutputMetrics, OutputSettings, Outputs};

    /// A `file` output writing into `dir`.
    fn file_output(dir: &std::path::Path) -> Outputs {
        Outputs::start(
            vec![OutputSettings {
                name: "default".into(),
                kind: OutputKind::file(FileSettings::new(dir)),
                queue_events: 8,
                memory: Default::default(),
                disk: None,
            }],
            OutputMetrics::new(),
        )
        .unwrap()
    }

    /// A sink of input `in` (of `kind`) on agent `agent-a`, under `term`.
    fn sink_of(outputs: &Outputs, kind: &str, term: Option<TermStamp>) -> EventSink {
        EventSink::new(
            "in",
            kind,
            &AgentFields {
                id: "id-1".into(),
                name: "agent-a".into(),
                version: "1".into(),
                node: "node-a".into(),
            },
            &DataStream::default(),
            term,
            CancellationToken::new(),
            Arc::new(outputs.sender("default").unwrap().for_input("in")),
            InputCounters::default(),
        )
    }

    #[tokio::test]
    async fn events_are_stamped_and_payload_cannot_forge_the_term() {
        let dir = tempfile::tempdir().unwrap();
        let outputs = file_output(dir.path());
        let token = CancellationToken::new();
        let sink = sink_of(
            &outputs,
            "exec",
            Some(TermStamp {
                lease: "l".into(),
                term: 4,
                token: token.clone(),
                tracker: TaskTracker::new(),
            }),
        );
        sink.emit_message("hello \"world\"", Some("cut"))
            .await
            .unwrap();
        let forged: Map<String, Value> = serde_json::from_str(
            r#"{"leader": {"term": 99}, "agent": "x", "n": 1, "data_stream": {"dataset": "own"}}"#,
        )
        .unwrap();
        sink.emit(forged).await.unwrap();
        // Written while the term lasts (a term's queued events are not
        // sent once it ended: see the outputs' tests).
        outputs
            .shutdown(tokio::time::Instant::now() + std::time::Duration::from_secs(5))
            .await;
        token.cancel();
        assert_eq!(
            sink.emit_message("late", None).await,
            Err(Refused::TermEnded)
        );
        let text = std::fs::read_to_string(dir.path().join("leasehold.ndjson")).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["message"], "hello \"world\"");
        assert_eq!(lines[0]["error"]["message"], "cut");
        assert_eq!(lines[0]["leader"], json!({"lease": "l", "term": 4}));
        assert_eq!(
            lines[0]["agent"],
            json!({"id": "id-1", "name": "agent-a", "version": "1"})
        );
        assert_eq!(lines[0]["input"], json!({"id": "in", "type": "exec"}));
        assert_eq!(
            lines[0]["data_stream"],
            json!({"type": "logs", "dataset": "generic", "namespace": "default"})
        );
        assert!(lines[0]["@timestamp"].as_str().unwrap().ends_with('Z'));
        assert_eq!(lines[1]["leader"]["term"], 4);
        assert_eq!(lines[1]["agent"]["name"], "agent-a");
        assert_eq!(lines[1]["n"], 1);
        assert_eq!(lines[1]["data_stream"], json!({"dataset": "own"}));
    }

    #[tokio::test]
    async fn a_mappings_fields_reach_every_event_and_no_payload_can_claim_another_pod() {
        let dir = tempfile::tempdir().unwrap();
        let outputs = file_output(dir.path());
        let fields = leasehold_policy::Value::from_json(&json!({
            "kubernetes": {"pod": {"name": "web-1"}, "namespace": "shop"},
            "container": {"id": "c1"},
        }));
        let sink = sink_of(&outputs, "filestream", None).with_fields(&fields);
        assert!(sink.adds("kubernetes") && !sink.adds("host"));
        sink.emit_message("plain", None).await.unwrap();
        let own: Map<String, Value> = serde_json::from_value(
            json!({"kubernetes": {"namespace": "mine", "extra": 1}, "container": "not a map"}),
        )
        .unwrap();
        sink.emit(own).await.unwrap();
        // A decoded line claiming another namespace at the top level.
        sink.emit_fields(
            None,
            b",\"kubernetes\":{\"namespace\":\"kube-system\",\"decoded\":true}",
            None,
        )
        .await
        .unwrap();
        // A line that only names `kubernetes` inside another value.
        sink.emit_fields(
            None,
            b",\"message\":\"{\\\"kubernetes\\\": 1}\",\"fields\":{\"kubernetes\":{\"namespace\":\"x\"}}",
            None,
        )
        .await
        .unwrap();
        outputs
            .shutdown(tokio::time::Instant::now() + std::time::Duration::from_secs(5))
            .await;
        let text = std::fs::read_to_string(dir.path().join("leasehold.ndjson")).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4, "{text}");
        let provider = json!({"pod": {"name": "web-1"}, "namespace": "shop"});
        assert_eq!(lines[0]["kubernetes"], provider);
        assert_eq!(lines[0]["container"], json!({"id": "c1"}));
        // Merged: the payload adds keys, the provider's values win.
        assert_eq!(
            lines[1]["kubernetes"],
            json!({"namespace": "shop", "extra": 1, "pod": {"name": "web-1"}})
        );
        assert_eq!(lines[1]["container"], json!({"id": "c1"}));
        assert_eq!(
            lines[2]["kubernetes"],
            json!({"namespace": "shop", "decoded": true, "pod": {"name": "web-1"}})
        );
        assert_eq!(lines[2]["container"], json!({"id": "c1"}));
        // A nested `"kubernetes":` is the payload's own business: the
        // provider's fields are still added, once.
        assert_eq!(lines[3]["kubernetes"], provider);
        assert_eq!(lines[3]["container"], json!({"id": "c1"}));
        assert_eq!(
            lines[3]["fields"],
            json!({"kubernetes": {"namespace": "x"}})
        );
        for (i, l) in text.lines().enumerate() {
            let top: Map<String, Value> = serde_json::from_str(l).unwrap();
            let keys = l.matches("\"container\":").count();
            assert_eq!(keys, 1, "line {i} has one container key: {l}");
            assert!(top.contains_key("kubernetes"));
        }
    }
}
