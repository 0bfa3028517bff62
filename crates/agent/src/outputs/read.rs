//! How every output reads its settings: from the output's keys flattened
//! to dotted paths, each problem recorded with its full path
//! (`outputs.NAME.KEY`) and, for a secret key, without its value.

use std::collections::BTreeMap;
use std::fmt;

use leasehold_policy::Value;

/// A problem in the `outputs:` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    /// Dotted key path, e.g. `outputs.default.rotate_every_kb`.
    pub path: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl SettingError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        SettingError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for SettingError {}

/// A setting's value; null counts as not given.
pub(crate) fn given<'a>(keys: &'a BTreeMap<String, Value>, key: &str) -> Option<&'a Value> {
    keys.get(key).filter(|v| !matches!(v, Value::Null))
}

/// An integer within `lo..=hi`, or `None` after recording the problem.
pub(crate) fn int_in(
    path: &str,
    v: &Value,
    lo: i64,
    hi: i64,
    errors: &mut Vec<SettingError>,
) -> Option<i64> {
    match v {
        Value::Int(i) if (lo..=hi).contains(i) => Some(*i),
        other => {
            errors.push(SettingError::new(
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
pub(crate) fn describe_at(key: &str, v: &Value) -> String {
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
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Str(s) => format!("{s:?}"),
        other => other.type_name().to_string(),
    }
}
