//! Settings shared by the network outputs: request headers, durations and
//! the retry backoff, read the same way with the same messages.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_policy::Value;

use crate::settings::{Problem, describe, given};
use crate::units::parse_duration;

/// `headers`: a map of HTTP header names to values (scalars are written
/// as text).
pub(crate) fn headers(
    base: &str,
    keys: &BTreeMap<String, Value>,
    errors: &mut Vec<Problem>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    match given(keys, "headers") {
        None => {}
        Some(Value::Map(m)) => {
            for (k, v) in m.iter() {
                let path = format!("{base}.headers.{k}");
                let value = match v {
                    Value::Str(t) => t.clone(),
                    Value::Int(_) | Value::Float(_) | Value::Bool(_) => describe(v),
                    other => {
                        errors.push(Problem::new(
                            path,
                            format!("must be a string, found {}", describe(other)),
                        ));
                        continue;
                    }
                };
                if hyper::header::HeaderName::from_bytes(k.as_bytes()).is_err()
                    || hyper::header::HeaderValue::from_str(&value).is_err()
                {
                    errors.push(Problem::new(path, "not a valid HTTP header name and value"));
                    continue;
                }
                out.push((k.clone(), value));
            }
        }
        Some(other) => errors.push(Problem::new(
            format!("{base}.headers"),
            format!(
                "must be a map of header names to values, found {}",
                describe(other)
            ),
        )),
    }
    out
}

/// A duration setting (`90s`, `1m`, `500ms`, or whole seconds).
pub(crate) fn duration(
    base: &str,
    keys: &BTreeMap<String, Value>,
    key: &str,
    default: Duration,
    errors: &mut Vec<Problem>,
) -> Duration {
    match given(keys, key) {
        None => default,
        Some(v) => parse_duration(v).unwrap_or_else(|why| {
            errors.push(Problem::new(
                format!("{base}.{key}"),
                format!("{why}; write a duration such as 90s, 1m or 500ms"),
            ));
            default
        }),
    }
}

/// `backoff.init` and `backoff.max`; the first wait may not exceed the
/// longest.
pub(crate) fn backoff(
    base: &str,
    keys: &BTreeMap<String, Value>,
    defaults: (Duration, Duration),
    errors: &mut Vec<Problem>,
) -> (Duration, Duration) {
    let init = duration(base, keys, "backoff.init", defaults.0, errors);
    let max = duration(base, keys, "backoff.max", defaults.1, errors);
    if init > max {
        errors.push(Problem::new(
            format!("{base}.backoff.init"),
            format!(
                "{init:?} is longer than backoff.max ({max:?}); the first wait cannot exceed the longest"
            ),
        ));
    }
    (init, max)
}
