//! YAML 1.1 typing of plain scalars, as `gopkg.in/yaml.v2` (under Elastic
//! Agent's go-ucfg) does it: `yes/no/on/off/y/n` are booleans, `0x1f`,
//! `0o17`, `017` and `1_000` are integers, `~` is null, and an invalid octal
//! such as `09` is a float. Quoted and block scalars never come here.

use super::node::NodeKind;

/// Types a plain (unquoted) scalar the way a YAML 1.1 resolver does.
pub fn resolve_plain(s: &str) -> NodeKind {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return NodeKind::Null,
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            return NodeKind::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            return NodeKind::Bool(false);
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return NodeKind::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return NodeKind::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return NodeKind::Float(f64::NAN),
        _ => {}
    }
    let first = s.as_bytes()[0];
    if !(first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'.')) {
        return str_kind(s);
    }
    if let Some(i) = parse_yaml11_int(s) {
        return NodeKind::Int(i);
    }
    if is_yaml_float(s)
        && let Ok(f) = s.replace('_', "").parse::<f64>()
    {
        return NodeKind::Float(f);
    }
    str_kind(s)
}

fn str_kind(s: &str) -> NodeKind {
    NodeKind::Str {
        value: s.to_string(),
        quoted: false,
    }
}

/// Integers in YAML 1.1 style: optional sign, `0x`/`0o`/`0b` prefixes, a
/// leading `0` for octal, `_` separators.
fn parse_yaml11_int(s: &str) -> Option<i64> {
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    let (neg, body) = match plain.as_bytes().first()? {
        b'-' => (true, &plain[1..]),
        b'+' => (false, &plain[1..]),
        _ => (false, &plain[..]),
    };
    if body.is_empty() {
        return None;
    }
    let (radix, digits) = if let Some(d) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        (16, d)
    } else if let Some(d) = body.strip_prefix("0o").or(body.strip_prefix("0O")) {
        (8, d)
    } else if let Some(d) = body.strip_prefix("0b").or(body.strip_prefix("0B")) {
        (2, d)
    } else if body.len() > 1 && body.starts_with('0') {
        (8, &body[1..])
    } else {
        (10, body)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let mag = u64::from_str_radix(digits, radix).ok()?;
    if neg {
        if mag <= i64::MAX as u64 + 1 {
            Some((mag as i128).wrapping_neg() as i64)
        } else {
            None
        }
    } else {
        i64::try_from(mag).ok()
    }
}

fn is_yaml_float(s: &str) -> bool {
    // [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}
