//! `drop_event` and `drop_fields`.

use regex::Regex;

use super::{Action, Event, Flow};
use crate::path::{self, PathError};
use crate::settings::{Diag, Settings};

/// Drops the event (meant to be used with `when`).
#[derive(Debug)]
pub(crate) struct DropEvent;

pub(crate) fn drop_event(s: Settings<'_>, d: &mut Diag) -> Option<DropEvent> {
    s.check_keys(d, "drop_event", &[], true);
    if !s.map.contains_key("when") {
        d.warn(format!(
            "{}: `drop_event` without `when` drops every event",
            s.path
        ));
    }
    Some(DropEvent)
}

impl Action for DropEvent {
    fn run(&self, _event: &mut Event) -> Result<Flow, String> {
        Ok(Flow::Drop)
    }
}

/// Removes fields by name, or every field whose dotted name matches a
/// `/regexp/`. `@timestamp`, `@metadata` and `type` are never removed by
/// name, as in Beats.
#[derive(Debug)]
pub(crate) struct DropFields {
    fields: Vec<String>,
    regexes: Vec<Regex>,
    ignore_missing: bool,
    cleanup: bool,
}

/// `fields` (required), `ignore_missing` (false), `cleanup` (false: also
/// remove the objects a removal leaves empty).
pub(crate) fn drop_fields(s: Settings<'_>, d: &mut Diag) -> Option<DropFields> {
    s.check_keys(
        d,
        "drop_fields",
        &["fields", "ignore_missing", "cleanup"],
        true,
    );
    let ignore_missing = s.bool(d, "ignore_missing", false);
    let cleanup = s.bool(d, "cleanup", false);
    let listed = s.required_string_list(d, "fields", "[field1, field2]")?;
    let mut fields = Vec::new();
    let mut regexes = Vec::new();
    for (i, field) in listed.into_iter().enumerate() {
        if field.len() > 2 && field.starts_with('/') && field.ends_with('/') {
            match Regex::new(&field[1..field.len() - 1]) {
                Ok(re) => regexes.push(re),
                Err(e) => d.error(
                    format!("{}.{i}", s.at("fields")),
                    format!("invalid regular expression `{field}`: {e}"),
                ),
            }
            continue;
        }
        let protected = ["type", "@timestamp", "@metadata"]
            .iter()
            .any(|p| field == *p || (*p == "type" && field.starts_with("type.")));
        if protected {
            d.warn(format!(
                "{}.{i}: `{field}` cannot be dropped (like Beats, drop_fields keeps \
                 `@timestamp`, `@metadata` and `type`); it is ignored",
                s.at("fields")
            ));
            continue;
        }
        fields.push(field);
    }
    Some(DropFields {
        fields,
        regexes,
        ignore_missing,
        cleanup,
    })
}

impl DropFields {
    fn delete(&self, event: &mut Event, field: &str, errors: &mut Vec<String>) {
        let result = if self.cleanup {
            path::remove_with_cleanup(event, field)
        } else {
            path::remove(event, field)
        };
        match result {
            Ok(_) => {}
            Err(PathError::Missing) if self.ignore_missing => {}
            Err(e) => errors.push(format!("failed to drop field [{field}]: {e}")),
        }
    }
}

impl Action for DropFields {
    fn run(&self, event: &mut Event) -> Result<Flow, String> {
        let mut errors = Vec::new();
        for field in &self.fields {
            self.delete(event, field, &mut errors);
        }
        for re in &self.regexes {
            let names: Vec<String> = path::flatten_keys(event)
                .into_iter()
                .filter(|k| k != "@timestamp" && k != "@metadata" && !k.starts_with("@metadata."))
                .filter(|k| re.is_match(k))
                .collect();
            for name in names {
                self.delete(event, &name, &mut errors);
            }
        }
        if errors.is_empty() {
            Ok(Flow::Continue)
        } else {
            Err(errors.join("; "))
        }
    }
}
