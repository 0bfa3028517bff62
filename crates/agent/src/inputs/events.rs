//! `kubernetes/events`: one document per change of a Kubernetes Event
//! (added or modified), from a watch of all namespaces or of a list.
//!
//! Handover without gaps or repeats: once its output has delivered an
//! Event (acknowledged by the sink, or stored in a disk queue) and every
//! Event before it, the input records `resourceVersion|timestamp` as its
//! checkpoint in the election's Lease annotations (written on the leader's
//! regular renewals and on its release, at no extra API cost). A new
//! leader resumes the watch from that resourceVersion instead of replaying
//! history or starting from "now". What was queued but not delivered when
//! the term ended (sink down, SIGKILL) is read again by the successor;
//! what was delivered but not yet written to the Lease (at most one renew
//! interval after a crash) is shipped again with the same document ids
//! (`@metadata._id` from the Event's uid and resourceVersion), which a
//! sink that checks ids drops. If the checkpoint is too old for a watch
//! (410 Gone), the input lists the Events page by page and ships those
//! newer than the checkpoint's timestamp, counting the ones it cannot tell
//! apart. With no checkpoint at all (the first leader ever), it starts
//! from the current state without shipping history.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use k8s_openapi::api::core::v1::Event as KubeEvent;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use leasehold_policy::Map;
use serde_json::{Value as Json, json};

use super::schedule::{document_id, now_us};
use super::settings::{Problem, unknown_keys};
use crate::inputs::contract::{Input, InputContext};
use crate::pipeline::ack::{Ack, AckTarget, InOrder};
use crate::pipeline::publisher::EventSink;

/// Events per page when re-listing after 410.
const LIST_PAGE: u32 = 500;

const KEYS: [&str; 3] = ["namespaces", "shard", "shards"];

/// The part of the cluster's Events one shard ships: those whose
/// namespace's 64-bit FNV-1a hash is `index` modulo `count`. Every shard
/// watches all Events and keeps its own, so N shards split the shipping
/// (and the sinks' load) but not the watch traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceShard {
    /// 0-based, below `count`.
    pub index: u32,
    /// How many shards split the namespaces.
    pub count: u32,
}

impl NamespaceShard {
    /// Reads `shard` and `shards` (both or neither; usually
    /// `${kubernetes_leaderelection.NAME.shard}` and `….shards`) from
    /// `map`; `path` prefixes the keys in problems.
    pub fn from_settings(map: &Map, path: &str, out: &mut Vec<Problem>) -> Option<NamespaceShard> {
        use leasehold_policy::Value;
        let int = |k: &str| match map.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Int(i)) => u32::try_from(*i).map(Some).map_err(|_| ()),
            Some(_) => Err(()),
        };
        if ["shard", "shards"]
            .iter()
            .any(|k| map.get(k).is_some_and(super::settings::unresolved))
        {
            // A variable `check` cannot resolve: judged once rendered.
            return None;
        }
        let key = |k: &str| format!("{path}{k}");
        let hint = "e.g. `shard: ${kubernetes_leaderelection.events.shard}` and `shards: ${kubernetes_leaderelection.events.shards}` with an election of `shards: N`";
        match (int("shard"), int("shards")) {
            (Ok(None), Ok(None)) => None,
            (Ok(Some(index)), Ok(Some(count))) if count >= 1 && index < count => {
                Some(NamespaceShard { index, count })
            }
            (Ok(Some(_)), Ok(None)) | (Ok(None), Ok(Some(_))) => {
                out.push(Problem::new(key("shard"), "`shard` and `shards` go together").hint(hint));
                None
            }
            _ => {
                out.push(
                    Problem::new(
                        key("shard"),
                        "`shard` must be a whole number below `shards`, and `shards` at least 1",
                    )
                    .hint(hint),
                );
                None
            }
        }
    }

    /// Whether Events of `namespace` are this shard's.
    pub fn owns(&self, namespace: &str) -> bool {
        leasehold_policy::fnv::fnv1a64(namespace.as_bytes()) % u64::from(self.count)
            == u64::from(self.index)
    }
}

/// A `kubernetes/events` input.
#[derive(Debug, Clone, PartialEq)]
pub struct Events {
    /// The input id, base of its checkpoint names.
    pub id: String,
    /// Namespaces to watch; empty: all.
    pub namespaces: Vec<String>,
    /// The namespaces this input ships, when sharded.
    pub shard: Option<NamespaceShard>,
}

impl Events {
    /// Reads the settings; `None` when they are bad (problems pushed).
    pub fn from_settings(id: &str, map: &Map, out: &mut Vec<Problem>) -> Option<Events> {
        let before = out.len();
        unknown_keys(map, &KEYS, "kubernetes/events", out);
        let namespaces = super::settings::optional_strings(
            map.get("namespaces"),
            "namespaces",
            ["a namespace name", "namespace names"],
            out,
        );
        let shard = NamespaceShard::from_settings(map, "", out);
        (out.len() == before).then(|| Events {
            id: id.to_string(),
            namespaces,
            shard,
        })
    }

    /// The checkpoint name of the watch of `namespace` (`None`: all).
    fn checkpoint_name(&self, namespace: Option<&str>) -> String {
        let raw = match namespace {
            Some(ns) => format!("{}.{ns}", self.id),
            None => self.id.clone(),
        };
        let mut name: String = raw
            .to_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        if name.len() > 40 {
            name = format!(
                "{}-{}",
                &name[..name.len().min(24)],
                &document_id(&[&raw])[..12]
            );
        }
        let name = name
            .trim_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_string();
        if name.is_empty() {
            "events".into()
        } else {
            name
        }
    }
}

impl Input for Events {
    fn run(self: Arc<Self>, ctx: InputContext) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async move {
            let conn = crate::kubeconn::connect(ctx.cluster.kubeconfig.as_deref()).await?;
            let targets: Vec<Option<String>> = if self.namespaces.is_empty() {
                vec![None]
            } else {
                // Listed namespaces of another shard are not watched at all.
                self.namespaces
                    .iter()
                    .filter(|ns| self.shard.is_none_or(|s| s.owns(ns)))
                    .cloned()
                    .map(Some)
                    .collect()
            };
            if targets.is_empty() {
                tracing::info!(input = %self.id, "none of the listed namespaces is this shard's: nothing to watch");
                ctx.cancel.cancelled().await;
                return Ok(());
            }
            let mut tasks = tokio::task::JoinSet::new();
            for ns in targets {
                let api: Api<KubeEvent> = match &ns {
                    Some(n) => Api::namespaced(conn.client.clone(), n),
                    None => Api::all(conn.client.clone()),
                };
                let watch = Watch {
                    api,
                    progress: Arc::new(Progress {
                        order: Mutex::new(InOrder::default()),
                        checkpoint: self.checkpoint_name(ns.as_deref()),
                        checkpoints: ctx.cluster.checkpoints.clone(),
                    }),
                    sink: ctx.sink.clone(),
                    input: self.id.clone(),
                    shard: self.shard,
                };
                let cancel = ctx.cancel.clone();
                tasks.spawn(async move {
                    tokio::select! {
                        r = watch.run() => r,
                        () = cancel.cancelled() => Ok(()),
                    }
                });
            }
            // The first watch that fails ends the input (it is restarted
            // with backoff); a stop ends them all.
            while let Some(r) = tasks.join_next().await {
                match r {
                    Ok(Ok(())) if ctx.cancel.is_cancelled() => {}
                    Ok(Ok(())) => return Err("the event watch ended".into()),
                    Ok(Err(e)) => return Err(e),
                    Err(e) => return Err(format!("the event watch failed: {e}")),
                }
            }
            Ok(())
        })
    }
}

/// Where a watch stands: the resourceVersion and time of the last Event
/// shipped, as kept in the checkpoint (`rv|micros`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Position {
    rv: String,
    at_us: i64,
}

impl Position {
    fn parse(s: &str) -> Option<Position> {
        let (rv, at) = s.split_once('|')?;
        Some(Position {
            rv: rv.to_string(),
            at_us: at.parse().ok()?,
        })
    }

    fn text(&self) -> String {
        format!("{}|{}", self.rv, self.at_us)
    }
}

/// How far one watch's Events are delivered: the checkpoint moves to a
/// position only once its Event and every one queued before it are
/// acknowledged by the output.
struct Progress {
    order: Mutex<InOrder<Position>>,
    checkpoint: String,
    checkpoints: Option<leasehold_election::Checkpoints>,
}

impl Progress {
    fn order(&self) -> std::sync::MutexGuard<'_, InOrder<Position>> {
        self.order.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn save(&self, pos: &Position) {
        if let Some(c) = &self.checkpoints {
            c.set(&self.checkpoint, pos.text());
        }
    }

    /// A position reached without shipping (a bookmark, the end of a
    /// re-list): saved once everything queued before it is delivered.
    fn reached(&self, pos: Position) {
        let done = self.order().push_done(pos);
        if let Some(p) = done {
            self.save(&p);
        }
    }

    fn saved(&self) -> Option<Position> {
        self.checkpoints
            .as_ref()
            .and_then(|c| c.get(&self.checkpoint))
            .and_then(|s| Position::parse(&s))
    }
}

impl AckTarget for Progress {
    fn acknowledged(&self, seq: u64) {
        let done = self.order().ack(seq);
        if let Some(p) = done {
            self.save(&p);
        }
    }
}

struct Watch {
    api: Api<KubeEvent>,
    progress: Arc<Progress>,
    sink: EventSink,
    input: String,
    shard: Option<NamespaceShard>,
}

impl Watch {
    async fn run(self) -> Result<(), String> {
        let saved = self.progress.saved();
        let mut pos = match saved {
            Some(p) => {
                tracing::info!(input = %self.input, rv = %p.rv, "resuming events after the checkpoint");
                p
            }
            None => {
                // No checkpoint: start from the current state.
                let list = self
                    .api
                    .list_metadata(&ListParams::default().limit(1))
                    .await
                    .map_err(|e| format!("listing events: {e}"))?;
                let p = Position {
                    rv: list.metadata.resource_version.unwrap_or_default(),
                    at_us: now_us(),
                };
                tracing::info!(input = %self.input, rv = %p.rv, "no checkpoint: shipping events from now on");
                self.progress.reached(p.clone());
                p
            }
        };
        loop {
            let wp = WatchParams::default().timeout(290);
            let stream = match self.api.watch(&wp, &pos.rv).await {
                Ok(s) => s,
                Err(kube::Error::Api(s)) if s.code == 410 => {
                    pos = self.relist(&pos).await?;
                    continue;
                }
                Err(e) => return Err(format!("watching events: {e}")),
            };
            let mut stream = std::pin::pin!(stream);
            let mut gone = false;
            while let Some(item) = stream.next().await {
                match item.map_err(|e| format!("watching events: {e}"))? {
                    WatchEvent::Added(ev) | WatchEvent::Modified(ev) => {
                        let (rv, at) = rv_and_time(&ev);
                        let next = Position { rv, at_us: at };
                        if self.ship(&ev, next.clone()).await? {
                            pos = next;
                        }
                    }
                    WatchEvent::Deleted(_) => {}
                    WatchEvent::Bookmark(b) => {
                        pos.rv = b.metadata.resource_version;
                        self.progress.reached(pos.clone());
                    }
                    WatchEvent::Error(s) if s.code == 410 => {
                        gone = true;
                        break;
                    }
                    WatchEvent::Error(s) => {
                        return Err(format!("watching events: {} ({})", s.message, s.code));
                    }
                }
            }
            if gone {
                pos = self.relist(&pos).await?;
            }
        }
    }

    /// The checkpoint is too old to watch from: ship what the list holds
    /// newer than it, and go on from the list's version.
    /// Ships, page by page, the listed Events newer than the checkpoint's
    /// time (oldest first within a page). Until the whole list is shipped
    /// and delivered the checkpoint stays where it was, so a crash in
    /// between lists again rather than skipping a later page's older
    /// Events.
    async fn relist(&self, pos: &Position) -> Result<Position, String> {
        let mut params = ListParams::default().limit(LIST_PAGE);
        let (mut shipped, mut same, mut list_rv) = (0usize, 0usize, None);
        let mut newest = pos.at_us;
        loop {
            let page = self
                .api
                .list(&params)
                .await
                .map_err(|e| format!("listing events: {e}"))?;
            list_rv = list_rv.or(page.metadata.resource_version.clone());
            let mut newer: Vec<&KubeEvent> = page
                .items
                .iter()
                .filter(|e| event_time_us(e) > pos.at_us)
                .collect();
            same += page
                .items
                .iter()
                .filter(|e| event_time_us(e) == pos.at_us)
                .count();
            newer.sort_by_key(|e| event_time_us(e));
            for ev in newer {
                if !self.ship(ev, pos.clone()).await? {
                    // Refused: the input is stopping; the checkpoint stays.
                    return Ok(pos.clone());
                }
                newest = newest.max(event_time_us(ev));
                shipped += 1;
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        tracing::warn!(
            input = %self.input,
            "events checkpoint {} was too old to resume (410): shipped the {shipped} listed event(s) newer than it; {same} event(s) with the same timestamp may have been shipped before or missed",
            pos.rv,
        );
        let last = Position {
            rv: list_rv.unwrap_or_else(|| pos.rv.clone()),
            at_us: newest,
        };
        self.progress.reached(last.clone());
        Ok(last)
    }

    /// Queues one Event, to move the checkpoint to `after` once it is
    /// delivered; false when it was refused (term over or stopping: the
    /// caller ends soon).
    async fn ship(&self, ev: &KubeEvent, after: Position) -> Result<bool, String> {
        if let Some(shard) = self.shard
            && !shard.owns(ev.metadata.namespace.as_deref().unwrap_or_default())
        {
            // Another shard's: this one's checkpoint may move past it.
            self.progress.reached(after);
            return Ok(true);
        }
        let (rv, at) = rv_and_time(ev);
        let uid = ev.metadata.uid.clone().unwrap_or_default();
        let doc = document(ev);
        let id = document_id(&[&uid, &rv]);
        let seq = self.progress.order().push(after);
        let ack = Ack::new(Arc::clone(&self.progress) as Arc<dyn AckTarget>, seq);
        match self.sink.emit_at_acked(at, &id, doc, Some(ack)).await {
            Ok(()) => Ok(true),
            Err(_) => {
                self.progress.order().unpush(seq);
                Ok(false)
            }
        }
    }
}

/// An Event's resourceVersion and time.
fn rv_and_time(ev: &KubeEvent) -> (String, i64) {
    (
        ev.metadata.resource_version.clone().unwrap_or_default(),
        event_time_us(ev),
    )
}

/// When an Event last happened: `lastTimestamp`, else `eventTime`, else its
/// creation, in microseconds since the epoch.
fn event_time_us(ev: &KubeEvent) -> i64 {
    let ts = ev
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| ev.event_time.as_ref().map(|t| t.0))
        .or_else(|| ev.metadata.creation_timestamp.as_ref().map(|t| t.0));
    ts.map_or(0, |t| t.as_microsecond())
}

fn rfc3339(t: Option<jiff::Timestamp>) -> Json {
    t.map_or(Json::Null, |t| {
        Json::String(crate::pipeline::event::format_timestamp(t))
    })
}

/// The document of one Event, in Elastic's `kubernetes.event.*` shape.
fn document(ev: &KubeEvent) -> serde_json::Map<String, Json> {
    let o = &ev.involved_object;
    let mut m = serde_json::Map::new();
    m.insert(
        "kubernetes".into(),
        json!({
            "namespace": ev.metadata.namespace,
            "event": {
                "reason": ev.reason,
                "message": ev.message,
                "type": ev.type_,
                "count": ev.count,
                "source": ev.source.as_ref().map(|s| json!({"component": s.component, "host": s.host})),
                "timestamp": {
                    "first_occurrence": rfc3339(ev.first_timestamp.as_ref().map(|t| t.0)),
                    "last_occurrence": rfc3339(ev.last_timestamp.as_ref().map(|t| t.0)),
                },
                "involved_object": {
                    "kind": o.kind, "name": o.name, "namespace": o.namespace, "uid": o.uid,
                    "api_version": o.api_version, "resource_version": o.resource_version, "field_path": o.field_path,
                },
                "metadata": {
                    "name": ev.metadata.name, "namespace": ev.metadata.namespace, "uid": ev.metadata.uid,
                    "resource_version": ev.metadata.resource_version,
                    "timestamp": {"created": rfc3339(ev.metadata.creation_timestamp.as_ref().map(|t| t.0))},
                },
            },
        }),
    );
    m.insert(
        "event".into(),
        json!({"module": "kubernetes", "dataset": "kubernetes.event"}),
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_shards_split_every_namespace_exactly_once() {
        let shards: Vec<NamespaceShard> = (0..4)
            .map(|index| NamespaceShard { index, count: 4 })
            .collect();
        let mut per_shard = [0usize; 4];
        for i in 0..400 {
            let ns = format!("team-{i}");
            let owners: Vec<usize> = (0..4).filter(|s| shards[*s].owns(&ns)).collect();
            assert_eq!(owners.len(), 1, "{ns}: {owners:?}");
            per_shard[owners[0]] += 1;
        }
        assert!(per_shard.iter().all(|n| *n > 60), "spread: {per_shard:?}");
        let read = |text: &str| {
            let map = match leasehold_policy::Value::from_json(&serde_json::from_str(text).unwrap())
            {
                leasehold_policy::Value::Map(m) => m,
                _ => unreachable!(),
            };
            let mut out = Vec::new();
            (NamespaceShard::from_settings(&map, "", &mut out), out.len())
        };
        assert_eq!(
            read(r#"{"shard": 2, "shards": 3}"#),
            (Some(NamespaceShard { index: 2, count: 3 }), 0)
        );
        assert_eq!(read("{}"), (None, 0));
        assert_eq!(read(r#"{"shard": 3, "shards": 3}"#), (None, 1));
        assert_eq!(read(r#"{"shard": 1}"#), (None, 1));
        assert_eq!(read(r#"{"shard": "1", "shards": 2}"#), (None, 1));
    }

    #[test]
    fn positions_round_trip_and_names_are_valid() {
        let p = Position {
            rv: "12345".into(),
            at_us: 1_796_284_960_685_504,
        };
        assert_eq!(Position::parse(&p.text()), Some(p));
        assert_eq!(Position::parse("garbage"), None);
        let e = Events {
            id: "Cluster Events/1".into(),
            namespaces: vec![],
            shard: None,
        };
        let name = e.checkpoint_name(Some("kube-system"));
        assert!(
            leasehold_election::Checkpoints::default()
                .get(&name)
                .is_none()
        );
        let c = leasehold_election::Checkpoints::default();
        c.set(&name, "x");
        assert_eq!(
            c.get(&name).as_deref(),
            Some("x"),
            "{name} is not a valid checkpoint name"
        );
        let long = Events {
            id: "a".repeat(80),
            namespaces: vec![],
            shard: None,
        };
        let n = long.checkpoint_name(None);
        c.set(&n, "y");
        assert_eq!(c.get(&n).as_deref(), Some("y"), "{n}");
    }
}
