//! `prometheus/metrics`: Metricbeat's `prometheus` module, `collector`
//! metricset. Each stream scrapes its `hosts` every `period` (aligned on the
//! wall clock) and writes one event per label set: `prometheus.labels.*`
//! and `prometheus.metrics.<sample name>: value`. A histogram's buckets
//! (`le`) and a summary's quantiles (`quantile`) are each their own label
//! set; `_sum` and `_count` share the series' labels. NaN samples are
//! dropped, as Metricbeat does.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use leasehold_policy::{Map, Value};
use leasehold_prometheus_text::{Family, group_by_labels};
use serde_json::{Value as Json, json};

use super::http::HttpSettings;
use super::scrape::{self, Body, Doc, Metricset, Stream};
use super::settings::{DataStream, Problem, expand_dotted, unknown_keys_lenient, unresolved};
use crate::inputs::contract::{Input, InputContext};

/// Keys of a `prometheus/metrics` stream (or of the input itself when it
/// has no `streams`).
pub const STREAM_KEYS: [&str; 21] = [
    "metricsets",
    "add_metadata",
    "hosts",
    "metrics_path",
    "period",
    "timeout",
    "max_response_size",
    "bearer_token_file",
    "ssl",
    "metrics_filters",
    "use_types",
    "rate_counters",
    "data_stream",
    "data_stream.type",
    "data_stream.dataset",
    "data_stream.namespace",
    "condition",
    "ssl.certificate_authorities",
    "ssl.verification_mode",
    "metrics_filters.include",
    "metrics_filters.exclude",
];

/// Metricsets of Elastic's `prometheus` and `kubernetes` modules that this
/// version does not have: a stream naming one skips it, with a warning.
pub const ELASTIC_METRICSETS: [&str; 4] = [
    "query",
    "remote_write",
    "state_horizontalpodautoscaler",
    "state_pvc",
];

/// The `collector` metricset.
pub struct Collector;

impl Metricset for Collector {
    fn name(&self) -> &str {
        "collector"
    }

    fn module(&self) -> &str {
        "prometheus"
    }

    fn documents(&self, families: &[Family], _host: &str) -> Vec<Doc> {
        group_by_labels(families)
            .into_iter()
            .map(|g| {
                let labels: serde_json::Map<String, Json> = g
                    .labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), Json::String(v.to_string())))
                    .collect();
                let metrics: serde_json::Map<String, Json> = g
                    .metrics
                    .iter()
                    .map(|(k, v)| (k.to_string(), number(*v)))
                    .collect();
                let object = g
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v:?}"))
                    .collect::<Vec<_>>()
                    .join(",");
                let mut fields = serde_json::Map::new();
                fields.insert(
                    "prometheus".into(),
                    json!({"labels": labels, "metrics": metrics}),
                );
                Doc { object, fields }
            })
            .collect()
    }
}

/// A metric value as JSON: integers stay integers; ±Inf as strings (JSON
/// has no infinities).
pub fn number(v: f64) -> Json {
    if v.is_infinite() {
        return Json::String(if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        });
    }
    if v.fract() == 0.0 && v.abs() < 9.0e15 {
        return json!(v as i64);
    }
    json!(v)
}

/// A `prometheus/metrics` input.
pub struct Prometheus {
    /// The input's id (part of every document id).
    pub id: String,
    /// Its streams.
    pub streams: Vec<Stream>,
}

/// What a scraping input type accepts in its streams.
pub struct StreamSchema<'a> {
    /// `prometheus/metrics`, `kubernetes/metrics`.
    pub type_name: &'a str,
    /// Keys a stream may have.
    pub keys: &'a [&'a str],
    /// The default `data_stream.dataset` of a stream running a metricset.
    pub default_dataset: fn(&str) -> String,
    /// The metricset of a name, if it exists.
    pub metricset: fn(&str) -> Option<Arc<dyn Metricset>>,
    /// The metricset names, for errors.
    pub allowed: &'a str,
}

/// Reads the streams of a scraping input (`streams:`, or the input's own
/// settings when it has none).
pub fn read_streams(
    map: &Map,
    input_ds: &DataStream,
    schema: &StreamSchema<'_>,
    out: &mut Vec<Problem>,
) -> Vec<Stream> {
    let StreamSchema {
        type_name,
        keys,
        default_dataset,
        metricset,
        allowed,
    } = *schema;
    let own = stream_maps(map, &["ssl", "metrics_filters"], out);
    let top_level = map.get("streams").is_none();
    let mut streams = Vec::new();
    for (prefix, m) in &own {
        let mut p = Vec::new();
        if !top_level {
            unknown_keys_lenient(m, keys, type_name, &mut p);
        }
        let names = metricset_names(m, allowed, &mut p);
        let mut sets = Vec::new();
        for (i, n) in names.iter().enumerate() {
            match metricset(n) {
                Some(s) => sets.push(s),
                None if ELASTIC_METRICSETS.contains(&n.as_str()) => p.push(
                    Problem::warning(
                        format!("metricsets.{i}"),
                        format!("metricset `{n}` of `{type_name}` is not available in this version of leasehold; the stream skips it"),
                    )
                    .hint(format!("available: {allowed}")),
                ),
                None => p.push(
                    Problem::new(
                        format!("metricsets.{i}"),
                        format!("unknown metricset `{n}` of `{type_name}`"),
                    )
                    .hint(format!("available: {allowed}")),
                ),
            }
        }
        for flag in ["use_types", "rate_counters"] {
            if let Some(Value::Bool(true)) = m.get(flag) {
                p.push(Problem::new(flag, "`true` is not supported: events have Metricbeat's untyped shape (prometheus.metrics.<name>)").hint(format!("remove `{flag}` or set it to false")));
            }
        }
        if sets.is_empty() {
            // Nothing it can run (said above): the stream is left out.
            push_with_prefix(out, prefix, p);
            continue;
        }
        let json = sets.iter().filter(|s| s.body() == Body::Json).count();
        if json > 0 && json < sets.len() {
            p.push(
                Problem::new(
                    "metricsets",
                    "the kubelet's metricsets (node, pod, container, volume, system) read its JSON summary and cannot share a stream with metricsets of a Prometheus endpoint",
                )
                .hint("give them a stream of their own, with the kubelet as `hosts`"),
            );
            push_with_prefix(out, prefix, p);
            continue;
        }
        let period = scrape::duration(m, "period", Duration::from_secs(10), &mut p);
        let timeout = scrape::duration(m, "timeout", period, &mut p);
        let default_path = if json > 0 {
            "/stats/summary"
        } else {
            "/metrics"
        };
        let urls = scrape::urls(m, default_path, &mut p);
        let http = HttpSettings::read(m, &mut p);
        let (include, exclude) = scrape::filters(m, &mut p);
        let base = DataStream {
            kind: "metrics".into(),
            dataset: names
                .first()
                .map_or_else(|| default_dataset(""), |n| default_dataset(n)),
            namespace: input_ds.namespace.clone(),
        };
        let data_stream = DataStream::read_map(m, &base, &mut p);
        let dataset_per_metricset = data_stream.dataset == base.dataset && sets.len() > 1;
        let add_metadata = match m.get("add_metadata") {
            None | Some(Value::Null) => false,
            Some(v) => crate::settings::flag("add_metadata", v, &mut p).unwrap_or(false),
        };
        push_with_prefix(out, prefix, p);
        streams.push(Stream {
            urls,
            period,
            timeout,
            http,
            data_stream,
            dataset_per_metricset,
            metricsets: sets,
            include,
            exclude,
            add_metadata,
        });
    }
    streams
}

/// The settings of each stream of an input, with the prefix its problems
/// get: each entry of `streams` (`streams.N.`), or the input itself (no
/// prefix) when it has none. `expand` names the keys whose dotted forms
/// are read as nested maps.
pub fn stream_maps(map: &Map, expand: &[&str], out: &mut Vec<Problem>) -> Vec<(String, Map)> {
    match map.get("streams") {
        Some(Value::List(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Value::Map(m) => Some((format!("streams.{i}."), expand_dotted(m, expand))),
                other => {
                    out.push(Problem::new(
                        format!("streams.{i}"),
                        format!("must be a mapping, found {}", other.type_name()),
                    ));
                    None
                }
            })
            .collect(),
        None | Some(Value::Null) => vec![(String::new(), expand_dotted(map, expand))],
        Some(other) => {
            out.push(Problem::new(
                "streams",
                format!("must be a list of mappings, found {}", other.type_name()),
            ));
            Vec::new()
        }
    }
}

/// The `metricsets` of a stream: required, a list (or one name);
/// `allowed` goes into the hint when it is missing.
pub fn metricset_names(m: &Map, allowed: &str, p: &mut Vec<Problem>) -> Vec<String> {
    match m.get("metricsets") {
        None | Some(Value::Null) => {
            p.push(Problem::new("metricsets", "is required").hint(format!("available: {allowed}")));
            Vec::new()
        }
        Some(Value::List(items)) => items
            .iter()
            .filter_map(|v| match v {
                Value::Str(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        Some(Value::Str(s)) => vec![s.clone()],
        Some(v) if unresolved(v) => Vec::new(),
        Some(other) => {
            p.push(Problem::new(
                "metricsets",
                format!("must be a list, found {}", other.type_name()),
            ));
            Vec::new()
        }
    }
}

/// Adds a stream's problems to the input's, under `streams.N.` when the
/// input has streams.
pub fn push_with_prefix(out: &mut Vec<Problem>, prefix: &str, problems: Vec<Problem>) {
    for mut problem in problems {
        if !prefix.is_empty() {
            let mut path: Vec<String> = prefix
                .trim_end_matches('.')
                .split('.')
                .map(str::to_string)
                .collect();
            path.extend(problem.path);
            problem.path = path;
        }
        out.push(problem);
    }
}

/// The streams, unless an error was found; an input whose streams all
/// fell away (only unavailable metricsets) is not run, with a warning.
pub fn finish(
    out: &mut Vec<Problem>,
    before: usize,
    streams: Vec<Stream>,
    type_name: &str,
) -> Option<Vec<Stream>> {
    if out[before..].iter().any(|p| !p.warning) {
        return None;
    }
    if streams.is_empty() {
        out.push(Problem::warning(
            "streams",
            format!("no stream of this `{type_name}` input runs a metricset this version has; the input does not run"),
        ));
        return None;
    }
    Some(streams)
}

impl Prometheus {
    /// Reads the settings; `None` when they are bad (problems pushed).
    pub fn from_settings(
        id: &str,
        map: &Map,
        ds: &DataStream,
        out: &mut Vec<Problem>,
    ) -> Option<Prometheus> {
        let before = out.len();
        let mut keys: Vec<&str> = STREAM_KEYS.to_vec();
        keys.push("streams");
        unknown_keys_lenient(map, &keys, "prometheus/metrics", out);
        let schema = StreamSchema {
            type_name: "prometheus/metrics",
            keys: &STREAM_KEYS,
            default_dataset: |_| "prometheus.collector".to_string(),
            metricset: |n| (n == "collector").then(|| Arc::new(Collector) as Arc<dyn Metricset>),
            allowed: "collector",
        };
        let streams = read_streams(map, ds, &schema, out);
        finish(out, before, streams, "prometheus/metrics").map(|streams| Prometheus {
            id: id.to_string(),
            streams,
        })
    }
}

impl Input for Prometheus {
    fn run(self: Arc<Self>, ctx: InputContext) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(scrape::run_streams(
            self.id.clone(),
            self.streams.clone(),
            ctx,
        ))
    }
}
