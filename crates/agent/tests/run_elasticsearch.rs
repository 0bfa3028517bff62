//! The `elasticsearch` output against real servers (OpenSearch 2.19.6 and
//! Elasticsearch 7.17.29 from Maven Central), judged from the indexed
//! documents: across SIGTERM and SIGKILL handovers of a leader-gated
//! `kubernetes/events` input every Event is in the index exactly once (a
//! replay after the crash carries the same `_id` and is dropped by the
//! server), and a document the index cannot map is dropped and counted
//! while the others are delivered (through the second of two hosts, the
//! first refusing connections).

mod agents;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agents::access::{create_ticks, grant_events};
use agents::cluster::Cluster;
use agents::docs::{EVENTS_INDEX, each_tick_once, event_copies, sources, wait_docs};
use agents::*;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Event;
use kube::api::Api;
use leasehold_testkit::ControlPlane;
use leasehold_testkit::sinks::{SinkKind, TestSink};

/// The test policy with an `es` output to `url` and a gated events input
/// writing to it.
fn es_policy(url: &str) -> String {
    policy(
        "run-lease",
        "  - id: events\n    type: kubernetes/events\n    use_output: es\n    condition: ${kubernetes_leaderelection.leader} == true\n    namespaces: ['${env.POD_NAMESPACE}']\n",
    )
    .replace(
        "outputs:\n",
        &format!(
            "outputs:\n  es:\n    type: elasticsearch\n    hosts: ['{url}']\n    bulk_max_size: 100\n    backoff: {{init: 100ms, max: 1s}}\n"
        ),
    )
}

/// Waits until the index holds `more` Events beyond `before`.
fn wait_shipped(sink: &TestSink, before: usize, more: usize, what: &str) -> Result<usize> {
    let docs = wait_docs(
        sink,
        EVENTS_INDEX,
        &["kubernetes.event.metadata.name"],
        Duration::from_secs(30),
        what,
        |d| event_copies(d).len() >= before + more,
    )?;
    Ok(event_copies(&docs).len())
}

async fn once_across_handovers(kind: SinkKind, prefix: &str) -> Result<()> {
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(kind, sink_dir.path())?;
    let mut c = Cluster::start(plane, prefix, 3, Some(es_policy(sink.url()))).await?;
    grant_events(plane, c.ns.name()).await?;
    let api: Api<Event> = Api::namespaced(plane.admin_client().await?, c.ns.name());
    let stop = Arc::new(AtomicBool::new(false));
    let ticks = tokio::spawn(create_ticks(api, c.ns.name().to_string(), stop.clone()));
    let t0 = now_us();

    let first = c.current_leader()?;
    let n = wait_shipped(&sink, 0, 20, "the first leader ships")?;
    let i = Cluster::index(&first);
    let mut a = c.agents[i].take().expect("leader running");
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));

    let second = c.leader_after(now_us(), &[&first])?;
    let n = wait_shipped(&sink, n, 20, "the second leader ships")?;
    let i = Cluster::index(&second);
    let mut a = c.agents[i].take().expect("leader running");
    a.signal(libc::SIGKILL);
    a.wait_exit(Duration::from_secs(15))?;

    let third = c.leader_after(now_us(), &[&first, &second])?;
    wait_shipped(&sink, n, 20, "the third leader ships")?;
    stop.store(true, Ordering::Relaxed);
    let created = ticks.await??;

    // From the first Event shipped on (the first leader starts from the
    // state it finds), every Event created is in the index exactly once.
    let t = each_tick_once(&sink, created, Duration::from_secs(30))?;
    println!(
        "{kind:?}: {created} Events created, {} indexed from tick-{}, leaders {first} (SIGTERM), {second} (SIGKILL), {third}; {} documents",
        t.events, t.from, t.documents
    );
    let metrics = c.agent(&third).get("/metrics")?.1;
    println!(
        "{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("leasehold_output_events_") && l.contains("output=\"es\""))
            .collect::<Vec<_>>()
            .join("\n")
    );
    c.check(t0)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opensearch_holds_each_event_once_across_sigterm_and_sigkill_handovers() -> Result<()> {
    once_across_handovers(SinkKind::OpenSearch, "run-es-os").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elasticsearch_7_holds_each_event_once_across_sigterm_and_sigkill_handovers() -> Result<()>
{
    once_across_handovers(SinkKind::Elasticsearch7, "run-es-es7").await
}

/// A loopback URL where nothing listens: a port taken and released.
fn dead_host() -> Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = l.local_addr()?.port();
    drop(l);
    Ok(format!("http://127.0.0.1:{port}"))
}

/// A policy whose `exec` input `id` runs the shell `script`, each line a
/// JSON document of data set `dataset`, into an `elasticsearch` output
/// to `hosts` (a YAML list) with `output` (indented keys) added.
fn json_lines_policy(hosts: &str, output: &str, id: &str, dataset: &str, script: &str) -> String {
    format!(
        "outputs:\n  default:\n    type: elasticsearch\n    hosts: {hosts}\n{output}    backoff: {{init: 100ms, max: 1s}}\ninputs:\n  - id: {id}\n    type: exec\n    events: json\n    data_stream: {{dataset: {dataset}}}\n    command: [sh, -c, '{}']\n",
        script.replace('\'', "''")
    )
}

/// Waits until `index` holds `count` documents (reading `fields`) and
/// returns their `n`, sorted.
fn wait_numbered(
    sink: &TestSink,
    index: &str,
    fields: &[&str],
    count: usize,
    within: Duration,
) -> Result<Vec<u64>> {
    let docs = wait_docs(
        sink,
        index,
        fields,
        within,
        &format!("{count} documents indexed"),
        |d| d.len() >= count,
    )?;
    let mut ns: Vec<u64> = docs.iter().filter_map(|d| d["n"].as_u64()).collect();
    ns.sort_unstable();
    Ok(ns)
}

/// A counter in `/metrics` text, 0 when absent.
fn counter(metrics: &str, line_start: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_the_index_cannot_map_is_dropped_and_counted_and_the_rest_delivered()
-> Result<()> {
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("policy.yml");
    // 10 documents with a number in `v`, then one with an object there,
    // then 10 more numbers: the object cannot be mapped. The first host
    // is dead: requests fail over to the second.
    let script = "for i in 1 2 3 4 5 6 7 8 9 10; do echo \"{\\\"n\\\": $i, \\\"v\\\": $i}\"; done; echo '{\"n\": 11, \"v\": {\"a\": 1}}'; for i in 12 13 14 15 16 17 18 19 20 21; do echo \"{\\\"n\\\": $i, \\\"v\\\": $i}\"; done; exec sleep 600";
    let hosts = format!("['{}', '{}']", dead_host()?, sink.url());
    std::fs::write(
        &policy,
        json_lines_policy(&hosts, "", "mixed", "conflict", script),
    )?;
    let mut a = AgentProc::start_alone(plane, &policy, dir.path())?;
    let ns = wait_numbered(
        &sink,
        "logs-conflict-default",
        &["n", "v"],
        20,
        Duration::from_secs(30),
    )?;
    let want: Vec<u64> = (1..=10).chain(12..=21).collect();
    assert_eq!(ns, want, "every mappable document, once");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let m = a.get("/metrics")?.1;
        if counter(
            &m,
            "leasehold_output_events_dropped_total{output=\"default\"}",
        ) >= 1
            || std::time::Instant::now() > deadline
        {
            break m;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        counter(
            &metrics,
            "leasehold_output_events_dropped_total{output=\"default\"}"
        ),
        1,
        "{metrics}"
    );
    assert_eq!(
        counter(
            &metrics,
            "leasehold_output_events_written_total{output=\"default\"}"
        ),
        20
    );
    // Every event the input queued ended once, by its acknowledgement.
    let ended = |outcome: &str| {
        counter(
            &metrics,
            &format!("leasehold_events_ended_total{{input=\"mixed\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(
        counter(&metrics, "leasehold_events_produced_total{input=\"mixed\"}"),
        21,
        "{metrics}"
    );
    assert_eq!(
        (ended("delivered"), ended("dropped"), ended("discarded")),
        (20, 1, 0),
        "{metrics}"
    );
    let log = a.wait_log("refused for good", Duration::from_secs(5))?;
    assert!(log.contains("mapper_parsing_exception"), "{log}");
    let status = a.status()?;
    let out = &status["outputs"][0];
    assert_eq!(out["state"], "ok", "{status}");
    // The drop is in /status too: how many, why, when.
    assert_eq!(out["events_dropped"], 1, "{status}");
    assert!(
        out["last_drop_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("HTTP 400: ") && r.contains("mapper_parsing_exception")),
        "{status}"
    );
    assert!(out["last_drop_at"].is_string(), "{status}");
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    if sources(&sink, "logs-conflict-default", &["n"])?.len() != 20 {
        bail!("more documents arrived after the first 20");
    }
    Ok(())
}

/// A server whose `http.max_content_length` one document exceeds answers
/// 413 to any request holding it, also to that document alone: it is
/// dropped for good, counted and reported with its reason (never its
/// content), and every other document, before and after it, is delivered
/// instead of the output retrying it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_larger_than_the_server_accepts_is_dropped_and_the_rest_delivered() -> Result<()>
{
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start_with(
        SinkKind::OpenSearch,
        sink_dir.path(),
        &[("http.max_content_length", "16kb")],
    )?;
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("policy.yml");
    // 30 small documents, one of 40 KB, 30 small ones.
    let script = "i=1; while [ $i -le 30 ]; do echo \"{\\\"n\\\": $i}\"; i=$((i+1)); done; printf '{\"n\": 31, \"big\": \"%s\"}\\n' \"$(head -c 40000 /dev/zero | tr '\\0' Z)\"; i=32; while [ $i -le 61 ]; do echo \"{\\\"n\\\": $i}\"; i=$((i+1)); done; exec sleep 600";
    let hosts = format!("['{}']", sink.url());
    let output = "    compression_level: 0\n    bulk_max_size: 50\n";
    std::fs::write(
        &policy,
        json_lines_policy(&hosts, output, "sizes", "sizes", script),
    )?;
    let mut a = AgentProc::start_alone(plane, &policy, dir.path())?;
    let ns = wait_numbered(
        &sink,
        "logs-sizes-default",
        &["n"],
        60,
        Duration::from_secs(60),
    )?;
    let want: Vec<u64> = (1..=30).chain(32..=61).collect();
    assert_eq!(ns, want, "every document the server accepts, once");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = a.status()?;
        if status["outputs"][0]["events_dropped"] == 1 || std::time::Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = &status["outputs"][0];
    assert_eq!(out["events_dropped"], 1, "{status}");
    assert_eq!(out["state"], "ok", "{status}");
    let reason = out["last_drop_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("HTTP 413: ") && reason.contains("larger than the server accepts"),
        "{status}"
    );
    let metrics = a.get("/metrics")?.1;
    assert_eq!(
        counter(
            &metrics,
            "leasehold_output_events_dropped_total{output=\"default\"}"
        ),
        1,
        "{metrics}"
    );
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    let log = a.log();
    assert!(
        !log.contains("ZZZZZZZZZZZZZZZZ"),
        "the document's content is logged:\n{log}"
    );
    Ok(())
}

/// The password of the URLs in `credentials_in_host_urls_are_sent_and_never_shown`.
const URL_PASSWORD: &str = "s3cr3t-pw";

/// `url` with `user:s3cr3t-pw@` after its scheme.
fn with_userinfo(url: &str) -> String {
    url.replacen("://", &format!("://user:{URL_PASSWORD}@"), 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_host_urls_are_sent_and_never_shown() -> Result<()> {
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("policy.yml");
    // `default` reaches OpenSearch (security off: it accepts the Basic
    // header); `dead` points where nothing listens, so its writes fail and
    // are retried, logged and shown in /status.
    let dead = dead_host()?;
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default:\n    type: elasticsearch\n    hosts: ['{}']\n    backoff: {{init: 100ms, max: 1s}}\n  dead:\n    type: elasticsearch\n    hosts: ['{}']\n    backoff: {{init: 100ms, max: 1s}}\ninputs:\n  - id: ok\n    type: exec\n    events: json\n    data_stream: {{dataset: urlcreds}}\n    command: [sh, -c, 'for i in 1 2 3; do echo \"{{\\\"n\\\": $i}}\"; done; exec sleep 600']\n  - id: stuck\n    type: exec\n    use_output: dead\n    command: [sh, -c, 'echo one; exec sleep 600']\n",
            with_userinfo(sink.url()),
            with_userinfo(&dead),
        ),
    )?;
    let a = AgentProc::start_alone(plane, &policy, dir.path())?;
    let docs = wait_docs(
        &sink,
        "logs-urlcreds-default",
        &["n"],
        Duration::from_secs(30),
        "3 documents through the URL with credentials",
        |d| d.len() >= 3,
    )?;
    assert_eq!(docs.len(), 3);

    let retry = a.wait_log("output write failed; retrying", Duration::from_secs(15))?;
    assert!(
        retry.contains(&dead),
        "the retry line names the host: {retry}"
    );
    // The health is set right after the retry line is logged.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = a.status()?;
        let failing = status["outputs"]
            .as_array()
            .and_then(|o| o.iter().find(|o| o["name"] == "dead"))
            .is_some_and(|o| o["state"] == "failing" && o["last_error"].is_string());
        if failing || std::time::Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let dead_out = status["outputs"]
        .as_array()
        .and_then(|o| o.iter().find(|o| o["name"] == "dead"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(dead_out["state"], "failing", "{status:#}");
    let last_error = dead_out["last_error"].as_str().unwrap_or_default();
    assert!(last_error.contains(&dead), "{status:#}");

    let cli = std::process::Command::new(binary())
        .args(["status", "--agent", &format!("http://{}", a.http)])
        .output()?;
    let cli_text = printed(&cli);
    assert!(
        cli_text.contains("dead") && cli_text.contains("failing"),
        "{cli_text}"
    );

    let log = a.log();
    for (what, text) in [
        ("/status", status.to_string()),
        ("leasehold status --agent", cli_text),
        ("the log", log),
    ] {
        assert!(
            !text.contains(URL_PASSWORD),
            "the password in {what}:\n{text}"
        );
        assert!(!text.contains("user:"), "the userinfo in {what}:\n{text}");
    }
    Ok(())
}

/// Processors as Elastic's manifest writes them, through a real OpenSearch:
/// the audit-log stream's `ndjson` parser into `kubernetes_audit`, `rename`
/// to `kubernetes.audit`, a JavaScript `script` that de-dots the
/// annotations (with its load-time `test()`), a `drop_event` with a
/// condition, and the input's `add_fields` after the stream's processors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elastics_processors_shape_what_reaches_the_index() -> Result<()> {
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("audit.log");
    let mut lines = String::new();
    for i in 1..=10 {
        let verb = if i % 2 == 0 { "watch" } else { "get" };
        lines.push_str(&format!(
            "{{\"auditID\": \"a{i}\", \"verb\": \"{verb}\", \"annotations\": {{\"authorization.k8s.io/decision\": \"allow\"}}}}\n"
        ));
    }
    std::fs::write(&log, lines)?;
    let policy = dir.path().join("policy.yml");
    std::fs::write(
        &policy,
        format!(
            r#"outputs:
  default:
    type: elasticsearch
    hosts: ['{url}']
    backoff: {{init: 100ms, max: 1s}}
inputs:
  - id: audit-log
    type: filestream
    processors:
      - add_fields: {{target: orchestrator.cluster, fields: {{name: test-cluster}}}}
    streams:
      - data_stream: {{dataset: kubernetes.audit_logs, type: logs}}
        parsers:
          - ndjson: {{add_error_key: true, target: kubernetes_audit}}
        paths: ['{log}']
        processors:
          - rename:
              fields:
                - {{from: kubernetes_audit, to: kubernetes.audit}}
          - script:
              id: dedot_annotations
              lang: javascript
              source: |
                function process(event) {{
                  var audit = event.Get("kubernetes.audit");
                  for (var key in audit["annotations"]) {{
                    event.Rename("kubernetes.audit.annotations." + key,
                                 "kubernetes.audit.annotations." + key.replace(/\./g, "_"));
                  }}
                  return event;
                }}
                function test() {{
                  var e = process(new Event({{"kubernetes": {{"audit": {{"annotations": {{"a.b": "x"}}}}}}}}));
                  if (e.Get("kubernetes.audit.annotations.a_b") !== "x") {{ throw "not de-dotted"; }}
                }}
          - drop_event.when.equals:
              kubernetes.audit.verb: watch
"#,
            url = sink.url(),
            log = log.display()
        ),
    )?;
    let check = std::process::Command::new(agents::binary())
        .args(["check", "-c"])
        .arg(&policy)
        .output()?;
    let said = String::from_utf8_lossy(&check.stderr).to_string();
    assert_eq!(check.status.code(), Some(0), "{said}");
    assert!(!said.contains("warning"), "{said}");
    let mut agent = AgentProc::start_alone(plane, &policy, dir.path())?;
    let index = "logs-kubernetes.audit_logs-default";
    let docs = wait_docs(
        &sink,
        index,
        &["kubernetes", "orchestrator", "kubernetes_audit"],
        Duration::from_secs(30),
        "the kept audit events",
        |d| d.len() >= 5,
    )
    .with_context(|| format!("agent log:\n{}", agent.log()))?;
    let mut ids: Vec<String> = docs
        .iter()
        .filter_map(|d| {
            d["kubernetes"]["audit"]["auditID"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        ["a1", "a3", "a5", "a7", "a9"],
        "watch events dropped: {docs:?}"
    );
    for d in &docs {
        assert!(d.get("kubernetes_audit").is_none(), "renamed: {d}");
        assert_eq!(d["kubernetes"]["audit"]["verb"], "get", "{d}");
        assert_eq!(d["orchestrator"]["cluster"]["name"], "test-cluster", "{d}");
        assert_eq!(
            d["kubernetes"]["audit"]["annotations"],
            serde_json::json!({"authorization_k8s_io/decision": "allow"}),
            "de-dotted by the script: {d}"
        );
    }
    // The dropped events are handled like delivered ones: the registry
    // moved past them (the last line is a dropped one), so after a
    // shutdown and a start nothing is read again.
    agent.signal(libc::SIGTERM);
    assert_eq!(agent.wait_exit(Duration::from_secs(15))?, Some(0));
    let again = AgentProc::start_alone(plane, &policy, dir.path())?;
    again.wait_log("input started", Duration::from_secs(10))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if sources(&sink, index, &["kubernetes"])?.len() != 5 {
            bail!("events shipped again after a restart");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(())
}

/// `agent.monitoring` as Elastic's manifest writes it ships the agent's own
/// log records to `logs-elastic_agent-default` and its process figures to
/// `metrics-elastic_agent.elastic_agent-default` in a real OpenSearch, with
/// the fields Elastic's `elastic_agent` dashboards read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_monitoring_ships_the_agents_logs_and_metrics_to_elastics_data_streams() -> Result<()>
{
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("agent.yml");
    std::fs::write(
        &policy,
        format!(
            r#"outputs:
  default:
    type: elasticsearch
    hosts: ['{url}']
agent:
  monitoring:
    enabled: true
    use_output: default
    logs: true
    metrics: true
    metrics_period: 1s
inputs:
  - id: ticker
    type: exec
    command: [sh, -c, 'for i in $(seq 1 60); do echo tick; sleep 1; done; sleep 600']
"#,
            url = sink.url()
        ),
    )?;
    let mut agent = AgentProc::start_alone(plane, &policy, dir.path())?;
    let logs = wait_docs(
        &sink,
        "logs-elastic_agent-default",
        &[
            "message",
            "log",
            "event",
            "elastic_agent",
            "agent",
            "data_stream",
        ],
        Duration::from_secs(30),
        "the agent's log record that its input started",
        |d| {
            d.iter().any(|d| {
                d["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("input started"))
            })
        },
    )?;
    let started = logs
        .iter()
        .find(|d| {
            d["message"]
                .as_str()
                .is_some_and(|m| m.contains("input started"))
        })
        .expect("found above");
    assert_eq!(started["log"]["level"], "info", "{started}");
    assert!(
        started["log"]["logger"]
            .as_str()
            .is_some_and(|l| l.starts_with("leasehold")),
        "{started}"
    );
    assert_eq!(started["event"]["dataset"], "elastic_agent", "{started}");
    assert_eq!(
        started["data_stream"],
        serde_json::json!({"type": "logs", "dataset": "elastic_agent", "namespace": "default"})
    );
    assert_eq!(
        started["elastic_agent"]["id"], started["agent"]["id"],
        "{started}"
    );
    assert_eq!(
        started["elastic_agent"]["process"], "elastic-agent",
        "{started}"
    );
    let metrics = wait_docs(
        &sink,
        "metrics-elastic_agent.elastic_agent-default",
        &["system", "event", "elastic_agent", "agent", "data_stream"],
        Duration::from_secs(30),
        "two documents of the agent's process figures, a period apart",
        |d| d.len() >= 2,
    )?;
    for m in &metrics {
        let p = &m["system"]["process"];
        assert!(p["memory"]["size"].as_u64().unwrap_or(0) > 1 << 20, "{m}");
        assert!(p["cpu"]["total"]["value"].is_u64(), "{m}");
        assert!(p["fd"]["open"].as_u64().unwrap_or(0) > 0, "{m}");
        assert_eq!(m["event"]["dataset"], "elastic_agent.elastic_agent", "{m}");
        assert_eq!(
            m["elastic_agent"]["version"],
            env!("CARGO_PKG_VERSION"),
            "{m}"
        );
        assert_eq!(m["elastic_agent"]["snapshot"], false, "{m}");
        assert_eq!(m["data_stream"]["type"], "metrics", "{m}");
    }
    // The agent's own input data goes where it did before.
    wait_docs(
        &sink,
        "logs-generic-default",
        &["message"],
        Duration::from_secs(30),
        "the ticker's events",
        |d| !d.is_empty(),
    )?;
    agent.signal(libc::SIGTERM);
    assert_eq!(agent.wait_exit(Duration::from_secs(15))?, Some(0));
    Ok(())
}
