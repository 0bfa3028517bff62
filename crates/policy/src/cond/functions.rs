//! Built-in functions of the condition language.

use super::eval::{math, to_text};
use super::parser::BinOp;
use crate::value::Value;

/// A built-in function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Func {
    /// `arrayContains(list, v...)`: any `v` is an element (type-exact).
    ArrayContains,
    /// `hasKey(map, k...)`: any key `k` is present.
    HasKey,
    /// `length(x)`: bytes of a string, items of a list or map; null is 0.
    Length,
    /// `add(a, b)`
    Add,
    /// `subtract(a, b)`
    Subtract,
    /// `multiply(a, b)`
    Multiply,
    /// `divide(a, b)`: integer division for two ints.
    Divide,
    /// `modulo(a, b)`: ints only.
    Modulo,
    /// `concat(x...)`: the text of every argument joined.
    Concat,
    /// `endsWith(s, suffix)`
    EndsWith,
    /// `startsWith(s, prefix)`
    StartsWith,
    /// `stringContains(s, sub)`
    StringContains,
    /// `indexOf(s, sub[, start])`: byte offset, or `start - 1` when absent.
    IndexOf,
    /// `match(s, re...)`: any regular expression matches.
    Match,
    /// `number(s[, base])`: parses an integer.
    Number,
    /// `string(x)`: the text of a value.
    String,
}

impl Func {
    /// Every function, for messages.
    pub const ALL: [Func; 16] = [
        Func::ArrayContains,
        Func::HasKey,
        Func::Length,
        Func::Add,
        Func::Subtract,
        Func::Multiply,
        Func::Divide,
        Func::Modulo,
        Func::Concat,
        Func::EndsWith,
        Func::StartsWith,
        Func::StringContains,
        Func::IndexOf,
        Func::Match,
        Func::Number,
        Func::String,
    ];

    /// Looks a function up by its (case-sensitive) name.
    pub fn from_name(s: &str) -> Option<Func> {
        Func::ALL.into_iter().find(|f| f.name() == s)
    }

    /// The function's name.
    pub fn name(self) -> &'static str {
        match self {
            Func::ArrayContains => "arrayContains",
            Func::HasKey => "hasKey",
            Func::Length => "length",
            Func::Add => "add",
            Func::Subtract => "subtract",
            Func::Multiply => "multiply",
            Func::Divide => "divide",
            Func::Modulo => "modulo",
            Func::Concat => "concat",
            Func::EndsWith => "endsWith",
            Func::StartsWith => "startsWith",
            Func::StringContains => "stringContains",
            Func::IndexOf => "indexOf",
            Func::Match => "match",
            Func::Number => "number",
            Func::String => "string",
        }
    }

    /// Accepted argument counts: (minimum, maximum or unbounded).
    pub fn arity(self) -> (usize, Option<usize>) {
        match self {
            Func::ArrayContains | Func::HasKey | Func::Match => (2, None),
            Func::Concat => (0, None),
            Func::Length | Func::String => (1, Some(1)),
            Func::Number => (1, Some(2)),
            Func::IndexOf => (2, Some(3)),
            _ => (2, Some(2)),
        }
    }

    fn arity_error(self, got: usize) -> String {
        let (min, max) = self.arity();
        let want = match max {
            Some(m) if m == min => format!("exactly {min}"),
            Some(m) => format!("{min} to {m}"),
            None => format!("at least {min}"),
        };
        format!("{} takes {want} argument(s), got {got}", self.name())
    }

    /// Calls the function.
    pub fn call(self, args: Vec<Value>) -> Result<Value, String> {
        let (min, max) = self.arity();
        if args.len() < min || max.is_some_and(|m| args.len() > m) {
            return Err(self.arity_error(args.len()));
        }
        let name = self.name();
        Ok(match self {
            Func::ArrayContains => match &args[0] {
                Value::Null => Value::Bool(false),
                Value::List(items) => Value::Bool(
                    args[1..]
                        .iter()
                        .any(|c| items.iter().any(|i| strict_eq(i, c))),
                ),
                other => {
                    return Err(format!(
                        "arrayContains: the first argument must be a list, got {}",
                        other.type_name()
                    ));
                }
            },
            Func::HasKey => match &args[0] {
                Value::Null => Value::Bool(false),
                Value::Map(m) => {
                    for (i, k) in args[1..].iter().enumerate() {
                        match k {
                            Value::Str(k) => {
                                if m.contains_key(k) {
                                    return Ok(Value::Bool(true));
                                }
                            }
                            other => {
                                return Err(format!(
                                    "hasKey: argument {} must be a string, got {}",
                                    i + 2,
                                    other.type_name()
                                ));
                            }
                        }
                    }
                    Value::Bool(false)
                }
                other => {
                    return Err(format!(
                        "hasKey: the first argument must be a map, got {}",
                        other.type_name()
                    ));
                }
            },
            Func::Length => match &args[0] {
                Value::Null => Value::Int(0),
                Value::Str(s) => Value::Int(s.len() as i64),
                Value::List(l) => Value::Int(l.len() as i64),
                Value::Map(m) => Value::Int(m.len() as i64),
                other => {
                    return Err(format!(
                        "length: accepts a string, list or map, got {}",
                        other.type_name()
                    ));
                }
            },
            Func::Add => {
                math(BinOp::Add, &args[0], &args[1]).map_err(|e| format!("{name}: {e}"))?
            }
            Func::Subtract => {
                math(BinOp::Sub, &args[0], &args[1]).map_err(|e| format!("{name}: {e}"))?
            }
            Func::Multiply => {
                math(BinOp::Mul, &args[0], &args[1]).map_err(|e| format!("{name}: {e}"))?
            }
            Func::Divide => {
                math(BinOp::Div, &args[0], &args[1]).map_err(|e| format!("{name}: {e}"))?
            }
            Func::Modulo => {
                math(BinOp::Mod, &args[0], &args[1]).map_err(|e| format!("{name}: {e}"))?
            }
            Func::Concat => Value::Str(args.iter().map(to_text).collect()),
            Func::EndsWith => Value::Bool(to_text(&args[0]).ends_with(&to_text(&args[1]))),
            Func::StartsWith => Value::Bool(to_text(&args[0]).starts_with(&to_text(&args[1]))),
            Func::StringContains => Value::Bool(to_text(&args[0]).contains(&to_text(&args[1]))),
            Func::IndexOf => {
                let hay = to_text(&args[0]);
                let needle = to_text(&args[1]);
                let start = match args.get(2) {
                    None => 0,
                    Some(Value::Int(i)) => *i,
                    Some(other) => {
                        return Err(format!(
                            "indexOf: the start position must be an integer, got {}",
                            other.type_name()
                        ));
                    }
                };
                if start < 0 || start as u64 > hay.len() as u64 {
                    return Err(format!(
                        "indexOf: start position {start} is outside the string (length {})",
                        hay.len()
                    ));
                }
                let start = start as usize;
                let found = find_bytes(&hay.as_bytes()[start..], needle.as_bytes())
                    .map_or(-1, |i| i as i64);
                Value::Int(start as i64 + found)
            }
            Func::Match => {
                let input = to_text(&args[0]);
                for (i, r) in args[1..].iter().enumerate() {
                    let Value::Str(pattern) = r else {
                        return Err(format!(
                            "match: argument {} must be a string, got {}",
                            i + 2,
                            r.type_name()
                        ));
                    };
                    let re = regex::RegexBuilder::new(pattern)
                        .size_limit(1 << 20)
                        .build()
                        .map_err(|e| {
                            format!("match: invalid regular expression {pattern:?}: {e}")
                        })?;
                    if re.is_match(&input) {
                        return Ok(Value::Bool(true));
                    }
                }
                Value::Bool(false)
            }
            Func::Number => {
                let input = to_text(&args[0]);
                let base = match args.get(1) {
                    None => 10,
                    Some(Value::Int(b)) => *b,
                    Some(other) => {
                        return Err(format!(
                            "number: the base must be an integer, got {}",
                            other.type_name()
                        ));
                    }
                };
                let input = input.strip_prefix("0x").unwrap_or(&input);
                Value::Int(parse_int(input, base).ok_or_else(|| {
                    format!("number: cannot convert {input:?} to an integer in base {base}")
                })?)
            }
            Func::String => Value::Str(to_text(&args[0])),
        })
    }
}

/// Equality without any conversion between types (`1` is not `1.0`).
fn strict_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x == y,
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| strict_eq(a, b))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| strict_eq(v, w)))
        }
        _ => a == b,
    }
}

fn find_bytes(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Integer parsing with Go `strconv.ParseInt` rules: base 2..=36, or 0 to
/// take the base from a `0b`/`0o`/`0x`/`0` prefix (and allow `_`).
fn parse_int(s: &str, base: i64) -> Option<i64> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits): (u32, String) = if base == 0 {
        let lower = body.to_ascii_lowercase();
        let (r, d) = if let Some(d) = lower.strip_prefix("0x") {
            (16, d.to_string())
        } else if let Some(d) = lower.strip_prefix("0o") {
            (8, d.to_string())
        } else if let Some(d) = lower.strip_prefix("0b") {
            (2, d.to_string())
        } else if lower.len() > 1 && lower.starts_with('0') {
            (8, lower[1..].to_string())
        } else {
            (10, lower)
        };
        (r, d.replace('_', ""))
    } else if (2..=36).contains(&base) {
        (base as u32, body.to_string())
    } else {
        return None;
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let mag = u64::from_str_radix(&digits, radix).ok()?;
    if neg {
        (mag <= i64::MAX as u64 + 1).then(|| (mag as i128).wrapping_neg() as i64)
    } else {
        i64::try_from(mag).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_integer_parsing() {
        let cases = [
            ("002020", 10, Some(2020)),
            ("beef", 16, Some(48879)),
            ("-101", 2, Some(-5)),
            ("+7", 10, Some(7)),
            ("0x1f", 0, Some(31)),
            ("017", 0, Some(15)),
            ("1_000", 0, Some(1000)),
            ("1_000", 10, None),
            ("z", 36, Some(35)),
            ("1", 1, None),
            ("1", 37, None),
            ("", 10, None),
            ("-", 10, None),
            ("9223372036854775808", 10, None),
            ("-9223372036854775808", 10, Some(i64::MIN)),
        ];
        for (s, base, want) in cases {
            assert_eq!(parse_int(s, base), want, "{s} base {base}");
        }
    }
}
