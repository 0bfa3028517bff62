//! The control-plane component metricsets `controllermanager`, `scheduler`
//! and `proxy`: each component's own Prometheus `/metrics`, mapped to
//! Elastic's `kubernetes.<metricset>.*` fields as Metricbeat maps them.
//! Every mapped label groups documents (a document per tuple of their
//! values, the label written beside the values); other labels are dropped,
//! so series differing only in them fall into one document. Durations are
//! in microseconds (`.us`, histogram bounds and sums scaled).

use std::collections::BTreeMap;

use leasehold_prometheus_text::{Family, Text};
use serde_json::{Map, Value as Json, json};

use super::doc::set_path;
use crate::inputs::prometheus::number;
use crate::inputs::scrape::{Doc, Metricset};

/// How a metric's samples become fields.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// The value (gauges and counters).
    Value,
    /// `value == 1`.
    Flag,
    /// `{bucket.<le>, count, sum}`, bounds and sum multiplied.
    Histogram(f64),
}

use Kind::*;

/// Seconds to microseconds.
const US: Kind = Histogram(1e6);
/// A histogram kept in its unit.
const AS_IS: Kind = Histogram(1.0);

/// Metrics every component exports.
const PROCESS: [(&str, &str, Kind); 6] = [
    ("process_cpu_seconds", "process.cpu.sec", Value),
    (
        "process_resident_memory_bytes",
        "process.memory.resident.bytes",
        Value,
    ),
    (
        "process_virtual_memory_bytes",
        "process.memory.virtual.bytes",
        Value,
    ),
    ("process_open_fds", "process.fds.open.count", Value),
    ("process_max_fds", "process.fds.max.count", Value),
    ("process_start_time_seconds", "process.started.sec", Value),
];

const REST_CLIENT: [(&str, &str, Kind); 4] = [
    ("rest_client_requests", "client.request.count", Value),
    (
        "rest_client_request_duration_seconds",
        "client.request.duration.us",
        US,
    ),
    (
        "rest_client_request_size_bytes",
        "client.request.size.bytes",
        AS_IS,
    ),
    (
        "rest_client_response_size_bytes",
        "client.response.size.bytes",
        AS_IS,
    ),
];

const WORKQUEUE: [(&str, &str, Kind); 5] = [
    (
        "workqueue_longest_running_processor_seconds",
        "workqueue.longestrunning.sec",
        Value,
    ),
    (
        "workqueue_unfinished_work_seconds",
        "workqueue.unfinished.sec",
        Value,
    ),
    ("workqueue_adds", "workqueue.adds.count", Value),
    ("workqueue_depth", "workqueue.depth.count", Value),
    ("workqueue_retries", "workqueue.retries.count", Value),
];

const LEADER: [(&str, &str, Kind); 1] =
    [("leader_election_master_status", "leader.is_master", Flag)];

/// One component's mapping.
pub struct Component {
    name: &'static str,
    metrics: Vec<(&'static str, &'static str, Kind)>,
    labels: &'static [&'static str],
}

/// The metricset names this module maps.
pub const COMPONENTS: [&str; 3] = ["controllermanager", "scheduler", "proxy"];

impl Component {
    /// The metricset called `name`, if it is one of [`COMPONENTS`].
    pub fn named(name: &str) -> Option<Component> {
        let mut metrics: Vec<(&'static str, &'static str, Kind)> = PROCESS.to_vec();
        metrics.extend(REST_CLIENT);
        let (name, labels): (&'static str, &'static [&'static str]) = match name {
            "controllermanager" => {
                metrics.extend(WORKQUEUE);
                metrics.extend(LEADER);
                metrics.extend([
                    (
                        "node_collector_evictions",
                        "node.collector.eviction.count",
                        Value,
                    ),
                    (
                        "node_collector_unhealthy_nodes_in_zone",
                        "node.collector.unhealthy.count",
                        Value,
                    ),
                    (
                        "node_collector_zone_health",
                        "node.collector.health.pct",
                        Value,
                    ),
                    ("node_collector_zone_size", "node.collector.count", Value),
                ]);
                (
                    "controllermanager",
                    &["code", "method", "host", "name", "zone", "verb"],
                )
            }
            "scheduler" => {
                metrics.extend(WORKQUEUE);
                metrics.extend(LEADER);
                metrics.extend([
                    (
                        "scheduler_pending_pods",
                        "scheduling.pending.pods.count",
                        Value,
                    ),
                    (
                        "scheduler_preemption_victims",
                        "scheduling.preemption.victims",
                        AS_IS,
                    ),
                    (
                        "scheduler_preemption_attempts",
                        "scheduling.preemption.attempts.count",
                        Value,
                    ),
                    (
                        "scheduler_scheduling_attempt_duration_seconds",
                        "scheduling.attempts.duration.us",
                        US,
                    ),
                ]);
                (
                    "scheduler",
                    &[
                        "verb", "host", "code", "method", "queue", "event", "profile", "result",
                        "name",
                    ],
                )
            }
            "proxy" => {
                metrics.extend([
                    (
                        "kubeproxy_sync_proxy_rules_duration_seconds",
                        "sync.rules.duration.us",
                        US,
                    ),
                    (
                        "kubeproxy_network_programming_duration_seconds",
                        "sync.networkprogramming.duration.us",
                        US,
                    ),
                ]);
                ("proxy", &["code", "method", "verb", "host"])
            }
            _ => return None,
        };
        Some(Component {
            name,
            metrics,
            labels,
        })
    }

    fn mapping(&self, family: &str) -> Option<(&'static str, Kind)> {
        let base = family.strip_suffix("_total").unwrap_or(family);
        self.metrics
            .iter()
            .find(|(m, _, _)| *m == base)
            .map(|(_, f, k)| (*f, *k))
    }
}

/// A histogram bound as Metricbeat writes it: `+Inf`, else the shortest
/// decimal, scaled and rounded to a millionth (no float noise).
fn bound(le: &str, scale: f64) -> String {
    match le.parse::<f64>() {
        Ok(b) if b.is_infinite() => "+Inf".into(),
        Ok(b) => {
            let v = (b * scale * 1e6).round() / 1e6;
            format!("{v}")
        }
        Err(_) => le.to_string(),
    }
}

impl Metricset for Component {
    fn name(&self) -> &str {
        self.name
    }

    fn module(&self) -> &str {
        "kubernetes"
    }

    fn documents(&self, families: &[Family], _host: &str) -> Vec<Doc> {
        let root = format!("kubernetes.{}", self.name);
        let mut by: BTreeMap<String, Map<String, Json>> = BTreeMap::new();
        for f in families {
            let Some((field, kind)) = self.mapping(&f.name) else {
                continue;
            };
            for s in &f.samples {
                let kept: Vec<&(Text, Text)> = s
                    .labels
                    .iter()
                    .filter(|(k, _)| self.labels.contains(&&**k))
                    .collect();
                let key = kept
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",");
                let doc = by.entry(key).or_insert_with(|| {
                    let mut m = Map::new();
                    for (k, v) in &kept {
                        set_path(&mut m, &format!("{root}.{k}"), json!(&**v));
                    }
                    m
                });
                let path = format!("{root}.{field}");
                match kind {
                    Value => set_path(doc, &path, number(s.value)),
                    Flag => set_path(doc, &path, json!(s.value == 1.0)),
                    Histogram(scale) => {
                        if s.name.ends_with("_bucket") {
                            if let Some((_, le)) = s.labels.iter().find(|(k, _)| &**k == "le") {
                                set_path(
                                    doc,
                                    &format!("{path}.bucket.{}", bound(le, scale)),
                                    number(s.value),
                                );
                            }
                        } else if s.name.ends_with("_sum") {
                            set_path(doc, &format!("{path}.sum"), number(s.value * scale));
                        } else if s.name.ends_with("_count") {
                            set_path(doc, &format!("{path}.count"), number(s.value));
                        }
                    }
                }
            }
        }
        by.into_iter()
            .map(|(object, fields)| Doc {
                object: if object.is_empty() {
                    "process".into()
                } else {
                    object
                },
                fields,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kube-proxy's metrics, in the shape it exports them.
    const PROXY: &str = "# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 3.3554432e+07
# TYPE rest_client_requests_total counter
rest_client_requests_total{code=\"200\",host=\"10.0.0.1:443\",method=\"GET\"} 42
rest_client_requests_total{code=\"200\",host=\"10.0.0.1:443\",method=\"WATCH\"} 7
# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.001\"} 3
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.004\"} 9
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"+Inf\"} 10
kubeproxy_sync_proxy_rules_duration_seconds_sum 0.0125
kubeproxy_sync_proxy_rules_duration_seconds_count 10
# TYPE rest_client_request_duration_seconds histogram
rest_client_request_duration_seconds_bucket{host=\"10.0.0.1:443\",verb=\"GET\",le=\"0.005\"} 40
rest_client_request_duration_seconds_bucket{host=\"10.0.0.1:443\",verb=\"GET\",le=\"+Inf\"} 42
rest_client_request_duration_seconds_sum{host=\"10.0.0.1:443\",verb=\"GET\"} 0.084
rest_client_request_duration_seconds_count{host=\"10.0.0.1:443\",verb=\"GET\"} 42
# TYPE go_goroutines gauge
go_goroutines 80
";

    fn docs(ms: &str, text: &str) -> Vec<Json> {
        let families =
            leasehold_prometheus_text::parse(text, leasehold_prometheus_text::Format::Text)
                .unwrap();
        Component::named(ms)
            .unwrap()
            .documents(&families, "h")
            .into_iter()
            .map(|d| Json::Object(d.fields))
            .collect()
    }

    #[test]
    fn proxy_metrics_take_elastics_fields_grouped_by_their_labels() {
        let d = docs("proxy", PROXY);
        let p: Vec<&Json> = d.iter().map(|x| &x["kubernetes"]["proxy"]).collect();
        // No labels: process and sync together.
        let plain = p.iter().find(|x| x.get("process").is_some()).unwrap();
        assert_eq!(plain["process"]["cpu"]["sec"], 12.5);
        assert_eq!(plain["process"]["memory"]["resident"]["bytes"], 33_554_432);
        let sync = &plain["sync"]["rules"]["duration"]["us"];
        assert_eq!(sync["bucket"], json!({"1000": 3, "4000": 9, "+Inf": 10}));
        assert_eq!(sync["sum"], 12_500);
        assert_eq!(sync["count"], 10);
        assert!(plain.get("host").is_none());
        // One document per (code, host, method), the labels beside.
        let get = p
            .iter()
            .find(|x| x["method"] == "GET" && x.get("client").is_some() && x["code"] == "200")
            .unwrap();
        assert_eq!(get["client"]["request"]["count"], 42);
        assert_eq!(get["host"], "10.0.0.1:443");
        // Duration by (host, verb), in microseconds.
        let dur = p.iter().find(|x| x["verb"] == "GET").unwrap();
        assert_eq!(
            dur["client"]["request"]["duration"]["us"]["bucket"]["5000"],
            40
        );
        assert_eq!(dur["client"]["request"]["duration"]["us"]["sum"], 84_000);
        // Unmapped metrics are left out.
        assert!(!serde_json::to_string(&d).unwrap().contains("goroutines"));
        assert_eq!(d.len(), 4);
    }

    #[test]
    fn the_leader_flag_and_scheduler_queues() {
        let d = docs(
            "scheduler",
            "leader_election_master_status{name=\"kube-scheduler\"} 1\nscheduler_pending_pods{queue=\"active\"} 2\nscheduler_pending_pods{queue=\"backoff\"} 0\n",
        );
        let s: Vec<&Json> = d.iter().map(|x| &x["kubernetes"]["scheduler"]).collect();
        assert!(
            s.iter()
                .any(|x| x["leader"]["is_master"] == true && x["name"] == "kube-scheduler")
        );
        assert!(s.iter().any(|x| x["queue"] == "active" && x["scheduling"]["pending"]["pods"]["count"] == 2));
        assert_eq!(bound("0.005", 1e6), "5000");
        assert_eq!(bound("0.1", 1.0), "0.1");
        assert_eq!(bound("1024", 1.0), "1024");
        assert!(Component::named("etcd").is_none());
    }
}
