//! The agent's own metrics: inputs, events, policy reloads and build info.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::pipeline::ack::Tally;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InputLabels {
    input: String,
}

impl InputLabels {
    fn new(input: &str) -> Self {
        InputLabels {
            input: input.into(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    input: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    version: String,
    identity: String,
}

/// The agent's metrics. Clones share their values.
///
/// - `leasehold_inputs_running`: inputs running now;
/// - `leasehold_input_restarts_total{input}`, `leasehold_input_failures_total{input}`;
/// - `leasehold_events_produced_total{input}`;
/// - `leasehold_events_refused_total{input}`: events refused because the
///   input's term had ended;
/// - `leasehold_events_ended_total{input,outcome="delivered|dropped|discarded"}`:
///   how each queued event's trip ended (see [`Tally`]); produced =
///   delivered + dropped + discarded + still in flight (produced counts
///   an event once its output took it);
/// - `leasehold_policy_reloads_total{result="ok|error"}`;
/// - `leasehold_agent_info{version,identity}`: 1 once the identity is set.
#[derive(Clone, Debug)]
pub struct AgentMetrics {
    inputs_running: Gauge,
    input_restarts: Family<InputLabels, Counter>,
    input_failures: Family<InputLabels, Counter>,
    events_produced: Family<InputLabels, Counter>,
    events_refused: Family<InputLabels, Counter>,
    events_ended: Family<OutcomeLabels, Counter>,
    policy_reloads: Family<ResultLabels, Counter>,
    info: Family<InfoLabels, Gauge>,
}

impl AgentMetrics {
    /// Creates the metrics and registers them in `registry`; counters get
    /// their `_total` suffix from the encoder.
    pub fn register(registry: &mut Registry) -> AgentMetrics {
        let m = AgentMetrics {
            inputs_running: Gauge::default(),
            input_restarts: Family::default(),
            input_failures: Family::default(),
            events_produced: Family::default(),
            events_refused: Family::default(),
            events_ended: Family::default(),
            policy_reloads: Family::default(),
            info: Family::default(),
        };
        registry.register(
            "leasehold_inputs_running",
            "Inputs running now",
            m.inputs_running.clone(),
        );
        registry.register(
            "leasehold_input_restarts",
            "Restarts of an input after a failure",
            m.input_restarts.clone(),
        );
        registry.register(
            "leasehold_input_failures",
            "Failures of an input",
            m.input_failures.clone(),
        );
        registry.register(
            "leasehold_events_produced",
            "Events an input produced",
            m.events_produced.clone(),
        );
        registry.register(
            "leasehold_events_refused",
            "Events refused because the input's term had ended",
            m.events_refused.clone(),
        );
        registry.register(
            "leasehold_events_ended",
            "How queued events ended: delivered, dropped for good, or discarded unsent (term ended, shutdown)",
            m.events_ended.clone(),
        );
        registry.register(
            "leasehold_policy_reloads",
            "Policy reload attempts by result",
            m.policy_reloads.clone(),
        );
        registry.register(
            "leasehold_agent_info",
            "The agent's version and identity",
            m.info.clone(),
        );
        for result in ["ok", "error"] {
            let _ = m.policy_reloads.get_or_create_owned(&ResultLabels {
                result: result.into(),
            });
        }
        m
    }

    /// Sets the number of inputs running.
    pub fn set_inputs_running(&self, n: usize) {
        self.inputs_running
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// One input started.
    pub fn input_started(&self) {
        self.inputs_running.inc();
    }

    /// One input stopped.
    pub fn input_stopped(&self) {
        self.inputs_running.dec();
    }

    /// Input `input` was restarted.
    pub fn input_restarted(&self, input: &str) {
        self.input_restarts
            .get_or_create(&InputLabels::new(input))
            .inc();
    }

    /// Input `input` failed.
    pub fn input_failed(&self, input: &str) {
        self.input_failures
            .get_or_create(&InputLabels::new(input))
            .inc();
    }

    /// Input `input` produced `n` events.
    pub fn events_produced(&self, input: &str, n: u64) {
        self.events_produced
            .get_or_create(&InputLabels::new(input))
            .inc_by(n);
    }

    /// The refused counter of `input`, for an input to keep instead of
    /// looking it up at every event.
    pub fn input_refused_counter(&self, input: &str) -> Counter {
        self.events_refused
            .get_or_create(&InputLabels::new(input))
            .clone()
    }

    /// The counters of `input`'s events, for its publisher.
    pub fn input_counters(&self, input: &str) -> crate::pipeline::publisher::InputCounters {
        crate::pipeline::publisher::InputCounters {
            refused: self.input_refused_counter(input),
            tally: self.input_tally(input),
        }
    }

    /// The counters of how `input`'s events end, for its events'
    /// acknowledgements.
    pub fn input_tally(&self, input: &str) -> Tally {
        let get = |outcome| {
            self.events_ended
                .get_or_create(&OutcomeLabels {
                    input: input.into(),
                    outcome,
                })
                .clone()
        };
        Tally {
            queued: self
                .events_produced
                .get_or_create(&InputLabels::new(input))
                .clone(),
            delivered: get("delivered"),
            dropped: get("dropped"),
            discarded: get("discarded"),
        }
    }

    /// Drops every series of `input`: it is gone for good (a dynamic
    /// input whose pod went), and a series per input id ever seen would
    /// grow without bound.
    pub fn forget_input(&self, input: &str) {
        let l = InputLabels::new(input);
        for f in [
            &self.input_restarts,
            &self.input_failures,
            &self.events_produced,
            &self.events_refused,
        ] {
            f.remove(&l);
        }
        for outcome in ["delivered", "dropped", "discarded"] {
            self.events_ended.remove(&OutcomeLabels {
                input: input.into(),
                outcome,
            });
        }
    }

    /// `n` events of input `input` were refused because its term had ended.
    pub fn events_refused(&self, input: &str, n: u64) {
        self.events_refused
            .get_or_create(&InputLabels::new(input))
            .inc_by(n);
    }

    /// A policy reload was attempted; `ok` says whether it succeeded.
    pub fn policy_reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.policy_reloads
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .inc();
    }

    /// Sets `leasehold_agent_info{version,identity}` to 1 with this build's
    /// version, replacing an earlier identity.
    pub fn set_identity(&self, identity: &str) {
        self.info.clear();
        self.info
            .get_or_create(&InfoLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                identity: identity.into(),
            })
            .set(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(r: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, r).unwrap();
        out
    }

    #[test]
    fn encodes_every_metric_with_its_labels() {
        let mut r = Registry::default();
        let m = AgentMetrics::register(&mut r);
        m.input_started();
        m.input_started();
        m.input_stopped();
        m.input_restarted("x");
        m.input_failed("x");
        m.events_produced("x", 3);
        m.events_refused("x", 2);
        m.policy_reload(true);
        m.set_identity("old");
        m.set_identity("agent-a");
        let text = render(&r);
        let version = env!("CARGO_PKG_VERSION");
        for line in [
            "leasehold_inputs_running 1\n".to_string(),
            "leasehold_input_restarts_total{input=\"x\"} 1\n".into(),
            "leasehold_input_failures_total{input=\"x\"} 1\n".into(),
            "leasehold_events_produced_total{input=\"x\"} 3\n".into(),
            "leasehold_events_refused_total{input=\"x\"} 2\n".into(),
            "leasehold_policy_reloads_total{result=\"ok\"} 1\n".into(),
            "leasehold_policy_reloads_total{result=\"error\"} 0\n".into(),
            format!("leasehold_agent_info{{version=\"{version}\",identity=\"agent-a\"}} 1\n"),
        ] {
            assert!(text.contains(&line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("identity=\"old\""), "{text}");
    }
}
