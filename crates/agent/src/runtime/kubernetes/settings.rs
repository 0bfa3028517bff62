//! `providers.kubernetes`: Elastic Agent's keys, read from the resolved
//! section (so `node: ${NODE_NAME}` works). Keys Elastic documents that
//! leasehold does not act on are accepted with a warning that says what is
//! missing; unknown keys are errors naming the key.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_policy::Value;

use super::hints::HintSettings;
use crate::settings::{self, Problem};

/// Elastic Agent's default wait between a pod's deletion and the removal
/// of its mappings: its log inputs read the rest of their files meanwhile.
pub const DEFAULT_CLEANUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the provider looks for pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Pods of this agent's node (`spec.nodeName`): one agent per node.
    Node,
    /// Pods of every node.
    Cluster,
}

/// The provider's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderSettings {
    /// `scope` (default `node`).
    pub scope: Scope,
    /// `node`: the node whose pods are watched in node scope; empty means
    /// `NODE_NAME`, else the host name.
    pub node: Option<String>,
    /// `namespace`: only pods of this namespace (default: all).
    pub namespace: Option<String>,
    /// `cleanup_timeout`.
    pub cleanup_timeout: Duration,
    /// `include_labels`: only these pod labels are added to events (all
    /// when empty).
    pub include_labels: Vec<String>,
    /// `exclude_labels`: these pod labels are not added to events.
    pub exclude_labels: Vec<String>,
    /// `include_annotations`: the pod annotations added to events (none by
    /// default).
    pub include_annotations: Vec<String>,
    /// `labels.dedot` (default true): dots in label keys become `_` in
    /// events.
    pub labels_dedot: bool,
    /// `annotations.dedot` (default true).
    pub annotations_dedot: bool,
    /// `kube_config`: a kubeconfig file instead of the agent's connection.
    pub kube_config: Option<String>,
    /// `add_resource_metadata.node.enabled` (default true): the node's
    /// labels on the mappings (`kubernetes.node.labels.*`).
    pub node_metadata: bool,
    /// `add_resource_metadata.namespace.enabled` (default true): the
    /// namespace's labels and uid (`kubernetes.namespace_labels.*`).
    pub namespace_metadata: bool,
    /// `add_resource_metadata.deployment` (default false): the
    /// Deployment's name of a pod whose ReplicaSet it owns.
    pub deployment: bool,
    /// `hints.*` and `prefix`.
    pub hints: HintSettings,
    /// `resources.{pod,node,service}.enabled`.
    pub resources: Resources,
}

/// Which objects the provider publishes mappings for. As in Elastic Agent,
/// when none is turned on, pods and nodes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    /// Pods and their containers.
    pub pod: bool,
    /// Nodes (Ready, with an address).
    pub node: bool,
    /// Services with a cluster IP (cluster scope).
    pub service: bool,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            pod: true,
            node: true,
            service: false,
        }
    }
}

impl Default for ProviderSettings {
    fn default() -> Self {
        ProviderSettings {
            scope: Scope::Node,
            node: None,
            namespace: None,
            cleanup_timeout: DEFAULT_CLEANUP_TIMEOUT,
            include_labels: Vec::new(),
            exclude_labels: Vec::new(),
            include_annotations: Vec::new(),
            labels_dedot: true,
            annotations_dedot: true,
            kube_config: None,
            node_metadata: true,
            namespace_metadata: true,
            deployment: false,
            hints: HintSettings::default(),
            resources: Resources::default(),
        }
    }
}

/// Settings read, and warnings about keys accepted but not acted on.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// `None` when the provider is turned off (`enabled: false`).
    pub settings: Option<ProviderSettings>,
    /// One line per key accepted without effect.
    pub warnings: Vec<String>,
}

/// Keys accepted without effect, and why.
const INERT: [(&str, &str); 5] = [
    (
        "sync_period",
        "watches are event-driven and re-list only when the API server asks",
    ),
    (
        "kube_client_options",
        "requests go through the agent's own client",
    ),
    ("use_kubeadm", "`orchestrator.cluster.*` is not added"),
    ("use_regex_include", "label names are matched exactly"),
    ("use_regex_exclude", "label names are matched exactly"),
];

/// Reads `providers.kubernetes` (`v` is its resolved value, `Null` when
/// written without settings).
pub fn parse(v: &Value) -> Result<Parsed, Vec<String>> {
    let base = "providers.kubernetes";
    let mut keys = BTreeMap::new();
    match v {
        Value::Null => {}
        Value::Map(m) => flatten("", m, &mut keys),
        other => {
            return Err(vec![format!(
                "`{base}` must be a mapping of settings, found {}",
                other.type_name()
            )]);
        }
    }
    let mut s = ProviderSettings::default();
    let mut errors: Vec<Problem> = Vec::new();
    let mut warnings = Vec::new();
    let mut enabled = true;
    let mut scope_set = false;
    let (mut pod, mut node, mut service) = (None, None, None);
    for (key, value) in &keys {
        let path = format!("{base}.{key}");
        let at = format!("`{path}`");
        let text = || match value {
            Value::Str(t) => Some(t.trim().to_string()),
            Value::Int(i) => Some(i.to_string()),
            _ => None,
        };
        let boolean = |errors: &mut Vec<Problem>| settings::flag(&path, value, errors);
        let names = |errors: &mut Vec<Problem>| settings::names(&path, value, errors);
        match key.as_str() {
            "enabled" => enabled = boolean(&mut errors).unwrap_or(true),
            "scope" => match text().as_deref() {
                Some("node") => {
                    s.scope = Scope::Node;
                    scope_set = true;
                }
                Some("cluster") => s.scope = Scope::Cluster,
                _ => errors.push(Problem::new(&path, "must be `node` or `cluster`")),
            },
            "node" => s.node = text().filter(|t| !t.is_empty()),
            "namespace" => s.namespace = text().filter(|t| !t.is_empty()),
            "kube_config" => s.kube_config = text().filter(|t| !t.is_empty()),
            "cleanup_timeout" => {
                if let Some(d) = settings::duration_in(
                    &path,
                    value,
                    Duration::ZERO,
                    Duration::from_secs(24 * 3600),
                    &mut errors,
                ) {
                    s.cleanup_timeout = d;
                }
            }
            "include_labels" => s.include_labels = names(&mut errors).unwrap_or_default(),
            "exclude_labels" => s.exclude_labels = names(&mut errors).unwrap_or_default(),
            "include_annotations" => {
                s.include_annotations = names(&mut errors).unwrap_or_default()
            }
            "labels.dedot" => s.labels_dedot = boolean(&mut errors).unwrap_or(true),
            "annotations.dedot" => s.annotations_dedot = boolean(&mut errors).unwrap_or(true),
            "resources.pod.enabled" => pod = boolean(&mut errors),
            "resources.node.enabled" => node = boolean(&mut errors),
            "resources.service.enabled" => service = boolean(&mut errors),
            "hints.enabled" => s.hints.enabled = boolean(&mut errors).unwrap_or(false),
            "hints.default_container_logs" => {
                s.hints.default_container_logs = boolean(&mut errors).unwrap_or(true)
            }
            "hints.allowed_hosts" => {
                s.hints.allowed_hosts = names(&mut errors).unwrap_or_default()
            }
            "prefix" => match text() {
                Some(p) if !p.is_empty() => s.hints.prefix = p,
                _ => errors.push(Problem::new(
                    &path,
                    "must be an annotation prefix, e.g. co.elastic",
                )),
            },
            "add_resource_metadata.node.enabled" | "add_resource_metadata.node" => {
                s.node_metadata = boolean(&mut errors).unwrap_or(true)
            }
            "add_resource_metadata.namespace.enabled" | "add_resource_metadata.namespace" => {
                s.namespace_metadata = boolean(&mut errors).unwrap_or(true)
            }
            "add_resource_metadata.deployment" => {
                s.deployment = boolean(&mut errors).unwrap_or(false)
            }
            k if k.starts_with("add_resource_metadata.") => {
                if !matches!(value, Value::Bool(false)) {
                    warnings.push(format!(
                        "{at} has no effect: node and namespace labels are added whole (dedotted), and the cronjob's name is not added"
                    ));
                }
            }
            k => match INERT.iter().find(|(name, _)| *name == k) {
                Some((_, why)) => warnings.push(format!("{at} has no effect: {why}")),
                None => errors.push(Problem::new(
                    &path,
                    "is not a setting of the kubernetes provider (known: scope, node, namespace, cleanup_timeout, include_labels, exclude_labels, include_annotations, labels.dedot, annotations.dedot, resources.pod.enabled, add_resource_metadata, hints, prefix, kube_config)",
                )),
            },
        }
    }
    // Elastic Agent's rule: none turned on means pods and nodes.
    let (pod, node, service) = (
        pod.unwrap_or(false),
        node.unwrap_or(false),
        service.unwrap_or(false),
    );
    s.resources = if pod || node || service {
        Resources { pod, node, service }
    } else {
        Resources::default()
    };
    if keys.get("resources.pod.enabled") == Some(&Value::Bool(false)) && !node && !service {
        warnings.push(format!(
            "`{base}.resources.pod.enabled`: false with no other resource turned on publishes pods and nodes, as in Elastic Agent; turn the provider off with `{base}.enabled: false`"
        ));
    }
    // Services are cluster objects: Elastic Agent watches them cluster-wide.
    if s.resources.service && s.scope == Scope::Node {
        if scope_set {
            warnings.push(format!(
                "`{base}.scope`: node is changed to cluster because `resources.service` is on, as in Elastic Agent"
            ));
        }
        s.scope = Scope::Cluster;
    }
    if s.scope == Scope::Cluster && s.node.is_some() {
        warnings.push(format!(
            "`{base}.node` is ignored in cluster scope: pods of every node are watched"
        ));
        s.node = None;
    }
    // Several warnings from one sub-tree say the same thing once.
    warnings.dedup();
    if errors.is_empty() {
        Ok(Parsed {
            settings: enabled.then_some(s),
            warnings,
        })
    } else {
        Err(errors.iter().map(ToString::to_string).collect())
    }
}

/// Every leaf of `m` by its dotted key (`hints: {enabled: true}` and
/// `hints.enabled: true` are the same key); lists are leaves.
fn flatten(prefix: &str, m: &leasehold_policy::Map, out: &mut BTreeMap<String, Value>) {
    for (k, v) in m.iter() {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Map(inner) if !inner.is_empty() => flatten(&key, inner, out),
            _ => {
                out.insert(key, v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `text` as the settings under `providers.kubernetes`.
    fn parse_yaml(text: &str) -> Result<Parsed, Vec<String>> {
        let indented: String = text.lines().map(|l| format!("    {l}\n")).collect();
        let policy = leasehold_policy::Policy::parse(
            &format!("providers:\n  kubernetes:\n{indented}"),
            "p.yml",
        )
        .unwrap();
        let root = policy.root.to_value();
        parse(root.lookup_path("providers.kubernetes").unwrap())
    }

    #[test]
    fn elastics_manifest_settings_read_as_elastic_means_them() {
        let p = parse_yaml("node: node-1\nscope: node\n").unwrap();
        let s = p.settings.unwrap();
        assert_eq!(s.scope, Scope::Node);
        assert_eq!(s.node.as_deref(), Some("node-1"));
        assert_eq!(s.cleanup_timeout, DEFAULT_CLEANUP_TIMEOUT);
        assert!(s.labels_dedot && s.annotations_dedot);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);

        let p = parse_yaml(
            "scope: cluster\nnode: x\nnamespace: shop\ncleanup_timeout: 5s\ninclude_labels: [app]\ninclude_annotations: [team]\nlabels.dedot: false\nhints: {enabled: true, default_container_logs: true}\nadd_resource_metadata: {deployment: true}\nsync_period: 10m\n",
        )
        .unwrap();
        let s = p.settings.unwrap();
        assert_eq!(s.scope, Scope::Cluster);
        assert_eq!(s.node, None);
        assert_eq!(s.namespace.as_deref(), Some("shop"));
        assert_eq!(s.cleanup_timeout, Duration::from_secs(5));
        assert_eq!(s.include_labels, ["app"]);
        assert_eq!(s.include_annotations, ["team"]);
        assert!(!s.labels_dedot);
        assert!(s.deployment && s.node_metadata && s.namespace_metadata);
        assert!(s.hints.enabled && s.hints.default_container_logs);
        assert_eq!(
            s.resources,
            Resources::default(),
            "none asked for: pods and nodes"
        );
        assert_eq!(s.hints.prefix, "co.elastic");
        let all = p.warnings.join("\n");
        assert!(
            !all.contains("deployment") && !all.contains("hints"),
            "{all}"
        );
        for said in ["sync_period", "ignored in cluster scope"] {
            assert!(all.contains(said), "{said}: {all}");
        }
        assert_eq!(
            parse(&Value::Null).unwrap().settings,
            Some(ProviderSettings::default())
        );
        assert_eq!(parse_yaml("enabled: false").unwrap().settings, None);
    }

    #[test]
    fn resources_follow_elastics_rule() {
        let r = |yaml: &str| parse_yaml(yaml).unwrap();
        let only_services = r("resources.service.enabled: true\nscope: node\n");
        let s = only_services.settings.unwrap();
        assert_eq!(
            s.resources,
            Resources {
                pod: false,
                node: false,
                service: true
            }
        );
        assert_eq!(s.scope, Scope::Cluster);
        assert!(
            only_services
                .warnings
                .join("\n")
                .contains("changed to cluster")
        );
        let nodes = r("resources: {node: {enabled: true}}\n").settings.unwrap();
        assert_eq!((nodes.resources.pod, nodes.resources.node), (false, true));
        let off = r("resources.pod.enabled: false\n");
        assert_eq!(off.settings.unwrap().resources, Resources::default());
        assert!(off.warnings.join("\n").contains("publishes pods and nodes"));
    }

    #[test]
    fn wrong_settings_name_the_key() {
        let e = parse_yaml(
            "scope: everywhere\ncleanup_timeout: soon\nlabel_dedot: true\ninclude_labels: app\n",
        )
        .unwrap_err()
        .join("\n");
        for key in [
            "`providers.kubernetes.scope`: must be `node` or `cluster`",
            "`providers.kubernetes.cleanup_timeout`: invalid duration",
            "`providers.kubernetes.label_dedot`: is not a setting",
            "`providers.kubernetes.include_labels`: must be a list",
        ] {
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
