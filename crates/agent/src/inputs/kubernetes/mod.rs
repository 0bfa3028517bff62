//! `kubernetes/metrics`: Metricbeat's `kubernetes` module. The `state_*`
//! metricsets read kube-state-metrics; `apiserver` reads the API server's
//! own `/metrics`; the kubelet's read its `/stats/summary`. Streams,
//! periods, TLS and filters work as for `prometheus/metrics`. A stream with
//! the `event` metricset watches Events instead, with the implementation
//! (checkpoint, ids) of `kubernetes/events`.

pub mod apiserver;
mod components;
mod doc;
mod kubelet;
pub mod metadata;
mod resources;
pub mod state;
mod state_tables;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use leasehold_policy::Map;

use super::prometheus::{STREAM_KEYS, StreamSchema, read_streams};
use super::scrape::{self, Metricset, Stream};
use super::settings::{DataStream, Problem, unknown_keys_lenient};
use crate::inputs::contract::{Input, InputContext};
use crate::inputs::events::NamespaceShard;

/// A `kubernetes/metrics` input.
pub struct KubernetesMetrics {
    /// The input's id (part of every document id).
    pub id: String,
    /// Its scraped streams.
    pub streams: Vec<Stream>,
    /// Its `event` stream: the Events watch and where its documents go.
    pub events: Option<(Arc<crate::inputs::events::Events>, DataStream)>,
}

/// Takes the `event` metricset out of `map`'s streams: the stream's data
/// stream (default `metrics` / `kubernetes.event`) and namespace, and the
/// map left for the scraped metricsets.
/// The `event` stream of a `kubernetes/metrics` input: its data stream,
/// namespaces and namespace shard.
type EventStream = (DataStream, Vec<String>, Option<NamespaceShard>);

fn split_event_stream(
    map: &Map,
    input_ds: &DataStream,
    out: &mut Vec<Problem>,
) -> (Map, Option<EventStream>) {
    use leasehold_policy::Value;
    let names = |m: &Map| -> Vec<String> {
        match m.get("metricsets") {
            Some(Value::List(l)) => l
                .iter()
                .filter_map(|v| match v {
                    Value::Str(s) => Some(s.clone()),
                    _ => None,
                })
                .collect(),
            Some(Value::Str(s)) => vec![s.clone()],
            _ => Vec::new(),
        }
    };
    let mut found = None;
    let mut rest = map.clone();
    let Some(Value::List(streams)) = map.get("streams") else {
        return (rest, None);
    };
    let mut kept = Vec::new();
    for (i, s) in streams.iter().enumerate() {
        let Value::Map(m) = s else {
            kept.push(s.clone());
            continue;
        };
        let n = names(m);
        if !n.iter().any(|x| x == "event") {
            kept.push(s.clone());
            continue;
        }
        if found.is_some() {
            out.push(
                Problem::new(
                    format!("streams.{i}.metricsets"),
                    "a second stream with the `event` metricset: one watch of Events per input",
                )
                .hint("keep one `event` stream"),
            );
            continue;
        }
        let ds_map = match m.get("data_stream") {
            Some(Value::Map(d)) => Some(d),
            _ => None,
        };
        let field = |k: &str| {
            ds_map
                .and_then(|d| d.get(k))
                .or_else(|| m.get(&format!("data_stream.{k}")))
                .and_then(|v| match v {
                    Value::Str(s) if !s.is_empty() => Some(s.clone()),
                    _ => None,
                })
        };
        let ds = DataStream {
            kind: field("type").unwrap_or_else(|| "metrics".into()),
            dataset: field("dataset").unwrap_or_else(|| "kubernetes.event".into()),
            namespace: field("namespace").unwrap_or_else(|| input_ds.namespace.clone()),
        };
        let namespaces = match m.get("namespace") {
            Some(Value::Str(ns)) if !ns.is_empty() => vec![ns.clone()],
            _ => Vec::new(),
        };
        let shard = NamespaceShard::from_settings(m, &format!("streams.{i}."), out);
        found = Some((ds, namespaces, shard));
        let others: Vec<Value> = n
            .into_iter()
            .filter(|x| x != "event")
            .map(Value::Str)
            .collect();
        if !others.is_empty() {
            let mut m = m.clone();
            m.insert("metricsets", Value::List(others));
            kept.push(Value::Map(m));
        }
    }
    rest.insert("streams", Value::List(kept));
    (rest, found)
}

fn metricset(name: &str) -> Option<Arc<dyn Metricset>> {
    if name == "apiserver" {
        return Some(Arc::new(apiserver::ApiServer));
    }
    if let Some(c) = components::Component::named(name) {
        return Some(Arc::new(c));
    }
    if let Some(k) = kubelet::Kubelet::named(name) {
        return Some(Arc::new(k));
    }
    state::State::named(name).map(|s| Arc::new(s) as Arc<dyn Metricset>)
}

impl KubernetesMetrics {
    /// Reads the settings; `None` when they are bad (problems pushed).
    pub fn from_settings(
        id: &str,
        map: &Map,
        ds: &DataStream,
        out: &mut Vec<Problem>,
    ) -> Option<KubernetesMetrics> {
        let before = out.len();
        let mut keys: Vec<&str> = STREAM_KEYS.to_vec();
        keys.push("streams");
        unknown_keys_lenient(map, &keys, "kubernetes/metrics", out);
        let (map, event) = split_event_stream(map, ds, out);
        let map = &map;
        let events = event.map(|(ds, namespaces, shard)| {
            (
                Arc::new(crate::inputs::events::Events {
                    id: id.to_string(),
                    namespaces,
                    shard,
                }),
                ds,
            )
        });
        if events.is_some()
            && matches!(map.get("streams"), Some(leasehold_policy::Value::List(l)) if l.is_empty())
        {
            return (out.len() == before).then(|| KubernetesMetrics {
                id: id.to_string(),
                streams: Vec::new(),
                events,
            });
        }
        let allowed = format!(
            "{}, apiserver, event, {}, {}",
            state::names().join(", "),
            components::COMPONENTS.join(", "),
            kubelet::KUBELET_METRICSETS.join(", ")
        );
        let schema = StreamSchema {
            type_name: "kubernetes/metrics",
            keys: &STREAM_KEYS,
            default_dataset: |n| format!("kubernetes.{n}"),
            metricset,
            allowed: &allowed,
        };
        let streams = read_streams(map, ds, &schema, out);
        super::prometheus::finish(out, before, streams, "kubernetes/metrics").map(|streams| {
            KubernetesMetrics {
                id: id.to_string(),
                streams,
                events,
            }
        })
    }
}

impl Input for KubernetesMetrics {
    fn run(self: Arc<Self>, ctx: InputContext) -> BoxFuture<'static, Result<(), String>> {
        let Some((events, ds)) = self.events.clone() else {
            return Box::pin(scrape::run_streams(
                self.id.clone(),
                self.streams.clone(),
                ctx,
            ));
        };
        let events_ctx = InputContext {
            sink: ctx.sink.with_data_stream(&ds),
            cancel: ctx.cancel.clone(),
            finish: ctx.finish.clone(),
            stop_grace: ctx.stop_grace,
            cluster: ctx.cluster.clone(),
            registries: Arc::clone(&ctx.registries),
            health: ctx.health.clone(),
            redactor: ctx.redactor.clone(),
        };
        if self.streams.is_empty() {
            return events.run(events_ctx);
        }
        let scrapes = scrape::run_streams(self.id.clone(), self.streams.clone(), ctx);
        Box::pin(async move {
            // Either failing ends the input (restarted with backoff).
            tokio::select! {
                r = scrapes => r,
                r = events.run(events_ctx) => r,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(streams: serde_json::Value) -> (Option<KubernetesMetrics>, Vec<Problem>) {
        let leasehold_policy::Value::Map(map) =
            leasehold_policy::Value::from_json(&serde_json::json!({ "streams": streams }))
        else {
            unreachable!()
        };
        let mut out = Vec::new();
        let k = KubernetesMetrics::from_settings("events", &map, &DataStream::default(), &mut out);
        (k, out)
    }

    #[test]
    fn the_event_stream_takes_its_namespace_shard() {
        let (k, problems) =
            read(serde_json::json!([{"metricsets": ["event"], "shard": 1, "shards": 4}]));
        assert!(problems.is_empty(), "{problems:?}");
        let (events, _) = k.and_then(|k| k.events).expect("an event stream");
        assert_eq!(
            events.shard,
            Some(crate::inputs::events::NamespaceShard { index: 1, count: 4 })
        );
        let (k, problems) =
            read(serde_json::json!([{"metricsets": ["event"], "shard": 4, "shards": 4}]));
        assert!(k.is_none());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].path.join("."), "streams.0.shard");
    }
}
