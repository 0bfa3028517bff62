//! Evaluation of conditions, with the reference implementation's type rules:
//!
//! - `==`/`!=`: null equals only null; a bool, string, list or map on the
//!   left is simply unequal to a value of another type; a number on the left
//!   compares with ints and floats (`1 == 1.0`), is unequal to null, and is
//!   an error against anything else (`1 == 'a'` fails, `'a' == 1` is false).
//! - `< <= > >=` and arithmetic: numbers only; int op int stays int (`/`
//!   truncates), a float on either side makes a float; division or modulo by
//!   zero is an error; `%` takes ints only.
//! - `and`, `or`, `not`: booleans only. Both sides are always evaluated, so
//!   an error anywhere is an error of the whole condition.
//! - A variable that is missing is null (or an error in strict mode).

use super::CondError;
use super::parser::{BinOp, Expr, ExprKind, VarAlt};
use crate::value::{Value, go_float_e};
use crate::vars::Vars;

/// How to evaluate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EvalOptions {
    /// Make a variable none of whose alternatives resolve an error instead
    /// of null.
    pub strict: bool,
}

/// Evaluates an expression to a value.
pub fn eval(e: &Expr, vars: &Vars, opts: EvalOptions) -> Result<Value, CondError> {
    match &e.kind {
        ExprKind::Lit(v) => Ok(v.clone()),
        ExprKind::Var(alts) => {
            for a in alts {
                match a {
                    VarAlt::Const(c) => return Ok(c.clone()),
                    VarAlt::Name(n) => {
                        if let Some(v) = vars.lookup(n) {
                            return Ok(v.clone());
                        }
                    }
                }
            }
            if opts.strict {
                let names: Vec<String> = alts
                    .iter()
                    .filter_map(|a| match a {
                        VarAlt::Name(n) => Some(n.clone()),
                        VarAlt::Const(_) => None,
                    })
                    .collect();
                return Err(CondError::new(
                    e.col,
                    format!("unknown variable: {}", names.join(", ")),
                )
                .with_hint("provide it in the variables, or add a fallback: ${name|'default'}"));
            }
            Ok(Value::Null)
        }
        ExprKind::Not(inner) => match eval(inner, vars, opts)? {
            Value::Bool(b) => Ok(Value::Bool(!b)),
            other => Err(CondError::new(
                e.col,
                format!("`not` needs a boolean, got {}", other.type_name()),
            )),
        },
        ExprKind::Binary(op, l, r) => {
            let lv = eval(l, vars, opts)?;
            let rv = eval(r, vars, opts)?;
            binary(*op, &lv, &rv).map_err(|m| CondError::new(e.col, m))
        }
        ExprKind::Call(f, args) => {
            let mut vals = Vec::with_capacity(args.len());
            for a in args {
                vals.push(eval(a, vars, opts)?);
            }
            f.call(vals).map_err(|m| CondError::new(e.col, m))
        }
    }
}

/// Evaluates and insists on a boolean result.
pub fn eval_bool(e: &Expr, vars: &Vars, opts: EvalOptions) -> Result<bool, CondError> {
    match eval(e, vars, opts)? {
        Value::Bool(b) => Ok(b),
        other => Err(CondError::new(
            1,
            format!(
                "a condition must evaluate to a boolean, got {}",
                other.type_name()
            ),
        )
        .with_hint("compare the value, e.g. `... == true` or `length(...) > 0`")),
    }
}

fn binary(op: BinOp, l: &Value, r: &Value) -> Result<Value, String> {
    Ok(match op {
        BinOp::Eq => Value::Bool(equal(l, r)?),
        BinOp::Neq => Value::Bool(!equal(l, r)?),
        BinOp::Lt | BinOp::Lte | BinOp::Gt | BinOp::Gte => Value::Bool(order(op, l, r)?),
        BinOp::And | BinOp::Or => match (l, r) {
            (Value::Bool(a), Value::Bool(b)) => {
                Value::Bool(if op == BinOp::And { *a && *b } else { *a || *b })
            }
            _ => {
                return Err(format!(
                    "`{}` needs booleans on both sides, got {} and {}",
                    op.symbol(),
                    l.type_name(),
                    r.type_name()
                ));
            }
        },
        _ => math(op, l, r)?,
    })
}

/// `==` with the reference type rules (see the module docs).
pub fn equal(l: &Value, r: &Value) -> Result<bool, String> {
    Ok(match (l, r) {
        (Value::Null, _) => matches!(r, Value::Null),
        (Value::Bool(a), _) => matches!(r, Value::Bool(b) if a == b),
        (Value::Str(a), _) => matches!(r, Value::Str(b) if a == b),
        (Value::Int(_) | Value::Float(_), Value::Null) => false,
        (Value::Int(a), Value::Int(b)) => a == b,
        (Value::Int(a), Value::Float(b)) => (*a as f64) == *b,
        (Value::Float(a), Value::Int(b)) => *a == (*b as f64),
        (Value::Float(a), Value::Float(b)) => a == b,
        (Value::Int(_) | Value::Float(_), _) => {
            return Err(format!(
                "cannot compare {} with {}: a number can only be compared with numbers",
                l.type_name(),
                r.type_name()
            ));
        }
        (Value::List(a), _) => {
            let Value::List(b) = r else { return Ok(false) };
            if a.len() != b.len() {
                return Ok(false);
            }
            for (x, y) in a.iter().zip(b) {
                if !equal(x, y)? {
                    return Ok(false);
                }
            }
            true
        }
        (Value::Map(a), _) => {
            let Value::Map(b) = r else { return Ok(false) };
            if a.len() != b.len() || a.iter().any(|(k, _)| !b.contains_key(k)) {
                return Ok(false);
            }
            for k in a.sorted_keys() {
                if let (Some(x), Some(y)) = (a.get(k), b.get(k))
                    && !equal(x, y)?
                {
                    return Ok(false);
                }
            }
            true
        }
    })
}

fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    }
}

fn order(op: BinOp, l: &Value, r: &Value) -> Result<bool, String> {
    if let (Value::Int(a), Value::Int(b)) = (l, r) {
        return Ok(match op {
            BinOp::Lt => a < b,
            BinOp::Lte => a <= b,
            BinOp::Gt => a > b,
            _ => a >= b,
        });
    }
    let (Some(a), Some(b)) = (as_f64(l), as_f64(r)) else {
        return Err(format!(
            "`{}` needs numbers on both sides, got {} and {}",
            op.symbol(),
            l.type_name(),
            r.type_name()
        ));
    };
    Ok(match op {
        BinOp::Lt => a < b,
        BinOp::Lte => a <= b,
        BinOp::Gt => a > b,
        _ => a >= b,
    })
}

/// Arithmetic: `+ - * / %`. Integer overflow wraps, as in the reference.
pub fn math(op: BinOp, l: &Value, r: &Value) -> Result<Value, String> {
    let sym = op.symbol();
    if op == BinOp::Mod {
        return match (l, r) {
            (Value::Int(_), Value::Int(0)) => Err("modulo by zero".into()),
            (Value::Int(a), Value::Int(b)) => Ok(Value::Int(a.wrapping_rem(*b))),
            _ => Err(format!(
                "`%` needs two integers, got {} and {}",
                l.type_name(),
                r.type_name()
            )),
        };
    }
    if let (Value::Int(a), Value::Int(b)) = (l, r) {
        return Ok(Value::Int(match op {
            BinOp::Add => a.wrapping_add(*b),
            BinOp::Sub => a.wrapping_sub(*b),
            BinOp::Mul => a.wrapping_mul(*b),
            _ => {
                if *b == 0 {
                    return Err("division by zero".into());
                }
                a.wrapping_div(*b)
            }
        }));
    }
    let (Some(a), Some(b)) = (as_f64(l), as_f64(r)) else {
        return Err(format!(
            "`{sym}` needs numbers on both sides, got {} and {}",
            l.type_name(),
            r.type_name()
        ));
    };
    Ok(Value::Float(match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        _ => {
            if b == 0.0 {
                return Err("division by zero".into());
            }
            a / b
        }
    }))
}

/// The text functions use for a value: null is `null`, floats use Go's
/// `%E` form (`2E+00`), lists are `[a,b]`, maps `{k:v,...}` (keys sorted).
pub fn to_text(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => go_float_e(*f),
        Value::Str(s) => s.clone(),
        Value::List(l) => format!("[{}]", l.iter().map(to_text).collect::<Vec<_>>().join(",")),
        Value::Map(m) => format!(
            "{{{}}}",
            m.sorted_keys()
                .into_iter()
                .map(|k| format!("{k}:{}", m.get(k).map(to_text).unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}
