//! `when:` conditions with Beats' semantics.
//!
//! A condition map holds one condition. When it holds several, Beats uses
//! the first in the order `equals`, `contains`, `regexp`, `range`,
//! `has_fields`, `network`, `or`, `and`, `not` and ignores the others; so
//! does leasehold, with a warning (combine them with `and:` instead). Within
//! one condition several fields are AND-ed. A field that is missing (or
//! below a non-object) makes the condition false.

use regex::Regex;
use serde_json::{Map, Value};

use crate::network::{self, Range};
use crate::path;
use crate::settings::{Diag, kind};

const ORDER: &[&str] = &[
    "equals",
    "contains",
    "regexp",
    "range",
    "has_fields",
    "network",
    "or",
    "and",
    "not",
];

/// A parsed condition.
#[derive(Debug, Clone)]
pub(crate) enum Condition {
    Equals(Vec<(String, Expected)>),
    Contains(Vec<(String, String)>),
    Regexp(Vec<(String, Regex)>),
    Range(Vec<(String, Bounds)>),
    HasFields(Vec<String>),
    Network(Vec<(String, Vec<Range>)>),
    Or(Vec<Condition>),
    And(Vec<Condition>),
    Not(Box<Condition>),
}

/// The value `equals` compares with: Beats accepts integers, strings and
/// booleans only.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expected {
    Int(i128),
    Str(String),
    Bool(bool),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Bounds {
    gte: Option<f64>,
    gt: Option<f64>,
    lte: Option<f64>,
    lt: Option<f64>,
}

impl Condition {
    /// Parses the condition at `path` (e.g. `processors.0.drop_event.when`).
    pub fn parse(v: &Value, path: &str, d: &mut Diag) -> Option<Condition> {
        let Value::Object(map) = v else {
            d.error(
                path,
                format!(
                    "a condition is a map such as `equals: {{field: value}}`, found {}",
                    kind(v)
                ),
            );
            return None;
        };
        let mut unknown = false;
        for key in map.keys() {
            if !ORDER.contains(&key.as_str()) {
                d.error(
                    format!("{path}.{key}"),
                    format!(
                        "unknown condition `{key}`; the conditions are {}",
                        ORDER.join(", ")
                    ),
                );
                unknown = true;
            }
        }
        let present: Vec<&str> = ORDER
            .iter()
            .copied()
            .filter(|k| map.contains_key(*k))
            .collect();
        let Some(first) = present.first().copied() else {
            if !unknown {
                d.error(
                    path,
                    format!(
                        "empty condition; give one of {} (e.g. `equals: {{status: OK}}`)",
                        ORDER.join(", ")
                    ),
                );
            }
            return None;
        };
        if present.len() > 1 {
            d.warn(format!(
                "{path}: holds the conditions {}; like Beats, only `{first}` is used and \
                 the others are ignored (put them under `and:` to require all)",
                present.join(", ")
            ));
        }
        let sub = format!("{path}.{first}");
        let v = &map[first];
        match first {
            "equals" => parse_equals(v, &sub, d).map(Condition::Equals),
            "contains" => parse_contains(v, &sub, d).map(Condition::Contains),
            "regexp" => parse_regexp(v, &sub, d).map(Condition::Regexp),
            "range" => parse_range(v, &sub, d).map(Condition::Range),
            "has_fields" => parse_has_fields(v, &sub, d).map(Condition::HasFields),
            "network" => parse_network(v, &sub, d).map(Condition::Network),
            "or" => parse_list(v, &sub, d).map(Condition::Or),
            "and" => parse_list(v, &sub, d).map(Condition::And),
            _ => Condition::parse(v, &sub, d).map(|c| Condition::Not(Box::new(c))),
        }
    }

    /// Whether `event` satisfies the condition.
    pub fn check(&self, event: &Map<String, Value>) -> bool {
        match self {
            Condition::Equals(fields) => fields.iter().all(|(field, expected)| {
                path::get(event, field).is_ok_and(|v| equals(v, expected))
            }),
            Condition::Contains(fields) => fields.iter().all(|(field, needle)| {
                path::get(event, field).is_ok_and(|v| any_string(v, |s| s.contains(needle)))
            }),
            Condition::Regexp(fields) => fields.iter().all(|(field, re)| {
                path::get(event, field).is_ok_and(|v| any_string(v, |s| re.is_match(s)))
            }),
            Condition::Range(fields) => fields.iter().all(|(field, bounds)| {
                path::get(event, field).is_ok_and(|v| match v {
                    Value::Number(n) => n.as_f64().is_some_and(|x| bounds.contains(x)),
                    _ => false,
                })
            }),
            Condition::HasFields(fields) => fields.iter().all(|f| path::exists(event, f)),
            Condition::Network(fields) => fields.iter().all(|(field, ranges)| {
                path::get(event, field).is_ok_and(|v| {
                    ips(v)
                        .into_iter()
                        .any(|ip| ranges.iter().any(|r| r.contains(ip)))
                })
            }),
            Condition::Or(list) => list.iter().any(|c| c.check(event)),
            Condition::And(list) => list.iter().all(|c| c.check(event)),
            Condition::Not(c) => !c.check(event),
        }
    }
}

impl Bounds {
    fn contains(&self, x: f64) -> bool {
        self.gte.is_none_or(|b| x >= b)
            && self.gt.is_none_or(|b| x > b)
            && self.lte.is_none_or(|b| x <= b)
            && self.lt.is_none_or(|b| x < b)
    }
}

fn equals(v: &Value, expected: &Expected) -> bool {
    match (expected, v) {
        (Expected::Str(s), Value::String(x)) => x == s,
        (Expected::Bool(b), Value::Bool(x)) => x == b,
        (Expected::Int(i), Value::Number(n)) => {
            if let Some(x) = n.as_i64() {
                i128::from(x) == *i
            } else if let Some(x) = n.as_u64() {
                i128::from(x) == *i
            } else {
                // An integral float equals the integer (200.0 == 200).
                n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.is_finite() && f == *i as f64)
            }
        }
        _ => false,
    }
}

/// A string, or any string of an array (`contains` and `regexp` match any
/// element, like Beats' `MatchAnyString`). Other types never match.
fn any_string(v: &Value, mut pred: impl FnMut(&str) -> bool) -> bool {
    match v {
        Value::String(s) => pred(s),
        Value::Array(items) => items
            .iter()
            .any(|i| matches!(i, Value::String(s) if pred(s))),
        _ => false,
    }
}

fn ips(v: &Value) -> Vec<std::net::IpAddr> {
    match v {
        Value::String(s) => network::parse_ip(s).into_iter().collect(),
        Value::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().and_then(network::parse_ip))
            .collect(),
        _ => Vec::new(),
    }
}

/// Flattens a condition's field map into `(dotted.field, value)` pairs, as
/// Beats does (nested maps and dotted keys are the same).
fn flatten(v: &Value, path: &str, d: &mut Diag, example: &str) -> Option<Vec<(String, Value)>> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    walk(&join(prefix, k), v, out);
                }
            }
            other => out.push((prefix.to_owned(), other.clone())),
        }
    }
    let Value::Object(m) = v else {
        d.error(
            path,
            format!(
                "expected a map of fields, e.g. `{example}`, found {}",
                kind(v)
            ),
        );
        return None;
    };
    if m.is_empty() {
        d.error(path, format!("no field given; e.g. `{example}`"));
        return None;
    }
    let mut out = Vec::new();
    for (k, v) in m {
        walk(k, v, &mut out);
    }
    Some(out)
}

fn join(prefix: &str, k: &str) -> String {
    if prefix.is_empty() {
        k.to_owned()
    } else {
        format!("{prefix}.{k}")
    }
}

fn parse_equals(v: &Value, path: &str, d: &mut Diag) -> Option<Vec<(String, Expected)>> {
    let fields = flatten(v, path, d, "equals: {http.response.code: 200}")?;
    let mut out = Vec::new();
    let mut ok = true;
    for (field, value) in fields {
        let expected = match &value {
            Value::String(s) => Expected::Str(s.clone()),
            Value::Bool(b) => Expected::Bool(*b),
            Value::Number(n) if n.as_i64().is_some() || n.as_u64().is_some() => Expected::Int(
                n.as_i64()
                    .map_or_else(|| i128::from(n.as_u64().unwrap_or_default()), i128::from),
            ),
            other => {
                d.error(
                    format!("{path}.{field}"),
                    format!(
                        "`equals` compares with a string, a whole number or a boolean, found {}{}",
                        kind(other),
                        if other.is_number() {
                            " (use `range` for fractional numbers)"
                        } else {
                            ""
                        }
                    ),
                );
                ok = false;
                continue;
            }
        };
        out.push((field, expected));
    }
    ok.then_some(out)
}

fn string_fields(
    v: &Value,
    path: &str,
    d: &mut Diag,
    example: &str,
) -> Option<Vec<(String, String)>> {
    let fields = flatten(v, path, d, example)?;
    let mut out = Vec::new();
    let mut ok = true;
    for (field, value) in fields {
        match value {
            Value::String(s) => out.push((field, s)),
            other => {
                d.error(
                    format!("{path}.{field}"),
                    format!("expected a string, found {}", kind(&other)),
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

fn parse_contains(v: &Value, path: &str, d: &mut Diag) -> Option<Vec<(String, String)>> {
    string_fields(v, path, d, "contains: {status: \"Specific error\"}")
}

fn parse_regexp(v: &Value, path: &str, d: &mut Diag) -> Option<Vec<(String, Regex)>> {
    let fields = string_fields(v, path, d, "regexp: {system.process.name: \"^foo.*\"}")?;
    let mut out = Vec::new();
    let mut ok = true;
    for (field, pattern) in fields {
        match Regex::new(&pattern) {
            Ok(re) => out.push((field, re)),
            Err(e) => {
                d.error(
                    format!("{path}.{field}"),
                    format!("invalid regular expression `{pattern}`: {e}"),
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

fn parse_range(v: &Value, path: &str, d: &mut Diag) -> Option<Vec<(String, Bounds)>> {
    let fields = flatten(v, path, d, "range: {http.response.code.gte: 400}")?;
    let mut out: Vec<(String, Bounds)> = Vec::new();
    let mut ok = true;
    for (key, value) in fields {
        let here = format!("{path}.{key}");
        let Some((field, op)) = key.rsplit_once('.') else {
            d.error(
                here,
                "expected `field.gte`, `field.gt`, `field.lte` or `field.lt`, \
                 e.g. `range: {http.response.code: {gte: 400}}`",
            );
            ok = false;
            continue;
        };
        let number = match &value {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        let Some(number) = number else {
            d.error(
                here,
                format!("a range bound is a number, found {}", kind(&value)),
            );
            ok = false;
            continue;
        };
        let idx = match out.iter().position(|(f, _)| f == field) {
            Some(i) => i,
            None => {
                out.push((field.to_owned(), Bounds::default()));
                out.len() - 1
            }
        };
        let bounds = &mut out[idx].1;
        match op {
            "gte" => bounds.gte = Some(number),
            "gt" => bounds.gt = Some(number),
            "lte" => bounds.lte = Some(number),
            "lt" => bounds.lt = Some(number),
            other => {
                d.error(
                    here,
                    format!("unknown range operator `{other}`; use gte, gt, lte or lt"),
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

fn parse_has_fields(v: &Value, path: &str, d: &mut Diag) -> Option<Vec<String>> {
    let list = match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.push(s.clone()),
                    other => {
                        d.error(
                            format!("{path}.{i}"),
                            format!("expected a field name, found {}", kind(other)),
                        );
                        return None;
                    }
                }
            }
            out
        }
        other => {
            d.error(
                path,
                format!(
                    "expected a list of field names, e.g. `has_fields: ['http.response.code']`, found {}",
                    kind(other)
                ),
            );
            return None;
        }
    };
    if list.is_empty() {
        d.error(
            path,
            "no field given; e.g. `has_fields: ['http.response.code']`",
        );
        return None;
    }
    Some(list)
}

fn parse_network(v: &Value, path: &str, d: &mut Diag) -> Option<Vec<(String, Vec<Range>)>> {
    let fields = flatten(v, path, d, "network: {source.ip: private}")?;
    let mut out = Vec::new();
    let mut ok = true;
    for (field, value) in fields {
        let here = format!("{path}.{field}");
        let names: Vec<(String, String)> = match &value {
            Value::String(s) => vec![(here.clone(), s.clone())],
            Value::Array(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| match item {
                    Value::String(s) => Some((format!("{here}.{i}"), s.clone())),
                    other => {
                        d.error(
                            format!("{here}.{i}"),
                            format!("expected a CIDR or a range name, found {}", kind(other)),
                        );
                        ok = false;
                        None
                    }
                })
                .collect(),
            other => {
                d.error(
                    here,
                    format!(
                        "expected a CIDR, a range name or a list of them, found {}",
                        kind(other)
                    ),
                );
                ok = false;
                continue;
            }
        };
        let mut ranges = Vec::new();
        for (at, name) in names {
            match Range::parse(&name) {
                Ok(r) => ranges.push(r),
                Err(e) => {
                    d.error(at, e);
                    ok = false;
                }
            }
        }
        out.push((field, ranges));
    }
    ok.then_some(out)
}

fn parse_list(v: &Value, path: &str, d: &mut Diag) -> Option<Vec<Condition>> {
    let Value::Array(items) = v else {
        d.error(
            path,
            format!(
                "expected a list of conditions (`- equals: {{…}}` items), found {}",
                kind(v)
            ),
        );
        return None;
    };
    if items.is_empty() {
        d.error(path, "empty list; give at least one condition");
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match Condition::parse(item, &format!("{path}.{i}"), d) {
            Some(c) => out.push(c),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cond(v: Value) -> Condition {
        let mut d = Diag::default();
        let c = Condition::parse(&v, "when", &mut d);
        assert!(d.errors.is_empty(), "{:?}", d.errors);
        c.unwrap()
    }

    fn errors(v: Value) -> Vec<(String, String)> {
        let mut d = Diag::default();
        let c = Condition::parse(&v, "when", &mut d);
        assert!(c.is_none());
        d.errors.into_iter().map(|e| (e.path, e.message)).collect()
    }

    fn ev(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    // Examples of Elastic's "Conditions" documentation.

    #[test]
    fn doc_equals_http_response_code() {
        let c = cond(json!({"equals": {"http.response.code": 200}}));
        assert!(c.check(&ev(json!({"http": {"response": {"code": 200}}}))));
        assert!(!c.check(&ev(json!({"http": {"response": {"code": 404}}}))));
        // A string "200" is not the number 200.
        assert!(!c.check(&ev(json!({"http": {"response": {"code": "200"}}}))));
        // Numbers compare numerically.
        assert!(c.check(&ev(json!({"http": {"response": {"code": 200.0}}}))));
        assert!(!c.check(&ev(json!({}))));
    }

    #[test]
    fn equals_strings_bools_and_several_fields_anded() {
        let c = cond(json!({"equals": {"status": "OK", "tls": true}}));
        assert!(c.check(&ev(json!({"status": "OK", "tls": true}))));
        assert!(!c.check(&ev(json!({"status": "OK", "tls": false}))));
        assert!(!c.check(&ev(json!({"status": "ok", "tls": true}))));
        assert!(!c.check(&ev(json!({"status": "OK"}))));
    }

    #[test]
    fn doc_contains_status() {
        let c = cond(json!({"contains": {"status": "Specific error"}}));
        assert!(c.check(&ev(json!({"status": "A Specific error happened"}))));
        assert!(!c.check(&ev(json!({"status": "fine"}))));
        // An array matches when any string element does.
        assert!(c.check(&ev(json!({"status": ["x", "Specific error 2"]}))));
        assert!(!c.check(&ev(json!({"status": 5}))));
    }

    #[test]
    fn doc_regexp_process_name() {
        let c = cond(json!({"regexp": {"system.process.name": "^foo.*"}}));
        assert!(c.check(&ev(json!({"system": {"process": {"name": "foobar"}}}))));
        assert!(!c.check(&ev(json!({"system": {"process": {"name": "barfoo"}}}))));
        // Unanchored, like Go's MatchString.
        let c = cond(json!({"regexp": {"message": "err(or)?"}}));
        assert!(c.check(&ev(json!({"message": "an error here"}))));
    }

    #[test]
    fn doc_range_forms() {
        let nested = cond(json!({"range": {"http.response.code": {"gte": 400}}}));
        let dotted = cond(json!({"range": {"http.response.code.gte": 400}}));
        for c in [&nested, &dotted] {
            assert!(c.check(&ev(json!({"http": {"response": {"code": 404}}}))));
            assert!(c.check(&ev(json!({"http": {"response": {"code": 400}}}))));
            assert!(!c.check(&ev(json!({"http": {"response": {"code": 200}}}))));
            assert!(!c.check(&ev(json!({"http": {"response": {"code": "404"}}}))));
        }
        let pct =
            cond(json!({"range": {"system.cpu.user.pct.gte": 0.5, "system.cpu.user.pct.lt": 0.8}}));
        assert!(pct.check(&ev(json!({"system": {"cpu": {"user": {"pct": 0.5}}}}))));
        assert!(pct.check(&ev(json!({"system": {"cpu": {"user": {"pct": 0.79}}}}))));
        assert!(!pct.check(&ev(json!({"system": {"cpu": {"user": {"pct": 0.8}}}}))));
        assert!(!pct.check(&ev(json!({"system": {"cpu": {"user": {"pct": 0.2}}}}))));
    }

    #[test]
    fn doc_network_forms() {
        let private = cond(json!({"network": {"source.ip": "private"}}));
        assert!(private.check(&ev(json!({"source": {"ip": "192.168.0.9"}}))));
        assert!(!private.check(&ev(json!({"source": {"ip": "8.8.8.8"}}))));
        assert!(!private.check(&ev(json!({"source": {"ip": "not an ip"}}))));
        let cidr = cond(json!({"network": {"destination.ip": "192.168.1.0/24"}}));
        assert!(cidr.check(&ev(json!({"destination": {"ip": "192.168.1.255"}}))));
        assert!(!cidr.check(&ev(json!({"destination": {"ip": "192.168.2.0"}}))));
        let any = cond(
            json!({"network": {"destination.ip": ["192.168.1.0/24", "10.0.0.0/8", "loopback"]}}),
        );
        assert!(any.check(&ev(json!({"destination": {"ip": "127.0.0.1"}}))));
        assert!(any.check(&ev(json!({"destination": {"ip": "10.2.3.4"}}))));
        assert!(!any.check(&ev(json!({"destination": {"ip": "172.16.0.1"}}))));
        // Several addresses in the event: any one in range matches.
        assert!(cidr.check(&ev(
            json!({"destination": {"ip": ["8.8.8.8", "192.168.1.1"]}})
        )));
    }

    #[test]
    fn doc_has_fields() {
        let c = cond(json!({"has_fields": ["http.response.code"]}));
        assert!(c.check(&ev(json!({"http": {"response": {"code": null}}}))));
        assert!(!c.check(&ev(json!({"http": {"response": {}}}))));
        let two = cond(json!({"has_fields": ["a", "b"]}));
        assert!(!two.check(&ev(json!({"a": 1}))));
        assert!(two.check(&ev(json!({"a": 1, "b": 2}))));
    }

    #[test]
    fn doc_or_and_not() {
        let or = cond(json!({"or": [
            {"equals": {"http.response.code": 304}},
            {"equals": {"http.response.code": 404}}
        ]}));
        assert!(or.check(&ev(json!({"http": {"response": {"code": 304}}}))));
        assert!(or.check(&ev(json!({"http": {"response": {"code": 404}}}))));
        assert!(!or.check(&ev(json!({"http": {"response": {"code": 200}}}))));
        let and = cond(json!({"and": [
            {"equals": {"http.response.code": 200}},
            {"equals": {"status": "OK"}}
        ]}));
        assert!(and.check(&ev(
            json!({"http": {"response": {"code": 200}}, "status": "OK"})
        )));
        assert!(!and.check(&ev(
            json!({"http": {"response": {"code": 200}}, "status": "KO"})
        )));
        let not = cond(json!({"not": {"equals": {"status": "OK"}}}));
        assert!(!not.check(&ev(json!({"status": "OK"}))));
        assert!(not.check(&ev(json!({"status": "KO"}))));
        // A missing field makes `equals` false, so `not` true.
        assert!(not.check(&ev(json!({}))));
        let mixed = cond(json!({"or": [
            {"equals": {"a": 1}},
            {"and": [{"equals": {"b": 2}}, {"equals": {"c": 3}}]}
        ]}));
        assert!(mixed.check(&ev(json!({"b": 2, "c": 3}))));
        assert!(!mixed.check(&ev(json!({"b": 2}))));
    }

    #[test]
    fn dotted_literal_keys_in_events_are_found() {
        let c = cond(json!({"equals": {"kubernetes.labels.app": "web"}}));
        assert!(c.check(&ev(json!({"kubernetes": {"labels": {"app": "web"}}}))));
        assert!(c.check(&ev(json!({"kubernetes": {"labels.app": "web"}}))));
        assert!(c.check(&ev(json!({"kubernetes.labels.app": "web"}))));
    }

    #[test]
    fn several_conditions_in_one_map_use_the_first_and_warn() {
        let mut d = Diag::default();
        let c = Condition::parse(
            &json!({"equals": {"a": 1}, "has_fields": ["zzz"]}),
            "when",
            &mut d,
        )
        .unwrap();
        assert!(c.check(&ev(json!({"a": 1}))));
        assert_eq!(d.warnings.len(), 1);
        assert!(d.warnings[0].contains("only `equals` is used"));
    }

    #[test]
    fn malformed_conditions_are_errors_with_paths() {
        assert_eq!(errors(json!({"equal": {"a": 1}}))[0].0, "when.equal");
        assert_eq!(errors(json!({}))[0].0, "when");
        assert_eq!(errors(json!({"equals": {"a": 1.5}}))[0].0, "when.equals.a");
        assert_eq!(errors(json!({"equals": {"a": [1]}}))[0].0, "when.equals.a");
        assert_eq!(
            errors(json!({"contains": {"a": 1}}))[0].0,
            "when.contains.a"
        );
        let re = errors(json!({"regexp": {"a": "("}}));
        assert_eq!(re[0].0, "when.regexp.a");
        assert!(re[0].1.contains("invalid regular expression"));
        assert_eq!(
            errors(json!({"range": {"a.between": 1}}))[0].0,
            "when.range.a.between"
        );
        assert_eq!(errors(json!({"range": {"a": 1}}))[0].0, "when.range.a");
        assert_eq!(
            errors(json!({"range": {"a.gt": "x"}}))[0].0,
            "when.range.a.gt"
        );
        assert_eq!(
            errors(json!({"network": {"ip": "10.0.0.0/40"}}))[0].0,
            "when.network.ip"
        );
        assert_eq!(
            errors(json!({"network": {"ip": ["private", "bad"]}}))[0].0,
            "when.network.ip.1"
        );
        assert_eq!(errors(json!({"or": []}))[0].0, "when.or");
        assert_eq!(
            errors(json!({"and": [{"equals": {"a": 1}}, {"nope": 1}]}))[0].0,
            "when.and.1.nope"
        );
        assert_eq!(
            errors(json!({"not": [{"equals": {"a": 1}}]}))[0].0,
            "when.not"
        );
        assert_eq!(errors(json!({"has_fields": [1]}))[0].0, "when.has_fields.0");
        assert_eq!(errors(json!("equals"))[0].0, "when");
    }
}
