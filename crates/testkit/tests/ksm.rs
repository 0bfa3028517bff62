//! The real kube-state-metrics against the real control plane: objects made
//! through the API show up in its metrics, and its identity can list and
//! watch but do nothing else.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use leasehold_testkit::{ControlPlane, KubeStateMetrics, objects};

/// Bound for kube-state-metrics to see a new object (its watches deliver
/// within moments); generous so a loaded CI machine does not flake.
const SETTLE: Duration = Duration::from_secs(60);

/// One expected sample: metric name, labels it must have (it may have more)
/// and value.
struct Want {
    name: &'static str,
    labels: Vec<(&'static str, String)>,
    value: f64,
}

impl Want {
    fn new(name: &'static str, labels: &[(&'static str, &str)], value: f64) -> Want {
        Want {
            name,
            labels: labels.iter().map(|(k, v)| (*k, v.to_string())).collect(),
            value,
        }
    }

    fn found_in(&self, exposition: &str) -> bool {
        exposition.lines().filter_map(parse_sample).any(|s| {
            s.name == self.name
                && s.value == self.value
                && self
                    .labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
    }
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        write!(f, "{}{{{}}} {}", self.name, labels.join(","), self.value)
    }
}

struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// One line of the Prometheus text format, `name{k="v",...} value`; `None`
/// for comments, blank or malformed lines.
fn parse_sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices();
        let mut key = String::new();
        loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => {
                    rest = &inner[i + 1..];
                    break;
                }
                ',' | ' ' => {}
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '"' => break,
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                other => value.push(other),
                            },
                            other => value.push(other),
                        }
                    }
                    labels.push((std::mem::take(&mut key), value));
                }
                other => key.push(other),
            }
        }
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Scrapes until every wanted sample is there, at most for `SETTLE`.
async fn wait_for_samples(ksm: &'static KubeStateMetrics, wants: &[Want]) -> Duration {
    let started = Instant::now();
    let mut missing: Vec<String>;
    loop {
        let text = tokio::task::spawn_blocking(|| ksm.scrape())
            .await
            .unwrap()
            .expect("scraping kube-state-metrics");
        missing = wants
            .iter()
            .filter(|w| !w.found_in(&text))
            .map(|w| w.to_string())
            .collect();
        if missing.is_empty() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < SETTLE,
            "kube-state-metrics at {} still lacks, after {SETTLE:?}:\n  {}",
            ksm.url(),
            missing.join("\n  ")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn shared_ksm() -> &'static KubeStateMetrics {
    tokio::task::spawn_blocking(|| ControlPlane::shared().kube_state_metrics())
        .await
        .unwrap()
        .expect("starting kube-state-metrics")
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{:04x}", rand::random::<u16>())
}

#[tokio::test]
async fn objects_made_through_the_api_show_up_in_its_metrics() {
    let plane = ControlPlane::shared();
    let ksm = shared_ksm().await;
    let admin = plane.admin_client().await.unwrap();

    let ns = unique("ksm");
    let node = unique("node");
    objects::namespace(&admin, &ns).await.unwrap();
    objects::ready_node(&admin, &node).await.unwrap();
    let pod = objects::pending_pod(&admin, &ns, "idle").await.unwrap();
    objects::deployment(&admin, &ns, "web", 3).await.unwrap();
    objects::daemonset(&admin, &ns, "per-node").await.unwrap();
    Api::<Lease>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some("leader".into()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("agent-1".into()),
                    lease_duration_seconds: Some(15),
                    ..Default::default()
                }),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        pod.status.and_then(|s| s.phase).as_deref(),
        Some("Pending"),
        "a new Pod is Pending"
    );

    let ns = ns.as_str();
    let took = wait_for_samples(
        ksm,
        &[
            Want::new(
                "kube_namespace_status_phase",
                &[("namespace", ns), ("phase", "Active")],
                1.0,
            ),
            Want::new(
                "kube_node_status_condition",
                &[("node", &node), ("condition", "Ready"), ("status", "true")],
                1.0,
            ),
            Want::new(
                "kube_node_status_condition",
                &[("node", &node), ("condition", "Ready"), ("status", "false")],
                0.0,
            ),
            Want::new(
                "kube_pod_status_phase",
                &[("namespace", ns), ("pod", "idle"), ("phase", "Pending")],
                1.0,
            ),
            Want::new(
                "kube_pod_status_phase",
                &[("namespace", ns), ("pod", "idle"), ("phase", "Running")],
                0.0,
            ),
            Want::new(
                "kube_deployment_spec_replicas",
                &[("namespace", ns), ("deployment", "web")],
                3.0,
            ),
            // No controller-manager: nothing makes the Pods.
            Want::new(
                "kube_deployment_status_replicas_available",
                &[("namespace", ns), ("deployment", "web")],
                0.0,
            ),
            Want::new(
                "kube_daemonset_metadata_generation",
                &[("namespace", ns), ("daemonset", "per-node")],
                1.0,
            ),
            Want::new(
                "kube_daemonset_status_desired_number_scheduled",
                &[("namespace", ns), ("daemonset", "per-node")],
                0.0,
            ),
            Want::new(
                "kube_lease_owner",
                &[
                    ("namespace", ns),
                    ("lease", "leader"),
                    ("lease_holder", "agent-1"),
                ],
                1.0,
            ),
        ],
    )
    .await;
    eprintln!("kube-state-metrics showed every object {took:?} after they were made");
}

#[tokio::test]
async fn its_identity_can_only_list_and_watch() {
    let plane = ControlPlane::shared();
    let ksm = shared_ksm().await;
    let admin = plane.admin_client().await.unwrap();
    let ns = unique("ksm-rbac");
    objects::namespace(&admin, &ns).await.unwrap();
    objects::pending_pod(&admin, &ns, "idle").await.unwrap();
    Api::<Secret>::namespaced(admin.clone(), &ns)
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some("s".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();

    let client = Client::try_from(ksm.config().await.unwrap()).unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let listed = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1, "it may list pods");
    Api::<Namespace>::all(client.clone())
        .list(&ListParams::default().limit(1))
        .await
        .unwrap();

    let forbidden = |r: Result<_, kube::Error>, what: &str| match r {
        Err(kube::Error::Api(e)) if e.code == 403 => {}
        other => panic!("{what}: want 403 Forbidden, got {other:?}"),
    };
    forbidden(pods.get("idle").await.map(|_| ()), "get a pod");
    forbidden(
        Api::<Secret>::namespaced(client.clone(), &ns)
            .get("s")
            .await
            .map(|_| ()),
        "get a secret",
    );
    forbidden(
        Api::<Secret>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .map(|_| ()),
        "list secrets",
    );
    forbidden(
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .map(|_| ()),
        "list configmaps",
    );
    forbidden(
        pods.delete("idle", &Default::default()).await.map(|_| ()),
        "delete a pod",
    );
    forbidden(
        Api::<Namespace>::all(client)
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(unique("not-allowed")),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .map(|_| ()),
        "create a namespace",
    );
}

#[test]
fn stopping_the_plane_stops_it_and_start_refuses_a_second_one() {
    let plane = ControlPlane::dedicated().unwrap();
    let ksm = KubeStateMetrics::start(&plane).unwrap();
    let pid = ksm.pid();
    assert!(leasehold_testkit::process_running(pid));
    let again = KubeStateMetrics::start(&plane);
    assert!(
        again.is_err(),
        "a second kube-state-metrics for one plane must be refused"
    );
    let text = ksm.scrape().unwrap();
    assert!(
        text.lines()
            .filter_map(parse_sample)
            .any(|s| s.name == "kube_namespace_status_phase"
                && s.labels.contains(&("namespace".into(), "leasehold".into()))),
        "the `leasehold` namespace of `controlplane/up` is not in:\n{text}"
    );

    // What the watchdog does when a test binary exits: `controlplane/down`.
    plane.shutdown();
    let deadline = Instant::now() + Duration::from_secs(30);
    while leasehold_testkit::process_running(pid) {
        assert!(
            Instant::now() < deadline,
            "kube-state-metrics outlived its plane"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ksm.scrape().is_err());
}

#[test]
fn the_script_fails_clearly_without_a_plane_and_down_is_idempotent() {
    let ksm = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../controlplane/ksm");
    let dir = tempfile::tempdir().unwrap();
    let run = |verb: &str| {
        std::process::Command::new(&ksm)
            .args([verb, "--dir"])
            .arg(dir.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let up = run("up");
    let stderr = String::from_utf8_lossy(&up.stderr);
    assert_eq!(up.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("controlplane/up --dir"), "{stderr}");
    for _ in 0..2 {
        let down = run("down");
        assert!(
            down.status.success(),
            "{}",
            String::from_utf8_lossy(&down.stderr)
        );
    }
}
