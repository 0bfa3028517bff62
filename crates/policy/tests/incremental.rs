//! The rendering kept up to date one object at a time is, after any
//! sequence of object changes, the rendering of all mappings at once:
//! same inputs, same order, same duplicates and reasons; and the changes
//! it reports, applied in turn, give its inputs.

use std::collections::BTreeMap;

use leasehold_policy::dynamic::{self, Dynamic, Mapping};
use leasehold_policy::incremental::{HeldMappings, Incremental};
use leasehold_policy::{Policy, Value, Vars, render_with};
use proptest::prelude::*;
use serde_json::json;

/// Inputs covering every way a mapping decides a rendering: per
/// container, per Pod (its containers render the same), per namespace
/// (many Pods render the same: the first runs), per node (shared), by
/// condition only, duplicate ids between inputs and with a fixed input,
/// and a fixed input.
const POLICY: &str = r#"
inputs:
  - id: fixed
    type: exec
    command: [echo, hi]
  - id: logs-${kubernetes.container.id}
    type: filestream
    paths: ['/var/log/containers/*${kubernetes.container.id}.log']
  - id: pod
    type: exec
    command: [echo, '${kubernetes.pod.name}']
  - id: dup
    type: exec
    command: [echo, '${kubernetes.pod.name}']
    args: [other]
  - id: ns
    type: exec
    command: [echo, '${kubernetes.namespace}']
  - id: node
    type: exec
    command: [echo, '${kubernetes.node.name}']
  - id: redis
    type: exec
    condition: ${kubernetes.labels.app} == 'redis'
    command: [echo, redis]
  - id: pod-kubernetes-u1
    type: exec
    command: [echo, collides]
"#;

#[derive(Debug, Clone)]
struct PodSpec {
    app: bool,
    ns: bool,
    node: bool,
    containers: u8,
    brought: u8,
    refused: bool,
    processors: bool,
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        0u8..3,
        0u8..4,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(app, ns, node, containers, brought, refused, processors)| PodSpec {
                app,
                ns,
                node,
                containers,
                brought,
                refused,
                processors,
            },
        )
}

fn mappings(uid: &str, s: &PodSpec) -> Vec<Mapping> {
    let ns = if s.ns { "a" } else { "b" };
    let node = if s.node { "n1" } else { "n2" };
    let app = if s.app { "redis" } else { "web" };
    let name = format!("{uid}-pod");
    let fields = Value::from_json(
        &json!({"kubernetes": {"pod": {"name": name}, "node": {"name": node}, "namespace": ns}}),
    );
    let processors = if s.processors {
        vec![Value::from_json(&json!({"add_tags": {"tags": [uid]}}))]
    } else {
        Vec::new()
    };
    let brought: Vec<Value> = (0..s.brought)
        .map(|k| Value::from_json(&json!({"id": format!("hint-{}", k % 2), "type": "exec", "command": ["echo", k % 2]})))
        .collect();
    let mut out = vec![Mapping {
        id: uid.to_string(),
        priority: 1,
        vars: Value::from_json(&json!({
            "namespace": ns, "node": {"name": node},
            "pod": {"name": name, "uid": uid}, "labels": {"app": app},
        })),
        fields: fields.clone(),
        processors: processors.clone(),
        inputs: brought.clone(),
        refused: if s.refused {
            vec![format!("{uid}: a hint refused")]
        } else {
            Vec::new()
        },
        shares_node: true,
    }];
    for c in 0..s.containers {
        out.push(Mapping {
            id: format!("{uid}.c{c}"),
            priority: 2,
            vars: Value::from_json(&json!({
                "namespace": ns, "node": {"name": node},
                "pod": {"name": name, "uid": uid}, "labels": {"app": app},
                "container": {"name": format!("c{c}"), "id": format!("{uid}c{c}")},
            })),
            fields: fields.clone(),
            processors: processors.clone(),
            inputs: brought.clone(),
            refused: Vec::new(),
            shares_node: true,
        });
    }
    out
}

fn all_rendered(
    p: &Policy,
    objects: &BTreeMap<String, Vec<Mapping>>,
) -> leasehold_policy::Rendered {
    let mut all: Vec<Mapping> = objects.values().flatten().cloned().collect();
    dynamic::sort(&mut all);
    let d = Dynamic {
        provider: "kubernetes",
        mappings: &all,
    };
    render_with(p, &Vars::new(), Some(&d)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn changes_one_object_at_a_time_render_as_all_at_once(
        start in proptest::collection::vec((0u8..6, pod_spec()), 0..5),
        steps in proptest::collection::vec((0u8..6, proptest::option::of(pod_spec())), 1..25),
    ) {
        let p = Policy::parse(POLICY, "p.yml").unwrap();
        let mut objects: BTreeMap<String, Vec<Mapping>> = BTreeMap::new();
        for (u, s) in &start {
            let uid = format!("u{u}");
            objects.insert(uid.clone(), mappings(&uid, s));
        }
        let initial: Vec<Mapping> = objects.values().flatten().cloned().collect();
        let mut held = HeldMappings::new(initial);
        let mut inc = Incremental::new(&p, &Vars::new(), "kubernetes", &[], &held).unwrap();
        prop_assert_eq!(inc.rendered(), all_rendered(&p, &objects));
        // What the reported changes build up.
        let mut applied: BTreeMap<String, Value> = BTreeMap::new();
        let apply = |inc: &mut Incremental, applied: &mut BTreeMap<String, Value>| {
            let c = inc.take_changes();
            for i in c.upserted {
                applied.insert(i.id.clone(), i.config.clone());
            }
            for id in c.removed {
                applied.remove(&id);
            }
        };
        apply(&mut inc, &mut applied);
        for (u, change) in &steps {
            let uid = format!("u{u}");
            match change {
                Some(s) => {
                    let ms = mappings(&uid, s);
                    objects.insert(uid.clone(), ms.clone());
                    held.0.insert(uid.clone(), ms);
                }
                None => {
                    objects.remove(&uid);
                    held.0.remove(&uid);
                }
            }
            inc.refresh(&p, &held, &uid).unwrap();
            let want = all_rendered(&p, &objects);
            prop_assert_eq!(&inc.rendered(), &want);
            apply(&mut inc, &mut applied);
            let want_map: BTreeMap<String, Value> =
                want.inputs.iter().map(|i| (i.id.clone(), i.config.clone())).collect();
            prop_assert_eq!(&applied, &want_map);
        }
    }
}

#[test]
fn a_pod_change_renders_only_that_pods_mappings() {
    let p = Policy::parse(POLICY, "p.yml").unwrap();
    let spec = PodSpec {
        app: false,
        ns: true,
        node: true,
        containers: 1,
        brought: 0,
        refused: false,
        processors: false,
    };
    let all: Vec<Mapping> = (0..50)
        .flat_map(|u| mappings(&format!("p{u:03}"), &spec))
        .collect();
    let mut held = HeldMappings::new(all);
    let mut inc = Incremental::new(&p, &Vars::new(), "kubernetes", &[], &held).unwrap();
    inc.take_changes();
    // A label change on one Pod: its Pod-level and container inputs may
    // change, nobody else's.
    let changed = PodSpec { app: true, ..spec };
    held.0.insert("p007".into(), mappings("p007", &changed));
    inc.refresh(&p, &held, "p007").unwrap();
    let c = inc.take_changes();
    let ids: Vec<&str> = c.upserted.iter().map(|i| i.id.as_str()).collect();
    assert!(c.removed.is_empty(), "{c:?}");
    // The redis input reads the label only in its condition: its id names
    // its content, and it starts with the first redis Pod.
    assert!(
        ids.iter()
            .all(|i| i.contains("p007") || i.starts_with("redis-kubernetes-")),
        "only the changed Pod's inputs: {ids:?}"
    );
    assert!(
        ids.iter().any(|i| i.starts_with("redis-kubernetes-")),
        "{ids:?}"
    );
    assert!(ids.contains(&"pod-kubernetes-p007"), "{ids:?}");
}
