//! Scraping inputs on real servers: `prometheus/metrics` (`collector`) and
//! `kubernetes/metrics` (`apiserver`) against the real API server's
//! `/metrics` with the agent's own credentials, and the `state_*`
//! metricsets against a real kube-state-metrics watching objects this test
//! creates. Judged from the agent's file output.

mod agents;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use agents::access::{create_ticks, credentials, grant_cluster_reads};
use agents::*;
use anyhow::{Context, Result, bail};
use leasehold_testkit::ControlPlane;
use serde_json::Value;

/// Every event in `dir/events.ndjson` as JSON.
fn docs(dir: &Path) -> Result<Vec<Value>> {
    agents::docs::file_docs(dir)
}

/// Waits until `pred` holds for the documents written so far.
fn wait_docs(
    dir: &Path,
    within: Duration,
    what: &str,
    pred: impl Fn(&[Value]) -> bool,
) -> Result<Vec<Value>> {
    let deadline = Instant::now() + within;
    loop {
        let d = docs(dir)?;
        if pred(&d) {
            return Ok(d);
        }
        if Instant::now() > deadline {
            bail!("{what}: not seen within {within:?} ({} documents)", d.len());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_is_scraped_with_the_agents_credentials() -> Result<()> {
    let plane = ControlPlane::shared();
    grant_cluster_reads(plane, 1).await?;
    let dir = tempfile::tempdir()?;
    let (token, ca, server) = credentials(plane, 1, dir.path())?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            r#"outputs:
  default: {{type: file, path: '{out}', filename: events}}
inputs:
  - id: prom
    type: prometheus/metrics
    streams:
      - metricsets: [collector]
        hosts: ['{server}']
        metrics_path: /metrics
        period: 1s
        bearer_token_file: '{token}'
        ssl.certificate_authorities: ['{ca}']
        metrics_filters.include: ['apiserver_request_total', 'process_.*']
  - id: k8s
    type: kubernetes/metrics
    streams:
      - metricsets: [apiserver]
        hosts: ['{server}']
        period: 1s
        bearer_token_file: '{token}'
        ssl.certificate_authorities: ['{ca}']
"#,
            out = out.display(),
            token = token.display(),
            ca = ca.display()
        ),
    )?;
    let _agent = AgentProc::start(&policy, Path::new("/nonexistent"), 1, "default", &out)?;
    let d = wait_docs(
        &out,
        Duration::from_secs(20),
        "two periods of both inputs",
        |d| {
            let stamps: BTreeSet<&str> = d
                .iter()
                .filter(|e| e["input"]["id"] == "prom")
                .filter_map(|e| e["@timestamp"].as_str())
                .collect();
            stamps.len() >= 2 && d.iter().any(|e| e["input"]["id"] == "k8s")
        },
    )?;
    let prom: Vec<&Value> = d.iter().filter(|e| e["input"]["id"] == "prom").collect();
    let req = prom
        .iter()
        .find(|e| e["prometheus"]["metrics"]["apiserver_request_total"].is_number())
        .context("no apiserver_request_total document")?;
    assert!(req["prometheus"]["labels"]["verb"].is_string(), "{req}");
    assert!(req["prometheus"]["labels"]["code"].is_string(), "{req}");
    assert_eq!(req["data_stream"]["type"], "metrics");
    assert_eq!(req["data_stream"]["dataset"], "prometheus.collector");
    assert_eq!(req["metricset"]["name"], "collector");
    assert_eq!(req["metricset"]["period"], 1000);
    // Fetched on whole seconds, with a deterministic id per (object, period).
    for e in &prom {
        let ts = e["@timestamp"].as_str().unwrap_or_default();
        assert!(ts.ends_with(".000000Z"), "not aligned: {ts}");
        assert_eq!(
            e["@metadata"]["_id"].as_str().map(str::len),
            Some(32),
            "{e}"
        );
        let names: Vec<&String> = e["prometheus"]["metrics"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert!(
            names
                .iter()
                .all(|n| *n == "apiserver_request_total" || n.starts_with("process_")),
            "filtered out: {names:?}"
        );
    }
    let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &prom {
        *ids.entry(e["@metadata"]["_id"].as_str().unwrap_or_default())
            .or_default() += 1;
    }
    assert!(
        ids.values().all(|n| *n == 1),
        "an id repeats within one agent's output"
    );
    let api = d
        .iter()
        .find(|e| {
            e["input"]["id"] == "k8s"
                && e["kubernetes"]["apiserver"]["request"]["count"].is_number()
        })
        .context("no apiserver request document")?;
    assert!(
        api["kubernetes"]["apiserver"]["request"]["verb"].is_string(),
        "{api}"
    );
    assert_eq!(api["data_stream"]["dataset"], "kubernetes.apiserver");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rights_the_scrape_fails_and_says_why() -> Result<()> {
    let plane = ControlPlane::shared();
    let dir = tempfile::tempdir()?;
    // agent-5 is never granted /metrics (the other tests of this binary
    // grant agents 1 to 3).
    let (token, ca, server) = credentials(plane, 5, dir.path())?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: k8s\n    type: kubernetes/metrics\n    metricsets: [apiserver]\n    hosts: ['{server}']\n    period: 1s\n    bearer_token_file: '{}'\n    ssl.certificate_authorities: ['{}']\n",
            out.display(),
            token.display(),
            ca.display()
        ),
    )?;
    let agent = AgentProc::start(&policy, Path::new("/nonexistent"), 5, "default", &out)?;
    let line = agent.wait_log("fetch failed", Duration::from_secs(10))?;
    assert!(line.contains("403"), "{line}");
    Ok(())
}

/// The fields of the first document of `input` whose `path` equals `want`.
fn find<'a>(d: &'a [Value], dataset: &str, path: &[&str], want: &str) -> Option<&'a Value> {
    d.iter().find(|e| {
        e["data_stream"]["dataset"] == dataset && {
            let mut at = *e;
            for p in path {
                at = &at[*p];
            }
            at == want
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_metricsets_describe_the_objects_kube_state_metrics_sees() -> Result<()> {
    use leasehold_testkit::objects;
    let plane = ControlPlane::shared();
    let ksm = plane.kube_state_metrics()?;
    let admin = plane.admin_client().await?;
    let suffix = format!("{:04x}", std::process::id() % 0xffff);
    let ns = format!("state-{suffix}");
    let node = format!("node-{suffix}");
    objects::namespace(&admin, &ns).await?;
    objects::ready_node(&admin, &node).await?;
    objects::pending_pod(&admin, &ns, "pod-a").await?;
    objects::deployment(&admin, &ns, "web", 3).await?;
    objects::daemonset(&admin, &ns, "agent").await?;
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: state\n    type: kubernetes/metrics\n    streams:\n      - metricsets: [state_node, state_pod, state_container, state_deployment, state_daemonset, state_namespace]\n        hosts: ['{}']\n        period: 1s\n",
            out.display(),
            ksm.url()
        ),
    )?;
    let _agent = AgentProc::start(&policy, Path::new("/nonexistent"), 1, "default", &out)?;
    let checks: [(&str, &[&str], String); 6] = [
        (
            "kubernetes.state_pod",
            &["kubernetes", "pod", "name"],
            "pod-a".into(),
        ),
        (
            "kubernetes.state_deployment",
            &["kubernetes", "deployment", "name"],
            "web".into(),
        ),
        (
            "kubernetes.state_daemonset",
            &["kubernetes", "daemonset", "name"],
            "agent".into(),
        ),
        (
            "kubernetes.state_node",
            &["kubernetes", "node", "name"],
            node.clone(),
        ),
        (
            "kubernetes.state_namespace",
            &["kubernetes", "namespace"],
            ns.clone(),
        ),
        (
            "kubernetes.state_container",
            &["kubernetes", "pod", "name"],
            "pod-a".into(),
        ),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    let d = loop {
        let d = docs(&out)?;
        let missing: Vec<&str> = checks
            .iter()
            .filter(|(ds, path, want)| find(&d, ds, path, want).is_none())
            .map(|(ds, _, _)| *ds)
            .collect();
        if missing.is_empty() {
            break d;
        }
        if Instant::now() > deadline {
            let sample: Vec<String> = missing
                .iter()
                .filter_map(|m| d.iter().rev().find(|e| e["data_stream"]["dataset"] == *m))
                .map(|e| e.to_string())
                .collect();
            bail!("not seen: {missing:?}; last documents of those datasets: {sample:#?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let pod = find(
        &d,
        "kubernetes.state_pod",
        &["kubernetes", "pod", "name"],
        "pod-a",
    )
    .context("pod")?;
    assert_eq!(pod["kubernetes"]["namespace"], ns.as_str(), "{pod}");
    assert_eq!(
        pod["kubernetes"]["pod"]["status"]["phase"], "pending",
        "{pod}"
    );
    let dep = find(
        &d,
        "kubernetes.state_deployment",
        &["kubernetes", "deployment", "name"],
        "web",
    )
    .context("deployment")?;
    assert_eq!(
        dep["kubernetes"]["deployment"]["replicas"]["desired"], 3,
        "{dep}"
    );
    assert_eq!(dep["kubernetes"]["deployment"]["paused"], false, "{dep}");
    let n = find(
        &d,
        "kubernetes.state_node",
        &["kubernetes", "node", "name"],
        &node,
    )
    .context("node")?;
    assert_eq!(n["kubernetes"]["node"]["status"]["ready"], "true", "{n}");
    let namespace = find(
        &d,
        "kubernetes.state_namespace",
        &["kubernetes", "namespace"],
        &ns,
    )
    .context("namespace")?;
    assert_eq!(
        namespace["kubernetes"]["state_namespace"]["status"]["active"], true,
        "{namespace}"
    );
    let ds = find(
        &d,
        "kubernetes.state_daemonset",
        &["kubernetes", "daemonset", "name"],
        "agent",
    )
    .context("daemonset")?;
    assert!(
        ds["kubernetes"]["daemonset"]["replicas"]["desired"].is_number(),
        "{ds}"
    );
    let c = find(
        &d,
        "kubernetes.state_container",
        &["kubernetes", "pod", "name"],
        "pod-a",
    )
    .context("container")?;
    assert_eq!(c["kubernetes"]["container"]["name"], "main", "{c}");
    assert_eq!(
        c["kubernetes"]["container"]["cpu"]["request"]["cores"], 0.1,
        "{c}"
    );
    assert_eq!(
        c["kubernetes"]["container"]["memory"]["request"]["bytes"], 67_108_864,
        "{c}"
    );
    assert_eq!(
        c["kubernetes"]["container"]["memory"]["limit"]["bytes"], 134_217_728,
        "{c}"
    );
    for e in [pod, dep, n, namespace, ds, c] {
        assert_eq!(e["event"]["module"], "kubernetes");
        assert_eq!(e["data_stream"]["type"], "metrics");
        assert!(
            e["@timestamp"]
                .as_str()
                .is_some_and(|t| t.ends_with(".000000Z")),
            "{e}"
        );
    }
    Ok(())
}

/// The metricsets of Elastic's manifest beyond the first six, against the
/// real kube-state-metrics: a StatefulSet, ReplicaSet, Job, CronJob,
/// Service, PersistentVolume and its claim, ResourceQuota and StorageClass
/// made through the API each appear in their dataset with Elastic's field
/// names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_state_metricsets_describe_their_objects() -> Result<()> {
    use leasehold_testkit::objects;
    use serde_json::json;
    let plane = ControlPlane::shared();
    let ksm = plane.kube_state_metrics()?;
    let admin = plane.admin_client().await?;
    let suffix = format!("{:04x}", std::process::id() % 0xffff);
    let ns = format!("tables-{suffix}");
    objects::namespace(&admin, &ns).await?;
    let labels = json!({"app": "db"});
    let pod_template = json!({
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "main", "image": objects::IMAGE}], "restartPolicy": "Never"}
    });
    let always = {
        let mut t = pod_template.clone();
        t["spec"]["restartPolicy"] = json!("Always");
        t
    };
    let sc = format!("slow-{suffix}");
    let pv = format!("pv-{suffix}");
    for (namespaced, object) in [
        (
            true,
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": labels}, "template": always}}),
        ),
        (
            true,
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {"matchLabels": labels}, "template": always}}),
        ),
        (
            true,
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"},
            "spec": {"completions": 2, "parallelism": 1, "template": pod_template}}),
        ),
        (
            true,
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
            "spec": {"schedule": "0 3 * * *", "suspend": true, "jobTemplate": {"spec": {"template": pod_template}}}}),
        ),
        (
            true,
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
            "spec": {"type": "ClusterIP", "ports": [{"port": 5432}], "selector": labels}}),
        ),
        (
            false,
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": sc},
            "provisioner": "example.com/none", "reclaimPolicy": "Retain"}),
        ),
        (
            false,
            json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                     "hostPath": {"path": "/nonexistent"}}}),
        ),
        (
            true,
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": sc,
                     "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        (
            true,
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pods"},
            "spec": {"hard": {"pods": "10"}}}),
        ),
    ] {
        objects::create(&admin, namespaced.then_some(ns.as_str()), object).await?;
    }
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let policy = dir.path().join("p.yml");
    std::fs::write(
        &policy,
        format!(
            "outputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: state\n    type: kubernetes/metrics\n    streams:\n      - metricsets: [state_statefulset, state_replicaset, state_job, state_cronjob, state_service, state_persistentvolume, state_persistentvolumeclaim, state_resourcequota, state_storageclass]\n        hosts: ['{}']\n        period: 1s\n",
            out.display(),
            ksm.url()
        ),
    )?;
    let _agent = AgentProc::start(&policy, Path::new("/nonexistent"), 1, "default", &out)?;
    let checks: [(&str, &[&str], &str); 9] = [
        (
            "kubernetes.state_statefulset",
            &["kubernetes", "statefulset", "name"],
            "db",
        ),
        (
            "kubernetes.state_replicaset",
            &["kubernetes", "replicaset", "name"],
            "web",
        ),
        (
            "kubernetes.state_job",
            &["kubernetes", "job", "name"],
            "once",
        ),
        (
            "kubernetes.state_cronjob",
            &["kubernetes", "cronjob", "name"],
            "nightly",
        ),
        (
            "kubernetes.state_service",
            &["kubernetes", "service", "name"],
            "db",
        ),
        (
            "kubernetes.state_persistentvolume",
            &["kubernetes", "persistentvolume", "name"],
            &pv,
        ),
        (
            "kubernetes.state_persistentvolumeclaim",
            &["kubernetes", "persistentvolumeclaim", "name"],
            "data",
        ),
        (
            "kubernetes.state_resourcequota",
            &["kubernetes", "resourcequota", "name"],
            "pods",
        ),
        (
            "kubernetes.state_storageclass",
            &["kubernetes", "storageclass", "name"],
            &sc,
        ),
    ];
    let mine = |d: &[Value], ds: &str, path: &[&str], want: &str| -> Option<Value> {
        d.iter()
            .find(|e| {
                e["data_stream"]["dataset"] == ds
                    && path.iter().fold(*e, |at, p| &at[*p]) == want
                    && (e["kubernetes"]["namespace"] == ns.as_str()
                        || e["kubernetes"].get("namespace").is_none())
            })
            .cloned()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let d = loop {
        let d = docs(&out)?;
        let missing: Vec<&str> = checks
            .iter()
            .filter(|(ds, path, want)| mine(&d, ds, path, want).is_none())
            .map(|(ds, _, _)| *ds)
            .collect();
        if missing.is_empty() {
            break d;
        }
        if Instant::now() > deadline {
            bail!("not seen: {missing:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let get = |i: usize| mine(&d, checks[i].0, checks[i].1, checks[i].2).unwrap_or_default();
    let sts = get(0);
    assert_eq!(
        sts["kubernetes"]["statefulset"]["replicas"]["desired"], 2,
        "{sts}"
    );
    assert_eq!(sts["kubernetes"]["namespace"], ns.as_str(), "{sts}");
    let rs = get(1);
    assert_eq!(
        rs["kubernetes"]["replicaset"]["replicas"]["desired"], 3,
        "{rs}"
    );
    let job = get(2);
    assert_eq!(
        job["kubernetes"]["job"]["completions"]["desired"], 2,
        "{job}"
    );
    assert!(
        job["kubernetes"]["job"]["time"]["created"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{job}"
    );
    let cron = get(3);
    assert_eq!(
        cron["kubernetes"]["cronjob"]["is_suspended"], true,
        "{cron}"
    );
    assert_eq!(
        cron["kubernetes"]["cronjob"]["schedule"], "0 3 * * *",
        "{cron}"
    );
    let svc = get(4);
    assert_eq!(svc["kubernetes"]["service"]["type"], "ClusterIP", "{svc}");
    let vol = get(5);
    assert_eq!(
        vol["kubernetes"]["persistentvolume"]["capacity"]["bytes"], 1_073_741_824_i64,
        "{vol}"
    );
    assert_eq!(
        vol["kubernetes"]["persistentvolume"]["storage_class"],
        sc.as_str(),
        "{vol}"
    );
    let claim = get(6);
    assert_eq!(
        claim["kubernetes"]["persistentvolumeclaim"]["request_storage"]["bytes"], 1_073_741_824_i64,
        "{claim}"
    );
    assert_eq!(
        claim["kubernetes"]["persistentvolumeclaim"]["phase"], "Pending",
        "{claim}"
    );
    let class = get(8);
    assert_eq!(
        class["kubernetes"]["storageclass"]["provisioner"], "example.com/none",
        "{class}"
    );
    assert_eq!(
        class["kubernetes"]["storageclass"]["reclaim_policy"], "Retain",
        "{class}"
    );
    for e in [sts, rs, job, cron, svc, vol, claim, get(7), class] {
        assert_eq!(e["event"]["module"], "kubernetes", "{e}");
        assert_eq!(e["data_stream"]["type"], "metrics", "{e}");
    }
    Ok(())
}

/// The issue's three-agent scenario: gated `state_*`, `apiserver` and
/// `kubernetes/events` on three agents through a SIGTERM handover, a holder
/// overwrite and a SIGKILL of the leader, while the test creates Events.
/// Per object and aligned period, documents written by two agents are
/// identical (same id); terms only grow; no period goes without documents
/// for longer than a handover can take; every Event is shipped at least
/// once and its copies share one id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_cluster_inputs_survive_sigterm_overwrite_and_sigkill() -> Result<()> {
    use agents::cluster::Cluster;
    use leasehold_testkit::objects;
    let plane = ControlPlane::shared();
    let ksm = plane.kube_state_metrics()?;
    let admin = plane.admin_client().await?;
    let ns = format!("failover-{:04x}", std::process::id() % 0xffff);
    objects::namespace(&admin, &ns).await?;
    objects::pending_pod(&admin, &ns, "watched").await?;
    let scratch = tempfile::tempdir()?;
    let mut creds = Vec::new();
    for k in 1..=3 {
        grant_cluster_reads(plane, k).await?;
        let d = scratch.path().join(format!("agent-{k}"));
        std::fs::create_dir_all(&d)?;
        creds.push(credentials(plane, k, &d)?);
    }
    let server = creds[0].2.clone();
    let text = policy(
        "run-lease",
        &format!(
            "  - id: state\n    type: kubernetes/metrics\n    condition: ${{kubernetes_leaderelection.leader}} == true\n    streams:\n      - metricsets: [state_pod]\n        hosts: ['{}']\n        period: 1s\n      - metricsets: [apiserver]\n        hosts: ['{server}']\n        period: 1s\n        bearer_token_file: '${{env.OUT_DIR}}.token'\n        ssl.certificate_authorities: ['${{env.OUT_DIR}}.ca']\n        metrics_filters.include: ['apiserver_request_total']\n  - id: events\n    type: kubernetes/events\n    condition: ${{kubernetes_leaderelection.leader}} == true\n    namespaces: ['{ns}']\n",
            ksm.url()
        ),
    );
    let mut c = Cluster::start(plane, "run-state", 3, Some(text)).await?;
    // Each agent's own token and the CA, where its policy looks for them
    // (read at every fetch; the first leader is elected a lease duration
    // after the start).
    for (k, (token, ca, _)) in creds.iter().enumerate() {
        std::fs::copy(token, format!("{}.token", c.outs[k].display()))?;
        std::fs::copy(ca, format!("{}.ca", c.outs[k].display()))?;
    }
    let events_api: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(admin.clone(), &ns);
    let stop_ticks = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticks = tokio::spawn(create_ticks(events_api, ns.clone(), stop_ticks.clone()));
    let t0 = now_us();
    // Each leader first writes a few periods of the watched pod, then is
    // disrupted: SIGTERM, a holder overwrite, SIGKILL.
    let watched_by = |c: &Cluster<'_>, agent: &str, n: usize| -> Result<()> {
        let since = now_us();
        let dir = &c.outs[Cluster::index(agent)];
        wait_docs(
            dir,
            Duration::from_secs(LEASE_S * 3) + MARGIN,
            "periods of the new leader",
            |d| {
                d.iter()
                    .filter(|e| {
                        e["input"]["id"] == "state"
                            && e["kubernetes"]["pod"]["name"] == "watched"
                            && e["agent"]["name"] == agent
                            && e["@timestamp"]
                                .as_str()
                                .and_then(|t| parse_ts(t).ok())
                                .is_some_and(|t| t > since)
                    })
                    .count()
                    >= n
            },
        )
        .map(|_| ())
    };
    let leader = c.current_leader()?;
    watched_by(&c, &leader, 3)?;
    let i = Cluster::index(&leader);
    let mut a = c.agents[i].take().context("leader")?;
    a.signal(libc::SIGTERM);
    assert_eq!(a.wait_exit(Duration::from_secs(15))?, Some(0));
    c.agents[i] = Some(c.spawn(i as u32 + 1)?);
    let leader = c.leader_after(now_us(), &[])?;
    watched_by(&c, &leader, 3)?;
    c.lease.overwrite_holder("intruder").await?;
    let leader = c.leader_after(now_us() + 500_000, &[])?;
    watched_by(&c, &leader, 3)?;
    let i = Cluster::index(&leader);
    let mut a = c.agents[i].take().context("leader")?;
    a.signal(libc::SIGKILL);
    a.wait_exit(Duration::from_secs(5))?;
    let leader = c.leader_after(now_us(), &[&leader])?;
    watched_by(&c, &leader, 3)?;
    c.check(t0)?;
    stop_ticks.store(true, std::sync::atomic::Ordering::Relaxed);
    let created = ticks.await??;

    let mut docs_all = Vec::new();
    for d in &c.outs {
        docs_all.extend(docs(d)?);
    }
    let watched: Vec<&Value> = docs_all
        .iter()
        .filter(|e| {
            e["input"]["id"] == "state"
                && e["kubernetes"]["pod"]["name"] == "watched"
                && e["kubernetes"]["namespace"] == ns.as_str()
        })
        .collect();
    if watched.len() <= 5 {
        let states: Vec<String> = docs_all
            .iter()
            .filter(|e| e["input"]["id"] == "state")
            .map(|e| {
                format!(
                    "{} {} {}",
                    e["agent"]["name"], e["@timestamp"], e["kubernetes"]["pod"]["name"]
                )
            })
            .take(40)
            .collect();
        let logs: Vec<String> = c.agents.iter().flatten().map(|a| a.log()).collect();
        bail!(
            "only {} documents for the watched pod; state documents: {states:#?}\nlogs:\n{}",
            watched.len(),
            logs.join("\n----\n")
        );
    }
    // Per aligned period: one document, or identical ones from several agents.
    let mut by_period: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for e in &watched {
        by_period
            .entry(e["@timestamp"].as_str().unwrap_or_default())
            .or_default()
            .push(e);
    }
    let mut shared = 0;
    for (at, es) in &by_period {
        let ids: BTreeSet<&str> = es
            .iter()
            .map(|e| e["@metadata"]["_id"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(ids.len(), 1, "period {at}: different ids {ids:?}");
        let agents: BTreeSet<&str> = es
            .iter()
            .map(|e| e["agent"]["name"].as_str().unwrap_or_default())
            .collect();
        if agents.len() > 1 {
            shared += 1;
        }
        assert!(
            es.iter().all(|e| e["leader"]["term"].is_number()),
            "period {at}: a document without its term"
        );
    }
    // Terms only grow from one period to the next.
    let mut last_term = 0;
    for (at, es) in &by_period {
        let term = es
            .iter()
            .filter_map(|e| e["leader"]["term"].as_i64())
            .max()
            .unwrap_or(0);
        assert!(
            term >= last_term,
            "period {at}: term {term} after {last_term}"
        );
        last_term = term;
    }
    // No period without a document beyond what a handover allows: the lease
    // duration, then a retry, then the next period to start.
    let stamps: Vec<i64> = by_period.keys().filter_map(|t| parse_ts(t).ok()).collect();
    let worst = stamps.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let allowed = ((LEASE_S + RETRY_S + 2) * 1_000_000) as i64 + MARGIN.as_micros() as i64;
    for (at, es) in &by_period {
        let who: Vec<String> = es
            .iter()
            .map(|e| format!("{}@{}", e["agent"]["name"], e["leader"]["term"]))
            .collect();
        println!("  {at}: {who:?}");
    }
    println!(
        "state_pod: {} periods, {shared} written by two agents (same id), longest gap {} ms",
        by_period.len(),
        worst / 1000
    );
    assert!(worst <= allowed, "no document for {} ms", worst / 1000);

    // The API server's metrics were collected under several terms.
    let api_terms: BTreeSet<i64> = docs_all
        .iter()
        .filter(|e| {
            e["input"]["id"] == "state"
                && e["kubernetes"]["apiserver"]["request"]["count"].is_number()
        })
        .filter_map(|e| e["leader"]["term"].as_i64())
        .collect();
    assert!(
        api_terms.len() >= 3,
        "apiserver documents only under terms {api_terms:?}"
    );

    // Events: from the first one shipped on, every one at least once, and
    // every copy of one Event has the same id.
    let mut copies: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for e in docs_all.iter().filter(|e| e["input"]["id"] == "events") {
        let name = e["kubernetes"]["event"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        copies.entry(name.clone()).or_default().insert(
            e["@metadata"]["_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        *count.entry(name).or_default() += 1;
    }
    let first = copies
        .keys()
        .filter_map(|k| k.strip_prefix("tick-")?.parse::<usize>().ok())
        .min()
        .unwrap_or(0);
    // The last Events may still be on their way: allow the final second.
    let expected: Vec<usize> = (first..created.saturating_sub(20)).collect();
    let missing: Vec<&usize> = expected
        .iter()
        .filter(|n| !copies.contains_key(&format!("tick-{n}")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} events not shipped: {:?}",
        missing.len(),
        expected.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(
        copies.values().all(|ids| ids.len() == 1),
        "an Event shipped with two ids"
    );
    let repeats: usize = count.values().map(|n| n - 1).sum();
    println!(
        "events: {created} created, {} shipped from tick-{first} on, {repeats} repeated copies (same id); apiserver under terms {api_terms:?}",
        copies.len()
    );
    Ok(())
}

/// `add_metadata: true`, as Elastic's manifest sets it on every state
/// stream: documents about a pod get its labels (dedotted) and controller,
/// its node's and namespace's labels, from the agent's metadata-only watch
/// of pods, nodes and namespaces (agent 3 may list and watch them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_metadata_joins_the_labels_of_pods_nodes_and_namespaces() -> Result<()> {
    use leasehold_testkit::objects;
    use serde_json::json;
    let plane = ControlPlane::shared();
    let ksm = plane.kube_state_metrics()?;
    let admin = plane.admin_client().await?;
    let suffix = format!("{:04x}", std::process::id() % 0xffff);
    let ns = format!("meta-{suffix}");
    let node = format!("meta-node-{suffix}");
    let k = 3;
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
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "web-1", "labels": {"app.kubernetes.io/name": "web"},
                                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                     "name": "web-5d8f", "uid": "0b1c5a52-6f0e-4c1e-9d55-2a1f6c0d9e11",
                                                     "controller": true}]},
                   "spec": {"nodeName": node, "automountServiceAccountToken": false,
                            "containers": [{"name": "c", "image": "none"}]}}),
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
            "outputs:\n  default: {{type: file, path: '{}', filename: events}}\ninputs:\n  - id: state\n    type: kubernetes/metrics\n    streams:\n      - metricsets: [state_pod, state_node, state_namespace]\n        hosts: ['{}']\n        period: 1s\n        add_metadata: true\n",
            out.display(),
            ksm.url()
        ),
    )?;
    let _agent = AgentProc::start(&policy, &plane.agent_kubeconfig(k), k, "default", &out)?;
    let labelled = |d: &[Value]| -> Option<(Value, Value, Value)> {
        let pod = find(
            d,
            "kubernetes.state_pod",
            &["kubernetes", "pod", "name"],
            "web-1",
        )
        .filter(|p| p["kubernetes"]["namespace"] == ns.as_str())
        .filter(|p| p["kubernetes"]["labels"]["app_kubernetes_io/name"] == "web")?;
        let n = find(
            d,
            "kubernetes.state_node",
            &["kubernetes", "node", "name"],
            &node,
        )
        .filter(|n| n["kubernetes"]["node"]["labels"]["topology_kubernetes_io/zone"] == "z1")?;
        let namespace = find(
            d,
            "kubernetes.state_namespace",
            &["kubernetes", "namespace"],
            &ns,
        )
        .filter(|x| x["kubernetes"]["namespace_labels"]["team"] == "shop")?;
        Some((pod.clone(), n.clone(), namespace.clone()))
    };
    let d = wait_docs(&out, Duration::from_secs(60), "labelled documents", |d| {
        labelled(d).is_some()
    })?;
    let (pod, _, _) = labelled(&d).context("labelled")?;
    assert_eq!(pod["kubernetes"]["replicaset"]["name"], "web-5d8f", "{pod}");
    assert_eq!(
        pod["kubernetes"]["namespace_labels"]["team"], "shop",
        "{pod}"
    );
    assert_eq!(
        pod["kubernetes"]["node"]["labels"]["topology_kubernetes_io/zone"], "z1",
        "{pod}"
    );
    Ok(())
}
