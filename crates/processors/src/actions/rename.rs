//! `rename` and `copy_fields`: move or copy values between fields.

use serde_json::Value;

use super::{Action, Event, Flow};
use crate::path::{self, PathError};
use crate::settings::{Diag, Settings, kind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Rename,
    Copy,
}

/// Renames (or copies) each `from` to its `to`, in order. A `to` that
/// exists is an error: neither processor overwrites. With `fail_on_error`
/// (the default) the first error undoes this processor's changes and sets
/// `error.message`; without it the other pairs are still processed.
#[derive(Debug)]
pub(crate) struct RenameFields {
    mode: Mode,
    pairs: Vec<(String, String)>,
    ignore_missing: bool,
    fail_on_error: bool,
}

/// `fields` (required: a list of `{from, to}`), `ignore_missing` (false),
/// `fail_on_error` (true).
pub(crate) fn build(s: Settings<'_>, d: &mut Diag, mode: Mode) -> Option<RenameFields> {
    let name = match mode {
        Mode::Rename => "rename",
        Mode::Copy => "copy_fields",
    };
    s.check_keys(
        d,
        name,
        &["fields", "ignore_missing", "fail_on_error"],
        false,
    );
    let ignore_missing = s.bool(d, "ignore_missing", false);
    let fail_on_error = s.bool(d, "fail_on_error", true);
    let example = "[{from: message, to: event.original}]";
    let Some(list) = s.raw("fields") else {
        d.error(
            s.at("fields"),
            format!("`fields` is required, e.g. `fields: {example}`"),
        );
        return None;
    };
    let Value::Array(items) = list else {
        d.error(
            s.at("fields"),
            format!(
                "expected a list of `{{from, to}}` maps, e.g. `{example}`, found {}",
                kind(list)
            ),
        );
        return None;
    };
    let mut pairs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{}.{i}", s.at("fields"));
        let Value::Object(map) = item else {
            d.error(
                at,
                format!("expected a map `{{from: …, to: …}}`, found {}", kind(item)),
            );
            continue;
        };
        let pair = Settings { path: &at, map };
        let from = pair.required_string(d, "from", "message");
        let to = pair.required_string(d, "to", "event.original");
        if let (Some(from), Some(to)) = (from, to) {
            pairs.push((from, to));
        }
    }
    Some(RenameFields {
        mode,
        pairs,
        ignore_missing,
        fail_on_error,
    })
}

impl RenameFields {
    /// One pair. Either it succeeds or the event is as it was.
    fn one(&self, event: &mut Event, from: &str, to: &str) -> Result<(), String> {
        if path::exists(event, to) {
            return Err(format!(
                "target field {to} already exists, drop or rename this field first"
            ));
        }
        match path::get(event, from) {
            Ok(_) => {}
            Err(PathError::Missing) if self.ignore_missing => return Ok(()),
            Err(e) => return Err(format!("could not fetch value for key: {from}, Error: {e}")),
        }
        match self.mode {
            Mode::Copy => {
                if !path::can_insert(event, to) {
                    return Err(put_error(event, to));
                }
                let value = path::get(event, from).map_err(|e| e.to_string())?.clone();
                path::insert(event, to, value).map_err(|e| e.to_string())?;
            }
            Mode::Rename => {
                // Removing first lets `a` become `a.value`.
                let keys = path::locate(event, from).map_err(|e| e.to_string())?;
                let value = path::remove(event, from).map_err(|e| e.to_string())?;
                if !path::can_insert(event, to) {
                    let err = put_error(event, to);
                    path::insert_at(event, &keys, value);
                    return Err(err);
                }
                path::insert(event, to, value).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }
}

fn put_error(event: &Event, to: &str) -> String {
    match path::get(event, to) {
        Err(e) => format!("could not put value: {to}: {e}"),
        Ok(_) => format!("could not put value: {to}"),
    }
}

impl Action for RenameFields {
    fn run(&self, event: &mut Event) -> Result<Flow, String> {
        // A single pair undoes itself; several need a copy to go back to.
        let backup = (self.fail_on_error && self.pairs.len() > 1).then(|| event.clone());
        let mut errors = Vec::new();
        for (from, to) in &self.pairs {
            let Err(e) = self.one(event, from, to) else {
                continue;
            };
            let msg = match self.mode {
                Mode::Rename => format!("failed to rename fields in processor: {e}"),
                Mode::Copy => format!("failed to copy fields in copy_fields processor: {e}"),
            };
            if self.fail_on_error {
                if let Some(backup) = backup {
                    *event = backup;
                }
                // As in Beats, ignored when `error` is not an object.
                let _ = path::insert(event, "error.message", Value::String(msg.clone()));
                return Err(msg);
            }
            errors.push(msg);
        }
        if errors.is_empty() {
            Ok(Flow::Continue)
        } else {
            Err(errors.join("; "))
        }
    }
}
