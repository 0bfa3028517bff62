//! `system/metrics`: the host's CPU, load, memory, network, file systems,
//! disks, processes and uptime, read from `/proc` every `period`, shaped
//! as Metricbeat's `system` module. Runs on every agent (node-local).
//!
//! `system.hostfs` (or `hostfs`) points at the host's root when the agent
//! runs in a container that mounts it (`/hostfs`), so the documents
//! describe the node, not the container.

mod metricsets;
mod proc;
mod process;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use leasehold_policy::{Map, Value};
use serde_json::json;

use super::scrape::duration;
use super::settings::{DataStream, Problem, unknown_keys_lenient, unresolved};
use crate::inputs::contract::{Input, InputContext};
use crate::inputs::schedule::{document_id, next_aligned, now_us, sleep_until_wall};
pub(crate) use metricsets::ticks_per_second;
pub use metricsets::{Host, METRICSETS, Options, Previous};
use process::ProcessOptions;
pub(crate) use process::parse_stat;

/// Keys of a stream (and of the input, where streams are not used).
const KEYS: [&str; 5] = ["metricsets", "period", "system.hostfs", "hostfs", "system"];
/// Metricbeat's default `period`.
const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// Settings of Metricbeat's `system` module read by their first part:
/// `process.include_top_n.by_cpu`, `process: {include_top_n: …}`, ….
const OPTION_ROOTS: [&str; 7] = [
    "processes",
    "process",
    "cpu",
    "core",
    "network",
    "diskio",
    "filesystem",
];

/// The value at dotted `path` in `m`, written flat (`a.b: 1`), nested
/// (`a: {b: 1}`) or mixed.
fn lookup<'a>(m: &'a Map, path: &str) -> Option<&'a Value> {
    if let Some(v) = m.get(path) {
        return Some(v);
    }
    let mut at = 0;
    while let Some(i) = path[at..].find('.') {
        let (head, rest) = (&path[..at + i], &path[at + i + 1..]);
        if let Some(Value::Map(inner)) = m.get(head)
            && let Some(v) = lookup(inner, rest)
        {
            return Some(v);
        }
        at += i + 1;
    }
    None
}

/// A list of names (one name alone counts as a list of one).
fn names(m: &Map, key: &str, out: &mut Vec<Problem>) -> Vec<String> {
    match lookup(m, key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Str(s)) => vec![s.clone()],
        Some(Value::List(items)) => items
            .iter()
            .filter_map(|v| match v {
                Value::Str(s) => Some(s.clone()),
                other => {
                    out.push(Problem::new(
                        key,
                        format!(
                            "must be a list of strings, found {} in it",
                            other.type_name()
                        ),
                    ));
                    None
                }
            })
            .collect(),
        Some(other) => {
            out.push(Problem::new(
                key,
                format!("must be a list of strings, found {}", other.type_name()),
            ));
            Vec::new()
        }
    }
}

/// The options of a stream (see [`Options`]).
fn read_options(m: &Map, out: &mut Vec<Problem>) -> Options {
    let mut process = ProcessOptions::default();
    for p in names(m, "processes", out) {
        match regex::Regex::new(&p) {
            Ok(r) => process.patterns.push(r),
            Err(e) => out.push(Problem::new(
                "processes",
                format!("`{p}` is not a regular expression: {e}"),
            )),
        }
    }
    // Metricbeat's `processes: ['.*']` is every process.
    if process.patterns.iter().any(|r| r.as_str() == ".*") {
        process.patterns.clear();
    }
    let count = |key: &str, out: &mut Vec<Problem>| match lookup(m, key) {
        None | Some(Value::Null) => None,
        Some(Value::Int(n)) if *n >= 0 => Some(*n as usize),
        Some(other) => {
            out.push(Problem::new(
                key,
                format!(
                    "must be a number of processes, found {}",
                    other.to_subst_text()
                ),
            ));
            None
        }
    };
    let by_cpu = count("process.include_top_n.by_cpu", out);
    let by_memory = count("process.include_top_n.by_memory", out);
    let enabled = !matches!(
        lookup(m, "process.include_top_n.enabled"),
        Some(Value::Bool(false))
    );
    process.top_n = match (enabled, by_cpu, by_memory) {
        (false, _, _) => None,
        (true, None, None) => ProcessOptions::default().top_n,
        (true, c, mem) => Some((c.unwrap_or(0), mem.unwrap_or(0))),
    };
    Options {
        process,
        interfaces: names(m, "network.interfaces", out),
        devices: names(m, "diskio.include_devices", out),
        ignore_types: names(m, "filesystem.ignore_types", out),
    }
}

/// `m` without the keys read by [`read_options`], for the unknown-key check.
fn without_options(m: &Map) -> Map {
    m.iter()
        .filter(|(k, _)| {
            !OPTION_ROOTS
                .iter()
                .any(|r| k.as_str() == *r || k.starts_with(&format!("{r}.")))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// One stream: metricsets read together every `period`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stream {
    pub metricsets: Vec<String>,
    /// Process selection, interface and device filters.
    pub options: Options,
    pub period: Duration,
    pub root: PathBuf,
    /// `data_stream.dataset` was written: every metricset goes there;
    /// otherwise each to `system.<metricset>`.
    pub dataset: Option<String>,
    pub data_stream: DataStream,
}

/// A `system/metrics` input.
#[derive(Debug)]
pub struct SystemMetrics {
    id: String,
    streams: Vec<Stream>,
}

impl SystemMetrics {
    /// Reads the input's settings; Elastic's settings this version does not
    /// use are warnings.
    pub fn from_settings(
        id: &str,
        map: &Map,
        ds: &DataStream,
        out: &mut Vec<Problem>,
    ) -> Option<SystemMetrics> {
        let before = out.len();
        let mut keys = KEYS.to_vec();
        keys.push("streams");
        unknown_keys_lenient(&without_options(map), &keys, "system/metrics", out);
        let input_root = hostfs(map, out);
        let mut streams = Vec::new();
        for (prefix, m) in &super::prometheus::stream_maps(map, &[], out) {
            let mut p = Vec::new();
            if !prefix.is_empty() {
                unknown_keys_lenient(&without_options(m), &KEYS, "system/metrics", &mut p);
            }
            // Stream settings over the input's.
            let mut merged = map.clone();
            for (k, v) in m.iter() {
                merged.insert(k.clone(), v.clone());
            }
            let options = read_options(&merged, &mut p);
            let names = super::prometheus::metricset_names(m, &METRICSETS.join(", "), &mut p);
            let mut sets = Vec::new();
            for n in names {
                if METRICSETS.contains(&n.as_str()) {
                    sets.push(n);
                } else {
                    // Metricbeat has more (`core`, `socket`, `entropy`, …).
                    p.push(
                        Problem::warning(
                            "metricsets",
                            format!(
                                "metricset `{n}` is not available in this version; it is skipped"
                            ),
                        )
                        .hint(format!("available: {}", METRICSETS.join(", "))),
                    );
                }
            }
            let period = duration(m, "period", DEFAULT_PERIOD, &mut p);
            let root = if m.get("system.hostfs").is_some() || m.get("hostfs").is_some() {
                hostfs(m, &mut p)
            } else {
                input_root.clone()
            };
            let stream_ds = DataStream::read_map(m, ds, &mut p);
            let dataset = explicit_dataset(m).then(|| stream_ds.dataset.clone());
            super::prometheus::push_with_prefix(out, prefix, p);
            if !sets.is_empty() {
                streams.push(Stream {
                    metricsets: sets,
                    options,
                    period,
                    root,
                    dataset,
                    data_stream: stream_ds,
                });
            }
        }
        if out[before..].iter().any(|p| !p.warning) {
            return None;
        }
        Some(SystemMetrics {
            id: id.to_string(),
            streams,
        })
    }
}

/// Whether `data_stream.dataset` is written in `m`, dotted or nested.
fn explicit_dataset(m: &Map) -> bool {
    m.get("data_stream.dataset").is_some()
        || matches!(m.get("data_stream"), Some(Value::Map(d)) if d.get("dataset").is_some())
}

/// `system.hostfs` / `hostfs` (also `system: {hostfs: …}`); `/` when unset.
fn hostfs(m: &Map, out: &mut Vec<Problem>) -> PathBuf {
    let nested = match m.get("system") {
        Some(Value::Map(s)) => s.get("hostfs").cloned(),
        _ => None,
    };
    let v = m
        .get("system.hostfs")
        .cloned()
        .or(nested)
        .or_else(|| m.get("hostfs").cloned());
    match v {
        None | Some(Value::Null) => PathBuf::from("/"),
        Some(Value::Str(s)) if s.starts_with('/') => PathBuf::from(s),
        Some(v) if unresolved(&v) => PathBuf::from("/"),
        Some(other) => {
            out.push(Problem::new(
                "system.hostfs",
                format!(
                    "must be an absolute path (the host's root as mounted, e.g. /hostfs), found {}",
                    other.to_subst_text()
                ),
            ));
            PathBuf::from("/")
        }
    }
}

impl Input for SystemMetrics {
    fn run(self: Arc<Self>, ctx: InputContext) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async move {
            let mut tasks = tokio::task::JoinSet::new();
            for stream in self.streams.clone() {
                tasks.spawn(run_stream(
                    self.id.clone(),
                    stream,
                    ctx.sink.clone(),
                    ctx.cancel.clone(),
                ));
            }
            ctx.cancel.cancelled().await;
            tasks.shutdown().await;
            Ok(())
        })
    }
}

async fn run_stream(
    input_id: String,
    stream: Stream,
    sink: crate::pipeline::publisher::EventSink,
    cancel: tokio_util::sync::CancellationToken,
) {
    let host = Host::new(&stream.root);
    let period_ms = stream.period.as_millis() as u64;
    // A first CPU reading now, so the first period already has a delta.
    let mut prev = Previous {
        cpu: host.cpu_ticks().ok().map(|(t, _)| t),
        ..Previous::default()
    };
    let opts = Arc::new(stream.options.clone());
    let sinks: Vec<(String, crate::pipeline::publisher::EventSink, String)> = stream
        .metricsets
        .iter()
        .map(|ms| {
            let mut ds = stream.data_stream.clone();
            ds.dataset = stream
                .dataset
                .clone()
                .unwrap_or_else(|| format!("system.{ms}"));
            (ms.clone(), sink.with_data_stream(&ds), ds.dataset)
        })
        .collect();
    let mut failing: std::collections::BTreeSet<String> = Default::default();
    loop {
        let at = next_aligned(now_us(), stream.period);
        tokio::select! {
            () = sleep_until_wall(at) => {}
            () = cancel.cancelled() => return,
        }
        for (ms, sink, dataset) in &sinks {
            let started = std::time::Instant::now();
            let reading = {
                let host = host.clone();
                let ms = ms.clone();
                let opts = Arc::clone(&opts);
                let mut p = std::mem::take(&mut prev);
                tokio::task::spawn_blocking(move || {
                    let docs = host.documents(&ms, &mut p, &opts);
                    (docs, p)
                })
                .await
            };
            let docs = match reading {
                Ok((Ok(docs), p)) => {
                    prev = p;
                    if failing.remove(ms) {
                        tracing::info!(input = %input_id, metricset = %ms, "reading again");
                    }
                    docs
                }
                Ok((Err(e), p)) => {
                    prev = p;
                    if failing.insert(ms.clone()) {
                        tracing::warn!(input = %input_id, metricset = %ms, "cannot read the host: {e}");
                    }
                    continue;
                }
                Err(e) => {
                    tracing::error!(input = %input_id, metricset = %ms, "reading the host panicked: {e}");
                    continue;
                }
            };
            let took_ns = started.elapsed().as_nanos() as u64;
            for doc in docs {
                let id = document_id(&[&input_id, ms, &doc.object, &at.to_string()]);
                let mut fields = doc.fields;
                fields.insert("metricset".into(), json!({"name": ms, "period": period_ms}));
                fields.insert(
                    "event".into(),
                    json!({"module": "system", "dataset": dataset, "duration": took_ns}),
                );
                if sink.emit_at(at, &id, fields).await.is_err() {
                    return;
                }
            }
        }
    }
}
