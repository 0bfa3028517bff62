//! Dotted field paths over a JSON event, the way Beats' `mapstr` walks them.
//!
//! A path such as `kubernetes.labels.app` is resolved level by level. At each
//! level the whole remaining path is first tried as a literal key (so an event
//! holding `{"a.b": 1}` answers `a.b`), and only then is the path split at its
//! first dot to descend into an object. Arrays are never indexed. Writing a
//! path creates the missing objects on the way.

use serde_json::{Map, Value};

/// Why a path does not resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PathError {
    /// Some key on the way is absent.
    Missing,
    /// A value on the way (named by the key that holds it) is not an object.
    NotObject(String),
}

impl std::fmt::Display for PathError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathError::Missing => f.write_str("key not found"),
            PathError::NotObject(key) => write!(f, "expected an object at `{key}`"),
        }
    }
}

/// The value at `path`.
pub(crate) fn get<'a>(map: &'a Map<String, Value>, path: &str) -> Result<&'a Value, PathError> {
    let mut data = map;
    let mut key = path;
    loop {
        if let Some(v) = data.get(key) {
            return Ok(v);
        }
        let Some(dot) = key.find('.') else {
            return Err(PathError::Missing);
        };
        let head = &key[..dot];
        match data.get(head) {
            None => return Err(PathError::Missing),
            Some(Value::Object(sub)) => data = sub,
            Some(_) => return Err(PathError::NotObject(head.to_owned())),
        }
        key = &key[dot + 1..];
    }
}

/// Whether `path` resolves to a value (`null` included).
pub(crate) fn exists(map: &Map<String, Value>, path: &str) -> bool {
    get(map, path).is_ok()
}

/// The value at `path`, mutably.
pub(crate) fn get_mut<'a>(
    map: &'a mut Map<String, Value>,
    path: &str,
) -> Result<&'a mut Value, PathError> {
    let (parent, key) = parent_mut(map, path)?;
    parent.get_mut(key).ok_or(PathError::Missing)
}

/// The object that holds the value at `path`, and that value's key in it:
/// a literal key (dots included) wins over a walk through nested objects.
fn parent_mut<'a, 'p>(
    map: &'a mut Map<String, Value>,
    path: &'p str,
) -> Result<(&'a mut Map<String, Value>, &'p str), PathError> {
    let mut data = map;
    let mut key = path;
    loop {
        if data.contains_key(key) {
            return Ok((data, key));
        }
        let Some(dot) = key.find('.') else {
            return Err(PathError::Missing);
        };
        let head = &key[..dot];
        data = match data.get_mut(head) {
            None => return Err(PathError::Missing),
            Some(Value::Object(sub)) => sub,
            Some(_) => return Err(PathError::NotObject(head.to_owned())),
        };
        key = &key[dot + 1..];
    }
}

/// The literal keys `path` resolves through, outermost first; with them a
/// removed value can be put back exactly where it was (see [`insert_at`]).
pub(crate) fn locate(map: &Map<String, Value>, path: &str) -> Result<Vec<String>, PathError> {
    let mut data = map;
    let mut key = path;
    let mut keys = Vec::new();
    loop {
        if data.contains_key(key) {
            keys.push(key.to_owned());
            return Ok(keys);
        }
        let Some(dot) = key.find('.') else {
            return Err(PathError::Missing);
        };
        let head = &key[..dot];
        match data.get(head) {
            None => return Err(PathError::Missing),
            Some(Value::Object(sub)) => data = sub,
            Some(_) => return Err(PathError::NotObject(head.to_owned())),
        }
        keys.push(head.to_owned());
        key = &key[dot + 1..];
    }
}

/// Removes the value at `path` and returns it.
pub(crate) fn remove(map: &mut Map<String, Value>, path: &str) -> Result<Value, PathError> {
    let (parent, key) = parent_mut(map, path)?;
    parent.remove(key).ok_or(PathError::Missing)
}

/// Removes the value at `path`, then every object on the way that the
/// removal left empty (Beats' `drop_fields` with `cleanup`).
pub(crate) fn remove_with_cleanup(
    map: &mut Map<String, Value>,
    path: &str,
) -> Result<Value, PathError> {
    let keys = locate(map, path)?;
    let removed = remove_keys(map, &keys).ok_or(PathError::Missing)?;
    for depth in (1..keys.len()).rev() {
        let parent = &keys[..depth];
        let empty = matches!(object_at(map, parent), Some(m) if m.is_empty());
        if !empty {
            break;
        }
        remove_keys(map, parent);
    }
    Ok(removed)
}

fn object_at<'a>(map: &'a Map<String, Value>, keys: &[String]) -> Option<&'a Map<String, Value>> {
    let mut data = map;
    for k in keys {
        data = data.get(k)?.as_object()?;
    }
    Some(data)
}

fn remove_keys(map: &mut Map<String, Value>, keys: &[String]) -> Option<Value> {
    let (last, parents) = keys.split_last()?;
    let mut data = map;
    for k in parents {
        data = data.get_mut(k)?.as_object_mut()?;
    }
    data.remove(last)
}

/// Puts `value` at `path`, creating the missing objects on the way, and
/// returns the value it replaced. Fails, changing nothing, when a value on
/// the way is not an object.
pub(crate) fn insert(
    map: &mut Map<String, Value>,
    path: &str,
    value: Value,
) -> Result<Option<Value>, PathError> {
    let mut data = map;
    let mut key = path;
    loop {
        if data.contains_key(key) {
            return Ok(data.insert(key.to_owned(), value));
        }
        let Some(dot) = key.find('.') else {
            data.insert(key.to_owned(), value);
            return Ok(None);
        };
        let head = &key[..dot];
        // A missing object is created only when no existing value can be in
        // the way any more: every later level is inside the new, empty object.
        // So an error always comes before any change.
        data = match data
            .entry(head.to_owned())
            .or_insert_with(|| Value::Object(Map::new()))
        {
            Value::Object(sub) => sub,
            _ => return Err(PathError::NotObject(head.to_owned())),
        };
        key = &key[dot + 1..];
    }
}

/// Whether [`insert`] at `path` would succeed.
pub(crate) fn can_insert(map: &Map<String, Value>, path: &str) -> bool {
    match get(map, path) {
        Ok(_) | Err(PathError::Missing) => true,
        Err(PathError::NotObject(_)) => false,
    }
}

/// Puts `value` back under the literal `keys` from [`locate`].
pub(crate) fn insert_at(map: &mut Map<String, Value>, keys: &[String], value: Value) {
    let Some((last, parents)) = keys.split_last() else {
        return;
    };
    let mut data = map;
    for k in parents {
        let slot = data
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if !slot.is_object() {
            *slot = Value::Object(Map::new());
        }
        let Value::Object(sub) = slot else {
            return;
        };
        data = sub;
    }
    data.insert(last.clone(), value);
}

/// Merges `src` into `dst` like Beats' `DeepUpdate`: objects meeting objects
/// merge key by key; anything else replaces the old value, or, without
/// `overwrite`, is only added where the key is absent.
pub(crate) fn deep_update(dst: &mut Map<String, Value>, src: Map<String, Value>, overwrite: bool) {
    for (k, v) in src {
        match v {
            Value::Object(sub) => match dst.get_mut(&k) {
                Some(Value::Object(old)) => deep_update(old, sub, overwrite),
                // Beats replaces a non-object by the object even without
                // overwrite: `deepUpdateValue` returns the new map there.
                _ => {
                    dst.insert(k, Value::Object(sub));
                }
            },
            other => {
                if overwrite || !dst.contains_key(&k) {
                    dst.insert(k, other);
                }
            }
        }
    }
}

/// Every dotted key of `map`, the keys of nested objects before the key of
/// the object holding them (Beats' `FlattenKeys`).
pub(crate) fn flatten_keys(map: &Map<String, Value>) -> Vec<String> {
    fn walk(prefix: &str, map: &Map<String, Value>, out: &mut Vec<String>) {
        for (k, v) in map {
            let full = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if let Value::Object(sub) = v {
                walk(&full, sub, out);
            }
            out.push(full);
        }
    }
    let mut out = Vec::new();
    walk("", map, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn get_walks_objects_and_tries_literal_dotted_keys() {
        let m = obj(json!({
            "kubernetes": {"labels": {"app": "web", "app.kubernetes.io/name": "n"}},
            "a.b": 1,
            "x": {"y.z": 2},
            "s": "text"
        }));
        assert_eq!(get(&m, "kubernetes.labels.app"), Ok(&json!("web")));
        assert_eq!(
            get(&m, "kubernetes.labels.app.kubernetes.io/name"),
            Ok(&json!("n"))
        );
        assert_eq!(get(&m, "a.b"), Ok(&json!(1)));
        assert_eq!(get(&m, "x.y.z"), Ok(&json!(2)));
        assert_eq!(get(&m, "a.c"), Err(PathError::Missing));
        assert_eq!(get(&m, "s.t"), Err(PathError::NotObject("s".into())));
        assert!(!exists(&m, "nope"));
    }

    #[test]
    fn insert_creates_objects_and_refuses_through_scalars_without_change() {
        let mut m = obj(json!({"a": 5, "a.b": 6}));
        assert_eq!(
            insert(&mut m, "a.c.d", json!(1)),
            Err(PathError::NotObject("a".into()))
        );
        assert_eq!(m, obj(json!({"a": 5, "a.b": 6})));
        insert(&mut m, "e.f.g", json!(true)).unwrap();
        assert_eq!(m["e"], json!({"f": {"g": true}}));
        // A literal dotted key that exists is overwritten in place.
        assert_eq!(insert(&mut m, "a.b", json!(7)).unwrap(), Some(json!(6)));
        assert_eq!(m["a.b"], json!(7));
    }

    #[test]
    fn remove_and_put_back_at_the_same_place() {
        let mut m = obj(json!({"a.b": 1, "c": {"d": 2}}));
        let keys = locate(&m, "a.b").unwrap();
        let v = remove(&mut m, "a.b").unwrap();
        insert_at(&mut m, &keys, v);
        assert_eq!(m, obj(json!({"a.b": 1, "c": {"d": 2}})));
        assert_eq!(remove(&mut m, "c.x"), Err(PathError::Missing));
    }

    #[test]
    fn cleanup_removes_emptied_parents_only() {
        let mut m = obj(json!({"a": {"b": {"c": 1}}, "k": {"x": 1, "y": {"z": 2}}}));
        remove_with_cleanup(&mut m, "a.b.c").unwrap();
        remove_with_cleanup(&mut m, "k.y.z").unwrap();
        assert_eq!(m, obj(json!({"k": {"x": 1}})));
    }

    #[test]
    fn deep_update_merges_objects() {
        let mut m = obj(json!({"a": {"keep": 1, "change": "a"}, "s": "x"}));
        deep_update(
            &mut m,
            obj(json!({"a": {"change": "b"}, "s": {"t": 1}, "n": 2})),
            true,
        );
        assert_eq!(
            m,
            obj(json!({"a": {"keep": 1, "change": "b"}, "s": {"t": 1}, "n": 2}))
        );
        deep_update(&mut m, obj(json!({"n": 3, "a": {"new": 1}})), false);
        assert_eq!(m["n"], json!(2));
        assert_eq!(m["a"]["new"], json!(1));
    }

    #[test]
    fn flatten_keys_lists_children_then_parent() {
        let m = obj(json!({"a": {"b": 1}, "c": 2}));
        assert_eq!(flatten_keys(&m), vec!["a.b", "a", "c"]);
    }
}
