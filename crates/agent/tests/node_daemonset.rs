//! The shipped kustomize base as a real DaemonSet pod on a real node
//! (kubelet + containerd, `controlplane/node`), judged from what reaches a
//! real OpenSearch: the pod becomes Ready with its own ServiceAccount
//! token, takes the Lease, and ships the container logs containerd writes
//! for a busybox workload (with pod metadata), kube-state-metrics and
//! Events.
//!
//! The image is the agent built for the tests (`target/debug/leasehold`)
//! packed as the Dockerfile packs the release binary. Patched for this node
//! only where the node differs from a cluster: `hostNetwork` (the API server
//! listens on loopback, there is no kube-proxy), the in-cluster address,
//! `imagePullPolicy: Never`, a monitoring port in the node's range, and the
//! output, kube-state-metrics and API server addresses through the
//! environment the policy reads.

mod agents;

use std::time::Duration;

use agents::docs::wait_docs;
use anyhow::{Context, Result};
use leasehold_testkit::ControlPlane;
use leasehold_testkit::node::{BUSYBOX_IMAGE, Node};
use leasehold_testkit::sinks::{SinkKind, TestSink};
use serde_json::{Value, json};

/// The agent's monitoring port on the node (host network).
const MONITORING_PORT: u16 = 19691;
const NS: &str = "leasehold";
/// How long a pod may take from apply to Ready: image already imported,
/// the agent's readiness probe every 5 s.
const POD_READY: Duration = Duration::from_secs(120);

/// The kustomize base as JSON objects, the DaemonSet patched for this node.
fn manifests(node: &Node, plane: &ControlPlane, env: &[(&str, String)]) -> Result<Value> {
    let base =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/base");
    let yaml = node.kubectl(&["kustomize", base.to_str().context("path")?], None)?;
    let list: Value = serde_json::from_str(&node.kubectl(
        &["apply", "--dry-run=client", "-o", "json", "-f", "-"],
        Some(&yaml),
    )?)?;
    let mut items = list["items"].as_array().cloned().context("a List")?;
    let ds = items
        .iter_mut()
        .find(|o| o["kind"] == "DaemonSet")
        .context("the DaemonSet")?;
    let spec = &mut ds["spec"]["template"]["spec"];
    spec["hostNetwork"] = json!(true);
    spec["dnsPolicy"] = json!("ClusterFirstWithHostNet");
    let c = &mut spec["containers"][0];
    c["imagePullPolicy"] = json!("Never");
    let args: Vec<Value> = c["args"]
        .as_array()
        .context("args")?
        .iter()
        .map(|a| match a.as_str() {
            Some(s) if s.starts_with("0.0.0.0:") => json!(format!("0.0.0.0:{MONITORING_PORT}")),
            _ => a.clone(),
        })
        .collect();
    c["args"] = json!(args);
    c["ports"] = json!([{"name": "monitoring", "containerPort": MONITORING_PORT}]);
    let api = plane.apiserver_addr();
    let env_list = c["env"].as_array_mut().context("env")?;
    env_list.push(json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}));
    env_list.push(json!({"name": "KUBERNETES_SERVICE_PORT", "value": api.port().to_string()}));
    env_list.push(json!({"name": "API_SERVER", "value": format!("https://{api}")}));
    for (k, v) in env {
        env_list.push(json!({"name": k, "value": v}));
    }
    Ok(json!({"apiVersion": "v1", "kind": "List", "items": items}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_daemonset_runs_leads_and_ships_on_a_real_node() -> Result<()> {
    let plane = ControlPlane::shared();
    let ksm = plane.kube_state_metrics()?;
    let ksm_host = ksm
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let node = Node::up(plane, std::path::Path::new(agents::binary()))?;

    // A workload whose logs containerd writes under /var/log/pods.
    node.kubectl(
        &["apply", "-f", "-"],
        Some(
            &json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "counter", "namespace": "default", "labels": {"app": "counter"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "count", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                        "command": ["sh", "-c", "i=0; while true; do i=$((i+1)); echo \"line $i\"; sleep 0.2; done"]
                    }]
                }
            })
            .to_string(),
        ),
    )?;
    let objects = manifests(
        &node,
        plane,
        &[("ES_HOSTS", sink.url().to_string()), ("KSM_HOST", ksm_host)],
    )?;
    node.kubectl(&["apply", "-f", "-"], Some(&objects.to_string()))?;
    let pods = node.wait_ready(NS, "app.kubernetes.io/name=leasehold", 1, POD_READY)?;
    node.wait_ready("default", "app=counter", 1, POD_READY)?;
    let agent_pod = pods[0].clone();

    // It leads: the Lease names the pod (its identity is POD_NAME).
    let lease_holder = || -> Result<String> {
        let lease: Value = serde_json::from_str(&node.kubectl(
            &[
                "get",
                "lease",
                "-n",
                NS,
                "leasehold-cluster-leader",
                "-o",
                "json",
            ],
            None,
        )?)?;
        Ok(lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_string())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while lease_holder().unwrap_or_default() != agent_pod {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the Lease is not held by {agent_pod}: {:?}",
            lease_holder()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Container logs written by containerd, with the pod's metadata.
    let logs = wait_docs(
        &sink,
        "logs-kubernetes.container_logs-default",
        &["message", "kubernetes", "agent.name"],
        Duration::from_secs(60),
        "the workload's container logs",
        |d| {
            d.iter()
                .filter(|x| x["kubernetes"]["pod"]["name"] == "counter")
                .count()
                >= 10
        },
    )?;
    let mine: Vec<&Value> = logs
        .iter()
        .filter(|x| x["kubernetes"]["pod"]["name"] == "counter")
        .collect();
    for d in &mine {
        assert_eq!(d["kubernetes"]["namespace"], "default", "{d}");
        assert_eq!(d["kubernetes"]["container"]["name"], "count", "{d}");
        assert!(d["kubernetes"]["pod"]["uid"].is_string(), "{d}");
        assert_eq!(d["agent"]["name"], agent_pod.as_str(), "{d}");
        assert!(
            d["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("line ")),
            "{d}"
        );
    }
    // Leader-gated data: kube-state-metrics sees the workload, and Events
    // (the pods' scheduling) arrive.
    wait_docs(
        &sink,
        "metrics-kubernetes.state_pod-default",
        &["kubernetes"],
        Duration::from_secs(60),
        "state_pod of the workload",
        |d| {
            d.iter()
                .any(|x| x["kubernetes"]["pod"]["name"] == "counter")
        },
    )?;
    wait_docs(
        &sink,
        "logs-kubernetes.event-default",
        &["kubernetes"],
        Duration::from_secs(60),
        "Events",
        |d| !d.is_empty(),
    )?;
    println!(
        "pod {agent_pod} Ready and leading; {} log documents of the workload",
        mine.len()
    );
    node.down()?;
    Ok(())
}
