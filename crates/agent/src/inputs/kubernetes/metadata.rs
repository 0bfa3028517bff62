//! `add_metadata: true` of `kubernetes/metrics` streams: documents about a
//! pod, a node or a namespace get that object's labels, as Metricbeat's
//! enrichers add them (`kubernetes.labels.*`, `kubernetes.node.labels.*`,
//! `kubernetes.namespace_labels.*`, dots in label keys made `_`) and the
//! pod's controller (`kubernetes.replicaset.name`, …). The labels come from
//! one metadata-only list+watch per kind for the whole agent (started by
//! the first stream that asks, kept while the agent runs), never from a
//! request per document.

use std::sync::{Arc, OnceLock};

use crate::kubeobj::{Node, Pod};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::kubewatch::{Reflect, reflect};
use serde_json::{Map, Value as Json};

/// The agent's caches of pod, node and namespace metadata.
pub struct Metadata {
    /// Set once connected.
    stores: Arc<OnceLock<Stores>>,
    /// Turns true when `stores` is set.
    connected: tokio::sync::watch::Receiver<bool>,
    /// Whether [`Metadata::ready`] gave up once already (said once, not
    /// by every stream).
    late: std::sync::atomic::AtomicBool,
}

/// The caches, and the client the per-node caches use.
struct Stores {
    client: kube::Client,
    pods: Store<PartialObjectMeta<Pod>>,
    nodes: Store<PartialObjectMeta<Node>>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
}

static SHARED: OnceLock<Arc<Metadata>> = OnceLock::new();

/// The shared caches, started on first use with the agent's connection
/// (`kubeconfig`, else in-cluster). Must be called inside the runtime.
pub fn shared(kubeconfig: Option<std::path::PathBuf>) -> Arc<Metadata> {
    Arc::clone(SHARED.get_or_init(|| Arc::new(Metadata::start(kubeconfig))))
}

/// Labels and owners are what is read: no managed fields, no
/// annotations are kept.
/// A metadata-only copy of every `kind` object, for the agent's lifetime.
fn watch_all<K>(client: &kube::Client, kind: &'static str) -> Store<PartialObjectMeta<K>>
where
    K: crate::kubewatch::Watchable,
{
    reflect(
        Api::<PartialObjectMeta<K>>::all(client.clone()),
        watcher::Config::default(),
        crate::kubewatch::trim_metadata::<K>,
        Reflect {
            what: kind.to_string(),
            cost: "add_metadata: documents go out without these objects' labels (grant list and watch on them)",
            changed: None,
            stop: None,
        },
    )
}

impl Metadata {
    fn start(kubeconfig: Option<std::path::PathBuf>) -> Metadata {
        let stores: Arc<OnceLock<Stores>> = Arc::new(OnceLock::new());
        let set = Arc::clone(&stores);
        let (tell, connected) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let conn = match crate::kubeconn::connect(kubeconfig.as_deref()).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("add_metadata: {e}; documents go out without their labels");
                    return;
                }
            };
            let _ = set.set(Stores {
                pods: watch_all::<Pod>(&conn.client, "pods"),
                nodes: watch_all::<Node>(&conn.client, "nodes"),
                namespaces: watch_all::<Namespace>(&conn.client, "namespaces"),
                client: conn.client,
            });
            let _ = tell.send(true);
        });
        Metadata {
            stores,
            connected,
            late: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Waits, at most `limit`, until the first list of pods, nodes and
    /// namespaces is in the caches, so that a stream's first documents
    /// carry their labels like the later ones. Past the limit (no rights,
    /// API server away) documents go out without labels rather than late;
    /// the watch's own warning says why.
    pub async fn ready(&self, limit: std::time::Duration) {
        let wait = async {
            let mut connected = self.connected.clone();
            if connected.wait_for(|c| *c).await.is_err() {
                return;
            }
            let Some(st) = self.stores.get() else { return };
            let _ = tokio::join!(
                st.pods.wait_until_ready(),
                st.nodes.wait_until_ready(),
                st.namespaces.wait_until_ready()
            );
        };
        if tokio::time::timeout(limit, wait).await.is_err()
            && !self.late.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                "add_metadata: pods, nodes and namespaces not listed within {limit:?}; documents go out without their labels until they are"
            );
        }
    }

    /// Adds what the caches know to a document about a pod, a node or a
    /// namespace; values the document has stay.
    pub fn enrich(&self, doc: &mut Map<String, Json>) {
        let Some(st) = self.stores.get() else { return };
        let Some(Json::Object(k)) = doc.get_mut("kubernetes") else {
            return;
        };
        let text = |k: &Map<String, Json>, a: &str, b: Option<&str>| -> Option<String> {
            let v = k.get(a)?;
            let v = match b {
                Some(b) => v.get(b)?,
                None => v,
            };
            v.as_str().map(str::to_string)
        };
        let namespace = text(k, "namespace", None);
        let pod = text(k, "pod", Some("name"));
        let node = text(k, "node", Some("name"));
        // The kubelet's pod and container usage, relative to the node and
        // the limits (only documents with a usage: a state_pod document
        // names nodes all over the cluster, and watches a node only here).
        let has_usage = ["pod", "container"].iter().any(|t| {
            k.get(*t)
                .and_then(|x| x.get("cpu"))
                .and_then(|c| c.get("usage"))
                .is_some()
        });
        if let (true, Some(node), Some(_)) = (has_usage, &node, &pod) {
            super::resources::of_node(node, &st.client).add_percentages(k);
        }
        if let (Some(ns), Some(pod)) = (&namespace, &pod)
            && let Some(meta) = st.pods.get(&ObjectRef::new(pod).within(ns))
        {
            put_labels(k, "labels", meta.metadata.labels.as_ref());
            if let Some(owner) = meta
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
            {
                let kind = owner.kind.to_ascii_lowercase();
                if !k.contains_key(&kind) {
                    k.insert(kind, serde_json::json!({"name": owner.name}));
                }
            }
        }
        if let Some(node) = &node
            && let Some(meta) = st.nodes.get(&ObjectRef::new(node))
            && let Some(Json::Object(n)) = k.get_mut("node")
        {
            put_labels(n, "labels", meta.metadata.labels.as_ref());
        }
        if let Some(ns) = &namespace
            && let Some(meta) = st.namespaces.get(&ObjectRef::new(ns))
        {
            put_labels(k, "namespace_labels", meta.metadata.labels.as_ref());
            if let Some(uid) = &meta.metadata.uid
                && !k.contains_key("namespace_uid")
            {
                k.insert("namespace_uid".into(), Json::String(uid.clone()));
            }
        }
    }
}

/// `labels` under `key` of `m`, dots in their keys made `_`, unless `m`
/// has `key` already.
fn put_labels(
    m: &mut Map<String, Json>,
    key: &str,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) {
    let Some(labels) = labels.filter(|l| !l.is_empty()) else {
        return;
    };
    if m.contains_key(key) {
        return;
    }
    let dedotted: Map<String, Json> = labels
        .iter()
        .map(|(k, v)| (k.replace('.', "_"), Json::String(v.clone())))
        .collect();
    m.insert(key.into(), Json::Object(dedotted));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_dedotted_and_a_documents_own_stay() {
        let mut m = Map::new();
        let labels = std::collections::BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), "web".to_string()),
            ("tier".to_string(), "front".to_string()),
        ]);
        put_labels(&mut m, "labels", Some(&labels));
        assert_eq!(
            Json::Object(m.clone())["labels"],
            serde_json::json!({"app_kubernetes_io/name": "web", "tier": "front"})
        );
        let other = std::collections::BTreeMap::from([("x".to_string(), "y".to_string())]);
        put_labels(&mut m, "labels", Some(&other));
        assert_eq!(Json::Object(m)["labels"]["tier"], "front");
    }
}
