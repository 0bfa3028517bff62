//! The `kubernetes` provider on the real control plane, without a kubelet:
//! Pods bound to a node name by their spec (they stay `Pending`), created
//! and deleted in bursts. The inputs that read `${kubernetes.pod.*}` follow
//! them — one per Pod, none left after they go — and the agent's memory
//! returns to where it was. With hints on, Pods' `co.elastic.hints/*`
//! annotations choose what runs for their containers.

mod agents;

use std::time::{Duration, Instant};

use agents::docs::rss_kib;
use agents::*;
use anyhow::{Context, Result};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use leasehold_testkit::{ControlPlane, objects};
use serde_json::json;

/// Pods per burst.
const BURST: usize = 200;
/// Bursts.
const ROUNDS: usize = 3;
/// The provider's `cleanup_timeout` in this test.
const CLEANUP_S: u64 = 1;

/// Ids of the running inputs rendered from the provider.
fn dynamic_inputs(agent: &AgentProc) -> Result<Vec<String>> {
    running_inputs(agent, "pod-")
}

/// Ids of the running inputs whose id starts with `prefix`.
fn running_inputs(agent: &AgentProc, prefix: &str) -> Result<Vec<String>> {
    Ok(agent.status()?["inputs"]["running"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["id"].as_str())
        .filter(|id| id.starts_with(prefix))
        .map(str::to_string)
        .collect())
}

/// Waits until `count` dynamic inputs run, within `within`.
async fn wait_inputs(agent: &AgentProc, count: usize, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let n = dynamic_inputs(agent)?.len();
        if n == count {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{n} inputs run, {count} expected; log: {}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A fresh namespace named after `name` in which agent 1 may read
/// `resources` (a Role there, as a provider with `namespace` set needs)
/// and which has its `default` ServiceAccount; with the admin and a node
/// name of its own.
async fn readable_namespace(
    name: &str,
    resources: &[&str],
) -> Result<(&'static ControlPlane, kube::Client, String, String)> {
    let plane = ControlPlane::shared();
    let admin = plane.admin_client().await?;
    let ns = plane.namespace(name).await?.name().to_string();
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    objects::create(&admin, Some(&ns), sa).await?;
    agents::access::grant_reads(plane, &ns, "agent-reader", resources, &[1]).await?;
    let node = format!("{ns}-node");
    Ok((plane, admin, ns, node))
}

/// Waits (30 s at most) until the running inputs whose id starts with
/// `prefix` are exactly `want` (sorted) and each has shipped an event; the
/// events written so far.
async fn wait_running_and_shipping(
    agent: &AgentProc,
    out: &std::path::Path,
    prefix: &str,
    want: &[String],
) -> Result<Vec<serde_json::Value>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut ids = running_inputs(agent, prefix)?;
        ids.sort();
        let text = std::fs::read_to_string(out.join("events.ndjson")).unwrap_or_default();
        let events: Vec<serde_json::Value> = complete_lines(&text)
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if ids == want && events.len() >= want.len() {
            return Ok(events);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "running {ids:?}, want {want:?}; events: {text}; log: {}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_follow_pods_through_bursts_and_none_is_left_behind() -> Result<()> {
    let (plane, admin, ns, node) = readable_namespace("churn", &["pods"]).await?;
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            "providers:\n  kubernetes: {{node: {node}, namespace: {ns}, cleanup_timeout: {CLEANUP_S}s}}\noutputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: pod-${{kubernetes.pod.name}}\n    type: filestream\n    paths: ['{}/${{kubernetes.pod.uid}}/*.log']\n",
            out.display(),
            dir.path().join("none").display(),
        ),
    )?;
    let agent = AgentProc::start_alone(plane, &policy, &out)?;
    wait_inputs(&agent, 0, Duration::from_secs(10)).await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    // One burst first, so what the runtime keeps for good (allocator
    // pools, the watch's buffers) is in the baseline.
    let mut baseline = None;
    let mut rss = Vec::new();
    for round in 0..=ROUNDS {
        let names: Vec<String> = (0..BURST).map(|i| format!("p{round}-{i}")).collect();
        futures_util::stream::iter(names.iter().cloned())
            .map(|name| {
                let admin = admin.clone();
                let ns = ns.clone();
                let node = node.clone();
                async move {
                    objects::create(
                        &admin,
                        Some(&ns),
                        pod_on(
                            &node,
                            json!({"name": name, "labels": {"burst": round.to_string()}}),
                        ),
                    )
                    .await
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await?;
        wait_inputs(&agent, BURST, Duration::from_secs(60)).await?;
        // At once: without a kubelet nothing would finish a graceful delete.
        pods.delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await?;
        // Gone after the cleanup timeout (a delete notice per Pod, then the
        // timeout, then the reconcile): bounded by the timeout with margin.
        wait_inputs(&agent, 0, Duration::from_secs(CLEANUP_S + 30)).await?;
        let kib = rss_kib(agent.pid())?;
        rss.push(kib);
        baseline.get_or_insert(kib);
    }
    let baseline = baseline.context("a first burst")?;
    let last = *rss.last().context("bursts")?;
    println!(
        "provider churn: {ROUNDS} bursts of {BURST} pods after a warm-up; RSS after each: {rss:?} KiB"
    );
    // Nothing accumulates per Pod that came and went: the last burst ends
    // within a quarter of the first's footprint (allocator noise), not
    // hundreds of Pods' worth higher.
    assert!(
        last <= baseline + baseline / 4,
        "RSS grew from {baseline} KiB to {last} KiB over {ROUNDS} bursts: {rss:?}"
    );
    // No series of an input that is gone stays in /metrics (they would
    // grow with every Pod ever seen), once the stopped inputs ended.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = agent.get("/metrics")?.1;
        let left: Vec<&str> = metrics.lines().filter(|l| l.contains("pod-p")).collect();
        if left.is_empty() {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} series of gone inputs, e.g. {:?}",
            left.len(),
            &left[..left.len().min(3)]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The agent says nothing is wrong.
    let status = agent.status()?;
    assert!(
        status["problems"].as_array().is_some_and(|p| p.is_empty()),
        "{status}"
    );
    Ok(())
}

/// `add_resource_metadata` (node and namespace on by default, `deployment`
/// asked for): an input rendered from a Pod's mapping writes events with
/// its node's and namespace's labels, the namespace's uid, and the
/// Deployment's name, as Elastic Agent adds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mappings_carry_the_labels_of_the_pods_node_and_namespace() -> Result<()> {
    let plane = ControlPlane::shared();
    let admin = plane.admin_client().await?;
    let suffix = format!("{:04x}", std::process::id() % 0xffff);
    let ns = format!("related-{suffix}");
    let node = format!("related-node-{suffix}");
    let k = 2;
    for (object, scope) in [
        (
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": ns, "labels": {"team": "shop"}}}),
            None,
        ),
        (
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
            Some(ns.as_str()),
        ),
        (
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": node, "labels": {"topology.kubernetes.io/zone": "z1"}}}),
            None,
        ),
        (
            pod_on(
                &node,
                json!({"name": "web-5d8f-abcde",
                                "labels": {"app": "web", "pod-template-hash": "5d8f"},
                                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                     "name": "web-5d8f", "uid": "0b1c5a52-6f0e-4c1e-9d55-2a1f6c0d9e12",
                                                     "controller": true}]}),
            ),
            Some(ns.as_str()),
        ),
    ] {
        objects::create(&admin, scope, object).await?;
    }
    agents::access::grant_metadata_reads(plane, k).await?;
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            "providers:\n  kubernetes: {{node: {node}, namespace: {ns}, add_resource_metadata: {{deployment: true}}}}\noutputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: pod-${{kubernetes.pod.name}}\n    type: exec\n    command: [sh, -c, 'echo hello; exec sleep 600']\n",
            out.display(),
        ),
    )?;
    let _agent = AgentProc::start(&policy, &plane.agent_kubeconfig(k), k, "default", &out)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let event = loop {
        let text = std::fs::read_to_string(out.join("events.ndjson")).unwrap_or_default();
        let found = complete_lines(&text)
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| e["kubernetes"]["node"]["labels"].is_object());
        if let Some(e) = found {
            break e;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no event with the node's labels: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let k8s = &event["kubernetes"];
    assert_eq!(
        k8s["node"]["labels"]["topology_kubernetes_io/zone"], "z1",
        "{event}"
    );
    assert_eq!(k8s["namespace_labels"]["team"], "shop", "{event}");
    assert!(k8s["namespace_uid"].is_string(), "{event}");
    assert_eq!(k8s["deployment"]["name"], "web", "{event}");
    assert_eq!(k8s["replicaset"]["name"], "web-5d8f", "{event}");
    assert_eq!(k8s["labels"]["app"], "web", "{event}");
    Ok(())
}

/// Hints on (`hints.enabled`): a container whose Pod names a package runs
/// the inputs that package's hints turn on, with the hinted settings and
/// processors; a container without hints runs the default container-log
/// input, as Elastic's templates are written. Containers get their ids
/// through the Pods' status, written as the kubelet writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_choose_what_runs_for_each_container() -> Result<()> {
    let (plane, admin, ns, node) = readable_namespace("hints", &["pods"]).await?;
    for object in [
        pod_on(
            &node,
            json!({"name": "web", "annotations": {
                   "co.elastic.hints/package": "web",
                   "co.elastic.hints/data_streams": "access",
                   "co.elastic.hints/access.period": "7s",
                   "co.elastic.hints/processors.add_fields": "{\"target\": \"project\", \"fields\": {\"name\": \"shop\"}}"}}),
        ),
        pod_on(&node, json!({"name": "plain"})),
    ] {
        objects::create(&admin, Some(&ns), object).await?;
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    for (name, id) in [("web", "0a1b"), ("plain", "0c2d")] {
        set_container(&pods, name, id, 0).await?;
    }
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            r#"providers:
  kubernetes: {{node: {node}, namespace: {ns}, hints: {{enabled: true}}}}
outputs:
  default: {{type: file, path: '{}', filename: events}}
inputs:
  - id: hinted-web-${{kubernetes.hints.container_id}}
    type: exec
    condition: ${{kubernetes.hints.web.access.enabled}} == true or ${{kubernetes.hints.web.enabled}} == true
    command: [sh, -c, 'echo period=$1; exec sleep 600', sh, '${{kubernetes.hints.web.access.period|"10s"}}']
  - id: hinted-logs-${{kubernetes.hints.container_id}}
    type: exec
    condition: ${{kubernetes.hints.container_logs.enabled}} == true
    command: [sh, -c, 'echo logs; exec sleep 600']
"#,
            out.display(),
        ),
    )?;
    let agent = AgentProc::start_alone(plane, &policy, &out)?;
    let uid = |name: &'static str| {
        let pods = pods.clone();
        async move { anyhow::Ok(pods.get(name).await?.metadata.uid.context("uid")?) }
    };
    let (web, plain) = (uid("web").await?, uid("plain").await?);
    let mut want = vec![
        format!("hinted-logs-0c2d-kubernetes-{plain}.c"),
        format!("hinted-web-0a1b-kubernetes-{web}.c"),
    ];
    want.sort();
    let events = wait_running_and_shipping(&agent, &out, "hinted-", &want).await?;
    let web_event = events
        .iter()
        .find(|e| e["message"] == "period=7s")
        .with_context(|| format!("no event with the hinted period: {events:?}"))?;
    assert_eq!(web_event["project"]["name"], "shop", "{web_event}");
    assert_eq!(web_event["kubernetes"]["pod"]["name"], "web", "{web_event}");
    assert_eq!(web_event["container"]["id"], "0a1b", "{web_event}");
    let logs_event = events
        .iter()
        .find(|e| e["message"] == "logs")
        .with_context(|| format!("no default container-log event: {events:?}"))?;
    assert_eq!(
        logs_event["kubernetes"]["pod"]["name"], "plain",
        "{logs_event}"
    );
    assert!(logs_event["project"].is_null(), "{logs_event}");
    Ok(())
}

/// A hint's host is where the agent connects, with a template's
/// credentials (Elastic's prometheus template sends the ServiceAccount
/// token): a Pod naming another host gets nothing built and `/status`
/// says why, naming the setting that allows it; a Pod naming its own IP
/// runs with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_naming_another_host_is_refused_and_one_naming_the_pods_own_ip_runs() -> Result<()> {
    let (plane, admin, ns, node) = readable_namespace("hinthost", &["pods"]).await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    for (name, host, id, ip) in [
        ("evil", "kubernetes.default.svc:443", "0e1f", "10.9.9.6"),
        ("own", "${kubernetes.pod.ip}:8080", "0a2b", "10.9.9.7"),
    ] {
        let annotations = json!({"co.elastic.hints/package": "web", "co.elastic.hints/host": host});
        let meta = json!({"name": name, "annotations": annotations});
        objects::create(&admin, Some(&ns), pod_on(&node, meta)).await?;
        set_container(&pods, name, id, 0).await?;
        pods.patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}})),
        )
        .await?;
    }
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            r#"providers:
  kubernetes: {{node: {node}, namespace: {ns}, hints: {{enabled: true}}}}
outputs:
  default: {{type: file, path: '{}', filename: events}}
inputs:
  - id: scrape-${{kubernetes.hints.container_id}}
    type: exec
    condition: ${{kubernetes.hints.web.enabled}} == true
    command: [sh, -c, 'echo host=$1; exec sleep 600', sh, '${{kubernetes.hints.web.host}}']
"#,
            out.display(),
        ),
    )?;
    let agent = AgentProc::start_alone(plane, &policy, &out)?;
    let own = pods.get("own").await?.metadata.uid.context("uid")?;
    let evil = pods.get("evil").await?.metadata.uid.context("uid")?;
    let want = [format!("scrape-0a2b-kubernetes-{own}.c")];
    let events = wait_running_and_shipping(&agent, &out, "scrape-", &want).await?;
    let messages: Vec<&str> = events
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert_eq!(messages, ["host=10.9.9.7:8080"], "only the Pod's own IP");
    let status = agent.status()?;
    let reasons: Vec<&str> = status["inputs"]["dropped"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["id"].as_str().is_some_and(|id| id.contains(&evil)))
        .filter_map(|d| d["reason"].as_str())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("\"kubernetes.default.svc\"")
                && r.contains("not the Pod's own IP (10.9.9.6)")
                && r.contains("hints.allowed_hosts")),
        "{status:#}"
    );
    Ok(())
}

/// `resources.node` and `resources.service` on: a Ready node with an
/// address and a Service with a cluster IP each get a mapping of their own,
/// with Elastic's variables and fields; the service's input goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_and_services_get_mappings_of_their_own() -> Result<()> {
    use k8s_openapi::api::core::v1::{Node, Service};
    let (plane, admin, ns, node) = readable_namespace("resources", &["services"]).await?;
    agents::access::grant_metadata_reads(plane, 1).await?;
    for (object, scope) in [
        (
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": node, "labels": {"lhtest": ns, "kubernetes.io/hostname": "host-a"}}}),
            None,
        ),
        (
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "web", "labels": {"app": "web"}},
                   "spec": {"ports": [{"port": 80}]}}),
            Some(ns.as_str()),
        ),
    ] {
        objects::create(&admin, scope, object).await?;
    }
    let nodes: Api<Node> = Api::all(admin.clone());
    nodes
        .patch_status(
            &node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}],
                "addresses": [{"type": "InternalIP", "address": "10.9.9.9"}]}})),
        )
        .await?;
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            r#"providers:
  kubernetes:
    namespace: {ns}
    resources: {{node: {{enabled: true}}, service: {{enabled: true}}}}
outputs:
  default: {{type: file, path: '{}', filename: events}}
inputs:
  - id: res-svc-${{kubernetes.service.name}}
    type: exec
    command: [sh, -c, 'echo service; exec sleep 600']
  - id: res-node-${{kubernetes.node.name}}
    type: exec
    condition: ${{kubernetes.labels.lhtest}} == '{ns}'
    command: [sh, -c, 'echo node; exec sleep 600']
"#,
            out.display(),
        ),
    )?;
    let agent = AgentProc::start_alone(plane, &policy, &out)?;
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let svc_uid = services.get("web").await?.metadata.uid.context("uid")?;
    let node_uid = nodes.get(&node).await?.metadata.uid.context("uid")?;
    let mut want = vec![
        format!("res-node-{node}-kubernetes-{node_uid}"),
        format!("res-svc-web-kubernetes-{svc_uid}"),
    ];
    want.sort();
    let events = wait_running_and_shipping(&agent, &out, "res-", &want).await?;
    let of = |message: &str| {
        events
            .iter()
            .find(|e| e["message"] == message)
            .cloned()
            .with_context(|| format!("no {message} event: {events:?}"))
    };
    let svc_event = of("service")?;
    assert_eq!(
        svc_event["kubernetes"]["service"]["name"], "web",
        "{svc_event}"
    );
    assert_eq!(
        svc_event["kubernetes"]["namespace"],
        ns.as_str(),
        "{svc_event}"
    );
    assert_eq!(
        svc_event["kubernetes"]["labels"]["app"], "web",
        "{svc_event}"
    );
    let node_event = of("node")?;
    assert_eq!(
        node_event["kubernetes"]["node"]["name"],
        node.as_str(),
        "{node_event}"
    );
    assert_eq!(
        node_event["kubernetes"]["node"]["hostname"], "host-a",
        "{node_event}"
    );
    // The Service goes: so does its input, at once.
    services.delete("web", &DeleteParams::default()).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ids = running_inputs(&agent, "res-svc-")?;
        if ids.is_empty() {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "still running: {ids:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    nodes.delete(&node, &DeleteParams::default()).await?;
    Ok(())
}

/// A Pod on `node` with `metadata` and one container `c` (no image runs:
/// no kubelet here), without a token mounted.
fn pod_on(node: &str, metadata: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
           "spec": {"nodeName": node, "automountServiceAccountToken": false,
                    "containers": [{"name": "c", "image": "none"}]}})
}

/// Sets the status of Pod `name`'s container `c` as a kubelet would:
/// running as container `id` after `restarts` restarts.
async fn set_container(pods: &Api<Pod>, name: &str, id: &str, restarts: u32) -> Result<()> {
    pods.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"status": {"containerStatuses": [{
            "name": "c", "containerID": format!("containerd://{id}"), "image": "none",
            "imageID": "", "ready": true, "restartCount": restarts}]}})),
    )
    .await?;
    Ok(())
}

/// The `message`s of the events written so far, each with its file's
/// directory name (`a`, `b`).
fn messages_by_dir(out: &std::path::Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(out.join("events.ndjson")).unwrap_or_default();
    complete_lines(&text)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|e| {
            let path = e["log"]["file"]["path"].as_str().unwrap_or("").to_string();
            let dir = std::path::Path::new(&path)
                .parent()
                .and_then(|p| p.file_name())
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_default();
            (dir, e["message"].as_str().unwrap_or("").to_string())
        })
        .collect()
}

/// A container restarts (a new container id in the Pod's status): what
/// it wrote last before it went (the crash trace) is shipped, once, by
/// the old input reading its file to its end, while the new container's
/// file is read by its own. Both when the stream id names the container
/// (Elastic's template: the new input starts at once beside the drain)
/// and when it does not (the new input shares the registry and waits
/// for the drain). The readers idle for 30 s between polls, so only the
/// drain can read the trace before they are stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_containers_last_lines_are_read_to_the_end_once() -> Result<()> {
    let (plane, admin, ns, node) = readable_namespace("restart", &["pods"]).await?;
    objects::create(&admin, Some(&ns), pod_on(&node, json!({"name": "app"}))).await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    set_container(&pods, "app", "0aaa", 0).await?;
    let dir = tempfile::tempdir()?;
    let (out, logs) = (dir.path().join("out"), dir.path().join("logs"));
    let write = |sub: &str, id: &str, lines: &[&str]| -> Result<()> {
        use std::io::Write;
        std::fs::create_dir_all(logs.join(sub))?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join(sub).join(format!("app-{id}.log")))?;
        for l in lines {
            writeln!(f, "{l}")?;
        }
        Ok(())
    };
    for sub in ["a", "b"] {
        write(sub, "0aaa", &["first-1", "first-2"])?;
    }
    // The drain is bounded by `cleanup_timeout`.
    let cleanup_s = 10;
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            r#"providers:
  kubernetes: {{node: {node}, namespace: {ns}, cleanup_timeout: {cleanup_s}s}}
outputs:
  default: {{type: file, path: '{out}', filename: events}}
inputs:
  - id: a-${{kubernetes.pod.name}}
    type: filestream
    streams:
      - id: a-${{kubernetes.pod.name}}-${{kubernetes.container.id}}
        paths: ['{logs}/a/*-${{kubernetes.container.id}}.log']
        backoff.init: 30s
        backoff.max: 30s
  - id: b-${{kubernetes.pod.name}}
    type: filestream
    streams:
      - id: b-${{kubernetes.pod.name}}
        paths: ['{logs}/b/*-${{kubernetes.container.id}}.log']
        backoff.init: 30s
        backoff.max: 30s
"#,
            out = out.display(),
            logs = logs.display(),
        ),
    )?;
    let agent = AgentProc::start_alone(plane, &policy, &out)?;
    let want_first: Vec<(String, String)> = ["a", "b"]
        .iter()
        .flat_map(|d| ["first-1", "first-2"].map(|m| (d.to_string(), m.to_string())))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while messages_by_dir(&out).len() < want_first.len() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "first lines not shipped: {:?}; log: {}",
            messages_by_dir(&out),
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The container crashes: its last words, then the kubelet's restart.
    for sub in ["a", "b"] {
        write(sub, "0aaa", &["trace-1", "trace-2 without its newline"])?;
        // A crash trace may end without a newline.
        let path = logs.join(sub).join("app-0aaa.log");
        let text = std::fs::read_to_string(&path)?;
        std::fs::write(&path, text.trim_end_matches('\n'))?;
        write(sub, "0bbb", &["second-1"])?;
    }
    set_container(&pods, "app", "0bbb", 1).await?;
    let mut want: Vec<(String, String)> = ["a", "b"]
        .iter()
        .flat_map(|d| {
            [
                "first-1",
                "first-2",
                "trace-1",
                "trace-2 without its newline",
                "second-1",
            ]
            .map(|m| (d.to_string(), m.to_string()))
        })
        .collect();
    want.sort();
    let deadline = Instant::now() + Duration::from_secs(cleanup_s + 20);
    loop {
        let mut got = messages_by_dir(&out);
        got.sort();
        if got.len() >= want.len() {
            assert_eq!(got, want, "each line once; log: {}", agent.log());
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "shipped {got:?}, want {want:?}; log: {}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The new container's inputs run, one each.
    let uid = pods.get("app").await?.metadata.uid.context("uid")?;
    let mut running = running_inputs(&agent, "")?;
    running.sort();
    assert_eq!(
        running,
        vec![
            format!("a-app-kubernetes-{uid}.c"),
            format!("b-app-kubernetes-{uid}.c"),
        ]
    );
    Ok(())
}

/// Two rendered inputs whose streams have one id would share a registry:
/// the second is not started, and `/status` says why, naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_input_with_a_stream_id_already_taken_is_refused_naming_both() -> Result<()> {
    let (plane, admin, ns, node) = readable_namespace("sameid", &["pods"]).await?;
    for name in ["one", "two"] {
        objects::create(&admin, Some(&ns), pod_on(&node, json!({"name": name}))).await?;
    }
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            r#"providers:
  kubernetes: {{node: {node}, namespace: {ns}}}
outputs:
  default: {{type: file, path: '{}', filename: events}}
inputs:
  - id: logs-${{kubernetes.pod.name}}
    type: filestream
    streams:
      - id: pod-logs
        paths: ['{}/${{kubernetes.pod.uid}}/*.log']
"#,
            out.display(),
            dir.path().join("none").display(),
        ),
    )?;
    let agent = AgentProc::start_alone(plane, &policy, &out)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = agent.status()?;
        let running = running_inputs(&agent, "logs-")?;
        let dropped: Vec<(String, String)> = status["inputs"]["dropped"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                (
                    d["id"].as_str().unwrap_or("").to_string(),
                    d["reason"].as_str().unwrap_or("").to_string(),
                )
            })
            .filter(|(id, _)| id.starts_with("logs-"))
            .collect();
        if running.len() == 1 && dropped.len() == 1 {
            let (refused, reason) = &dropped[0];
            assert_ne!(refused, &running[0]);
            assert!(reason.contains("`pod-logs`"), "{reason}");
            assert!(reason.contains(&format!("`{}`", running[0])), "{reason}");
            assert!(
                agent.log().contains("input not started"),
                "the refusal is logged: {}",
                agent.log()
            );
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "running {running:?}, dropped {dropped:?}; log: {}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
