//! What the provider publishes for one pod: a mapping for the pod and one
//! for each of its containers that has an id, with Elastic Agent's
//! variable names (or, with hints on, its `hints` variables) and the fields
//! Elastic adds to their inputs' events. Pure: a Pod in, mappings out.

use crate::kubeobj::{Node, Service};
use leasehold_policy::dynamic::Mapping;
use leasehold_policy::{Map, Value};

use super::beats_hints::{BeatsHinted, Container, beats_hinted};
use super::hints::hinted;
use super::kept::PodFields;
use super::settings::{ProviderSettings, Scope};

/// Labels as Kubernetes keeps them.
pub type Labels = std::collections::BTreeMap<String, String>;

/// What the provider knows of a pod's namespace: its uid and labels.
#[derive(Debug, Default, Clone, Copy)]
pub struct NamespaceMeta<'a> {
    /// `metadata.uid`.
    pub uid: Option<&'a str>,
    /// `metadata.labels`.
    pub labels: Option<&'a Labels>,
}

/// What the provider knows of a pod's node and namespace
/// (`add_resource_metadata`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Related<'a> {
    /// The node's labels.
    pub node_labels: Option<&'a Labels>,
    /// The namespace's uid and labels.
    pub namespace: Option<NamespaceMeta<'a>>,
}

/// The mappings of `pod`: the pod's (priority 1, id = its uid), then one
/// per container, init and ephemeral container whose status has an id
/// (priority 2, id `<uid>.<name>`).
pub fn pod_mappings(pod: &PodFields, s: &ProviderSettings, related: Related<'_>) -> Vec<Mapping> {
    if pod.uid.is_empty() {
        return Vec::new();
    }
    let uid = pod.uid.clone();
    let mut pod_part = Map::new();
    pod_part.insert("name", Value::Str(pod.name.clone()));
    pod_part.insert("uid", Value::Str(uid.clone()));
    if let Some(ip) = &pod.ip {
        pod_part.insert("ip", Value::Str(ip.clone()));
    }
    let node_name = pod.node_name.clone();
    let mut node = Map::new();
    node.insert("name", Value::Str(node_name));
    if let Some(labels) = related.node_labels.filter(|l| !l.is_empty()) {
        node.insert("labels", dedotted(labels.iter()));
    }

    // Common to both: what `${kubernetes.…}` reads and what events carry.
    let mut vars = Map::new();
    let mut fields = Map::new();
    for m in [&mut vars, &mut fields] {
        m.insert("namespace", Value::Str(pod.namespace.clone()));
        m.insert("pod", Value::Map(pod_part.clone()));
        m.insert("node", Value::Map(node.clone()));
        put_namespace_meta(m, related.namespace);
    }
    if let Some((kind, owner_name)) = &pod.owner {
        let mut named = Map::new();
        named.insert("name", Value::Str(owner_name.clone()));
        for m in [&mut vars, &mut fields] {
            m.insert(kind.to_ascii_lowercase(), Value::Map(named.clone()));
        }
        // A Deployment names its ReplicaSets `<deployment>-<pod-template-hash>`.
        if s.deployment
            && kind == "ReplicaSet"
            && let Some(deployment) = pod
                .labels
                .get("pod-template-hash")
                .and_then(|hash| owner_name.strip_suffix(&format!("-{hash}")))
        {
            let mut d = Map::new();
            d.insert("name", Value::Str(deployment.to_string()));
            for m in [&mut vars, &mut fields] {
                m.insert("deployment", Value::Map(d.clone()));
            }
        }
    }
    put_labels_and_annotations(&mut vars, &mut fields, &pod.labels, &pod.annotations, s);

    let mut pod_vars = vars.clone();
    pod_vars.insert("scope", scope_name(s));
    let all_annotations = &pod.annotations;
    let mut out = Vec::new();
    // In hints mode a mapping publishes only its `hints` (and the Pod's
    // only when it names a package), as in Elastic Agent.
    let (published, processors, refused) = if s.hints.enabled {
        match hinted(&s.hints, all_annotations, &Value::Map(pod_vars), None) {
            Some(h) => (Some(h.vars), h.processors, h.refused),
            None => (None, Vec::new(), Vec::new()),
        }
    } else {
        (Some(Value::Map(pod_vars)), Vec::new(), Vec::new())
    };
    if let Some(published) = published {
        out.push(Mapping {
            id: uid.clone(),
            priority: 1,
            vars: published,
            fields: Value::Map(wrap("kubernetes", fields.clone())),
            processors,
            refused,
            shares_node: true,
            ..Mapping::default()
        });
    }

    let pod_ports: Vec<(String, Option<String>)> = pod
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().cloned())
        .collect();
    for kc in &pod.containers {
        let Some((runtime, id)) = &kc.id else {
            continue;
        };
        let (name, image) = (kc.name.as_str(), Some(kc.image.as_str()));
        let mut c = Map::new();
        c.insert("name", Value::Str(name.into()));
        c.insert("id", Value::Str(id.into()));
        c.insert("image", text(image));
        c.insert("runtime", Value::Str(runtime.into()));
        if let Some((port, port_name)) = kc.ports.last() {
            c.insert("port", Value::Str(port.clone()));
            if let Some(n) = port_name {
                c.insert("port_name", Value::Str(n.clone()));
            }
        }
        let mut cvars = vars.clone();
        cvars.insert("container", Value::Map(c));
        let cvars = Value::Map(cvars);
        let (cvars, processors, beats) = if s.hints.enabled {
            let mut beats = beats_hinted(
                &s.hints,
                all_annotations,
                &cvars,
                &pod_ports,
                Container {
                    name,
                    id,
                    ports: &kc.ports,
                },
            );
            let (mut hvars, processors) =
                match hinted(&s.hints, all_annotations, &cvars, Some((name, id))) {
                    Some(h) => {
                        beats.refused.extend(h.refused);
                        (h.vars, h.processors)
                    }
                    None if beats == BeatsHinted::default() => continue,
                    None => (container_id_only(id), Vec::new()),
                };
            if beats.logs_taken {
                drop_container_logs(&mut hvars);
            }
            (hvars, processors, beats)
        } else {
            (cvars, Vec::new(), BeatsHinted::default())
        };
        let mut kfields = fields.clone();
        kfields.insert(
            "container",
            Value::Map(wrap("name", Value::Str(name.into()))),
        );
        // ECS `container.*` beside `kubernetes.*`, as Elastic adds them.
        let mut ecs = Map::new();
        ecs.insert("id", Value::Str(id.into()));
        ecs.insert("runtime", Value::Str(runtime.into()));
        ecs.insert("image", Value::Map(wrap("name", text(image))));
        let mut all = wrap("container", Value::Map(ecs));
        all.insert("kubernetes", Value::Map(kfields));
        out.push(Mapping {
            id: format!("{uid}.{name}"),
            priority: 2,
            vars: cvars,
            fields: Value::Map(all),
            processors,
            inputs: beats.inputs,
            refused: beats.refused,
            shares_node: true,
        });
    }
    out
}

/// A container mapping's hints when only Beats' hints apply to it.
fn container_id_only(id: &str) -> Value {
    let mut hints = Map::new();
    hints.insert("container_id", Value::Str(id.into()));
    Value::Map(wrap("hints", Value::Map(hints)))
}

/// Takes `hints.container_logs` and every `hints.<package>.container_logs`
/// out: Beats' log hints read the container's file instead (or turned its
/// logs off).
fn drop_container_logs(vars: &mut Value) {
    if let Value::Map(top) = vars
        && let Some(Value::Map(hints)) = top.get_mut("hints")
    {
        hints.remove("container_logs");
        for v in hints.values_mut() {
            if let Value::Map(package) = v {
                package.remove("container_logs");
            }
        }
    }
}

/// The mapping of a node (priority 0, id = its uid), published as Elastic
/// Agent publishes one: only while the node is Ready and has an address.
/// Variables `kubernetes.node.{name,uid,hostname}`, `labels.*`,
/// `annotations.*`, `scope`; events get `kubernetes.node.*` and the chosen
/// labels and annotations.
pub fn node_mapping(node: &Node, s: &ProviderSettings) -> Option<Mapping> {
    let meta = &node.metadata;
    let uid = meta.uid.clone().filter(|u| !u.is_empty())?;
    let status = node.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let addressed = status.addresses.iter().flatten().any(|a| {
        matches!(a.type_.as_str(), "ExternalIP" | "InternalIP" | "Hostname")
            && !a.address.is_empty()
    });
    if !ready || !addressed {
        return None;
    }
    let no_labels = Labels::new();
    let labels = meta.labels.as_ref().unwrap_or(&no_labels);
    let annotations = meta.annotations.as_ref().unwrap_or(&no_labels);
    let mut part = Map::new();
    part.insert("name", text(meta.name.as_deref()));
    part.insert("uid", Value::Str(uid.clone()));
    if let Some(h) = labels.get("kubernetes.io/hostname") {
        part.insert("hostname", Value::Str(h.clone()));
    }
    let mut vars = Map::new();
    let mut fields = Map::new();
    for m in [&mut vars, &mut fields] {
        m.insert("node", Value::Map(part.clone()));
    }
    put_labels_and_annotations(&mut vars, &mut fields, labels, annotations, s);
    vars.insert("scope", scope_name(s));
    Some(Mapping {
        id: uid,
        priority: 0,
        vars: Value::Map(vars),
        fields: Value::Map(wrap("kubernetes", fields)),
        processors: Vec::new(),
        ..Mapping::default()
    })
}

/// The mapping of a Service that has a cluster IP (priority 3, id = its
/// uid), as Elastic Agent publishes one: variables
/// `kubernetes.service.{name,uid}`, `namespace`, `labels.*`,
/// `annotations.*`, the namespace's uid and labels, `scope`.
pub fn service_mapping(
    svc: &Service,
    s: &ProviderSettings,
    namespace: Option<NamespaceMeta<'_>>,
) -> Option<Mapping> {
    let meta = &svc.metadata;
    let uid = meta.uid.clone().filter(|u| !u.is_empty())?;
    svc.spec
        .as_ref()
        .and_then(|sp| sp.cluster_ip.as_deref())
        .filter(|ip| !ip.is_empty())?;
    let no_labels = Labels::new();
    let labels = meta.labels.as_ref().unwrap_or(&no_labels);
    let annotations = meta.annotations.as_ref().unwrap_or(&no_labels);
    let mut part = Map::new();
    part.insert("name", text(meta.name.as_deref()));
    part.insert("uid", Value::Str(uid.clone()));
    let mut vars = Map::new();
    let mut fields = Map::new();
    for m in [&mut vars, &mut fields] {
        m.insert("service", Value::Map(part.clone()));
        m.insert("namespace", text(meta.namespace.as_deref()));
        put_namespace_meta(m, namespace);
    }
    put_labels_and_annotations(&mut vars, &mut fields, labels, annotations, s);
    vars.insert("scope", scope_name(s));
    Some(Mapping {
        id: uid,
        priority: 3,
        vars: Value::Map(vars),
        fields: Value::Map(wrap("kubernetes", fields)),
        processors: Vec::new(),
        ..Mapping::default()
    })
}

fn scope_name(s: &ProviderSettings) -> Value {
    Value::Str(
        match s.scope {
            Scope::Node => "node",
            Scope::Cluster => "cluster",
        }
        .into(),
    )
}

/// `namespace_uid` and `namespace_labels` (dedotted), when known.
fn put_namespace_meta(m: &mut Map, namespace: Option<NamespaceMeta<'_>>) {
    if let Some(NamespaceMeta { uid, labels }) = namespace {
        if let Some(uid) = uid {
            m.insert("namespace_uid", Value::Str(uid.to_string()));
        }
        if let Some(labels) = labels.filter(|l| !l.is_empty()) {
            m.insert("namespace_labels", dedotted(labels.iter()));
        }
    }
}

/// Variables: every label and annotation, keys split at their dots (as
/// Elastic nests them), so `${kubernetes.labels.app.kubernetes.io/name}`
/// resolves. Events: the labels chosen, dedotted by default, and only the
/// annotations named in `include_annotations`.
fn put_labels_and_annotations(
    vars: &mut Map,
    fields: &mut Map,
    labels: &Labels,
    annotations: &Labels,
    s: &ProviderSettings,
) {
    vars.insert("labels", nested(labels.iter()));
    vars.insert("annotations", nested(annotations.iter()));
    let chosen_labels = labels.iter().filter(|(k, _)| {
        (s.include_labels.is_empty() || s.include_labels.contains(k))
            && !s.exclude_labels.contains(k)
    });
    put_event_keys(fields, "labels", chosen_labels, s.labels_dedot);
    let chosen_annotations = annotations
        .iter()
        .filter(|(k, _)| s.include_annotations.contains(k));
    put_event_keys(
        fields,
        "annotations",
        chosen_annotations,
        s.annotations_dedot,
    );
}

fn text(s: Option<&str>) -> Value {
    Value::Str(s.unwrap_or_default().to_string())
}

fn wrap(key: &str, v: impl Into<WrapValue>) -> Map {
    let mut m = Map::new();
    m.insert(key, v.into().0);
    m
}

/// A value or a map, for [`wrap`].
struct WrapValue(Value);

impl From<Value> for WrapValue {
    fn from(v: Value) -> Self {
        WrapValue(v)
    }
}

impl From<Map> for WrapValue {
    fn from(m: Map) -> Self {
        WrapValue(Value::Map(m))
    }
}

/// `key: value` pairs nested at the dots of their keys, as Elastic's
/// variables nest them: `app.kubernetes.io/name` is
/// `app → kubernetes → io/name`. When a key is both a value and a prefix
/// (`a` and `a.b`), the value moves to `a.value`.
fn nested<'a>(pairs: impl Iterator<Item = (&'a String, &'a String)>) -> Value {
    let mut root = Map::new();
    let mut sorted: Vec<(&String, &String)> = pairs.collect();
    sorted.sort();
    for (k, v) in sorted {
        put_nested(&mut root, k, Value::Str(v.clone()));
    }
    Value::Map(root)
}

fn put_nested(m: &mut Map, key: &str, v: Value) {
    match key.split_once('.') {
        None => match m.get(key) {
            Some(Value::Map(_)) => {
                if let Some(Value::Map(inner)) = m.remove(key).as_mut() {
                    inner.insert("value", v);
                    m.insert(key, Value::Map(inner.clone()));
                }
            }
            _ => m.insert(key, v),
        },
        Some((head, rest)) => {
            let mut inner = match m.remove(head) {
                Some(Value::Map(inner)) => inner,
                Some(scalar) => wrap("value", scalar),
                None => Map::new(),
            };
            put_nested(&mut inner, rest, v);
            m.insert(head, Value::Map(inner));
        }
    }
}

/// Labels with the dots in their keys made `_`.
fn dedotted<'a>(pairs: impl Iterator<Item = (&'a String, &'a String)>) -> Value {
    Value::Map(
        pairs
            .map(|(k, v)| (k.replace('.', "_"), Value::Str(v.clone())))
            .collect(),
    )
}

/// Puts the chosen pairs under `fields[key]`, dots in keys replaced by
/// `_` when `dedot` (else nested at the dots); nothing when none is chosen.
fn put_event_keys<'a>(
    fields: &mut Map,
    key: &str,
    pairs: impl Iterator<Item = (&'a String, &'a String)>,
    dedot: bool,
) {
    let value = if dedot {
        dedotted(pairs)
    } else {
        nested(pairs)
    };
    if matches!(&value, Value::Map(m) if !m.is_empty()) {
        fields.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::super::hints::annotations;
    use super::*;

    fn pod() -> PodFields {
        let pod: crate::kubeobj::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-7d9f", "namespace": "shop", "uid": "u-1",
                "labels": {"app": "web", "app.kubernetes.io/name": "shop-web", "app.kubernetes.io": "x"},
                "annotations": {"team": "payments", "note": "n"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "r", "controller": true}]
            },
            "spec": {
                "nodeName": "node-1",
                "containers": [
                    {"name": "nginx", "image": "nginx:1.27", "ports": [{"containerPort": 80}, {"containerPort": 9113, "name": "metrics"}]},
                    {"name": "waiting", "image": "busybox:1"}
                ],
                "initContainers": [{"name": "setup", "image": "busybox:1"}]
            },
            "status": {
                "podIP": "10.244.0.7",
                "containerStatuses": [
                    {"name": "nginx", "containerID": "containerd://abc123", "image": "nginx:1.27", "imageID": "", "ready": true, "restartCount": 0},
                    {"name": "waiting", "image": "busybox:1", "imageID": "", "ready": false, "restartCount": 0}
                ],
                "initContainerStatuses": [
                    {"name": "setup", "containerID": "containerd://def456", "image": "busybox:1", "imageID": "", "ready": false, "restartCount": 0}
                ]
            }
        }))
        .unwrap();
        PodFields::from(pod)
    }

    fn json(v: &Value) -> serde_json::Value {
        serde_json::to_value(v).unwrap()
    }

    fn hints_on(default_container_logs: bool) -> ProviderSettings {
        ProviderSettings {
            hints: super::super::hints::HintSettings {
                enabled: true,
                default_container_logs,
                ..Default::default()
            },
            ..ProviderSettings::default()
        }
    }

    #[test]
    fn with_hints_on_mappings_publish_hints_and_keep_their_fields() {
        let mut p = pod();
        p.annotations = annotations(&[
            ("co.elastic.hints.nginx/package", "nginx"),
            (
                "co.elastic.hints.nginx/host",
                "${kubernetes.pod.ip}:${kubernetes.container.port}",
            ),
            (
                "co.elastic.hints/processors.add_tags",
                r#"{"tags": ["hinted"]}"#,
            ),
        ]);
        let s = hints_on(true);
        let m = pod_mappings(&p, &s, Related::default());
        let ids: Vec<&str> = m.iter().map(|x| x.id.as_str()).collect();
        // No Pod-level package: the Pod publishes nothing; `setup` has no
        // package and gets the default container logs.
        assert_eq!(ids, ["u-1.nginx", "u-1.setup"]);
        assert_eq!(
            json(&m[0].vars),
            serde_json::json!({"hints": {
                "nginx": {"container_logs": {"enabled": true}, "host": "10.244.0.7:9113", "enabled": true},
                "container_id": "abc123",
            }})
        );
        assert_eq!(
            json(&m[1].vars),
            serde_json::json!({"hints": {"container_logs": {"enabled": true}, "container_id": "def456"}})
        );
        assert_eq!(json(&m[0].fields)["kubernetes"]["pod"]["name"], "web-7d9f");
        assert_eq!(m[1].processors.len(), 1);
    }

    #[test]
    fn beats_hints_bring_inputs_and_take_the_container_logs_over() {
        let mut p = pod();
        p.annotations = annotations(&[
            ("co.elastic.hints.nginx/package", "nginx"),
            ("co.elastic.logs.nginx/multiline.pattern", "^\\S"),
            ("co.elastic.logs.nginx/multiline.match", "after"),
            ("co.elastic.metrics/module", "prometheus"),
            (
                "co.elastic.metrics/hosts",
                "${data.host}:${data.ports.metrics}",
            ),
        ]);
        let s = hints_on(false);
        let m = pod_mappings(&p, &s, Related::default());
        let ids: Vec<&str> = m.iter().map(|x| x.id.as_str()).collect();
        // `setup` has neither a package nor default logs, but the Pod's
        // metrics hint applies to it: it publishes for that alone.
        assert_eq!(ids, ["u-1.nginx", "u-1.setup"]);
        // The nginx package stays; its container logs are Beats' input.
        assert_eq!(
            json(&m[0].vars),
            serde_json::json!({"hints": {
                "nginx": {"enabled": true},
                "container_id": "abc123",
            }})
        );
        let inputs: Vec<serde_json::Value> = m[0].inputs.iter().map(json).collect();
        assert_eq!(inputs.len(), 2, "{inputs:?}");
        assert_eq!(inputs[0]["type"], "filestream");
        assert_eq!(
            inputs[0]["streams"][0]["paths"][0],
            "/var/log/containers/*-abc123.log"
        );
        assert_eq!(
            json(&m[1].vars),
            serde_json::json!({"hints": {"container_id": "def456"}})
        );
        // Both containers build the same scrape of the named port (the
        // rendering runs it once, as Beats runs equal configs once).
        assert_eq!(inputs[1]["streams"][0]["hosts"][0], "10.244.0.7:9113");
        assert_eq!(m[1].inputs, m[0].inputs[1..]);
    }

    #[test]
    fn a_pod_and_each_container_with_an_id_get_elastics_variables_and_fields() {
        let s = ProviderSettings {
            include_annotations: vec!["team".into()],
            ..ProviderSettings::default()
        };
        let m = pod_mappings(&pod(), &s, Related::default());
        let ids: Vec<&str> = m.iter().map(|x| x.id.as_str()).collect();
        // `waiting` has no container id yet: no mapping.
        assert_eq!(ids, ["u-1", "u-1.nginx", "u-1.setup"]);
        let pod_vars = json(&m[0].vars);
        assert_eq!(
            pod_vars["pod"],
            serde_json::json!({"name": "web-7d9f", "uid": "u-1", "ip": "10.244.0.7"})
        );
        assert_eq!(pod_vars["namespace"], "shop");
        assert_eq!(pod_vars["node"]["name"], "node-1");
        assert_eq!(pod_vars["replicaset"]["name"], "web-7d9f");
        assert_eq!(pod_vars["scope"], "node");
        // Labels nested at their dots; a key that is also a prefix moves
        // to `value`.
        assert_eq!(
            pod_vars["labels"],
            serde_json::json!({"app": {"value": "web", "kubernetes": {"io": "x", "io/name": "shop-web"}}})
        );
        let nginx = json(&m[1].vars);
        assert_eq!(
            nginx["container"],
            serde_json::json!({"name": "nginx", "id": "abc123", "image": "nginx:1.27", "runtime": "containerd", "port": "9113", "port_name": "metrics"})
        );
        assert!(nginx.get("scope").is_none());
        let f = json(&m[1].fields);
        assert_eq!(
            f["container"],
            serde_json::json!({"id": "abc123", "runtime": "containerd", "image": {"name": "nginx:1.27"}})
        );
        assert_eq!(f["kubernetes"]["container"]["name"], "nginx");
        assert_eq!(f["kubernetes"]["pod"]["name"], "web-7d9f");
        // Events: labels dedotted, only the annotations asked for.
        assert_eq!(
            f["kubernetes"]["labels"],
            serde_json::json!({"app": "web", "app_kubernetes_io/name": "shop-web", "app_kubernetes_io": "x"})
        );
        assert_eq!(
            f["kubernetes"]["annotations"],
            serde_json::json!({"team": "payments"})
        );
        assert!(json(&m[0].fields).get("container").is_none());
    }

    #[test]
    fn dotted_keys_resolve_as_elastic_variables_do() {
        let m = pod_mappings(&pod(), &ProviderSettings::default(), Related::default());
        let mut vars = leasehold_policy::Vars::new();
        vars.set_provider("kubernetes", m[0].vars.clone());
        let get = |name: &str| vars.lookup(name).map(json);
        assert_eq!(
            get("kubernetes.labels.app.kubernetes.io/name"),
            Some("shop-web".into())
        );
        assert_eq!(get("kubernetes.labels.app.kubernetes.io"), Some("x".into()));
        assert_eq!(get("kubernetes.labels.app.value"), Some("web".into()));
        assert_eq!(get("kubernetes.annotations.team"), Some("payments".into()));
        // No annotations on events unless asked for.
        assert!(
            json(&m[0].fields)["kubernetes"]
                .get("annotations")
                .is_none()
        );
    }

    #[test]
    fn node_namespace_and_deployment_metadata_are_added_as_elastic_adds_them() {
        let mut p = pod();
        p.labels.insert("pod-template-hash".into(), "7d9f".into());
        p.owner = Some(("ReplicaSet".into(), "web-7d9f".into()));
        let node_labels = std::collections::BTreeMap::from([(
            "topology.kubernetes.io/zone".to_string(),
            "z1".to_string(),
        )]);
        let ns_labels =
            std::collections::BTreeMap::from([("team".to_string(), "shop".to_string())]);
        let s = ProviderSettings {
            deployment: true,
            ..ProviderSettings::default()
        };
        let m = pod_mappings(
            &p,
            &s,
            Related {
                node_labels: Some(&node_labels),
                namespace: Some(NamespaceMeta {
                    uid: Some("ns-uid"),
                    labels: Some(&ns_labels),
                }),
            },
        );
        for v in [json(&m[1].vars), json(&m[1].fields)["kubernetes"].clone()] {
            assert_eq!(
                v["node"]["labels"]["topology_kubernetes_io/zone"], "z1",
                "{v}"
            );
            assert_eq!(v["namespace_labels"]["team"], "shop", "{v}");
            assert_eq!(v["namespace_uid"], "ns-uid", "{v}");
            assert_eq!(v["deployment"]["name"], "web", "{v}");
            assert_eq!(v["replicaset"]["name"], "web-7d9f", "{v}");
        }
        // Without the hash label (not a Deployment's), no deployment.
        let m = pod_mappings(&pod(), &s, Related::default());
        assert!(json(&m[0].vars).get("deployment").is_none());
    }

    #[test]
    fn a_ready_node_with_an_address_and_a_service_with_an_ip_get_mappings() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-1", "uid": "n-1",
                         "labels": {"kubernetes.io/hostname": "host-1", "zone": "z1"},
                         "annotations": {"note": "x"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
        }))
        .unwrap();
        let s = ProviderSettings::default();
        let m = node_mapping(&node, &s).unwrap();
        assert_eq!((m.id.as_str(), m.priority), ("n-1", 0));
        let v = json(&m.vars);
        assert_eq!(
            v["node"],
            serde_json::json!({"name": "node-1", "uid": "n-1", "hostname": "host-1"})
        );
        assert_eq!(v["labels"]["zone"], "z1");
        assert_eq!(v["annotations"]["note"], "x");
        assert_eq!(v["scope"], "node");
        let f = json(&m.fields);
        assert_eq!(f["kubernetes"]["node"]["hostname"], "host-1");
        assert_eq!(
            f["kubernetes"]["labels"]["kubernetes_io/hostname"],
            "host-1"
        );
        // Not Ready, or without an address: no mapping, as in Elastic Agent.
        let mut not_ready = node.clone();
        not_ready
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()[0]
            .status = "False".into();
        assert!(node_mapping(&not_ready, &s).is_none());
        let mut no_address = node;
        no_address.status.as_mut().unwrap().addresses = None;
        assert!(node_mapping(&no_address, &s).is_none());

        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "s-1", "labels": {"app": "web"}},
            "spec": {"clusterIP": "10.96.0.10"}
        }))
        .unwrap();
        let ns_labels = Labels::from([("team".to_string(), "a".to_string())]);
        let m = service_mapping(
            &svc,
            &s,
            Some(NamespaceMeta {
                uid: Some("ns-1"),
                labels: Some(&ns_labels),
            }),
        )
        .unwrap();
        assert_eq!((m.id.as_str(), m.priority), ("s-1", 3));
        let v = json(&m.vars);
        assert_eq!(
            v["service"],
            serde_json::json!({"name": "web", "uid": "s-1"})
        );
        assert_eq!(v["namespace"], "shop");
        assert_eq!(v["namespace_labels"]["team"], "a");
        assert_eq!(v["labels"]["app"], "web");
        assert_eq!(json(&m.fields)["kubernetes"]["service"]["name"], "web");
        let mut headless_without_ip = svc;
        headless_without_ip.spec.as_mut().unwrap().cluster_ip = None;
        assert!(service_mapping(&headless_without_ip, &s, None).is_none());
    }
}
