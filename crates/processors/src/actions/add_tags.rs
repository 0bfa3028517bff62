//! `add_tags`: append tags to a list.

use serde_json::Value;

use super::{Action, Event, Flow};
use crate::path::{self, PathError};
use crate::settings::{Diag, Settings};

/// Appends `tags` to the list at `target`, creating it. Like Beats it does
/// not deduplicate: a tag already there is appended again.
#[derive(Debug)]
pub(crate) struct AddTags {
    target: String,
    tags: Vec<String>,
}

/// `tags` (required), `target` (default `tags`; `""` also means `tags`).
pub(crate) fn build(s: Settings<'_>, d: &mut Diag) -> Option<AddTags> {
    s.check_keys(d, "add_tags", &["tags", "target"], true);
    let tags = s.required_string_list(d, "tags", "[web, production]")?;
    let target = s
        .string(d, "target")
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "tags".to_owned());
    Some(AddTags { target, tags })
}

/// Appends `tags` to the list at `target` (Beats' `AddTagsWithKey`); fails,
/// changing nothing, when the value there is not a list.
pub(crate) fn append_tags(event: &mut Event, target: &str, tags: &[String]) -> Result<(), String> {
    if tags.is_empty() {
        return Ok(());
    }
    let new = tags.iter().map(|t| Value::String(t.clone()));
    match path::get_mut(event, target) {
        Ok(Value::Array(list)) => {
            list.extend(new);
            Ok(())
        }
        Ok(other) => Err(format!(
            "cannot add tags to `{target}`: it holds {}, not a list",
            crate::settings::kind(other)
        )),
        Err(PathError::Missing) => path::insert(event, target, Value::Array(new.collect()))
            .map(|_| ())
            .map_err(|e| format!("cannot add tags to `{target}`: {e}")),
        Err(e) => Err(format!("cannot add tags to `{target}`: {e}")),
    }
}

impl Action for AddTags {
    fn run(&self, event: &mut Event) -> Result<Flow, String> {
        append_tags(event, &self.target, &self.tags)?;
        Ok(Flow::Continue)
    }
}
