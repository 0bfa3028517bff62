//! Periodic scraping streams, shared by `prometheus/metrics` and
//! `kubernetes/metrics`: each stream fetches each of its hosts on
//! wall-clock multiples of `period`, parses the exposition, turns it into
//! documents through its metricset, and emits them stamped with the aligned
//! time and a deterministic id. A failed fetch is logged and counted; the
//! stream goes on with the next period.

use std::sync::Arc;
use std::time::Duration;

use leasehold_policy::{Map, Value};
use leasehold_prometheus_text::{Family, NameFilter, format_of, parse_lenient_keeping};
use regex::Regex;
use serde_json::Value as Json;

use super::http::{Fetcher, HttpSettings};
use super::schedule::{document_id, next_aligned, now_us, sleep_until_wall};
use super::settings::{DataStream, Problem, optional_strings, unresolved};
use crate::inputs::contract::InputContext;
use crate::pipeline::publisher::EventSink;

/// `Accept` of a scrape: OpenMetrics first, the text format as fallback.
pub const ACCEPT: &str =
    "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// One document of a metricset: the object it describes (for its id) and
/// its fields.
pub struct Doc {
    /// What the document is about (a label set, `namespace/pod`, …).
    pub object: String,
    /// Fields, merged into the event.
    pub fields: serde_json::Map<String, Json>,
}

/// What a metricset's endpoint answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// A Prometheus or OpenMetrics exposition.
    Prometheus,
    /// A JSON document (the kubelet's `/stats/summary`).
    Json,
}

/// Turns one scrape into documents.
pub trait Metricset: Send + Sync + 'static {
    /// Its name (`collector`, `state_pod`, …).
    fn name(&self) -> &str;
    /// The module (`prometheus`, `kubernetes`).
    fn module(&self) -> &str;
    /// The families it reads, when not all (a counter's family may also
    /// carry `_total`): a scrape builds only what some metricset reads.
    fn families(&self) -> Option<&'static [&'static str]> {
        None
    }
    /// Documents of one scrape of `host`.
    fn documents(&self, families: &[Family], host: &str) -> Vec<Doc>;
    /// What its endpoint answers; a stream's metricsets all read one kind.
    fn body(&self) -> Body {
        Body::Prometheus
    }
    /// Documents of one JSON answer of `host` (for [`Body::Json`]).
    fn documents_json(&self, _body: &Json, _host: &str) -> Vec<Doc> {
        Vec::new()
    }
}

/// A stream's settings.
#[derive(Clone)]
pub struct Stream {
    /// Full URLs to fetch.
    pub urls: Vec<String>,
    /// Fetch every `period`, aligned on the wall clock.
    pub period: Duration,
    /// Per fetch.
    pub timeout: Duration,
    /// TLS and token.
    pub http: HttpSettings,
    /// Where its events go.
    pub data_stream: DataStream,
    /// `data_stream.dataset` was not written: each metricset's documents go
    /// to `<module>.<metricset>` (e.g. `kubernetes.state_pod`), as
    /// Elastic's integration routes them.
    pub dataset_per_metricset: bool,
    /// The metricsets it runs on each fetch.
    pub metricsets: Vec<Arc<dyn Metricset>>,
    /// `metrics_filters.include` (empty: all).
    pub include: Vec<Regex>,
    /// `metrics_filters.exclude`.
    pub exclude: Vec<Regex>,
    /// `add_metadata`: documents get their pod's, node's and namespace's
    /// labels (see `kubernetes::metadata`).
    pub add_metadata: bool,
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        self.urls == other.urls
            && self.period == other.period
            && self.timeout == other.timeout
            && self.http == other.http
            && self.data_stream == other.data_stream
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("urls", &self.urls)
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

/// Reads `period`-like durations: `10s`, `1m`, or whole seconds.
pub fn duration(map: &Map, key: &str, default: Duration, out: &mut Vec<Problem>) -> Duration {
    match map.get(key) {
        None | Some(Value::Null) => default,
        Some(v) if unresolved(v) => default,
        Some(v) => match crate::units::parse_duration(v) {
            Ok(d) if d >= Duration::from_millis(100) && d <= Duration::from_secs(24 * 3600) => d,
            Ok(_) => {
                out.push(Problem::new(key, "must be between 100ms and 24h"));
                default
            }
            Err(e) => {
                out.push(Problem::new(key, e).hint("e.g. `10s` or `1m`"));
                default
            }
        },
    }
}

/// `hosts` with `metrics_path`: full URLs (`http://` added when a host has
/// no scheme, as Metricbeat does).
pub fn urls(map: &Map, default_path: &str, out: &mut Vec<Problem>) -> Vec<String> {
    let path = match map.get("metrics_path") {
        None | Some(Value::Null) => default_path.to_string(),
        Some(Value::Str(p)) => p.clone(),
        Some(other) => {
            out.push(Problem::new(
                "metrics_path",
                format!("must be a string, found {}", other.type_name()),
            ));
            default_path.to_string()
        }
    };
    let hosts: Vec<String> = match map.get("hosts") {
        None | Some(Value::Null) => {
            out.push(Problem::new("hosts", "is required").hint("e.g. `hosts: ['localhost:9090']`"));
            return Vec::new();
        }
        Some(v @ (Value::List(_) | Value::Str(_))) => {
            optional_strings(Some(v), "hosts", ["a string", "host:port or URLs"], out)
        }
        Some(other) => {
            out.push(Problem::new(
                "hosts",
                format!(
                    "must be a list of host:port or URLs, found {}",
                    other.type_name()
                ),
            ));
            return Vec::new();
        }
    };
    if hosts.is_empty() {
        out.push(Problem::new("hosts", "must not be empty"));
    }
    hosts
        .into_iter()
        .filter(|h| !h.contains("${"))
        .map(|h| {
            let with_scheme = if h.contains("://") {
                h
            } else {
                format!("http://{h}")
            };
            // A host that already names a path keeps it.
            let after_scheme = with_scheme.split_once("://").map_or("", |(_, r)| r);
            if after_scheme.contains('/') {
                with_scheme
            } else {
                format!(
                    "{with_scheme}{}{path}",
                    if path.starts_with('/') { "" } else { "/" }
                )
            }
        })
        .collect()
}

/// `metrics_filters.include` / `exclude`: regexes anchored on the whole
/// metric name.
pub fn filters(map: &Map, out: &mut Vec<Problem>) -> (Vec<Regex>, Vec<Regex>) {
    let Some(Value::Map(f)) = map.get("metrics_filters") else {
        if let Some(v) = map.get("metrics_filters")
            && !matches!(v, Value::Null)
        {
            out.push(Problem::new(
                "metrics_filters",
                "must be a mapping with `include` and/or `exclude`",
            ));
        }
        return (Vec::new(), Vec::new());
    };
    let mut read = |key: &str| -> Vec<Regex> {
        match f.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::List(items)) => items
                .iter()
                .enumerate()
                .filter_map(|(i, p)| match p {
                    Value::Str(s) => match Regex::new(&format!("^(?:{s})$")) {
                        Ok(r) => Some(r),
                        Err(e) => {
                            out.push(Problem::new(
                                format!("metrics_filters.{key}.{i}"),
                                format!("not a regular expression: {e}"),
                            ));
                            None
                        }
                    },
                    other => {
                        out.push(Problem::new(
                            format!("metrics_filters.{key}.{i}"),
                            format!("must be a string, found {}", other.type_name()),
                        ));
                        None
                    }
                })
                .collect(),
            Some(other) => {
                out.push(Problem::new(
                    format!("metrics_filters.{key}"),
                    format!("must be a list of patterns, found {}", other.type_name()),
                ));
                Vec::new()
            }
        }
    };
    let include = read("include");
    let exclude = read("exclude");
    for (k, _) in f.iter() {
        if k != "include" && k != "exclude" {
            out.push(
                Problem::new(format!("metrics_filters.{k}"), "unknown setting")
                    .hint("known settings: include, exclude"),
            );
        }
    }
    (include, exclude)
}

/// Runs every (stream, URL) until cancelled.
pub async fn run_streams(
    input_id: String,
    streams: Vec<Stream>,
    ctx: InputContext,
) -> Result<(), String> {
    let mut tasks = tokio::task::JoinSet::new();
    let failing = FailingTargets {
        health: ctx.health.clone(),
        now: Arc::default(),
    };
    // Each metricset's sink, by stream.
    let with_sinks: Vec<(Stream, Vec<(EventSink, String)>)> = streams
        .into_iter()
        .map(|stream| {
            let sinks = stream
                .metricsets
                .iter()
                .map(|ms| {
                    let mut ds = stream.data_stream.clone();
                    if stream.dataset_per_metricset {
                        ds.dataset = format!("{}.{}", ms.module(), ms.name());
                    }
                    (ctx.sink.with_data_stream(&ds), ds.dataset)
                })
                .collect();
            (stream, sinks)
        })
        .collect();
    for (stream, sinks) in share_fetches(with_sinks) {
        let fetcher = Fetcher::new(&stream.http, stream.timeout)?;
        let metadata = stream
            .add_metadata
            .then(|| super::kubernetes::metadata::shared(ctx.cluster.kubeconfig.clone()));
        for url in stream.urls.clone() {
            tasks.spawn(run_url(
                input_id.clone(),
                stream.clone(),
                url,
                fetcher.clone(),
                sinks.clone(),
                ctx.cancel.clone(),
                failing.clone(),
                metadata.clone(),
            ));
        }
    }
    ctx.cancel.cancelled().await;
    tasks.shutdown().await;
    Ok(())
}

/// Streams of one input that fetch the same URLs the same way (period,
/// timeout, TLS and token, filters, `add_metadata`) become one: one fetch
/// and one parse per period serve all their metricsets, each still going
/// to its own data stream. Elastic's policies give every metricset a
/// stream of its own (fifteen `state_*` streams on one kube-state-metrics),
/// and their periods are aligned on the wall clock: separately they would
/// fetch and parse the same exposition fifteen times at the same moment.
fn share_fetches(
    streams: Vec<(Stream, Vec<(EventSink, String)>)>,
) -> Vec<(Stream, Vec<(EventSink, String)>)> {
    fn same_fetch(a: &Stream, b: &Stream) -> bool {
        let patterns = |r: &[Regex]| r.iter().map(|x| x.as_str().to_string()).collect::<Vec<_>>();
        a.urls == b.urls
            && a.period == b.period
            && a.timeout == b.timeout
            && a.http == b.http
            && a.add_metadata == b.add_metadata
            && patterns(&a.include) == patterns(&b.include)
            && patterns(&a.exclude) == patterns(&b.exclude)
            // The kubelet's summary and a Prometheus exposition are read
            // differently.
            && a.metricsets.first().map(|m| m.body()) == b.metricsets.first().map(|m| m.body())
    }
    let mut out: Vec<(Stream, Vec<(EventSink, String)>)> = Vec::new();
    for (stream, sinks) in streams {
        match out.iter_mut().find(|(s, _)| same_fetch(s, &stream)) {
            Some((shared, shared_sinks)) => {
                shared.metricsets.extend(stream.metricsets);
                shared_sinks.extend(sinks);
            }
            None => out.push((stream, sinks)),
        }
    }
    out
}

/// The targets of one input whose last fetch failed: the input shows as
/// failing in `/status` while any does.
#[derive(Clone)]
struct FailingTargets {
    health: crate::inputs::contract::InputHealth,
    now: Arc<std::sync::Mutex<std::collections::BTreeMap<String, String>>>,
}

impl FailingTargets {
    fn failed(&self, url: &str, error: &str) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        now.insert(url.to_string(), error.to_string());
        self.health.failing(error);
    }

    fn succeeded(&self, url: &str) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        if now.remove(url).is_some() {
            match now.values().next() {
                Some(other) => self.health.failing(other),
                None => self.health.recovered(),
            }
        }
    }
}

/// The families some metricset of `metricsets` reads; `None` when one of
/// them reads any.
fn families_read(metricsets: &[Arc<dyn Metricset>]) -> Option<Vec<&'static str>> {
    let mut all = Vec::new();
    for m in metricsets {
        all.extend_from_slice(m.families()?);
    }
    Some(all)
}

/// Whether a family called `name` is among `read` (all when `None`),
/// also as a counter's `<name>_total`.
fn is_read(read: Option<&[&str]>, name: &str) -> bool {
    read.is_none_or(|fs| {
        fs.iter()
            .any(|f| *f == name || name.strip_suffix("_total") == Some(*f))
    })
}

#[allow(clippy::too_many_arguments)]
async fn run_url(
    input_id: String,
    stream: Stream,
    url: String,
    fetcher: Fetcher,
    sinks: Vec<(EventSink, String)>,
    cancel: tokio_util::sync::CancellationToken,
    targets: FailingTargets,
    metadata: Option<Arc<super::kubernetes::metadata::Metadata>>,
) {
    let period_ms = stream.period.as_millis() as u64;
    // A scrape builds only the families kept by `metrics_filters` and
    // read by some metricset.
    let names = NameFilter::new(&stream.include, &stream.exclude);
    let read = families_read(&stream.metricsets);
    let keep = |name: &str| is_read(read.as_deref(), name) && names.keeps(name);
    let mut failing = false;
    let json = stream
        .metricsets
        .first()
        .is_some_and(|m| m.body() == Body::Json);
    if let Some(m) = &metadata {
        tokio::select! {
            () = m.ready(METADATA_LIMIT) => {}
            () = cancel.cancelled() => return,
        }
    }
    loop {
        let at = next_aligned(now_us(), stream.period);
        tokio::select! {
            () = sleep_until_wall(at) => {}
            () = cancel.cancelled() => return,
        }
        let started = std::time::Instant::now();
        let fetched = match fetcher.get(&url, ACCEPT).await {
            Ok(f) => f,
            Err(e) => {
                // Said once per outage; `/status` shows it meanwhile.
                if failing {
                    tracing::debug!(input = %input_id, url = %url, "fetch failed again: {e}");
                } else {
                    tracing::warn!(input = %input_id, url = %url, "fetch failed: {e}; retrying every period");
                }
                targets.failed(&url, &e);
                failing = true;
                continue;
            }
        };
        if failing {
            tracing::info!(input = %input_id, url = %url, "fetching again");
            targets.succeeded(&url);
            failing = false;
        }
        let parsed = if json {
            match serde_json::from_str::<Json>(&fetched.body) {
                Ok(v) => Parsed::Json(v),
                Err(e) => {
                    let why = format!("{url}: the answer is not JSON: {e}");
                    tracing::warn!(input = %input_id, "{why}");
                    targets.failed(&url, &why);
                    failing = true;
                    continue;
                }
            }
        } else {
            let (families, errors) = parse_lenient_keeping(
                &fetched.body,
                format_of(fetched.content_type.as_deref()),
                &keep,
            );
            if let Some(e) = errors.first() {
                tracing::warn!(input = %input_id, url = %url, "{} line(s) could not be parsed, first: {e}", errors.len());
            }
            Parsed::Families(families)
        };
        // The parsed answer is all that is used from here on: the body
        // (up to 64 MiB) is not held while documents are built and queued.
        let large = fetched.body.len() >= RELEASE_AFTER_BYTES;
        drop(fetched);
        let took_ns = started.elapsed().as_nanos() as u64;
        for (ms, (sink, dataset)) in stream.metricsets.iter().zip(&sinks) {
            let docs = match &parsed {
                Parsed::Families(families) => ms.documents(families, &url),
                Parsed::Json(body) => ms.documents_json(body, &url),
            };
            for doc in docs {
                let id = document_id(&[&input_id, ms.name(), &url, &doc.object, &at.to_string()]);
                let mut fields = doc.fields;
                if let Some(m) = &metadata {
                    m.enrich(&mut fields);
                }
                fields.insert(
                    "metricset".into(),
                    serde_json::json!({"name": ms.name(), "period": period_ms}),
                );
                fields.insert(
                    "event".into(),
                    serde_json::json!({"module": ms.module(), "dataset": dataset, "duration": took_ns}),
                );
                fields.insert(
                    "service".into(),
                    serde_json::json!({"address": url, "type": ms.module()}),
                );
                if sink.emit_at(at, &id, fields).await.is_err() {
                    return;
                }
            }
        }
        // Megabytes were parsed and are now free: give their pages back
        // rather than hold the peak until the next scrape.
        drop(parsed);
        if large {
            crate::allocator::release_free();
        }
    }
}

/// How long a stream's first scrape waits for the `add_metadata` caches.
const METADATA_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A body at least this large is followed by [`crate::allocator::release_free`].
const RELEASE_AFTER_BYTES: usize = 1024 * 1024;

/// One fetch, parsed as its metricsets read it.
enum Parsed {
    Families(Vec<Family>),
    Json(Json),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_read_by_name_or_as_a_counters_total() {
        let read: &[&str] = &["kube_pod_info", "kube_pod_container_status_restarts"];
        assert!(is_read(Some(read), "kube_pod_info"));
        assert!(is_read(
            Some(read),
            "kube_pod_container_status_restarts_total"
        ));
        assert!(!is_read(Some(read), "kube_pod_labels"));
        assert!(!is_read(Some(read), "kube_pod_info_total_x"));
        assert!(is_read(None, "anything"), "a metricset reading all");
    }
}
