//! The `otlp` output against a real OpenTelemetry Collector (built from Go
//! modules), over OTLP/gRPC and OTLP/HTTP: the Collector's file exporter
//! holds every event — log records with their fields as attributes, metric
//! documents as data points — each with the `leader.*` fields of the term
//! that produced it.

mod agents;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agents::cluster::Cluster;
use agents::*;
use anyhow::{Result, bail};
use leasehold_testkit::ControlPlane;
use leasehold_testkit::sinks::{SinkKind, TestSink};
use serde_json::Value;

const N: u64 = 20;

/// A gated input printing `N` log lines and `N` metric documents as JSON
/// to output `out`.
fn input(id: &str, out: &str) -> String {
    let script = format!(
        "for i in $(seq 1 {N}); do echo \"{{\\\"message\\\": \\\"log-$i\\\", \\\"n\\\": $i}}\"; echo \"{{\\\"data_stream\\\": {{\\\"type\\\": \\\"metrics\\\", \\\"dataset\\\": \\\"otlp.test\\\", \\\"namespace\\\": \\\"default\\\"}}, \\\"sample\\\": {{\\\"value\\\": $i}}}}\"; done; exec sleep 600"
    );
    format!(
        "  - id: {id}\n    type: exec\n    events: json\n    use_output: {out}\n    condition: ${{kubernetes_leaderelection.leader}} == true\n    command: [sh, -c, '{}']\n",
        script.replace('\'', "''")
    )
}

/// An OTLP attribute list as a map from key to its value's JSON.
fn attributes(v: &Value) -> BTreeMap<String, Value> {
    v["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| {
            let value = a["value"].as_object()?.values().next()?.clone();
            Some((a["key"].as_str()?.to_string(), value))
        })
        .collect()
}

/// A log record: its body and attributes.
type Record = (String, BTreeMap<String, Value>);
/// A data point: its value and attributes.
type Point = (i64, BTreeMap<String, Value>);

/// What the Collector wrote: log records and data points, each as its
/// JSON (attributes flattened into a map; a record's with its resource's,
/// where the fields naming its source are sent once per request).
fn exported(sink: &TestSink) -> Result<(Vec<Record>, Vec<Point>)> {
    let mut logs = Vec::new();
    let mut points = Vec::new();
    for line in sink.read_output()? {
        for rl in line["resourceLogs"].as_array().into_iter().flatten() {
            let resource = attributes(&rl["resource"]);
            for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                for r in sl["logRecords"].as_array().into_iter().flatten() {
                    let body = r["body"]["stringValue"].as_str().unwrap_or("").to_string();
                    let own = attributes(r);
                    assert!(
                        own.keys().all(|k| !resource.contains_key(k)),
                        "a field is on the record and its resource: {own:?} {resource:?}"
                    );
                    let mut all = resource.clone();
                    all.extend(own);
                    logs.push((body, all));
                }
            }
        }
        for rm in line["resourceMetrics"].as_array().into_iter().flatten() {
            for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                for m in sm["metrics"].as_array().into_iter().flatten() {
                    if m["name"] != "sample.value" {
                        continue;
                    }
                    for p in m["gauge"]["dataPoints"].as_array().into_iter().flatten() {
                        // int64 values are strings in OTLP JSON.
                        let v = p["asInt"]
                            .as_str()
                            .and_then(|s| s.parse().ok())
                            .or_else(|| p["asInt"].as_i64())
                            .unwrap_or(-1);
                        points.push((v, attributes(p)));
                    }
                }
            }
        }
    }
    Ok((logs, points))
}

fn int(v: Option<&Value>) -> Option<i64> {
    let v = v?;
    v.as_i64().or_else(|| v.as_str()?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_receives_every_event_with_its_leader_fields_over_grpc_and_http() -> Result<()>
{
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OtelCollector, sink_dir.path())?;
    let text = policy(
        "run-lease",
        &format!("{}{}", input("to-grpc", "grpc"), input("to-http", "http")),
    )
    .replace(
        "outputs:\n",
        &format!(
            "outputs:\n  grpc:\n    type: otlp\n    endpoint: http://{}\n    backoff: {{init: 100ms, max: 1s}}\n  http:\n    type: otlp\n    protocol: http/protobuf\n    endpoint: {}\n    backoff: {{init: 100ms, max: 1s}}\n",
            sink.grpc_endpoint(),
            sink.http_endpoint()
        ),
    );
    let c = Cluster::start(plane, "run-otlp", 1, Some(text)).await?;
    let t0 = now_us();
    c.current_leader()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let (logs, points) = loop {
        let (logs, points) = exported(&sink)?;
        if logs.len() as u64 >= 2 * N && points.len() as u64 >= 2 * N {
            break (logs, points);
        }
        if Instant::now() > deadline {
            bail!(
                "the Collector holds {} log records and {} points of {} each; agent log:\n{}",
                logs.len(),
                points.len(),
                2 * N,
                c.agent("agent-1").log()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for input in ["to-grpc", "to-http"] {
        let mine: Vec<&Record> = logs
            .iter()
            .filter(|(_, a)| a.get("input.id").and_then(Value::as_str) == Some(input))
            .collect();
        let mut bodies: Vec<&str> = mine.iter().map(|(b, _)| b.as_str()).collect();
        bodies.sort_unstable();
        let mut want: Vec<String> = (1..=N).map(|i| format!("log-{i}")).collect();
        want.sort_unstable();
        assert_eq!(bodies, want, "{input}: every log line, once");
        for (body, a) in &mine {
            assert_eq!(
                a.get("leader.lease").and_then(Value::as_str),
                Some("run-lease"),
                "{body}: {a:?}"
            );
            assert!(
                int(a.get("leader.term")).is_some_and(|t| t >= 0),
                "{body}: {a:?}"
            );
            assert_eq!(a.get("agent.name").and_then(Value::as_str), Some("agent-1"));
            assert!(
                int(a.get("n")).is_some(),
                "{body}: the event's own field: {a:?}"
            );
        }
        let mut values: Vec<i64> = points
            .iter()
            .filter(|(_, a)| a.get("input.id").and_then(Value::as_str) == Some(input))
            .map(|(v, a)| {
                assert!(int(a.get("leader.term")).is_some_and(|t| t >= 0), "{a:?}");
                *v
            })
            .collect();
        values.sort_unstable();
        assert_eq!(
            values,
            (1..=N as i64).collect::<Vec<_>>(),
            "{input}: every data point, once"
        );
    }
    println!(
        "the Collector holds {} log records and {} data points from gRPC and HTTP",
        logs.len(),
        points.len()
    );
    c.check(t0)?;
    Ok(())
}
