//! Pipeline integrity against real servers: what an input produced is
//! delivered, or read again by whoever runs the input next, and never
//! lost to a sink that refuses for a while, a handover while the sink is
//! down, or node-local documents of several nodes sharing ids; and a
//! stepped-down leader's queued data never reaches the sink.

mod agents;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agents::access::{create_ticks, grant_events};
use agents::cluster::Cluster;
use agents::docs::{EVENTS_INDEX, each_tick_once, event_copies, sources, wait_docs};
use agents::*;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Event;
use kube::api::Api;
use leasehold_testkit::ControlPlane;
use leasehold_testkit::sinks::{SinkKind, TestSink};
use serde_json::{Value, json};

/// A counter or gauge in `/metrics` text, 0 when absent.
fn metric(metrics: &str, line_start: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Polls `/metrics` of `a` until `ok` holds for the value of `line_start`
/// (bounded); returns the last text.
fn wait_metric(
    a: &AgentProc,
    line_start: &str,
    within: Duration,
    ok: impl Fn(u64) -> bool,
) -> Result<String> {
    let deadline = Instant::now() + within;
    loop {
        let text = a.get("/metrics")?.1;
        if ok(metric(&text, line_start)) {
            return Ok(text);
        }
        if Instant::now() > deadline {
            bail!(
                "{}: {line_start} never matched within {within:?}:\n{text}",
                a.name
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The test cluster's policy with an `es` output to `url` (short
/// backoff, two writer lanes) and a gated `kubernetes/events` input
/// writing to it.
fn events_policy(url: &str) -> String {
    policy(
        "run-lease",
        "  - id: events\n    type: kubernetes/events\n    use_output: es\n    condition: ${kubernetes_leaderelection.leader} == true\n    namespaces: ['${env.POD_NAMESPACE}']\n",
    )
    .replace(
        "outputs:\n",
        &format!(
            "outputs:\n  es:\n    type: elasticsearch\n    hosts: ['{url}']\n    bulk_max_size: 100\n    worker: 2\n    timeout: 2s\n    backoff: {{init: 100ms, max: 500ms}}\n"
        ),
    )
}

/// The sink goes down while the leader ships Events; the leader is
/// SIGKILLed with Events queued, the next one SIGTERMed with Events
/// queued, then the sink comes back: every Event created from the first
/// one shipped on is in the index exactly once. Before, the checkpoint
/// moved when an Event was queued, and the successors resumed after
/// Events that never reached the sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_queued_while_the_sink_is_down_survive_a_sigkill_and_a_sigterm_handover()
-> Result<()> {
    sink_down_across_handovers(false, "pipe-down").await
}

/// As above with a disk queue: what the stopped leaders stored is not
/// acknowledged on storage (the Lease's checkpoint is the cluster's, the
/// disk is the node's), so their successors resume before it; started
/// again on the same disk, they discard it (its term ended with the run
/// that stored it) instead of sending it after the successors' data. The
/// index holds each Event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stored_in_disk_queues_while_the_sink_is_down_arrive_once_after_handovers()
-> Result<()> {
    sink_down_across_handovers(true, "pipe-disk").await
}

async fn sink_down_across_handovers(disk: bool, prefix: &str) -> Result<()> {
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let mut sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let mut text = events_policy(sink.url());
    if disk {
        text = text.replace(
            "    timeout: 2s\n",
            "    timeout: 2s\n    queue.disk.path: ${env.OUT_DIR}/queue\n",
        );
    }
    let mut c = Cluster::start(plane, prefix, 3, Some(text)).await?;
    grant_events(plane, c.ns.name()).await?;
    let api: Api<Event> = Api::namespaced(plane.admin_client().await?, c.ns.name());
    let stop = Arc::new(AtomicBool::new(false));
    let ticks = tokio::spawn(create_ticks(api, c.ns.name().to_string(), stop.clone()));
    let t0 = now_us();
    let produced = "leasehold_events_produced_total{input=\"events\"}";

    let first = c.current_leader()?;
    wait_docs(
        &sink,
        EVENTS_INDEX,
        &["kubernetes.event.metadata.name"],
        Duration::from_secs(30),
        "the first leader ships",
        |d| event_copies(d).len() >= 10,
    )?;
    sink.stop()?;
    // The leader goes on queueing Events the sink cannot take.
    let before = metric(&c.agent(&first).get("/metrics")?.1, produced);
    wait_metric(c.agent(&first), produced, Duration::from_secs(15), |n| {
        n >= before + 10
    })?;
    let mut a = c.agents[Cluster::index(&first)].take().expect("leader");
    a.signal(libc::SIGKILL);
    a.wait_exit(Duration::from_secs(15))?;

    let second = c.leader_after(now_us(), &[&first])?;
    wait_metric(c.agent(&second), produced, Duration::from_secs(15), |n| {
        n >= 10
    })?;
    let mut a = c.agents[Cluster::index(&second)].take().expect("leader");
    a.signal(libc::SIGTERM);
    // The outputs cannot drain: the shutdown timeout (10 s) ends it.
    assert_eq!(a.wait_exit(Duration::from_secs(20))?, Some(0));
    let log = a.log();
    let left = if disk {
        "stay in the disk queue"
    } else {
        "could not be written before the shutdown timeout"
    };
    assert!(log.contains(left), "{log}");

    let third = c.leader_after(now_us(), &[&first, &second])?;
    sink.start_again()?;
    if disk {
        // The stopped agents start again on their disks and discard the
        // gated Events they stored: their terms are over.
        for name in [&first, &second] {
            let i = Cluster::index(name);
            c.agents[i] = Some(c.spawn(i as u32 + 1)?);
        }
        for name in [&first, &second] {
            wait_metric(
                c.agent(name),
                "leasehold_output_events_term_ended_total{output=\"es\"}",
                Duration::from_secs(30),
                |n| n >= 1,
            )?;
        }
    }
    // Some more Events after the sink is back, then stop creating.
    let third_agent = c.agent(&third);
    let shipped = metric(
        &third_agent.get("/metrics")?.1,
        "leasehold_output_events_written_total{output=\"es\"}",
    );
    wait_metric(
        third_agent,
        "leasehold_output_events_written_total{output=\"es\"}",
        Duration::from_secs(30),
        |n| n >= shipped + 20,
    )?;
    stop.store(true, Ordering::Relaxed);
    let created = ticks.await??;

    let t = each_tick_once(&sink, created, Duration::from_secs(60))?;
    println!(
        "{} queue: {created} Events created, {} indexed from tick-{}; leaders {first} (SIGKILL, sink down), {second} (SIGTERM, sink down), {third}; {} documents",
        if disk { "disk" } else { "memory" },
        t.events,
        t.from,
        t.documents
    );
    c.check(t0)?;
    Ok(())
}

/// The leader's gated documents are queued while the sink is down, then an
/// admin gives the Lease to another agent: the old leader steps down and
/// its queued documents are not sent; once the sink is back, no document
/// of the old term arrives after the new term's first. Before, the old
/// term's queue went out after the new leader had started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stepped_down_leaders_queued_documents_never_reach_the_sink() -> Result<()> {
    stepped_down_leader(false, "pipe-fence").await
}

/// As above with a disk queue: the documents the old term stored on disk
/// are discarded at its step-down as those in memory are. Before, they
/// were acknowledged when stored and sent once the sink was back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stepped_down_leaders_documents_in_a_disk_queue_never_reach_the_sink() -> Result<()> {
    stepped_down_leader(true, "pipe-fence-disk").await
}

async fn stepped_down_leader(disk: bool, prefix: &str) -> Result<()> {
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let mut sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    // A gated input with numbered, id-less documents into the sink.
    let script = "i=0; while :; do i=$((i+1)); echo \"{\\\"n\\\": $i}\"; sleep 0.05; done";
    let text = policy(
        "run-lease",
        &format!(
            "  - id: numbers\n    type: exec\n    events: json\n    use_output: es\n    data_stream: {{dataset: fenced}}\n    condition: ${{kubernetes_leaderelection.leader}} == true\n    command: [sh, -c, '{}']\n",
            script.replace('\'', "''")
        ),
    )
    .replace(
        "outputs:\n",
        &format!(
            // Three writer lanes (one with a disk queue, sending three
            // requests at a time) with small batches: several batches of
            // the old term are held, retrying, when it ends.
            "outputs:\n  es:\n    type: elasticsearch\n    hosts: ['{}']\n    worker: 3\n    bulk_max_size: 5\n    timeout: 2s\n    backoff: {{init: 100ms, max: 500ms}}\n{}",
            sink.url(),
            if disk {
                "    queue.disk.path: ${env.OUT_DIR}/queue\n"
            } else {
                ""
            }
        ),
    );
    let c = Cluster::start(plane, prefix, 3, Some(text)).await?;
    let t0 = now_us();
    let index = "logs-fenced-default";
    let first = c.current_leader()?;
    let first_docs = wait_docs(
        &sink,
        index,
        &["n", "leader.term"],
        Duration::from_secs(30),
        "first documents",
        |d| d.len() >= 5,
    )?;
    // The term of what reached the sink before it stopped.
    let old_term = first_docs
        .iter()
        .filter_map(|d| d["leader"]["term"].as_i64())
        .max()
        .context("the first term's documents")?;
    sink.stop()?;
    let stopped_at = now_us();
    let leader = c.agent(&first);
    let produced = "leasehold_events_produced_total{input=\"numbers\"}";
    let before = metric(&leader.get("/metrics")?.1, produced);
    wait_metric(leader, produced, Duration::from_secs(15), |n| {
        n >= before + 20
    })?;

    // Give the Lease to another agent, as an admin would.
    let other = if first == "agent-1" {
        "agent-2"
    } else {
        "agent-1"
    };
    c.lease.overwrite_holder(other).await?;
    let text = wait_metric(
        leader,
        "leasehold_output_events_term_ended_total{output=\"es\"}",
        Duration::from_secs(LEASE_S) + MARGIN,
        |n| n >= 20,
    )?;
    let discarded = metric(
        &text,
        "leasehold_output_events_term_ended_total{output=\"es\"}",
    );
    // The input's own count of its events discarded unsent agrees: every
    // one the output set aside ended through its acknowledgement.
    let input_discarded = metric(
        &text,
        "leasehold_events_ended_total{input=\"numbers\",outcome=\"discarded\"}",
    );
    assert!(
        input_discarded >= discarded,
        "input counted {input_discarded} discarded, output {discarded}: {text}"
    );
    // Whoever leads next (the first leader may win the new term too).
    let next = c.leader_after(now_us(), &[])?;
    sink.start_again()?;
    let docs = wait_docs(
        &sink,
        index,
        &["n", "agent.name", "leader.term", "@timestamp"],
        Duration::from_secs(30),
        "the next term's documents",
        |d| {
            d.iter()
                .filter(|x| x["leader"]["term"].as_i64() > Some(old_term))
                .count()
                >= 20
        },
    )?;
    let mut terms: BTreeMap<i64, (String, Vec<i64>)> = BTreeMap::new();
    for d in &docs {
        let term = d["leader"]["term"].as_i64().context("leader.term")?;
        let at = parse_ts(d["@timestamp"].as_str().context("@timestamp")?)?;
        let who = d["agent"]["name"].as_str().unwrap_or("").to_string();
        let e = terms.entry(term).or_insert((who, Vec::new()));
        e.1.push(at);
    }
    let (_, old) = &terms[&old_term];
    let old_last = old.iter().copied().max().unwrap_or(0);
    println!(
        "first leader {first} (term {old_term}): {} documents in the index, {discarded} not sent after its step-down; next leader {next}; terms {:?}",
        old.len(),
        terms
            .iter()
            .map(|(t, (w, v))| (t, w, v.len()))
            .collect::<Vec<_>>()
    );
    // Nothing the old term produced after the sink went down was sent:
    // it was all queued when the term ended (2 s of slack for a request
    // in flight at the stop).
    assert!(
        old_last < stopped_at + 2_000_000,
        "a document of the ended term produced {} ms after the sink stopped reached it",
        (old_last - stopped_at) / 1000
    );
    for (t, (who, times)) in &terms {
        if *t > old_term {
            let first_new = times.iter().copied().min().unwrap_or(i64::MAX);
            assert!(
                old_last < first_new,
                "term {old_term} of {first} overlaps term {t} of {who} in the sink"
            );
        }
    }
    c.check(t0)?;
    Ok(())
}

/// A write block on the data stream (per-document 403
/// `cluster_block_exception`) keeps the documents until it is lifted;
/// then each arrives once. Before, they were dropped and acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_block_keeps_documents_until_it_is_lifted() -> Result<()> {
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let dir = tempfile::tempdir()?;
    let go = dir.path().join("go");
    let policy = dir.path().join("policy.yml");
    // One document, then ten more once the test says so.
    let script = format!(
        "echo '{{\"n\": 1}}'; while [ ! -e {} ]; do sleep 0.05; done; for i in 2 3 4 5 6 7 8 9 10 11; do echo \"{{\\\"n\\\": $i}}\"; done; exec sleep 600",
        go.display()
    );
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default:\n    type: elasticsearch\n    hosts: ['{}']\n    backoff: {{init: 100ms, max: 500ms}}\ninputs:\n  - id: blocked\n    type: exec\n    events: json\n    data_stream: {{dataset: blocked}}\n    command: [sh, -c, '{}']\n",
            sink.url(),
            script.replace('\'', "''")
        ),
    )?;
    let a = AgentProc::start_alone(plane, &policy, dir.path())?;
    let index = "logs-blocked-default";
    wait_docs(
        &sink,
        index,
        &["n"],
        Duration::from_secs(30),
        "the first document",
        |d| !d.is_empty(),
    )?;
    let streams = sink.get_json(&format!("/_data_stream/{index}"))?;
    let backing = streams["data_streams"][0]["indices"][0]["index_name"]
        .as_str()
        .context("backing index")?
        .to_string();
    sink.put_json(
        &format!("/{backing}/_settings"),
        &json!({"index.blocks.write": true}),
    )?;
    std::fs::write(&go, "")?;
    let errors = "leasehold_output_write_errors_total{output=\"default\"}";
    wait_metric(&a, errors, Duration::from_secs(15), |n| n >= 2)?;
    let status = a.status()?;
    let out = &status["outputs"][0];
    assert_eq!(out["state"], "failing", "{status}");
    assert!(
        out["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("403") && e.contains("cluster_block_exception")),
        "{status}"
    );
    sink.put_json(
        &format!("/{backing}/_settings"),
        &json!({"index.blocks.write": null}),
    )?;
    let docs = wait_docs(
        &sink,
        index,
        &["n"],
        Duration::from_secs(30),
        "all 11 documents",
        |d| d.len() >= 11,
    )?;
    let ns: BTreeSet<u64> = docs.iter().filter_map(|d| d["n"].as_u64()).collect();
    assert_eq!(ns, (1..=11).collect(), "every document");
    assert_eq!(docs.len(), 11, "each once");
    let m = a.get("/metrics")?.1;
    assert_eq!(
        metric(
            &m,
            "leasehold_output_events_dropped_total{output=\"default\"}"
        ),
        0,
        "{m}"
    );
    Ok(())
}

/// The agents of each period in `docs` (by `@timestamp`), checked: every
/// period but the first and last (agents start and stop at different
/// times) has all `n` agents; returns (periods, inner periods).
fn every_agent_every_period(docs: &[Value], n: usize, what: &str) -> Result<(usize, usize)> {
    let mut by_period: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in docs {
        by_period
            .entry(d["@timestamp"].as_str().unwrap_or("").into())
            .or_default()
            .insert(d["agent"]["name"].as_str().unwrap_or("").into());
    }
    let all: Vec<(&String, &BTreeSet<String>)> = by_period.iter().collect();
    let inner = &all[1.min(all.len())..all.len().saturating_sub(1)];
    if inner.len() < 3 {
        bail!("{what}: fewer than 3 whole periods: {by_period:?}");
    }
    for (at, who) in inner {
        if who.len() != n {
            bail!("{what}: period {at} has only {who:?}");
        }
    }
    Ok((all.len(), inner.len()))
}

/// Three agents of one DaemonSet policy, each on its own node, run the
/// same node-local `system/metrics` input and the same scrape of a local
/// target (as a DaemonSet scrapes `localhost:9100` on every node) into one
/// OpenSearch: every agent's document of every period is there. Before,
/// the ids named the input, metricset, object and period only, and one
/// node's document per period survived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_local_documents_of_every_node_are_kept() -> Result<()> {
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let dir = tempfile::tempdir()?;
    let www = dir.path().join("www");
    std::fs::create_dir(&www)?;
    std::fs::write(
        www.join("metrics"),
        "# TYPE node_load1 gauge\nnode_load1 0.5\n",
    )?;
    let target = agents::static_http::StaticHttp::start(&www)?;
    let policy = dir.path().join("policy.yml");
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default:\n    type: elasticsearch\n    hosts: ['{}']\ninputs:\n  - id: system\n    type: system/metrics\n    period: 1s\n    metricsets: [uptime, load]\n  - id: node-exporter\n    type: prometheus/metrics\n    streams:\n      - metricsets: [collector]\n        hosts: ['http://127.0.0.1:{}']\n        metrics_path: /metrics\n        period: 1s\n",
            sink.url(),
            target.port
        ),
    )?;
    let mut agents = Vec::new();
    for k in 1..=3u32 {
        let out = dir.path().join(format!("out-{k}"));
        let mut a = AgentProc::spawn_with_env(
            &policy,
            &plane.agent_kubeconfig(k),
            k,
            "default",
            &out,
            &[("NODE_NAME", format!("node-{k}"))],
        )?;
        a.wait_ready()?;
        agents.push(a);
    }
    let indices = [
        "metrics-system.uptime-default",
        "metrics-prometheus.collector-default",
    ];
    for index in indices {
        wait_docs(
            &sink,
            index,
            &["agent.name", "@timestamp"],
            Duration::from_secs(30),
            "five periods of every agent",
            |d| {
                let mut per: BTreeMap<String, usize> = BTreeMap::new();
                for x in d {
                    *per.entry(x["agent"]["name"].as_str().unwrap_or("").into())
                        .or_insert(0) += 1;
                }
                per.len() == 3 && per.values().all(|n| *n >= 5)
            },
        )?;
    }
    // No agent's document was taken for another's (answered 409).
    for a in &agents {
        let m = a.get("/metrics")?.1;
        let written = metric(
            &m,
            "leasehold_output_events_written_total{output=\"default\"}",
        );
        assert!(written > 0, "{m}");
        assert_eq!(
            metric(
                &m,
                "leasehold_output_events_duplicate_total{output=\"default\"}"
            ),
            0,
            "{m}"
        );
    }
    for a in &agents {
        a.signal(libc::SIGTERM);
    }
    for a in &mut agents {
        assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    }
    for index in indices {
        let docs = sources(&sink, index, &["agent.name", "@timestamp"])?;
        let (periods, inner) = every_agent_every_period(&docs, 3, index)?;
        println!(
            "{index}: {} documents over {periods} periods, {inner} whole",
            docs.len()
        );
    }
    Ok(())
}

/// An `otlp` output pointed at a wrong path (the Collector answers 404)
/// keeps every event in its disk queue, reports itself failing, and drops
/// nothing; restarted with the right endpoint it delivers them all. Before,
/// a 404 dropped and acknowledged the batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_otlp_path_loses_nothing() -> Result<()> {
    wrong_otlp_endpoint_loses_nothing(false).await
}

/// The same over gRPC, pointed at the Collector's OTLP/HTTP port: no
/// gRPC server answers there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_otlp_output_at_a_port_without_grpc_loses_nothing() -> Result<()> {
    wrong_otlp_endpoint_loses_nothing(true).await
}

async fn wrong_otlp_endpoint_loses_nothing(grpc: bool) -> Result<()> {
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OtelCollector, sink_dir.path())?;
    let protocol = if grpc { "grpc" } else { "http/protobuf" };
    let (wrong, right) = if grpc {
        (
            sink.http_endpoint().to_string(),
            format!("http://{}", sink.grpc_endpoint()),
        )
    } else {
        (
            format!("{}/wrong", sink.http_endpoint()),
            sink.http_endpoint().to_string(),
        )
    };
    let dir = tempfile::tempdir()?;
    let queue = dir.path().join("queue");
    let policy = dir.path().join("policy.yml");
    let write = |endpoint: &str, input: &str| -> Result<()> {
        std::fs::write(
            &policy,
            format!(
                "agent:\n  shutdown_timeout: 3s\noutputs:\n  default:\n    type: otlp\n    protocol: {protocol}\n    endpoint: '{endpoint}'\n    backoff: {{init: 100ms, max: 500ms}}\n    queue.disk.path: {}\ninputs:\n{input}",
                queue.display()
            ),
        )?;
        Ok(())
    };
    write(
        &wrong,
        "  - id: logs\n    type: exec\n    command: [sh, -c, 'for i in 1 2 3 4 5; do echo line-$i; done; exec sleep 600']\n",
    )?;
    let mut a = AgentProc::start_alone(plane, &policy, dir.path())?;
    let errors = "leasehold_output_write_errors_total{output=\"default\"}";
    let m = wait_metric(&a, errors, Duration::from_secs(15), |n| n >= 2)?;
    assert_eq!(
        metric(
            &m,
            "leasehold_output_events_dropped_total{output=\"default\"}"
        ),
        0,
        "{m}"
    );
    let status = a.status()?;
    assert_eq!(status["outputs"][0]["state"], "failing", "{status}");
    // Over HTTP the Collector's 404; over gRPC whatever the HTTP port
    // answered, naming it.
    let said = if grpc { wrong.as_str() } else { "404" };
    assert!(
        status["outputs"][0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains(said)),
        "{status}"
    );
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    a.wait_log("stay in the disk queue", Duration::from_secs(1))?;

    write(&right, "  []\n")?;
    let a = AgentProc::start_alone(plane, &policy, dir.path())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let bodies = loop {
        let mut bodies = Vec::new();
        for line in sink.read_output()? {
            for rl in line["resourceLogs"].as_array().into_iter().flatten() {
                for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                    for r in sl["logRecords"].as_array().into_iter().flatten() {
                        bodies.push(r["body"]["stringValue"].as_str().unwrap_or("").to_string());
                    }
                }
            }
        }
        if bodies.len() >= 5 || Instant::now() > deadline {
            break bodies;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut bodies = bodies;
    bodies.sort();
    assert_eq!(
        bodies,
        (1..=5).map(|i| format!("line-{i}")).collect::<Vec<_>>(),
        "every line once, after the restart"
    );
    drop(a);
    Ok(())
}
