//! The `kubernetes` dynamic provider: watches the pods of this agent's node
//! (or of the cluster) and publishes one mapping per pod and per container
//! (see [`mapping`]); the runtime renders every input that reads
//! `${kubernetes.…}` once per mapping, so a container-log input exists for
//! each container while it runs. One list+watch of pods (kube-rs'
//! watcher, re-listing after the API server expires the watch), a field
//! selector `spec.nodeName` in node scope; no request per event.
//!
//! A deleted pod's mappings stay for `cleanup_timeout`, so its log inputs
//! read what the container wrote last, then go.

pub mod beats_hints;
pub mod hint_hosts;
pub mod hints;
pub mod kept;
pub mod mapping;
pub mod settings;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::kubeobj::{Node, Pod, Service};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use leasehold_policy::dynamic::Mapping;
use leasehold_policy::incremental::MappingSource;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::settings::{ProviderSettings, Scope};
use crate::kubewatch::{Reflect, reflect};
use crate::monitor::status::StatusBoard;

/// The provider's name in policies and in `/status` problems.
pub const PROVIDER: &str = leasehold_policy::dynamic::POD_PROVIDER;
/// How long the first mappings wait for the node's and namespaces' labels.
const RELATED_SYNC: std::time::Duration = std::time::Duration::from_secs(5);

/// Pods per page of the provider's LIST.
const LIST_PAGE: u32 = 100;

/// The `/status` problem of a provider that cannot watch pods.
pub const PROVIDER_PROBLEM: &str = "kubernetes provider";

/// One batch of changed objects (Pods by uid, Nodes and Services by uid):
/// their mappings are read again from the [`Source`].
pub type Changes = Vec<String>;

/// The running provider: the objects it sees ([`Source`]) and which of
/// them changed, one object (a Pod with its containers, a Node, a
/// Service) at a time.
pub struct Provider {
    /// Batches of changed objects, in the order they changed.
    pub changes: mpsc::UnboundedReceiver<Changes>,
    /// What the provider sees; the mappings are built from it when read.
    pub source: Source,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Provider {
    /// Starts watching with `client`. `node` is the node name used in node
    /// scope when the settings name none.
    pub fn start(
        settings: ProviderSettings,
        client: kube::Client,
        node: String,
        board: StatusBoard,
    ) -> Provider {
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let node = settings.node.clone().unwrap_or(node);
        let (changed_tx, changed_rx) = mpsc::unbounded_channel();
        let related = RelatedStores::start(&settings, &client, &node, changed_tx, &stop);
        let source = Source::new(settings.clone(), related);
        let task = tokio::spawn(run(
            settings,
            client,
            node,
            board,
            source.clone(),
            changed_rx,
            tx,
            stop.clone(),
        ));
        Provider {
            changes: rx,
            source,
            stop,
            task,
        }
    }

    /// Stops watching.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// What the provider sees, shared by its watch (which writes) and the
/// runtime (which reads mappings when it renders): every Pod once, as a
/// [`kept::KeptPod`]; mappings are built from it when read, never kept.
#[derive(Clone)]
pub struct Source {
    inner: Arc<std::sync::Mutex<Seen>>,
}

struct Seen {
    settings: ProviderSettings,
    related: RelatedStores,
    pods: BTreeMap<String, kept::KeptPod>,
    /// Deleted (or gone from a re-list) pods and when their mappings go.
    leaving: BTreeMap<String, Instant>,
    /// Objects changed since the last [`Source::take_changes`].
    dirty: BTreeSet<String>,
    /// The Nodes and Services that have mappings of their own, by uid.
    own: HashMap<String, Own>,
    /// A hash of the labels (and uid) of each node and namespace, as the
    /// mappings last read them: a change elsewhere in those objects (a
    /// node's status) rebuilds nothing.
    related_seen: HashMap<(bool, String), u64>,
}

/// A Node or Service with mappings of its own, by name.
#[derive(Clone, PartialEq)]
enum Own {
    Node(String),
    Service(String, String),
}

impl Source {
    /// Sees no object yet; `related` are the nodes, namespaces and services
    /// the mappings read.
    pub fn new(settings: ProviderSettings, related: RelatedStores) -> Source {
        Source {
            inner: Arc::new(std::sync::Mutex::new(Seen {
                settings,
                related,
                pods: BTreeMap::new(),
                leaving: BTreeMap::new(),
                dirty: BTreeSet::new(),
                own: HashMap::new(),
                related_seen: HashMap::new(),
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        // A panic while holding it left plain data behind: keep using it.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes in a Pod from the watch.
    pub fn upsert(&self, pod: Pod) {
        let pod = kept::KeptPod::from(pod);
        if pod.uid().is_empty() {
            return;
        }
        let mut seen = self.lock();
        let warned = seen
            .pods
            .get(pod.uid())
            .is_some_and(|p| p.annotations_cut() > 0);
        if pod.annotations_cut() > 0 && !warned {
            tracing::warn!(
                pod = %format!("{}/{}", pod.namespace(), pod.name()),
                left_out = pod.annotations_cut(),
                "kubernetes provider: the pod's annotations exceed {} bytes; hints first, the rest past that bound are not published",
                kept::ANNOTATION_BYTES_PER_POD
            );
        }
        let uid = pod.uid().to_string();
        seen.leaving.remove(&uid);
        seen.dirty.insert(uid.clone());
        seen.pods.insert(uid, pod);
    }

    /// The Pod's mappings go at `at` (its cleanup timeout).
    pub fn leave(&self, uid: String, at: Instant) {
        let mut seen = self.lock();
        if seen.pods.contains_key(&uid) {
            seen.leaving.entry(uid).or_insert(at);
        }
    }

    /// The uids of the Pods seen.
    fn pod_uids(&self) -> Vec<String> {
        self.lock().pods.keys().cloned().collect()
    }

    /// Forgets the pods whose cleanup timeout passed; true if any.
    fn expire(&self, now: Instant) -> bool {
        let mut seen = self.lock();
        let due: Vec<String> = seen
            .leaving
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &due {
            seen.leaving.remove(uid);
            seen.pods.remove(uid);
            seen.dirty.insert(uid.clone());
        }
        !due.is_empty()
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.lock().leaving.values().min().copied()
    }

    /// Nodes, namespaces or services changed: the Pods on a node or in a
    /// namespace whose labels (or uid) changed are changed, and so is
    /// every Node's and Service's own mapping.
    fn related_changed(&self) {
        let mut seen = self.lock();
        let mut now: HashMap<(bool, String), u64> = HashMap::new();
        let mut own: HashMap<String, Own> = HashMap::new();
        if let Some(nodes) = &seen.related.nodes {
            for n in nodes.state() {
                let name = n.metadata.name.clone().unwrap_or_default();
                now.insert(
                    (true, name.clone()),
                    labels_hash(None, n.metadata.labels.as_ref()),
                );
                if seen.settings.resources.node
                    && let Some(uid) = n.metadata.uid.clone()
                {
                    own.insert(uid, Own::Node(name));
                }
            }
        }
        if let Some(namespaces) = &seen.related.namespaces {
            for n in namespaces.state() {
                let name = n.metadata.name.clone().unwrap_or_default();
                let h = labels_hash(n.metadata.uid.as_deref(), n.metadata.labels.as_ref());
                now.insert((false, name), h);
            }
        }
        if let Some(services) = &seen.related.services {
            for svc in services.state() {
                if let (Some(uid), Some(name)) =
                    (svc.metadata.uid.clone(), svc.metadata.name.clone())
                {
                    let ns = svc.metadata.namespace.clone().unwrap_or_default();
                    own.insert(uid, Own::Service(ns, name));
                }
            }
        }
        let mut changed: BTreeSet<(bool, String)> = BTreeSet::new();
        for (k, h) in &now {
            if seen.related_seen.get(k) != Some(h) {
                changed.insert(k.clone());
            }
        }
        for k in seen.related_seen.keys() {
            if !now.contains_key(k) {
                changed.insert(k.clone());
            }
        }
        seen.related_seen = now;
        // Every Node's and Service's own mapping is read again (the
        // rendering skips those that did not change), and those gone go.
        let mut dirty: Vec<String> = own.keys().cloned().collect();
        dirty.extend(seen.own.keys().filter(|k| !own.contains_key(*k)).cloned());
        seen.own = own;
        if !changed.is_empty() {
            for (uid, p) in &seen.pods {
                if changed.contains(&(true, p.node_name().to_string()))
                    || changed.contains(&(false, p.namespace().to_string()))
                {
                    dirty.push(uid.clone());
                }
            }
        }
        seen.dirty.extend(dirty);
    }

    /// The objects changed since the last call.
    pub fn take_changes(&self) -> Changes {
        std::mem::take(&mut self.lock().dirty).into_iter().collect()
    }
}

impl MappingSource for Source {
    fn objects(&self) -> Vec<String> {
        let seen = self.lock();
        seen.pods.keys().chain(seen.own.keys()).cloned().collect()
    }

    fn mappings_of(&self, object: &str) -> Vec<Mapping> {
        let seen = self.lock();
        let s = &seen.settings;
        let related = &seen.related;
        let namespace_of = |name: &str| related.namespaces.as_ref()?.get(&ObjectRef::new(name));
        if let Some(kept) = seen.pods.get(object) {
            let p = kept.unpack();
            let node = related
                .nodes
                .as_ref()
                .and_then(|n| n.get(&ObjectRef::new(&p.node_name)));
            let ns = namespace_of(&p.namespace);
            return mapping::pod_mappings(
                &p,
                s,
                mapping::Related {
                    node_labels: node
                        .as_ref()
                        .filter(|_| s.node_metadata)
                        .and_then(|n| n.metadata.labels.as_ref()),
                    namespace: ns.as_ref().map(|n| mapping::NamespaceMeta {
                        uid: n.metadata.uid.as_deref(),
                        labels: n.metadata.labels.as_ref(),
                    }),
                },
            );
        }
        match seen.own.get(object) {
            Some(Own::Node(name)) => related
                .nodes
                .as_ref()
                .and_then(|n| n.get(&ObjectRef::new(name)))
                .and_then(|n| mapping::node_mapping(&n, s))
                .into_iter()
                .collect(),
            Some(Own::Service(namespace, name)) => related
                .services
                .as_ref()
                .and_then(|st| st.get(&ObjectRef::new(name).within(namespace)))
                .and_then(|svc| {
                    let ns = namespace_of(namespace);
                    mapping::service_mapping(
                        &svc,
                        s,
                        ns.as_ref().map(|n| mapping::NamespaceMeta {
                            uid: n.metadata.uid.as_deref(),
                            labels: n.metadata.labels.as_ref(),
                        }),
                    )
                })
                .into_iter()
                .collect(),
            None => Vec::new(),
        }
    }
}

/// A hash of an object's uid and labels.
fn labels_hash(uid: Option<&str>, labels: Option<&BTreeMap<String, String>>) -> u64 {
    let mut h = leasehold_policy::fnv::Fnv64::new();
    h.write(uid.unwrap_or("").as_bytes());
    for (k, v) in labels.into_iter().flatten() {
        h.write(&[0]);
        h.write(k.as_bytes());
        h.write(&[1]);
        h.write(v.as_bytes());
    }
    h.finish()
}

/// The nodes, namespaces and services the mappings read: nodes for their
/// labels (`add_resource_metadata.node`) and their own mappings
/// (`resources.node`), namespaces for their labels, services for theirs
/// (`resources.service`); each `None` when nothing asks for it.
#[derive(Clone)]
pub struct RelatedStores {
    nodes: Option<Store<Node>>,
    namespaces: Option<Store<PartialObjectMeta<Namespace>>>,
    services: Option<Store<Service>>,
}

impl RelatedStores {
    /// No related objects: mappings without node or namespace labels, and
    /// no Node or Service mappings.
    pub fn none() -> RelatedStores {
        RelatedStores {
            nodes: None,
            namespaces: None,
            services: None,
        }
    }

    /// Starts the watches the settings ask for; `changed` hears of every
    /// change, so the mappings are published again.
    fn start(
        s: &ProviderSettings,
        client: &kube::Client,
        node: &str,
        changed: mpsc::UnboundedSender<()>,
        stop: &CancellationToken,
    ) -> RelatedStores {
        let nodes = (s.node_metadata || s.resources.node).then(|| {
            let config = match s.scope {
                Scope::Node => watcher::Config::default().fields(&format!("metadata.name={node}")),
                Scope::Cluster => watcher::Config::default(),
            };
            // Managed fields are never read (and a `kubeobj::Node` keeps
            // none of the images, volumes or node info of the status).
            fn trim(n: &mut Node) {
                n.metadata.managed_fields = None;
            }
            reflect(
                Api::<Node>::all(client.clone()),
                config,
                trim,
                Reflect {
                    what: "nodes".to_string(),
                    cost: "kubernetes provider: mappings go without the node's labels, and nodes get no mapping of their own (grant list and watch on nodes)",
                    changed: Some(changed.clone()),
                    stop: Some(stop.clone()),
                },
            )
        });
        let namespaces = s.namespace_metadata.then(|| {
            follow(
                Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                watcher::Config::default(),
                "namespaces",
                changed.clone(),
                stop.clone(),
            )
        });
        let services = s.resources.service.then(|| {
            fn trim(svc: &mut Service) {
                svc.metadata.managed_fields = None;
                if let Some(a) = svc.metadata.annotations.as_mut() {
                    a.remove("kubectl.kubernetes.io/last-applied-configuration");
                }
            }
            let api = match &s.namespace {
                Some(ns) => Api::<Service>::namespaced(client.clone(), ns),
                None => Api::<Service>::all(client.clone()),
            };
            reflect(
                api,
                watcher::Config::default(),
                trim,
                Reflect {
                    what: "services".to_string(),
                    cost: "kubernetes provider: services get no mappings (grant list and watch on services)",
                    changed: Some(changed),
                    stop: Some(stop.clone()),
                },
            )
        });
        RelatedStores {
            nodes,
            namespaces,
            services,
        }
    }
}

/// A metadata-only copy of `api`'s objects, driven until `stop`; every
/// change is told on `changed`.
fn follow<K>(
    api: Api<PartialObjectMeta<K>>,
    config: watcher::Config,
    kind: &'static str,
    changed: mpsc::UnboundedSender<()>,
    stop: CancellationToken,
) -> Store<PartialObjectMeta<K>>
where
    K: crate::kubewatch::Watchable,
{
    reflect(
        api,
        config,
        crate::kubewatch::trim_metadata::<K>,
        Reflect {
            what: kind.to_string(),
            cost: "kubernetes provider: mappings go without these objects' labels (grant list and watch on them, or turn add_resource_metadata off for them)",
            changed: Some(changed),
            stop: Some(stop),
        },
    )
}

#[allow(clippy::too_many_arguments)]
async fn run(
    s: ProviderSettings,
    client: kube::Client,
    node: String,
    board: StatusBoard,
    pods: Source,
    mut changed: mpsc::UnboundedReceiver<()>,
    tx: mpsc::UnboundedSender<Changes>,
    stop: CancellationToken,
) {
    let related = pods.lock().related.clone();
    // The first mappings carry the labels when the watches can tell them
    // soon (else inputs would start once without, then again with them);
    // a watch refused (RBAC) does not hold the provider up for long.
    let ready = async {
        if let Some(n) = &related.nodes {
            let _ = n.wait_until_ready().await;
        }
        if let Some(n) = &related.namespaces {
            let _ = n.wait_until_ready().await;
        }
        if let Some(n) = &related.services {
            let _ = n.wait_until_ready().await;
        }
    };
    let _ = tokio::time::timeout(RELATED_SYNC, ready).await;
    let api: Api<Pod> = match &s.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    // Pages of 100 Pods: a page's JSON is held while it is read (the
    // provider keeps only what its mappings read, see `kept`).
    let mut config = watcher::Config::default().page_size(LIST_PAGE);
    if s.scope == Scope::Node {
        config = config.fields(&format!("spec.nodeName={node}"));
    }
    tracing::info!(
        scope = ?s.scope,
        node = %node,
        namespace = s.namespace.as_deref().unwrap_or("(all)"),
        pods = s.resources.pod,
        nodes = s.resources.node,
        services = s.resources.service,
        cleanup_timeout_s = s.cleanup_timeout.as_secs_f64(),
        "kubernetes provider: watching",
    );
    // Without `resources.pod` no Pod is watched: nodes' and services'
    // changes alone publish the mappings.
    let stream = if s.resources.pod {
        watcher::watcher(api, config).default_backoff().boxed()
    } else {
        futures_util::stream::pending().boxed()
    };
    futures_util::pin_mut!(stream);
    // The uids of a re-list in progress.
    let mut relisting: Option<BTreeSet<String>> = None;
    let mut failing = false;
    // Nothing is published before the first list is complete.
    let mut listed = !s.resources.pod;
    let publish = |pods: &Source, listed: bool| {
        if !listed {
            return;
        }
        let changes = pods.take_changes();
        if !changes.is_empty() {
            let _ = tx.send(changes);
        }
    };
    pods.related_changed();
    publish(&pods, listed);
    loop {
        let expiry = pods.next_expiry();
        let event = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = sleep_until(expiry) => {
                if pods.expire(Instant::now()) {
                    publish(&pods, listed);
                }
                continue;
            }
            Some(()) = changed.recv() => {
                // A node, namespace or service changed: once for a burst.
                while changed.try_recv().is_ok() {}
                pods.related_changed();
                publish(&pods, listed);
                continue;
            }
            ev = stream.next() => ev,
        };
        let Some(event) = event else { return };
        let event = match event {
            Ok(e) => {
                if failing {
                    failing = false;
                    board.set_problem(PROVIDER_PROBLEM, None);
                    tracing::info!("kubernetes provider: watching pods again");
                }
                e
            }
            Err(e) => {
                // The watcher backs off and retries; the mappings stay.
                let why = format!(
                    "cannot watch pods ({}): {e}; inputs reading `${{kubernetes.…}}` keep their last mappings",
                    match s.scope {
                        Scope::Node => format!("node {node}"),
                        Scope::Cluster => "cluster scope".to_string(),
                    }
                );
                if !failing {
                    tracing::warn!("{why}");
                }
                failing = true;
                board.set_problem(PROVIDER_PROBLEM, Some((why, false)));
                continue;
            }
        };
        match event {
            Event::Init => relisting = Some(BTreeSet::new()),
            Event::InitApply(pod) => {
                if let (Some(seen), Some(uid)) = (relisting.as_mut(), pod.metadata.uid.clone()) {
                    seen.insert(uid);
                }
                pods.upsert(pod);
            }
            Event::InitDone => {
                // Pods the re-list did not return were deleted meanwhile.
                if let Some(seen) = relisting.take() {
                    let at = Instant::now() + s.cleanup_timeout;
                    let gone: Vec<String> = pods
                        .pod_uids()
                        .into_iter()
                        .filter(|u| !seen.contains(u))
                        .collect();
                    for uid in gone {
                        pods.leave(uid, at);
                    }
                }
                listed = true;
                publish(&pods, listed);
            }
            Event::Apply(pod) => {
                pods.upsert(pod);
                publish(&pods, listed);
            }
            Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.clone() {
                    // The last state (final container ids) is what stays.
                    pods.upsert(pod);
                    pods.leave(uid, Instant::now() + s.cleanup_timeout);
                    publish(&pods, listed);
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, name: &str, app: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "shop", "uid": uid, "labels": {"app": app}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "app", "image": "app:1"}]},
            "status": {"podIP": "10.0.0.9", "containerStatuses": [{"name": "app", "containerID": format!("containerd://{uid}c"), "image": "app:1", "imageID": "", "ready": true, "restartCount": 0}]}
        }))
        .unwrap()
    }

    fn source() -> Source {
        Source::new(ProviderSettings::default(), RelatedStores::none())
    }

    #[test]
    fn a_pod_event_marks_that_pod_and_its_mappings_are_built_when_read() {
        let s = source();
        for i in 0..50 {
            s.upsert(pod(&format!("u{i:02}"), &format!("web-{i}"), "web"));
        }
        assert_eq!(s.take_changes().len(), 50);
        assert!(s.take_changes().is_empty(), "taken once");
        s.upsert(pod("u07", "web-7", "redis"));
        assert_eq!(s.take_changes(), ["u07"]);
        let ms = s.mappings_of("u07");
        let ids: Vec<&str> = ms.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["u07", "u07.app"], "the Pod's and its container's");
        assert_eq!(
            ms[0].vars.lookup_path("labels.app"),
            Some(&leasehold_policy::Value::Str("redis".into()))
        );
        assert!(s.mappings_of("nobody").is_empty());
        assert_eq!(s.objects().len(), 50);
    }

    #[test]
    fn a_deleted_pods_mappings_stay_until_its_cleanup_timeout() {
        let s = source();
        s.upsert(pod("u1", "web-1", "web"));
        s.take_changes();
        let now = Instant::now();
        s.leave("u1".into(), now + std::time::Duration::from_secs(60));
        assert!(!s.expire(now), "not yet");
        assert_eq!(s.mappings_of("u1").len(), 2);
        assert!(s.expire(now + std::time::Duration::from_secs(60)));
        assert_eq!(s.take_changes(), ["u1"]);
        assert!(s.mappings_of("u1").is_empty());
        assert!(s.objects().is_empty());
    }
}
