//! `include_fields`: keep only the listed fields.

use serde_json::Map;

use super::{Action, Event, Flow};
use crate::path::{self, PathError};
use crate::settings::{Diag, Settings};

/// Keeps the listed fields, plus `@timestamp`, `@metadata` and `type`,
/// which Beats always keeps. A listed field that is missing is no error.
#[derive(Debug)]
pub(crate) struct IncludeFields {
    fields: Vec<String>,
}

const ALWAYS: &[&str] = &["@timestamp", "@metadata", "type"];

/// `fields` (required; an empty list keeps only the fields always kept).
pub(crate) fn build(s: Settings<'_>, d: &mut Diag) -> Option<IncludeFields> {
    s.check_keys(d, "include_fields", &["fields"], true);
    let mut fields = s.required_string_list(d, "fields", "[message, kubernetes.pod.name]")?;
    for always in ALWAYS {
        if !fields.iter().any(|f| f == always) {
            fields.push((*always).to_owned());
        }
    }
    Some(IncludeFields { fields })
}

impl Action for IncludeFields {
    fn run(&self, event: &mut Event) -> Result<Flow, String> {
        let mut kept = Map::new();
        let mut errors = Vec::new();
        for field in &self.fields {
            match path::get(event, field) {
                Ok(v) => {
                    if let Err(e) = path::insert(&mut kept, field, v.clone()) {
                        errors.push(format!("cannot keep `{field}`: {e}"));
                    }
                }
                Err(PathError::Missing) => {}
                Err(e) => errors.push(format!("cannot keep `{field}`: {e}")),
            }
        }
        *event = kept;
        if errors.is_empty() {
            Ok(Flow::Continue)
        } else {
            Err(errors.join("; "))
        }
    }
}
