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
use leasehold_policy::dynamic::{self, Mapping};
use tokio::sync::{mpsc, watch};
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

/// The running provider: its mappings as they change.
pub struct Provider {
    /// The current mappings, in rendering order.
    pub mappings: watch::Receiver<Arc<Vec<Mapping>>>,
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
        let (tx, rx) = watch::channel(Arc::new(Vec::new()));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(settings, client, node, board, tx, stop.clone()));
        Provider {
            mappings: rx,
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

/// The pods known and those waiting out their cleanup timeout.
#[derive(Default)]
struct Pods {
    by_uid: BTreeMap<String, kept::KeptPod>,
    /// Deleted (or gone from a re-list) pods and when their mappings go.
    leaving: BTreeMap<String, Instant>,
    /// Each pod's mappings as last built: a pod event rebuilds only that
    /// pod's, and the others are published again as shared copies.
    mapped: HashMap<String, Vec<Mapping>>,
}

impl Pods {
    fn upsert(&mut self, pod: Pod) {
        let pod = kept::KeptPod::from(pod);
        if !pod.uid.is_empty() {
            let warned = self
                .by_uid
                .get(&pod.uid)
                .is_some_and(|p| p.annotations_cut > 0);
            if pod.annotations_cut > 0 && !warned {
                tracing::warn!(
                    pod = %format!("{}/{}", pod.namespace, pod.name),
                    left_out = pod.annotations_cut,
                    "kubernetes provider: the pod's annotations exceed {} bytes; hints first, the rest past that bound are not published",
                    kept::ANNOTATION_BYTES_PER_POD
                );
            }
            self.mapped.remove(&pod.uid);
            self.leaving.remove(&pod.uid);
            self.by_uid.insert(pod.uid.clone(), pod);
        }
    }

    fn leave(&mut self, uid: String, at: Instant) {
        if self.by_uid.contains_key(&uid) {
            self.leaving.entry(uid).or_insert(at);
        }
    }

    /// Forgets the pods whose cleanup timeout passed; true if any.
    fn expire(&mut self, now: Instant) -> bool {
        let due: Vec<String> = self
            .leaving
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &due {
            self.leaving.remove(uid);
            self.by_uid.remove(uid);
            self.mapped.remove(uid);
        }
        !due.is_empty()
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.leaving.values().min().copied()
    }

    /// Forgets every pod's built mappings: the labels of nodes or
    /// namespaces they carry changed.
    fn related_changed(&mut self) {
        self.mapped.clear();
    }

    fn mappings(&mut self, s: &ProviderSettings, related: &RelatedStores) -> Vec<Mapping> {
        let namespace_of = |name: &str| related.namespaces.as_ref()?.get(&ObjectRef::new(name));
        let mapped = &mut self.mapped;
        let mut out: Vec<Mapping> = self
            .by_uid
            .iter()
            .flat_map(|(uid, p)| {
                if let Some(built) = mapped.get(uid) {
                    return built.clone();
                }
                let node = related
                    .nodes
                    .as_ref()
                    .and_then(|n| n.get(&ObjectRef::new(&p.node_name)));
                let ns = namespace_of(&p.namespace);
                let built = mapping::pod_mappings(
                    p,
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
                mapped.insert(uid.clone(), built.clone());
                built
            })
            .collect();
        if s.resources.node
            && let Some(nodes) = &related.nodes
        {
            out.extend(
                nodes
                    .state()
                    .iter()
                    .filter_map(|n| mapping::node_mapping(n, s)),
            );
        }
        if let Some(services) = &related.services {
            out.extend(services.state().iter().filter_map(|svc| {
                let ns = svc.metadata.namespace.as_deref().and_then(namespace_of);
                mapping::service_mapping(
                    svc,
                    s,
                    ns.as_ref().map(|n| mapping::NamespaceMeta {
                        uid: n.metadata.uid.as_deref(),
                        labels: n.metadata.labels.as_ref(),
                    }),
                )
            }));
        }
        dynamic::sort(&mut out);
        out
    }
}

/// The nodes, namespaces and services the mappings read: nodes for their
/// labels (`add_resource_metadata.node`) and their own mappings
/// (`resources.node`), namespaces for their labels, services for theirs
/// (`resources.service`); each `None` when nothing asks for it.
struct RelatedStores {
    nodes: Option<Store<Node>>,
    namespaces: Option<Store<PartialObjectMeta<Namespace>>>,
    services: Option<Store<Service>>,
}

impl RelatedStores {
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

async fn run(
    s: ProviderSettings,
    client: kube::Client,
    node: String,
    board: StatusBoard,
    tx: watch::Sender<Arc<Vec<Mapping>>>,
    stop: CancellationToken,
) {
    let node = s.node.clone().unwrap_or(node);
    let (changed_tx, mut changed) = mpsc::unbounded_channel();
    let related = RelatedStores::start(&s, &client, &node, changed_tx, &stop);
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
    let mut pods = Pods::default();
    // The uids of a re-list in progress.
    let mut relisting: Option<BTreeSet<String>> = None;
    let mut failing = false;
    let publish = |pods: &mut Pods| {
        let next = pods.mappings(&s, &related);
        tx.send_if_modified(|cur| {
            if **cur == next {
                false
            } else {
                *cur = Arc::new(next);
                true
            }
        });
    };
    loop {
        let expiry = pods.next_expiry();
        let event = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            () = sleep_until(expiry) => {
                if pods.expire(Instant::now()) {
                    publish(&mut pods);
                }
                continue;
            }
            Some(()) = changed.recv() => {
                // A node's or namespace's labels changed: once for a burst.
                while changed.try_recv().is_ok() {}
                pods.related_changed();
                publish(&mut pods);
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
                        .by_uid
                        .keys()
                        .filter(|u| !seen.contains(*u))
                        .cloned()
                        .collect();
                    for uid in gone {
                        pods.leave(uid, at);
                    }
                }
                publish(&mut pods);
            }
            Event::Apply(pod) => {
                pods.upsert(pod);
                publish(&mut pods);
            }
            Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.clone() {
                    // The last state (final container ids) is what stays.
                    pods.upsert(pod);
                    pods.leave(uid, Instant::now() + s.cleanup_timeout);
                    publish(&mut pods);
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
