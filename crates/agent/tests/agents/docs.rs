//! Reading back what agents shipped to a real OpenSearch or Elasticsearch:
//! the documents themselves are the evidence (their own fields), never
//! what an agent reports.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use leasehold_testkit::sinks::TestSink;
use serde_json::{Value, json};

/// The `_source` of every document in `index` (at most 10,000), with only
/// `fields`, after a refresh.
pub fn sources(sink: &TestSink, index: &str, fields: &[&str]) -> Result<Vec<Value>> {
    sink.refresh(index)?;
    let answer = sink.search(
        index,
        &json!({"size": 10_000, "_source": fields, "query": {"match_all": {}}}),
    )?;
    let Some(hits) = answer["hits"]["hits"].as_array() else {
        bail!("unexpected _search answer: {answer}");
    };
    Ok(hits.iter().map(|h| h["_source"].clone()).collect())
}

/// Waits until `done` holds for the documents of `index`, polling; returns
/// the last documents read. Fails after `within` with what was there.
pub fn wait_docs(
    sink: &TestSink,
    index: &str,
    fields: &[&str],
    within: Duration,
    what: &str,
    mut done: impl FnMut(&[Value]) -> bool,
) -> Result<Vec<Value>> {
    let deadline = Instant::now() + within;
    loop {
        let docs = sources(sink, index, fields)?;
        if done(&docs) {
            return Ok(docs);
        }
        if Instant::now() > deadline {
            bail!(
                "{what}: not reached within {within:?}; {} documents in {index}",
                docs.len()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The index the `kubernetes/events` input writes to by default.
pub const EVENTS_INDEX: &str = "logs-kubernetes.event-default";

/// Copies of each Kubernetes Event in the documents, by Event name.
pub fn event_copies(docs: &[Value]) -> BTreeMap<String, usize> {
    let mut by = BTreeMap::new();
    for d in docs {
        if let Some(name) = d["kubernetes"]["event"]["metadata"]["name"].as_str() {
            *by.entry(name.to_string()).or_insert(0) += 1;
        }
    }
    by
}

/// The number of a `tick-N` Event (see `access::create_ticks`).
fn tick(name: &str) -> Option<usize> {
    name.strip_prefix("tick-")?.parse().ok()
}

/// What the index holds of the `tick-N` Events, judged by
/// [`each_tick_once`].
#[derive(Debug)]
pub struct Ticks {
    /// Documents in the index.
    pub documents: usize,
    /// Distinct Events indexed.
    pub events: usize,
    /// The first tick indexed: the first leader starts from the state it
    /// finds, so earlier ones are not expected.
    pub from: usize,
}

/// Waits (up to `within`) until every Event from the first `tick-N`
/// indexed up to `created` is in the index, then checks that each is there
/// exactly once, in one document.
pub fn each_tick_once(sink: &TestSink, created: usize, within: Duration) -> Result<Ticks> {
    let first_tick =
        |by: &BTreeMap<String, usize>| by.keys().filter_map(|k| tick(k)).min().unwrap_or(0);
    let docs = wait_docs(
        sink,
        EVENTS_INDEX,
        &["kubernetes.event.metadata.name"],
        within,
        "every Event indexed",
        |d| {
            let by = event_copies(d);
            (first_tick(&by)..created).all(|k| by.contains_key(&format!("tick-{k}")))
        },
    )?;
    let by = event_copies(&docs);
    let from = first_tick(&by);
    let twice: Vec<(&String, &usize)> = by.iter().filter(|(_, n)| **n > 1).collect();
    if !twice.is_empty() {
        bail!("indexed more than once: {twice:?}");
    }
    if by.len() != created - from {
        bail!(
            "{} Events indexed from tick-{from}, {} created since",
            by.len(),
            created - from
        );
    }
    if docs.len() != by.len() {
        bail!("{} documents for {} Events", docs.len(), by.len());
    }
    Ok(Ticks {
        documents: docs.len(),
        events: by.len(),
        from,
    })
}

/// The numbers in the `message` of each document (lines printed by a
/// counting command), in index order.
pub fn numbers(docs: &[Value]) -> Vec<u64> {
    docs.iter()
        .filter_map(|d| d["message"].as_str()?.trim().parse().ok())
        .collect()
}

/// The resident set size of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS for {pid}"))
}

/// Every complete document of a `file` output called `events` in `dir`
/// (none before the file exists).
pub fn file_docs(dir: &std::path::Path) -> Result<Vec<Value>> {
    let Ok(text) = std::fs::read_to_string(dir.join("events.ndjson")) else {
        return Ok(Vec::new());
    };
    super::complete_lines(&text)
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}
