//! Metrics hooks. The driver reports through [`Metrics`]; [`SimpleMetrics`]
//! keeps them in memory and renders the Prometheus text format with the
//! metric names client-go dashboards use.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Receives election metrics. Every method has an empty default, so an
/// implementation picks what it exports.
pub trait Metrics: Send + Sync + 'static {
    /// `leader_election_master_status{name}`: 1 while leading, else 0.
    fn leader_status(&self, lease: &str, leading: bool) {
        let _ = (lease, leading);
    }
    /// A new term began here (counts leadership transitions).
    fn transition(&self, lease: &str) {
        let _ = lease;
    }
    /// A renew succeeded after `latency`.
    fn renew_latency(&self, lease: &str, latency: Duration) {
        let _ = (lease, latency);
    }
    /// One API request finished: `verb` (get, create, update, watch) and
    /// `code` (HTTP status, or `error` when there was no response).
    fn request(&self, lease: &str, verb: &str, code: &str) {
        let _ = (lease, verb, code);
    }
    /// `leader_election_slowpath_total{name}`: the leader had to re-read
    /// the Lease before writing instead of renewing from its cached copy.
    fn slow_path(&self, lease: &str) {
        let _ = lease;
    }
}

/// Discards everything.
#[derive(Debug, Default)]
pub struct NoMetrics;

impl Metrics for NoMetrics {}

#[derive(Debug, Default)]
struct State {
    status: BTreeMap<String, bool>,
    transitions: BTreeMap<String, u64>,
    renew_count: BTreeMap<String, (u64, f64)>,
    requests: BTreeMap<(String, String, String), u64>,
    slow_path: BTreeMap<String, u64>,
}

/// In-memory metrics with a Prometheus text rendering.
#[derive(Debug, Default)]
pub struct SimpleMetrics {
    state: Mutex<State>,
}

impl SimpleMetrics {
    /// Empty metrics.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    /// Requests counted so far with this verb and code.
    pub fn requests(&self, lease: &str, verb: &str, code: &str) -> u64 {
        self.with(|s| {
            s.requests
                .get(&(lease.into(), verb.into(), code.into()))
                .copied()
                .unwrap_or(0)
        })
    }

    /// Terms begun here so far.
    pub fn transitions(&self, lease: &str) -> u64 {
        self.with(|s| s.transitions.get(lease).copied().unwrap_or(0))
    }

    /// The Prometheus text exposition of all metrics.
    pub fn render(&self) -> String {
        self.with(|s| {
            let mut out = String::new();
            out.push_str("# HELP leader_election_master_status Whether this process leads the lease (1) or not (0).\n# TYPE leader_election_master_status gauge\n");
            for (name, leading) in &s.status {
                let _ = writeln!(out, "leader_election_master_status{{name=\"{name}\"}} {}", u8::from(*leading));
            }
            out.push_str("# HELP leader_election_slowpath_total Renewals that had to re-read the lease first.\n# TYPE leader_election_slowpath_total counter\n");
            for (name, n) in &s.slow_path {
                let _ = writeln!(out, "leader_election_slowpath_total{{name=\"{name}\"}} {n}");
            }
            out.push_str("# HELP leasehold_election_transitions_total Terms begun by this process.\n# TYPE leasehold_election_transitions_total counter\n");
            for (name, n) in &s.transitions {
                let _ = writeln!(out, "leasehold_election_transitions_total{{name=\"{name}\"}} {n}");
            }
            out.push_str("# HELP leasehold_election_renew_seconds Latency of successful renewals.\n# TYPE leasehold_election_renew_seconds summary\n");
            for (name, (count, sum)) in &s.renew_count {
                let _ = writeln!(out, "leasehold_election_renew_seconds_count{{name=\"{name}\"}} {count}");
                let _ = writeln!(out, "leasehold_election_renew_seconds_sum{{name=\"{name}\"}} {sum}");
            }
            out.push_str("# HELP leasehold_election_requests_total API requests by verb and code.\n# TYPE leasehold_election_requests_total counter\n");
            for ((name, verb, code), n) in &s.requests {
                let _ = writeln!(out, "leasehold_election_requests_total{{name=\"{name}\",verb=\"{verb}\",code=\"{code}\"}} {n}");
            }
            out
        })
    }
}

impl Metrics for SimpleMetrics {
    fn leader_status(&self, lease: &str, leading: bool) {
        self.with(|s| s.status.insert(lease.into(), leading));
    }
    fn transition(&self, lease: &str) {
        self.with(|s| *s.transitions.entry(lease.into()).or_default() += 1);
    }
    fn renew_latency(&self, lease: &str, latency: Duration) {
        self.with(|s| {
            let e = s.renew_count.entry(lease.into()).or_default();
            e.0 += 1;
            e.1 += latency.as_secs_f64();
        });
    }
    fn slow_path(&self, lease: &str) {
        self.with(|s| *s.slow_path.entry(lease.into()).or_default() += 1);
    }
    fn request(&self, lease: &str, verb: &str, code: &str) {
        self.with(|s| {
            *s.requests
                .entry((lease.into(), verb.into(), code.into()))
                .or_default() += 1
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_client_go_compatible_status_gauge() {
        let m = SimpleMetrics::new();
        m.leader_status("l", true);
        m.request("l", "update", "200");
        m.request("l", "update", "200");
        let text = m.render();
        assert!(
            text.contains("leader_election_master_status{name=\"l\"} 1"),
            "{text}"
        );
        assert!(text.contains("verb=\"update\",code=\"200\"} 2"), "{text}");
        assert_eq!(m.requests("l", "update", "200"), 2);
        m.slow_path("l");
        let text = m.render();
        assert!(
            text.contains("leader_election_slowpath_total{name=\"l\"} 1"),
            "{text}"
        );
    }
}
