//! Beats' own hints: Filebeat's `co.elastic.logs/*` and Metricbeat's
//! `co.elastic.metrics/*` Pod annotations, read as their hints builders
//! read them and turned into whole inputs a container's mapping brings.
//! Pure: annotations and the container in, inputs out.
//!
//! Both kinds take the Pod's `<prefix>.<kind>/<key>` and, over them, the
//! container's `<prefix>.<kind>.<container>/<key>`; keys numbered
//! `<n>.<key>` form further configs of their own, as in Beats. Values may
//! read `${data.host}` (the Pod's IP), `${data.port}` (the port the config
//! is built for), `${data.ports.<name>}`, `${data.kubernetes.…}` and
//! `${kubernetes.…}`; a value whose variable does not resolve is left out.
//!
//! Logs (the container's own file, `/var/log/containers/*-<id>.log`):
//! - `enabled: false` (or Filebeat 6's `disable: true`) turns its logs off,
//!   the `container_logs` of Elastic Agent's hints too;
//! - `multiline.*`, `json.*`, `include_lines`, `exclude_lines`, `stream`
//!   and `processors.*` build a `filestream` input with them, which then
//!   replaces the `container_logs` one (the file is read once);
//! - `module`, `fileset`, `pipeline` and `raw` are refused with a reason
//!   (no Filebeat modules or per-input pipelines; a raw input from an
//!   annotation could read any file of the node).
//!
//! Metrics (`module`, required):
//! - `prometheus` builds a `prometheus/metrics` input per selected host
//!   and metricset (default `collector`), `period` 1m and `timeout` 3s by
//!   default, `metrics_path`, `ssl.*`, `metrics_filters.*`, `processors.*`;
//!   `raw` (JSON) gives the module configs whole, with the same keys;
//! - hosts are selected as Metricbeat selects them for a container's
//!   ports: a host naming `${data.port}` or the port, or with no port
//!   declared one naming `${data.host}` or `${data.ports.…}`;
//! - other modules, `username`, `password` and `namespace` are refused: an
//!   annotation must not make the agent send its credentials elsewhere.

use std::collections::BTreeMap;

use leasehold_policy::{Map, Value};

use super::hint_hosts;
use super::hints::{HintSettings, collect, fill, processors, put};

/// The container the inputs are built for.
#[derive(Debug, Clone, Copy)]
pub struct Container<'a> {
    /// Its name (`co.elastic.logs.<name>/…`).
    pub name: &'a str,
    /// Its runtime id, without the runtime's prefix.
    pub id: &'a str,
    /// The ports it declares (Metricbeat builds a config per port).
    pub ports: &'a [(String, Option<String>)],
}

/// What Beats' hints make of one container.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BeatsHinted {
    /// Whole inputs, each with an `id` unique for the container.
    pub inputs: Vec<Value>,
    /// Why hints were not acted on.
    pub refused: Vec<String>,
    /// Its logs are taken care of here (built, or turned off): the
    /// `container_logs` of Elastic Agent's hints must not read them too.
    pub logs_taken: bool,
}

/// Metricbeat's hints defaults.
const DEFAULT_PERIOD: &str = "1m";
const DEFAULT_TIMEOUT: &str = "3s";

/// Keys of a log config that build an input.
const LOG_KEYS: [&str; 6] = [
    "multiline",
    "json",
    "include_lines",
    "exclude_lines",
    "stream",
    "processors",
];

/// The inputs Beats' hints in `annotations` build for `c`. `meta` is the
/// container mapping's variables (what `${kubernetes.…}` reads), with the
/// Pod's IP at `pod.ip`.
pub fn beats_hinted(
    s: &HintSettings,
    annotations: &BTreeMap<String, String>,
    meta: &Value,
    pod_ports: &[(String, Option<String>)],
    c: Container<'_>,
) -> BeatsHinted {
    let mut out = BeatsHinted::default();
    let data = Data::new(meta, pod_ports);
    let prefix = s.prefix.as_str();
    let logs = collect(prefix, "logs", annotations, Some(c.name));
    if !logs.is_empty() {
        logs_inputs(prefix, &logs, &data, c, &mut out);
    }
    let metrics = collect(prefix, "metrics", annotations, Some(c.name));
    if !metrics.is_empty() {
        metrics_inputs(s, &metrics, &data, c, &mut out);
    }
    out
}

fn logs_inputs(
    prefix: &str,
    hints: &BTreeMap<String, String>,
    data: &Data,
    c: Container<'_>,
    out: &mut BeatsHinted,
) {
    let off = |k: &str, v: &str| hints.get(k).is_some_and(|x| x.trim() == v);
    if off("enabled", "false") || off("disable", "true") {
        out.logs_taken = true;
        return;
    }
    for key in ["module", "fileset", "pipeline", "raw"] {
        if hints
            .keys()
            .any(|k| k == key || k.starts_with(&format!("{key}.")))
        {
            out.refused.push(format!(
                "{prefix}.logs/{key} on container {}: {}",
                c.name,
                match key {
                    "raw" => "not read: an input written in an annotation could read any file of the node; use the other co.elastic.logs hints",
                    "pipeline" => "not acted on: the elasticsearch output sets no ingest pipeline per input",
                    _ => "not acted on: leasehold has no Filebeat modules; the container's logs ship without the module's parsing",
                }
            ));
        }
    }
    for (n, group) in groups(hints).into_iter().enumerate() {
        if !group.keys().any(|k| {
            LOG_KEYS
                .iter()
                .any(|l| k == l || k.starts_with(&format!("{l}.")))
        }) {
            continue;
        }
        out.logs_taken = true;
        out.inputs.push(log_input(&group, data, c, n));
    }
}

/// A `filestream` input of the container's log file, as Filebeat's
/// default hints config reads it, with the hints applied.
fn log_input(hints: &BTreeMap<String, String>, data: &Data, c: Container<'_>, n: usize) -> Value {
    let stream = hints
        .get("stream")
        .map(|s| s.trim())
        .filter(|s| ["all", "stdout", "stderr"].contains(s))
        .unwrap_or("all");
    let mut container = Map::new();
    container.insert("format", Value::Str("auto".into()));
    container.insert("stream", Value::Str(stream.into()));
    let mut parsers = vec![one("container", Value::Map(container))];
    if let Some(m) = sub_map(hints, "multiline", data) {
        parsers.push(one("multiline", Value::Map(m)));
    }
    if let Some(mut j) = sub_map(hints, "json", data) {
        // Filebeat's log input decodes under `json` unless
        // `keys_under_root: true`, which is ndjson's root target.
        let under_root = j.remove("keys_under_root") == Some(Value::Bool(true));
        let target = if under_root { "" } else { "json" };
        j.insert("target", Value::Str(target.into()));
        parsers.push(one("ndjson", Value::Map(j)));
    }
    let mut procs = Vec::new();
    // Filebeat keeps the lines `include_lines` matches, then drops those
    // `exclude_lines` matches; here the same as the input's first
    // processors, on `message`.
    let regexps = |key: &str| -> Vec<Value> {
        hints
            .get(key)
            .map(|v| list(v))
            .unwrap_or_default()
            .into_iter()
            .map(|p| one("regexp", one("message", Value::Str(p))))
            .collect()
    };
    let include = regexps("include_lines");
    if !include.is_empty() {
        procs.push(drop_when(one("not", one("or", Value::List(include)))));
    }
    let exclude = regexps("exclude_lines");
    if !exclude.is_empty() {
        procs.push(drop_when(one("or", Value::List(exclude))));
    }
    procs.extend(processors(hints));
    let mut stream_cfg = Map::new();
    stream_cfg.insert(
        "data_stream",
        Value::from_json(
            &serde_json::json!({"dataset": "kubernetes.container_logs", "type": "logs"}),
        ),
    );
    stream_cfg.insert(
        "paths",
        Value::List(vec![Value::Str(format!(
            "/var/log/containers/*-{}.log",
            c.id
        ))]),
    );
    stream_cfg.insert(
        "prospector",
        Value::from_json(&serde_json::json!({"scanner": {"symlinks": true}})),
    );
    stream_cfg.insert("parsers", Value::List(parsers));
    let mut input = Map::new();
    input.insert("id", Value::Str(format!("hints-logs-{n}")));
    input.insert("type", Value::Str("filestream".into()));
    input.insert("streams", Value::List(vec![Value::Map(stream_cfg)]));
    if !procs.is_empty() {
        input.insert("processors", Value::List(procs));
    }
    Value::Map(input)
}

fn metrics_inputs(
    s: &HintSettings,
    hints: &BTreeMap<String, String>,
    data: &Data,
    c: Container<'_>,
    out: &mut BeatsHinted,
) {
    let prefix = s.prefix.as_str();
    for key in ["username", "password", "namespace"] {
        if hints.contains_key(key) {
            out.refused.push(format!(
                "{prefix}.metrics/{key} on container {}: not read: an annotation does not choose credentials or namespaces for the agent",
                c.name
            ));
        }
    }
    let mut configs: Vec<BTreeMap<String, String>> = Vec::new();
    match hints.get("raw") {
        Some(raw) => match raw_configs(raw) {
            Ok(list) => configs = list,
            Err(why) => out.refused.push(format!(
                "{prefix}.metrics/raw on container {}: {why}",
                c.name
            )),
        },
        None => configs = groups(hints),
    }
    let ports: Vec<&str> = c.ports.iter().map(|(p, _)| p.as_str()).collect();
    let mut n = 0;
    for config in configs {
        let Some(module) = config.get("module").map(|m| sanitize(m)) else {
            continue;
        };
        if module.is_empty() {
            continue;
        }
        if module != "prometheus" {
            out.refused.push(format!(
                "{prefix}.metrics/module: {module} on container {}: not built; hints build the prometheus module only (other modules' inputs may send the agent's credentials to the annotated host)",
                c.name
            ));
            continue;
        }
        let Some(mut hosts) = select_hosts(&config, &ports, data) else {
            continue;
        };
        // The agent connects there: only the Pod itself, unless allowed.
        let pod_ip = data.lookup("host", None);
        hosts.retain(|h| {
            let Some(h) = h else { return true };
            match hint_hosts::check(h, pod_ip.as_deref(), &s.allowed_hosts) {
                Ok(()) => true,
                Err(why) => {
                    out.refused.push(format!(
                        "{prefix}.metrics/hosts on container {}: {why}",
                        c.name
                    ));
                    false
                }
            }
        });
        let metricsets = config
            .get("metricsets")
            .map(|m| list(m))
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| vec!["collector".to_string()]);
        let text = |k: &str, default: Option<&str>| {
            config
                .get(k)
                .and_then(|v| data.resolve(v, None))
                .or(default.map(str::to_string))
        };
        let mut common = Map::new();
        for (key, default) in [
            ("period", Some(DEFAULT_PERIOD)),
            ("timeout", Some(DEFAULT_TIMEOUT)),
            ("metrics_path", None),
        ] {
            if let Some(v) = text(key, default) {
                common.insert(key, Value::Str(v));
            }
        }
        if let Some(ssl) = sub_map(&config, "ssl", data) {
            common.insert("ssl", Value::Map(ssl));
        }
        let mut filters = Map::new();
        for key in ["include", "exclude"] {
            if let Some(v) = config.get(&format!("metrics_filters.{key}")) {
                let l = list(v).into_iter().map(Value::Str).collect();
                filters.insert(key, Value::List(l));
            }
        }
        if !filters.is_empty() {
            common.insert("metrics_filters", Value::Map(filters));
        }
        let procs = processors(&config);
        for host in hosts {
            let streams = metricsets
                .iter()
                .map(|ms| {
                    let mut s = common.clone();
                    s.insert("metricsets", Value::List(vec![Value::Str(ms.clone())]));
                    s.insert(
                        "data_stream",
                        Value::from_json(
                            &serde_json::json!({"dataset": format!("{module}.{ms}"), "type": "metrics"}),
                        ),
                    );
                    if let Some(h) = &host {
                        s.insert("hosts", Value::List(vec![Value::Str(h.clone())]));
                    }
                    Value::Map(s)
                })
                .collect();
            let mut input = Map::new();
            input.insert("id", Value::Str(format!("hints-metrics-{module}-{n}")));
            input.insert("type", Value::Str(format!("{module}/metrics")));
            input.insert("streams", Value::List(streams));
            if !procs.is_empty() {
                input.insert("processors", Value::List(procs.clone()));
            }
            out.inputs.push(Value::Map(input));
            n += 1;
        }
    }
}

/// The hosts of a module config for a container with `ports`, as
/// Metricbeat selects them for each of its port events (or its one
/// event without a port), resolved; `None` when hosts were given and none
/// is for this container; `Some([None])` when none was given.
fn select_hosts(
    config: &BTreeMap<String, String>,
    ports: &[&str],
    data: &Data,
) -> Option<Vec<Option<String>>> {
    let Some(given) = config
        .get("hosts")
        .map(|h| list(h))
        .filter(|h| !h.is_empty())
    else {
        return Some(vec![None]);
    };
    let mut out: Vec<Option<String>> = Vec::new();
    let events: Vec<Option<&str>> = if ports.is_empty() {
        vec![None]
    } else {
        ports.iter().map(|p| Some(*p)).collect()
    };
    for port in events {
        for h in &given {
            let picked = match port {
                None => h.contains("data.ports.") || h.contains("data.host"),
                Some(p) => h.contains("data.port") || names_port(h, p),
            };
            if picked
                && let Some(r) = data.resolve(h, port)
                && !out.contains(&Some(r.clone()))
            {
                out.push(Some(r));
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Whether `host` names `:port`, not followed by another digit (`:80`
/// is not `:8080`).
fn names_port(host: &str, port: &str) -> bool {
    let needle = format!(":{port}");
    host.match_indices(&needle).any(|(i, _)| {
        !host[i + needle.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

/// `raw`: a JSON module config or a list of them, flattened to dotted
/// keys as annotations would give them.
fn raw_configs(raw: &str) -> Result<Vec<BTreeMap<String, String>>, String> {
    let json: serde_json::Value =
        serde_json::from_str(raw).map_err(|e| format!("is not JSON: {e}"))?;
    let items = match json {
        serde_json::Value::Array(items) => items,
        one => vec![one],
    };
    items
        .into_iter()
        .map(|item| {
            let serde_json::Value::Object(_) = item else {
                return Err("must be a JSON object or a list of them".into());
            };
            let mut flat = BTreeMap::new();
            flatten("", &item, &mut flat);
            Ok(flat)
        })
        .collect()
}

fn flatten(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                // Processors keep their JSON settings, as their hints do.
                if key == "processors" {
                    if let serde_json::Value::Array(list) = v {
                        for (i, p) in list.iter().enumerate() {
                            if let serde_json::Value::Object(p) = p {
                                for (name, settings) in p {
                                    out.insert(
                                        format!("processors.{}.{name}", i + 1),
                                        settings.to_string(),
                                    );
                                }
                            }
                        }
                    }
                    continue;
                }
                flatten(&key, v, out);
            }
        }
        serde_json::Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// The configs of a hints set: the unnumbered keys, then each `<n>.` group
/// in number order (Beats' list form).
fn groups(hints: &BTreeMap<String, String>) -> Vec<BTreeMap<String, String>> {
    let mut plain = BTreeMap::new();
    let mut numbered: BTreeMap<u64, BTreeMap<String, String>> = BTreeMap::new();
    for (k, v) in hints {
        match k.split_once('.') {
            Some((n, rest)) if n.parse::<u64>().is_ok() => {
                numbered
                    .entry(n.parse().unwrap_or(0))
                    .or_default()
                    .insert(rest.to_string(), v.clone());
            }
            _ => {
                plain.insert(k.clone(), v.clone());
            }
        }
    }
    let mut out = Vec::new();
    if !plain.is_empty() {
        out.push(plain);
    }
    out.extend(numbered.into_values());
    out
}

/// The hints under `<key>.` as a map, values typed as Beats' settings
/// read them (`true`, `5`, lists in JSON), those with an unresolved
/// variable left out; `None` when there are none.
fn sub_map(hints: &BTreeMap<String, String>, key: &str, data: &Data) -> Option<Map> {
    let prefix = format!("{key}.");
    let mut m = Map::new();
    for (k, v) in hints {
        if let Some(rest) = k.strip_prefix(&prefix)
            && let Some(v) = data.resolve(v, None)
        {
            // A pattern is text even when it reads as a number.
            let value = if rest == "pattern" {
                Value::Str(v)
            } else {
                typed(&v)
            };
            put(&mut m, rest, value);
        }
    }
    (!m.is_empty()).then_some(m)
}

/// Text as the setting it stands for: booleans, integers and JSON lists
/// typed, the rest text.
fn typed(v: &str) -> Value {
    match v.trim() {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        t if t.parse::<i64>().is_ok() => Value::Int(t.parse().unwrap_or(0)),
        t if t.starts_with('[') => serde_json::from_str::<serde_json::Value>(t)
            .map_or_else(|_| Value::Str(v.to_string()), |j| Value::from_json(&j)),
        _ => Value::Str(v.to_string()),
    }
}

/// A hint's list: a JSON list of strings, or comma-separated text.
fn list(v: &str) -> Vec<String> {
    if let Ok(serde_json::Value::Array(items)) = serde_json::from_str(v.trim()) {
        return items
            .into_iter()
            .map(|i| match i {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            })
            .collect();
    }
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Module names as Beats sanitises them: letters, digits, `_` and `-`.
fn sanitize(m: &str) -> String {
    m.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect()
}

fn one(key: &str, value: Value) -> Value {
    let mut m = Map::new();
    m.insert(key, value);
    Value::Map(m)
}

fn drop_when(condition: Value) -> Value {
    one("drop_event", one("when", condition))
}

/// What `${data.…}` and `${kubernetes.…}` read.
struct Data<'a> {
    meta: &'a Value,
    /// The Pod's named ports.
    ports: Map,
}

impl<'a> Data<'a> {
    fn new(meta: &'a Value, pod_ports: &[(String, Option<String>)]) -> Data<'a> {
        let mut ports = Map::new();
        for (port, name) in pod_ports {
            if let Some(name) = name {
                ports.insert(name.clone(), Value::Str(port.clone()));
            }
        }
        Data { meta, ports }
    }

    /// `value` with its variables replaced; `port` is what `${data.port}`
    /// reads. `None` when one does not resolve to text, or the result is
    /// empty.
    fn resolve(&self, value: &str, port: Option<&str>) -> Option<String> {
        fill(value, |name| self.lookup(name, port))
    }

    fn lookup(&self, name: &str, port: Option<&str>) -> Option<String> {
        let text = |v: Option<&Value>| match v? {
            Value::Str(t) => Some(t.clone()),
            _ => None,
        };
        match name.strip_prefix("data.").unwrap_or(name) {
            "host" => text(self.meta.lookup_path("pod.ip")),
            "port" => port.map(str::to_string),
            n => {
                if let Some(p) = n.strip_prefix("ports.") {
                    text(self.ports.get(p))
                } else {
                    text(self.meta.lookup_path(n.strip_prefix("kubernetes.")?))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::hints::annotations;
    use super::*;
    use serde_json::json;

    fn meta() -> Value {
        Value::from_json(&json!({
            "pod": {"name": "web-0", "ip": "10.1.2.3"},
            "namespace": "shop",
            "container": {"name": "app", "id": "c0ffee"},
        }))
    }

    fn ports(list: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        list.iter()
            .map(|(p, n)| (p.to_string(), n.map(str::to_string)))
            .collect()
    }

    fn build(a: &[(&str, &str)], name: &str, own: &[(String, Option<String>)]) -> BeatsHinted {
        let all = ports(&[("8080", Some("http")), ("9090", Some("metrics"))]);
        beats_hinted(
            &HintSettings::default(),
            &annotations(a),
            &meta(),
            &all,
            Container {
                name,
                id: "c0ffee",
                ports: own,
            },
        )
    }

    fn json_of(v: &Value) -> serde_json::Value {
        serde_json::to_value(v).unwrap()
    }

    /// The first host of each input built.
    fn first_hosts(h: &BeatsHinted) -> Vec<serde_json::Value> {
        h.inputs
            .iter()
            .map(|i| json_of(i)["streams"][0]["hosts"][0].clone())
            .collect()
    }

    #[test]
    fn metricbeats_prometheus_example_scrapes_the_annotated_port() {
        // Metricbeat's documented example: module, hosts on the Pod's
        // address, a metrics path.
        let a = [
            ("co.elastic.metrics/module", "prometheus"),
            ("co.elastic.metrics/hosts", "${data.host}:9090"),
            ("co.elastic.metrics/metrics_path", "/prometheus/metrics"),
            ("co.elastic.metrics/period", "10s"),
            ("co.elastic.metrics/metrics_filters.include", "up, http_*"),
        ];
        let own = ports(&[("9090", Some("metrics"))]);
        let h = build(&a, "app", &own);
        assert_eq!(h.inputs.len(), 1, "{h:?}");
        assert_eq!(
            json_of(&h.inputs[0]),
            json!({
                "id": "hints-metrics-prometheus-0",
                "type": "prometheus/metrics",
                "streams": [{
                    "period": "10s", "timeout": "3s",
                    "metrics_path": "/prometheus/metrics",
                    "metrics_filters": {"include": ["up", "http_*"]},
                    "metricsets": ["collector"],
                    "data_stream": {"dataset": "prometheus.collector", "type": "metrics"},
                    "hosts": ["10.1.2.3:9090"],
                }],
            })
        );
        assert!(h.refused.is_empty() && !h.logs_taken, "{h:?}");
        // A container declaring another port is not the one scraped.
        let other = ports(&[("8080", Some("http"))]);
        assert!(build(&a, "sidecar", &other).inputs.is_empty());
        // `:90` is not `:9090`.
        assert!(!names_port("10.1.2.3:9090", "90"));
        assert!(names_port("tcp(${data.host}:3306)/", "3306"));
    }

    #[test]
    fn data_port_builds_one_input_per_declared_port_and_defaults_apply() {
        let a = [
            ("co.elastic.metrics/module", "prometheus"),
            ("co.elastic.metrics/hosts", "${data.host}:${data.port}"),
        ];
        let own = ports(&[("8080", None), ("9090", None)]);
        let h = build(&a, "app", &own);
        let hosts = first_hosts(&h);
        assert_eq!(hosts, [json!("10.1.2.3:8080"), json!("10.1.2.3:9090")]);
        let s = &json_of(&h.inputs[0])["streams"][0];
        assert_eq!(
            (s["period"].clone(), s["timeout"].clone()),
            (json!("1m"), json!("3s"))
        );
        // No port declared: a `${data.port}` host has nothing to name.
        assert!(build(&a, "app", &[]).inputs.is_empty());
        // Without a port, a host on `${data.ports.<name>}` is built.
        let named = [
            ("co.elastic.metrics/module", "prometheus"),
            (
                "co.elastic.metrics/hosts",
                "${data.host}:${data.ports.metrics}",
            ),
        ];
        let h = build(&named, "app", &[]);
        assert_eq!(
            json_of(&h.inputs[0])["streams"][0]["hosts"][0],
            "10.1.2.3:9090"
        );
    }

    #[test]
    fn other_modules_and_credentials_are_refused_with_a_reason() {
        let a = [
            ("co.elastic.metrics/module", "redis"),
            ("co.elastic.metrics/hosts", "${data.host}:6379"),
            ("co.elastic.metrics/password", "secret"),
        ];
        let h = build(&a, "app", &[]);
        assert!(h.inputs.is_empty());
        assert_eq!(h.refused.len(), 2, "{h:?}");
        assert!(
            h.refused.iter().any(|r| r.contains("module: redis")),
            "{h:?}"
        );
        assert!(h.refused.iter().all(|r| !r.contains("secret")), "{h:?}");
    }

    #[test]
    fn a_host_that_is_not_the_pods_own_is_refused_and_the_pods_own_kept() {
        // The port is the container's, the host another's: not scraped.
        let own = ports(&[("9090", Some("metrics"))]);
        let a = [
            ("co.elastic.metrics/module", "prometheus"),
            (
                "co.elastic.metrics/hosts",
                "other-host:9090, ${data.host}:9090",
            ),
        ];
        let h = build(&a, "app", &own);
        let hosts = first_hosts(&h);
        assert_eq!(hosts, [json!("10.1.2.3:9090")], "{h:?}");
        assert_eq!(h.refused.len(), 1, "{h:?}");
        assert!(h.refused[0].contains("\"other-host\""), "{h:?}");
        let raw = [(
            "co.elastic.metrics/raw",
            r#"{"module":"prometheus","hosts":"http://kubernetes.default.svc:443"}"#,
        )];
        let h = build(&raw, "app", &ports(&[("443", None)]));
        assert!(h.inputs.is_empty(), "{h:?}");
        assert!(h.refused[0].contains("kubernetes.default.svc"), "{h:?}");
    }

    #[test]
    fn raw_and_numbered_configs_build_inputs_of_their_own() {
        let raw = [(
            "co.elastic.metrics/raw",
            r#"[{"module":"prometheus","metricsets":["collector"],"hosts":"${data.host}:9090","period":"5s","processors":[{"add_tags":{"tags":["raw"]}}]}]"#,
        )];
        let h = build(&raw, "app", &[]);
        let i = json_of(&h.inputs[0]);
        assert_eq!(i["streams"][0]["hosts"][0], "10.1.2.3:9090", "{i}");
        assert_eq!(i["streams"][0]["period"], "5s", "{i}");
        assert_eq!(
            i["processors"],
            json!([{"add_tags": {"tags": ["raw"]}}]),
            "{i}"
        );
        let numbered = [
            ("co.elastic.metrics/1.module", "prometheus"),
            ("co.elastic.metrics/1.hosts", "${data.host}:9090"),
            ("co.elastic.metrics/2.module", "prometheus"),
            ("co.elastic.metrics/2.hosts", "${data.host}:8080"),
            ("co.elastic.metrics/2.metricsets", "collector"),
        ];
        let h = build(&numbered, "app", &[]);
        let ids: Vec<serde_json::Value> =
            h.inputs.iter().map(|i| json_of(i)["id"].clone()).collect();
        assert_eq!(
            ids,
            [
                json!("hints-metrics-prometheus-0"),
                json!("hints-metrics-prometheus-1")
            ]
        );
    }

    #[test]
    fn filebeats_multiline_and_line_filters_build_the_containers_log_input() {
        let a = [
            ("co.elastic.logs/multiline.pattern", "^\\["),
            ("co.elastic.logs/multiline.negate", "true"),
            ("co.elastic.logs/multiline.match", "after"),
            ("co.elastic.logs/exclude_lines", "^DEBUG"),
            ("co.elastic.logs/json.keys_under_root", "true"),
            (
                "co.elastic.logs.app/processors.add_tags",
                r#"{"tags": ["web"]}"#,
            ),
            ("co.elastic.logs.other/exclude_lines", "^TRACE"),
        ];
        let h = build(&a, "app", &[]);
        assert!(h.logs_taken && h.refused.is_empty(), "{h:?}");
        assert_eq!(
            json_of(&h.inputs[0]),
            json!({
                "id": "hints-logs-0",
                "type": "filestream",
                "streams": [{
                    "data_stream": {"dataset": "kubernetes.container_logs", "type": "logs"},
                    "paths": ["/var/log/containers/*-c0ffee.log"],
                    "prospector": {"scanner": {"symlinks": true}},
                    "parsers": [
                        {"container": {"format": "auto", "stream": "all"}},
                        {"multiline": {"pattern": "^\\[", "negate": true, "match": "after"}},
                        {"ndjson": {"target": ""}},
                    ],
                }],
                "processors": [
                    {"drop_event": {"when": {"or": [{"regexp": {"message": "^DEBUG"}}]}}},
                    {"add_tags": {"tags": ["web"]}},
                ],
            })
        );
    }

    #[test]
    fn json_hints_decode_under_json_unless_keys_under_root() {
        // Without `keys_under_root` Filebeat decodes under `json`.
        for (hint, ndjson) in [
            (
                ("co.elastic.logs/json.add_error_key", "true"),
                json!({"add_error_key": true, "target": "json"}),
            ),
            (
                ("co.elastic.logs/json.keys_under_root", "false"),
                json!({"target": "json"}),
            ),
        ] {
            let h = build(&[hint], "app", &[]);
            assert_eq!(
                json_of(&h.inputs[0])["streams"][0]["parsers"][1],
                json!({ "ndjson": ndjson })
            );
        }
    }

    #[test]
    fn logs_turned_off_or_asked_of_modules_say_what_happens() {
        let h = build(&[("co.elastic.logs/enabled", "false")], "app", &[]);
        assert!(h.logs_taken && h.inputs.is_empty(), "{h:?}");
        let h = build(&[("co.elastic.logs/disable", "true")], "app", &[]);
        assert!(h.logs_taken, "Filebeat 6's form");
        // A module alone: the default container logs stay, and the module
        // is named as not acted on.
        let h = build(&[("co.elastic.logs/module", "nginx")], "app", &[]);
        assert!(!h.logs_taken && h.inputs.is_empty(), "{h:?}");
        assert!(h.refused[0].contains("co.elastic.logs/module"), "{h:?}");
        let h = build(&[("co.elastic.logs/raw", "{}")], "app", &[]);
        assert!(h.refused[0].contains("any file"), "{h:?}");
        // Nothing for logs: nothing taken, nothing built.
        assert_eq!(build(&[], "app", &[]), BeatsHinted::default());
    }
}
