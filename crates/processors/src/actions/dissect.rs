//! `dissect`: split a string field with a `%{key}` tokenizer.

use serde_json::Value;

use super::{Action, Event, Flow};
use crate::dissect::{Dissector, Trim};
use crate::path::{self, PathError};
use crate::settings::{Diag, Settings};

/// What Beats flags in `log.flags` when the tokenizer does not match.
const PARSING_ERROR_FLAG: &str = "dissect_parsing_error";

/// Dissects `field` into keys under `target_prefix`. On a mismatch the
/// event gets the flag `dissect_parsing_error` in `log.flags` and nothing
/// else; an extracted key that already exists is an error unless
/// `overwrite_keys`, and then nothing is written.
#[derive(Debug)]
pub(crate) struct Dissect {
    dissector: Dissector,
    field: String,
    target_prefix: String,
    ignore_failure: bool,
    overwrite_keys: bool,
}

/// `tokenizer` (required), `field` (`message`), `target_prefix`
/// (`dissect`; `""` is the root), `ignore_failure` (false),
/// `overwrite_keys` (false), `trim_values` (`none`, `left`, `right`, `all`),
/// `trim_chars` (`" "`).
pub(crate) fn build(s: Settings<'_>, d: &mut Diag) -> Option<Dissect> {
    s.check_keys(
        d,
        "dissect",
        &[
            "tokenizer",
            "field",
            "target_prefix",
            "ignore_failure",
            "overwrite_keys",
            "trim_values",
            "trim_chars",
        ],
        false,
    );
    let trim = match s.string(d, "trim_values").as_deref() {
        None | Some("none") => Trim::None,
        Some("left") => Trim::Left,
        Some("right") => Trim::Right,
        Some("all") => Trim::All,
        Some(other) => {
            d.error(
                s.at("trim_values"),
                format!("`{other}` is not a trim mode; use none, left, right or all"),
            );
            Trim::None
        }
    };
    let trim_chars = s.string(d, "trim_chars").unwrap_or_else(|| " ".to_owned());
    let field = s.string(d, "field").unwrap_or_else(|| "message".to_owned());
    let target_prefix = s
        .string(d, "target_prefix")
        .unwrap_or_else(|| "dissect".to_owned());
    let ignore_failure = s.bool(d, "ignore_failure", false);
    let overwrite_keys = s.bool(d, "overwrite_keys", false);
    let tokenizer = s.required_string(d, "tokenizer", "\"%{key1} %{key2}\"")?;
    let dissector = match Dissector::new(&tokenizer, trim, &trim_chars) {
        Ok(dissector) => dissector,
        Err(e) => {
            d.error(s.at("tokenizer"), e);
            return None;
        }
    };
    Some(Dissect {
        dissector,
        field,
        target_prefix,
        ignore_failure,
        overwrite_keys,
    })
}

impl Action for Dissect {
    fn run(&self, event: &mut Event) -> Result<Flow, String> {
        let text = match path::get(event, &self.field) {
            Ok(Value::String(s)) => s.clone(),
            Ok(other) => {
                return Err(format!("field `{}` is not a string: {other}", self.field));
            }
            Err(e) => return Err(format!("field `{}`: {e}", self.field)),
        };
        let values = match self.dissector.dissect(&text) {
            Ok(values) => values,
            Err(e) => {
                super::add_tags::append_tags(event, "log.flags", &[PARSING_ERROR_FLAG.to_owned()])
                    .map_err(|t| format!("cannot add new flag the event: {t}"))?;
                return if self.ignore_failure {
                    Ok(Flow::Continue)
                } else {
                    Err(e)
                };
            }
        };
        let key = |k: &str| {
            if self.target_prefix.is_empty() {
                k.to_owned()
            } else {
                format!("{}.{k}", self.target_prefix)
            }
        };
        // Check every key first, so a refusal leaves the event untouched.
        for k in values.keys() {
            let full = key(k);
            match path::get(event, &full) {
                Ok(_) if !self.overwrite_keys => {
                    return Err(format!("cannot override existing key with `{full}`"));
                }
                Err(PathError::NotObject(_)) => {
                    return Err(format!("cannot override existing key with `{full}`"));
                }
                _ => {}
            }
        }
        let mut errors = Vec::new();
        for (k, v) in values {
            let full = key(&k);
            if let Err(e) = path::insert(event, &full, v) {
                errors.push(format!("cannot write `{full}`: {e}"));
            }
        }
        if errors.is_empty() {
            Ok(Flow::Continue)
        } else {
            Err(errors.join("; "))
        }
    }
}
