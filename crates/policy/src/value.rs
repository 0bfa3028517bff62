//! Plain data values shared by variables, conditions and rendered inputs.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A configuration or variable value.
///
/// Integers and floats stay distinct because the condition language treats
/// them differently (`%` only accepts integers, `1 / 2` is `0`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    /// Absent or explicit null.
    #[default]
    Null,
    /// A boolean.
    Bool(bool),
    /// A 64-bit signed integer.
    Int(i64),
    /// A 64-bit float.
    Float(f64),
    /// A UTF-8 string.
    Str(String),
    /// An ordered list.
    List(Vec<Value>),
    /// A mapping that keeps the order its keys were written in.
    Map(Map),
}

/// Mappings up to this size are built by inserting key by key.
const SMALL_MAP: usize = 16;

/// An insertion-ordered string-keyed mapping. Equality ignores key order.
///
/// A vector of entries with linear lookups: the mappings of a policy are
/// small, and the render benchmark (500 inputs) is faster with this than with
/// a hash index. Large mappings are built in linear time
/// ([`Map::from_entries`], also behind `collect`).
///
/// Cloning shares the entries (copy on write): a Pod's labels and
/// annotations are published in the variables of the Pod and of each of its
/// containers and kept by every rendering, and a Pod author chooses their
/// size, so each copy must cost a pointer, not the bytes again.
#[derive(Debug, Clone, Default)]
pub struct Map {
    entries: std::sync::Arc<Vec<(String, Value)>>,
}

impl Map {
    /// An empty mapping.
    pub fn new() -> Self {
        Self::default()
    }

    /// A mapping from entries, in linear time. A repeated key keeps the
    /// position of its first entry and the value of its last, as repeated
    /// [`Map::insert`]s would (which compare every key with every other).
    pub fn from_entries(entries: Vec<(String, Value)>) -> Self {
        if entries.len() <= SMALL_MAP {
            let distinct = entries
                .iter()
                .enumerate()
                .all(|(i, (k, _))| entries[..i].iter().all(|(seen, _)| seen != k));
            if distinct {
                return Self {
                    entries: entries.into(),
                };
            }
            let mut m = Map::new();
            for (k, v) in entries {
                m.insert(k, v);
            }
            return m;
        }
        let mut slot_of: HashMap<&str, usize> = HashMap::with_capacity(entries.len());
        let slots: Vec<usize> = entries
            .iter()
            .map(|(k, _)| {
                let next = slot_of.len();
                *slot_of.entry(k.as_str()).or_insert(next)
            })
            .collect();
        let mut out: Vec<Option<(String, Value)>> = Vec::new();
        out.resize_with(slot_of.len(), || None);
        for (entry, slot) in entries.into_iter().zip(slots) {
            out[slot] = Some(entry);
        }
        Self {
            entries: std::sync::Arc::new(out.into_iter().flatten().collect()),
        }
    }

    /// Inserts or replaces `key`, keeping the position of an existing key.
    /// O(number of keys): build large mappings with [`Map::from_entries`].
    pub fn insert(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        let entries = std::sync::Arc::make_mut(&mut self.entries);
        if let Some(slot) = entries.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            entries.push((key, value));
        }
    }

    /// Inserts `key` as the first entry (used to put `id` first).
    pub fn insert_first(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        let entries = std::sync::Arc::make_mut(&mut self.entries);
        entries.retain(|(k, _)| *k != key);
        entries.insert(0, (key, value));
    }

    /// Looks a key up.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Looks a key up, to change its value in place.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        // Only a key that is there makes a private copy.
        let idx = self.entries.iter().position(|(k, _)| k == key)?;
        Some(&mut std::sync::Arc::make_mut(&mut self.entries)[idx].1)
    }

    /// Values in insertion order, to change them in place.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Value> {
        std::sync::Arc::make_mut(&mut self.entries)
            .iter_mut()
            .map(|(_, v)| v)
    }

    /// Removes a key, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let idx = self.entries.iter().position(|(k, _)| k == key)?;
        Some(std::sync::Arc::make_mut(&mut self.entries).remove(idx).1)
    }

    /// True when `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// Keys sorted, for output that must not depend on insertion order.
    pub fn sorted_keys(&self) -> Vec<&String> {
        let mut keys: Vec<&String> = self.entries.iter().map(|(k, _)| k).collect();
        keys.sort();
        keys
    }
}

impl PartialEq for Map {
    fn eq(&self, other: &Self) -> bool {
        if std::sync::Arc::ptr_eq(&self.entries, &other.entries) {
            return true;
        }
        if self.len() != other.len() {
            return false;
        }
        if self.len() <= SMALL_MAP {
            return self.iter().all(|(k, v)| other.get(k) == Some(v));
        }
        let theirs: HashMap<&str, &Value> = other.iter().map(|(k, v)| (k.as_str(), v)).collect();
        self.iter().all(|(k, v)| theirs.get(k.as_str()) == Some(&v))
    }
}

impl FromIterator<(String, Value)> for Map {
    fn from_iter<T: IntoIterator<Item = (String, Value)>>(iter: T) -> Self {
        Map::from_entries(iter.into_iter().collect())
    }
}

impl Value {
    /// The type name used in error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Map(_) => "map",
        }
    }

    /// Walks a dotted path (`host.ip.0`): map keys by name, list items by index.
    pub fn lookup_path(&self, path: &str) -> Option<&Value> {
        let mut cur = self;
        for part in path.split('.') {
            cur = match cur {
                Value::Map(m) => m.get(part)?,
                Value::List(l) => l.get(part.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(cur)
    }

    /// Converts from JSON (the `--vars` file format). Integers that do not fit
    /// an `i64` become floats.
    pub fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(a) => Value::List(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(o) => Value::Map(
                o.iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// The text a value becomes when substituted inside a longer string
    /// (`"host-${host.name}"`). Matches Elastic Agent: floats with six
    /// decimals, lists as `[a,b]`, maps as `{k:v},{k2:v2}`.
    pub fn to_subst_text(&self) -> String {
        let mut out = String::new();
        self.write_subst_text(&mut out);
        out
    }

    fn write_subst_text(&self, out: &mut String) {
        match self {
            Value::Null => {}
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Value::Float(f) => {
                let _ = write!(out, "{f:.6}");
            }
            Value::Str(s) => out.push_str(s),
            Value::List(l) => {
                out.push('[');
                for (i, v) in l.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_subst_text(out);
                }
                out.push(']');
            }
            Value::Map(m) => {
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push('{');
                    out.push_str(k);
                    out.push(':');
                    v.write_subst_text(out);
                    out.push('}');
                }
            }
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(i) => s.serialize_i64(*i),
            Value::Float(f) => s.serialize_f64(*f),
            Value::Str(v) => s.serialize_str(v),
            Value::List(l) => {
                let mut seq = s.serialize_seq(Some(l.len()))?;
                for v in l {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Value::Map(m) => m.serialize(s),
        }
    }
}

impl Serialize for Map {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Writes `v` as YAML (block style), for `inspect --format yaml`.
pub fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    write_yaml(v, 0, &mut out, true);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn yaml_scalar(v: &Value) -> Option<String> {
    Some(match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => {
            if f.is_nan() {
                ".nan".into()
            } else if f.is_infinite() {
                if *f > 0.0 {
                    ".inf".into()
                } else {
                    "-.inf".into()
                }
            } else {
                let s = format!("{f:?}");
                s
            }
        }
        // JSON strings are valid YAML flow scalars and are never re-typed.
        Value::Str(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::List(l) if l.is_empty() => "[]".into(),
        Value::Map(m) if m.is_empty() => "{}".into(),
        _ => return None,
    })
}

fn write_yaml(v: &Value, indent: usize, out: &mut String, top: bool) {
    let pad = " ".repeat(indent);
    match v {
        Value::List(l) if !l.is_empty() => {
            for item in l {
                if !top || !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&pad);
                out.push_str("- ");
                match yaml_scalar(item) {
                    Some(s) => out.push_str(&s),
                    None => {
                        // Nested collections start on the dash line.
                        let mut inner = String::new();
                        write_yaml(item, indent + 2, &mut inner, true);
                        out.push_str(inner.trim_start());
                    }
                }
            }
        }
        Value::Map(m) if !m.is_empty() => {
            for (i, (k, val)) in m.iter().enumerate() {
                if !(top && i == 0 && out.is_empty()) {
                    out.push('\n');
                }
                out.push_str(&pad);
                out.push_str(&serde_json::to_string(k).unwrap_or_default());
                out.push(':');
                match yaml_scalar(val) {
                    Some(s) => {
                        out.push(' ');
                        out.push_str(&s);
                    }
                    None => write_yaml(val, indent + 2, out, false),
                }
            }
        }
        other => out.push_str(&yaml_scalar(other).unwrap_or_default()),
    }
}

/// Go's `strconv.FormatFloat(f, 'E', -1, 64)`, which the condition language
/// uses to turn floats into text (`string(2.0) == '2E+00'`).
pub fn go_float_e(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let s = format!("{f:E}");
    let (mant, exp) = s.split_once('E').unwrap_or((&s, "0"));
    let (sign, digits) = match exp.strip_prefix('-') {
        Some(d) => ('-', d),
        None => ('+', exp),
    };
    if digits.len() < 2 {
        format!("{mant}E{sign}0{digits}")
    } else {
        format!("{mant}E{sign}{digits}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_float_formatting() {
        assert_eq!(go_float_e(2.0), "2E+00");
        assert_eq!(go_float_e(1234.5), "1.2345E+03");
        assert_eq!(go_float_e(0.001), "1E-03");
        assert_eq!(go_float_e(-2.5e-120), "-2.5E-120");
        assert_eq!(go_float_e(f64::INFINITY), "+Inf");
    }

    #[test]
    fn subst_text_forms() {
        assert_eq!(Value::Float(1.5).to_subst_text(), "1.500000");
        assert_eq!(
            Value::List(vec![Value::Str("a".into()), Value::Int(2)]).to_subst_text(),
            "[a,2]"
        );
        let m: Map = [
            ("k".to_string(), Value::Bool(true)),
            ("j".into(), Value::Int(1)),
        ]
        .into_iter()
        .collect();
        assert_eq!(Value::Map(m).to_subst_text(), "{k:true},{j:1}");
    }

    #[test]
    fn from_entries_matches_inserting_one_by_one() {
        for n in [0, 3, SMALL_MAP, SMALL_MAP + 1, 200] {
            // every key three times, values counting up
            let entries: Vec<(String, Value)> = (0..3 * n)
                .map(|i| (format!("k{}", (i * 7) % n.max(1)), Value::Int(i as i64)))
                .collect();
            let mut want = Map::new();
            for (k, v) in entries.clone() {
                want.insert(k, v);
            }
            let got = Map::from_entries(entries);
            let order = |m: &Map| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(order(&got), order(&want), "n = {n}");
        }
    }

    #[test]
    fn large_map_equality_ignores_order() {
        let a: Map = (0..100).map(|i| (format!("k{i}"), Value::Int(i))).collect();
        let b: Map = (0..100)
            .rev()
            .map(|i| (format!("k{i}"), Value::Int(i)))
            .collect();
        let c: Map = (0..100)
            .map(|i| (format!("k{i}"), Value::Int(i % 99)))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn map_equality_ignores_order() {
        let a: Map = [
            ("a".to_string(), Value::Int(1)),
            ("b".into(), Value::Int(2)),
        ]
        .into_iter()
        .collect();
        let b: Map = [
            ("b".to_string(), Value::Int(2)),
            ("a".into(), Value::Int(1)),
        ]
        .into_iter()
        .collect();
        assert_eq!(a, b);
    }

    #[test]
    fn yaml_output_round_trips_shape() {
        let m: Map = [
            ("id".to_string(), Value::Str("x".into())),
            (
                "streams".into(),
                Value::List(vec![Value::Map(
                    [("a".to_string(), Value::Str("yes".into()))]
                        .into_iter()
                        .collect(),
                )]),
            ),
        ]
        .into_iter()
        .collect();
        let y = to_yaml(&Value::List(vec![Value::Map(m)]));
        assert_eq!(y, "- \"id\": \"x\"\n  \"streams\":\n    - \"a\": \"yes\"\n");
    }
}
