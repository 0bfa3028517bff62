//! Metrics hooks. The driver reports through [`Metrics`]; [`SimpleMetrics`]
//! records them as `prometheus-client` metrics with the metric names
//! client-go dashboards use, in a registry of its own or in one the
//! application already exposes.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

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

/// The labels of a per-lease metric; `name` is the Lease name, as in
/// client-go.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

impl LeaseLabels {
    fn new(lease: &str) -> Self {
        LeaseLabels { name: lease.into() }
    }
}

/// The labels of an API request count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    name: String,
    verb: String,
    code: String,
}

impl RequestLabels {
    fn new(lease: &str, verb: &str, code: &str) -> Self {
        RequestLabels {
            name: lease.into(),
            verb: verb.into(),
            code: code.into(),
        }
    }
}

/// Renew latency buckets: 5 ms doubling up to about 10 s.
fn renew_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 12))
}

/// The metric families. Clones share their values, so the same families
/// can sit in several registries.
#[derive(Clone, Debug)]
struct Families {
    status: Family<LeaseLabels, Gauge>,
    slow_path: Family<LeaseLabels, Counter>,
    transitions: Family<LeaseLabels, Counter>,
    renew: Family<LeaseLabels, Histogram, fn() -> Histogram>,
    requests: Family<RequestLabels, Counter>,
}

impl Families {
    fn new() -> Self {
        Families {
            status: Family::default(),
            slow_path: Family::default(),
            transitions: Family::default(),
            renew: Family::new_with_constructor(renew_histogram),
            requests: Family::default(),
        }
    }

    /// Registers every family; counters get their `_total` suffix and the
    /// histogram its `_seconds` unit from the encoder.
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "leader_election_master_status",
            "Whether this process leads the lease (1) or not (0)",
            self.status.clone(),
        );
        registry.register(
            "leader_election_slowpath",
            "Renewals that had to re-read the lease first",
            self.slow_path.clone(),
        );
        registry.register(
            "leasehold_election_transitions",
            "Terms begun by this process",
            self.transitions.clone(),
        );
        registry.register_with_unit(
            "leasehold_election_renew",
            "Latency of successful renewals",
            Unit::Seconds,
            self.renew.clone(),
        );
        registry.register(
            "leasehold_election_requests",
            "API requests by verb and code",
            self.requests.clone(),
        );
    }
}

/// Election metrics on `prometheus-client`: a gauge
/// `leader_election_master_status{name}`, counters
/// `leader_election_slowpath_total{name}`,
/// `leasehold_election_transitions_total{name}` and
/// `leasehold_election_requests_total{name,verb,code}`, and a histogram
/// `leasehold_election_renew_seconds{name}`.
///
/// [`SimpleMetrics::new`] keeps them in a registry of its own, which
/// [`SimpleMetrics::render`] encodes; [`SimpleMetrics::register`] also adds
/// them to the registry an application exposes.
#[derive(Debug)]
pub struct SimpleMetrics {
    families: Families,
    registry: Registry,
}

impl Default for SimpleMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl SimpleMetrics {
    /// Empty metrics in a registry of their own.
    pub fn new() -> Self {
        let families = Families::new();
        let mut registry = Registry::default();
        families.register(&mut registry);
        SimpleMetrics { families, registry }
    }

    /// Empty metrics, registered in `registry` as well as in their own: an
    /// application encoding `registry` exports them with its other metrics.
    /// Registering two of them in one registry repeats the metric names;
    /// give each its own sub-registry (`Registry::sub_registry_with_label`)
    /// or share one `SimpleMetrics` between electors, since every sample is
    /// labelled with its Lease name.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::new();
        metrics.families.register(registry);
        metrics
    }

    /// Requests counted so far with this verb and code.
    pub fn requests(&self, lease: &str, verb: &str, code: &str) -> u64 {
        self.families
            .requests
            .get(&RequestLabels::new(lease, verb, code))
            .map_or(0, |c| c.get())
    }

    /// Terms begun here so far.
    pub fn transitions(&self, lease: &str) -> u64 {
        self.families
            .transitions
            .get(&LeaseLabels::new(lease))
            .map_or(0, |c| c.get())
    }

    /// The exposition of these metrics in the OpenMetrics text format
    /// (which Prometheus scrapes), ending with `# EOF`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail, and neither can encoding these
        // metric types: any error would leave a partial text, not a panic.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Metrics for SimpleMetrics {
    fn leader_status(&self, lease: &str, leading: bool) {
        self.families
            .status
            .get_or_create(&LeaseLabels::new(lease))
            .set(i64::from(leading));
    }
    fn transition(&self, lease: &str) {
        self.families
            .transitions
            .get_or_create(&LeaseLabels::new(lease))
            .inc();
    }
    fn renew_latency(&self, lease: &str, latency: Duration) {
        self.families
            .renew
            .get_or_create(&LeaseLabels::new(lease))
            .observe(latency.as_secs_f64());
    }
    fn slow_path(&self, lease: &str) {
        self.families
            .slow_path
            .get_or_create(&LeaseLabels::new(lease))
            .inc();
    }
    fn request(&self, lease: &str, verb: &str, code: &str) {
        self.families
            .requests
            .get_or_create(&RequestLabels::new(lease, verb, code))
            .inc();
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
            text.contains("# TYPE leader_election_master_status gauge\n"),
            "{text}"
        );
        assert!(
            text.contains("leader_election_master_status{name=\"l\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "leasehold_election_requests_total{name=\"l\",verb=\"update\",code=\"200\"} 2\n"
            ),
            "{text}"
        );
        assert_eq!(m.requests("l", "update", "200"), 2);
        assert_eq!(m.requests("l", "get", "200"), 0);
        m.slow_path("l");
        m.leader_status("l", false);
        let text = m.render();
        assert!(
            text.contains("leader_election_slowpath_total{name=\"l\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("leader_election_master_status{name=\"l\"} 0\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn counts_transitions_and_renew_latency() {
        let m = SimpleMetrics::new();
        assert_eq!(m.transitions("l"), 0);
        m.transition("l");
        m.transition("l");
        m.transition("other");
        assert_eq!(m.transitions("l"), 2);
        assert_eq!(m.transitions("other"), 1);
        m.renew_latency("l", Duration::from_millis(3));
        m.renew_latency("l", Duration::from_millis(30));
        let text = m.render();
        assert!(
            text.contains("leasehold_election_transitions_total{name=\"l\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE leasehold_election_renew_seconds histogram\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_election_renew_seconds_count{name=\"l\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_election_renew_seconds_bucket{le=\"0.005\",name=\"l\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn registers_into_an_application_registry() {
        let mut app = Registry::default();
        let app_counter: Counter = Counter::default();
        app.register(
            "app_starts",
            "Starts of the application",
            app_counter.clone(),
        );
        app_counter.inc();
        let m = SimpleMetrics::register(&mut app);
        m.leader_status("l", true);
        m.transition("l");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &app).unwrap();
        assert!(text.contains("app_starts_total 1\n"), "{text}");
        assert!(
            text.contains("leader_election_master_status{name=\"l\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("leasehold_election_transitions_total{name=\"l\"} 1\n"),
            "{text}"
        );
        // Its own rendering sees the same values, without the others.
        let own = m.render();
        assert!(
            own.contains("leader_election_master_status{name=\"l\"} 1\n"),
            "{own}"
        );
        assert!(!own.contains("app_starts"), "{own}");
    }
}
