//! The `state_*` metricsets of `kubernetes/metrics`: kube-state-metrics'
//! families mapped to one document per object, with the field names of
//! Elastic's Kubernetes integration.
//!
//! | metricset | object | fields |
//! |---|---|---|
//! | `state_node` | node | `kubernetes.node.name`, `.status.ready` (`true`/`false`/`unknown`), `.status.unschedulable`, `.cpu.capacity.cores`, `.cpu.allocatable.cores`, `.memory.capacity.bytes`, `.memory.allocatable.bytes`, `.pod.capacity.total`, `.pod.allocatable.total`, `.kubelet.version` |
//! | `state_pod` | namespace/pod | `kubernetes.namespace`, `kubernetes.pod.{name,uid,ip,host_ip}`, `kubernetes.node.name`, `kubernetes.pod.status.{phase,ready,scheduled}` (phase lower-case, e.g. `pending`) |
//! | `state_container` | namespace/pod/container | `kubernetes.container.{name,image,id}`, `.status.{ready,restarts,phase,reason}`, `.cpu.{request,limit}.cores`, `.memory.{request,limit}.bytes`, `kubernetes.pod.name`, `kubernetes.namespace` |
//! | `state_deployment` | namespace/deployment | `kubernetes.deployment.name`, `.replicas.{desired,current,available,unavailable,updated}`, `.paused` |
//! | `state_daemonset` | namespace/daemonset | `kubernetes.daemonset.name`, `.replicas.{desired,current,ready,available,unavailable,updated,misscheduled}` |
//! | `state_namespace` | namespace | `kubernetes.namespace`, `kubernetes.state_namespace.status.{active,terminating}`, `.created.sec` |

use std::collections::BTreeMap;

use leasehold_prometheus_text::{Family, Text};
use serde_json::{Map, Value as Json, json};

use super::doc::set_path;
use crate::inputs::prometheus::number;
use crate::inputs::scrape::{Doc, Metricset};

/// The `state_*` metricsets, by name.
pub const STATE_METRICSETS: [&str; 6] = [
    "state_node",
    "state_pod",
    "state_container",
    "state_deployment",
    "state_daemonset",
    "state_namespace",
];

/// The kube-state-metrics families the `state_*` metricsets read (a
/// counter's family may also carry `_total`). A scrape builds only these:
/// a large cluster's exposition is mostly labels, annotations and
/// objects no metricset reads.
pub const FAMILIES: [&str; 31] = [
    "kube_daemonset_status_current_number_scheduled",
    "kube_daemonset_status_desired_number_scheduled",
    "kube_daemonset_status_number_available",
    "kube_daemonset_status_number_misscheduled",
    "kube_daemonset_status_number_ready",
    "kube_daemonset_status_number_unavailable",
    "kube_daemonset_status_updated_number_scheduled",
    "kube_deployment_spec_paused",
    "kube_deployment_spec_replicas",
    "kube_deployment_status_replicas",
    "kube_deployment_status_replicas_available",
    "kube_deployment_status_replicas_unavailable",
    "kube_deployment_status_replicas_updated",
    "kube_namespace_created",
    "kube_namespace_status_phase",
    "kube_node_info",
    "kube_node_spec_unschedulable",
    "kube_node_status_allocatable",
    "kube_node_status_capacity",
    "kube_node_status_condition",
    "kube_pod_container_info",
    "kube_pod_container_resource_limits",
    "kube_pod_container_resource_requests",
    "kube_pod_container_status_ready",
    "kube_pod_container_status_restarts",
    "kube_pod_container_status_terminated_reason",
    "kube_pod_container_status_waiting_reason",
    "kube_pod_info",
    "kube_pod_status_phase",
    "kube_pod_status_ready",
    "kube_pod_status_scheduled",
];

/// One `state_*` metricset.
pub struct State {
    name: &'static str,
}

impl State {
    /// The metricset called `name`, if it is one.
    pub fn named(name: &str) -> Option<State> {
        STATE_METRICSETS
            .into_iter()
            .chain(super::state_tables::names())
            .find(|n| *n == name)
            .map(|n| State { name: n })
    }
}

/// Every `state_*` metricset: those built here and those written as
/// tables ([`super::state_tables`]).
pub fn names() -> Vec<&'static str> {
    STATE_METRICSETS
        .into_iter()
        .chain(super::state_tables::names())
        .collect()
}

/// Every family any `state_*` metricset reads.
static ALL_FAMILIES: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
    FAMILIES
        .into_iter()
        .chain(super::state_tables::families())
        .collect()
});

/// Documents being built, by object key.
#[derive(Default)]
struct Objects(BTreeMap<String, Map<String, Json>>);

impl Objects {
    fn set(&mut self, key: &str, path: &str, value: Json) {
        let doc = self.0.entry(key.to_string()).or_default();
        set_path(doc, path, value);
    }

    fn has(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    fn into_docs(self) -> Vec<Doc> {
        self.0
            .into_iter()
            .map(|(object, fields)| Doc { object, fields })
            .collect()
    }
}

fn label<'a>(labels: &'a [(Text, Text)], name: &str) -> Option<&'a str> {
    labels.iter().find(|(k, _)| &**k == name).map(|(_, v)| &**v)
}

/// Every sample of family `name` (its samples named `name` or
/// `name_total`), with labels and value.
fn samples<'a>(
    families: &'a [Family],
    name: &'a str,
) -> impl Iterator<Item = (&'a [(Text, Text)], f64)> + 'a {
    families
        .iter()
        .filter(move |f| f.name == name || f.name.strip_suffix("_total") == Some(name))
        .flat_map(|f| f.samples.iter())
        .filter(move |s| {
            &*s.name == name
                || s.name.strip_suffix("_total") == Some(name)
                || *s.name == format!("{name}_total")
        })
        .map(|s| (s.labels.as_slice(), s.value))
}

impl Metricset for State {
    fn name(&self) -> &str {
        self.name
    }

    fn module(&self) -> &str {
        "kubernetes"
    }

    fn families(&self) -> Option<&'static [&'static str]> {
        Some(ALL_FAMILIES.as_slice())
    }

    fn documents(&self, families: &[Family], _host: &str) -> Vec<Doc> {
        match self.name {
            "state_node" => nodes(families),
            "state_pod" => pods(families),
            "state_container" => containers(families),
            "state_deployment" => deployments(families),
            "state_daemonset" => daemonsets(families),
            "state_namespace" => namespaces(families),
            other => super::state_tables::documents(other, families).unwrap_or_default(),
        }
    }
}

fn nodes(f: &[Family]) -> Vec<Doc> {
    let mut o = Objects::default();
    for (l, _) in samples(f, "kube_node_info") {
        let Some(node) = label(l, "node") else {
            continue;
        };
        o.set(node, "kubernetes.node.name", json!(node));
        if let Some(v) = label(l, "kubelet_version") {
            o.set(node, "kubernetes.node.kubelet.version", json!(v));
        }
    }
    for (l, v) in samples(f, "kube_node_status_condition") {
        if let (Some(node), Some("Ready"), Some(status)) =
            (label(l, "node"), label(l, "condition"), label(l, "status"))
            && v == 1.0
            && o.has(node)
        {
            o.set(node, "kubernetes.node.status.ready", json!(status));
        }
    }
    for (l, v) in samples(f, "kube_node_spec_unschedulable") {
        if let Some(node) = label(l, "node").filter(|n| o.has(n)) {
            o.set(
                node,
                "kubernetes.node.status.unschedulable",
                json!(v == 1.0),
            );
        }
    }
    for (family, what) in [
        ("kube_node_status_capacity", "capacity"),
        ("kube_node_status_allocatable", "allocatable"),
    ] {
        for (l, v) in samples(f, family) {
            let Some(node) = label(l, "node").filter(|n| o.has(n)) else {
                continue;
            };
            let path = match label(l, "resource") {
                Some("cpu") => format!("kubernetes.node.cpu.{what}.cores"),
                Some("memory") => format!("kubernetes.node.memory.{what}.bytes"),
                Some("pods") => format!("kubernetes.node.pod.{what}.total"),
                _ => continue,
            };
            o.set(node, &path, number(v));
        }
    }
    o.into_docs()
}

fn pod_key(l: &[(Text, Text)]) -> Option<(String, &str, &str)> {
    let ns = label(l, "namespace")?;
    let pod = label(l, "pod")?;
    Some((format!("{ns}/{pod}"), ns, pod))
}

fn pods(f: &[Family]) -> Vec<Doc> {
    let mut o = Objects::default();
    for (l, _) in samples(f, "kube_pod_info") {
        let Some((key, ns, pod)) = pod_key(l) else {
            continue;
        };
        o.set(&key, "kubernetes.namespace", json!(ns));
        o.set(&key, "kubernetes.pod.name", json!(pod));
        for (lbl, path) in [
            ("uid", "kubernetes.pod.uid"),
            ("pod_ip", "kubernetes.pod.ip"),
            ("host_ip", "kubernetes.pod.host_ip"),
            ("node", "kubernetes.node.name"),
        ] {
            if let Some(v) = label(l, lbl).filter(|v| !v.is_empty()) {
                o.set(&key, path, json!(v));
            }
        }
    }
    for (l, v) in samples(f, "kube_pod_status_phase") {
        if let (Some((key, _, _)), Some(phase)) = (pod_key(l), label(l, "phase"))
            && v == 1.0
            && o.has(&key)
        {
            o.set(
                &key,
                "kubernetes.pod.status.phase",
                json!(phase.to_lowercase()),
            );
        }
    }
    for (family, field) in [
        ("kube_pod_status_ready", "ready"),
        ("kube_pod_status_scheduled", "scheduled"),
    ] {
        for (l, v) in samples(f, family) {
            if let (Some((key, _, _)), Some(c)) = (pod_key(l), label(l, "condition"))
                && v == 1.0
                && o.has(&key)
            {
                o.set(&key, &format!("kubernetes.pod.status.{field}"), json!(c));
            }
        }
    }
    o.into_docs()
}

fn containers(f: &[Family]) -> Vec<Doc> {
    let mut o = Objects::default();
    let key_of = |l: &[(Text, Text)]| -> Option<(String, String, String, String)> {
        let ns = label(l, "namespace")?;
        let pod = label(l, "pod")?;
        let c = label(l, "container")?;
        Some((format!("{ns}/{pod}/{c}"), ns.into(), pod.into(), c.into()))
    };
    let ensure = |o: &mut Objects, l: &[(Text, Text)]| -> Option<String> {
        let (key, ns, pod, c) = key_of(l)?;
        if !o.has(&key) {
            o.set(&key, "kubernetes.namespace", json!(ns));
            o.set(&key, "kubernetes.pod.name", json!(pod));
            o.set(&key, "kubernetes.container.name", json!(c));
        }
        Some(key)
    };
    for (l, _) in samples(f, "kube_pod_container_info") {
        let Some(key) = ensure(&mut o, l) else {
            continue;
        };
        if let Some(i) = label(l, "image").filter(|v| !v.is_empty()) {
            o.set(&key, "kubernetes.container.image", json!(i));
        }
        if let Some(i) = label(l, "container_id").filter(|v| !v.is_empty()) {
            o.set(&key, "kubernetes.container.id", json!(i));
        }
    }
    for (family, kind) in [
        ("kube_pod_container_resource_requests", "request"),
        ("kube_pod_container_resource_limits", "limit"),
    ] {
        for (l, v) in samples(f, family) {
            let path = match label(l, "resource") {
                Some("cpu") => format!("kubernetes.container.cpu.{kind}.cores"),
                Some("memory") => format!("kubernetes.container.memory.{kind}.bytes"),
                _ => continue,
            };
            if let Some(key) = ensure(&mut o, l) {
                o.set(&key, &path, number(v));
            }
        }
    }
    for (l, v) in samples(f, "kube_pod_container_status_ready") {
        if let Some(key) = ensure(&mut o, l) {
            o.set(&key, "kubernetes.container.status.ready", json!(v == 1.0));
        }
    }
    for (l, v) in samples(f, "kube_pod_container_status_restarts") {
        if let Some(key) = ensure(&mut o, l) {
            o.set(&key, "kubernetes.container.status.restarts", number(v));
        }
    }
    for phase in ["running", "waiting", "terminated"] {
        for (l, v) in samples(f, &format!("kube_pod_container_status_{phase}")) {
            if v == 1.0
                && let Some(key) = ensure(&mut o, l)
            {
                o.set(&key, "kubernetes.container.status.phase", json!(phase));
            }
        }
    }
    for family in [
        "kube_pod_container_status_waiting_reason",
        "kube_pod_container_status_terminated_reason",
    ] {
        for (l, v) in samples(f, family) {
            if v == 1.0
                && let Some(reason) = label(l, "reason")
                && let Some(key) = ensure(&mut o, l)
            {
                o.set(&key, "kubernetes.container.status.reason", json!(reason));
            }
        }
    }
    o.into_docs()
}

/// Namespaced objects of one kind: (family, field under `kubernetes.KIND.`).
fn namespaced(f: &[Family], kind: &str, fields: &[(&str, &str, bool)]) -> Vec<Doc> {
    let mut o = Objects::default();
    for (family, path, boolean) in fields {
        for (l, v) in samples(f, family) {
            let (Some(ns), Some(name)) = (label(l, "namespace"), label(l, kind)) else {
                continue;
            };
            let key = format!("{ns}/{name}");
            if !o.has(&key) {
                o.set(&key, "kubernetes.namespace", json!(ns));
                o.set(&key, &format!("kubernetes.{kind}.name"), json!(name));
            }
            let value = if *boolean { json!(v == 1.0) } else { number(v) };
            o.set(&key, &format!("kubernetes.{kind}.{path}"), value);
        }
    }
    o.into_docs()
}

fn deployments(f: &[Family]) -> Vec<Doc> {
    namespaced(
        f,
        "deployment",
        &[
            ("kube_deployment_spec_replicas", "replicas.desired", false),
            ("kube_deployment_status_replicas", "replicas.current", false),
            (
                "kube_deployment_status_replicas_available",
                "replicas.available",
                false,
            ),
            (
                "kube_deployment_status_replicas_unavailable",
                "replicas.unavailable",
                false,
            ),
            (
                "kube_deployment_status_replicas_updated",
                "replicas.updated",
                false,
            ),
            ("kube_deployment_spec_paused", "paused", true),
        ],
    )
}

fn daemonsets(f: &[Family]) -> Vec<Doc> {
    namespaced(
        f,
        "daemonset",
        &[
            (
                "kube_daemonset_status_desired_number_scheduled",
                "replicas.desired",
                false,
            ),
            (
                "kube_daemonset_status_current_number_scheduled",
                "replicas.current",
                false,
            ),
            (
                "kube_daemonset_status_number_ready",
                "replicas.ready",
                false,
            ),
            (
                "kube_daemonset_status_number_available",
                "replicas.available",
                false,
            ),
            (
                "kube_daemonset_status_number_unavailable",
                "replicas.unavailable",
                false,
            ),
            (
                "kube_daemonset_status_updated_number_scheduled",
                "replicas.updated",
                false,
            ),
            (
                "kube_daemonset_status_number_misscheduled",
                "replicas.misscheduled",
                false,
            ),
        ],
    )
}

fn namespaces(f: &[Family]) -> Vec<Doc> {
    let mut o = Objects::default();
    for (l, v) in samples(f, "kube_namespace_status_phase") {
        let (Some(ns), Some(phase)) = (label(l, "namespace"), label(l, "phase")) else {
            continue;
        };
        o.set(ns, "kubernetes.namespace", json!(ns));
        o.set(
            ns,
            &format!("kubernetes.state_namespace.status.{}", phase.to_lowercase()),
            json!(v == 1.0),
        );
    }
    for (l, v) in samples(f, "kube_namespace_created") {
        if let Some(ns) = label(l, "namespace").filter(|n| o.has(n)) {
            o.set(ns, "kubernetes.state_namespace.created.sec", number(v));
        }
    }
    o.into_docs()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family name this file reads is in [`FAMILIES`]: one left out
    /// would never be built, and its fields would be missing silently.
    #[test]
    fn every_family_read_is_listed() {
        let source = include_str!("state.rs");
        let code = &source[..source.find("#[cfg(test)]").unwrap_or(source.len())];
        let mut read = std::collections::BTreeSet::new();
        for piece in code.split('"').skip(1).step_by(2) {
            if piece.starts_with("kube_")
                && piece.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            {
                read.insert(piece);
            }
        }
        assert!(read.len() >= 20, "found {read:?}");
        let listed: std::collections::BTreeSet<&str> = FAMILIES.into_iter().collect();
        assert_eq!(read, listed);
    }
}
