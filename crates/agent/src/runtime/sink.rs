//! Where an input's events go: it stamps the common fields and queues the
//! event on the input's output, and refuses events once the input's
//! leadership term has ended, so a stepped-down leader produces nothing.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::event::{Event, timestamp_now};
use crate::inputs::DataStream;
use crate::monitor::metrics::AgentMetrics;
use crate::outputs::EventSender;

/// The agent's own fields on every event.
#[derive(Debug, Clone)]
pub struct AgentFields {
    /// `agent.id`.
    pub id: String,
    /// `agent.name`: the identity used in elections.
    pub name: String,
    /// `agent.version`.
    pub version: String,
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

/// An input's handle for producing events.
#[derive(Clone)]
pub struct EventSink {
    input_id: Arc<str>,
    common: Arc<Map<String, Value>>,
    term: Option<TermStamp>,
    abandon: CancellationToken,
    sender: EventSender,
    metrics: AgentMetrics,
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
        sender: EventSender,
        metrics: AgentMetrics,
    ) -> Self {
        let mut common = Map::new();
        common.insert(
            "agent".into(),
            json!({"id": agent.id, "name": agent.name, "version": agent.version}),
        );
        common.insert("input".into(), json!({"id": input_id, "type": input_type}));
        common.insert(
            "data_stream".into(),
            json!({"type": data_stream.kind, "dataset": data_stream.dataset, "namespace": data_stream.namespace}),
        );
        if let Some(t) = &term {
            common.insert("leader".into(), json!({"lease": t.lease, "term": t.term}));
        }
        EventSink {
            input_id: input_id.into(),
            common: Arc::new(common),
            term,
            abandon,
            sender,
            metrics,
        }
    }

    /// The producing input's id.
    pub fn input_id(&self) -> &str {
        &self.input_id
    }

    /// True once events would be refused for leadership reasons.
    pub fn term_ended(&self) -> bool {
        self.term.as_ref().is_some_and(|t| t.token.is_cancelled())
    }

    /// Stamps `payload` (its own keys win, except the agent's fields) and
    /// queues it, waiting while the output's queue is full.
    pub async fn emit(&self, payload: Map<String, Value>) -> Result<(), Refused> {
        let mut doc = Map::with_capacity(payload.len() + 6);
        doc.insert("@timestamp".into(), Value::String(timestamp_now()));
        for (k, v) in payload {
            doc.insert(k, v);
        }
        for (k, v) in self.common.iter() {
            if k == "data_stream" && doc.contains_key(k) {
                continue;
            }
            doc.insert(k.clone(), v.clone());
        }
        self.queue(doc).await
    }

    async fn queue(&self, doc: Map<String, Value>) -> Result<(), Refused> {
        let event = Event::new(self.input_id.clone(), doc);
        let never = CancellationToken::new();
        let term = self.term.as_ref().map_or(&never, |t| &t.token);
        // A term already over refuses at once, even if the queue has room.
        if term.is_cancelled() {
            self.metrics.events_refused(&self.input_id, 1);
            return Err(Refused::TermEnded);
        }
        tokio::select! {
            biased;
            () = term.cancelled() => {
                self.metrics.events_refused(&self.input_id, 1);
                Err(Refused::TermEnded)
            }
            () = self.abandon.cancelled() => Err(Refused::Stopped),
            r = self.sender.send(event) => match r {
                Ok(()) => {
                    self.metrics.events_produced(&self.input_id, 1);
                    Ok(())
                }
                Err(_) => Err(Refused::OutputClosed),
            },
        }
    }
}
