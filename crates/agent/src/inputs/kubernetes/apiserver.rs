//! The `apiserver` metricset: the API server's own `/metrics`, read with
//! the service account's token, in Elastic's `kubernetes.apiserver.*`
//! shape: request counts by verb, resource, code and component, and
//! request latency histograms by verb and resource.
//!
//! | field | from |
//! |---|---|
//! | `kubernetes.apiserver.request.{verb,resource,code,component,scope,group,version}` | labels of `apiserver_request_total` / `apiserver_request_duration_seconds` |
//! | `kubernetes.apiserver.request.count` | `apiserver_request_total` |
//! | `kubernetes.apiserver.request.duration.us.{sum,count}` and `.bucket.<le µs>` | `apiserver_request_duration_seconds` |
//! | `kubernetes.apiserver.process.cpu.sec`, `.fds.open.count`, `.memory.resident.bytes` | `process_*` |

use std::collections::BTreeMap;

use leasehold_prometheus_text::{Family, Text};
use serde_json::{Map, Value as Json, json};

use super::doc::set_path;
use crate::inputs::prometheus::number;
use crate::inputs::scrape::{Doc, Metricset};

/// The metricset.
pub struct ApiServer;

const REQUEST_LABELS: [&str; 7] = [
    "verb",
    "resource",
    "code",
    "component",
    "scope",
    "group",
    "version",
];

impl Metricset for ApiServer {
    fn name(&self) -> &str {
        "apiserver"
    }

    fn module(&self) -> &str {
        "kubernetes"
    }

    fn documents(&self, families: &[Family], _host: &str) -> Vec<Doc> {
        let mut by: BTreeMap<String, Map<String, Json>> = BTreeMap::new();
        let key_of = |labels: &[(Text, Text)]| -> (String, Vec<(Text, Text)>) {
            let kept: Vec<(Text, Text)> = labels
                .iter()
                .filter(|(k, _)| REQUEST_LABELS.contains(&&**k))
                .cloned()
                .collect();
            let key = kept
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            (key, kept)
        };
        let doc_for =
            |by: &mut BTreeMap<String, Map<String, Json>>, labels: &[(Text, Text)]| -> String {
                let (key, kept) = key_of(labels);
                by.entry(key.clone()).or_insert_with(|| {
                    let mut m = Map::new();
                    for (k, v) in kept {
                        set_path(
                            &mut m,
                            &format!("kubernetes.apiserver.request.{k}"),
                            json!(&*v),
                        );
                    }
                    m
                });
                key
            };
        for f in families {
            match f.name.as_str() {
                "apiserver_request" | "apiserver_request_total" => {
                    for s in &f.samples {
                        let key = doc_for(&mut by, &s.labels);
                        if let Some(d) = by.get_mut(&key) {
                            set_path(d, "kubernetes.apiserver.request.count", number(s.value));
                        }
                    }
                }
                "apiserver_request_duration_seconds" => {
                    for s in &f.samples {
                        let key = doc_for(&mut by, &s.labels);
                        let Some(d) = by.get_mut(&key) else { continue };
                        if let Some(le) = s
                            .name
                            .strip_suffix("_bucket")
                            .and(s.labels.iter().find(|(k, _)| &**k == "le"))
                        {
                            let bound = le.1.parse::<f64>().map_or_else(
                                |_| le.1.to_string(),
                                |b| {
                                    if b.is_infinite() {
                                        "+Inf".into()
                                    } else {
                                        format!("{}", (b * 1e6).round() as i64)
                                    }
                                },
                            );
                            set_path(
                                d,
                                &format!("kubernetes.apiserver.request.duration.us.bucket.{bound}"),
                                number(s.value),
                            );
                        } else if s.name.ends_with("_sum") {
                            set_path(
                                d,
                                "kubernetes.apiserver.request.duration.us.sum",
                                number(s.value * 1e6),
                            );
                        } else if s.name.ends_with("_count") {
                            set_path(
                                d,
                                "kubernetes.apiserver.request.duration.us.count",
                                number(s.value),
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        let mut docs: Vec<Doc> = by
            .into_iter()
            .map(|(object, fields)| Doc { object, fields })
            .collect();
        let mut process = Map::new();
        for f in families {
            let path = match f.name.as_str() {
                "process_cpu_seconds" | "process_cpu_seconds_total" => {
                    "kubernetes.apiserver.process.cpu.sec"
                }
                "process_open_fds" => "kubernetes.apiserver.process.fds.open.count",
                "process_resident_memory_bytes" => {
                    "kubernetes.apiserver.process.memory.resident.bytes"
                }
                _ => continue,
            };
            if let Some(s) = f.samples.first() {
                set_path(&mut process, path, number(s.value));
            }
        }
        if !process.is_empty() {
            docs.push(Doc {
                object: "process".into(),
                fields: process,
            });
        }
        docs
    }
}
