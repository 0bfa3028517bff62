//! The kubelet metricsets of `kubernetes/metrics` (`node`, `pod`,
//! `container`, `volume`, `system`): the kubelet's `/stats/summary` (one
//! fetch per period for all of a stream's metricsets) as Elastic's
//! Kubernetes integration writes it, one document per node, pod, container,
//! volume and system container.
//!
//! | metricset | one document per | fields |
//! |---|---|---|
//! | `node` | node | `kubernetes.node.{name,start_time}`, `.cpu.usage.{nanocores,core.ns}`, `.memory.{available,usage,workingset,rss}.bytes`, `.memory.{pagefaults,majorpagefaults}`, `.network.{rx,tx}.{bytes,errors}`, `.fs.{available,capacity,used}.bytes`, `.fs.inodes.{used,free,count}`, `.runtime.imagefs.{available,capacity,used}.bytes` |
//! | `pod` | `pods[]` | `kubernetes.namespace`, `kubernetes.node.name`, `kubernetes.pod.{name,uid,start_time}`, `.cpu.usage.nanocores`, `.memory.{usage,available,working_set,rss}.bytes`, `.memory.{page_faults,major_page_faults}` (sums over its containers), `.network.{rx,tx}.{bytes,errors}` |
//! | `container` | `pods[].containers[]` | `kubernetes.{namespace,node.name,pod.name}`, `kubernetes.container.{name,start_time}`, `.cpu.usage.{nanocores,core.ns}`, `.memory.*` as `node`, `.rootfs.{available,capacity,used}.bytes`, `.rootfs.inodes.used`, `.logs.{available,capacity,used}.bytes`, `.logs.inodes.{used,free,count}` |
//! | `volume` | `pods[].volume[]` | `kubernetes.{namespace,node.name,pod.name}`, `kubernetes.volume.name`, `.fs.{available,capacity,used}.bytes`, `.fs.inodes.{used,free,count}`, `.fs.used.pct`, `.fs.inodes.pct`, `kubernetes.persistentvolumeclaim.name` |
//! | `system` | `node.systemContainers[]` | `kubernetes.node.name`, `kubernetes.system.{container,start_time}`, `.cpu.usage.{nanocores,core.ns}`, `.memory.{usage,workingset,rss}.bytes`, `.memory.{pagefaults,majorpagefaults}` |
//!
//! Values the kubelet does not report are left out (not written as 0).
//! The percentages of node capacity and container limits need the
//! cluster's metadata and are not written.

use leasehold_prometheus_text::Family;
use serde_json::{Map, Value as Json, json};

use super::doc::set_path;
use crate::inputs::scrape::{Body, Doc, Metricset};

/// The kubelet metricsets, by name.
pub const KUBELET_METRICSETS: [&str; 5] = ["node", "pod", "container", "volume", "system"];

/// One kubelet metricset.
pub struct Kubelet {
    name: &'static str,
}

impl Kubelet {
    /// The metricset called `name`, if it is one.
    pub fn named(name: &str) -> Option<Kubelet> {
        KUBELET_METRICSETS
            .into_iter()
            .find(|n| *n == name)
            .map(|name| Kubelet { name })
    }
}

impl Metricset for Kubelet {
    fn name(&self) -> &str {
        self.name
    }

    fn module(&self) -> &str {
        "kubernetes"
    }

    fn documents(&self, _families: &[Family], _host: &str) -> Vec<Doc> {
        Vec::new()
    }

    fn body(&self) -> Body {
        Body::Json
    }

    fn documents_json(&self, summary: &Json, _host: &str) -> Vec<Doc> {
        match self.name {
            "node" => node(summary),
            "pod" => pods(summary),
            "container" => containers(summary),
            "volume" => volumes(summary),
            _ => system(summary),
        }
    }
}

/// The value at `a.b.c` of `v`.
fn at<'a>(v: &'a Json, path: &str) -> Option<&'a Json> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// Copies each (field, source path) present in `from`.
fn copy<F: AsRef<str>, P: AsRef<str>>(
    doc: &mut Map<String, Json>,
    prefix: &str,
    from: &Json,
    fields: &[(F, P)],
) {
    for (field, path) in fields {
        if let Some(v) = at(from, path.as_ref()).filter(|v| !v.is_null()) {
            set_path(doc, &format!("{prefix}.{}", field.as_ref()), v.clone());
        }
    }
}

const CPU: [(&str, &str); 2] = [
    ("cpu.usage.nanocores", "cpu.usageNanoCores"),
    ("cpu.usage.core.ns", "cpu.usageCoreNanoSeconds"),
];

const MEMORY: [(&str, &str); 6] = [
    ("memory.available.bytes", "memory.availableBytes"),
    ("memory.usage.bytes", "memory.usageBytes"),
    ("memory.workingset.bytes", "memory.workingSetBytes"),
    ("memory.rss.bytes", "memory.rssBytes"),
    ("memory.pagefaults", "memory.pageFaults"),
    ("memory.majorpagefaults", "memory.majorPageFaults"),
];

const NETWORK: [(&str, &str); 4] = [
    ("network.rx.bytes", "network.rxBytes"),
    ("network.rx.errors", "network.rxErrors"),
    ("network.tx.bytes", "network.txBytes"),
    ("network.tx.errors", "network.txErrors"),
];

/// A file system's numbers under `fs` (or another name).
fn fs_fields(name: &str, from: &str) -> [(String, String); 6] {
    let f = |field: &str, src: &str| (format!("{name}.{field}"), format!("{from}{src}"));
    [
        f("available.bytes", "availableBytes"),
        f("capacity.bytes", "capacityBytes"),
        f("used.bytes", "usedBytes"),
        f("inodes.used", "inodesUsed"),
        f("inodes.free", "inodesFree"),
        f("inodes.count", "inodes"),
    ]
}

fn node_name(summary: &Json) -> Option<&str> {
    at(summary, "node.nodeName").and_then(Json::as_str)
}

fn node(summary: &Json) -> Vec<Doc> {
    let Some(n) = summary.get("node") else {
        return Vec::new();
    };
    let mut doc = Map::new();
    let p = "kubernetes.node";
    copy(
        &mut doc,
        p,
        n,
        &[("name", "nodeName"), ("start_time", "startTime")],
    );
    copy(&mut doc, p, n, &CPU);
    copy(&mut doc, p, n, &MEMORY);
    copy(&mut doc, p, n, &NETWORK);
    copy(&mut doc, p, n, &fs_fields("fs", "fs."));
    copy(
        &mut doc,
        p,
        n,
        &[
            (
                "runtime.imagefs.available.bytes",
                "runtime.imageFs.availableBytes",
            ),
            (
                "runtime.imagefs.capacity.bytes",
                "runtime.imageFs.capacityBytes",
            ),
            ("runtime.imagefs.used.bytes", "runtime.imageFs.usedBytes"),
        ],
    );
    vec![Doc {
        object: node_name(summary).unwrap_or("node").to_string(),
        fields: doc,
    }]
}

/// Each pod with its namespace, name and the fields every document of it
/// shares (`kubernetes.namespace`, `kubernetes.node.name`).
fn each_pod(summary: &Json) -> impl Iterator<Item = (&Json, String, Map<String, Json>)> {
    let node = node_name(summary).map(str::to_string);
    summary
        .get("pods")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .filter_map(move |pod| {
            let ns = at(pod, "podRef.namespace")?.as_str()?;
            let name = at(pod, "podRef.name")?.as_str()?;
            let mut base = Map::new();
            set_path(&mut base, "kubernetes.namespace", json!(ns));
            if let Some(n) = &node {
                set_path(&mut base, "kubernetes.node.name", json!(n));
            }
            Some((pod, format!("{ns}/{name}"), base))
        })
}

fn pods(summary: &Json) -> Vec<Doc> {
    let mut docs = Vec::new();
    for (pod, key, mut doc) in each_pod(summary) {
        let p = "kubernetes.pod";
        copy(
            &mut doc,
            p,
            pod,
            &[
                ("name", "podRef.name"),
                ("uid", "podRef.uid"),
                ("start_time", "startTime"),
            ],
        );
        copy(&mut doc, p, pod, &NETWORK);
        // The pod's usage is its containers' (as Elastic's integration
        // adds them up).
        let containers = pod.get("containers").and_then(Json::as_array);
        for (field, path) in [
            ("cpu.usage.nanocores", "cpu.usageNanoCores"),
            ("memory.usage.bytes", "memory.usageBytes"),
            ("memory.available.bytes", "memory.availableBytes"),
            ("memory.working_set.bytes", "memory.workingSetBytes"),
            ("memory.rss.bytes", "memory.rssBytes"),
            ("memory.page_faults", "memory.pageFaults"),
            ("memory.major_page_faults", "memory.majorPageFaults"),
        ] {
            let values: Vec<u64> = containers
                .into_iter()
                .flatten()
                .filter_map(|c| at(c, path).and_then(Json::as_u64))
                .collect();
            if !values.is_empty() {
                set_path(
                    &mut doc,
                    &format!("{p}.{field}"),
                    json!(values.iter().sum::<u64>()),
                );
            }
        }
        docs.push(Doc {
            object: key,
            fields: doc,
        });
    }
    docs
}

/// Each named entry of a pod's `list` (`containers`, `volume`): its object
/// key (`namespace/pod/name`), the entry, and a document holding the pod's
/// shared fields and `kubernetes.pod.name`.
fn each_pod_entry<'a>(
    summary: &'a Json,
    list: &'a str,
) -> impl Iterator<Item = (String, &'a Json, Map<String, Json>)> + 'a {
    each_pod(summary).flat_map(move |(pod, key, base)| {
        pod.get(list)
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter_map(move |entry| {
                let name = entry.get("name")?.as_str()?;
                let mut doc = base.clone();
                if let Some(pod_name) = at(pod, "podRef.name") {
                    set_path(&mut doc, "kubernetes.pod.name", pod_name.clone());
                }
                Some((format!("{key}/{name}"), entry, doc))
            })
    })
}

fn containers(summary: &Json) -> Vec<Doc> {
    each_pod_entry(summary, "containers")
        .map(|(object, c, mut doc)| {
            let p = "kubernetes.container";
            copy(
                &mut doc,
                p,
                c,
                &[("name", "name"), ("start_time", "startTime")],
            );
            copy(&mut doc, p, c, &CPU);
            copy(&mut doc, p, c, &MEMORY);
            let rootfs = fs_fields("rootfs", "rootfs.");
            copy(&mut doc, p, c, &rootfs[..4]);
            copy(&mut doc, p, c, &fs_fields("logs", "logs."));
            Doc {
                object,
                fields: doc,
            }
        })
        .collect()
}

fn volumes(summary: &Json) -> Vec<Doc> {
    each_pod_entry(summary, "volume")
        .map(|(object, v, mut doc)| {
            let p = "kubernetes.volume";
            copy(&mut doc, p, v, &[("name", "name")]);
            copy(&mut doc, p, v, &fs_fields("fs", ""));
            let ratio = |num: &str, den: &str| {
                let (n, d) = (v.get(num)?.as_f64()?, v.get(den)?.as_f64()?);
                (d > 0.0).then(|| n / d)
            };
            if let Some(r) = ratio("usedBytes", "capacityBytes") {
                set_path(&mut doc, &format!("{p}.fs.used.pct"), json!(r));
            }
            if let Some(r) = ratio("inodesUsed", "inodes") {
                set_path(&mut doc, &format!("{p}.fs.inodes.pct"), json!(r));
            }
            if let Some(claim) = at(v, "pvcRef.name")
                .and_then(Json::as_str)
                .filter(|c| !c.is_empty())
            {
                set_path(
                    &mut doc,
                    "kubernetes.persistentvolumeclaim.name",
                    json!(claim),
                );
            }
            Doc {
                object,
                fields: doc,
            }
        })
        .collect()
}

fn system(summary: &Json) -> Vec<Doc> {
    let node = node_name(summary);
    let mut docs = Vec::new();
    for c in at(summary, "node.systemContainers")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = c.get("name").and_then(Json::as_str) else {
            continue;
        };
        let mut doc = Map::new();
        if let Some(n) = node {
            set_path(&mut doc, "kubernetes.node.name", json!(n));
        }
        let p = "kubernetes.system";
        copy(
            &mut doc,
            p,
            c,
            &[("container", "name"), ("start_time", "startTime")],
        );
        copy(&mut doc, p, c, &CPU);
        copy(&mut doc, p, c, &MEMORY[1..]);
        docs.push(Doc {
            object: name.to_string(),
            fields: doc,
        });
    }
    docs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A summary in the kubelet's shape (fields abridged).
    fn summary() -> Json {
        json!({
            "node": {
                "nodeName": "n1", "startTime": "2026-12-01T00:00:00Z",
                "systemContainers": [{"name": "kubelet", "startTime": "2026-12-01T00:00:01Z",
                    "cpu": {"usageNanoCores": 5, "usageCoreNanoSeconds": 50},
                    "memory": {"usageBytes": 10, "workingSetBytes": 9, "rssBytes": 8, "pageFaults": 1, "majorPageFaults": 0}}],
                "cpu": {"usageNanoCores": 100, "usageCoreNanoSeconds": 1000},
                "memory": {"availableBytes": 1, "usageBytes": 2, "workingSetBytes": 3, "rssBytes": 4, "pageFaults": 5, "majorPageFaults": 6},
                "network": {"rxBytes": 7, "rxErrors": 0, "txBytes": 8, "txErrors": 0},
                "fs": {"availableBytes": 90, "capacityBytes": 100, "usedBytes": 10, "inodesFree": 9, "inodes": 10, "inodesUsed": 1},
                "runtime": {"imageFs": {"availableBytes": 50, "capacityBytes": 100, "usedBytes": 50}}
            },
            "pods": [{
                "podRef": {"name": "web", "namespace": "ns", "uid": "u1"},
                "startTime": "2026-12-02T00:00:00Z",
                "containers": [
                    {"name": "a", "cpu": {"usageNanoCores": 3}, "memory": {"usageBytes": 30, "workingSetBytes": 20},
                     "rootfs": {"availableBytes": 1, "capacityBytes": 2, "usedBytes": 1, "inodesUsed": 4},
                     "logs": {"availableBytes": 1, "capacityBytes": 2, "usedBytes": 1, "inodesUsed": 1, "inodesFree": 1, "inodes": 2}},
                    {"name": "b", "cpu": {"usageNanoCores": 4}, "memory": {"usageBytes": 40}}
                ],
                "network": {"rxBytes": 11, "txBytes": 12},
                "volume": [{"name": "data", "usedBytes": 25, "capacityBytes": 100, "availableBytes": 75,
                            "inodesUsed": 1, "inodes": 4, "inodesFree": 3, "pvcRef": {"name": "claim", "namespace": "ns"}}]
            }]
        })
    }

    fn docs(name: &str) -> Vec<Doc> {
        Kubelet::named(name)
            .unwrap()
            .documents_json(&summary(), "h")
    }

    #[test]
    fn a_summary_becomes_elastics_documents() {
        let node = &docs("node")[0];
        assert_eq!(node.object, "n1");
        let n = &node.fields["kubernetes"]["node"];
        assert_eq!(n["name"], "n1");
        assert_eq!(n["cpu"]["usage"]["nanocores"], 100);
        assert_eq!(n["memory"]["workingset"]["bytes"], 3);
        assert_eq!(n["fs"]["inodes"]["count"], 10);
        assert_eq!(n["runtime"]["imagefs"]["used"]["bytes"], 50);
        assert_eq!(n["network"]["tx"]["bytes"], 8);

        let pod = &docs("pod")[0];
        assert_eq!(pod.object, "ns/web");
        let k = &pod.fields["kubernetes"];
        assert_eq!(k["namespace"], "ns");
        assert_eq!(k["node"]["name"], "n1");
        assert_eq!(k["pod"]["uid"], "u1");
        assert_eq!(
            k["pod"]["cpu"]["usage"]["nanocores"], 7,
            "the containers' sum"
        );
        assert_eq!(k["pod"]["memory"]["usage"]["bytes"], 70);
        assert_eq!(k["pod"]["memory"]["working_set"]["bytes"], 20);
        assert!(
            k["pod"]["memory"].get("rss").is_none(),
            "not reported: left out"
        );

        let containers = docs("container");
        assert_eq!(containers.len(), 2);
        assert_eq!(containers[0].object, "ns/web/a");
        let c = &containers[0].fields["kubernetes"];
        assert_eq!(c["pod"]["name"], "web");
        assert_eq!(c["container"]["rootfs"]["inodes"]["used"], 4);
        assert!(c["container"]["rootfs"]["inodes"].get("count").is_none());
        assert_eq!(c["container"]["logs"]["inodes"]["count"], 2);

        let volume = &docs("volume")[0];
        assert_eq!(volume.object, "ns/web/data");
        let v = &volume.fields["kubernetes"];
        assert_eq!(v["volume"]["fs"]["used"]["pct"], 0.25);
        assert_eq!(v["volume"]["fs"]["inodes"]["pct"], 0.25);
        assert_eq!(v["persistentvolumeclaim"]["name"], "claim");

        let system = &docs("system")[0];
        let s = &system.fields["kubernetes"];
        assert_eq!(s["system"]["container"], "kubelet");
        assert_eq!(s["system"]["memory"]["rss"]["bytes"], 8);
        assert!(s["system"]["memory"].get("available").is_none());
        assert_eq!(s["node"]["name"], "n1");
    }
}
