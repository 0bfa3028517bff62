//! The `processors` of an input and of its streams (Elastic's syntax, see
//! the `leasehold-processors` crate), applied to each event before it is
//! queued. A stream's processors are found by the data stream its events
//! go to (Elastic's policies give every stream its own
//! `data_stream.dataset`): they run first, then the input's, then those a
//! dynamic provider's mapping added (`provider_processors`: a Pod's hints),
//! which may do anything to the event but change where it goes.

use std::sync::Arc;

use leasehold_policy::Value;
use leasehold_processors::{Processors, Verdict};

/// The processors of one input, by where they apply.
#[derive(Debug, Default)]
pub struct InputProcessors {
    input: Option<Arc<Processors>>,
    by_dataset: Vec<(String, Arc<Processors>)>,
    /// The mapping's (untrusted): run last, confined (see [`ROUTING_KEYS`]).
    provided: Option<Arc<Processors>>,
}

/// The top-level keys that decide where an event goes: its data stream
/// (the index the outputs derive), `@metadata` (the document id) and
/// `_index`. Processors a Pod wrote cannot change them: what a Pod's
/// author controls chooses what is read of that Pod, never where data
/// goes.
pub const ROUTING_KEYS: [&str; 3] = ["data_stream", "@metadata", "_index"];

/// What reading an input's `processors` found.
#[derive(Debug, Default)]
pub struct Read {
    /// `None` when neither the input nor a stream has processors.
    pub processors: Option<Arc<InputProcessors>>,
    /// Processors skipped (one leasehold lacks, a Pod's `script`) and other notes: (dotted place
    /// in the input, message).
    pub warnings: Vec<(String, String)>,
    /// Malformed settings: (dotted place in the input, message).
    pub errors: Vec<(String, String)>,
}

/// Whose processors are read: the policy's, or a Pod's (no `script`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Author {
    Policy,
    Pod,
}

fn parse(at: &str, v: &Value, author: Author, out: &mut Read) -> Option<Arc<Processors>> {
    let json = serde_json::to_value(v).unwrap_or(serde_json::Value::Null);
    let parsed = match author {
        Author::Policy => Processors::parse(&json),
        Author::Pod => Processors::parse_confined(&json),
    };
    match parsed {
        Ok(p) => {
            // A warning names its processor (`processors.3: …`): placed
            // under `at`.
            out.warnings.extend(p.warnings.into_iter().map(|w| {
                match w
                    .split_once(": ")
                    .filter(|(path, _)| path.starts_with("processors"))
                {
                    Some((path, msg)) => (
                        format!("{at}{}", path.strip_prefix("processors").unwrap_or(path)),
                        msg.to_string(),
                    ),
                    None => (at.to_string(), w),
                }
            }));
            (!p.processors.is_empty()).then(|| Arc::new(p.processors))
        }
        Err(errors) => {
            out.errors.extend(errors.into_iter().map(|e| {
                let rest = e.path.strip_prefix("processors").unwrap_or(&e.path);
                (format!("{at}{rest}"), e.message)
            }));
            None
        }
    }
}

/// Reads `processors` of a rendered input `config` and of its `streams`.
/// `default_dataset` is where a stream without a `data_stream.dataset`
/// writes (the input's).
pub fn read(config: &Value, default_dataset: &str) -> Read {
    let mut out = Read::default();
    let Value::Map(m) = config else {
        return out;
    };
    let input = m
        .get("processors")
        .and_then(|v| parse("processors", v, Author::Policy, &mut out));
    let provided = m
        .get(leasehold_policy::render::PROVIDER_PROCESSORS)
        .and_then(|v| {
            parse(
                leasehold_policy::render::PROVIDER_PROCESSORS,
                v,
                Author::Pod,
                &mut out,
            )
        });
    let mut by_dataset: Vec<(String, Arc<Processors>)> = Vec::new();
    if let Some(Value::List(streams)) = m.get("streams") {
        for (i, s) in streams.iter().enumerate() {
            let Value::Map(sm) = s else { continue };
            let Some(v) = sm.get("processors") else {
                continue;
            };
            let Some(p) = parse(
                &format!("streams.{i}.processors"),
                v,
                Author::Policy,
                &mut out,
            ) else {
                continue;
            };
            let dataset = sm
                .get("data_stream.dataset")
                .or_else(|| match sm.get("data_stream") {
                    Some(Value::Map(d)) => d.get("dataset"),
                    _ => None,
                })
                .and_then(|v| match v {
                    Value::Str(s) if !s.is_empty() => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| default_dataset.to_string());
            if by_dataset.iter().any(|(d, _)| *d == dataset) {
                out.errors.push((
                    format!("streams.{i}.processors"),
                    format!("another stream of this input with processors writes to dataset `{dataset}` too; a stream's processors are found by its dataset: give each stream its own `data_stream.dataset`"),
                ));
                continue;
            }
            by_dataset.push((dataset, p));
        }
    }
    if input.is_some() || !by_dataset.is_empty() || provided.is_some() {
        out.processors = Some(Arc::new(InputProcessors {
            input,
            by_dataset,
            provided,
        }));
    }
    out
}

/// The processors that run on the events of one data stream of an input.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    /// Each part, and whether it is confined (may not change routing).
    parts: Vec<(Arc<Processors>, bool)>,
}

impl Chain {
    /// The chain for events going to `dataset`: that stream's processors,
    /// then the input's.
    pub fn for_dataset(p: &InputProcessors, dataset: &str) -> Chain {
        let mut parts = Vec::new();
        if let Some((_, s)) = p.by_dataset.iter().find(|(d, _)| d == dataset) {
            parts.push((Arc::clone(s), false));
        }
        if let Some(i) = &p.input {
            parts.push((Arc::clone(i), false));
        }
        if let Some(h) = &p.provided {
            parts.push((Arc::clone(h), true));
        }
        Chain { parts }
    }

    /// Whether nothing runs.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Whether a processor of the chain takes long (a `script` seen slow):
    /// then [`Chain::apply`] belongs on a blocking thread.
    pub fn blocks(&self) -> bool {
        self.parts.iter().any(|(p, _)| p.blocks())
    }

    /// Runs the chain on one NDJSON line: the line to queue, or `None`
    /// when a processor dropped the event. A line that is not an object is
    /// passed on untouched.
    pub fn apply(&self, line: &[u8]) -> Option<Vec<u8>> {
        let Ok(serde_json::Value::Object(mut event)) = serde_json::from_slice(line) else {
            return Some(line.to_vec());
        };
        for (p, confined) in &self.parts {
            let routing: Option<Vec<(&str, Option<serde_json::Value>)>> = confined.then(|| {
                ROUTING_KEYS
                    .iter()
                    .map(|k| (*k, event.get(*k).cloned()))
                    .collect()
            });
            if p.apply(&mut event) == Verdict::Drop {
                return None;
            }
            for (k, before) in routing.into_iter().flatten() {
                match before {
                    Some(v) => {
                        event.insert(k.to_string(), v);
                    }
                    None => {
                        event.remove(k);
                    }
                }
            }
        }
        let mut out = serde_json::to_vec(&event).ok()?;
        out.push(b'\n');
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml_json: serde_json::Value) -> Value {
        Value::from_json(&yaml_json)
    }

    #[test]
    fn stream_processors_run_by_dataset_before_the_inputs() {
        let c = config(serde_json::json!({
            "id": "sys", "type": "system/metrics",
            "processors": [{"add_tags": {"tags": ["node"]}}],
            "streams": [
                {"data_stream": {"dataset": "system.filesystem"}, "metricsets": ["filesystem"],
                 "processors": [{"drop_event": {"when": {"regexp": {"system.filesystem.mount_point": "^/(sys|proc)($|/)"}}}}]},
                {"data_stream.dataset": "system.cpu", "metricsets": ["cpu"]},
            ],
        }));
        let r = read(&c, "generic");
        assert!(r.errors.is_empty() && r.warnings.is_empty(), "{r:?}");
        let p = r.processors.unwrap();
        let fs = Chain::for_dataset(&p, "system.filesystem");
        assert_eq!(
            fs.apply(b"{\"system\":{\"filesystem\":{\"mount_point\":\"/proc\"}}}\n"),
            None,
            "dropped by the stream's processor"
        );
        let kept = fs
            .apply(b"{\"system\":{\"filesystem\":{\"mount_point\":\"/data\"}}}\n")
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&kept).unwrap();
        assert_eq!(v["tags"], serde_json::json!(["node"]), "then the input's");
        assert!(kept.ends_with(b"}\n"));
        let cpu = Chain::for_dataset(&p, "system.cpu");
        let v: serde_json::Value =
            serde_json::from_slice(&cpu.apply(b"{\"system\":{}}\n").unwrap()).unwrap();
        assert_eq!(v["tags"], serde_json::json!(["node"]));
    }

    #[test]
    fn a_pods_processors_cannot_reroute_but_the_policys_may() {
        let reroute = serde_json::json!([
            {"add_fields": {"target": "data_stream", "fields": {"namespace": "other-team", "dataset": "system.auth"}}},
            {"add_fields": {"target": "@metadata", "fields": {"_id": "forged"}}},
            {"add_fields": {"target": "", "fields": {"_index": "secrets", "tagged": true}}},
        ]);
        let line = b"{\"message\":\"m\",\"data_stream\":{\"type\":\"logs\",\"dataset\":\"app\",\"namespace\":\"shop\"},\"@metadata\":{\"_id\":\"a\"}}\n";
        // Added by a Pod's hints: everything but the routing applies.
        let hinted = read(
            &config(
                serde_json::json!({"id": "a", "type": "filestream", "provider_processors": reroute}),
            ),
            "app",
        );
        assert!(hinted.errors.is_empty(), "{hinted:?}");
        let chain = Chain::for_dataset(&hinted.processors.unwrap(), "app");
        let v: serde_json::Value = serde_json::from_slice(&chain.apply(line).unwrap()).unwrap();
        assert_eq!(
            v["data_stream"],
            serde_json::json!({"type": "logs", "dataset": "app", "namespace": "shop"})
        );
        assert_eq!(v["@metadata"], serde_json::json!({"_id": "a"}));
        assert!(v.get("_index").is_none(), "{v}");
        assert_eq!(v["tagged"], true);
        // Written in the policy: routing is the operator's to change.
        let own = read(
            &config(serde_json::json!({"id": "a", "type": "filestream", "processors": reroute})),
            "app",
        );
        let chain = Chain::for_dataset(&own.processors.unwrap(), "app");
        let v: serde_json::Value = serde_json::from_slice(&chain.apply(line).unwrap()).unwrap();
        assert_eq!(v["data_stream"]["namespace"], "other-team");
        assert_eq!(v["@metadata"]["_id"], "forged");
    }

    #[test]
    fn a_pods_script_is_skipped_and_the_policys_runs() {
        let script = serde_json::json!([
            {"script": {"lang": "javascript", "source": "function process(e) { e.Put('ran', true); }"}},
        ]);
        let line = b"{\"message\":\"m\"}\n";
        let hinted = read(
            &config(
                serde_json::json!({"id": "a", "type": "filestream", "provider_processors": script}),
            ),
            "app",
        );
        assert!(
            hinted
                .warnings
                .iter()
                .any(|(at, w)| at == "provider_processors.0.script"
                    && w.contains("cannot run scripts")),
            "{hinted:?}"
        );
        assert!(hinted.processors.is_none(), "nothing is left to run");
        let own = read(
            &config(serde_json::json!({"id": "a", "type": "filestream", "processors": script})),
            "app",
        );
        let chain = Chain::for_dataset(&own.processors.unwrap(), "app");
        assert!(!chain.blocks(), "a fast script runs inline");
        let v: serde_json::Value = serde_json::from_slice(&chain.apply(line).unwrap()).unwrap();
        assert_eq!(v["ran"], true);
    }

    #[test]
    fn unknown_processors_warn_and_bad_ones_fail_with_their_place() {
        let c = config(serde_json::json!({
            "id": "a", "type": "filestream",
            "streams": [{"data_stream": {"dataset": "x"}, "processors": [{"add_cloud_metadata": {}}]}],
            "processors": [{"rename": {"fields": "not a list"}}],
        }));
        let r = read(&c, "generic");
        assert!(
            r.warnings
                .iter()
                .any(|(at, w)| at == "streams.0.processors.0" && w.contains("add_cloud_metadata")),
            "{r:?}"
        );
        assert!(
            r.errors.iter().any(|(at, _)| at.starts_with("processors")),
            "{r:?}"
        );
    }
}
