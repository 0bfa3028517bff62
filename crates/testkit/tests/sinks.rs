//! The test sinks themselves, against the real servers: each starts, takes
//! what it is sent, stops, and comes back on the same address with what it
//! had.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use leasehold_testkit::sinks::{SinkKind, TestSink};
use serde_json::{Value, json};

const INDEX: &str = "sinks-check";

/// `host:port` of an `http://host:port` URL.
fn authority(url: &str) -> &str {
    url.trim_start_matches("http://")
}

fn accepts(addr: &str) -> bool {
    TcpStream::connect(addr).is_ok()
}

/// The `status` of each item of a `_bulk` answer.
fn item_statuses(answer: &Value) -> Vec<u64> {
    answer["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["create"]["status"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

/// A search of an index whose primary shard has not started (as just
/// after a first write creates it, or while it recovers after a restart)
/// waits for the shard instead of failing. The shard is held unassigned
/// until the server shows the search waiting for the index's health, then
/// let go. (A refresh of such an index blocks on the server side; `count`
/// and `search_ids` refresh first, then read the same way as `search`.)
fn a_search_waits_for_shards_to_start(sink: &TestSink) -> Result<()> {
    let index = format!("{INDEX}-held");
    sink.put_json(
        &format!("/{index}?wait_for_active_shards=0"),
        &json!({"settings": {"index.routing.allocation.enable": "none"}}),
    )?;
    let query = json!({"query": {"match_all": {}}});
    let (status, answer) = sink.request(
        "POST",
        &format!("/{index}/_search"),
        Some(query.to_string().as_bytes()),
    )?;
    ensure!(status == 503, "{index} is searchable while held: {answer}");
    let answer = std::thread::scope(|s| -> Result<Value> {
        let reader = s.spawn(|| sink.search(&index, &query));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !reader.is_finished() && !health_waited_on(sink)? {
            ensure!(Instant::now() < deadline, "no wait for health seen");
            std::thread::sleep(Duration::from_millis(20));
        }
        sink.put_json(
            &format!("/{index}/_settings"),
            &json!({"index.routing.allocation.enable": "all"}),
        )?;
        reader
            .join()
            .map_err(|_| anyhow::anyhow!("the search panicked"))?
    })
    .with_context(|| format!("a search of {index} while its shard was held"))?;
    assert_eq!(answer["hits"]["hits"], json!([]), "{answer}");
    Ok(())
}

/// Whether the server is running a cluster health request (the wait of a
/// read for shards).
fn health_waited_on(sink: &TestSink) -> Result<bool> {
    let tasks = sink.get_json("/_tasks?actions=cluster:monitor/health")?;
    Ok(tasks["nodes"].as_object().is_some_and(|nodes| {
        nodes
            .values()
            .any(|n| n["tasks"].as_object().is_some_and(|t| !t.is_empty()))
    }))
}

fn documents_survive_a_restart(kind: SinkKind, distribution: &str, number: &str) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut sink = TestSink::start(kind, dir.path())?;
    assert_eq!(
        sink.version()?,
        (distribution.to_owned(), number.to_owned())
    );

    let fixed =
        format!("{{\"create\":{{\"_index\":\"{INDEX}\",\"_id\":\"fixed-1\"}}}}\n{{\"n\":1}}\n");
    let auto = format!("{{\"create\":{{\"_index\":\"{INDEX}\"}}}}\n{{\"n\":2}}\n");
    let (status, answer) = sink.bulk(&format!("{fixed}{auto}"))?;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["errors"], Value::Bool(false), "{answer}");
    assert_eq!(item_statuses(&answer), [201, 201], "{answer}");

    // The same _id again: refused as a conflict, nothing added.
    let (status, answer) = sink.bulk(&fixed)?;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["errors"], Value::Bool(true), "{answer}");
    assert_eq!(item_statuses(&answer), [409], "{answer}");

    assert_eq!(sink.count(INDEX)?, 2);
    let ids = sink.search_ids(INDEX)?;
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.iter().any(|id| id == "fixed-1"), "{ids:?}");
    assert_eq!(sink.count("nothing-matches-*")?, 0);
    assert!(sink.search_ids("nothing-matches-*")?.is_empty());
    a_search_waits_for_shards_to_start(&sink)?;

    let url = sink.url().to_owned();
    let pid = sink.pid();
    sink.stop()?;
    assert!(!sink.is_running());
    assert!(!accepts(authority(&url)), "{url} still accepts after stop");

    sink.start_again()?;
    assert_eq!(sink.url(), url, "not back on the same address");
    assert_ne!(sink.pid(), pid);
    assert_eq!(sink.count(INDEX)?, 2, "documents lost across the restart");
    let mut again = sink.search_ids(INDEX)?;
    again.sort();
    let mut before = ids;
    before.sort();
    assert_eq!(again, before);
    sink.stop()?;
    Ok(())
}

#[test]
fn opensearch_keeps_documents_across_a_restart() -> Result<()> {
    documents_survive_a_restart(SinkKind::OpenSearch, "opensearch", "2.19.6")
}

#[test]
fn elasticsearch_7_keeps_documents_across_a_restart() -> Result<()> {
    documents_survive_a_restart(SinkKind::Elasticsearch7, "elasticsearch", "7.17.29")
}

/// Lines of the Collector's output, waiting up to 10 s for `n` of them.
fn wait_lines(sink: &TestSink, n: usize) -> Result<Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = sink.read_output()?;
        if lines.len() >= n || Instant::now() > deadline {
            return Ok(lines);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn send_log(sink: &TestSink, body: &str) -> Result<()> {
    let request = format!(
        "{{\"resourceLogs\":[{{\"resource\":{{}},\"scopeLogs\":[{{\"logRecords\":[{{\"body\":{{\"stringValue\":\"{body}\"}}}}]}}]}}]}}"
    );
    let (status, answer) = sink.request("POST", "/v1/logs", Some(request.as_bytes()))?;
    ensure!(status == 200, "POST /v1/logs: HTTP {status}: {answer}");
    Ok(())
}

fn bodies(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .flat_map(|l| l["resourceLogs"].as_array().cloned().unwrap_or_default())
        .flat_map(|r| r["scopeLogs"].as_array().cloned().unwrap_or_default())
        .flat_map(|s| s["logRecords"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["body"]["stringValue"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn otel_collector_listens_writes_and_comes_back_on_the_same_ports() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut sink = TestSink::start(SinkKind::OtelCollector, dir.path())?;
    let grpc = sink.grpc_endpoint().to_owned();
    let http = sink.http_endpoint().to_owned();
    assert!(grpc.starts_with("127.0.0.1:"), "{grpc}");
    assert!(http.starts_with("http://127.0.0.1:"), "{http}");
    assert!(accepts(&grpc), "OTLP/gRPC at {grpc} refuses");
    assert!(accepts(authority(&http)), "OTLP/HTTP at {http} refuses");
    assert_eq!(
        sink.output_path(),
        dir.path().join("otelcol").join("out.jsonl")
    );

    send_log(&sink, "first")?;
    let lines = wait_lines(&sink, 1)?;
    assert_eq!(bodies(&lines), ["first"], "{lines:?}");

    sink.stop()?;
    assert!(!accepts(&grpc), "{grpc} still accepts after stop");
    assert!(
        !accepts(authority(&http)),
        "{http} still accepts after stop"
    );

    sink.start_again()?;
    assert_eq!(sink.grpc_endpoint(), grpc);
    assert_eq!(sink.http_endpoint(), http);
    assert!(accepts(&grpc) && accepts(authority(&http)));
    send_log(&sink, "second")?;
    let lines = wait_lines(&sink, 2)?;
    assert_eq!(
        bodies(&lines),
        ["first", "second"],
        "the output is appended to across a restart: {lines:?}"
    );
    sink.stop().context("stopping the collector")?;
    Ok(())
}
