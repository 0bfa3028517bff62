//! Cluster-wide read rights and credentials for agents in tests.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::api::{ObjectMeta, PostParams};
use leasehold_testkit::ControlPlane;
use serde_json::Value;

/// Lets agent `k` read the API server's `/metrics` (what the `apiserver`
/// metricset needs) and Events in every namespace.
pub async fn grant_cluster_reads(plane: &ControlPlane, k: u32) -> Result<()> {
    let admin = plane.admin_client().await?;
    let name = format!("leasehold-metrics-reader-{k}");
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        rules: Some(vec![
            PolicyRule {
                non_resource_urls: Some(vec!["/metrics".into()]),
                verbs: vec!["get".into()],
                ..Default::default()
            },
            PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["events".into()]),
                verbs: vec!["get".into(), "list".into(), "watch".into()],
                ..Default::default()
            },
        ]),
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
pub fn credentials(plane: &ControlPlane, k: u32, dir: &Path) -> Result<(PathBuf, PathBuf, String)> {
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

/// A `Normal` Event `name` in `ns` about Pod `pod`, happening once at `at`.
pub fn event(
    ns: &str,
    name: &str,
    pod: &str,
    reason: &str,
    message: &str,
    at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> k8s_openapi::api::core::v1::Event {
    use k8s_openapi::api::core::v1::{Event, ObjectReference};
    Event {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("Pod".into()),
            name: Some(pod.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some("Normal".into()),
        count: Some(1),
        first_timestamp: Some(at.clone()),
        last_timestamp: Some(at),
        ..Default::default()
    }
}

/// Creates Events `tick-0`, `tick-1`, … (message: the number) in `ns` every
/// 50 ms until `stop` is set, at most 10 minutes' worth; returns how many.
pub async fn create_ticks(
    api: kube::Api<k8s_openapi::api::core::v1::Event>,
    ns: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<usize> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let mut n = 0usize;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 12_000 {
        let now = Time(jiff::Timestamp::now());
        let ev = event(
            &ns,
            &format!("tick-{n}"),
            "ticker",
            "Tick",
            &n.to_string(),
            now,
        );
        api.create(&PostParams::default(), &ev).await?;
        n += 1;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(n)
}

/// A Role named `name` that lets get, list and watch `resources`, and
/// its RoleBinding to the agents numbered `agents`: least privilege in one
/// namespace (set by whoever creates them).
pub fn reader_role(name: &str, resources: &[&str], agents: &[u32]) -> [Value; 2] {
    let subjects: Vec<Value> = agents
        .iter()
        .map(|k| serde_json::json!({"kind": "User", "name": ControlPlane::agent_user(*k)}))
        .collect();
    [
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": name},
               "rules": [{"apiGroups": [""], "resources": resources, "verbs": ["get", "list", "watch"]}]}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": subjects}),
    ]
}

/// Creates [`reader_role`] in `ns`.
pub async fn grant_reads(
    plane: &ControlPlane,
    ns: &str,
    name: &str,
    resources: &[&str],
    agents: &[u32],
) -> Result<()> {
    let admin = plane.admin_client().await?;
    for object in reader_role(name, resources, agents) {
        leasehold_testkit::objects::create(&admin, Some(ns), object).await?;
    }
    Ok(())
}

/// Lets agents 1..=3 read Events in `ns`.
pub async fn grant_events(plane: &ControlPlane, ns: &str) -> Result<()> {
    grant_reads(plane, ns, "events-reader", &["events"], &[1, 2, 3]).await
}

/// Lets agent `k` get, list and watch pods, nodes and namespaces in every
/// namespace (`add_metadata`, the provider's `add_resource_metadata`).
/// Idempotent: the role may remain from an earlier test on this plane.
pub async fn grant_metadata_reads(plane: &ControlPlane, k: u32) -> Result<()> {
    let admin = plane.admin_client().await?;
    let name = format!("leasehold-metadata-reader-{k}");
    for object in [
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name},
               "rules": [{"apiGroups": [""], "resources": ["pods", "nodes", "namespaces"],
                          "verbs": ["get", "list", "watch"]}]}),
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "User", "name": ControlPlane::agent_user(k)}]}),
    ] {
        if let Err(e) = leasehold_testkit::objects::create(&admin, None, object).await
            && !format!("{e:#}").contains("already exists")
        {
            return Err(e);
        }
    }
    Ok(())
}
