//! Documents built from dotted field names, as the metricsets write them.

use serde_json::{Map, Value as Json};

/// Sets `a.b.c` inside nested objects.
pub fn set_path(doc: &mut Map<String, Json>, path: &str, value: Json) {
    let mut parts = path.split('.').peekable();
    let mut at = doc;
    while let Some(p) = parts.next() {
        if parts.peek().is_none() {
            at.insert(p.to_string(), value);
            return;
        }
        let next = at
            .entry(p.to_string())
            .or_insert_with(|| Json::Object(Map::new()));
        if !next.is_object() {
            *next = Json::Object(Map::new());
        }
        let Json::Object(m) = next else { return };
        at = m;
    }
}
