//! Reading and validating input settings, shared by every input type.
//!
//! Validation works on the plain settings value so the same rules serve the
//! agent (rendered settings) and `check` (the policy as written, where a
//! string may still hold `${…}` and is then not type-checked). Problems
//! carry the key path so `check` can point at the line.

use leasehold_policy::{Map, Value};

pub use crate::settings::{Problem, unresolved};

/// Reports every key of `map` not in `known` (plus the keys every input
/// may have): an error for leasehold's own input types; a warning for
/// Elastic's (`lenient`), whose policies carry settings this version
/// ignores.
pub fn unknown_keys(map: &Map, known: &[&str], type_name: &str, out: &mut Vec<Problem>) {
    check_keys(map, known, type_name, false, out);
}

/// As [`unknown_keys`], with unknown keys reported as warnings.
pub fn unknown_keys_lenient(map: &Map, known: &[&str], type_name: &str, out: &mut Vec<Problem>) {
    check_keys(map, known, type_name, true, out);
}

fn check_keys(map: &Map, known: &[&str], type_name: &str, lenient: bool, out: &mut Vec<Problem>) {
    for (k, _) in map.iter() {
        if COMMON_KEYS.contains(&k.as_str()) || known.contains(&k.as_str()) {
            continue;
        }
        let mut all: Vec<&str> = COMMON_KEYS.to_vec();
        for k in known {
            if !all.contains(k) && !k.contains('.') {
                all.push(k);
            }
        }
        all.retain(|k| !k.contains('.'));
        let hint = format!("known settings: {}", all.join(", "));
        out.push(if lenient {
            Problem::warning(
                k,
                format!(
                    "setting of `{type_name}` not used by this version of leasehold; it is ignored"
                ),
            )
            .hint(hint)
        } else {
            Problem::new(k, format!("unknown setting of input type `{type_name}`")).hint(hint)
        });
    }
}

/// Keys every input (and stream) may have. `meta` is Elastic's record of
/// the integration package an input came from: kept, never acted on;
/// `processors` run in the pipeline (see `pipeline::processing`), and so
/// do `provider_processors`, those a dynamic provider's mapping (a Pod's
/// hints) added, which cannot change where an event goes.
pub const COMMON_KEYS: [&str; 12] = [
    "id",
    "type",
    "use_output",
    "meta",
    "data_stream",
    "data_stream.type",
    "data_stream.dataset",
    "data_stream.namespace",
    "condition",
    "enabled",
    "processors",
    "provider_processors",
];

pub use crate::pipeline::routing::DataStream;

/// Reading `data_stream` from an input's settings.
impl DataStream {
    /// Reads `data_stream: {…}` and the dotted `data_stream.type`,
    /// `data_stream.dataset`, `data_stream.namespace` keys of `map` (as
    /// Elastic's standalone policies write them) over `base`.
    pub fn read_map(map: &Map, base: &DataStream, out: &mut Vec<Problem>) -> DataStream {
        let mut ds = Self::read(map.get("data_stream"), base, out);
        for (key, slot) in [
            ("data_stream.type", &mut ds.kind),
            ("data_stream.dataset", &mut ds.dataset),
            ("data_stream.namespace", &mut ds.namespace),
        ] {
            match map.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::Str(s)) if unresolved(&Value::Str(s.clone())) || valid_part(s) => *slot = s.clone(),
                Some(Value::Str(s)) => out.push(
                    Problem::new(key, format!("{s:?} cannot be part of a data stream name"))
                        .hint("use lower-case letters, digits, '_' and '.', not starting with '_' or '.', at most 100 characters"),
                ),
                Some(other) => out.push(Problem::new(key, format!("must be a string, found {}", other.type_name()))),
            }
        }
        ds
    }

    /// Reads `data_stream` over `base`; reports bad values.
    pub fn read(v: Option<&Value>, base: &DataStream, out: &mut Vec<Problem>) -> DataStream {
        let mut ds = base.clone();
        let Some(v) = v else { return ds };
        let Value::Map(m) = v else {
            if !unresolved(v) {
                out.push(Problem::new(
                    "data_stream",
                    format!("must be a mapping, found {}", v.type_name()),
                ));
            }
            return ds;
        };
        for (k, v) in m.iter() {
            let slot = match k.as_str() {
                "type" => &mut ds.kind,
                "dataset" => &mut ds.dataset,
                "namespace" => &mut ds.namespace,
                _ => {
                    out.push(
                        Problem::new(format!("data_stream.{k}"), "unknown setting")
                            .hint("known settings: type, dataset, namespace"),
                    );
                    continue;
                }
            };
            match v {
                Value::Str(s) if unresolved(v) => *slot = s.clone(),
                Value::Str(s) if valid_part(s) => *slot = s.clone(),
                Value::Str(s) => out.push(
                    Problem::new(format!("data_stream.{k}"), format!("{s:?} cannot be part of a data stream name"))
                        .hint("use lower-case letters, digits, '_' and '.', not starting with '_' or '.', at most 100 characters"),
                ),
                other => out.push(Problem::new(
                    format!("data_stream.{k}"),
                    format!("must be a string, found {}", other.type_name()),
                )),
            }
        }
        ds
    }
}

fn valid_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && !s.starts_with(['_', '.', '-'])
        && s.bytes().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'.' | b'-')
        })
}

/// A required list of strings (an argv).
pub fn string_list(map: &Map, key: &str, out: &mut Vec<Problem>) -> Option<Vec<String>> {
    match map.get(key) {
        None => {
            out.push(Problem::new(key, "is required"));
            None
        }
        Some(v) if unresolved(v) => None,
        Some(Value::List(items)) if !items.is_empty() => {
            let mut argv = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::Str(s) => argv.push(s.clone()),
                    Value::Int(_) | Value::Float(_) | Value::Bool(_) => {
                        argv.push(item.to_subst_text())
                    }
                    other => out.push(Problem::new(
                        format!("{key}.{i}"),
                        format!("must be a string, found {}", other.type_name()),
                    )),
                }
            }
            Some(argv)
        }
        Some(Value::List(_)) => {
            out.push(Problem::new(key, "must not be empty"));
            None
        }
        Some(other) => {
            out.push(
                Problem::new(
                    key,
                    format!(
                        "must be a list of strings (the argv), found {}",
                        other.type_name()
                    ),
                )
                .hint(format!("e.g. `{key}: [sh, -c, 'echo hello']`")),
            );
            None
        }
    }
}

/// An optional list of strings at `key` (one string counts as a list of
/// one); problems say what an item is (`[one, many]`, e.g.
/// `["a namespace name", "namespace names"]`).
pub fn optional_strings(
    value: Option<&Value>,
    key: &str,
    [one, many]: [&str; 2],
    out: &mut Vec<Problem>,
) -> Vec<String> {
    match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Str(s)) => vec![s.clone()],
        Some(Value::List(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Value::Str(s) => Some(s.clone()),
                other => {
                    out.push(Problem::new(
                        format!("{key}.{i}"),
                        format!("must be {one}, found {}", other.type_name()),
                    ));
                    None
                }
            })
            .collect(),
        Some(other) => {
            out.push(Problem::new(
                key,
                format!("must be a list of {many}, found {}", other.type_name()),
            ));
            Vec::new()
        }
    }
}

/// An optional string.
pub fn opt_string(map: &Map, key: &str, out: &mut Vec<Problem>) -> Option<String> {
    match map.get(key)? {
        Value::Str(s) => Some(s.clone()),
        Value::Null => None,
        other => {
            out.push(Problem::new(
                key,
                format!("must be a string, found {}", other.type_name()),
            ));
            None
        }
    }
}

/// Elastic's policies write nested settings with dotted keys
/// (`ssl.certificate_authorities: [...]`, `metrics_filters.include: [...]`):
/// a copy of `map` where such keys under `prefixes` are nested, merged with
/// a nested mapping of the same name if both are written.
pub fn expand_dotted(map: &Map, prefixes: &[&str]) -> Map {
    let mut out = Map::new();
    let mut nested: Vec<(String, Map)> = Vec::new();
    for (k, v) in map.iter() {
        match k.split_once('.') {
            Some((head, rest)) if prefixes.contains(&head) => {
                match nested.iter_mut().find(|(h, _)| h == head) {
                    Some((_, m)) => m.insert(rest.to_string(), v.clone()),
                    None => {
                        let mut m = Map::new();
                        m.insert(rest.to_string(), v.clone());
                        nested.push((head.to_string(), m));
                    }
                }
            }
            _ => out.insert(k.clone(), v.clone()),
        }
    }
    for (head, m) in nested {
        let merged = match out.get(&head) {
            Some(Value::Map(existing)) => {
                let mut e = existing.clone();
                for (k, v) in m.iter() {
                    e.insert(k.clone(), v.clone());
                }
                e
            }
            _ => m,
        };
        out.insert(head, Value::Map(merged));
    }
    out
}

/// One input written inline (`{type: exec, …}`), as the settings map an
/// input reads: for the inputs' tests.
#[cfg(test)]
pub fn input_map(yaml: &str) -> Map {
    let p = leasehold_policy::Policy::parse(&format!("inputs:\n  - {yaml}\n"), "t.yml")
        .expect("a test input parses");
    let Value::Map(m) = p.inputs()[0].to_value() else {
        panic!("an input is a mapping: {yaml}")
    };
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_keys_are_nested_and_merged() {
        let mut m = Map::new();
        m.insert("ssl.verification_mode", Value::Str("none".into()));
        let mut ssl = Map::new();
        ssl.insert(
            "certificate_authorities",
            Value::List(vec![Value::Str("/ca".into())]),
        );
        m.insert("ssl", Value::Map(ssl));
        m.insert("other.key", Value::Int(1));
        let e = expand_dotted(&m, &["ssl"]);
        assert_eq!(e.get("other.key"), Some(&Value::Int(1)));
        let Some(Value::Map(ssl)) = e.get("ssl") else {
            panic!("{e:?}")
        };
        assert_eq!(
            ssl.get("verification_mode"),
            Some(&Value::Str("none".into()))
        );
        assert!(ssl.contains_key("certificate_authorities"));
    }
}
