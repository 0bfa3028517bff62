//! Dynamic providers: a provider that publishes many variable sets at once
//! (Elastic Agent's `kubernetes` provider publishes one per pod and one per
//! container), each a [`Mapping`]. An input that reads the provider's
//! variables renders once per mapping, as in Elastic Agent:
//!
//! - mappings are tried in (priority, id) order; those whose variables do
//!   not resolve in the input, or whose conditions are false, render
//!   nothing;
//! - a rendering identical to an earlier one of the same input is not
//!   repeated (a pod's mapping and its containers' often agree);
//! - each rendering gets the id `<rendered id>-<provider>-<mapping id>`
//!   and carries the mapping's `fields`, which the runtime adds to every
//!   event of that input, and its `processors` under the input's
//!   `provider_processors` (they run after the input's own and cannot
//!   change where events go: a Pod's hints wrote them);
//! - a rendering that reads only what every mapping shares (the node, the
//!   scope) or reads the provider only in conditions describes no Pod: its
//!   id is `<rendered id>-<provider>-<hash of its config>`, stable while
//!   Pods come and go, and it carries only the node's fields and none of a
//!   Pod's processors;
//! - an input no mapping renders is reported as dropped, with why;
//! - inputs a mapping brings itself ([`Mapping::inputs`]) follow the
//!   policy's, with ids `<their id>-<provider>-<mapping id>`.

use crate::cond::Condition;
use crate::model::{Node, NodeKind};
use crate::subst::{self, Alt};
use crate::value::Value;

/// One variable set of a dynamic provider.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Mapping {
    /// Unique among the provider's mappings (a pod's uid; `<uid>.<name>`
    /// for a container): part of the ids of the inputs it renders.
    pub id: String,
    /// Lower first.
    pub priority: u8,
    /// What `${<provider>.…}` reads.
    pub vars: Value,
    /// Added to every event of an input rendered from this mapping: a map
    /// of top-level keys (e.g. `kubernetes`, `container`).
    pub fields: Value,
    /// Processors appended to the `processors` of every input rendered
    /// from this mapping (hints ask for them).
    pub processors: Vec<Value>,
    /// Inputs the mapping brings whole (Beats' `co.elastic.logs/*` and
    /// `co.elastic.metrics/*` hints build them): run after the policy's
    /// own, with the mapping's `fields`, once per distinct config, never
    /// substituted again (their values came from annotations).
    pub inputs: Vec<Value>,
    /// Why inputs its hints asked for were not built: listed as dropped.
    pub refused: Vec<String>,
    /// Its `node` and `scope` variables are those of the node its object
    /// runs on, the same in every mapping of that node (a Pod's, a
    /// container's; not a Node's own mapping, whose node is itself).
    pub shares_node: bool,
}

impl Mapping {
    /// The object the mapping describes: a Pod's uid for the Pod's own
    /// mapping and for each of its containers' (`<uid>.<name>`).
    pub fn object(&self) -> &str {
        self.id.split_once('.').map_or(self.id.as_str(), |(o, _)| o)
    }
}

/// A dynamic provider's current mappings, sorted by [`sort`].
#[derive(Debug, Clone, Copy)]
pub struct Dynamic<'a> {
    /// The provider's name, e.g. `kubernetes`.
    pub provider: &'a str,
    /// Its mappings, in rendering order.
    pub mappings: &'a [Mapping],
}

/// A hash of everything in `mappings`, in their order: equal mappings hash
/// equal, so a changed object can be told from an unchanged one without
/// keeping its mappings.
pub fn mappings_hash(mappings: &[Mapping]) -> u64 {
    use crate::render::stable_hash;
    let mut h = crate::fnv::Fnv64::new();
    for m in mappings {
        h.write(&(m.id.len() as u64).to_le_bytes());
        h.write(m.id.as_bytes());
        h.write(&[m.priority, u8::from(m.shares_node)]);
        h.write(&stable_hash(&m.vars).to_le_bytes());
        h.write(&stable_hash(&m.fields).to_le_bytes());
        for v in m.processors.iter().chain(&m.inputs) {
            h.write(&stable_hash(v).to_le_bytes());
        }
        h.write(&(m.processors.len() as u64).to_le_bytes());
        for r in &m.refused {
            h.write(&(r.len() as u64).to_le_bytes());
            h.write(r.as_bytes());
        }
        h.write(&[0xff]);
    }
    h.finish()
}

/// Puts `mappings` in rendering order: priority, then id.
pub fn sort(mappings: &mut [Mapping]) {
    mappings.sort_by(|a, b| (a.priority, &a.id).cmp(&(b.priority, &b.id)));
}

/// The parts of a mapping's variables (below the provider's name) that
/// every mapping of one node shares when [`Mapping::shares_node`]: the
/// node and the scope. An input reading only these renders the same for
/// every Pod.
const SHARED_PARTS: [&str; 2] = ["node", "scope"];

/// Whether the variable `rest` (its name below the provider's, e.g.
/// `node.name`) is one every mapping shares (see [`SHARED_PARTS`]).
pub fn shared_by_every_mapping(rest: &str) -> bool {
    SHARED_PARTS.iter().any(|p| {
        rest.strip_prefix(p)
            .is_some_and(|r| r.is_empty() || r.starts_with('.'))
    })
}

/// The dynamic provider whose mappings describe Pods and containers.
pub const POD_PROVIDER: &str = "kubernetes";

/// The first variable of `provider` that the text `s` reads and that is
/// one mapping's own (a Pod's, a container's), not what every mapping
/// shares ([`shared_by_every_mapping`]); `None` when there is none, or
/// when `s` does not parse (the walk of substitutions reports that).
pub fn own_var_in(s: &str, provider: &str, default_provider: &str) -> Option<String> {
    if !subst::may_contain_vars(s) {
        return None;
    }
    let template = subst::parse(s, default_provider).ok()?;
    template
        .refs()
        .flat_map(|r| r.alts.iter())
        .find_map(|a| match a {
            Alt::Var(name) => name
                .strip_prefix(provider)
                .and_then(|r| r.strip_prefix('.'))
                .filter(|rest| !shared_by_every_mapping(rest))
                .map(|_| name.clone()),
            Alt::Const(_) => None,
        })
}

/// The fields of a mapping that describe what every mapping shares (its
/// `kubernetes.node`), for an input that read only those: `None` when the
/// mapping has none.
pub fn shared_fields(fields: &Value) -> Option<Value> {
    let node = fields.lookup_path("kubernetes.node")?;
    let mut inner = crate::value::Map::new();
    inner.insert("node", node.clone());
    let mut top = crate::value::Map::new();
    top.insert("kubernetes", Value::Map(inner));
    Some(Value::Map(top))
}

/// Whether `input` reads a variable of `provider` anywhere: a `${…}` in a
/// string (with `default_provider` applied to names without a dot) or a
/// condition.
pub fn reads_provider(input: &Node, provider: &str, default_provider: &str) -> bool {
    let mut found = false;
    visit_vars(input, default_provider, &mut |name| {
        found |= of_provider(name, provider);
    });
    found
}

/// The variables of `provider` that `input` reads (full names, e.g.
/// `kubernetes.container.id`), in order of appearance, without repeats.
pub fn provider_vars(input: &Node, provider: &str, default_provider: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    visit_vars(input, default_provider, &mut |name| {
        if of_provider(name, provider) && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    });
    names
}

fn of_provider(name: &str, provider: &str) -> bool {
    name == provider
        || name
            .strip_prefix(provider)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// Calls `f` with every variable name read by a string or a condition in
/// `node`.
fn visit_vars(node: &Node, default_provider: &str, f: &mut dyn FnMut(&str)) {
    match &node.kind {
        NodeKind::Str { value, .. } => {
            if subst::may_contain_vars(value)
                && let Ok(t) = subst::parse(value, default_provider)
            {
                for alt in t.refs().flat_map(|r| r.alts.iter()) {
                    if let Alt::Var(v) = alt {
                        f(v);
                    }
                }
            }
        }
        NodeKind::List(items) => {
            for i in items {
                visit_vars(i, default_provider, f);
            }
        }
        NodeKind::Map(entries) => {
            for (k, v) in entries {
                if k.name == "condition" {
                    if let Some(c) = v.as_str().and_then(|src| Condition::parse(src).ok()) {
                        for name in c.variables() {
                            f(name);
                        }
                    }
                } else {
                    visit_vars(v, default_provider, f);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Policy;
    use crate::render::render_with;
    use crate::vars::Vars;

    fn policy(text: &str) -> Policy {
        Policy::parse(text, "p.yml").unwrap()
    }

    /// `p` rendered with `mappings` (put in rendering order first) as the
    /// `kubernetes` provider's.
    fn render_mapped(p: &Policy, mappings: &mut [Mapping]) -> crate::render::Rendered {
        sort(mappings);
        let d = Dynamic {
            provider: "kubernetes",
            mappings,
        };
        render_with(p, &Vars::new(), Some(&d)).unwrap()
    }

    fn pod(uid: &str, name: &str, app: &str) -> Mapping {
        Mapping {
            id: uid.into(),
            priority: 1,
            vars: Value::from_json(&serde_json::json!({
                "namespace": "shop",
                "pod": {"name": name, "uid": uid, "ip": "10.0.0.7"},
                "labels": {"app": app},
            })),
            fields: Value::from_json(&serde_json::json!({"kubernetes": {"pod": {"name": name}}})),
            processors: Vec::new(),
            shares_node: true,
            ..Mapping::default()
        }
    }

    fn container(uid: &str, name: &str, cname: &str, cid: &str) -> Mapping {
        Mapping {
            id: format!("{uid}.{cname}"),
            priority: 2,
            vars: Value::from_json(&serde_json::json!({
                "namespace": "shop",
                "pod": {"name": name, "uid": uid, "ip": "10.0.0.7"},
                "labels": {"app": "web"},
                "container": {"name": cname, "id": cid, "runtime": "containerd"},
            })),
            fields: Value::from_json(&serde_json::json!({
                "kubernetes": {"pod": {"name": name}, "container": {"name": cname}},
                "container": {"id": cid},
            })),
            processors: Vec::new(),
            shares_node: true,
            ..Mapping::default()
        }
    }

    const POLICY: &str = r#"
inputs:
  - id: container-log-${kubernetes.pod.name}-${kubernetes.container.id}
    type: filestream
    streams:
      - paths: ['/var/log/containers/*${kubernetes.container.id}.log']
  - id: redis
    type: prometheus/metrics
    condition: ${kubernetes.labels.app} == 'redis'
    hosts: ['${kubernetes.pod.ip}:9121']
  - id: static
    type: exec
    command: [date]
"#;

    #[test]
    fn an_input_reading_the_provider_renders_once_per_mapping_that_resolves_it() {
        let p = policy(POLICY);
        let mut mappings = vec![
            container("u1", "web-1", "nginx", "c1"),
            pod("u1", "web-1", "web"),
            pod("u2", "cache-1", "redis"),
            container("u2", "cache-1", "redis", "c2"),
            container("u2", "cache-1", "exporter", "c3"),
        ];
        let r = render_mapped(&p, &mut mappings);
        let ids: Vec<&str> = r.inputs.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                // Pods have no container id: only containers render it.
                "container-log-web-1-c1-kubernetes-u1.nginx",
                "container-log-cache-1-c3-kubernetes-u2.exporter",
                "container-log-cache-1-c2-kubernetes-u2.redis",
                // The pod renders it; its containers would render the same.
                "redis-kubernetes-u2",
                "static",
            ]
        );
        let log = &r.inputs[0];
        assert_eq!(
            log.config.lookup_path("streams.0.paths.0"),
            Some(&Value::Str("/var/log/containers/*c1.log".into()))
        );
        assert_eq!(log.fields, Some(mappings[2].fields.clone()));
        assert_eq!(
            r.inputs[3].fields,
            Some(mappings[1].fields.clone()),
            "hosts read pod.ip"
        );
        assert_eq!(r.inputs[4].fields, None, "a static input adds nothing");
        assert!(r.dropped.is_empty(), "{:?}", r.dropped);
    }

    #[test]
    fn a_mappings_processors_follow_the_inputs_own() {
        let p = policy(
            "inputs:\n  - id: log-${kubernetes.container.id}\n    type: filestream\n    processors: [{add_tags: {tags: [own]}}]\n  - id: static-${kubernetes.pod.name}\n    type: exec\n",
        );
        let mut c = container("u1", "web-1", "nginx", "c1");
        c.processors = vec![Value::from_json(
            &serde_json::json!({"add_tags": {"tags": ["hinted"]}}),
        )];
        let mut pod_mapping = pod("u1", "web-1", "web");
        pod_mapping.processors = c.processors.clone();
        let mut mappings = vec![c, pod_mapping];
        let r = render_mapped(&p, &mut mappings);
        let tags = |i: usize, key: &str| -> Vec<String> {
            match r.inputs[i].config.lookup_path(key) {
                Some(Value::List(l)) => l
                    .iter()
                    .filter_map(|p| p.lookup_path("add_tags.tags.0"))
                    .map(|t| t.to_subst_text())
                    .collect(),
                _ => Vec::new(),
            }
        };
        assert_eq!(r.inputs[0].id, "log-c1-kubernetes-u1.nginx");
        // The policy's own stay apart from the ones a Pod's hints added.
        assert_eq!(tags(0, "processors"), ["own"]);
        assert_eq!(tags(0, "provider_processors"), ["hinted"]);
        assert_eq!(r.inputs[1].id, "static-web-1-kubernetes-u1");
        assert_eq!(tags(1, "processors"), Vec::<String>::new());
        assert_eq!(tags(1, "provider_processors"), ["hinted"]);
    }

    #[test]
    fn inputs_a_mapping_brings_run_once_each_after_the_policys() {
        let p = policy("inputs:\n  - id: static\n    type: exec\n    command: [date]\n");
        let scrape = Value::from_json(&serde_json::json!({
            "id": "hints-metrics-prometheus-0", "type": "prometheus/metrics",
            "streams": [{"metricsets": ["collector"], "hosts": ["10.0.0.7:9090"]}],
        }));
        let mut a = container("u1", "web-1", "app", "c1");
        a.inputs = vec![scrape.clone()];
        // The Pod's hints apply to its other container too: same config.
        let mut b = container("u1", "web-1", "sidecar", "c2");
        b.inputs = vec![scrape];
        b.refused = vec!["co.elastic.metrics/module: redis is not built".into()];
        let mut mappings = vec![b, a];
        let r = render_mapped(&p, &mut mappings);
        let ids: Vec<&str> = r.inputs.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(
            ids,
            ["static", "hints-metrics-prometheus-0-kubernetes-u1.app"]
        );
        assert_eq!(r.inputs[1].fields, Some(mappings[0].fields.clone()));
        assert_eq!(
            r.inputs[1].config.lookup_path("streams.0.hosts.0"),
            Some(&Value::Str("10.0.0.7:9090".into()))
        );
        assert_eq!(
            r.dropped,
            [crate::render::Dropped {
                id: "hints-kubernetes-u1.sidecar".into(),
                reason: "co.elastic.metrics/module: redis is not built".into(),
            }]
        );
    }

    #[test]
    fn the_same_brought_config_in_two_pods_is_two_inputs_each_with_its_pods_fields() {
        // Two namespaces' Pods whose hints build the same scrape (a
        // Service name both annotate): each Pod's data carries its own
        // metadata, never the other's.
        let p = policy("inputs: []\n");
        let scrape = Value::from_json(&serde_json::json!({
            "id": "hints-metrics-prometheus-0", "type": "prometheus/metrics",
            "streams": [{"metricsets": ["collector"], "hosts": ["metrics.shared:9090"]}],
        }));
        let mut a = container("u1", "team-a-0", "app", "c1");
        a.inputs = vec![scrape.clone()];
        a.fields = Value::from_json(&serde_json::json!({"kubernetes": {"namespace": "team-a"}}));
        let mut b = container("u2", "team-b-0", "app", "c2");
        b.inputs = vec![scrape];
        b.fields = Value::from_json(&serde_json::json!({"kubernetes": {"namespace": "team-b"}}));
        let mut mappings = vec![a, b];
        let r = render_mapped(&p, &mut mappings);
        let got: Vec<(&str, Option<&Value>)> = r
            .inputs
            .iter()
            .map(|i| {
                let ns = i
                    .fields
                    .as_ref()
                    .and_then(|f| f.lookup_path("kubernetes.namespace"));
                (i.id.as_str(), ns)
            })
            .collect();
        let (ns_a, ns_b) = (Value::Str("team-a".into()), Value::Str("team-b".into()));
        assert_eq!(
            got,
            [
                ("hints-metrics-prometheus-0-kubernetes-u1.app", Some(&ns_a)),
                ("hints-metrics-prometheus-0-kubernetes-u2.app", Some(&ns_b)),
            ]
        );
    }

    #[test]
    fn an_exec_script_built_from_a_pods_value_is_dropped_and_an_argument_runs() {
        let p = policy(
            "inputs:\n  - id: shell-${kubernetes.pod.name}\n    type: exec\n    command: [sh, -c, 'echo ${kubernetes.labels.app}']\n  - id: arg-${kubernetes.pod.name}\n    type: exec\n    command: [sh, -c, 'echo \"$1\"', sh, '${kubernetes.labels.app}']\n",
        );
        let mut mappings = vec![pod("u1", "web-1", "$(touch /tmp/pwned)")];
        let r = render_mapped(&p, &mut mappings);
        let ids: Vec<&str> = r.inputs.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["arg-web-1-kubernetes-u1"]);
        assert_eq!(
            r.inputs[0].config.lookup_path("command.4"),
            Some(&Value::Str("$(touch /tmp/pwned)".into())),
            "the value is one argument, as given"
        );
        assert_eq!(r.dropped.len(), 1, "{:?}", r.dropped);
        assert!(
            r.dropped[0].reason.contains("${kubernetes.labels.app}")
                && r.dropped[0].reason.contains("the shell script"),
            "{:?}",
            r.dropped
        );
    }

    #[test]
    fn conditions_alone_select_but_do_not_describe() {
        // Elastic's node-metrics input: a stream chosen by a pod's labels,
        // others the same for every pod.
        let p = policy(
            "inputs:\n  - id: node-metrics\n    type: kubernetes/metrics\n    streams:\n      - metricsets: [controllermanager]\n        hosts: ['https://${kubernetes.pod.ip}:10257']\n        condition: ${kubernetes.labels.app} == 'redis'\n      - metricsets: [proxy]\n        hosts: ['localhost:10249']\n",
        );
        let mut mappings = vec![
            pod("u1", "web-1", "web"),
            pod("u2", "cache-1", "redis"),
            pod("u3", "web-2", "web"),
        ];
        let r = render_mapped(&p, &mut mappings);
        let got: Vec<(&str, bool)> = r
            .inputs
            .iter()
            .map(|i| (i.id.as_str(), i.fields.is_some()))
            .collect();
        // The web pods render the same proxy-only input: once, without a
        // pod's fields, and with an id that no pod names; the redis pod's
        // reads its ip: with its fields.
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].0.starts_with("node-metrics-kubernetes-") && !got[0].0.contains("-u"),
            "{got:?}"
        );
        assert!(!got[0].1);
        assert_eq!(got[1], ("node-metrics-kubernetes-u2", true));
    }

    #[test]
    fn an_input_reading_only_the_node_describes_no_pod_and_keeps_its_id() {
        let p = policy(
            "inputs:\n  - id: kubelet\n    type: kubernetes/metrics\n    processors: [{add_tags: {tags: [own]}}]\n    streams:\n      - metricsets: [node]\n        hosts: ['https://${kubernetes.node.name}:10250']\n",
        );
        let on_node = |mut m: Mapping| {
            let Value::Map(vars) = &mut m.vars else {
                unreachable!()
            };
            vars.insert(
                "node",
                Value::from_json(&serde_json::json!({"name": "node-1"})),
            );
            m.fields = Value::from_json(&serde_json::json!({
                "kubernetes": {"pod": {"name": m.id.clone()}, "node": {"name": "node-1"}},
            }));
            m.processors = vec![Value::from_json(
                &serde_json::json!({"add_fields": {"target": "", "fields": {"data_stream": {"namespace": "theirs"}}}}),
            )];
            m
        };
        let render = |uids: &[&str]| {
            let mut mappings: Vec<Mapping> =
                uids.iter().map(|u| on_node(pod(u, u, "web"))).collect();
            render_mapped(&p, &mut mappings)
        };
        let both = render(&["u1", "u2"]);
        assert_eq!(both.inputs.len(), 1, "{:?}", both.inputs);
        let input = &both.inputs[0];
        // The same id whichever Pods exist: the first one going away does
        // not restart it.
        assert_eq!(render(&["u2"]).inputs[0].id, input.id);
        assert_eq!(render(&["u3", "u2"]).inputs[0].id, input.id);
        assert!(!input.id.contains("u1"), "{}", input.id);
        // Only the node's fields, none of a Pod's processors.
        assert_eq!(
            input.fields,
            Some(Value::from_json(
                &serde_json::json!({"kubernetes": {"node": {"name": "node-1"}}})
            ))
        );
        let Some(Value::List(processors)) = input.config.lookup_path("processors") else {
            panic!("{:?}", input.config)
        };
        assert_eq!(processors.len(), 1, "the policy's own: {processors:?}");
        assert!(
            input.config.lookup_path("provider_processors").is_none(),
            "{:?}",
            input.config
        );
    }

    #[test]
    fn an_input_no_mapping_renders_is_reported_with_why() {
        let p = policy(POLICY);
        let r = render_mapped(&p, &mut []);
        assert_eq!(r.inputs.len(), 1);
        assert_eq!(r.dropped.len(), 2);
        assert!(
            r.dropped[0].reason.contains("publishes nothing yet"),
            "{:?}",
            r.dropped
        );
        let mut mappings = [pod("u1", "web-1", "web")];
        let r = render_mapped(&p, &mut mappings);
        let why: Vec<&str> = r.dropped.iter().map(|d| d.reason.as_str()).collect();
        assert!(why[0].contains("kubernetes.container.id"), "{why:?}");
        assert!(why[1].contains("is false"), "{why:?}");
        // Without the provider at all, inputs render as before: unresolved.
        let plain = crate::render::render(&p, &Vars::new()).unwrap();
        assert_eq!(plain.inputs.len(), 1);
    }

    #[test]
    fn reading_the_provider_is_found_in_strings_and_conditions_only() {
        let p = policy(
            "inputs:\n  - {id: a, type: x, hosts: ['${kubernetes.pod.ip|\"x\"}']}\n  - {id: b, type: x, condition: \"${kubernetes.labels.app} == 'a'\"}\n  - {id: c, type: x, note: kubernetes.pod.ip}\n  - {id: d, type: x, v: '${kubernetes_leaderelection.leader}'}\n  - {id: e, type: x, v: '$${kubernetes.pod.ip}'}\n",
        );
        let got: Vec<bool> = p
            .inputs()
            .iter()
            .map(|i| reads_provider(i, "kubernetes", "env"))
            .collect();
        assert_eq!(got, [true, true, false, false, false]);
        assert_eq!(
            provider_vars(&p.inputs()[0], "kubernetes", "env"),
            ["kubernetes.pod.ip"]
        );
    }
}
