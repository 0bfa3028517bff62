//! The `kubernetes` provider and the reconciler under Pod churn, without
//! an API server: a simulated watch stream of `--pods` Pods on `--nodes`
//! nodes, then `--rate` Pod updates per second (a label change on a random
//! Pod of the watched ones), each taken the way the agent takes it, until
//! `--updates` updates or `--seconds` seconds.
//!
//! `--code by-change` is the agent's path: the provider rebuilds the
//! changed Pod's mappings, the rendering follows that object
//! ([`Incremental`]), and only its inputs are built and compared.
//! `--code full` is the path before it, stated with the same library
//! functions: every Pod event publishes every mapping (clones, sorts and
//! compares them), renders the policy against all of them, and builds and
//! compares every rendered input.
//!
//! Prints one JSON line: CPU per update (this thread's CPU clock around
//! each update), resident memory after the list and at the end, and what
//! the Pods' annotations take. Run by `bench/run-provider`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use leasehold::inputs;
use leasehold::kubeobj::Pod;
use leasehold::runtime::kubernetes::mapping::{Related, pod_mappings};
use leasehold::runtime::kubernetes::settings::{self, ProviderSettings};
use leasehold::runtime::kubernetes::{RelatedStores, Source};
use leasehold_policy::dynamic::{self, Dynamic, Mapping};
use leasehold_policy::incremental::Incremental;
use leasehold_policy::render::stable_hash;
use leasehold_policy::{Policy, RenderedInput, Value, Vars};

/// The provider's settings in `scope`, without the nodes' and namespaces'
/// labels (no API server here to read them from).
fn provider(scope: &str) -> String {
    format!(
        "providers:\n  kubernetes:\n    scope: {scope}\n    node: node-00000\n    add_resource_metadata: {{node: {{enabled: false}}, namespace: {{enabled: false}}}}\noutputs:\n  default: {{type: console}}\n"
    )
}

/// Elastic's container-log input: one per container.
const CONTAINER_LOGS: &str = r#"
  - id: container-log-${kubernetes.pod.name}-${kubernetes.container.id}
    type: filestream
    streams:
      - id: container-log-${kubernetes.pod.name}-${kubernetes.container.id}
        data_stream: {dataset: kubernetes.container_logs, type: logs}
        prospector.scanner.symlinks: true
        parsers: [{container: {stream: all, format: auto}}]
        paths: ['/var/log/containers/*${kubernetes.container.id}.log']
"#;

/// A scrape of every Pod labelled `app: redis`.
const REDIS_SCRAPE: &str = r#"
  - id: redis-${kubernetes.pod.name}
    type: prometheus/metrics
    condition: ${kubernetes.labels.app} == 'redis'
    streams:
      - metricsets: [collector]
        hosts: ['${kubernetes.pod.ip}:9121']
        period: 10s
"#;

/// Node scope: the container logs and the redis scrape of the node's Pods.
/// Cluster scope (a leader's view): the redis scrape of every Pod.
fn policy_text(scope: &str) -> String {
    let inputs = if scope == "node" {
        format!("{CONTAINER_LOGS}{REDIS_SCRAPE}")
    } else {
        REDIS_SCRAPE.to_string()
    };
    format!("{}inputs:{inputs}", provider(scope))
}

struct Args {
    scope: String,
    code: String,
    pods: usize,
    nodes: usize,
    rate: f64,
    updates: usize,
    seconds: f64,
}

fn args() -> Result<Args> {
    let mut a = Args {
        scope: "cluster".into(),
        code: "by-change".into(),
        pods: 100_000,
        nodes: 5_000,
        rate: 100.0,
        updates: 1_000,
        seconds: 30.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().with_context(|| format!("{k} needs a value"))?;
        match k.as_str() {
            "--scope" => a.scope = v,
            "--code" => a.code = v,
            "--pods" => a.pods = v.parse()?,
            "--nodes" => a.nodes = v.parse()?,
            "--rate" => a.rate = v.parse()?,
            "--updates" => a.updates = v.parse()?,
            "--seconds" => a.seconds = v.parse()?,
            _ => bail!("unknown option {k}"),
        }
    }
    if !["node", "cluster"].contains(&a.scope.as_str())
        || !["full", "by-change"].contains(&a.code.as_str())
    {
        bail!("--scope node|cluster, --code full|by-change");
    }
    Ok(a)
}

/// Pod `i` as the API server would send it, `version` being the label
/// the churn changes. Every 100th Pod is a redis Pod; every Pod has two
/// containers and the annotations a Deployment's Pods typically carry.
fn pod_json(i: usize, nodes: usize, version: u64) -> serde_json::Value {
    let node = format!("node-{:05}", i % nodes);
    let app = if i.is_multiple_of(100) {
        "redis".to_string()
    } else {
        format!("web-{}", i % 50)
    };
    let containers = ["app", "sidecar"];
    serde_json::json!({
        "metadata": {
            "name": format!("pod-{i:06}"), "namespace": format!("ns-{}", i % 20),
            "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "labels": {"app": app, "pod-template-hash": format!("{:010x}", i / 10), "version": version.to_string()},
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-12-01T10:00:00Z",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9121",
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-{:010x}", i / 10), "uid": "u", "controller": true}],
        },
        "spec": {
            "nodeName": node,
            "containers": containers.iter().map(|c| serde_json::json!({"name": c, "image": format!("registry.example.com/{c}:1.2.3")})).collect::<Vec<_>>(),
        },
        "status": {
            "phase": "Running", "podIP": format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255),
            "containerStatuses": containers.iter().enumerate().map(|(k, c)| serde_json::json!({
                "name": c, "containerID": format!("containerd://{i:032x}{k:032x}"),
                "image": format!("registry.example.com/{c}:1.2.3"), "imageID": "", "ready": true, "restartCount": 0,
            })).collect::<Vec<_>>(),
        }
    })
}

fn annotation_bytes(p: &serde_json::Value) -> usize {
    p["metadata"]["annotations"].as_object().map_or(0, |m| {
        m.iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum()
    })
}

fn pod(i: usize, nodes: usize, version: u64) -> Result<Pod> {
    Ok(serde_json::from_value(pod_json(i, nodes, version))?)
}

fn vm_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec it is given.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t);
    }
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// An input as the runtime holds it once built: its hash and settings.
type Running = HashMap<String, (u64, inputs::InputSpec)>;

fn built(ri: &RenderedInput) -> Result<(u64, inputs::InputSpec)> {
    let spec = inputs::build(&ri.config).map_err(|p| {
        anyhow::anyhow!(
            "{}: {}",
            ri.id,
            p.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )
    })?;
    let hash = stable_hash(&ri.config) ^ ri.fields.as_ref().map_or(0, stable_hash).rotate_left(1);
    Ok((hash, spec))
}

/// The path before rendering by change: every Pod's mappings (each Pod's
/// kept until it changes) published whole, rendered whole, built whole.
struct Full {
    pods: BTreeMap<String, leasehold::runtime::kubernetes::kept::PodFields>,
    mapped: HashMap<String, Vec<Mapping>>,
    published: Arc<Vec<Mapping>>,
    running: Running,
}

impl Full {
    fn upsert(&mut self, p: Pod) {
        let k = leasehold::runtime::kubernetes::kept::PodFields::from(p);
        self.mapped.remove(&k.uid);
        self.pods.insert(k.uid.clone(), k);
    }

    fn publish(&mut self, s: &ProviderSettings, policy: &Policy) -> Result<usize> {
        let mapped = &mut self.mapped;
        let mut all: Vec<Mapping> = self
            .pods
            .iter()
            .flat_map(|(uid, p)| {
                mapped
                    .entry(uid.clone())
                    .or_insert_with(|| pod_mappings(p, s, Related::default()))
                    .clone()
            })
            .collect();
        dynamic::sort(&mut all);
        if *self.published == all {
            return Ok(0);
        }
        self.published = Arc::new(all);
        let rendered = leasehold_policy::render_with(
            policy,
            &Vars::new(),
            Some(&Dynamic {
                provider: "kubernetes",
                mappings: &self.published,
            }),
        )?;
        let mut next = Running::new();
        let mut changed = 0;
        for ri in &rendered.inputs {
            let b = built(ri)?;
            if self.running.get(&ri.id).map(|r| r.0) != Some(b.0) {
                changed += 1;
            }
            next.insert(ri.id.clone(), b);
        }
        self.running = next;
        Ok(changed)
    }
}

/// The agent's path.
struct ByChange {
    pods: Source,
    renders: Incremental,
    running: Running,
}

impl ByChange {
    fn publish(&mut self, policy: &Policy) -> Result<usize> {
        for object in self.pods.take_changes() {
            self.renders.refresh(policy, &self.pods, &object)?;
        }
        let c = self.renders.take_changes();
        let mut changed = 0;
        for id in c.removed {
            self.running.remove(&id);
            changed += 1;
        }
        for ri in &c.upserted {
            let b = built(ri)?;
            if self.running.get(&ri.id).map(|r| r.0) != Some(b.0) {
                changed += 1;
            }
            self.running.insert(ri.id.clone(), b);
        }
        Ok(changed)
    }
}

fn main() -> Result<()> {
    leasehold::allocator::tune();
    let a = args()?;
    let text = policy_text(&a.scope);
    let policy = Policy::parse(&text, "bench.yml").map_err(|e| anyhow::anyhow!("{e}"))?;
    let provider = policy
        .section("providers")
        .and_then(|p| p.get("kubernetes"))
        .map(leasehold_policy::Node::to_value)
        .unwrap_or(Value::Null);
    let s = settings::parse(&provider)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?
        .settings
        .context("provider off")?;
    // The Pods the provider watches: its node's in node scope.
    let watched: Vec<usize> = (0..a.pods)
        .filter(|i| a.scope == "cluster" || i.is_multiple_of(a.nodes))
        .collect();
    let annotations: usize = watched
        .iter()
        .map(|&i| annotation_bytes(&pod_json(i, a.nodes, 0)))
        .sum();
    leasehold::allocator::release_free();
    let rss_before = vm_kib("VmRSS:");
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    // After the Pods are in, before anything is rendered (by change only).
    let mut rss_source = 0;
    enum Path {
        Full(Box<Full>),
        ByChange(Box<ByChange>),
    }
    let mut path = if a.code == "full" {
        let mut f = Full {
            pods: BTreeMap::new(),
            mapped: HashMap::new(),
            published: Arc::new(Vec::new()),
            running: Running::new(),
        };
        for &i in &watched {
            f.upsert(pod(i, a.nodes, 0)?);
        }
        f.publish(&s, &policy)?;
        Path::Full(Box::new(f))
    } else {
        let pods = Source::new(s.clone(), RelatedStores::none());
        for &i in &watched {
            pods.upsert(pod(i, a.nodes, 0)?);
        }
        pods.take_changes();
        leasehold::allocator::release_free();
        rss_source = vm_kib("VmRSS:");
        let mut renders = Incremental::new(&policy, &Vars::new(), "kubernetes", &[], &pods)?;
        let mut running = Running::new();
        for ri in renders.take_changes().upserted {
            let b = built(&ri)?;
            running.insert(ri.id.clone(), b);
        }
        Path::ByChange(Box::new(ByChange {
            pods,
            renders,
            running,
        }))
    };
    let list_cpu = thread_cpu() - cpu0;
    let list_wall = t0.elapsed();
    let inputs_running = match &path {
        Path::Full(f) => f.running.len(),
        Path::ByChange(b) => b.running.len(),
    };
    leasehold::allocator::release_free();
    let rss_listed = vm_kib("VmRSS:");
    // The churn: paced at `rate`, a label change each, bounded by count
    // and time.
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut per_update: Vec<Duration> = Vec::with_capacity(a.updates);
    let mut changed_inputs = 0usize;
    let start = Instant::now();
    let limit = Duration::from_secs_f64(a.seconds);
    let gap = Duration::from_secs_f64(1.0 / a.rate);
    for n in 0..a.updates {
        let due = start + gap * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if start.elapsed() >= limit {
            break;
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let i = watched[(rng % watched.len() as u64) as usize];
        let p = pod(i, a.nodes, n as u64 + 1)?;
        let c0 = thread_cpu();
        changed_inputs += match &mut path {
            Path::Full(f) => {
                f.upsert(p);
                f.publish(&s, &policy)?
            }
            Path::ByChange(b) => {
                b.pods.upsert(p);
                b.publish(&policy)?
            }
        };
        per_update.push(thread_cpu() - c0);
    }
    let wall = start.elapsed();
    let rss_end = vm_kib("VmRSS:");
    per_update.sort();
    let pct = |q: f64| {
        per_update
            .get(((per_update.len() as f64 - 1.0) * q).round() as usize)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    let total: Duration = per_update.iter().sum();
    let done = per_update.len();
    println!(
        "{}",
        serde_json::json!({
            "scope": a.scope, "code": a.code, "pods": watched.len(), "cluster_pods": a.pods, "nodes": a.nodes,
            "inputs_running": inputs_running,
            "list_cpu_s": list_cpu.as_secs_f64(), "list_wall_s": list_wall.as_secs_f64(),
            "updates": done, "offered_rate": a.rate,
            "achieved_rate": done as f64 / wall.as_secs_f64(),
            "cpu_ms_mean": if done > 0 { total.as_secs_f64() * 1e3 / done as f64 } else { 0.0 },
            "cpu_ms_p50": pct(0.5), "cpu_ms_p99": pct(0.99), "cpu_ms_max": pct(1.0),
            "inputs_changed": changed_inputs,
            "rss_before_kib": rss_before, "rss_pods_kib": rss_source, "rss_listed_kib": rss_listed, "rss_end_kib": rss_end,
            "annotation_bytes_per_pod": annotations as f64 / watched.len().max(1) as f64,
        })
    );
    Ok(())
}
