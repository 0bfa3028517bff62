//! What the kubelet metricsets' percentages are relative to, as Metricbeat
//! computes them with `add_metadata`: the node's allocatable CPU and memory
//! and each container's limits. One watch of the node object and one of
//! its pods (field selectors), per node a stream reports on, started on
//! first use; until they have synced the percentages are left out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::kubeobj::{Container, Node, Pod};
use kube::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::kubewatch::{Reflect, reflect};
use serde_json::{Map, Value as Json, json};

/// The node's object and its pods.
pub struct NodeResources {
    node: Store<Node>,
    pods: Store<Pod>,
    name: String,
}

type ByNode = Mutex<HashMap<String, Arc<NodeResources>>>;

static STARTED: OnceLock<ByNode> = OnceLock::new();

/// The caches of node `name`, started on first use.
pub fn of_node(name: &str, client: &kube::Client) -> Arc<NodeResources> {
    let map = STARTED.get_or_init(ByNode::default);
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(
        m.entry(name.to_string())
            .or_insert_with(|| Arc::new(NodeResources::start(name, client.clone()))),
    )
}

/// The managed fields are never read.
fn trim<K: kube::Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

fn watched<K>(client: &kube::Client, config: watcher::Config, what: String) -> Store<K>
where
    K: crate::kubewatch::Watchable,
{
    reflect(
        Api::<K>::all(client.clone()),
        config,
        trim::<K>,
        Reflect {
            what,
            cost: "add_metadata: the kubelet metricsets' percentages are left out (grant list and watch on nodes and pods)",
            changed: None,
            stop: None,
        },
    )
}

impl NodeResources {
    fn start(name: &str, client: kube::Client) -> NodeResources {
        let node = watched(
            &client,
            watcher::Config::default().fields(&format!("metadata.name={name}")),
            format!("node {name}"),
        );
        let pods = watched(
            &client,
            watcher::Config::default().fields(&format!("spec.nodeName={name}")),
            format!("the pods of node {name}"),
        );
        NodeResources {
            node,
            pods,
            name: name.to_string(),
        }
    }

    /// Allocatable (cores, memory bytes) of the node, once known.
    fn allocatable(&self) -> Option<(f64, f64)> {
        let node = self.node.get(&ObjectRef::new(&self.name))?;
        let a = node.status.as_ref()?.allocatable.as_ref()?;
        Some((quantity(&a.get("cpu")?.0)?, quantity(&a.get("memory")?.0)?))
    }

    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods.get(&ObjectRef::new(name).within(namespace))
    }

    /// Adds `cpu.usage.{node,limit}.pct` and `memory.usage.{node,limit}.pct`
    /// to a `pod` or `container` document of the kubelet metricsets (the
    /// limit is the node's where a container has none, as Metricbeat does).
    pub fn add_percentages(&self, k: &mut Map<String, Json>) {
        let Some((cores, memory)) = self.allocatable() else {
            return;
        };
        let (Some(ns), Some(pod_name)) = (
            k.get("namespace")
                .and_then(Json::as_str)
                .map(str::to_string),
            k.get("pod")
                .and_then(|p| p.get("name"))
                .and_then(Json::as_str)
                .map(str::to_string),
        ) else {
            return;
        };
        let pod = self.pod(&ns, &pod_name);
        let containers: Vec<&Container> = pod
            .as_deref()
            .and_then(|p| p.spec.as_ref())
            .map(|s| s.containers.iter().collect())
            .unwrap_or_default();
        let limit = |c: &Container, what: &str| -> Option<f64> {
            quantity(&c.resources.as_ref()?.limits.as_ref()?.get(what)?.0)
        };
        // A container document: its own limits; a pod document: the sum
        // of its containers' (the node's when one has none).
        let (target, cpu_limit, mem_limit) = match k
            .get("container")
            .and_then(|c| c.get("name"))
            .and_then(Json::as_str)
        {
            Some(name) => {
                let c = containers.iter().find(|c| c.name == name);
                (
                    "container",
                    c.and_then(|c| limit(c, "cpu")).unwrap_or(cores),
                    c.and_then(|c| limit(c, "memory")).unwrap_or(memory),
                )
            }
            None => {
                let sum = |what: &str, node: f64| -> f64 {
                    containers
                        .iter()
                        .map(|c| limit(c, what))
                        .sum::<Option<f64>>()
                        .filter(|_| !containers.is_empty())
                        .unwrap_or(node)
                };
                ("pod", sum("cpu", cores), sum("memory", memory))
            }
        };
        let Some(Json::Object(t)) = k.get_mut(target) else {
            return;
        };
        let ratio = |v: Option<f64>, of: f64| v.filter(|_| of > 0.0).map(|v| v / of);
        let used_cores = t
            .get("cpu")
            .and_then(|c| c.get("usage"))
            .and_then(|u| u.get("nanocores"))
            .and_then(Json::as_f64)
            .map(|n| n / 1e9);
        let used_memory = t
            .get("memory")
            .and_then(|m| m.get("usage"))
            .and_then(|u| u.get("bytes"))
            .and_then(Json::as_f64);
        let mut put = |path: [&str; 3], v: Option<f64>| {
            if let Some(v) = v {
                set(t, &path, json!(v));
            }
        };
        put(["cpu", "usage", "node"], ratio(used_cores, cores));
        put(["cpu", "usage", "limit"], ratio(used_cores, cpu_limit));
        put(["memory", "usage", "node"], ratio(used_memory, memory));
        put(["memory", "usage", "limit"], ratio(used_memory, mem_limit));
    }
}

/// `m.a.b.c.pct = v`, creating the maps on the way.
fn set(m: &mut Map<String, Json>, path: &[&str; 3], v: Json) {
    let mut at = m;
    for p in path {
        let next = at
            .entry(p.to_string())
            .or_insert_with(|| Json::Object(Map::new()));
        if !next.is_object() {
            return;
        }
        let Json::Object(inner) = next else { return };
        at = inner;
    }
    at.insert("pct".into(), v);
}

/// A Kubernetes quantity (`500m`, `2`, `1.5`, `128Mi`, `1G`, `1e9`) as a
/// number of its unit (cores, bytes).
pub fn quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        for (q, want) in [
            ("500m", 0.5),
            ("2", 2.0),
            ("1.5", 1.5),
            ("128Mi", 134_217_728.0),
            ("1Gi", 1_073_741_824.0),
            ("1G", 1e9),
            ("1e3", 1000.0),
            ("100k", 1e5),
        ] {
            assert_eq!(quantity(q), Some(want), "{q}");
        }
        assert_eq!(quantity("lots"), None);
        assert_eq!(quantity("5Zi"), None);
    }
}
