//! `agent.monitoring`: the inputs that ship the agent's own logs and
//! metrics, added to the policy as Elastic Agent adds its monitoring
//! inputs to its own, so they run, route and are acknowledged like any
//! other input (node-local: every agent ships its own).

use leasehold_policy::Policy;
use serde_json::json;

use super::config::Shipping;

/// How the added inputs' place is named in messages.
pub const SOURCE: &str = "agent.monitoring";
/// The ids of the added inputs.
pub const LOGS_ID: &str = "leasehold-monitoring-logs";
pub const METRICS_ID: &str = "leasehold-monitoring-metrics";

/// Adds the inputs `shipping` asks for. `outputs` are the policy's output
/// names: `use_output` must be one. Every document carries
/// `elastic_agent.{id,version,snapshot}`, which Elastic's dashboards group
/// by.
pub fn add_inputs(
    policy: &mut Policy,
    shipping: &Shipping,
    outputs: &[String],
    agent_id: &str,
) -> Result<(), String> {
    if !outputs.contains(&shipping.use_output) {
        return Err(format!(
            "`agent.monitoring.use_output` names output `{}`, which the policy does not define (outputs: {})",
            shipping.use_output,
            outputs.join(", ")
        ));
    }
    let stamp = json!({"add_fields": {"target": "elastic_agent", "fields": {
        "id": agent_id,
        "version": env!("CARGO_PKG_VERSION"),
        "snapshot": false,
    }}});
    let mut inputs = Vec::new();
    if shipping.logs {
        inputs.push(json!({
            "id": LOGS_ID,
            "type": "monitoring/logs",
            "use_output": shipping.use_output,
            "data_stream": {"type": "logs", "dataset": "elastic_agent", "namespace": shipping.namespace},
            "processors": [stamp],
        }));
    }
    if shipping.metrics {
        inputs.push(json!({
            "id": METRICS_ID,
            "type": "monitoring/metrics",
            "use_output": shipping.use_output,
            "period": format!("{}ms", shipping.period.as_millis()),
            "data_stream": {"type": "metrics", "dataset": "elastic_agent.elastic_agent", "namespace": shipping.namespace},
            "processors": [stamp],
        }));
    }
    // JSON is YAML: the inputs go in as a file of inputs would.
    policy
        .add_inputs_file(SOURCE, &json!({ "inputs": inputs }).to_string())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn shipping(logs: bool, metrics: bool) -> Shipping {
        Shipping {
            use_output: "default".into(),
            logs,
            metrics,
            namespace: "team".into(),
            period: Duration::from_secs(30),
        }
    }

    #[test]
    fn the_inputs_asked_for_are_added_after_the_policys_and_build() {
        let mut p = Policy::parse(
            "outputs:\n  default: {type: console}\ninputs:\n  - {id: own, type: exec, command: [date]}\n",
            "agent.yml",
        )
        .unwrap();
        add_inputs(&mut p, &shipping(true, true), &["default".into()], "e7b1").unwrap();
        let added: Vec<_> = p.inputs()[1..].iter().map(|n| n.to_value()).collect();
        assert_eq!(added.len(), 2);
        for (input, (kind, dataset)) in added.iter().zip([
            ("logs", "elastic_agent"),
            ("metrics", "elastic_agent.elastic_agent"),
        ]) {
            let spec = crate::inputs::build(input).unwrap_or_else(|e| panic!("{e:?}"));
            assert_eq!(spec.data_stream.kind, kind);
            assert_eq!(spec.data_stream.dataset, dataset);
            assert_eq!(spec.data_stream.namespace, "team");
            assert!(spec.processors.is_some(), "elastic_agent.* is stamped");
        }
        let mut only = Policy::parse("outputs:\n  default: {type: console}\n", "a.yml").unwrap();
        add_inputs(&mut only, &shipping(false, true), &["default".into()], "x").unwrap();
        assert_eq!(only.inputs().len(), 1);
        let e = add_inputs(
            &mut only,
            &Shipping {
                use_output: "mon".into(),
                ..shipping(true, true)
            },
            &["default".into()],
            "x",
        )
        .unwrap_err();
        assert!(e.contains("`mon`") && e.contains("outputs: default"), "{e}");
    }
}
