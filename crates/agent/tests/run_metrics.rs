//! Scraping inputs on real servers: `prometheus/metrics` (`collector`) and
//! `kubernetes/metrics` (`apiserver`) against the real API server's
//! `/metrics` with the agent's own credentials, and the `state_*`
//! metricsets against a real kube-state-metrics watching objects this test
//! creates. Judged from the agent's file output.

mod agents;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use agents::*;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{ObjectMeta, PostParams};
use leasehold_testkit::ControlPlane;
use serde_json::Value;

/// Every event in `dir/events.ndjson` as JSON.
fn docs(dir: &Path) -> Result<Vec<Value>> {
    let Ok(text) = std::fs::read_to_string(dir.join("events.ndjson")) else {
        return Ok(Vec::new());
    };
    text.lines().map(|l| Ok(serde_json::from_str(l)?)).collect()
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

/// Lets agent `k` read the API server's `/metrics` (the least privilege the
/// `apiserver` metricset needs).
async fn grant_metrics(plane: &ControlPlane, k: u32) -> Result<()> {
    let admin = plane.admin_client().await?;
    let name = format!("leasehold-metrics-reader-{k}");
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            non_resource_urls: Some(vec!["/metrics".into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        }]),
        ..Default::default()
    };
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: ControlPlane::agent_user(k),
            ..Default::default()
        }]),
    };
    let pp = PostParams::default();
    for r in [
        kube::Api::<ClusterRole>::all(admin.clone())
            .create(&pp, &role)
            .await
            .map(|_| ()),
        kube::Api::<ClusterRoleBinding>::all(admin)
            .create(&pp, &binding)
            .await
            .map(|_| ()),
    ] {
        match r {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The agent's bearer token and the cluster CA, as files.
fn credentials(
    plane: &ControlPlane,
    k: u32,
    dir: &Path,
) -> Result<(std::path::PathBuf, std::path::PathBuf, String)> {
    let kc: Value = serde_json::from_str(&std::fs::read_to_string(plane.agent_kubeconfig(k))?)?;
    let token = kc["users"][0]["user"]["token"]
        .as_str()
        .context("token in kubeconfig")?;
    let server = kc["clusters"][0]["cluster"]["server"]
        .as_str()
        .context("server")?
        .to_string();
    let ca_b64 = kc["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .context("CA data")?;
    let ca = base64_decode(ca_b64)?;
    let token_file = dir.join("token");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&token_file, token)?;
    std::fs::write(&ca_file, ca)?;
    Ok((token_file, ca_file, server))
}

fn base64_decode(s: &str) -> Result<Vec<u8>> {
    let table = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| *c != b'=' && !c.is_ascii_whitespace()) {
        acc = (acc << 6) | table(c).context("bad base64")?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_is_scraped_with_the_agents_credentials() -> Result<()> {
    let plane = ControlPlane::shared();
    grant_metrics(plane, 1).await?;
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
    // agent-2 is never granted /metrics.
    let (token, ca, server) = credentials(plane, 2, dir.path())?;
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
    let agent = AgentProc::start(&policy, Path::new("/nonexistent"), 2, "default", &out)?;
    let line = agent.wait_log("fetch failed", Duration::from_secs(10))?;
    assert!(line.contains("403"), "{line}");
    Ok(())
}
