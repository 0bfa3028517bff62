//! `kubernetes/metrics`: Metricbeat's `kubernetes` module. The `state_*`
//! metricsets read kube-state-metrics; `apiserver` reads the API server's
//! own `/metrics`. Streams, periods, TLS and filters work as for
//! `prometheus/metrics`.

pub mod apiserver;
mod kubelet;
pub mod state;
mod state_tables;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use leasehold_policy::Map;

use super::prometheus::{STREAM_KEYS, StreamSchema, read_streams};
use super::scrape::{self, Metricset, Stream};
use super::settings::{DataStream, Problem, unknown_keys_lenient};
use super::{Input, InputContext};

/// A `kubernetes/metrics` input.
pub struct KubernetesMetrics {
    /// The input's id (part of every document id).
    pub id: String,
    /// Its streams.
    pub streams: Vec<Stream>,
}

fn metricset(name: &str) -> Option<Arc<dyn Metricset>> {
    if name == "apiserver" {
        return Some(Arc::new(apiserver::ApiServer));
    }
    if let Some(k) = kubelet::Kubelet::named(name) {
        return Some(Arc::new(k));
    }
    state::State::named(name).map(|s| Arc::new(s) as Arc<dyn Metricset>)
}

impl KubernetesMetrics {
    /// Reads the settings; `None` when they are bad (problems pushed).
    pub fn from_settings(
        id: &str,
        map: &Map,
        ds: &DataStream,
        out: &mut Vec<Problem>,
    ) -> Option<KubernetesMetrics> {
        let before = out.len();
        let mut keys: Vec<&str> = STREAM_KEYS.to_vec();
        keys.push("streams");
        unknown_keys_lenient(map, &keys, "kubernetes/metrics", out);
        let allowed = format!(
            "{}, apiserver, {}",
            state::names().join(", "),
            kubelet::KUBELET_METRICSETS.join(", ")
        );
        let schema = StreamSchema {
            type_name: "kubernetes/metrics",
            keys: &STREAM_KEYS,
            default_dataset: |n| format!("kubernetes.{n}"),
            metricset,
            allowed: &allowed,
        };
        let streams = read_streams(map, ds, &schema, out);
        super::prometheus::finish(out, before, streams, "kubernetes/metrics").map(|streams| {
            KubernetesMetrics {
                id: id.to_string(),
                streams,
            }
        })
    }
}

impl Input for KubernetesMetrics {
    fn run(self: Arc<Self>, ctx: InputContext) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(scrape::run_streams(
            self.id.clone(),
            self.streams.clone(),
            ctx,
        ))
    }
}
