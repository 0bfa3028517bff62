//! Memory of the `kubernetes` provider under hostile annotations, in a
//! process of its own (one test, so nothing else allocates beside it).
//!
//! A Pod author chooses the size of their annotations. Six Pods of 40
//! containers, each Pod annotated with 200 KB, are published as the
//! provider publishes them (a mapping per Pod and per container, with
//! `${kubernetes.annotations.*}` readable from each) and rendered through
//! a policy the way the runtime renders it, several times over as Pod
//! events arrive. What that holds must stay a small multiple of the
//! annotations themselves (6 × 200 KB), far inside the DaemonSet's memory
//! limit (deploy/kubernetes/base: 512 MiB), not a copy per container and per render.

use leasehold::runtime::kubernetes::kept::PodFields;
use leasehold::runtime::kubernetes::mapping::{Related, pod_mappings};
use leasehold::runtime::kubernetes::settings::ProviderSettings;
use leasehold_policy::dynamic::{self, Dynamic, Mapping};
use leasehold_policy::{Policy, Vars};

const PODS: usize = 6;
const CONTAINERS: usize = 40;
const ANNOTATION_BYTES: usize = 200 * 1024;

fn vm_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn hostile_pod(i: usize) -> PodFields {
    let containers: Vec<serde_json::Value> = (0..CONTAINERS)
        .map(|c| serde_json::json!({"name": format!("c{c}"), "image": "busybox:1"}))
        .collect();
    let statuses: Vec<serde_json::Value> = (0..CONTAINERS)
        .map(|c| {
            serde_json::json!({"name": format!("c{c}"), "containerID": format!("containerd://{i:02}{c:062}"),
                               "image": "busybox:1", "imageID": "", "ready": true, "restartCount": 0})
        })
        .collect();
    // Many dotted keys (nested into maps by the variables) and one large
    // value: 200 KB in all.
    let mut annotations = serde_json::Map::new();
    for k in 0..400 {
        annotations.insert(format!("team.example.com/key-{k}"), "v".repeat(256).into());
    }
    let used: usize = annotations
        .iter()
        .map(|(k, v)| k.len() + v.as_str().unwrap().len())
        .sum();
    annotations.insert("note".into(), "x".repeat(ANNOTATION_BYTES - used).into());
    let pod: leasehold::kubeobj::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("hostile-{i}"), "namespace": "tenant", "uid": format!("uid-{i}"),
                     "annotations": annotations},
        "spec": {"nodeName": "node-1", "containers": containers},
        "status": {"podIP": "10.0.0.9", "containerStatuses": statuses}
    }))
    .unwrap();
    PodFields::from(pod)
}

#[test]
fn hostile_annotations_are_held_once_per_pod_not_per_container_and_render() {
    let policy = Policy::parse(
        "inputs:\n  - id: logs-${kubernetes.container.id}\n    type: filestream\n    streams:\n      - paths: ['/var/log/containers/*${kubernetes.container.id}.log']\n        team: '${kubernetes.annotations.team.example.com/key-1|\"none\"}'\n",
        "policy.yml",
    )
    .unwrap();
    let settings = ProviderSettings::default();
    let pods: Vec<PodFields> = (0..PODS).map(hostile_pod).collect();
    let before = vm_kib("VmHWM:");
    let mut kept: Vec<(Vec<Mapping>, usize)> = Vec::new();
    // Several publications, as Pod events arrive: each keeps its mappings
    // and its rendering alive while the next one is built.
    for round in 0..4 {
        let mut mappings: Vec<Mapping> = pods
            .iter()
            .flat_map(|p| pod_mappings(p, &settings, Related::default()))
            .collect();
        dynamic::sort(&mut mappings);
        assert_eq!(mappings.len(), PODS * (CONTAINERS + 1), "round {round}");
        let rendered = leasehold_policy::render::render_with(
            &policy,
            &Vars::new(),
            Some(&Dynamic {
                provider: "kubernetes",
                mappings: &mappings,
            }),
        )
        .unwrap();
        assert_eq!(rendered.inputs.len(), PODS * CONTAINERS);
        kept.push((mappings, rendered.inputs.len()));
    }
    let grown_kib = vm_kib("VmHWM:").saturating_sub(before);
    let annotations_kib = (PODS * ANNOTATION_BYTES / 1024) as u64;
    eprintln!(
        "peak grew {grown_kib} KiB for {annotations_kib} KiB of annotations ({} mappings, 4 publications)",
        kept[0].0.len()
    );
    // One copy of every annotation per Pod (plus the variables' nesting and
    // each mapping's own small maps): a few times the annotations, where
    // a copy per container and per render is more than a hundred.
    assert!(
        grown_kib < 12 * annotations_kib,
        "the provider's mappings grew the peak by {grown_kib} KiB for {annotations_kib} KiB of annotations"
    );
}
