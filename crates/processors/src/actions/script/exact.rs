//! Integers a JavaScript number cannot hold (beyond ±2^53) survive a script
//! that does not touch them: they are found before the event crosses into
//! the engine and put back where the script left the same (rounded) value.

use serde_json::{Map, Number, Value};

/// The largest integer a double holds exactly.
const EXACT: u64 = 1 << 53;

/// One step from an object to a value inside it.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Where the event holds integers a double would round, and their values.
#[derive(Debug, Default)]
pub(super) struct BigInts(Vec<(Vec<Step>, Number)>);

impl BigInts {
    /// Finds them in `event` (usually none: one walk, no allocation).
    pub fn find(event: &Map<String, Value>) -> BigInts {
        let mut found = BigInts::default();
        let mut at = Vec::new();
        for (k, v) in event {
            at.push(Step::Key(k.clone()));
            walk(v, &mut at, &mut found.0);
            at.pop();
        }
        found
    }

    /// Puts each one back into `event` where the same path still holds the
    /// number it rounds to; a value the script changed stays changed.
    pub fn restore(&self, event: &mut Map<String, Value>) {
        for (path, exact) in &self.0 {
            let Some((Step::Key(first), rest)) = path.split_first() else {
                continue;
            };
            let mut slot = event.get_mut(first);
            for step in rest {
                slot = match (slot, step) {
                    (Some(Value::Object(m)), Step::Key(k)) => m.get_mut(k),
                    (Some(Value::Array(a)), Step::Index(i)) => a.get_mut(*i),
                    _ => None,
                };
            }
            if let Some(Value::Number(n)) = slot
                && n.as_f64() == exact.as_f64()
            {
                *n = exact.clone();
            }
        }
    }
}

fn walk(v: &Value, at: &mut Vec<Step>, found: &mut Vec<(Vec<Step>, Number)>) {
    match v {
        Value::Number(n) if is_big(n) => found.push((at.clone(), n.clone())),
        Value::Object(m) => {
            for (k, v) in m {
                at.push(Step::Key(k.clone()));
                walk(v, at, found);
                at.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                at.push(Step::Index(i));
                walk(v, at, found);
                at.pop();
            }
        }
        _ => {}
    }
}

fn is_big(n: &Number) -> bool {
    match (n.as_u64(), n.as_i64()) {
        (Some(u), _) => u > EXACT,
        (None, Some(i)) => i.unsigned_abs() > EXACT,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("test values are objects"),
        }
    }

    #[test]
    fn an_untouched_big_integer_comes_back_exact_and_a_changed_one_stays_changed() {
        let before = object(json!({
            "inode": 18446744073709551615u64,
            "nested": {"list": [1, -9007199254740993i64]},
            "small": 42,
            "changed": 9007199254740995u64,
        }));
        let found = BigInts::find(&before);
        assert_eq!(found.0.len(), 3);
        // What a JSON round trip through doubles gives back, with one
        // value changed by the script.
        let mut after = object(json!({
            "inode": 18446744073709551615u64 as f64,
            "nested": {"list": [1, -9007199254740993i64 as f64]},
            "small": 42,
            "changed": 7,
        }));
        found.restore(&mut after);
        assert_eq!(after["inode"], json!(18446744073709551615u64));
        assert_eq!(after["nested"]["list"][1], json!(-9007199254740993i64));
        assert_eq!(after["changed"], json!(7));
    }
}
