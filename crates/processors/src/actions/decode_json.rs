//! `decode_json_fields`: replace JSON text by the value it encodes.

use serde_json::{Map, Value, json};

use super::{Action, Event, Flow};
use crate::path::{self, PathError};
use crate::settings::{Diag, Settings};
use crate::timefmt::format_utc_micros;
use crate::timelayout::parse_event_timestamp;

/// Decodes each listed string field as JSON. Strings inside the result that
/// hold JSON objects (and arrays, with `process_array`) are decoded too,
/// down to `max_depth` levels. The result replaces the field, goes to
/// `target`, or with `target: ""` merges into the root of the event.
#[derive(Debug)]
pub(crate) struct DecodeJson {
    fields: Vec<String>,
    max_depth: i64,
    process_array: bool,
    target: Option<String>,
    overwrite_keys: bool,
    add_error_key: bool,
    expand_keys: bool,
}

/// `fields` (required), `process_array` (false), `max_depth` (1),
/// `target` (unset: in place; `""`: the root), `overwrite_keys` (false),
/// `add_error_key` (false), `expand_keys` (false).
pub(crate) fn build(s: Settings<'_>, d: &mut Diag) -> Option<DecodeJson> {
    s.check_keys(
        d,
        "decode_json_fields",
        &[
            "fields",
            "max_depth",
            "overwrite_keys",
            "add_error_key",
            "process_array",
            "target",
            "document_id",
            "expand_keys",
        ],
        true,
    );
    if s.raw("document_id").is_some() {
        d.warn(format!(
            "{}: leasehold does not set the document id from decoded JSON; \
             the key stays in the decoded object",
            s.at("document_id")
        ));
    }
    let max_depth = s.int(d, "max_depth", 1);
    if max_depth < 1 {
        d.error(s.at("max_depth"), "`max_depth` is at least 1");
    }
    let built = DecodeJson {
        fields: s.required_string_list(d, "fields", "[message]")?,
        max_depth,
        process_array: s.bool(d, "process_array", false),
        target: s.string(d, "target"),
        overwrite_keys: s.bool(d, "overwrite_keys", false),
        add_error_key: s.bool(d, "add_error_key", false),
        expand_keys: s.bool(d, "expand_keys", false),
    };
    Some(built)
}

enum Undecoded {
    /// An array met with depth left and without `process_array`.
    Skipped,
    Invalid(String),
}

impl std::fmt::Display for Undecoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Undecoded::Skipped => f.write_str("processing skipped"),
            Undecoded::Invalid(e) => f.write_str(e),
        }
    }
}

/// Beats' `unmarshal`: decode, then decode structured strings one level
/// further while depth is left.
fn unmarshal(depth: i64, text: &str, process_array: bool) -> Result<Value, Undecoded> {
    let mut v: Value = serde_json::from_str(text).map_err(|e| Undecoded::Invalid(e.to_string()))?;
    let depth = depth - 1;
    if depth <= 0 {
        return Ok(v);
    }
    let deeper = |item: &mut Value| {
        if let Value::String(s) = item
            && is_structured(s)
            && let Ok(decoded) = unmarshal(depth, s, process_array)
        {
            *item = decoded;
        }
    };
    match &mut v {
        Value::Object(m) => m.values_mut().for_each(deeper),
        Value::Array(items) => {
            if !process_array {
                return Err(Undecoded::Skipped);
            }
            items.iter_mut().for_each(deeper);
        }
        _ => {}
    }
    Ok(v)
}

fn is_structured(s: &str) -> bool {
    let s = s.trim();
    s.len() >= 2
        && ((s.starts_with('[') && s.ends_with(']')) || (s.starts_with('{') && s.ends_with('}')))
}

/// Beats' error object of JSON decoding, set when `add_error_key`.
fn set_error(event: &mut Event, on: bool, error: Value) {
    if on {
        event.insert("error".to_owned(), error);
    }
}

fn json_error(message: &str) -> Value {
    json!({"message": message, "type": "json"})
}

/// De-dots the keys of `m` in place (`{"a.b": 1}` → `{"a": {"b": 1}}`),
/// merging objects; a key that is both a value and an object is an error.
pub(crate) fn expand_fields(m: &mut Map<String, Value>) -> Result<(), String> {
    let keys: Vec<String> = m.keys().cloned().collect();
    for k in keys {
        if let Some(Value::Object(sub)) = m.get_mut(&k) {
            expand_fields(sub).map_err(|e| format!("error expanding {k:?}: {e}"))?;
        }
        if !k.contains('.') {
            continue;
        }
        let Some(v) = m.remove(&k) else {
            continue;
        };
        let new_is_map = v.is_object();
        let old = path::insert(m, &k, v)
            .map_err(|e| format!("cannot expand {k:?}: found conflicting key: {e}"))?;
        let Some(old) = old else {
            continue;
        };
        let (Value::Object(old), true) = (old, new_is_map) else {
            return Err(format!("cannot expand {k:?}: found conflicting key"));
        };
        if let Ok(Value::Object(new)) = path::get_mut(m, &k) {
            merge_objects(new, old).map_err(|e| format!("cannot expand {k:?}: {e}"))?;
        }
    }
    Ok(())
}

fn merge_objects(lhs: &mut Map<String, Value>, rhs: Map<String, Value>) -> Result<(), String> {
    for (k, rv) in rhs {
        match (lhs.get_mut(&k), rv) {
            (None, rv) => {
                lhs.insert(k, rv);
            }
            (Some(Value::Object(l)), Value::Object(r)) => {
                merge_objects(l, r).map_err(|e| format!("cannot merge {k:?}: {e}"))?;
            }
            _ => {
                return Err(format!(
                    "cannot merge {k:?}: found a value that is not an object"
                ));
            }
        }
    }
    Ok(())
}

impl DecodeJson {
    /// Beats' `WriteJSONKeys`: the decoded object merged into the root.
    fn write_root(&self, event: &mut Event, mut keys: Map<String, Value>) {
        let on = self.add_error_key;
        if self.expand_keys
            && let Err(e) = expand_fields(&mut keys)
        {
            set_error(event, on, json_error(&e));
            return;
        }
        // leasehold has no event metadata apart from the document, so a
        // decoded `@metadata` is not kept.
        keys.remove("@metadata");
        if !self.overwrite_keys {
            keys.remove("@timestamp");
            path::deep_update(event, keys, false);
            return;
        }
        if let Some(ts) = keys.remove("@timestamp") {
            match &ts {
                Value::String(s) => match parse_event_timestamp(s) {
                    Some(t) => {
                        event.insert("@timestamp".to_owned(), Value::String(format_utc_micros(t)));
                    }
                    None => set_error(
                        event,
                        on,
                        json_error(&format!("@timestamp not overwritten (parse error on {s})")),
                    ),
                },
                _ => set_error(
                    event,
                    on,
                    json_error("@timestamp not overwritten (not string)"),
                ),
            }
        }
        if let Some(t) = keys.remove("type") {
            match &t {
                Value::String(s) if !s.is_empty() && !s.starts_with('_') => {
                    event.insert("type".to_owned(), t.clone());
                }
                Value::String(s) => set_error(
                    event,
                    on,
                    json_error(&format!("type not overwritten (invalid value [{s}])")),
                ),
                _ => set_error(event, on, json_error("type not overwritten (not string)")),
            }
        }
        path::deep_update(event, keys, true);
    }
}

impl Action for DecodeJson {
    fn run(&self, event: &mut Event) -> Result<Flow, String> {
        let mut errors = Vec::new();
        for field in &self.fields {
            let text = match path::get(event, field) {
                Ok(Value::String(s)) => s.clone(),
                Ok(_) | Err(PathError::Missing) => continue,
                Err(e) => {
                    errors.push(format!("{field}: {e}"));
                    continue;
                }
            };
            let mut output = match unmarshal(self.max_depth, &text, self.process_array) {
                Ok(v) => v,
                Err(e) => {
                    let message = format!("parsing input as JSON: {e}");
                    let mut error = json!({"message": message, "type": "json", "field": field});
                    if !text.is_empty() {
                        error["data"] = Value::String(text.clone());
                    }
                    set_error(event, self.add_error_key, error);
                    errors.push(format!("{field}: {message}"));
                    continue;
                }
            };
            let target = self.target.as_deref().unwrap_or(field);
            if target.is_empty() {
                match output {
                    Value::Object(keys) => self.write_root(event, keys),
                    _ => errors.push(format!("{field}: failed to add target to root")),
                }
                continue;
            }
            if self.expand_keys {
                match &mut output {
                    Value::Object(m) => {
                        if let Err(e) = expand_fields(m) {
                            set_error(event, self.add_error_key, json_error(&e));
                        }
                    }
                    _ => errors.push(format!("{field}: failed to expand keys")),
                }
            }
            if let Err(e) = path::insert(event, target, output) {
                errors.push(format!(
                    "{field}: cannot put the decoded value at `{target}`: {e}"
                ));
            }
        }
        if errors.is_empty() {
            Ok(Flow::Continue)
        } else {
            Err(errors.join("; "))
        }
    }
}
