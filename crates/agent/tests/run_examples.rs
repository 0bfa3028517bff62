//! Every `examples/run-*.yaml` passes `check` without warnings and runs:
//! the node-local one on its own, the election ones on the real control
//! plane, judged from the files they write.

mod agents;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agents::*;
use anyhow::{Context, Result, bail};
use leasehold_testkit::{ControlPlane, LeaseAdmin};
use serde_json::Value;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

/// Waits until `file` holds a line for which `pred` holds; returns it.
fn wait_line(file: &Path, within: Duration, pred: impl Fn(&Value) -> bool) -> Result<Value> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            for line in complete_lines(&text) {
                let v: Value = serde_json::from_str(line)?;
                if pred(&v) {
                    return Ok(v);
                }
            }
        }
        if Instant::now() > deadline {
            bail!("no matching event in {} within {within:?}", file.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How long after its start an agent of `name` may take to lead a fresh
/// Lease: a missing Lease is created only once it has been seen missing
/// for one lease duration, then the next retry takes it. Read from the
/// example's own `leader_leaseduration` and `leader_retryperiod`.
fn first_lead_within(name: &str) -> Result<Duration> {
    let text = std::fs::read_to_string(example(name))?;
    let seconds = |key: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.split('#').next()?.trim().parse().ok())
            .with_context(|| format!("{name} sets no whole-second {key}"))
    };
    let lease = seconds("leader_leaseduration")?;
    let retry = seconds("leader_retryperiod")?;
    Ok(Duration::from_secs(lease + 2 * retry) + MARGIN)
}

#[test]
fn run_examples_pass_check_without_warnings() -> Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if !name.starts_with("run-") {
            continue;
        }
        seen += 1;
        let o = Command::new(binary())
            .args(["check", "-c"])
            .arg(&path)
            .output()?;
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{name}: {err}");
        assert!(!err.contains("warning"), "{name}: {err}");
    }
    assert!(seen >= 3, "only {seen} run examples");
    Ok(())
}

#[test]
fn the_node_local_example_runs() -> Result<()> {
    let out = tempfile::tempdir()?;
    let agent = AgentProc::start(
        &example("run-node-local.yaml"),
        Path::new("/nonexistent"),
        1,
        "default",
        out.path(),
    )?;
    let ev = wait_line(
        &out.path().join("node.ndjson"),
        Duration::from_secs(10),
        |v| v["input"]["id"] == "uptime",
    )?;
    assert_eq!(ev["data_stream"]["type"], "metrics");
    assert_eq!(ev["data_stream"]["dataset"], "node.uptime");
    assert_eq!(ev["data_stream"]["namespace"], "default");
    assert!(ev["message"].as_str().is_some_and(|m| !m.is_empty()));
    let status = agent.status()?;
    let outputs: Vec<&str> = status["outputs"]
        .as_array()
        .context("outputs")?
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert_eq!(outputs, ["default", "stdout"]);
    let running = status["inputs"]["running"]
        .as_array()
        .context("running")?
        .len();
    assert_eq!(running, 2, "{status:#}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_gated_example_runs_its_cluster_input_on_the_leader() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("example-gated").await?;
    let out = tempfile::tempdir()?;
    let _agent = AgentProc::start(
        &example("run-leader-gated.yaml"),
        &plane.agent_kubeconfig(1),
        1,
        ns.name(),
        out.path(),
    )?;
    // The gated input prints its first line at once when it starts.
    let ev = wait_line(
        &out.path().join("events.ndjson"),
        first_lead_within("run-leader-gated.yaml")? + MARGIN,
        |v| v["input"]["id"] == "cluster",
    )?;
    assert_eq!(ev["leader"]["lease"], "leasehold-cluster-leader");
    assert!(ev["leader"]["term"].as_i64().is_some());
    assert_eq!(ev["data_stream"]["dataset"], "cluster.sample");
    assert_eq!(ev["agent"]["name"], "agent-1");
    let node = wait_line(
        &out.path().join("events.ndjson"),
        Duration::from_secs(5),
        |v| v["input"]["id"] == "node",
    )?;
    assert!(
        node.get("leader").is_none(),
        "node-local events carry no term: {node}"
    );
    assert_eq!(node["message"], "node sample from agent-1");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_two_elections_example_holds_both_leases() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("example-two").await?;
    let (o1, o2) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let _a = AgentProc::start(
        &example("run-two-elections.yaml"),
        &plane.agent_kubeconfig(1),
        1,
        ns.name(),
        o1.path(),
    )?;
    let _b = AgentProc::start(
        &example("run-two-elections.yaml"),
        &plane.agent_kubeconfig(2),
        2,
        ns.name(),
        o2.path(),
    )?;
    let admin = plane.admin_client().await?;
    let deadline = Instant::now() + first_lead_within("run-two-elections.yaml")?;
    for lease in ["leasehold-state-metrics", "leasehold-events"] {
        let l = LeaseAdmin::new(admin.clone(), ns.name(), lease);
        loop {
            let holder = l
                .get()
                .await?
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity);
            if holder.is_some_and(|h| h.starts_with("agent-")) {
                break;
            }
            if Instant::now() > deadline {
                bail!("{lease} not held");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for (input, lease) in [
        ("state-metrics", "leasehold-state-metrics"),
        ("cluster-events", "leasehold-events"),
    ] {
        let found = [o1.path(), o2.path()].iter().any(|d| {
            wait_line(&d.join("events.ndjson"), Duration::from_secs(3), |v| {
                v["input"]["id"] == input && v["leader"]["lease"] == lease
            })
            .is_ok()
        });
        assert!(found, "no {input} event stamped with {lease}");
    }
    Ok(())
}

/// The DaemonSet example run by three agents of one policy: each ships
/// its own node's container logs and host metrics; the cluster-wide inputs
/// (kube-state-metrics, the API server, Events) run on exactly one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemonset_example_runs_node_inputs_on_every_agent_and_cluster_inputs_on_one()
-> Result<()> {
    use agents::access::{credentials, grant_cluster_reads};
    use k8s_openapi::api::core::v1::Event;
    use kube::api::PostParams;
    const GATED: [&str; 3] = ["cluster-state", "apiserver", "cluster-events"];
    let plane = ControlPlane::shared();
    let ksm = plane.kube_state_metrics()?;
    let ns = plane.namespace("example-daemonset").await?;
    let dir = tempfile::tempdir()?;
    let ksm_host = ksm
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();
    let mut procs = Vec::new();
    for k in 1..=3u32 {
        grant_cluster_reads(plane, k).await?;
        let home = dir.path().join(format!("node-{k}"));
        let logs = home.join("containers");
        std::fs::create_dir_all(&logs)?;
        // This node's own container: a CRI log only this agent can read.
        std::fs::write(
            logs.join(format!("web-{k}_shop_web-{}.log", "c".repeat(64))),
            format!("2026-12-03T10:00:00Z stdout F hello from node {k}\n"),
        )?;
        let (token, ca, server) = credentials(plane, k, &home)?;
        let agent = AgentProc::spawn_with_env(
            &example("run-cluster-metrics.yaml"),
            &plane.agent_kubeconfig(k),
            k,
            ns.name(),
            &home.join("out"),
            &[
                ("KSM_HOST", ksm_host.clone()),
                ("API_SERVER", server),
                ("TOKEN_FILE", token.display().to_string()),
                ("CA_FILE", ca.display().to_string()),
                ("LOG_DIR", logs.display().to_string()),
                (
                    "LEASEHOLD_PATH_DATA",
                    home.join("data").display().to_string(),
                ),
            ],
        )?;
        procs.push(agent);
    }
    for a in &mut procs {
        a.wait_ready()?;
    }
    // Node-local, on every agent: its own log line and its host's metrics.
    for (i, a) in procs.iter().enumerate() {
        let file = a.out.join("events.ndjson");
        let log = wait_line(&file, Duration::from_secs(30), |v| {
            v["input"]["id"] == "container-logs"
        })?;
        assert_eq!(log["message"], format!("hello from node {}", i + 1));
        assert_eq!(log["kubernetes"]["namespace"], "shop");
        assert_eq!(log["data_stream"]["dataset"], "kubernetes.container_logs");
        assert!(
            log.get("leader").is_none(),
            "node-local events carry no term"
        );
        wait_line(&file, Duration::from_secs(30), |v| {
            v["input"]["id"] == "host-metrics" && v["metricset"]["name"] == "memory"
        })?;
    }
    // Cluster-wide, on the leader.
    let leader_file = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut found = None;
            for a in &procs {
                let file = a.out.join("events.ndjson");
                if wait_line(&file, Duration::ZERO, |v| {
                    v["input"]["id"] == "cluster-state"
                })
                .is_ok()
                {
                    found = Some(file);
                }
            }
            if let Some(f) = found {
                break f;
            }
            if Instant::now() > deadline {
                bail!("no agent collected kube-state-metrics");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_line(&leader_file, Duration::from_secs(30), |v| {
        v["input"]["id"] == "apiserver"
            && v["leader"]["lease"] == "leasehold-cluster-leader"
            && v["kubernetes"]["apiserver"]["request"]["count"].is_number()
    })?;
    // An Event made now is shipped, by the leader.
    let admin = plane.admin_client().await?;
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
    let ev = agents::access::event(ns.name(), "example-tick", "p", "ExampleTick", "hello", now);
    kube::Api::<Event>::namespaced(admin, ns.name())
        .create(&PostParams::default(), &ev)
        .await?;
    let shipped = wait_line(&leader_file, Duration::from_secs(15), |v| {
        v["kubernetes"]["event"]["reason"] == "ExampleTick"
    })?;
    assert_eq!(shipped["input"]["id"], "cluster-events");
    assert_eq!(shipped["kubernetes"]["event"]["message"], "hello");
    assert_eq!(shipped["@metadata"]["_id"].as_str().map(str::len), Some(32));
    // Nobody else ran a gated input, judged from every output.
    for a in &procs {
        let file = a.out.join("events.ndjson");
        if file == leader_file {
            continue;
        }
        let text = std::fs::read_to_string(&file)?;
        for line in complete_lines(&text) {
            let v: Value = serde_json::from_str(line)?;
            let input = v["input"]["id"].as_str().unwrap_or_default();
            assert!(!GATED.contains(&input), "{} ran {input} too", a.name);
        }
    }
    Ok(())
}

/// The original leader-election proposal's policy
/// (`examples/leader-election-proposal.yaml`), changed only where the
/// proposal is wrong (`== 'true'` is never true: `== true`) and where this
/// machine differs from a cluster (the kube-state-metrics Service name is
/// replaced by the test's address), runs and ships `state_node` documents
/// to a real OpenSearch through its `elasticsearch` output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_original_proposals_policy_ships_state_metrics_to_opensearch() -> Result<()> {
    use leasehold_testkit::sinks::{SinkKind, TestSink};
    let plane = ControlPlane::shared();
    let ksm = plane.kube_state_metrics()?;
    let admin = plane.admin_client().await?;
    leasehold_testkit::objects::ready_node(&admin, "proposal-node").await?;
    let ns = plane.namespace("example-proposal").await?;
    let dir = tempfile::tempdir()?;
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let ksm_host = ksm
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();
    let original = std::fs::read_to_string(example("leader-election-proposal.yaml"))?;
    let text = original
        .replace("== 'true'", "== true")
        .replace("'kube-state-metrics:8080'", &format!("'{ksm_host}'"));
    assert_ne!(text, original);
    let policy = dir.path().join("proposal.yaml");
    std::fs::write(&policy, text)?;
    let mut agent = AgentProc::spawn_with_env(
        &policy,
        &plane.agent_kubeconfig(2),
        2,
        ns.name(),
        &dir.path().join("out"),
        &[("ES_HOST", sink.url().to_string())],
    )?;
    agent.wait_ready()?;
    // Lease duration 15 s (a new Lease is taken after one duration), then
    // the next 10 s period.
    let docs = agents::docs::wait_docs(
        &sink,
        "metrics-kubernetes.state_node-default",
        &[
            "kubernetes.node.name",
            "kubernetes.node.status.ready",
            "leader",
        ],
        Duration::from_secs(15 + 10) + MARGIN * 3,
        "state_node documents in OpenSearch",
        |d| {
            d.iter()
                .any(|v| v["kubernetes"]["node"]["name"] == "proposal-node")
        },
    )?;
    let doc = docs
        .iter()
        .find(|v| v["kubernetes"]["node"]["name"] == "proposal-node")
        .context("the node's document")?;
    assert_eq!(
        doc["kubernetes"]["node"]["status"]["ready"], "true",
        "{doc}"
    );
    assert_eq!(doc["leader"]["lease"], "agent-k8s-leader-lock", "{doc}");
    let data_streams = sink.get_json("/_data_stream/metrics-kubernetes.state_node-default")?;
    assert_eq!(
        data_streams["data_streams"][0]["name"], "metrics-kubernetes.state_node-default",
        "{data_streams}"
    );
    agent.signal(libc::SIGTERM);
    assert_eq!(agent.wait_exit(Duration::from_secs(20))?, Some(0));
    Ok(())
}
