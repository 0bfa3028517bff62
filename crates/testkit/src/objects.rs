//! Objects made directly through the API, for tests of what watches them
//! (kube-state-metrics, the agent's Kubernetes inputs).
//!
//! The test control plane runs no controller-manager, scheduler or kubelet:
//! Deployments and DaemonSets never get Pods, Pods stay `Pending`, Nodes are
//! only what a test writes (their status included), and a namespace has no
//! `default` ServiceAccount unless [`namespace`] makes one. Every object is
//! labelled `app: NAME`, and workloads select on that label.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, Namespace, Node, Pod, PodSpec, PodTemplateSpec, ResourceRequirements, ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// Image of every container made here; never pulled, as no kubelet runs.
pub const IMAGE: &str = "leasehold.invalid/idle:0";

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(BTreeMap::from([("app".to_string(), name.to_string())])),
        ..Default::default()
    }
}

fn pod_spec() -> PodSpec {
    PodSpec {
        containers: vec![Container {
            name: "main".into(),
            image: Some(IMAGE.into()),
            // Requests and limits, so the spec alone gives per-container
            // metrics (no kubelet ever reports a status here).
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("100m".into())),
                    ("memory".to_string(), Quantity("64Mi".into())),
                ])),
                limits: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("500m".into())),
                    ("memory".to_string(), Quantity("128Mi".into())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        }],
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}

fn template(name: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(meta(name)),
        spec: Some(pod_spec()),
    }
}

fn selector(name: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([("app".to_string(), name.to_string())])),
        ..Default::default()
    }
}

/// Creates namespace `name` and its `default` ServiceAccount (which the
/// ServiceAccount admission plugin requires of every Pod, and which only a
/// controller-manager would otherwise make).
pub async fn namespace(client: &Client, name: &str) -> Result<Namespace> {
    let ns = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(name),
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), name)
        .create(&PostParams::default(), &sa)
        .await
        .with_context(|| format!("creating ServiceAccount default in {name}"))?;
    Ok(ns)
}

/// Creates Node `name` and sets its status (through the status subresource,
/// the only way to write it) to one condition: `Ready` is `True`.
pub async fn ready_node(client: &Client, name: &str) -> Result<Node> {
    let nodes = Api::<Node>::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &Node {
                metadata: meta(name),
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("creating node {name}"))?;
    let status = serde_json::json!({"status": {"conditions": [{
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "set by the leasehold testkit",
    }]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("setting node {name} Ready"))
}

/// The Pod [`pending_pod`] creates, not yet created.
pub fn pod_named(name: &str) -> Pod {
    Pod {
        metadata: meta(name),
        spec: Some(pod_spec()),
        ..Default::default()
    }
}

/// Creates Pod `name` in `namespace` (which needs a `default`
/// ServiceAccount, see [`namespace`]); with no scheduler it stays `Pending`.
pub async fn pending_pod(client: &Client, namespace: &str, name: &str) -> Result<Pod> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &pod_named(name))
        .await
        .with_context(|| format!("creating pod {namespace}/{name}"))
}

/// Creates Deployment `name` in `namespace` asking for `replicas` Pods
/// (which no controller makes).
pub async fn deployment(
    client: &Client,
    namespace: &str,
    name: &str,
    replicas: i32,
) -> Result<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &Deployment {
                metadata: meta(name),
                spec: Some(DeploymentSpec {
                    replicas: Some(replicas),
                    selector: selector(name),
                    template: template(name),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("creating deployment {namespace}/{name}"))
}

/// Creates DaemonSet `name` in `namespace` (no controller schedules it).
pub async fn daemonset(client: &Client, namespace: &str, name: &str) -> Result<DaemonSet> {
    Api::<DaemonSet>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &DaemonSet {
                metadata: meta(name),
                spec: Some(DaemonSetSpec {
                    selector: selector(name),
                    template: template(name),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("creating daemonset {namespace}/{name}"))
}

/// Creates the object written as JSON (`apiVersion`, `kind`, `metadata`,
/// …) in `namespace`, or cluster-wide when `None`: for kinds that need no
/// more than their manifest (Services, StatefulSets, Jobs, volumes, …).
pub async fn create(
    client: &Client,
    namespace: Option<&str>,
    object: serde_json::Value,
) -> Result<kube::api::DynamicObject> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let api_version = object["apiVersion"]
        .as_str()
        .context("apiVersion")?
        .to_string();
    let kind = object["kind"].as_str().context("kind")?.to_string();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &kind));
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("?")
        .to_string();
    let obj: DynamicObject = serde_json::from_value(object)?;
    api.create(&PostParams::default(), &obj)
        .await
        .with_context(|| {
            format!(
                "creating {kind} {}{name}",
                namespace.map(|n| format!("{n}/")).unwrap_or_default()
            )
        })
}
