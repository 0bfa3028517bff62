//! Rendering semantics and the example policies in `examples/`.

use leasehold_policy::{Policy, Severity, Value, Vars, check, render};

fn vars(leader: bool) -> Vars {
    Vars::from_json(&serde_json::json!({
        "env": {"NODE_NAME": "node-1", "HOSTNAME": "node-1"},
        "host": {"name": "node-1"},
        "kubernetes_leaderelection": {"leader": leader, "holder": "pod-a", "term": 3}
    }))
    .unwrap()
}

fn policy(src: &str) -> Policy {
    Policy::parse(src, "test.yaml").unwrap()
}

fn ids(p: &Policy, v: &Vars) -> (Vec<String>, Vec<(String, String)>) {
    let r = render(p, v).unwrap();
    (
        r.inputs.iter().map(|i| i.id.clone()).collect(),
        r.dropped
            .iter()
            .map(|d| (d.id.clone(), d.reason.clone()))
            .collect(),
    )
}

fn example(name: &str) -> Policy {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    Policy::parse(&text, &format!("examples/{name}")).unwrap()
}

#[test]
fn conditions_on_inputs_streams_and_processors() {
    let p = policy(
        r#"
inputs:
  - id: a
    type: t
    condition: ${kubernetes_leaderelection.leader} == true
  - id: b
    type: t
    streams:
      - name: s1
        condition: ${kubernetes_leaderelection.leader}
      - name: s2
        processors:
          - add_fields: {x: 1}
            condition: "false"
          - add_fields: {y: 2}
            condition: true
          - keep: me
  - id: c
    type: t
    streams:
      - name: only
        condition: not ${kubernetes_leaderelection.leader}
"#,
    );
    let (ids_leader, dropped_leader) = ids(&p, &vars(true));
    assert_eq!(ids_leader, vec!["a", "b"]);
    assert_eq!(dropped_leader.len(), 1);
    assert_eq!(dropped_leader[0].0, "c");
    assert!(
        dropped_leader[0].1.contains("streams"),
        "{dropped_leader:?}"
    );

    let (ids_follower, dropped_follower) = ids(&p, &vars(false));
    assert_eq!(ids_follower, vec!["b", "c"]);
    assert_eq!(dropped_follower[0].0, "a");
    assert!(
        dropped_follower[0].1.contains("is false"),
        "{dropped_follower:?}"
    );

    let r = render(&p, &vars(true)).unwrap();
    let b = &r.inputs[1].config;
    // true removes only the key; false removes the element
    let streams = b.lookup_path("streams").unwrap();
    let Value::List(streams) = streams else {
        panic!()
    };
    assert_eq!(streams.len(), 2);
    assert!(streams[0].lookup_path("condition").is_none());
    let procs = streams[1].lookup_path("processors").unwrap();
    let Value::List(procs) = procs else { panic!() };
    assert_eq!(procs.len(), 2);
    assert_eq!(procs[0].lookup_path("add_fields.y"), Some(&Value::Int(2)));
    assert_eq!(procs[1].lookup_path("keep"), Some(&Value::Str("me".into())));
}

#[test]
fn unresolved_variables_drop_the_input_even_deep_inside_a_stream() {
    let p = policy(
        r#"
inputs:
  - id: deep
    type: t
    streams:
      - a:
          b:
            - c: "${env.NOT_SET}"
  - type: t
    x: ${env.NOT_SET_EITHER}
  - id: fine
    type: t
    host: ${NODE_NAME}
    optional: ${env.NOPE|?}
"#,
    );
    let r = render(&p, &vars(true)).unwrap();
    assert_eq!(r.inputs.len(), 1);
    assert_eq!(
        r.inputs[0].config.lookup_path("host"),
        Some(&Value::Str("node-1".into()))
    );
    assert!(r.inputs[0].config.lookup_path("optional").is_none());
    assert_eq!(r.dropped[0].id, "deep");
    assert!(
        r.dropped[0].reason.contains("${env.NOT_SET}"),
        "{:?}",
        r.dropped
    );
    assert!(r.dropped[0].reason.contains("line 8"), "{:?}", r.dropped);
    assert_eq!(r.dropped[1].id, "inputs.1");
}

#[test]
fn ids_are_stable_and_hash_the_rendered_config() {
    let p = policy(
        "inputs:\n  - type: t\n    host: ${host.name}\n  - type: t\n    host: other\n  - id: 42\n    type: t\n",
    );
    let r1 = render(&p, &vars(true)).unwrap();
    let r2 = render(&p, &vars(false)).unwrap();
    assert_eq!(r1.inputs[0].id, r2.inputs[0].id);
    assert!(r1.inputs[0].id.starts_with("t-"), "{}", r1.inputs[0].id);
    assert_ne!(r1.inputs[0].id, r1.inputs[1].id);
    assert_eq!(r1.inputs[2].id, "42");
    // the same config written in another key order gets the same id
    let q = policy("inputs:\n  - host: ${host.name}\n    type: t\n");
    assert_eq!(
        render(&q, &vars(true)).unwrap().inputs[0].id,
        r1.inputs[0].id
    );
    // a different value of a variable gives a different id
    let mut other = vars(true);
    other.set_provider(
        "host",
        Value::Map(
            [("name".to_string(), Value::Str("node-2".into()))]
                .into_iter()
                .collect(),
        ),
    );
    assert_ne!(render(&p, &other).unwrap().inputs[0].id, r1.inputs[0].id);
    // the id is the first key of the rendered config
    let Value::Map(m) = &r1.inputs[0].config else {
        panic!()
    };
    assert_eq!(m.iter().next().unwrap().0, "id");
}

#[test]
fn duplicate_ids_are_reported() {
    let p = policy("inputs:\n  - {id: x, type: t}\n  - {id: x, type: u}\n");
    let r = render(&p, &vars(true)).unwrap();
    assert_eq!(r.inputs.len(), 1);
    assert!(r.dropped[0].reason.contains("duplicate"));
}

#[test]
fn render_errors_carry_positions() {
    let cases = [
        ("inputs:\n  - type: t\n    condition: 1 == 'a'\n", 3, 18),
        ("inputs:\n  - type: t\n    condition: \"1 ==\"\n", 3, 21),
        ("inputs:\n  - type: t\n    condition: [1]\n", 3, 16),
        ("inputs:\n  - type: t\n    x: 'a ${b'\n", 3, 11),
        ("inputs:\n  - type: t\n    id: [1]\n", 3, 9),
    ];
    for (src, line, col) in cases {
        let e = render(&policy(src), &vars(true)).unwrap_err();
        assert_eq!((e.pos.line, e.pos.column), (line, col), "{src}: {e}");
        assert!(e.to_string().starts_with("test.yaml:"), "{e}");
    }
}

#[test]
fn an_empty_variable_reference_is_an_error_not_a_drop() {
    for (src, line, col) in [
        ("inputs:\n  - type: t\n    x: 'a ${}'\n", 3, 11),
        (
            "inputs:\n  - type: t\n    streams:\n      - y: ${}\n",
            4,
            12,
        ),
        ("inputs:\n  - type: t\n    z: \"${ }\"\n", 3, 9),
    ] {
        let p = policy(src);
        let e = render(&p, &vars(true)).unwrap_err();
        assert_eq!((e.pos.line, e.pos.column), (line, col), "{src}: {e}");
        assert!(e.message.contains("empty variable reference"), "{e}");
        let d = check(&p, None);
        assert!(
            d.iter().any(|d| d.severity == Severity::Error
                && (d.pos.line, d.pos.column) == (line, col)
                && d.message.contains("empty variable reference")),
            "{src}: {d:?}"
        );
    }
}

#[test]
fn json_output_shape() {
    let p = policy("inputs:\n  - {id: a, type: t}\n  - {id: b, type: t, condition: 'false'}\n");
    let j = render(&p, &vars(true)).unwrap().to_json();
    assert_eq!(j["inputs"][0]["id"], "a");
    assert_eq!(j["dropped"][0]["id"], "b");
    assert!(j["dropped"][0]["reason"].is_string());
    assert_eq!(j.as_object().unwrap().len(), 2);
}

#[test]
fn example_leader_election_renders_by_leadership() {
    let p = example("leader-election.yaml");
    let (leader, dropped) = ids(&p, &vars(true));
    assert_eq!(leader, vec!["node-metrics", "cluster-state", "events"]);
    assert!(dropped.is_empty());
    let r = render(&p, &vars(true)).unwrap();
    assert_eq!(
        r.inputs[1]
            .config
            .lookup_path("streams.0.processors.0.add_fields.fields.holder"),
        Some(&Value::Str("pod-a".into()))
    );
    assert_eq!(
        r.inputs[0].config.lookup_path("streams.0.hosts.0"),
        Some(&Value::Str("https://node-1:10250".into()))
    );
    assert_eq!(
        r.inputs[0].config.lookup_path("streams.0.period"),
        Some(&Value::Str("10s".into()))
    );
    assert_eq!(
        r.inputs[2].config.lookup_path("streams.1").map(|_| ()),
        Some(())
    );

    let (follower, dropped) = ids(&p, &vars(false));
    assert_eq!(follower, vec!["node-metrics", "events"]);
    assert_eq!(
        dropped,
        vec![("cluster-state".to_string(), dropped[0].1.clone())]
    );
    let r = render(&p, &vars(false)).unwrap();
    let Some(Value::List(streams)) = r.inputs[1].config.lookup_path("streams") else {
        panic!()
    };
    assert_eq!(streams.len(), 1, "only the node-local stream remains");

    let diags = check(&p, None);
    assert!(diags.is_empty(), "{diags:?}");
}

#[test]
fn example_original_proposal_loads_warns_and_never_runs() {
    let p = example("leader-election-proposal.yaml");
    for leader in [true, false] {
        let (inputs, dropped) = ids(&p, &vars(leader));
        assert!(inputs.is_empty(), "leader={leader}");
        assert_eq!(dropped[0].0, "kubernetes-cluster-metrics");
    }
    let diags = check(&p, None);
    assert!(
        diags.iter().all(|d| d.severity == Severity::Warning),
        "{diags:?}"
    );
    let w = diags
        .iter()
        .find(|d| d.message.contains("boolean") && d.message.contains("string"))
        .expect("a bool-vs-string warning");
    assert!(w.message.contains("always false"), "{w}");
    assert!(w.hint.as_deref().unwrap().contains("== true"), "{w}");
    assert_eq!(w.pos.line, 29);
}

#[test]
fn example_substitution() {
    let p = example("substitution.yaml");
    let mut v = vars(true);
    v.set_provider("local", p.local_vars().unwrap());
    let r = render(&p, &v).unwrap();
    assert_eq!(r.inputs.len(), 1);
    let c = &r.inputs[0].config;
    assert_eq!(r.inputs[0].id, "exporter-node-1");
    assert_eq!(
        c.lookup_path("streams.0.hosts"),
        Some(&Value::List(vec![Value::Int(9100), Value::Int(9101)]))
    );
    assert_eq!(
        c.lookup_path("streams.0.labels.zone"),
        Some(&Value::Str(String::new()))
    );
    assert!(c.lookup_path("streams.0.labels.owner").is_none());
    assert_eq!(
        c.lookup_path("streams.0.query"),
        Some(&Value::Str("up{job=\"${job}\"}".into()))
    );
    assert_eq!(
        c.lookup_path("streams.0.processors")
            .map(|p| matches!(p, Value::List(l) if l.is_empty())),
        Some(true)
    );
    assert_eq!(r.dropped[0].id, "needs-token");
    assert!(
        check(&p, None)
            .iter()
            .all(|d| d.severity != Severity::Error)
    );
}

#[test]
fn enabled_false_turns_an_input_or_a_stream_off() {
    let p = policy(
        r#"
inputs:
  - {id: disabled, type: t, enabled: false}
  - {id: active, type: t, enabled: true}
  - id: some
    type: t
    streams:
      - {name: s1, enabled: false}
      - {name: s2}
  - id: none
    type: t
    streams:
      - {name: s1, enabled: false}
"#,
    );
    let r = render(&p, &vars(true)).unwrap();
    let kept: Vec<&str> = r.inputs.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(kept, ["active", "some"]);
    let Value::Map(m) = &r.inputs[1].config else {
        panic!()
    };
    let Some(Value::List(streams)) = m.get("streams") else {
        panic!()
    };
    assert_eq!(streams.len(), 1, "the disabled stream is gone");
    let (_, dropped) = ids(&p, &vars(true));
    assert_eq!(
        dropped[0],
        ("disabled".into(), "disabled (`enabled: false`)".into())
    );
    assert_eq!(dropped[1].0, "none");
}

#[test]
fn an_input_of_a_sharded_election_renders_once_per_shard_this_agent_leads() {
    use leasehold_policy::{ShardedElection, render_sharded};
    let p = policy(
        r#"
inputs:
  - id: ksm
    type: kubernetes/metrics
    condition: ${kubernetes_leaderelection.ksm.leader} == true
    hosts: ["ksm-${kubernetes_leaderelection.ksm.shard}:8080"]
    shards: ${kubernetes_leaderelection.ksm.shards}
  - id: node
    type: exec
"#,
    );
    let shard = |i: i64, leader: bool| {
        Value::from_json(&serde_json::json!({
            "leader": leader, "term": if leader { serde_json::json!(i + 1) } else { serde_json::Value::Null },
            "holder": "pod-a", "shard": i, "shards": 3
        }))
    };
    let group = |leading: [bool; 3]| ShardedElection {
        name: "ksm".into(),
        shards: (0..3).map(|i| shard(i, leading[i as usize])).collect(),
    };
    let r = render_sharded(&p, &Vars::new(), None, &[group([true, false, true])]).unwrap();
    let got: Vec<(&str, Option<u32>)> = r.inputs.iter().map(|i| (i.id.as_str(), i.shard)).collect();
    assert_eq!(
        got,
        [
            ("ksm-shard-0", Some(0)),
            ("ksm-shard-2", Some(2)),
            ("node", None)
        ]
    );
    let Value::Map(c) = &r.inputs[1].config else {
        panic!()
    };
    assert_eq!(
        c.get("hosts"),
        Some(&Value::List(vec![Value::Str("ksm-2:8080".into())]))
    );
    assert_eq!(
        c.get("shards"),
        Some(&Value::Int(3)),
        "a lone variable keeps its type"
    );
    assert!(r.dropped.is_empty(), "{:?}", r.dropped);
    // Leading no shard: one dropped entry, not one per shard.
    let r = render_sharded(&p, &Vars::new(), None, &[group([false; 3])]).unwrap();
    assert_eq!(r.inputs.len(), 1);
    assert_eq!(r.dropped.len(), 1, "{:?}", r.dropped);
    assert_eq!(r.dropped[0].id, "ksm");
    assert!(
        r.dropped[0].reason.contains("no shard of election `ksm`"),
        "{}",
        r.dropped[0].reason
    );
}
