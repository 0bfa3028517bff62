//! The shipped manifests as real DaemonSet pods on a real node (kubelet +
//! containerd, `controlplane/node`), judged from what reaches a real
//! OpenSearch:
//!
//! - the kustomize base becomes Ready with its own ServiceAccount token,
//!   takes the Lease, and ships the container logs containerd writes for a
//!   busybox workload (with pod metadata), kube-state-metrics (itself a
//!   Deployment scheduled on the node) and Events; the kubelet answers
//!   `/stats/summary` to the agent's ServiceAccount and refuses another; a
//!   changed ConfigMap is reloaded live by the same pod; a rule taken from
//!   its ClusterRole shows in `/status` as a 403 naming its ServiceAccount;
//! - the Helm chart hands over when its leading pod is deleted, restarted
//!   by `kubectl rollout restart` and upgraded to a new image tag: no two
//!   pods' leader-gated documents overlap (each gap printed), and no line
//!   of the workload's logs is lost across the replacements (the registry
//!   lives on the chart's hostPath data volume).
//!
//! One node per machine: the tests take turns. Every test's name holds
//! `on_a_real_node`: `run-tests` runs this file beside the other tests
//! (they mostly wait for pods) and skips these names in the main run.
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

use agents::docs::{sources, wait_docs};
use anyhow::{Context, Result};
use leasehold_testkit::ControlPlane;
use leasehold_testkit::node::{AGENT_IMAGE, BUSYBOX_IMAGE, KSM_IMAGE, Node};
use leasehold_testkit::sinks::{SinkKind, TestSink};
use serde_json::{Value, json};

/// The agent's monitoring port on the node (host network).
const MONITORING_PORT: u16 = 19691;
const NS: &str = "leasehold";
/// How long a pod may take from apply to Ready: image already imported,
/// the agent's readiness probe every 5 s.
const POD_READY: Duration = Duration::from_secs(120);

/// The node is one per machine: one test at a time.
static NODE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts the workload: a pod in `default` printing `line N` five times
/// a second, its output written by containerd under /var/log/pods.
fn start_counter(node: &Node) -> Result<()> {
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
                        "command": ["sh", "-c", "i=0; while true; do i=$((i+1)); echo \"line $i\"; sleep 0.2; done"],
                        "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]
                    }],
                    "volumes": [{"name": "scratch", "emptyDir": {}}]
                }
            })
            .to_string(),
        ),
    )?;
    Ok(())
}

/// `host:port` of the test kube-state-metrics run beside the plane.
fn ksm_host(plane: &ControlPlane) -> Result<String> {
    Ok(plane
        .kube_state_metrics()?
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string())
}

/// kube-state-metrics' port when it runs as a pod of the node.
const KSM_PORT: u16 = 19692;
const KSM_NS: &str = "leasehold-ksm";

/// kube-state-metrics as a Deployment scheduled on the node, with a
/// ServiceAccount and a ClusterRole of its own (list and watch of what it
/// exports), on the host network (the API server listens on loopback).
fn ksm_objects(plane: &ControlPlane) -> Value {
    let api = plane.apiserver_addr();
    let resources = [
        ("", "namespaces"),
        ("", "nodes"),
        ("", "pods"),
        ("apps", "deployments"),
        ("apps", "daemonsets"),
    ];
    let rules: Vec<Value> = resources
        .iter()
        .map(|(g, r)| json!({"apiGroups": [g], "resources": [r], "verbs": ["list", "watch"]}))
        .collect();
    let names: Vec<&str> = resources.iter().map(|(_, r)| *r).collect();
    let labels = json!({"app.kubernetes.io/name": "kube-state-metrics"});
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KSM_NS}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "kube-state-metrics", "namespace": KSM_NS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "leasehold-test-kube-state-metrics"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "leasehold-test-kube-state-metrics"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "leasehold-test-kube-state-metrics"},
         "subjects": [{"kind": "ServiceAccount", "name": "kube-state-metrics", "namespace": KSM_NS}]},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "kube-state-metrics", "namespace": KSM_NS},
         "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "serviceAccountName": "kube-state-metrics",
                "hostNetwork": true,
                "terminationGracePeriodSeconds": 5,
                "containers": [{
                    "name": "kube-state-metrics", "image": KSM_IMAGE, "imagePullPolicy": "Never",
                    "args": [
                        "--host=127.0.0.1", format!("--port={KSM_PORT}"),
                        "--telemetry-host=127.0.0.1", format!("--telemetry-port={}", KSM_PORT + 1),
                        format!("--resources={}", names.join(",")),
                    ],
                    "env": [
                        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": api.port().to_string()},
                    ],
                    "readinessProbe": {"httpGet": {"host": "127.0.0.1", "path": "/", "port": KSM_PORT},
                                       "periodSeconds": 2},
                }],
            }},
         }},
    ]})
}

/// Waits until the Lease `namespace/name` is held by `holder`.
async fn wait_holder(
    node: &Node,
    namespace: &str,
    name: &str,
    holder: &str,
    within: Duration,
) -> Result<()> {
    let read = || -> Result<String> {
        let lease: Value = serde_json::from_str(
            &node.kubectl(&["get", "lease", "-n", namespace, name, "-o", "json"], None)?,
        )?;
        Ok(lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .to_string())
    };
    let deadline = std::time::Instant::now() + within;
    while read().unwrap_or_default() != holder {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "Lease {name} not held by {holder} within {within:?}: {:?}",
            read()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

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
    let _one = NODE.lock().await;
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let node = Node::up(plane, std::path::Path::new(agents::binary()))?;

    start_counter(&node)?;
    let ksm = ksm_objects(plane);
    node.kubectl(&["apply", "-f", "-"], Some(&ksm.to_string()))?;
    node.wait_ready(
        KSM_NS,
        "app.kubernetes.io/name=kube-state-metrics",
        1,
        POD_READY,
    )
    .await?;
    let mut objects = manifests(
        &node,
        plane,
        &[
            ("ES_HOSTS", sink.url().to_string()),
            ("KSM_HOST", format!("127.0.0.1:{KSM_PORT}")),
        ],
    )?;
    // The policy starts without `state_namespace`; the ConfigMap's change
    // below adds it back, live.
    let policy_map = objects["items"]
        .as_array_mut()
        .context("items")?
        .iter_mut()
        .find(|o| o["kind"] == "ConfigMap")
        .context("the ConfigMap")?;
    let shipped_policy = policy_map["data"]["leasehold.yml"]
        .as_str()
        .context("leasehold.yml")?
        .to_string();
    let without = shipped_policy.replace(", state_namespace]", "]");
    anyhow::ensure!(
        without != shipped_policy,
        "the policy lists state_namespace"
    );
    policy_map["data"]["leasehold.yml"] = json!(without);
    let mut changed_map = policy_map.clone();
    changed_map["data"]["leasehold.yml"] = json!(shipped_policy);
    node.kubectl(&["apply", "-f", "-"], Some(&objects.to_string()))?;
    let pods = node
        .wait_ready(NS, "app.kubernetes.io/name=leasehold", 1, POD_READY)
        .await?;
    node.wait_ready("default", "app=counter", 1, POD_READY)
        .await?;
    let agent_pod = pods[0].clone();

    // It leads: the Lease names the pod (its identity is POD_NAME).
    wait_holder(
        &node,
        NS,
        "leasehold-cluster-leader",
        &agent_pod,
        Duration::from_secs(60),
    )
    .await?;

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

    // Least privilege, at the kubelet: the agent's ServiceAccount reads its
    // node's /stats/summary (the kubelet checks the token and `nodes/stats`
    // with the API server); another account of the namespace is refused.
    let token = |sa: &str| -> Result<String> {
        Ok(node
            .kubectl(&["create", "token", sa, "-n", NS, "--duration=10m"], None)?
            .trim()
            .to_string())
    };
    let summary: Value =
        serde_json::from_str(&node.kubelet_get("/stats/summary", &token("leasehold")?)?)?;
    assert_eq!(summary["node"]["nodeName"], "127.0.0.1", "{summary}");
    assert!(
        summary["pods"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["podRef"]["name"] == agent_pod.as_str())),
        "the agent's own pod in the kubelet's summary"
    );
    let refused = node
        .kubelet_get("/stats/summary", &token("default")?)
        .expect_err("an account without nodes/stats is refused");
    assert!(
        format!("{refused:#}").contains("Forbidden"),
        "the kubelet's refusal: {refused:#}"
    );

    // A changed ConfigMap reaches the running pod through the kubelet's
    // symlink swap and is reloaded live: the same pod, never restarted,
    // ships the added metricset, and its gated data goes on.
    let reload_from = agents::now_us();
    node.kubectl(&["apply", "-f", "-"], Some(&changed_map.to_string()))?;
    wait_docs(
        &sink,
        "metrics-kubernetes.state_namespace-default",
        &["agent.name"],
        POD_READY,
        "state_namespace after the ConfigMap's change",
        |d| d.iter().any(|x| x["agent"]["name"] == agent_pod.as_str()),
    )?;
    let pod: Value = serde_json::from_str(
        &node.kubectl(&["get", "pod", "-n", NS, &agent_pod, "-o", "json"], None)?,
    )?;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["restartCount"], 0,
        "reloaded, not restarted"
    );
    let state = sources(
        &sink,
        "metrics-kubernetes.state_pod-default",
        &["agent.name", "@timestamp"],
    )?;
    let mut times: Vec<i64> = state
        .iter()
        .filter_map(|d| agents::parse_ts(d["@timestamp"].as_str()?).ok())
        .collect();
    times.sort_unstable();
    let widest = times
        .windows(2)
        .filter(|w| w[1] >= reload_from)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(0);
    println!(
        "ConfigMap changed: reloaded by {agent_pod}; widest gap in state_pod since {} ms",
        widest / 1000
    );
    assert!(
        widest < 25_000_000,
        "the reload stopped the leader's gated data for {} ms (period 10 s)",
        widest / 1000
    );
    // RBAC errors show, naming the pod's own ServiceAccount: without
    // `/metrics` in its ClusterRole the `apiserver` scrape (every 30 s) is
    // refused, and `/status` says by whom and why.
    let mut role: Value = serde_json::from_str(&node.kubectl(
        &["get", "clusterrole", "leasehold-reader", "-o", "json"],
        None,
    )?)?;
    role["rules"]
        .as_array_mut()
        .context("rules")?
        .retain(|r| r.get("nonResourceURLs").is_none());
    node.kubectl(&["replace", "-f", "-"], Some(&role.to_string()))?;
    let monitoring = std::net::SocketAddr::from(([127, 0, 0, 1], MONITORING_PORT));
    let refused_as = format!("system:serviceaccount:{NS}:leasehold");
    let deadline = std::time::Instant::now() + Duration::from_secs(75);
    let shown = loop {
        let (_, body) = agents::http_get(monitoring, "/status")?;
        let status: Value = serde_json::from_str(&body)?;
        let error = status["inputs"]["running"]
            .as_array()
            .and_then(|is| is.iter().find(|i| i["id"] == "apiserver"))
            .and_then(|i| i["last_error"].as_str())
            .unwrap_or_default()
            .to_string();
        if error.contains("403") && error.contains(&refused_as) {
            break error;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no 403 naming {refused_as} in /status within two scrape periods: {status}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!("RBAC error in /status: {shown}");

    // The DaemonSet would come back on the next node: remove what was
    // applied (the namespace is the plane's own).
    let mut applied = objects;
    if let Some(items) = applied["items"].as_array_mut() {
        items.retain(|o| o["kind"] != "Namespace");
    }
    node.kubectl(
        &["delete", "--wait=false", "-f", "-"],
        Some(&applied.to_string()),
    )?;
    node.kubectl(
        &["delete", "--wait=false", "-f", "-"],
        Some(&ksm.to_string()),
    )?;
    node.down()?;
    Ok(())
}

/// The numbers of the workload's `line N` documents shipped by `agent`
/// (every agent when `None`).
fn counter_lines(docs: &[Value], agent: Option<&str>) -> Vec<u64> {
    docs.iter()
        .filter(|d| d["kubernetes"]["pod"]["name"] == "counter")
        .filter(|d| agent.is_none_or(|a| d["agent"]["name"] == a))
        .filter_map(|d| {
            d["message"]
                .as_str()?
                .strip_prefix("line ")?
                .trim()
                .parse()
                .ok()
        })
        .collect()
}

/// The workload's lines among `docs`: the first and last number, how many
/// were shipped and how many of those again, and the numbers missing
/// between the first and the last.
struct LineTally {
    lo: u64,
    hi: u64,
    shipped: usize,
    repeated: usize,
    missing: Vec<u64>,
}

fn workload_lines(docs: &[Value]) -> Result<LineTally> {
    let mut lines = counter_lines(docs, None);
    let shipped = lines.len();
    lines.sort_unstable();
    lines.dedup();
    let (&lo, &hi) = (
        lines.first().context("no workload line shipped")?,
        lines.last().context("a last line")?,
    );
    let missing = (lo..=hi)
        .filter(|n| lines.binary_search(n).is_err())
        .collect();
    Ok(LineTally {
        lo,
        hi,
        shipped,
        repeated: shipped - lines.len(),
        missing,
    })
}

/// Each of `pods`' leader-gated documents in `state`, by their own
/// timestamps: every pod's last document comes before its successor's
/// first (asserted, each `steps[i]` printed with its gap); the gaps in µs.
fn gated_gaps(state: &[Value], pods: &[String], steps: &[&str]) -> Result<Vec<i64>> {
    let span = |who: &str| -> Result<(i64, i64)> {
        let times: Vec<i64> = state
            .iter()
            .filter(|d| d["agent"]["name"] == who)
            .filter_map(|d| agents::parse_ts(d["@timestamp"].as_str()?).ok())
            .collect();
        Ok((
            *times
                .iter()
                .min()
                .with_context(|| format!("{who}'s gated documents"))?,
            *times.iter().max().context("a time")?,
        ))
    };
    let mut gaps = Vec::new();
    for (step, pair) in steps.iter().zip(pods.windows(2)) {
        let ((_, old_last), (new_first, _)) = (span(&pair[0])?, span(&pair[1])?);
        println!(
            "{step}: {} -> {}, gated data gap {} ms",
            pair[0],
            pair[1],
            (new_first - old_last) / 1000
        );
        assert!(
            old_last < new_first,
            "{step}: {}'s gated documents overlap its successor's",
            pair[0]
        );
        gaps.push(new_first - old_last);
    }
    Ok(gaps)
}

/// The shipped Helm chart installed as release `leasehold` in a namespace,
/// by the plane's admin, as a user runs `helm`.
struct Release {
    kubeconfig: std::path::PathBuf,
    namespace: &'static str,
    values: std::path::PathBuf,
}

impl Release {
    fn chart() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/helm/leasehold")
    }

    /// `helm install` with `values` (written to a file under `work`).
    fn install(
        plane: &ControlPlane,
        work: &std::path::Path,
        namespace: &'static str,
        values: &Value,
    ) -> Result<Release> {
        let release = Release {
            kubeconfig: plane.admin_kubeconfig(),
            namespace,
            values: work.join(format!("{namespace}-values.json")),
        };
        std::fs::write(&release.values, values.to_string())?;
        release.with_chart("install", &["--create-namespace"])?;
        Ok(release)
    }

    /// `helm upgrade` with the same values and `extra` arguments.
    fn upgrade(&self, extra: &[&str]) -> Result<()> {
        self.with_chart("upgrade", extra)
    }

    fn uninstall(&self) -> Result<()> {
        self.helm(&["uninstall", "leasehold", "-n", self.namespace, "--wait"])
    }

    fn with_chart(&self, command: &str, extra: &[&str]) -> Result<()> {
        let chart = Self::chart();
        let mut args = vec![
            command,
            "leasehold",
            chart.to_str().context("chart path")?,
            "-n",
            self.namespace,
            "--values",
            self.values.to_str().context("values path")?,
        ];
        args.extend_from_slice(extra);
        self.helm(&args)
    }

    fn helm(&self, args: &[&str]) -> Result<()> {
        let mut all = vec![
            "--kubeconfig",
            self.kubeconfig.to_str().context("kubeconfig path")?,
        ];
        all.extend_from_slice(args);
        leasehold_testkit::tools::run(&leasehold_testkit::tools::helm()?, &all, None).map(drop)
    }
}

/// Waits for the Ready pod of `selector` that replaced `old`; its name.
async fn replacement(node: &Node, namespace: &str, selector: &str, old: &str) -> Result<String> {
    let deadline = std::time::Instant::now() + POD_READY;
    loop {
        let ready = node.wait_ready(namespace, selector, 1, POD_READY).await?;
        if let Some(p) = ready.into_iter().find(|p| p != old) {
            return Ok(p);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no pod replaced {old}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The namespace of the Helm release (the plane's own `leasehold` holds a
/// Role of the chart's name).
const HELM_NS: &str = "leasehold-helm";

/// The Helm chart (with its data on a host directory, as the chart
/// documents for keeping the registry across pod replacements): the
/// leading pod is replaced three ways, as an admin would: `kubectl delete
/// pod`, `kubectl rollout restart`, `helm upgrade` to a new image tag. Each
/// time the DaemonSet's next pod takes the Lease, and from the documents:
/// the pods' leader-gated data does not overlap in time (the gaps are
/// printed), and every line the workload printed is shipped, none lost
/// across the replacements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_leading_pod_on_a_real_node_hands_over_and_loses_no_log_line() -> Result<()> {
    let _one = NODE.lock().await;
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let node = Node::up(plane, std::path::Path::new(agents::binary()))?;
    start_counter(&node)?;
    let api = plane.apiserver_addr();
    let data = node.work().join("agent-data");
    let values = json!({
        "image": {"pullPolicy": "Never"},
        "hostNetwork": true,
        "monitoring": {"port": MONITORING_PORT},
        "data": {"hostPath": data},
        "extraEnv": [
            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": api.port().to_string()},
            {"name": "API_SERVER", "value": format!("https://{api}")},
            {"name": "ES_HOSTS", "value": sink.url()},
            {"name": "KSM_HOST", "value": ksm_host(plane)?},
        ],
    });
    let release = Release::install(plane, node.work(), HELM_NS, &values)?;
    let selector = "app.kubernetes.io/name=leasehold";
    let first = node.wait_ready(HELM_NS, selector, 1, POD_READY).await?[0].clone();
    node.wait_ready("default", "app=counter", 1, POD_READY)
        .await?;
    let lease = "leasehold-leader";
    wait_holder(&node, HELM_NS, lease, &first, Duration::from_secs(60)).await?;
    let logs_index = "logs-kubernetes.container_logs-default";
    let fields = ["message", "kubernetes.pod.name", "agent.name"];
    let state_index = "metrics-kubernetes.state_pod-default";
    // What a leading pod ships: the workload's logs and gated data.
    let shipping = |pod: &str, which: &str| -> Result<()> {
        wait_docs(
            &sink,
            logs_index,
            &fields,
            Duration::from_secs(60),
            &format!("the {which} pod ships the workload's logs"),
            |d| counter_lines(d, Some(pod)).len() >= 10,
        )?;
        wait_docs(
            &sink,
            state_index,
            &["agent.name"],
            Duration::from_secs(60),
            &format!("the {which} pod ships kube-state-metrics"),
            |d| d.iter().any(|x| x["agent"]["name"] == pod),
        )?;
        Ok(())
    };
    shipping(&first, "first")?;

    // Three ways a pod is replaced; each time the next pod must take the
    // Lease and ship.
    let next_tag = "0.1.0-next";
    node.tag_image(
        AGENT_IMAGE,
        &format!("ghcr.io/leasehold/leasehold:{next_tag}"),
    )?;
    let mut pods = vec![first.clone()];
    let steps = [
        "kubectl delete pod",
        "kubectl rollout restart",
        "helm upgrade of the image",
    ];
    for step in steps {
        let before = pods.last().context("a pod")?.clone();
        match step {
            "kubectl delete pod" => {
                node.kubectl(
                    &["delete", "pod", "-n", HELM_NS, &before, "--wait=false"],
                    None,
                )?;
            }
            "kubectl rollout restart" => {
                node.kubectl(
                    &["rollout", "restart", "daemonset/leasehold", "-n", HELM_NS],
                    None,
                )?;
            }
            _ => release.upgrade(&["--set", &format!("image.tag={next_tag}")])?,
        }
        let after = replacement(&node, HELM_NS, selector, &before).await?;
        wait_holder(&node, HELM_NS, lease, &after, Duration::from_secs(60)).await?;
        shipping(&after, step)?;
        pods.push(after);
    }
    let last: Value = serde_json::from_str(&node.kubectl(
        &[
            "get",
            "pod",
            "-n",
            HELM_NS,
            pods.last().context("a pod")?,
            "-o",
            "json",
        ],
        None,
    )?)?;
    assert_eq!(
        last["spec"]["containers"][0]["image"],
        format!("ghcr.io/leasehold/leasehold:{next_tag}"),
        "the upgraded pod runs the new image"
    );

    // Every line from the first to the last shipped is there.
    let t = workload_lines(&sources(&sink, logs_index, &fields)?)?;
    println!(
        "workload lines {}..={} across {} pods: {} shipped, {} repeated, {} missing",
        t.lo,
        t.hi,
        pods.len(),
        t.shipped,
        t.repeated,
        t.missing.len(),
    );
    // Each pod's gated documents, by their own timestamps: every pod's
    // end before its successor's first, the gap printed.
    let state = sources(&sink, state_index, &["agent.name", "@timestamp"])?;
    gated_gaps(&state, &pods, &steps)?;
    assert!(
        t.missing.is_empty(),
        "lines lost across the pod replacements: {:?}",
        t.missing
    );
    assert_eq!(t.lo, 1, "the workload's first line");
    release.uninstall()?;
    node.down()?;
    Ok(())
}

/// The namespace of the several-pods election.
const ELECTION_NS: &str = "leasehold-election";

/// Elections among several pods: one node runs one DaemonSet pod, so two
/// more agent pods of the same image run as a Deployment (same
/// ServiceAccount, the policy the chart rendered, the same Lease). Each pod
/// writes its leader-gated `state_pod` (every second) to a file on a host
/// directory, so nothing collapses: every document of every pod is judged.
/// The leading DaemonSet pod is deleted (one of the three others takes
/// over), then the node is drained (`kubectl drain --ignore-daemonsets`:
/// the Deployment's pods are evicted, the DaemonSet's stays and ends up
/// leading) and uncordoned (the Deployment's pods come back as candidates
/// and leadership stays where it is). No two pods' gated documents overlap
/// in time; each handover's gap is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_a_real_node_elect_one_leader_through_a_deletion_and_a_drain() -> Result<()> {
    let _one = NODE.lock().await;
    let plane = ControlPlane::shared();
    let node = Node::up(plane, std::path::Path::new(agents::binary()))?;
    let api = plane.apiserver_addr();
    let ksm = ksm_host(plane)?;
    // Host directories the pods write to (the DaemonSet's through the
    // chart's data.hostPath, which the chart hands to the agent's user).
    let ds_data = node.work().join("ds-data");
    let extra_data = node.work().join("extra-data");
    std::fs::create_dir_all(&extra_data)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&extra_data, std::fs::Permissions::from_mode(0o777))?;
    }
    let env = |out_root: &str| {
        json!([
            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": api.port().to_string()},
            {"name": "KSM_HOST", "value": ksm},
            {"name": "OUT_DIR", "value": format!("{out_root}/out/$(POD_NAME)")},
        ])
    };
    let values = json!({
        "image": {"pullPolicy": "Never"},
        "hostNetwork": true,
        "monitoring": {"port": MONITORING_PORT},
        "data": {"hostPath": ds_data},
        "extraEnv": env("/var/lib/leasehold"),
        "policy": {
            "outputs": {"default": {
                "type": "file", "path": "${env.OUT_DIR}", "filename": "events",
                "hosts": null, "username": null, "password": null,
            }},
            "inputs": [{
                "id": "cluster-state", "type": "kubernetes/metrics",
                "condition": "${kubernetes_leaderelection.leader} == true",
                "streams": [{"metricsets": ["state_pod"], "hosts": ["${env.KSM_HOST}"], "period": "1s"}],
            }],
        },
    });
    let release = Release::install(plane, node.work(), ELECTION_NS, &values)?;
    let ds_selector = "app.kubernetes.io/name=leasehold";
    let lease = "leasehold-leader";
    let first = node
        .wait_ready(ELECTION_NS, ds_selector, 1, POD_READY)
        .await?[0]
        .clone();
    wait_holder(&node, ELECTION_NS, lease, &first, Duration::from_secs(60)).await?;

    // The Deployment: the chart's ServiceAccount and policy, its own
    // data and output directories, no monitoring port (host network).
    let extra_labels = json!({"app": "leasehold-candidates"});
    let mut extra_env = vec![
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
        json!({"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}),
    ];
    extra_env.extend(
        env("/var/lib/leasehold")
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    let extras = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "leasehold-candidates", "namespace": ELECTION_NS},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": extra_labels},
            "template": {"metadata": {"labels": extra_labels}, "spec": {
                "serviceAccountName": "leasehold",
                "hostNetwork": true,
                "terminationGracePeriodSeconds": 40,
                "securityContext": {"runAsUser": 65532, "runAsGroup": 65532},
                "containers": [{
                    "name": "leasehold", "image": AGENT_IMAGE, "imagePullPolicy": "Never",
                    "args": ["run", "-c", "/etc/leasehold/leasehold.yml",
                             "--path.data", "/var/lib/leasehold/data/$(POD_NAME)"],
                    "env": extra_env,
                    "volumeMounts": [
                        {"name": "policy", "mountPath": "/etc/leasehold", "readOnly": true},
                        {"name": "data", "mountPath": "/var/lib/leasehold"},
                    ],
                }],
                "volumes": [
                    {"name": "policy", "configMap": {"name": "leasehold-policy"}},
                    {"name": "data", "hostPath": {"path": extra_data, "type": "Directory"}},
                ],
            }},
        },
    });
    node.kubectl(&["apply", "-f", "-"], Some(&extras.to_string()))?;
    let extra_selector = "app=leasehold-candidates";
    node.wait_ready(ELECTION_NS, extra_selector, 2, POD_READY)
        .await?;

    let dirs = [ds_data.join("out"), extra_data.join("out")];
    leads_and_writes(&node, &dirs, &first, 0).await?;

    // The leading DaemonSet pod goes: one of the three candidates left
    // takes the Lease.
    let at = agents::now_us();
    node.kubectl(
        &["delete", "pod", "-n", ELECTION_NS, &first, "--wait=false"],
        None,
    )?;
    let second_ds = replacement(&node, ELECTION_NS, ds_selector, &first).await?;
    let holder = {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let lease_obj: Value = serde_json::from_str(&node.kubectl(
                &["get", "lease", "-n", ELECTION_NS, lease, "-o", "json"],
                None,
            )?)?;
            let h = lease_obj["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if !h.is_empty() && h != first {
                break h;
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "nobody took over from {first}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    leads_and_writes(&node, &dirs, &holder, at).await?;
    let after_delete = if holder == second_ds {
        "the DaemonSet's next pod"
    } else {
        "a Deployment pod"
    };
    println!("{first} deleted: {holder} ({after_delete}) leads");

    // Drain: the DaemonSet's pod stays, the Deployment's are evicted; the
    // DaemonSet's pod leads at the end.
    let at = agents::now_us();
    node.kubectl(
        &[
            "drain",
            "127.0.0.1",
            "--ignore-daemonsets",
            "--timeout=120s",
        ],
        None,
    )?;
    leads_and_writes(&node, &dirs, &second_ds, at).await?;
    println!("drained: {second_ds} leads");
    // Uncordon: the Deployment's pods come back as candidates; the leader
    // stays.
    node.kubectl(&["uncordon", "127.0.0.1"], None)?;
    node.wait_ready(ELECTION_NS, extra_selector, 2, POD_READY)
        .await?;
    let at = agents::now_us();
    leads_and_writes(&node, &dirs, &second_ds, at).await?;

    let all = pod_events(&dirs)?;
    let ranges = agents::check_one_at_a_time(&all, "cluster-state")?;
    for w in ranges.windows(2) {
        println!(
            "{} (term {}) -> {} (term {}): gated data gap {} ms",
            w[0].agent,
            w[0].term,
            w[1].agent,
            w[1].term,
            (w[1].first - w[0].last) / 1000
        );
    }
    anyhow::ensure!(
        ranges.iter().filter(|r| r.agent == second_ds).count() >= 1,
        "the DaemonSet's pod led after the drain: {ranges:#?}"
    );
    node.kubectl(
        &["delete", "-f", "-", "--wait=false"],
        Some(&extras.to_string()),
    )?;
    release.uninstall()?;
    node.down()?;
    Ok(())
}

/// The events every pod wrote to its file under `roots` (`ROOT/POD/`).
fn pod_events(roots: &[std::path::PathBuf]) -> Result<Vec<agents::Ev>> {
    let mut all = Vec::new();
    for root in roots.iter().filter(|r| r.exists()) {
        for pod in std::fs::read_dir(root)? {
            all.extend(agents::read_events(&pod?.path())?);
        }
    }
    Ok(all)
}

/// Waits until `pod` holds the election's Lease and has written gated data
/// stamped after `from` (microseconds).
async fn leads_and_writes(
    node: &Node,
    roots: &[std::path::PathBuf],
    pod: &str,
    from: i64,
) -> Result<()> {
    wait_holder(
        node,
        ELECTION_NS,
        "leasehold-leader",
        pod,
        Duration::from_secs(60),
    )
    .await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !pod_events(roots)?
        .iter()
        .any(|e| e.agent == pod && e.input == "cluster-state" && e.at > from)
    {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{pod} leads but wrote no gated data"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// The kubelet metricsets against the node's real kubelet: an agent with a
/// ServiceAccount token granted `nodes/stats` (and the kubelet's own serving
/// certificate as its CA) reads `/stats/summary` and writes the node, the
/// workload's pod, its container and its `emptyDir` volume, and every
/// system container the kubelet reports, with Elastic's field names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_metricsets_on_a_real_node_read_its_summary() -> Result<()> {
    let _one = NODE.lock().await;
    let plane = ControlPlane::shared();
    let node = Node::up(plane, std::path::Path::new(agents::binary()))?;
    start_counter(&node)?;
    node.wait_ready("default", "app=counter", 1, POD_READY)
        .await?;
    // An account that may read the kubelet's stats, and nothing else.
    let dir = tempfile::tempdir()?;
    let (rbac, text) = account_with(
        &node,
        "kubelet-reader",
        json!([{"apiGroups": [""], "resources": ["nodes/stats"], "verbs": ["get"]}]),
        dir.path(),
    )?;
    let token = dir.path().join("token");
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: kubelet\n    type: kubernetes/metrics\n    streams:\n      - metricsets: [node, pod, container, volume, system]\n        hosts: ['https://127.0.0.1:{}']\n        bearer_token_file: '{}'\n        ssl.certificate_authorities: ['{}']\n        period: 2s\n        add_metadata: true\n",
            out.display(),
            leasehold_testkit::node::KUBELET_PORT,
            token.display(),
            node.work().join("kubelet/pki/kubelet.crt").display(),
        ),
    )?;
    // `add_metadata`: the agent (agent 2 of the plane) may read pods,
    // nodes and namespaces, for labels and the percentages.
    let k = 2;
    let reader = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "leasehold-test-metadata-reader"},
         "rules": [{"apiGroups": [""], "resources": ["pods", "nodes", "namespaces"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "leasehold-test-metadata-reader"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "leasehold-test-metadata-reader"},
         "subjects": [{"kind": "User", "name": ControlPlane::agent_user(k)}]},
    ]});
    node.kubectl(&["apply", "-f", "-"], Some(&reader.to_string()))?;
    let agent = agents::AgentProc::start(&policy, &plane.agent_kubeconfig(k), k, "default", &out)?;
    let read = || agents::docs::file_docs(&out);
    let of = |d: &[Value], dataset: &str, f: &dyn Fn(&Value) -> bool| -> Option<Value> {
        d.iter()
            .find(|e| e["data_stream"]["dataset"] == dataset && f(e))
            .cloned()
    };
    let counter = |e: &Value| e["kubernetes"]["pod"]["name"] == "counter";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let d = loop {
        let d = read()?;
        let seen = [
            of(&d, "kubernetes.node", &|e| {
                e["kubernetes"]["node"]["name"] == "127.0.0.1"
            }),
            of(&d, "kubernetes.pod", &counter),
            of(&d, "kubernetes.container", &counter),
            of(&d, "kubernetes.volume", &|e| {
                counter(e) && e["kubernetes"]["volume"]["name"] == "scratch"
            }),
        ];
        if seen.iter().all(Option::is_some) {
            break seen.map(Option::unwrap_or_default);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "not every kubelet dataset seen: {seen:?}; agent log: {}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let [n, _, _, volume] = d;
    // With add_metadata, the pod's and container's usage relative to the
    // node's allocatable and the container's limits (500m, 64Mi), once
    // the node and its pods are watched.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (pod, container) = loop {
        let d = read()?;
        let pct =
            |e: &Value, t: &str| e["kubernetes"][t]["cpu"]["usage"]["limit"]["pct"].is_number();
        if let (Some(p), Some(c)) = (
            of(&d, "kubernetes.pod", &|e| counter(e) && pct(e, "pod")),
            of(&d, "kubernetes.container", &|e| {
                counter(e) && pct(e, "container")
            }),
        ) {
            break (p, c);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no percentages in the counter's documents; agent log: {}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let node_obj: Value =
        serde_json::from_str(&node.kubectl(&["get", "node", "127.0.0.1", "-o", "json"], None)?)?;
    let cores: f64 = node_obj["status"]["allocatable"]["cpu"]
        .as_str()
        .and_then(|c| c.parse().ok())
        .context("allocatable cores")?;
    for (e, t) in [(&pod, "pod"), (&container, "container")] {
        let k = &e["kubernetes"][t];
        let used = k["cpu"]["usage"]["nanocores"]
            .as_f64()
            .context("nanocores")?
            / 1e9;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        let limit_pct = k["cpu"]["usage"]["limit"]["pct"]
            .as_f64()
            .context("limit pct")?;
        assert!(close(limit_pct, used / 0.5), "{t}: {e}");
        let node_pct = k["cpu"]["usage"]["node"]["pct"]
            .as_f64()
            .context("node pct")?;
        assert!(close(node_pct, used / cores), "{t}: {e}");
        let bytes = k["memory"]["usage"]["bytes"]
            .as_f64()
            .context("memory bytes")?;
        let mem_pct = k["memory"]["usage"]["limit"]["pct"]
            .as_f64()
            .context("memory pct")?;
        assert!(close(mem_pct, bytes / (64.0 * 1024.0 * 1024.0)), "{t}: {e}");
    }
    // And the pod's labels (its namespace has none here).
    assert_eq!(pod["kubernetes"]["labels"]["app"], "counter", "{pod}");
    assert!(
        n["kubernetes"]["node"]["cpu"]["usage"]["core"]["ns"].is_number(),
        "{n}"
    );
    assert!(
        n["kubernetes"]["node"]["fs"]["capacity"]["bytes"].is_number(),
        "{n}"
    );
    assert_eq!(pod["kubernetes"]["namespace"], "default", "{pod}");
    assert_eq!(pod["kubernetes"]["node"]["name"], "127.0.0.1", "{pod}");
    assert!(pod["kubernetes"]["pod"]["uid"].is_string(), "{pod}");
    assert_eq!(
        container["kubernetes"]["container"]["name"], "count",
        "{container}"
    );
    assert!(
        container["kubernetes"]["container"]["memory"]["workingset"]["bytes"].is_number(),
        "{container}"
    );
    assert!(
        volume["kubernetes"]["volume"]["fs"]["capacity"]["bytes"].is_number(),
        "{volume}"
    );
    // Every system container the kubelet reports (this node's kubelet is
    // given no system cgroups, so it may report none) has its document.
    let summary: Value = serde_json::from_str(&node.kubelet_get("/stats/summary", text.trim())?)?;
    let reported: std::collections::BTreeSet<String> = summary["node"]["systemContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect();
    let written: std::collections::BTreeSet<String> = read()?
        .iter()
        .filter(|e| e["data_stream"]["dataset"] == "kubernetes.system")
        .filter_map(|e| {
            e["kubernetes"]["system"]["container"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(written, reported, "system containers");
    println!("kubelet: system containers reported: {reported:?}");
    for e in [&n, &pod, &container, &volume] {
        assert_eq!(e["event"]["module"], "kubernetes", "{e}");
        assert_eq!(e["metricset"]["period"], 2000, "{e}");
    }
    println!(
        "kubelet: node cpu {} nanocores; pod counter memory {} bytes",
        n["kubernetes"]["node"]["cpu"]["usage"]["nanocores"],
        pod["kubernetes"]["pod"]["memory"]["usage"]["bytes"]
    );
    drop(agent);
    for objects in [&rbac, &reader] {
        node.kubectl(
            &["delete", "--wait=false", "-f", "-"],
            Some(&objects.to_string()),
        )?;
    }
    node.down()?;
    Ok(())
}

/// A ServiceAccount `name` in `default` allowed `rules` (a ClusterRole and
/// its binding, named after it), and a 10-minute token of it written to
/// `dir/token`: what a pod's own token would be. Returns the objects (to
/// delete them) and the token's text.
fn account_with(
    node: &Node,
    name: &str,
    rules: Value,
    dir: &std::path::Path,
) -> Result<(Value, String)> {
    let role = format!("leasehold-test-{name}");
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": "default"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": role}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}]},
    ]});
    node.kubectl(&["apply", "-f", "-"], Some(&rbac.to_string()))?;
    let text = node.kubectl(
        &["create", "token", name, "-n", "default", "--duration=10m"],
        None,
    )?;
    std::fs::write(dir.join("token"), text.trim())?;
    Ok((rbac, text.trim().to_string()))
}

/// A pod of busybox containers, each printing `<name> 1` … `<name> 40`,
/// then `<name> bye` when told to stop.
fn talker(namespace: &str, pod: &str, containers: &[&str]) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .map(|c| {
            json!({
                "name": c, "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", format!(
                    "trap 'echo \"{c} bye\"; exit 0' TERM; i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo \"{c} $i\"; done; while :; do sleep 0.2; done"
                )],
            })
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": pod, "tier": "test"}},
        "spec": {"terminationGracePeriodSeconds": 10, "containers": containers},
    })
}

/// The real node, the namespace `ns` whose pods the agent may read, and a
/// directory for the test's policy and output.
fn provider_node(ns: &str) -> Result<(&'static ControlPlane, Node, tempfile::TempDir)> {
    let plane = ControlPlane::shared();
    let node = Node::up(plane, std::path::Path::new(agents::binary()))?;
    node.kubectl(&["apply", "-f", "-"], Some(&pod_reader(ns).to_string()))?;
    Ok((plane, node, tempfile::tempdir()?))
}

/// A namespace whose pods the agent may get, list and watch, and no more
/// (least privilege).
fn pod_reader(ns: &str) -> Value {
    let mut items =
        vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})];
    for mut object in agents::access::reader_role("pod-reader", &["pods"], &[1]) {
        object["metadata"]["namespace"] = json!(ns);
        items.push(object);
    }
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// Elastic's standalone manifest's container-log input, with its keys: the
/// `kubernetes` provider makes one input per container of the pods of this
/// node (here of one namespace), started when the container appears and
/// stopped `cleanup_timeout` after its pod is deleted, after the lines it
/// wrote while stopping are shipped. Each document carries the pod's
/// metadata as Elastic's fields. An input that reads no `kubernetes`
/// variable keeps running through all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_logs_on_a_real_node_become_one_input_per_container() -> Result<()> {
    let _one = NODE.lock().await;
    let ns = "provider-logs";
    let (plane, node, dir) = provider_node(ns)?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            r#"providers:
  kubernetes:
    node: 127.0.0.1
    scope: node
    namespace: {ns}
    cleanup_timeout: 3s
outputs:
  default: {{type: file, path: '{out}', filename: events}}
inputs:
  - id: container-log-${{kubernetes.pod.name}}-${{kubernetes.container.id}}
    type: filestream
    use_output: default
    meta: {{package: {{name: kubernetes, version: 1.52.0}}}}
    data_stream: {{namespace: default}}
    streams:
      - id: container-log-${{kubernetes.pod.name}}-${{kubernetes.container.id}}
        data_stream: {{dataset: kubernetes.container_logs, type: logs}}
        prospector.scanner.symlinks: true
        parsers:
          - container: ~
        paths:
          - /var/log/containers/*${{kubernetes.container.id}}.log
  - id: steady
    type: exec
    command: [sh, -c, 'echo up; exec sleep 600']
"#,
            out = out.display()
        ),
    )?;
    let agent = agents::AgentProc::start_alone(plane, &policy, &out)?;
    let read = || agents::docs::file_docs(&out);
    let lines_of = |docs: &[Value], pod: &str, container: &str| -> Vec<String> {
        docs.iter()
            .filter(|d| {
                d["kubernetes"]["pod"]["name"] == pod
                    && d["kubernetes"]["container"]["name"] == container
            })
            .filter_map(|d| d["message"].as_str().map(str::to_string))
            .collect()
    };
    let running = |agent: &agents::AgentProc| -> Result<Vec<Value>> {
        Ok(agent.status()?["inputs"]["running"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    };
    let steady_since = || -> Result<String> {
        let r = running(&agent)?;
        let s = r
            .iter()
            .find(|i| i["id"] == "steady")
            .context("the steady input runs")?;
        Ok(s["since"].as_str().unwrap_or_default().to_string())
    };
    // Before any pod: the input waits for a mapping, and says so.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let since = loop {
        let status = agent.status()?;
        let dropped = status["inputs"]["dropped"].to_string();
        if let (true, Ok(since)) = (dropped.contains("publishes nothing yet"), steady_since()) {
            break since;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the inputs are not rendered: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    node.kubectl(
        &["apply", "-f", "-"],
        Some(&talker(ns, "talker", &["a", "b"]).to_string()),
    )?;
    node.wait_ready(ns, "tier=test", 1, POD_READY).await?;
    let want = |c: &str| -> Vec<String> { (1..=40).map(|i| format!("{c} {i}")).collect() };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let docs = loop {
        let d = read()?;
        if lines_of(&d, "talker", "a").len() >= 40 && lines_of(&d, "talker", "b").len() >= 40 {
            break d;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "not all lines of talker shipped; status: {}; log: {}",
            agent.status()?,
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(
        lines_of(&docs, "talker", "a"),
        want("a"),
        "each line once, in order"
    );
    assert_eq!(lines_of(&docs, "talker", "b"), want("b"));
    let pod: Value = serde_json::from_str(
        &node.kubectl(&["get", "pod", "-n", ns, "talker", "-o", "json"], None)?,
    )?;
    let uid = pod["metadata"]["uid"].as_str().context("uid")?.to_string();
    for c in ["a", "b"] {
        let status = pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == c)
            .context("container status")?;
        let cid = status["containerID"]
            .as_str()
            .and_then(|s| s.strip_prefix("containerd://"))
            .context("containerd id")?;
        let d = docs
            .iter()
            .find(|d| d["kubernetes"]["container"]["name"] == c)
            .context("a document")?;
        // Elastic's fields, from the provider's watch of the pod.
        assert_eq!(d["container"]["id"], cid, "{d}");
        assert_eq!(d["container"]["runtime"], "containerd", "{d}");
        assert_eq!(d["container"]["image"]["name"], BUSYBOX_IMAGE, "{d}");
        assert_eq!(d["kubernetes"]["namespace"], ns, "{d}");
        assert_eq!(d["kubernetes"]["pod"]["uid"], uid.as_str(), "{d}");
        assert!(d["kubernetes"]["pod"]["ip"].is_string(), "{d}");
        assert_eq!(d["kubernetes"]["node"]["name"], "127.0.0.1", "{d}");
        assert_eq!(
            d["kubernetes"]["labels"]["app_kubernetes_io/name"], "talker",
            "{d}"
        );
        assert_eq!(d["kubernetes"]["labels"]["tier"], "test", "{d}");
        assert_eq!(
            d["data_stream"]["dataset"], "kubernetes.container_logs",
            "{d}"
        );
        assert_eq!(d["stream"], "stdout", "{d}");
        assert_eq!(
            d["input"]["id"],
            format!("container-log-talker-{cid}-kubernetes-{uid}.{c}"),
            "{d}"
        );
        assert!(
            d["log"]["file"]["path"]
                .as_str()
                .is_some_and(|p| p.ends_with(&format!("{cid}.log"))),
            "{d}"
        );
    }
    let dynamic_ids = |r: &[Value]| -> Vec<String> {
        r.iter()
            .filter_map(|i| i["id"].as_str())
            .filter(|id| id.starts_with("container-log-"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(dynamic_ids(&running(&agent)?).len(), 2);

    // The pod goes: its containers print a last line while stopping; the
    // inputs ship it, then stop once the cleanup timeout passed.
    node.kubectl(&["delete", "pod", "-n", ns, "talker", "--wait=false"], None)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let d = read()?;
        let byes = ["a", "b"]
            .iter()
            .filter(|c| lines_of(&d, "talker", c).contains(&format!("{c} bye")))
            .count();
        if byes == 2 && dynamic_ids(&running(&agent)?).is_empty() {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "talker's last lines shipped and its inputs stopped: {byes} of 2 lines; running {:?}",
            dynamic_ids(&running(&agent)?)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // A new pod: a new input, its lines shipped.
    node.kubectl(
        &["apply", "-f", "-"],
        Some(&talker(ns, "talker-2", &["c"]).to_string()),
    )?;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        if lines_of(&read()?, "talker-2", "c").len() >= 40 {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "talker-2's lines not shipped; status: {}",
            agent.status()?
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(lines_of(&read()?, "talker-2", "c"), want("c"));
    // Nothing was shipped twice, and the input that reads no `kubernetes`
    // variable was never restarted.
    let all = read()?;
    assert_eq!(
        lines_of(&all, "talker", "a"),
        [want("a"), vec!["a bye".to_string()]].concat()
    );
    assert_eq!(steady_since()?, since, "the steady input kept running");
    println!(
        "provider: talker (a, b) and talker-2 (c): {} documents, inputs now {:?}",
        all.len(),
        dynamic_ids(&running(&agent)?)
    );
    drop(agent);
    node.kubectl(&["delete", "namespace", ns, "--wait=false"], None)?;
    node.down()?;
    Ok(())
}

/// Filebeat's and Metricbeat's own hints on real pods: `co.elastic.logs/*`
/// builds the container's log input (multiline joined, excluded lines
/// gone, each line once, in place of the default `container_logs` input
/// of Elastic Agent's hints, which still reads the unannotated pod), and
/// `co.elastic.metrics/*` scrapes the port the pod declares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beats_hints_on_a_real_node_build_log_and_metrics_inputs() -> Result<()> {
    let _one = NODE.lock().await;
    let ns = "provider-beats-hints";
    let (plane, node, dir) = provider_node(ns)?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    // Elastic's `container_logs` hints template, with its keys.
    std::fs::write(
        &policy,
        format!(
            r#"providers:
  kubernetes:
    node: 127.0.0.1
    namespace: {ns}
    cleanup_timeout: 3s
    hints.enabled: true
outputs:
  default: {{type: file, path: '{out}', filename: events}}
inputs:
  - id: filestream-container-logs-${{kubernetes.hints.container_id}}
    type: filestream
    use_output: default
    streams:
      - id: kubernetes-container-logs-${{kubernetes.hints.container_id}}
        condition: ${{kubernetes.hints.container_logs.enabled}} == true
        data_stream: {{dataset: kubernetes.container_logs, type: logs}}
        parsers:
          - container: {{format: auto, stream: all}}
        paths:
          - /var/log/containers/*${{kubernetes.hints.container_id}}.log
        prospector.scanner.symlinks: true
"#,
            out = out.display()
        ),
    )?;
    let agent = agents::AgentProc::start_alone(plane, &policy, &out)?;
    let serve = "mkdir -p /tmp/www && printf 'hinted_up 1\\n' > /tmp/www/metrics && httpd -p 9100 -h /tmp/www";
    let lines = r"echo '[1] first'; echo '  detail a'; echo '[DEBUG] noise'; echo '[2] second'; echo '  detail b'; echo '[3] third'";
    let pods = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "hinted", "namespace": ns, "labels": {"app": "hinted"},
                      "annotations": {
                          "co.elastic.logs/multiline.pattern": "^\\[",
                          "co.elastic.logs/multiline.negate": "true",
                          "co.elastic.logs/multiline.match": "after",
                          "co.elastic.logs/multiline.timeout": "1s",
                          "co.elastic.logs/exclude_lines": "^\\[DEBUG\\]",
                          "co.elastic.metrics/module": "prometheus",
                          "co.elastic.metrics/hosts": "${data.host}:9100",
                          "co.elastic.metrics/period": "1s",
                      }},
         "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
             "name": "app", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
             "ports": [{"containerPort": 9100, "name": "metrics"}],
             "command": ["sh", "-c", format!("{serve} && {lines}; exec sleep 600")],
         }]}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "plain", "namespace": ns, "labels": {"app": "plain"}},
         "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
             "name": "p", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
             "command": ["sh", "-c", "echo 'plain 1'; echo 'plain 2'; exec sleep 600"],
         }]}},
    ]});
    node.kubectl(&["apply", "-f", "-"], Some(&pods.to_string()))?;
    let read = || agents::docs::file_docs(&out);
    let of = |docs: &[Value], pod: &str| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["kubernetes"]["pod"]["name"] == pod)
            .cloned()
            .collect()
    };
    let messages = |docs: &[Value], pod: &str| -> Vec<String> {
        of(docs, pod)
            .iter()
            .filter(|d| d["data_stream"]["dataset"] == "kubernetes.container_logs")
            .filter_map(|d| d["message"].as_str().map(str::to_string))
            .collect()
    };
    let scraped = |docs: &[Value]| -> usize {
        of(docs, "hinted")
            .iter()
            .filter(|d| d["prometheus"]["metrics"]["hinted_up"] == 1)
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let docs = loop {
        let d = read()?;
        if messages(&d, "hinted").len() >= 3 && messages(&d, "plain").len() >= 2 && scraped(&d) >= 2
        {
            break d;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "hinted logs {:?}, plain logs {:?}, {} scrapes; status: {}; log: {}",
            messages(&d, "hinted"),
            messages(&d, "plain"),
            scraped(&d),
            agent.status()?,
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // Joined at the pattern, the excluded line gone, each event once: the
    // default input does not read the annotated container's file too.
    assert_eq!(
        messages(&docs, "hinted"),
        [
            "[1] first\n  detail a",
            "[2] second\n  detail b",
            "[3] third"
        ]
    );
    assert_eq!(messages(&docs, "plain"), ["plain 1", "plain 2"]);
    let pod: Value = serde_json::from_str(
        &node.kubectl(&["get", "pod", "-n", ns, "hinted", "-o", "json"], None)?,
    )?;
    let (uid, ip) = (
        pod["metadata"]["uid"].as_str().context("uid")?,
        pod["status"]["podIP"].as_str().context("pod ip")?,
    );
    let log = of(&docs, "hinted")
        .into_iter()
        .find(|d| d["message"] == "[3] third")
        .context("the last event")?;
    assert_eq!(
        log["input"]["id"],
        format!("hints-logs-0-kubernetes-{uid}.app"),
        "{log}"
    );
    assert_eq!(log["kubernetes"]["labels"]["app"], "hinted", "{log}");
    let scrape = of(&docs, "hinted")
        .into_iter()
        .find(|d| d["prometheus"]["metrics"]["hinted_up"] == 1)
        .context("a scrape")?;
    assert_eq!(
        scrape["data_stream"]["dataset"], "prometheus.collector",
        "{scrape}"
    );
    assert!(
        scrape["service"]["address"]
            .as_str()
            .is_some_and(|a| a.contains(&format!("{ip}:9100"))),
        "{scrape}"
    );
    assert_eq!(scrape["kubernetes"]["container"]["name"], "app", "{scrape}");
    let plain = of(&docs, "plain").into_iter().next().context("plain")?;
    assert!(
        plain["input"]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("filestream-container-logs-")),
        "{plain}"
    );
    println!(
        "beats hints: hinted {:?}, plain {:?}, {} scrapes of {ip}:9100",
        messages(&docs, "hinted"),
        messages(&docs, "plain"),
        scraped(&docs)
    );
    drop(agent);
    node.kubectl(&["delete", "namespace", ns, "--wait=false"], None)?;
    node.down()?;
    Ok(())
}

/// The node's real kube-controller-manager and kube-scheduler serve their
/// `/metrics` over TLS to a token allowed `get` on `/metrics`: the
/// `controllermanager` and `scheduler` metricsets read them into Elastic's
/// fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_components_on_a_real_node_give_their_metricsets() -> Result<()> {
    let _one = NODE.lock().await;
    let plane = ControlPlane::shared();
    let node = Node::up(plane, std::path::Path::new(agents::binary()))?;
    let dir = tempfile::tempdir()?;
    let (rbac, _) = account_with(
        &node,
        "metrics-reader",
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
        dir.path(),
    )?;
    let token = dir.path().join("token");
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    // As Elastic's manifest writes these streams (https, the pod's token,
    // the components' self-signed serving certificates).
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: '{out}', filename: events}}\ninputs:\n  - id: control-plane\n    type: kubernetes/metrics\n    streams:\n      - data_stream: {{dataset: kubernetes.controllermanager, type: metrics}}\n        metricsets: [controllermanager]\n        hosts: ['https://127.0.0.1:19657']\n        period: 2s\n        bearer_token_file: '{token}'\n        ssl.verification_mode: none\n      - data_stream: {{dataset: kubernetes.scheduler, type: metrics}}\n        metricsets: [scheduler]\n        hosts: ['https://127.0.0.1:19659']\n        period: 2s\n        bearer_token_file: '{token}'\n        ssl.verification_mode: none\n",
            out = out.display(),
            token = token.display(),
        ),
    )?;
    let agent = agents::AgentProc::start_alone(plane, &policy, &out)?;
    let read = || agents::docs::file_docs(&out);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (cm, sched) = loop {
        let d = read()?;
        let of = |ms: &str| -> Vec<Value> {
            d.iter()
                .filter(|e| e["metricset"]["name"] == ms)
                .map(|e| e["kubernetes"][ms].clone())
                .collect()
        };
        let (cm, sched) = (of("controllermanager"), of("scheduler"));
        let has = |docs: &[Value], f: &dyn Fn(&Value) -> bool| docs.iter().any(f);
        if has(&cm, &|x| x["process"]["cpu"]["sec"].is_number())
            && has(&cm, &|x| x["workqueue"]["adds"]["count"].is_number())
            && has(&sched, &|x| {
                x["scheduling"]["pending"]["pods"]["count"].is_number()
            })
        {
            break (cm, sched);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "control-plane metricsets not seen: {} controllermanager, {} scheduler documents; status {}",
            cm.len(),
            sched.len(),
            agent.status()?
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // Workqueue documents are named by their queue; client requests by
    // code, host and method; the scheduler's queues by name.
    let wq = cm
        .iter()
        .find(|x| x["workqueue"]["adds"]["count"].is_number())
        .context("workqueue")?;
    assert!(wq["name"].is_string(), "{wq}");
    assert!(
        cm.iter()
            .any(|x| x["client"]["request"]["count"].is_number()
                && x["code"].is_string()
                && x["method"].is_string()),
        "{cm:?}"
    );
    assert!(
        cm.iter()
            .any(|x| x["client"]["request"]["duration"]["us"]["bucket"]["+Inf"].is_number()),
        "{cm:?}"
    );
    let queues: std::collections::BTreeSet<&str> = sched
        .iter()
        .filter(|x| x["scheduling"]["pending"]["pods"]["count"].is_number())
        .filter_map(|x| x["queue"].as_str())
        .collect();
    assert!(queues.contains("active"), "{queues:?}");
    assert!(
        sched
            .iter()
            .any(|x| x["process"]["memory"]["resident"]["bytes"].is_number()),
        "{sched:?}"
    );
    println!(
        "control plane: {} controllermanager and {} scheduler documents; scheduler queues {queues:?}",
        cm.len(),
        sched.len()
    );
    drop(agent);
    node.kubectl(
        &["delete", "--wait=false", "-f", "-"],
        Some(&rbac.to_string()),
    )?;
    node.down()?;
    Ok(())
}

/// The workload's log lines carry its pod, container and labels as
/// Elastic's fields.
fn counter_line_has_elastics_fields(sink: &TestSink) -> Result<()> {
    let logs = sources(
        sink,
        "logs-kubernetes.container_logs-default",
        &["kubernetes", "container", "message"],
    )?;
    let line = logs
        .iter()
        .find(|d| d["kubernetes"]["pod"]["name"] == "counter")
        .context("a counter line")?;
    assert_eq!(line["kubernetes"]["container"]["name"], "count", "{line}");
    assert_eq!(line["kubernetes"]["labels"]["app"], "counter", "{line}");
    assert_eq!(line["container"]["runtime"], "containerd", "{line}");
    Ok(())
}

/// Waits until every index of `expected` holds a document, creating an
/// Event for the `event` metricset once the leader ships `state_pod` (its
/// watch starts from then); fails after `within` with `what_then()`.
async fn wait_streams(
    node: &Node,
    sink: &TestSink,
    expected: &[&str],
    event: &str,
    within: Duration,
    what_then: impl Fn() -> String,
) -> Result<()> {
    let count =
        |index: &str| -> usize { sources(sink, index, &["@timestamp"]).map_or(0, |d| d.len()) };
    let mut event_made = false;
    let deadline = std::time::Instant::now() + within;
    loop {
        if !event_made && count("metrics-kubernetes.state_pod-default") > 0 {
            let now = jiff::Timestamp::now().to_string();
            node.kubectl(
                &["apply", "-f", "-"],
                Some(
                    &json!({"apiVersion": "v1", "kind": "Event",
                            "metadata": {"name": event, "namespace": "default"},
                            "involvedObject": {"kind": "Pod", "name": "counter", "namespace": "default"},
                            "reason": "Testing", "message": "an Event for the event metricset",
                            "type": "Normal", "firstTimestamp": now, "lastTimestamp": now})
                    .to_string(),
                ),
            )?;
            event_made = true;
        }
        let missing: Vec<&str> = expected.iter().copied().filter(|i| count(i) == 0).collect();
        if missing.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "data streams not in OpenSearch: {missing:?}; {}",
            what_then()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Elastic's standalone Kubernetes policy (our text of its shape,
/// `tests/policies/elastic-standalone-shape.yml`) runs on the real node
/// into a real OpenSearch: every dataset whose source this machine has
/// arrives, with Elastic's fields. Changed only where this node differs
/// from a cluster: the token and CA files (a ServiceAccount's, written to
/// a file), kube-state-metrics' and the kubelet's addresses, the host's
/// root (`/`, not `/hostfs`). Left out because this machine lacks their
/// source: `system.auth` (no auth log), `kubernetes.audit_logs` (no audit
/// log), `kubernetes.proxy` (no kube-proxy), `kubernetes.controllermanager`
/// (its stream is for a pod labelled `component: kube-controller-manager`;
/// the node's controller manager is a host process: see
/// `the_control_plane_components_on_a_real_node_give_their_metricsets`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elastics_standalone_policy_on_a_real_node_ships_its_datasets() -> Result<()> {
    let _one = NODE.lock().await;
    let plane = ControlPlane::shared();
    let node = Node::up(plane, std::path::Path::new(agents::binary()))?;
    start_counter(&node)?;
    node.wait_ready("default", "app=counter", 1, POD_READY)
        .await?;
    let dir = tempfile::tempdir()?;
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let (rbac, _) = account_with(
        &node,
        "manifest-reader",
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
               {"apiGroups": [""], "resources": ["nodes/stats"], "verbs": ["get"]}]),
        dir.path(),
    )?;
    // A StorageClass for `state_storageclass` to describe.
    node.kubectl(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                    "metadata": {"name": "manifest-test"}, "provisioner": "example.com/none"})
            .to_string(),
        ),
    )?;
    let shape = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/policies/elastic-standalone-shape.yml"
    ))?;
    let policy_text = shape
        .replace(
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
            &dir.path().join("token").display().to_string(),
        )
        .replace(
            "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
            &plane.dir().join("pki/ca.crt").display().to_string(),
        )
        .replace(
            "'kube-state-metrics:8080'",
            &format!("'{}'", ksm_host(plane)?),
        )
        .replace(
            ":10250'",
            &format!(":{}'", leasehold_testkit::node::KUBELET_PORT),
        )
        .replace("system.hostfs: '/hostfs'", "system.hostfs: '/'");
    let policy = dir.path().join("agent.yml");
    std::fs::write(&policy, policy_text)?;
    let api = plane.apiserver_addr();
    let out = dir.path().join("out");
    let mut agent = agents::AgentProc::spawn_with_env(
        &policy,
        &plane.admin_kubeconfig(),
        1,
        "default",
        &out,
        &[
            ("ES_HOST", sink.url().to_string()),
            ("API_KEY", String::new()),
            ("CA_TRUSTED", String::new()),
            ("NODE_NAME", "127.0.0.1".into()),
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1".into()),
            ("KUBERNETES_SERVICE_PORT", api.port().to_string()),
        ],
    )?;
    agent.wait_ready()?;
    let expected = [
        "metrics-kubernetes.apiserver-default",
        "metrics-kubernetes.event-default",
        "metrics-kubernetes.state_pod-default",
        "metrics-kubernetes.state_storageclass-default",
        "logs-kubernetes.container_logs-default",
        "metrics-system.cpu-default",
        "metrics-system.diskio-default",
        "metrics-system.filesystem-default",
        "metrics-system.fsstat-default",
        "metrics-system.load-default",
        "metrics-system.network-default",
        "metrics-system.process-default",
        "metrics-system.socket_summary-default",
        "metrics-kubernetes.node-default",
    ];
    let count =
        |index: &str| -> usize { sources(&sink, index, &["@timestamp"]).map_or(0, |d| d.len()) };
    wait_streams(
        &node,
        &sink,
        &expected,
        "manifest-test",
        Duration::from_secs(120),
        || format!("status {}", agent.status().unwrap_or_default()),
    )
    .await?;
    // Elastic's fields where the sources meet: the counter's log lines
    // carry its pod and container; its state document its labels
    // (add_metadata); the Event its reason.
    counter_line_has_elastics_fields(&sink)?;
    let pods = sources(
        &sink,
        "metrics-kubernetes.state_pod-default",
        &["kubernetes"],
    )?;
    let counter = pods
        .iter()
        .find(|d| d["kubernetes"]["pod"]["name"] == "counter")
        .context("the counter's state_pod")?;
    assert_eq!(
        counter["kubernetes"]["labels"]["app"], "counter",
        "{counter}"
    );
    let events = sources(&sink, "metrics-kubernetes.event-default", &["kubernetes"])?;
    assert!(
        events
            .iter()
            .any(|e| e["kubernetes"]["event"]["reason"] == "Testing"),
        "{events:?}"
    );
    let mut table: Vec<String> = expected
        .iter()
        .map(|i| format!("{i}={}", count(i)))
        .collect();
    table.sort();
    println!("manifest shape on the node: {}", table.join(" "));
    drop(agent);
    node.kubectl(
        &["delete", "--wait=false", "-f", "-"],
        Some(&rbac.to_string()),
    )?;
    node.kubectl(
        &["delete", "storageclass", "manifest-test", "--wait=false"],
        None,
    )?;
    node.down()?;
    Ok(())
}

/// Where Elastic's pinned manifest is, and the Lease it elects on.
const ELASTIC_MANIFEST: &str = "../../deploy/elastic/elastic-agent-standalone-kubernetes.yaml";
const ELASTIC_NS: &str = "kube-system";
const ELASTIC_SELECTOR: &str = "app.kubernetes.io/name=elastic-agent-standalone";
/// The state directory the manifest mounts from the host.
const ELASTIC_STATE: &str = "/var/lib/elastic-agent-standalone/kube-system/state";

/// Elastic's manifest as JSON objects with `image:` swapped for the agent
/// built for the tests, and what this one-node test cluster forces, each
/// change returned to be printed.
fn elastic_manifest(
    plane: &ControlPlane,
    node: &Node,
    es_host: &str,
) -> Result<(Value, Vec<String>)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(ELASTIC_MANIFEST);
    let yaml = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let list: Value = serde_json::from_str(&node.kubectl(
        &["apply", "--dry-run=client", "-o", "json", "-f", "-"],
        Some(&yaml),
    )?)?;
    let mut items = list["items"].as_array().cloned().context("a List")?;
    let mut changes = Vec::new();
    let map = items
        .iter_mut()
        .find(|o| o["kind"] == "ConfigMap")
        .context("the ConfigMap")?;
    let policy = map["data"]["agent.yml"]
        .as_str()
        .context("agent.yml")?
        .to_string();
    let ksm = ksm_host(plane)?;
    let kubelet = leasehold_testkit::node::KUBELET_PORT;
    let mut swapped = policy.clone();
    for (from, to, why) in [
        (
            "'kube-state-metrics:8080'".to_string(),
            format!("'{ksm}'"),
            "kube-state-metrics runs beside the plane: the node has no cluster DNS or Service routing",
        ),
        (
            ":10250'".to_string(),
            format!(":{kubelet}'"),
            "the test kubelet's port",
        ),
    ] {
        anyhow::ensure!(swapped.contains(&from), "agent.yml has {from}");
        swapped = swapped.replace(&from, &to);
        changes.push(format!("agent.yml: {from} -> {to} ({why})"));
    }
    map["data"]["agent.yml"] = json!(swapped);
    let ds = items
        .iter_mut()
        .find(|o| o["kind"] == "DaemonSet")
        .context("the DaemonSet")?;
    let c = &mut ds["spec"]["template"]["spec"]["containers"][0];
    changes.push(format!("image: {} -> {AGENT_IMAGE}", c["image"]));
    c["image"] = json!(AGENT_IMAGE);
    c["imagePullPolicy"] = json!("Never");
    changes
        .push("imagePullPolicy: Never (the image is imported into the node's containerd)".into());
    let api = plane.apiserver_addr();
    let env = c["env"].as_array_mut().context("env")?;
    let es = env
        .iter_mut()
        .find(|e| e["name"] == "ES_HOST")
        .context("ES_HOST")?;
    changes.push(format!(
        "env ES_HOST: {} -> {es_host} (the manifest leaves it to the user)",
        es["value"]
    ));
    es["value"] = json!(es_host);
    env.push(json!({"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}));
    env.push(json!({"name": "KUBERNETES_SERVICE_PORT", "value": api.port().to_string()}));
    changes.push(format!(
        "env KUBERNETES_SERVICE_HOST/PORT: 127.0.0.1:{} (the API server listens on loopback; no kube-proxy)",
        api.port()
    ));
    Ok((
        json!({"apiVersion": "v1", "kind": "List", "items": items}),
        changes,
    ))
}

/// One object of every kind the policy's `state_*` streams describe that
/// the node does not have already; none runs a pod.
fn state_objects() -> Value {
    let meta = |name: &str| json!({"name": name, "namespace": "default", "labels": {"app": name}});
    let template = |restart: &str| {
        json!({"metadata": {"labels": {"app": "idle"}}, "spec": {
            "restartPolicy": restart,
            "containers": [{"name": "idle", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["true"]}]}})
    };
    let (idle, once) = (template("Always"), template("Never"));
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("idle"), "spec": {
            "replicas": 0, "selector": {"matchLabels": {"app": "idle"}}, "template": idle}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("idle"), "spec": {
            "replicas": 0, "serviceName": "idle", "selector": {"matchLabels": {"app": "idle"}}, "template": idle}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("idle"), "spec": {
            "suspend": true, "template": once}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("idle"), "spec": {
            "suspend": true, "schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": once}}}},
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("idle"), "spec": {"hard": {"pods": "100"}}},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": "elastic-manifest"}, "provisioner": "example.com/none"},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "elastic-manifest"}, "spec": {
            "capacity": {"storage": "1Mi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "elastic-manifest", "hostPath": {"path": "/nonexistent-elastic-manifest"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta("idle"), "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": "elastic-manifest",
            "resources": {"requests": {"storage": "1Mi"}}}},
    ]})
}

/// The data streams Elastic's manifest's policy ships to, and whether this
/// node has their source (else why not).
const ELASTIC_STREAMS: &[(&str, Option<&str>)] = &[
    ("logs-kubernetes.container_logs-default", None),
    ("logs-kubernetes.audit_logs-default", None),
    ("metrics-kubernetes.apiserver-default", None),
    ("metrics-kubernetes.event-default", None),
    ("metrics-kubernetes.state_container-default", None),
    ("metrics-kubernetes.state_cronjob-default", None),
    ("metrics-kubernetes.state_daemonset-default", None),
    ("metrics-kubernetes.state_deployment-default", None),
    ("metrics-kubernetes.state_job-default", None),
    ("metrics-kubernetes.state_namespace-default", None),
    ("metrics-kubernetes.state_node-default", None),
    ("metrics-kubernetes.state_persistentvolume-default", None),
    (
        "metrics-kubernetes.state_persistentvolumeclaim-default",
        None,
    ),
    ("metrics-kubernetes.state_pod-default", None),
    ("metrics-kubernetes.state_replicaset-default", None),
    ("metrics-kubernetes.state_resourcequota-default", None),
    ("metrics-kubernetes.state_service-default", None),
    ("metrics-kubernetes.state_statefulset-default", None),
    ("metrics-kubernetes.state_storageclass-default", None),
    ("metrics-kubernetes.container-default", None),
    ("metrics-kubernetes.node-default", None),
    ("metrics-kubernetes.pod-default", None),
    ("metrics-kubernetes.system-default", None),
    ("metrics-kubernetes.volume-default", None),
    ("metrics-system.cpu-default", None),
    ("metrics-system.diskio-default", None),
    ("metrics-system.filesystem-default", None),
    ("metrics-system.fsstat-default", None),
    ("metrics-system.load-default", None),
    ("metrics-system.memory-default", None),
    ("metrics-system.network-default", None),
    ("metrics-system.process-default", None),
    ("metrics-system.process_summary-default", None),
    ("metrics-system.socket_summary-default", None),
    ("metrics-system.uptime-default", None),
    ("logs-elastic_agent-default", None),
    ("metrics-elastic_agent.elastic_agent-default", None),
    (
        "logs-system.auth-default",
        Some("this machine has no /var/log/auth.log or /var/log/secure"),
    ),
    (
        "logs-system.syslog-default",
        Some("this machine has no /var/log/messages or /var/log/syslog"),
    ),
    (
        "metrics-kubernetes.proxy-default",
        Some("the node runs no kube-proxy (localhost:10249)"),
    ),
    (
        "metrics-kubernetes.controllermanager-default",
        Some(
            "its stream is for a pod labelled component=kube-controller-manager; the node's is a host process",
        ),
    ),
    (
        "metrics-kubernetes.scheduler-default",
        Some(
            "its stream is for a pod labelled component=kube-scheduler; the node's is a host process",
        ),
    ),
];

/// Elastic's own standalone manifest (`deploy/elastic`, pinned at
/// elastic/elastic-agent 77a65898) on the real node with its `image:`
/// swapped for leasehold's and only what a one-node test cluster forces
/// changed (printed): every data stream whose source the node has arrives
/// in a real OpenSearch with Elastic's fields, each one's documents per
/// minute printed; the pod elects itself on Elastic's Lease with the
/// manifest's Role; `/hostfs` is read for system metrics; the agent ships
/// its own logs and metrics (`agent.monitoring`). Then the pod is replaced
/// three ways (`kubectl delete pod`, `kubectl rollout restart`, a changed
/// ConfigMap and a restart): no line of the workload's logs is lost or
/// shipped twice (the registry lives under the manifest's state hostPath),
/// leader-gated `state_pod` documents of two pods never overlap and their
/// gap, beyond the period, stays within the lease duration, and the
/// changed policy is the one running. The agent pod's memory is printed
/// beside the manifest's 500Mi request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elastics_manifest_with_only_the_image_swapped_runs_on_a_real_node() -> Result<()> {
    let _one = NODE.lock().await;
    let plane = ControlPlane::shared();
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    // A clean state directory: the registry of an earlier run names
    // containers of another node.
    let _ = std::fs::remove_dir_all(ELASTIC_STATE);
    // Host directories the manifest's hostPath volumes create, removed
    // afterwards unless they were there before.
    let created: Vec<&std::path::Path> = ["/var/lib/docker", "/var/lib/elastic-agent-standalone"]
        .iter()
        .map(std::path::Path::new)
        .filter(|p| !p.exists())
        .collect();
    // The API server's audit log where the policy's audit stream reads it,
    // as on a kubeadm node: the plane's audit directory bound over the
    // host's /var/log/kubernetes (the pod mounts /var/log).
    let audit = AuditLogOnHost::bind(plane)?;
    // The image packs the tests' build, or the binary that
    // LEASEHOLD_TEST_IMAGE_BINARY names (a release build, to report its
    // memory).
    let image_binary = std::env::var("LEASEHOLD_TEST_IMAGE_BINARY")
        .unwrap_or_else(|_| agents::binary().to_string());
    let node = Node::up(plane, std::path::Path::new(&image_binary))?;
    start_counter(&node)?;
    node.kubectl(&["apply", "-f", "-"], Some(&state_objects().to_string()))?;
    let (objects, changes) = elastic_manifest(plane, &node, sink.url())?;
    for c in &changes {
        println!("elastic manifest, changed for the test node: {c}");
    }
    node.kubectl(&["apply", "-f", "-"], Some(&objects.to_string()))?;
    let first = node
        .wait_ready(ELASTIC_NS, ELASTIC_SELECTOR, 1, POD_READY)
        .await?[0]
        .clone();
    node.wait_ready("default", "app=counter", 1, POD_READY)
        .await?;
    // The manifest configures no `kubernetes_leaderelection`: Elastic's
    // default Lease, in the pod's namespace, under the manifest's Role
    // (get, create, update).
    let lease = "elastic-agent-cluster-leader";
    wait_holder(&node, ELASTIC_NS, lease, &first, Duration::from_secs(60)).await?;
    let count =
        |index: &str| -> usize { sources(&sink, index, &["@timestamp"]).map_or(0, |d| d.len()) };
    let expected: Vec<&str> = ELASTIC_STREAMS
        .iter()
        .filter(|(_, why)| why.is_none())
        .map(|(i, _)| *i)
        .collect();
    wait_streams(
        &node,
        &sink,
        &expected,
        "elastic-manifest",
        Duration::from_secs(180),
        || {
            let log = node
                .kubectl(&["logs", "-n", ELASTIC_NS, &first, "--tail=60"], None)
                .unwrap_or_default();
            format!("the agent's log: {log}")
        },
    )
    .await?;
    // Documents per minute, over one minute.
    let before: Vec<usize> = ELASTIC_STREAMS.iter().map(|(i, _)| count(i)).collect();
    let window = std::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let minutes = window.elapsed().as_secs_f64() / 60.0;
    for ((index, why), b) in ELASTIC_STREAMS.iter().zip(&before) {
        let per_minute = (count(index) - b) as f64 / minutes;
        match why {
            None => println!("elastic manifest stream {index}: {per_minute:.0} documents/min"),
            Some(why) => println!(
                "elastic manifest stream {index}: {per_minute:.0} documents/min (not on this node: {why})"
            ),
        }
    }
    // A stream this node cannot feed says why in the log, once.
    let said = node.kubectl(&["logs", "-n", ELASTIC_NS, &first], None)?;
    for (needle, what) in [
        ("no file matches /var/log/auth.log*", "the auth log"),
        ("http://localhost:10249/metrics", "kube-proxy's metrics"),
    ] {
        let lines: Vec<&str> = said.lines().filter(|l| l.contains(needle)).collect();
        println!(
            "elastic manifest, why {what} is not shipped: {}",
            lines.join(" | ")
        );
        assert_eq!(lines.len(), 1, "{what} said once: {said}");
    }
    // Elastic's fields where the sources meet.
    counter_line_has_elastics_fields(&sink)?;
    // The audit log through Elastic's JavaScript processor: annotation
    // keys de-dotted, as its test() expects.
    let audits = sources(
        &sink,
        "logs-kubernetes.audit_logs-default",
        &["kubernetes", "tags"],
    )?;
    let annotated = audits
        .iter()
        .find(|d| d["kubernetes"]["audit"]["annotations"].is_object())
        .context("an audit event with annotations")?;
    let keys: Vec<&String> = annotated["kubernetes"]["audit"]["annotations"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert!(
        keys.iter().all(|k| !k.contains('.'))
            && keys.iter().any(|k| k.starts_with("authorization_k8s_io/")),
        "annotations de-dotted by the script: {annotated}"
    );
    assert!(
        audits.iter().all(|d| d["tags"]
            .as_array()
            .is_none_or(|t| !t.iter().any(|t| t == "_js_exception"))),
        "no audit event failed the script"
    );
    // The host's root through /hostfs: the node's processes, not the
    // container's alone.
    let summary = sources(&sink, "metrics-system.process_summary-default", &["system"])?;
    assert!(
        summary
            .iter()
            .any(|d| d["system"]["process"]["summary"]["total"]
                .as_u64()
                .unwrap_or(0)
                > 10),
        "the host's processes through /hostfs/proc: {summary:?}"
    );
    // The agent pod's memory, as the kubelet reports it.
    let pods = sources(&sink, "metrics-kubernetes.pod-default", &["kubernetes"])?;
    let working_set: Vec<u64> = pods
        .iter()
        .filter(|d| d["kubernetes"]["pod"]["name"] == first.as_str())
        .filter_map(|d| d["kubernetes"]["pod"]["memory"]["working_set"]["bytes"].as_u64())
        .collect();
    let peak = working_set
        .iter()
        .max()
        .copied()
        .context("the agent pod's memory")?;
    println!(
        "elastic manifest: agent pod working set {:.1} MiB last, {:.1} MiB at most over {} samples; the manifest requests 500Mi, limits 1200Mi",
        *working_set.last().unwrap_or(&0) as f64 / 1048576.0,
        peak as f64 / 1048576.0,
        working_set.len()
    );
    assert!(
        peak < 500 << 20,
        "the agent pod outgrew the manifest's request: {peak}"
    );
    // And the process's resident memory, as it ships it itself.
    let own = sources(
        &sink,
        "metrics-elastic_agent.elastic_agent-default",
        &["system", "agent"],
    )?;
    let rss: Vec<u64> = own
        .iter()
        .filter(|d| d["agent"]["name"] == first.as_str())
        .filter_map(|d| d["system"]["process"]["memory"]["size"].as_u64())
        .collect();
    println!(
        "elastic manifest: the agent's resident memory {:.1} MiB at most over {} samples (agent.monitoring)",
        rss.iter().max().copied().unwrap_or(0) as f64 / 1048576.0,
        rss.len()
    );

    // Three replacements of the pod.
    let mut pods_seen = vec![first.clone()];
    let steps = [
        "kubectl delete pod",
        "kubectl rollout restart",
        "a changed ConfigMap, then kubectl rollout restart",
    ];
    for step in steps {
        let before = pods_seen.last().context("a pod")?.clone();
        match step {
            "kubectl delete pod" => {
                node.kubectl(
                    &["delete", "pod", "-n", ELASTIC_NS, &before, "--wait=false"],
                    None,
                )?;
            }
            "kubectl rollout restart" => {
                node.kubectl(
                    &[
                        "rollout",
                        "restart",
                        "daemonset/elastic-agent-standalone",
                        "-n",
                        ELASTIC_NS,
                    ],
                    None,
                )?;
            }
            _ => {
                // The manifest mounts agent.yml with `subPath`: a changed
                // ConfigMap reaches a new pod only, as with Elastic Agent.
                let map: Value = serde_json::from_str(&node.kubectl(
                    &[
                        "get",
                        "configmap",
                        "agent-node-datastreams",
                        "-n",
                        ELASTIC_NS,
                        "-o",
                        "json",
                    ],
                    None,
                )?)?;
                let text = map["data"]["agent.yml"].as_str().context("agent.yml")?;
                let changed = text.replace(
                    "    logs: true\n    metrics: true\n",
                    "    logs: true\n    metrics: true\n    namespace: rollout\n",
                );
                anyhow::ensure!(changed != text, "agent.monitoring in agent.yml");
                let mut map = map.clone();
                map["data"]["agent.yml"] = json!(changed);
                node.kubectl(&["apply", "-f", "-"], Some(&map.to_string()))?;
                node.kubectl(
                    &[
                        "rollout",
                        "restart",
                        "daemonset/elastic-agent-standalone",
                        "-n",
                        ELASTIC_NS,
                    ],
                    None,
                )?;
            }
        }
        let after = replacement(&node, ELASTIC_NS, ELASTIC_SELECTOR, &before).await?;
        wait_holder(&node, ELASTIC_NS, lease, &after, Duration::from_secs(60)).await?;
        wait_docs(
            &sink,
            "metrics-kubernetes.state_pod-default",
            &["agent.name"],
            Duration::from_secs(60),
            &format!("the pod after {step} ships kube-state-metrics"),
            |d| d.iter().any(|x| x["agent"]["name"] == after.as_str()),
        )?;
        wait_docs(
            &sink,
            "logs-kubernetes.container_logs-default",
            &["message", "kubernetes.pod.name", "agent.name"],
            Duration::from_secs(60),
            &format!("the pod after {step} ships the workload's logs"),
            |d| counter_lines(d, Some(&after)).len() >= 10,
        )?;
        pods_seen.push(after);
    }
    // The changed policy runs: the agent's own documents go to the new
    // namespace.
    wait_docs(
        &sink,
        "metrics-elastic_agent.elastic_agent-rollout",
        &["agent.name"],
        Duration::from_secs(90),
        "the changed ConfigMap's monitoring namespace",
        |d| !d.is_empty(),
    )?;
    // Every line from the first on, once.
    let t = workload_lines(&sources(
        &sink,
        "logs-kubernetes.container_logs-default",
        &["message", "kubernetes.pod.name", "agent.name"],
    )?)?;
    println!(
        "elastic manifest: workload lines {}..={} across {} pods: {} shipped, {} twice, {} missing",
        t.lo,
        t.hi,
        pods_seen.len(),
        t.shipped,
        t.repeated,
        t.missing.len()
    );
    // Leader-gated data, judged from its own timestamps.
    let state = sources(
        &sink,
        "metrics-kubernetes.state_pod-default",
        &["agent.name", "@timestamp"],
    )?;
    // The policy's state_* period and Elastic's default lease duration.
    let (period_us, lease_us) = (10_000_000, 15_000_000);
    for (step, gap) in steps.iter().zip(gated_gaps(&state, &pods_seen, &steps)?) {
        assert!(
            gap - period_us <= lease_us,
            "{step}: the gated data stopped for {} ms beyond its period, more than the lease duration",
            (gap - period_us) / 1000
        );
    }
    assert!(
        t.missing.is_empty() && t.repeated == 0,
        "lines lost {:?} or shipped twice ({} repeats) across the replacements",
        t.missing,
        t.repeated
    );
    assert_eq!(t.lo, 1, "the workload's first line");
    // Leave the shared plane as it was.
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(ELASTIC_MANIFEST);
    node.kubectl(
        &[
            "delete",
            "--wait=false",
            "--ignore-not-found",
            "-f",
            manifest.to_str().context("path")?,
        ],
        None,
    )?;
    node.kubectl(
        &["delete", "--wait=false", "--ignore-not-found", "-f", "-"],
        Some(&state_objects().to_string()),
    )?;
    node.down()?;
    drop(audit);
    let _ = std::fs::remove_dir_all(ELASTIC_STATE);
    for dir in created {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(())
}

/// The plane's audit directory bound over the host's `/var/log/kubernetes`
/// for as long as this lives.
struct AuditLogOnHost {
    created: bool,
}

impl AuditLogOnHost {
    const TARGET: &'static str = "/var/log/kubernetes";

    fn bind(plane: &ControlPlane) -> Result<AuditLogOnHost> {
        let target = std::path::Path::new(Self::TARGET);
        // A bind left by a run that was killed.
        let _ = std::process::Command::new("umount").arg(target).output();
        let created = !target.exists();
        std::fs::create_dir_all(target)?;
        let source = plane.dir().join("audit");
        let out = std::process::Command::new("mount")
            .arg("--bind")
            .arg(&source)
            .arg(target)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "mount --bind {} {}: {}",
            source.display(),
            Self::TARGET,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(AuditLogOnHost { created })
    }
}

impl Drop for AuditLogOnHost {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(Self::TARGET)
            .output();
        if self.created {
            let _ = std::fs::remove_dir(Self::TARGET);
        }
    }
}
