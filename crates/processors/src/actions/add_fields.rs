//! `add_fields` and `add_labels`: merge fixed fields into every event.

use serde_json::{Map, Value};

use super::{Action, Event, Flow};
use crate::path::{self, PathError};
use crate::settings::{Diag, Settings};

/// Merges `fields` into the event, under `target` (`None`: the root).
/// Objects merge key by key; other values overwrite (Beats' `DeepUpdate`).
#[derive(Debug)]
pub(crate) struct AddFields {
    target: Option<String>,
    fields: Map<String, Value>,
}

/// `add_fields`: `fields` (required) under `target` (default `fields`;
/// `""` is the root of the event).
pub(crate) fn add_fields(s: Settings<'_>, d: &mut Diag) -> Option<AddFields> {
    s.check_keys(d, "add_fields", &["fields", "target"], true);
    let fields = s.required_map(d, "fields", "{project: {name: myproject}}")?;
    let target = s.string(d, "target").unwrap_or_else(|| "fields".to_owned());
    Some(AddFields {
        target: (!target.is_empty()).then_some(target),
        fields: fields.clone(),
    })
}

/// `add_labels`: `labels` (required) flattened to dotted keys under
/// `labels`, every value as a string (ECS labels are keywords), as Beats
/// stores them.
pub(crate) fn add_labels(s: Settings<'_>, d: &mut Diag) -> Option<AddFields> {
    s.check_keys(d, "add_labels", &["labels"], true);
    let labels = s.required_map(d, "labels", "{env: production}")?;
    let mut flat = Map::new();
    flatten_labels("", &Value::Object(labels.clone()), &mut flat);
    Some(AddFields {
        target: Some("labels".to_owned()),
        fields: flat,
    })
}

fn flatten_labels(prefix: &str, v: &Value, out: &mut Map<String, Value>) {
    let key = |k: &str| {
        if prefix.is_empty() {
            k.to_owned()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                flatten_labels(&key(k), v, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten_labels(&key(&i.to_string()), v, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_owned(), Value::String(s.clone()));
        }
        Value::Number(n) => {
            out.insert(prefix.to_owned(), Value::String(n.to_string()));
        }
        Value::Bool(b) => {
            out.insert(prefix.to_owned(), Value::String(b.to_string()));
        }
        Value::Null => {}
    }
}

impl Action for AddFields {
    fn run(&self, event: &mut Event) -> Result<Flow, String> {
        if self.fields.is_empty() {
            return Ok(Flow::Continue);
        }
        let Some(target) = &self.target else {
            path::deep_update(event, self.fields.clone(), true);
            return Ok(Flow::Continue);
        };
        match path::get_mut(event, target) {
            Ok(Value::Object(existing)) => path::deep_update(existing, self.fields.clone(), true),
            Ok(other) => *other = Value::Object(self.fields.clone()),
            Err(PathError::Missing) => {
                path::insert(event, target, Value::Object(self.fields.clone()))
                    .map_err(|e| format!("cannot add fields under `{target}`: {e}"))?;
            }
            Err(e) => return Err(format!("cannot add fields under `{target}`: {e}")),
        }
        Ok(Flow::Continue)
    }
}
