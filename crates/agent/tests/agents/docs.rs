//! Reading back what agents shipped to a real OpenSearch or Elasticsearch:
//! the documents themselves are the evidence (their own fields), never
//! what an agent reports.

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
