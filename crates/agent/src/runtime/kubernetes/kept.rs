//! What the provider keeps of a Pod: only the fields its mappings read. A
//! [`Pod`] as read still carries its whole metadata (managed fields,
//! kubectl's last-applied copy of the object) and specs and statuses per
//! container; the provider holds every Pod of its node or cluster for as
//! long as it runs, so it keeps this summary instead: [`PodFields`] to
//! read, packed into a [`KeptPod`] (one buffer of text and its spans) to
//! hold, about a third of the size of the same fields in strings and maps.

use std::collections::BTreeMap;

use crate::kubeobj::Pod;

/// Owner kinds whose name becomes `kubernetes.<kind>.name`.
const OWNER_KINDS: [&str; 6] = [
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
];

/// A Pod as the mappings read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodFields {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`, without kubectl's last-applied copy, at
    /// most [`ANNOTATION_BYTES_PER_POD`] of them (hints first).
    pub annotations: BTreeMap<String, String>,
    /// How many annotations did not fit in that bound.
    pub annotations_cut: usize,
    /// The controlling owner of a kind Elastic names: (kind, name).
    pub owner: Option<(String, String)>,
    /// `spec.nodeName`.
    pub node_name: String,
    /// `status.podIP`, when set.
    pub ip: Option<String>,
    /// Containers, then init and ephemeral containers, in spec order.
    pub containers: Vec<KeptContainer>,
}

/// A container as the mappings read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeptContainer {
    /// Its name.
    pub name: String,
    /// Its image, empty when none.
    pub image: String,
    /// The ports it declares and their names, in spec order (Elastic's
    /// variables publish the last; Beats' hints read every one); ephemeral
    /// containers have none.
    pub ports: Vec<(String, Option<String>)>,
    /// `containerd://abc` of its status, as (`containerd`, `abc`); `None`
    /// until the runtime gave it one.
    pub id: Option<(String, String)>,
}

/// The most bytes (keys and values) of one Pod's annotations the provider
/// keeps: the API server's own bound on an object's annotations (256 KiB),
/// so a valid Pod never loses one, and memory per Pod stays bounded
/// whatever reaches the watch.
pub const ANNOTATION_BYTES_PER_POD: usize = 256 * 1024;

/// `annotations` within [`ANNOTATION_BYTES_PER_POD`]: hints
/// (`co.elastic.…`) first, then the others in key order, each whole or
/// not at all; and how many were left out.
fn bounded(annotations: BTreeMap<String, String>) -> (BTreeMap<String, String>, usize) {
    let total: usize = annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total <= ANNOTATION_BYTES_PER_POD {
        return (annotations, 0);
    }
    let (hints, rest): (Vec<_>, Vec<_>) = annotations
        .into_iter()
        .partition(|(k, _)| k.starts_with("co.elastic."));
    let mut kept = BTreeMap::new();
    let mut used = 0usize;
    let mut cut = 0usize;
    for (k, v) in hints.into_iter().chain(rest) {
        let size = k.len() + v.len();
        if used + size <= ANNOTATION_BYTES_PER_POD {
            used += size;
            kept.insert(k, v);
        } else {
            cut += 1;
        }
    }
    (kept, cut)
}

impl From<Pod> for PodFields {
    fn from(pod: Pod) -> PodFields {
        let meta = pod.metadata;
        let spec = pod.spec.unwrap_or_default();
        let status = pod.status.unwrap_or_default();
        let ids: Vec<(String, Option<(String, String)>)> = status
            .container_statuses
            .into_iter()
            .flatten()
            .chain(status.init_container_statuses.into_iter().flatten())
            .chain(status.ephemeral_container_statuses.into_iter().flatten())
            .map(|st| {
                let id = st.container_id.as_deref().and_then(split_container_id);
                (st.name, id)
            })
            .collect();
        let id_of = |name: &str| {
            ids.iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, id)| id.clone())
        };
        let mut containers: Vec<KeptContainer> = spec
            .containers
            .into_iter()
            .chain(spec.init_containers.into_iter().flatten())
            .map(|c| {
                let ports = c
                    .ports
                    .iter()
                    .flatten()
                    .map(|p| (p.container_port.to_string(), p.name.clone()))
                    .collect();
                KeptContainer {
                    id: id_of(&c.name),
                    name: c.name,
                    image: c.image.unwrap_or_default(),
                    ports,
                }
            })
            .collect();
        containers.extend(
            spec.ephemeral_containers
                .into_iter()
                .flatten()
                .map(|c| KeptContainer {
                    id: id_of(&c.name),
                    name: c.name,
                    image: c.image.unwrap_or_default(),
                    ports: Vec::new(),
                }),
        );
        let mut annotations = meta.annotations.unwrap_or_default();
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        let (annotations, annotations_cut) = bounded(annotations);
        PodFields {
            annotations_cut,
            name: meta.name.unwrap_or_default(),
            namespace: meta.namespace.unwrap_or_default(),
            uid: meta.uid.unwrap_or_default(),
            labels: meta.labels.unwrap_or_default(),
            annotations,
            owner: meta
                .owner_references
                .into_iter()
                .flatten()
                .find(|o| o.controller == Some(true) && OWNER_KINDS.contains(&o.kind.as_str()))
                .map(|o| (o.kind, o.name)),
            node_name: spec.node_name.unwrap_or_default(),
            ip: status.pod_ip.filter(|i| !i.is_empty()),
            containers,
        }
    }
}

/// Where a piece of a [`KeptPod`]'s text starts, and its length.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span(u32, u32);

/// A container of a [`KeptPod`]: spans of its text.
#[derive(Debug, Clone, PartialEq)]
struct PackedContainer {
    name: Span,
    image: Span,
    ports: Box<[(Span, Option<Span>)]>,
    id: Option<(Span, Span)>,
}

/// A Pod as the provider holds it: [`PodFields`] packed, every string in
/// one buffer. Read it whole with [`KeptPod::unpack`] (when its mappings
/// are built) or the few fields the provider looks up by themselves.
#[derive(Debug, Clone, PartialEq)]
pub struct KeptPod {
    text: Box<str>,
    name: Span,
    namespace: Span,
    uid: Span,
    node_name: Span,
    ip: Option<Span>,
    owner: Option<(Span, Span)>,
    labels: Box<[(Span, Span)]>,
    annotations: Box<[(Span, Span)]>,
    annotations_cut: u32,
    containers: Box<[PackedContainer]>,
}

/// Builds a [`KeptPod`]'s text.
#[derive(Default)]
struct Packer(String);

impl Packer {
    fn put(&mut self, s: &str) -> Span {
        let at = self.0.len();
        self.0.push_str(s);
        // A Pod's text is far below 4 GiB (annotations are bounded).
        Span(at as u32, s.len() as u32)
    }

    fn pairs(&mut self, m: &BTreeMap<String, String>) -> Box<[(Span, Span)]> {
        m.iter().map(|(k, v)| (self.put(k), self.put(v))).collect()
    }
}

impl From<PodFields> for KeptPod {
    fn from(f: PodFields) -> KeptPod {
        let mut p = Packer::default();
        let kept = KeptPod {
            name: p.put(&f.name),
            namespace: p.put(&f.namespace),
            uid: p.put(&f.uid),
            node_name: p.put(&f.node_name),
            ip: f.ip.as_deref().map(|i| p.put(i)),
            owner: f.owner.as_ref().map(|(k, n)| (p.put(k), p.put(n))),
            labels: p.pairs(&f.labels),
            annotations: p.pairs(&f.annotations),
            annotations_cut: u32::try_from(f.annotations_cut).unwrap_or(u32::MAX),
            containers: f
                .containers
                .iter()
                .map(|c| PackedContainer {
                    name: p.put(&c.name),
                    image: p.put(&c.image),
                    ports: c
                        .ports
                        .iter()
                        .map(|(port, name)| (p.put(port), name.as_deref().map(|n| p.put(n))))
                        .collect(),
                    id: c.id.as_ref().map(|(r, i)| (p.put(r), p.put(i))),
                })
                .collect(),
            text: Box::from(""),
        };
        KeptPod {
            text: p.0.into_boxed_str(),
            ..kept
        }
    }
}

impl From<Pod> for KeptPod {
    fn from(pod: Pod) -> KeptPod {
        KeptPod::from(PodFields::from(pod))
    }
}

impl KeptPod {
    fn get(&self, s: Span) -> &str {
        self.text
            .get(s.0 as usize..(s.0 + s.1) as usize)
            .unwrap_or("")
    }

    fn map(&self, pairs: &[(Span, Span)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (self.get(*k).to_string(), self.get(*v).to_string()))
            .collect()
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.get(self.name)
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> &str {
        self.get(self.namespace)
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        self.get(self.uid)
    }

    /// `spec.nodeName`.
    pub fn node_name(&self) -> &str {
        self.get(self.node_name)
    }

    /// How many annotations did not fit in [`ANNOTATION_BYTES_PER_POD`].
    pub fn annotations_cut(&self) -> usize {
        self.annotations_cut as usize
    }

    /// Every field, readable.
    pub fn unpack(&self) -> PodFields {
        PodFields {
            name: self.name().to_string(),
            namespace: self.namespace().to_string(),
            uid: self.uid().to_string(),
            labels: self.map(&self.labels),
            annotations: self.map(&self.annotations),
            annotations_cut: self.annotations_cut(),
            owner: self
                .owner
                .map(|(k, n)| (self.get(k).to_string(), self.get(n).to_string())),
            node_name: self.node_name().to_string(),
            ip: self.ip.map(|i| self.get(i).to_string()),
            containers: self
                .containers
                .iter()
                .map(|c| KeptContainer {
                    name: self.get(c.name).to_string(),
                    image: self.get(c.image).to_string(),
                    ports: c
                        .ports
                        .iter()
                        .map(|(p, n)| {
                            (self.get(*p).to_string(), n.map(|n| self.get(n).to_string()))
                        })
                        .collect(),
                    id: c
                        .id
                        .map(|(r, i)| (self.get(r).to_string(), self.get(i).to_string())),
                })
                .collect(),
        }
    }
}

/// `containerd://abc` as (`containerd`, `abc`); anything else is no id.
fn split_container_id(raw: &str) -> Option<(String, String)> {
    let (runtime, id) = raw.split_once("://")?;
    (!runtime.is_empty() && !id.is_empty() && !id.contains("://"))
        .then(|| (runtime.to_string(), id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_need_a_runtime_and_an_id() {
        assert_eq!(
            split_container_id("containerd://abc"),
            Some(("containerd".into(), "abc".into()))
        );
        assert_eq!(
            split_container_id("cri-o://x"),
            Some(("cri-o".into(), "x".into()))
        );
        for bad in ["abc", "://abc", "docker://", "a://b://c", ""] {
            assert_eq!(split_container_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn keeps_what_the_mappings_read_and_no_more() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u",
                         "labels": {"app": "web"},
                         "annotations": {"team": "a", "kubectl.kubernetes.io/last-applied-configuration": "{…}"},
                         "ownerReferences": [
                             {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "x", "controller": true},
                             {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "y", "controller": true}]},
            "spec": {"nodeName": "node-1",
                     "containers": [{"name": "app", "image": "app:1", "ports": [{"containerPort": 80}, {"containerPort": 9090, "name": "metrics"}]}],
                     "initContainers": [{"name": "init", "image": "busybox"}],
                     "volumes": [{"name": "data", "emptyDir": {}}]},
            "status": {"podIP": "10.0.0.9",
                       "containerStatuses": [{"name": "app", "containerID": "containerd://c1", "image": "app:1", "imageID": "", "ready": true, "restartCount": 0}],
                       "initContainerStatuses": [{"name": "init", "containerID": "docker://", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0}],
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let packed = KeptPod::from(pod);
        assert_eq!(
            (
                packed.name(),
                packed.namespace(),
                packed.uid(),
                packed.node_name()
            ),
            ("web-1", "shop", "u", "node-1")
        );
        let k = packed.unpack();
        assert_eq!(
            (k.name.as_str(), k.namespace.as_str(), k.uid.as_str()),
            ("web-1", "shop", "u")
        );
        assert_eq!(k.owner, Some(("StatefulSet".into(), "web".into())));
        assert_eq!(k.annotations.keys().collect::<Vec<_>>(), ["team"]);
        assert_eq!(k.node_name, "node-1");
        assert_eq!(k.ip.as_deref(), Some("10.0.0.9"));
        assert_eq!(
            k.containers,
            [
                KeptContainer {
                    name: "app".into(),
                    image: "app:1".into(),
                    ports: vec![("80".into(), None), ("9090".into(), Some("metrics".into()))],
                    id: Some(("containerd".into(), "c1".into())),
                },
                KeptContainer {
                    name: "init".into(),
                    image: "busybox".into(),
                    ports: Vec::new(),
                    id: None,
                },
            ]
        );
    }

    #[test]
    fn annotations_past_the_apis_own_bound_are_cut_and_hints_kept_first() {
        let mut a = BTreeMap::new();
        for k in 0..3 {
            a.insert(format!("a{k}"), "x".repeat(100 * 1024));
        }
        a.insert("co.elastic.hints/package".to_string(), "redis".to_string());
        let (kept, cut) = bounded(a);
        assert_eq!(cut, 1);
        assert!(kept.contains_key("co.elastic.hints/package"));
        assert!(kept.contains_key("a0") && kept.contains_key("a1"));
        let bytes: usize = kept.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(bytes <= ANNOTATION_BYTES_PER_POD);
        // Within the bound nothing is cut.
        let (kept, cut) = bounded(BTreeMap::from([("a".to_string(), "b".to_string())]));
        assert_eq!((kept.len(), cut), (1, 0));
    }
}
