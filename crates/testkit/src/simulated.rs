//! A large simulated cluster in the real API server: Nodes and Pods made
//! directly through the API (no kubelet, no scheduler), as many as a test
//! or benchmark asks for, so that kube-state-metrics and the agents' watches
//! see the object counts of a big cluster.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// What [`populate`] made.
#[derive(Debug, Clone)]
pub struct Simulated {
    /// Node names.
    pub nodes: Vec<String>,
    /// Namespaces the Pods are spread over.
    pub namespaces: Vec<String>,
    /// `namespace/name` of every Pod.
    pub pods: Vec<String>,
    /// How long making them took.
    pub took: Duration,
}

/// Requests in flight while populating.
const IN_FLIGHT: usize = 16;

/// Makes `nodes` Nodes and `pods` Pods (round-robin over `namespaces` new
/// namespaces and over the Nodes, by `spec.nodeName`), every name starting
/// with `prefix`. The Pods stay `Pending`; the Nodes have no status.
pub async fn populate(
    client: &Client,
    prefix: &str,
    nodes: usize,
    namespaces: usize,
    pods: usize,
) -> Result<Simulated> {
    let started = Instant::now();
    let namespace_names: Vec<String> = (0..namespaces.max(1))
        .map(|i| format!("{prefix}-ns-{i}"))
        .collect();
    for ns in &namespace_names {
        crate::objects::namespace(client, ns).await?;
    }
    let node_names: Vec<String> = (0..nodes).map(|i| format!("{prefix}-node-{i}")).collect();
    let node_api = Api::<Node>::all(client.clone());
    futures_util::stream::iter(node_names.iter().map(|name| {
        let api = node_api.clone();
        async move {
            api.create(
                &PostParams::default(),
                &Node {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        labels: Some([("simulated".to_string(), "true".to_string())].into()),
                        ..ObjectMeta::default()
                    },
                    ..Node::default()
                },
            )
            .await
            .with_context(|| format!("creating node {name}"))
        }
    }))
    .buffer_unordered(IN_FLIGHT)
    .try_for_each(|_| async { Ok(()) })
    .await?;
    let pod_keys: Vec<(String, String, Option<String>)> = (0..pods)
        .map(|i| {
            (
                namespace_names[i % namespace_names.len()].clone(),
                format!("{prefix}-pod-{i}"),
                (!node_names.is_empty()).then(|| node_names[i % node_names.len()].clone()),
            )
        })
        .collect();
    futures_util::stream::iter(pod_keys.iter().map(|(ns, name, node)| {
        let api = Api::<Pod>::namespaced(client.clone(), ns);
        async move {
            let mut pod = crate::objects::pod_named(name);
            if let Some(spec) = pod.spec.as_mut() {
                spec.node_name = node.clone();
            }
            api.create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating pod {ns}/{name}"))
        }
    }))
    .buffer_unordered(IN_FLIGHT)
    .try_for_each(|_| async { Ok(()) })
    .await?;
    Ok(Simulated {
        nodes: node_names,
        namespaces: namespace_names,
        pods: pod_keys
            .into_iter()
            .map(|(ns, name, _)| format!("{ns}/{name}"))
            .collect(),
        took: started.elapsed(),
    })
}
