//! Hints: Elastic Agent's `co.elastic.hints/*` Pod annotations turned into
//! the `kubernetes.hints.*` variables its templates read (Elastic's
//! `templates.d`, e.g. `${kubernetes.hints.redis.info.period|'10s'}` under
//! `condition: ${kubernetes.hints.redis.info.enabled} == true or
//! ${kubernetes.hints.redis.enabled} == true`). Pure: annotations and the
//! mapping's other variables in, the `hints` variables and processors out.
//!
//! - `<prefix>.hints/<key>` applies to every container of the Pod;
//!   `<prefix>.hints.<container>/<key>` to that container, and wins.
//! - Without `package` a container publishes only when
//!   `default_container_logs` is on: `container_logs.enabled` and
//!   `container_id`, which Elastic's `container_logs.yml` template reads.
//! - `${kubernetes.…}` inside a hint's value reads the mapping's own
//!   variables (`${kubernetes.pod.ip}:6379`); a hint whose variable does
//!   not resolve is left out, as Elastic leaves it out.
//! - `processors.<name>` (JSON settings) and `processors.<n>.<name>.<key>`
//!   become processors of the inputs the mapping renders.
//! - Not read here: `parsers` hints. Beats' `co.elastic.logs/*` and
//!   `co.elastic.metrics/*` are [`super::beats_hints`].

use std::collections::BTreeMap;

use leasehold_policy::{Map, Value};

/// The hint keys that a package and each of its data streams take.
const SETTINGS: [&str; 7] = [
    "host",
    "period",
    "timeout",
    "metrics_path",
    "username",
    "password",
    "stream",
];

/// `providers.kubernetes.hints.*` and `prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintSettings {
    /// `hints.enabled`: mappings publish `hints` instead of the template
    /// variables, as in Elastic Agent.
    pub enabled: bool,
    /// `hints.default_container_logs` (default true).
    pub default_container_logs: bool,
    /// `prefix` (default `co.elastic`).
    pub prefix: String,
    /// `hints.allowed_hosts`: hosts other than the Pod's own IP that a
    /// hint may name (`*`: any). Empty by default: a hint points the
    /// agent at its own Pod only ([`super::hint_hosts`]).
    pub allowed_hosts: Vec<String>,
}

impl Default for HintSettings {
    fn default() -> Self {
        HintSettings {
            enabled: false,
            default_container_logs: true,
            prefix: "co.elastic".into(),
            allowed_hosts: Vec::new(),
        }
    }
}

/// What a mapping publishes in hints mode.
#[derive(Debug, Clone, PartialEq)]
pub struct Hinted {
    /// The mapping's variables: `{hints: …}`.
    pub vars: Value,
    /// Processors for the inputs it renders.
    pub processors: Vec<Value>,
    /// Why hints were not acted on (a host that is not the Pod's).
    pub refused: Vec<String>,
}

/// The hints of one mapping: the Pod's (`container` none) or a
/// container's (`(name, id)`). `meta` is the mapping's template variables
/// (what `${kubernetes.…}` inside a hint reads). `None`: the mapping is not
/// published.
pub fn hinted(
    s: &HintSettings,
    annotations: &BTreeMap<String, String>,
    meta: &Value,
    container: Option<(&str, &str)>,
) -> Option<Hinted> {
    let hints = collect(
        &s.prefix,
        "hints",
        annotations,
        container.map(|(name, _)| name),
    );
    let processors = processors(&hints);
    let mut out = Map::new();
    let mut refused = Vec::new();
    let package = hints
        .get("package")
        .filter(|p| !p.trim().is_empty())
        .filter(|_| match foreign_host(s, &hints, meta) {
            None => true,
            Some(why) => {
                let on = container
                    .map_or_else(|| "the Pod".to_string(), |(c, _)| format!("container {c}"));
                refused.push(format!(
                    "{}.hints package on {on} not published: {why}",
                    s.prefix
                ));
                false
            }
        });
    match package {
        Some(package) => {
            let mut pkg = Map::new();
            if container.is_some() {
                put(&mut pkg, "container_logs.enabled", Value::Bool(true));
            }
            let common: Vec<(&str, String)> = SETTINGS
                .iter()
                .filter_map(|k| Some((*k, resolve(hints.get(*k)?, meta)?)))
                .collect();
            for (k, v) in &common {
                pkg.insert(*k, Value::Str(v.clone()));
            }
            let streams: Vec<&str> = hints
                .get("data_streams")
                .map(|l| {
                    l.split(',')
                        .map(str::trim)
                        .filter(|d| !d.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            if streams.is_empty() {
                pkg.insert("enabled", Value::Bool(true));
            }
            for stream in streams {
                let mut st = Map::new();
                st.insert("enabled", Value::Bool(true));
                for (k, v) in &common {
                    st.insert(*k, Value::Str(v.clone()));
                }
                for k in SETTINGS {
                    if let Some(v) = hints
                        .get(&format!("{stream}.{k}"))
                        .and_then(|v| resolve(v, meta))
                    {
                        st.insert(k, Value::Str(v));
                    }
                }
                put(&mut pkg, stream, Value::Map(st));
            }
            put(&mut out, package.trim(), Value::Map(pkg));
        }
        None => {
            container.filter(|_| s.default_container_logs)?;
            put(&mut out, "container_logs.enabled", Value::Bool(true));
        }
    }
    if let Some((_, id)) = container {
        out.insert("container_id", Value::Str(id.to_string()));
    }
    let mut vars = Map::new();
    vars.insert("hints", Value::Map(out));
    Some(Hinted {
        vars: Value::Map(vars),
        processors,
        refused,
    })
}

/// Why a `host` hint (the package's or a data stream's) may not be used:
/// it names a host that is not the Pod's own ([`super::hint_hosts`]).
fn foreign_host(
    s: &HintSettings,
    hints: &BTreeMap<String, String>,
    meta: &Value,
) -> Option<String> {
    let pod_ip = match meta.lookup_path("pod.ip") {
        Some(Value::Str(ip)) => Some(ip.as_str()),
        _ => None,
    };
    hints
        .iter()
        .filter(|(k, _)| !k.starts_with("processors."))
        .filter(|(k, _)| *k == "host" || k.ends_with(".host"))
        .filter_map(|(k, v)| Some((k, resolve(v, meta)?)))
        .find_map(|(k, host)| {
            super::hint_hosts::check(&host, pod_ip, &s.allowed_hosts)
                .err()
                .map(|why| format!("`{k}`: {why}"))
        })
}

/// The hints of one `kind` (`hints`, `logs`, `metrics`) that apply: the
/// Pod's, then the container's over them, keyed by what follows the `/`
/// (`package`, `info.period`, `processors.1.x`).
pub(super) fn collect(
    prefix: &str,
    kind: &str,
    annotations: &BTreeMap<String, String>,
    container: Option<&str>,
) -> BTreeMap<String, String> {
    let pod = format!("{prefix}.{kind}/");
    let own = container.map(|c| format!("{prefix}.{kind}.{c}/"));
    let mut hints = BTreeMap::new();
    for (k, v) in annotations {
        if let Some(key) = k.strip_prefix(&pod) {
            hints.entry(key.to_string()).or_insert_with(|| v.clone());
        }
    }
    if let Some(own) = own {
        for (k, v) in annotations {
            if let Some(key) = k.strip_prefix(&own) {
                hints.insert(key.to_string(), v.clone());
            }
        }
    }
    hints
}

/// `${kubernetes.<path>}` references in `value` replaced from `meta`;
/// `None` when one does not resolve to text, or the value is empty.
fn resolve(value: &str, meta: &Value) -> Option<String> {
    fill(value, |name| {
        let path = name.strip_prefix("kubernetes.").unwrap_or(name);
        match meta.lookup_path(path)? {
            Value::Str(t) => Some(t.clone()),
            _ => None,
        }
    })
}

/// `value` with every `${<name>}` replaced by `lookup(name)`: how a hint's
/// value reads variables. `None` when a reference is unclosed or does not
/// resolve, or the result is empty (a hint left out, as Elastic leaves it).
pub(super) fn fill(value: &str, lookup: impl Fn(&str) -> Option<String>) -> Option<String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}')? + start;
        out.push_str(&lookup(&rest[start + 2..end])?);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    (!out.is_empty()).then_some(out)
}

/// `processors.<name>: <json>` and `processors.<n>.<name>[.<key>…]:
/// <value>`, numbered ones first in their order.
pub(super) fn processors(hints: &BTreeMap<String, String>) -> Vec<Value> {
    let mut numbered: BTreeMap<u64, Map> = BTreeMap::new();
    let mut named = Vec::new();
    for (key, raw) in hints {
        let Some(rest) = key.strip_prefix("processors.") else {
            continue;
        };
        // Annotation values are text: JSON (`{…}`, `[…]`, `true`, `5`)
        // where it parses, else the text itself.
        let value = serde_json::from_str::<serde_json::Value>(raw)
            .map_or_else(|_| Value::Str(raw.clone()), |j| Value::from_json(&j));
        match rest.split_once('.') {
            Some((n, path)) if n.parse::<u64>().is_ok() => {
                put(
                    numbered.entry(n.parse().unwrap_or(0)).or_default(),
                    path,
                    value,
                );
            }
            _ => {
                let mut one = Map::new();
                put(&mut one, rest, value);
                named.push(Value::Map(one));
            }
        }
    }
    numbered
        .into_values()
        .map(Value::Map)
        .chain(named)
        .collect()
}

/// Puts `value` at the dotted `path` of `m`, making maps on the way.
pub(super) fn put(m: &mut Map, path: &str, value: Value) {
    match path.split_once('.') {
        None => m.insert(path, value),
        Some((head, rest)) => {
            let mut inner = match m.remove(head) {
                Some(Value::Map(inner)) => inner,
                _ => Map::new(),
            };
            put(&mut inner, rest, value);
            m.insert(head, Value::Map(inner));
        }
    }
}

/// Annotations from pairs, for tests of what reads them.
#[cfg(test)]
pub(super) fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta() -> Value {
        Value::from_json(
            &json!({"pod": {"name": "redis-0", "ip": "10.1.2.3"}, "namespace": "shop"}),
        )
    }

    fn on() -> HintSettings {
        HintSettings {
            enabled: true,
            ..HintSettings::default()
        }
    }

    fn json_of(v: &Value) -> serde_json::Value {
        serde_json::to_value(v).unwrap()
    }

    #[test]
    fn elastics_redis_example_publishes_per_data_stream_hints() {
        // Elastic's documented example: package, data streams, a host read
        // from the Pod, and a period for one data stream.
        let a = annotations(&[
            ("co.elastic.hints/package", "redis"),
            ("co.elastic.hints/data_streams", "info, key"),
            ("co.elastic.hints/host", "${kubernetes.pod.ip}:6379"),
            ("co.elastic.hints/info.period", "5m"),
            ("unrelated", "x"),
        ]);
        let h = hinted(&on(), &a, &meta(), Some(("redis", "abc123"))).unwrap();
        assert_eq!(
            json_of(&h.vars),
            json!({"hints": {
                "redis": {
                    "container_logs": {"enabled": true},
                    "host": "10.1.2.3:6379",
                    "info": {"enabled": true, "host": "10.1.2.3:6379", "period": "5m"},
                    "key": {"enabled": true, "host": "10.1.2.3:6379"},
                },
                "container_id": "abc123",
            }})
        );
        assert!(h.processors.is_empty());
        // The Pod's own mapping: no container id, no container logs, and
        // the package on as a whole when no data stream is named.
        let a = annotations(&[("co.elastic.hints/package", "redis")]);
        let h = hinted(&on(), &a, &meta(), None).unwrap();
        assert_eq!(
            json_of(&h.vars),
            json!({"hints": {"redis": {"enabled": true}}})
        );
    }

    #[test]
    fn a_containers_own_hints_win_and_apply_to_it_alone() {
        let a = annotations(&[
            ("co.elastic.hints/package", "redis"),
            ("co.elastic.hints/period", "10s"),
            ("co.elastic.hints.exporter/package", "prometheus"),
            (
                "co.elastic.hints.exporter/host",
                "${kubernetes.pod.ip}:9121",
            ),
            ("co.elastic.hints.exporter2/package", "nginx"),
        ]);
        let v = json_of(
            &hinted(&on(), &a, &meta(), Some(("exporter", "e1")))
                .unwrap()
                .vars,
        );
        assert_eq!(v["hints"]["prometheus"]["host"], "10.1.2.3:9121", "{v}");
        assert_eq!(v["hints"]["prometheus"]["period"], "10s", "{v}");
        assert!(v["hints"]["redis"].is_null(), "{v}");
        let v = json_of(
            &hinted(&on(), &a, &meta(), Some(("redis", "r1")))
                .unwrap()
                .vars,
        );
        assert_eq!(v["hints"]["redis"]["enabled"], true, "{v}");
        assert!(v["hints"]["prometheus"].is_null(), "{v}");
    }

    #[test]
    fn without_a_package_only_default_container_logs_publish() {
        let none = BTreeMap::new();
        let v = json_of(
            &hinted(&on(), &none, &meta(), Some(("app", "c9")))
                .unwrap()
                .vars,
        );
        assert_eq!(
            v,
            json!({"hints": {"container_logs": {"enabled": true}, "container_id": "c9"}})
        );
        assert_eq!(
            hinted(&on(), &none, &meta(), None),
            None,
            "a Pod publishes nothing"
        );
        let off = HintSettings {
            default_container_logs: false,
            ..on()
        };
        assert_eq!(hinted(&off, &none, &meta(), Some(("app", "c9"))), None);
    }

    #[test]
    fn a_host_that_is_not_the_pods_own_is_refused_unless_the_operator_allows_it() {
        // Elastic's prometheus template sends the agent's token
        // (`bearer_token_file`) to the hinted host: the package is not
        // published, and why is listed; the container's logs still are.
        for (key, host) in [
            ("co.elastic.hints/host", "other-host:80"),
            ("co.elastic.hints/collector.host", "http://10.1.2.99:9090"),
            ("co.elastic.hints/host", "localhost:10250"),
        ] {
            let a = annotations(&[
                ("co.elastic.hints/package", "prometheus"),
                ("co.elastic.hints/data_streams", "collector"),
                (key, host),
            ]);
            let h = hinted(&on(), &a, &meta(), Some(("app", "c1"))).unwrap();
            assert_eq!(
                json_of(&h.vars),
                json!({"hints": {"container_logs": {"enabled": true}, "container_id": "c1"}}),
                "{host}"
            );
            assert_eq!(h.refused.len(), 1, "{h:?}");
            assert!(h.refused[0].contains("container app"), "{:?}", h.refused);
            assert!(
                h.refused[0].contains("not the Pod's own IP (10.1.2.3)"),
                "{:?}",
                h.refused
            );
            // The Pod's own mapping is not published (each container's
            // says why).
            assert_eq!(hinted(&on(), &a, &meta(), None), None);
        }
        let a = annotations(&[
            ("co.elastic.hints/package", "prometheus"),
            ("co.elastic.hints/host", "metrics.shared:9090"),
        ]);
        let allowed = HintSettings {
            allowed_hosts: vec!["metrics.shared".into()],
            ..on()
        };
        let h = hinted(&allowed, &a, &meta(), None).unwrap();
        assert_eq!(
            json_of(&h.vars),
            json!({"hints": {"prometheus": {"enabled": true, "host": "metrics.shared:9090"}}})
        );
        assert!(h.refused.is_empty());
    }

    #[test]
    fn a_hint_whose_variable_does_not_resolve_is_left_out() {
        let a = annotations(&[
            ("co.elastic.hints/package", "redis"),
            ("co.elastic.hints/host", "${kubernetes.pod.missing}:6379"),
            ("co.elastic.hints/username", "${kubernetes.pod"),
        ]);
        let v = json_of(&hinted(&on(), &a, &meta(), None).unwrap().vars);
        assert_eq!(v, json!({"hints": {"redis": {"enabled": true}}}));
    }

    #[test]
    fn processors_come_from_json_or_numbered_keys_in_order() {
        let a = annotations(&[
            ("co.elastic.hints/package", "nginx"),
            (
                "co.elastic.hints/processors.add_fields",
                r#"{"target": "project", "fields": {"name": "shop"}}"#,
            ),
            (
                "co.elastic.hints/processors.2.drop_fields.fields",
                r#"["a"]"#,
            ),
            (
                "co.elastic.hints/processors.1.rename.ignore_missing",
                "true",
            ),
        ]);
        let h = hinted(&on(), &a, &meta(), Some(("nginx", "n1"))).unwrap();
        let got: Vec<serde_json::Value> = h.processors.iter().map(json_of).collect();
        assert_eq!(
            got,
            [
                json!({"rename": {"ignore_missing": true}}),
                json!({"drop_fields": {"fields": ["a"]}}),
                json!({"add_fields": {"target": "project", "fields": {"name": "shop"}}}),
            ]
        );
    }
}
