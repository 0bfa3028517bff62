//! Input types: the registry that validates an input's settings (for `run`
//! and `check`) and builds the runnable input.
//!
//! An input is a long-running task that produces events into its sink until
//! its cancellation token fires. Returning `Err` (or `Ok` before being
//! cancelled) counts as a failure; the runtime restarts it with backoff.

pub mod contract;
pub mod events;
pub mod exec;
pub mod filestream;
pub mod http;
pub mod kubernetes;
pub mod logfile;
pub mod monitoring;
pub mod prometheus;
pub mod schedule;
pub mod scrape;
pub mod settings;
pub mod system;

use std::sync::Arc;

use leasehold_policy::{Diagnostic, Node, Policy, Pos, Severity, Value};

pub use contract::{ClusterAccess, HealthBoard, Input, InputContext, InputHealth};
pub use settings::{DataStream, Problem};

/// Input types this agent runs.
pub const TYPES: [&str; 9] = [
    "exec",
    "filestream",
    "logfile",
    "prometheus/metrics",
    "kubernetes/metrics",
    "kubernetes/events",
    "system/metrics",
    "monitoring/logs",
    "monitoring/metrics",
];

/// Elastic Agent input types leasehold knows but does not run yet: `check`
/// warns, `run` lists such inputs as dropped.
pub const NOT_YET: [&str; 1] = ["http/metrics"];

/// Elastic's input types that read what only Windows has (its event log,
/// ETW, perfmon): a Linux agent does not run them and says so, as Elastic
/// Agent's own policies guard their streams with `${host.platform}`.
pub const WINDOWS_ONLY: [&str; 3] = ["winlog", "etw", "windows/metrics"];

/// An input ready to run, with the settings the runtime handles itself.
#[derive(Clone)]
pub struct InputSpec {
    /// `type`.
    pub type_name: String,
    /// `use_output`, `default` when not given.
    pub use_output: String,
    /// Where its events go.
    pub data_stream: DataStream,
    /// The input itself.
    pub input: Arc<dyn Input>,
    /// Settings it ignores (Elastic settings this version does not use).
    pub warnings: Vec<Problem>,
    /// Its `processors` and its streams', when it has any.
    pub processors: Option<Arc<crate::pipeline::processing::InputProcessors>>,
}

/// Builds an input from its rendered settings, or lists every problem.
pub fn build(config: &Value) -> Result<InputSpec, Vec<Problem>> {
    let mut problems = Vec::new();
    let Value::Map(map) = config else {
        return Err(vec![Problem::new("inputs", "an input must be a mapping")]);
    };
    let type_name = match map.get("type") {
        Some(Value::Str(t)) => t.clone(),
        _ => return Err(vec![Problem::new("type", "is required")]),
    };
    let use_output = match map.get("use_output") {
        None | Some(Value::Null) => "default".to_string(),
        Some(Value::Str(s)) if !s.is_empty() => s.clone(),
        Some(other) => {
            problems.push(Problem::new(
                "use_output",
                format!("must be the name of an output, found {}", other.type_name()),
            ));
            "default".into()
        }
    };
    // Kubernetes Events are logs of the cluster: their own dataset, as
    // Elastic's integration names it.
    let base = match type_name.as_str() {
        "kubernetes/events" => DataStream {
            dataset: "kubernetes.event".into(),
            ..DataStream::default()
        },
        // Each metricset to `metrics-system.<metricset>-*` unless a
        // dataset is written.
        "system/metrics" => DataStream {
            kind: "metrics".into(),
            dataset: "system".into(),
            ..DataStream::default()
        },
        // The agent's own, where Elastic Agent ships its own.
        "monitoring/logs" => DataStream {
            dataset: "elastic_agent".into(),
            ..DataStream::default()
        },
        "monitoring/metrics" => DataStream {
            kind: "metrics".into(),
            dataset: "elastic_agent.elastic_agent".into(),
            ..DataStream::default()
        },
        _ => DataStream::default(),
    };
    let data_stream = DataStream::read_map(map, &base, &mut problems);
    let input: Option<Arc<dyn Input>> = match type_name.as_str() {
        "exec" => {
            exec::Exec::from_settings(map, &mut problems).map(|e| Arc::new(e) as Arc<dyn Input>)
        }
        "prometheus/metrics" => {
            prometheus::Prometheus::from_settings(&input_id(map), map, &data_stream, &mut problems)
                .map(|e| Arc::new(e) as Arc<dyn Input>)
        }
        "kubernetes/events" => events::Events::from_settings(&input_id(map), map, &mut problems)
            .map(|e| Arc::new(e) as Arc<dyn Input>),
        "monitoring/logs" => {
            monitoring::AgentLogs::from_settings(&input_id(map), map, &mut problems)
                .map(|e| Arc::new(e) as Arc<dyn Input>)
        }
        "monitoring/metrics" => {
            monitoring::AgentMetrics::from_settings(&input_id(map), map, &mut problems)
                .map(|e| Arc::new(e) as Arc<dyn Input>)
        }
        "kubernetes/metrics" => kubernetes::KubernetesMetrics::from_settings(
            &input_id(map),
            map,
            &data_stream,
            &mut problems,
        )
        .map(|e| Arc::new(e) as Arc<dyn Input>),
        "system/metrics" => {
            system::SystemMetrics::from_settings(&input_id(map), map, &data_stream, &mut problems)
                .map(|e| Arc::new(e) as Arc<dyn Input>)
        }
        "filestream" => {
            filestream::Filestream::from_settings(&input_id(map), map, &data_stream, &mut problems)
                .map(|e| Arc::new(e) as Arc<dyn Input>)
        }
        // Elastic Agent's name for Filebeat's `log` input (and Filebeat's).
        "logfile" | "log" => filestream::Filestream::from_settings(
            &input_id(map),
            &logfile::to_filestream(map),
            &data_stream,
            &mut problems,
        )
        .map(|e| Arc::new(e) as Arc<dyn Input>),
        t if WINDOWS_ONLY.contains(&t) => {
            problems.push(
                Problem::warning(
                    "type",
                    format!("input type `{t}` reads Windows-only sources; it does not run on this {} host", std::env::consts::OS),
                )
                .hint("Elastic Agent's own policies run it on Windows only (condition `${host.platform} == 'windows'`); remove it from a policy for Linux nodes to silence this"),
            );
            None
        }
        t if NOT_YET.contains(&t) => {
            problems.push(
                Problem::new(
                    "type",
                    format!("input type `{t}` is not available in this version of leasehold"),
                )
                .hint(format!("available input types: {}", TYPES.join(", "))),
            );
            None
        }
        t => {
            problems.push(
                Problem::new("type", format!("unknown input type `{t}`"))
                    .hint(format!("available input types: {}", TYPES.join(", "))),
            );
            None
        }
    };
    let processing = crate::pipeline::processing::read(config, &data_stream.dataset);
    problems.extend(
        processing
            .warnings
            .into_iter()
            .map(|(at, w)| Problem::warning(&at, w)),
    );
    problems.extend(
        processing
            .errors
            .into_iter()
            .map(|(at, e)| Problem::new(&at, e)),
    );
    match input {
        Some(input) if problems.iter().all(|p| p.warning) => Ok(InputSpec {
            type_name,
            use_output,
            data_stream,
            input,
            warnings: problems,
            processors: processing.processors,
        }),
        _ => Err(problems),
    }
}

/// The input's id as rendered (always present after rendering; `check`
/// sees the policy as written, where it may be missing).
fn input_id(map: &leasehold_policy::Map) -> String {
    match map.get("id") {
        Some(Value::Str(s)) => s.clone(),
        Some(v) => v.to_subst_text(),
        None => String::new(),
    }
}

/// The `check` diagnostics for the inputs of `policy` as written: unknown
/// types and bad settings, at the line of the offending key. Settings that
/// still hold `${…}` are checked after rendering only.
pub fn check_policy(policy: &Policy) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for input in policy.inputs() {
        let Some(t) = input.get("type").and_then(Node::as_str) else {
            continue; // reported by the policy check
        };
        if t.contains("${") {
            continue;
        }
        let value = input.to_value();
        let problems = match build(&value) {
            Ok(spec) => spec.warnings,
            Err(p) => p,
        };
        for p in problems {
            let severity = if p.warning || (p.path == ["type"] && NOT_YET.contains(&t)) {
                Severity::Warning
            } else {
                Severity::Error
            };
            out.push(Diagnostic {
                severity,
                file: policy.file.clone(),
                pos: position(input, &p.path),
                message: format!("input `{}`: {}", p.path.join("."), p.message),
                hint: p.hint,
            });
        }
    }
    out
}

/// Where the deepest existing node along `path` starts.
pub fn position(node: &Node, path: &[String]) -> Pos {
    let mut at = node;
    for seg in path {
        let next = match &at.kind {
            leasehold_policy::NodeKind::Map(entries) => {
                entries.iter().find(|(k, _)| &k.name == seg).map(|(_, v)| v)
            }
            leasehold_policy::NodeKind::List(items) => {
                seg.parse::<usize>().ok().and_then(|i| items.get(i))
            }
            _ => None,
        };
        match next {
            Some(n) => at = n,
            None => break,
        }
    }
    at.pos
}
