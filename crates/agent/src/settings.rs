//! The one reader of settings: a [`Problem`] names the key path, what is
//! wrong and how to fix it; values are quoted in messages by [`describe`]
//! (a secret key's never, [`describe_at`]); integers are checked against
//! their range by [`int_in`]; a string still holding `${…}` is not judged
//! before it is rendered ([`unresolved`]). Inputs read their settings as a
//! map ([`crate::inputs::settings`]), outputs as keys flattened to dotted
//! paths ([`given`]); both report through these.

use std::collections::BTreeMap;

use leasehold_policy::Value;

/// One problem with a setting: where (the key path, from the input, or
/// from the policy's root for outputs), what, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Key path inside the input, e.g. `["command", "0"]`.
    pub path: Vec<String>,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
    /// Only a warning: the setting is ignored (an Elastic setting this
    /// version does not use) and the input still runs.
    pub warning: bool,
}

impl Problem {
    /// The key path, dotted.
    pub fn key(&self) -> String {
        self.path.join(".")
    }

    /// A problem at `path` (dotted, e.g. `data_stream.type`).
    pub fn new(path: impl AsRef<str>, message: impl Into<String>) -> Self {
        Problem {
            path: path.as_ref().split('.').map(str::to_string).collect(),
            message: message.into(),
            hint: None,
            warning: false,
        }
    }

    /// A warning at `path`.
    pub fn warning(path: impl AsRef<str>, message: impl Into<String>) -> Self {
        Problem {
            warning: true,
            ..Problem::new(path, message)
        }
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`: {}", self.path.join("."), self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

/// True for a string that still holds a substitution (as written in the
/// policy): its type is only known after rendering.
pub fn unresolved(v: &Value) -> bool {
    matches!(v, Value::Str(s) if s.contains("${"))
}

/// A setting's value; null counts as not given.
pub fn given<'a>(keys: &'a BTreeMap<String, Value>, key: &str) -> Option<&'a Value> {
    keys.get(key).filter(|v| !matches!(v, Value::Null))
}

/// An integer within `lo..=hi`, or `None` after recording the problem.
pub fn int_in(path: &str, v: &Value, lo: i64, hi: i64, errors: &mut Vec<Problem>) -> Option<i64> {
    match v {
        Value::Int(i) if (lo..=hi).contains(i) => Some(*i),
        other => {
            errors.push(Problem::new(
                path,
                format!(
                    "must be an integer from {lo} to {hi}, found {}",
                    describe_at(path, other)
                ),
            ));
            None
        }
    }
}

/// The value of setting `key` as quoted in messages: like [`describe`],
/// but the value of a secret key (a password, an API key, a token) is
/// never quoted, only its type: messages end up in logs and `/status`.
pub fn describe_at(key: &str, v: &Value) -> String {
    if crate::redact::is_secret_key(key) {
        let t = v.type_name();
        let article = if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        format!("{article} {t}")
    } else {
        describe(v)
    }
}

/// A value as quoted in messages: scalars by value, collections by type.
/// For a setting that may be secret use [`describe_at`].
pub fn describe(v: &Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Str(s) => format!("{s:?}"),
        other => other.type_name().to_string(),
    }
}

/// A flag at `path`: a YAML boolean, or (as Elastic's manifests sometimes
/// write them) the strings `"true"` and `"false"`.
pub fn flag(path: &str, v: &Value, out: &mut Vec<Problem>) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Str(s) if s == "true" || s == "false" => Some(s == "true"),
        other => {
            out.push(Problem::new(
                path,
                format!("must be true or false, found {}", describe_at(path, other)),
            ));
            None
        }
    }
}

/// A duration at `path` (`10s`, `1m30s`, `500ms`, or a number of
/// seconds) within `min..=max`.
pub fn duration_in(
    path: &str,
    v: &Value,
    min: std::time::Duration,
    max: std::time::Duration,
    out: &mut Vec<Problem>,
) -> Option<std::time::Duration> {
    match crate::units::parse_duration(v) {
        Ok(d) if d >= min && d <= max => Some(d),
        Ok(_) => {
            out.push(Problem::new(
                path,
                format!(
                    "must be from {} to {}",
                    crate::units::duration_text(min),
                    crate::units::duration_text(max)
                ),
            ));
            None
        }
        Err(e) => {
            out.push(Problem::new(path, e));
            None
        }
    }
}

/// A list of names (strings) at `path`; null is the empty list.
pub fn names(path: &str, v: &Value, out: &mut Vec<Problem>) -> Option<Vec<String>> {
    let listed = match v {
        Value::Null => return Some(Vec::new()),
        Value::List(items) => items
            .iter()
            .map(|i| match i {
                Value::Str(t) => Some(t.clone()),
                _ => None,
            })
            .collect::<Option<Vec<_>>>(),
        _ => None,
    };
    if listed.is_none() {
        out.push(Problem::new(
            path,
            "must be a list of names, e.g. [app, tier]",
        ));
    }
    listed
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_reader_names_the_key_and_never_quotes_a_secret() {
        let mut out = Vec::new();
        assert_eq!(
            flag("a.enabled", &Value::Str("true".into()), &mut out),
            Some(true)
        );
        assert_eq!(
            flag("a.password", &Value::Str("hunter2".into()), &mut out),
            None
        );
        let (min, max) = (Duration::from_secs(1), Duration::from_secs(3600));
        assert_eq!(
            duration_in("a.t", &Value::Str("1m30s".into()), min, max, &mut out),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            duration_in("a.t", &Value::Str("2h".into()), min, max, &mut out),
            None
        );
        assert_eq!(names("a.l", &Value::Null, &mut out), Some(Vec::new()));
        assert_eq!(names("a.l", &Value::Int(3), &mut out), None);
        assert_eq!(int_in("a.n", &Value::Int(9), 1, 5, &mut out), None);
        let said: Vec<String> = out.iter().map(ToString::to_string).collect();
        assert_eq!(
            said,
            [
                "`a.password`: must be true or false, found a string",
                "`a.t`: must be from 1s to 1h",
                "`a.l`: must be a list of names, e.g. [app, tier]",
                "`a.n`: must be an integer from 1 to 5, found 9",
            ]
        );
    }
}
