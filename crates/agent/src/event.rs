//! The event an input produces and an output writes: one JSON object.
//!
//! Inputs fill in their payload; the runtime's sink adds the common fields
//! (`@timestamp`, `agent`, `input`, `data_stream`, `leader`) before the event
//! reaches an output queue, so every output sees finished documents.

use std::sync::Arc;

use serde_json::{Map, Value};

/// One event: a JSON object plus the id of the input that produced it (kept
/// outside the document for per-input metrics without a lookup).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The producing input's id.
    pub input_id: Arc<str>,
    /// The document as it will be written.
    pub doc: Map<String, Value>,
}

impl Event {
    /// An event of `input_id` with `doc` as its document.
    pub fn new(input_id: Arc<str>, doc: Map<String, Value>) -> Self {
        Event { input_id, doc }
    }

    /// The document as one line of NDJSON, newline included.
    pub fn to_ndjson(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(&self.doc).unwrap_or_else(|_| b"{}".to_vec());
        line.push(b'\n');
        line
    }
}

/// `@timestamp` of an event produced now: RFC 3339, UTC, microseconds.
pub fn timestamp_now() -> String {
    format_timestamp(jiff::Timestamp::now())
}

/// RFC 3339 in UTC with exactly six fractional digits, e.g.
/// `2026-12-03T07:31:48.123456Z`.
pub fn format_timestamp(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_with_microseconds() {
        let t: jiff::Timestamp = "2026-12-03T07:31:48.1234567Z".parse().unwrap();
        assert_eq!(format_timestamp(t), "2026-12-03T07:31:48.123456Z");
        let t: jiff::Timestamp = "2026-12-03T07:31:48Z".parse().unwrap();
        assert_eq!(format_timestamp(t), "2026-12-03T07:31:48.000000Z");
    }

    #[test]
    fn ndjson_is_one_line() {
        let mut doc = Map::new();
        doc.insert("message".into(), Value::String("a\nb".into()));
        let line = Event::new("x".into(), doc).to_ndjson();
        assert_eq!(line, b"{\"message\":\"a\\nb\"}\n");
    }
}
