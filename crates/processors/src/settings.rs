//! Reading processor settings: typed look-ups that report what is wrong, with
//! the path of the offending key, instead of failing on the first mistake.

use serde_json::{Map, Value};

use crate::ParseError;

/// What parsing found: every error (parsing fails if there is one) and the
/// warnings that let a policy load anyway.
#[derive(Debug, Default)]
pub(crate) struct Diag {
    pub errors: Vec<ParseError>,
    pub warnings: Vec<String>,
    /// The processors come from a Pod, not the policy: no `script`.
    pub confined: bool,
}

impl Diag {
    pub fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ParseError {
            path: path.into(),
            message: message.into(),
        });
    }

    pub fn warn(&mut self, message: impl Into<String>) {
        self.warnings.push(message.into());
    }
}

/// How a JSON value is called in messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Expands dotted keys into nested maps, as Beats' configuration loader does
/// (`add_fields: {fields: {a.b: 1}}` is `{a: {b: 1}}`), at every level.
/// A key with an empty segment (`a..b`, `.a`) is kept as it is.
pub(crate) fn expand_dots(v: &Value, path: &str, diag: &mut Diag) -> Value {
    match v {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let sub_path = format!("{path}.{k}");
                let expanded = expand_dots(v, &sub_path, diag);
                let segments: Vec<&str> = k.split('.').collect();
                if segments.len() > 1 && segments.iter().all(|s| !s.is_empty()) {
                    let mut nested = expanded;
                    for seg in segments[1..].iter().rev() {
                        let mut m = Map::new();
                        m.insert((*seg).to_owned(), nested);
                        nested = Value::Object(m);
                    }
                    merge_config(&mut out, segments[0], nested, &sub_path, diag);
                } else {
                    merge_config(&mut out, k, expanded, &sub_path, diag);
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| expand_dots(item, &format!("{path}.{i}"), diag))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn merge_config(out: &mut Map<String, Value>, key: &str, v: Value, path: &str, diag: &mut Diag) {
    match (out.get_mut(key), v) {
        (None, v) => {
            out.insert(key.to_owned(), v);
        }
        (Some(Value::Object(old)), Value::Object(new)) => {
            for (k, v) in new {
                merge_config(old, &k, v, path, diag);
            }
        }
        (Some(_), _) => diag.error(
            path,
            format!(
                "`{key}` is given twice, once through a dotted key; \
                 write it once (a dotted key `a.b` is the same as `a: {{b: …}}`)"
            ),
        ),
    }
}

/// The settings map of one processor (or one condition) and where it is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings<'a> {
    pub path: &'a str,
    pub map: &'a Map<String, Value>,
}

impl<'a> Settings<'a> {
    /// The path of `key` inside these settings.
    pub fn at(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    /// The value of `key`; `null` counts as absent, as in Beats.
    pub fn raw(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// A string setting. Numbers and booleans are taken as their text, as
    /// Beats' configuration loader does.
    pub fn string(&self, d: &mut Diag, key: &str) -> Option<String> {
        match self.raw(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            other => {
                d.error(
                    self.at(key),
                    format!("expected a string, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// A string setting that must be there.
    pub fn required_string(&self, d: &mut Diag, key: &str, example: &str) -> Option<String> {
        if self.raw(key).is_none() {
            d.error(
                self.at(key),
                format!("`{key}` is required, e.g. `{key}: {example}`"),
            );
            return None;
        }
        self.string(d, key)
    }

    /// A boolean setting (`"true"`/`"false"` strings accepted).
    pub fn bool(&self, d: &mut Diag, key: &str, default: bool) -> bool {
        match self.raw(key) {
            None => default,
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
            Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => false,
            Some(other) => {
                d.error(
                    self.at(key),
                    format!("expected true or false, found {}", kind(other)),
                );
                default
            }
        }
    }

    /// An integer setting (numeric strings accepted).
    pub fn int(&self, d: &mut Diag, key: &str, default: i64) -> i64 {
        match self.raw(key) {
            None => default,
            Some(Value::Number(n)) if n.as_i64().is_some() => n.as_i64().unwrap_or(default),
            Some(Value::String(s)) if s.trim().parse::<i64>().is_ok() => {
                s.trim().parse().unwrap_or(default)
            }
            Some(other) => {
                d.error(
                    self.at(key),
                    format!("expected a whole number, found {}", kind(other)),
                );
                default
            }
        }
    }

    /// A list of strings; a single string is a list of one, as in Beats.
    pub fn string_list(&self, d: &mut Diag, key: &str) -> Option<Vec<String>> {
        match self.raw(key)? {
            Value::String(s) => Some(vec![s.clone()]),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) => out.push(s.clone()),
                        Value::Number(n) => out.push(n.to_string()),
                        other => d.error(
                            format!("{}.{i}", self.at(key)),
                            format!("expected a string, found {}", kind(other)),
                        ),
                    }
                }
                Some(out)
            }
            other => {
                d.error(
                    self.at(key),
                    format!("expected a list of strings, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// A list of strings that must be there.
    pub fn required_string_list(
        &self,
        d: &mut Diag,
        key: &str,
        example: &str,
    ) -> Option<Vec<String>> {
        if self.raw(key).is_none() {
            d.error(
                self.at(key),
                format!("`{key}` is required, e.g. `{key}: {example}`"),
            );
            return None;
        }
        self.string_list(d, key)
    }

    /// A map setting that must be there.
    pub fn required_map(
        &self,
        d: &mut Diag,
        key: &str,
        example: &str,
    ) -> Option<&'a Map<String, Value>> {
        match self.raw(key) {
            None => {
                d.error(
                    self.at(key),
                    format!("`{key}` is required, e.g. `{key}: {example}`"),
                );
                None
            }
            Some(Value::Object(m)) => Some(m),
            Some(other) => {
                d.error(
                    self.at(key),
                    format!("expected a map, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// Reports keys that the processor does not know. Beats rejects them for
    /// some processors (`strict`) and ignores them for others; leasehold
    /// follows, but says when it ignores one.
    pub fn check_keys(&self, d: &mut Diag, processor: &str, allowed: &[&str], strict: bool) {
        for key in self.map.keys() {
            if key == "when" || allowed.contains(&key.as_str()) {
                continue;
            }
            let known = allowed
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ");
            if strict {
                d.error(
                    self.at(key),
                    format!(
                        "`{processor}` has no setting `{key}`; its settings are {known} and `when`"
                    ),
                );
            } else {
                d.warn(format!(
                    "{}: `{processor}` has no setting `{key}`; it is ignored (settings: {known}, `when`)",
                    self.at(key)
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn expand_dots_nests_and_merges() {
        let mut d = Diag::default();
        let v = expand_dots(
            &json!({"fields": {"a.b": 1, "a": {"c": 2}}, "add_labels.labels": {"x": 1}}),
            "p",
            &mut d,
        );
        assert!(d.errors.is_empty());
        assert_eq!(
            v,
            json!({"fields": {"a": {"b": 1, "c": 2}}, "add_labels": {"labels": {"x": 1}}})
        );
    }

    #[test]
    fn expand_dots_reports_a_conflict_with_its_path() {
        let mut d = Diag::default();
        expand_dots(&json!({"a": 1, "a.b": 2}), "p", &mut d);
        assert_eq!(d.errors.len(), 1);
        assert_eq!(d.errors[0].path, "p.a.b");
    }

    #[test]
    fn typed_lookups_report_wrong_types() {
        let mut d = Diag::default();
        let m = json!({"s": [1], "b": "yes", "l": [1, {"x": 1}], "n": null});
        let s = Settings {
            path: "processors.0.x",
            map: m.as_object().unwrap(),
        };
        assert_eq!(s.string(&mut d, "s"), None);
        assert!(s.bool(&mut d, "b", true));
        assert_eq!(s.string_list(&mut d, "l"), Some(vec!["1".to_owned()]));
        assert_eq!(s.string(&mut d, "n"), None);
        let paths: Vec<_> = d.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["processors.0.x.s", "processors.0.x.b", "processors.0.x.l.1"]
        );
    }
}
