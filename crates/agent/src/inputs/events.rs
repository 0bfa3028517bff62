//! `kubernetes/events`: one document per change of a Kubernetes Event
//! (added or modified), from a watch of all namespaces or of a list.
//!
//! Handover without gaps or repeats: after shipping an Event the input
//! records `resourceVersion|timestamp` as its checkpoint in the election's
//! Lease annotations (written on the leader's regular renewals and on its
//! release, at no extra API cost). A new leader resumes the watch from that
//! resourceVersion instead of replaying history or starting from "now";
//! after a graceful handover (release) nothing is shipped twice, after a
//! crash at most one renew interval is shipped again, with the same
//! document ids (`@metadata._id` from the Event's uid and resourceVersion).
//! If the checkpoint is too old for a watch (410 Gone), the input lists the
//! Events and ships those newer than the checkpoint's timestamp, counting
//! the ones it cannot tell apart. With no checkpoint at all (the first
//! leader ever), it starts from the current state without shipping history.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use k8s_openapi::api::core::v1::Event as KubeEvent;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use leasehold_policy::Map;
use serde_json::{Value as Json, json};

use super::schedule::{document_id, now_us};
use super::settings::{Problem, unknown_keys};
use super::{Input, InputContext};
use crate::runtime::sink::EventSink;

const KEYS: [&str; 1] = ["namespaces"];

/// A `kubernetes/events` input.
#[derive(Debug, Clone, PartialEq)]
pub struct Events {
    /// The input id, base of its checkpoint names.
    pub id: String,
    /// Namespaces to watch; empty: all.
    pub namespaces: Vec<String>,
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
        (out.len() == before).then(|| Events {
            id: id.to_string(),
            namespaces,
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
                self.namespaces.iter().cloned().map(Some).collect()
            };
            let mut tasks = tokio::task::JoinSet::new();
            for ns in targets {
                let api: Api<KubeEvent> = match &ns {
                    Some(n) => Api::namespaced(conn.client.clone(), n),
                    None => Api::all(conn.client.clone()),
                };
                let watch = Watch {
                    api,
                    checkpoint: self.checkpoint_name(ns.as_deref()),
                    checkpoints: ctx.cluster.checkpoints.clone(),
                    sink: ctx.sink.clone(),
                    input: self.id.clone(),
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

struct Watch {
    api: Api<KubeEvent>,
    checkpoint: String,
    checkpoints: Option<leasehold_election::Checkpoints>,
    sink: EventSink,
    input: String,
}

impl Watch {
    fn save(&self, pos: &Position) {
        if let Some(c) = &self.checkpoints {
            c.set(&self.checkpoint, pos.text());
        }
    }

    async fn run(self) -> Result<(), String> {
        let saved = self
            .checkpoints
            .as_ref()
            .and_then(|c| c.get(&self.checkpoint))
            .and_then(|s| Position::parse(&s));
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
                self.save(&p);
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
                        if let Some(p) = self.ship(&ev).await? {
                            pos = p;
                            self.save(&pos);
                        }
                    }
                    WatchEvent::Deleted(_) => {}
                    WatchEvent::Bookmark(b) => {
                        pos.rv = b.metadata.resource_version;
                        self.save(&pos);
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
    async fn relist(&self, pos: &Position) -> Result<Position, String> {
        let list = self
            .api
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing events: {e}"))?;
        let mut newer: Vec<&KubeEvent> = list
            .items
            .iter()
            .filter(|e| event_time_us(e) > pos.at_us)
            .collect();
        let same = list
            .items
            .iter()
            .filter(|e| event_time_us(e) == pos.at_us)
            .count();
        newer.sort_by_key(|e| event_time_us(e));
        tracing::warn!(
            input = %self.input,
            "events checkpoint {} is too old to resume (410): shipping the {} listed event(s) newer than it; {same} event(s) with the same timestamp may have been shipped before or missed",
            pos.rv,
            newer.len()
        );
        let mut last = pos.clone();
        for ev in newer {
            if let Some(p) = self.ship(ev).await? {
                last = p;
            }
        }
        last.rv = list.metadata.resource_version.unwrap_or(last.rv);
        self.save(&last);
        Ok(last)
    }

    /// Ships one Event; its position, or `None` when it was refused (term
    /// over or stopping: the caller ends soon).
    async fn ship(&self, ev: &KubeEvent) -> Result<Option<Position>, String> {
        let rv = ev.metadata.resource_version.clone().unwrap_or_default();
        let uid = ev.metadata.uid.clone().unwrap_or_default();
        let at = event_time_us(ev);
        let doc = document(ev);
        let id = document_id(&[&uid, &rv]);
        match self.sink.emit_at(at, &id, doc).await {
            Ok(()) => Ok(Some(Position { rv, at_us: at })),
            Err(_) => Ok(None),
        }
    }
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
        Json::String(crate::event::format_timestamp(t))
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
        };
        let n = long.checkpoint_name(None);
        c.set(&n, "y");
        assert_eq!(c.get(&n).as_deref(), Some("y"), "{n}");
    }
}
