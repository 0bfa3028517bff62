//! Events cross between serde's JSON values and the engine's values
//! directly, as JSON's rules would carry them (functions and `undefined`
//! left out of objects, `null` in arrays, dates through `toJSON`), without
//! printing and parsing text: QuickJS's `JSON.stringify` quotes strings a
//! character at a time, which was most of a script's cost per event.

use rquickjs::{Ctx, Function, IntoJs, Object, Type, Value};
use serde_json::{Map, Number};

/// How deep fields may nest coming back (deeper is taken for a cycle).
const MAX_DEPTH: usize = 128;

/// `value` as an engine value.
pub(super) fn to_js<'js>(
    ctx: &Ctx<'js>,
    value: &serde_json::Value,
) -> rquickjs::Result<Value<'js>> {
    Ok(match value {
        serde_json::Value::Null => Value::new_null(ctx.clone()),
        serde_json::Value::Bool(b) => Value::new_bool(ctx.clone(), *b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) if i32::try_from(i).is_ok() => Value::new_int(ctx.clone(), i as i32),
            _ => Value::new_float(ctx.clone(), n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => s.as_str().into_js(ctx)?,
        serde_json::Value::Array(items) => {
            let array = rquickjs::Array::new(ctx.clone())?;
            for (i, item) in items.iter().enumerate() {
                array.set(i, to_js(ctx, item)?)?;
            }
            array.into_value()
        }
        serde_json::Value::Object(map) => object_to_js(ctx, map)?.into_value(),
    })
}

/// `map` as an engine object.
pub(super) fn object_to_js<'js>(
    ctx: &Ctx<'js>,
    map: &Map<String, serde_json::Value>,
) -> rquickjs::Result<Object<'js>> {
    let object = Object::new(ctx.clone())?;
    for (k, v) in map {
        object.set(k.as_str(), to_js(ctx, v)?)?;
    }
    Ok(object)
}

/// An engine object as a JSON object; an error for what JSON cannot hold
/// (a BigInt, a cycle) or a value that is not an object.
pub(super) fn object_from_js(value: &Value<'_>) -> Result<Map<String, serde_json::Value>, String> {
    match from_js(value, 0)? {
        Some(serde_json::Value::Object(m)) => Ok(m),
        _ => Err("the event's fields are no longer an object".to_owned()),
    }
}

/// `None` for what JSON leaves out of an object (`undefined`, functions,
/// symbols).
fn from_js(value: &Value<'_>, depth: usize) -> Result<Option<serde_json::Value>, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "the event's fields nest deeper than {MAX_DEPTH} levels (a cycle?)"
        ));
    }
    Ok(Some(match value.type_of() {
        Type::Uninitialized
        | Type::Undefined
        | Type::Function
        | Type::Constructor
        | Type::Symbol => {
            return Ok(None);
        }
        Type::Null | Type::Module | Type::Unknown => serde_json::Value::Null,
        Type::Bool => serde_json::Value::Bool(value.as_bool().unwrap_or(false)),
        Type::Int => serde_json::Value::from(value.as_int().unwrap_or(0)),
        Type::Float => number(value.as_float().unwrap_or(f64::NAN)),
        Type::String => serde_json::Value::String(
            value
                .as_string()
                .and_then(|s| s.to_string().ok())
                .unwrap_or_default(),
        ),
        Type::BigInt => return Err("a BigInt cannot be a field's value".to_owned()),
        Type::Array => {
            let array = value.as_array().ok_or("an array that is not one")?;
            let mut items = Vec::with_capacity(array.len());
            for i in 0..array.len() {
                let item: Value = array.get(i).map_err(|e| e.to_string())?;
                items.push(from_js(&item, depth + 1)?.unwrap_or(serde_json::Value::Null));
            }
            serde_json::Value::Array(items)
        }
        Type::Object | Type::Promise | Type::Exception | Type::Proxy => {
            let object = value.as_object().ok_or("an object that is not one")?;
            // A Date (or any object with `toJSON`) goes as JSON takes it.
            if let Ok(to_json) = object.get::<_, Function>("toJSON") {
                let v: Value = to_json
                    .call((rquickjs::function::This(object.clone()),))
                    .map_err(|e| e.to_string())?;
                return from_js(&v, depth + 1);
            }
            let mut map = Map::new();
            for prop in object.props::<String, Value>() {
                let (k, v) = prop.map_err(|e| e.to_string())?;
                if let Some(v) = from_js(&v, depth + 1)? {
                    map.insert(k, v);
                }
            }
            serde_json::Value::Object(map)
        }
    }))
}

/// A double as JSON writes it: whole numbers as integers, NaN and the
/// infinities as `null`.
fn number(f: f64) -> serde_json::Value {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
        serde_json::Value::from(f as i64)
    } else {
        Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number)
    }
}
