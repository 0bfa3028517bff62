//! The `_bulk` request body and the judgement of its answer, without I/O.
//!
//! Each event becomes a `create` action into `{type}-{dataset}-{namespace}`
//! (its data stream), with `_id` when the event has one; `@metadata` itself
//! is not indexed, as in Beats. Both come from the routing the event
//! carries beside its line (see [`Meta`]), so documents are copied, not
//! parsed; only a line without it (read back from an earlier run's disk
//! queue, or whose payload names its own data stream) is parsed for its
//! `data_stream` and `@metadata._id`. Each item of the answer is settled
//! (written, already there, refused for good) or left to retry.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::pipeline::event::{
    DEFAULT_DATASET, DEFAULT_NAMESPACE, DEFAULT_TYPE, Meta, data_stream_index,
};

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "@metadata", default, borrow)]
    metadata: Option<Metadata<'a>>,
    #[serde(default, borrow)]
    data_stream: Option<DataStream<'a>>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(rename = "_id", default, borrow)]
    id: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DataStream<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    dataset: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    namespace: Option<Cow<'a, str>>,
}

/// Appends the action line and the source of `line` (one NDJSON event) to
/// `body`: from `meta` when the event's routing was known as it was
/// produced (no parsing; the `@metadata` bytes are cut out), else from the
/// line itself. A line that is not a JSON object is sent as it is, to the
/// default stream: the server's answer for it is judged like any other.
pub fn append(body: &mut Vec<u8>, line: &[u8], meta: Option<&Meta>) {
    let line = crate::outputs::wire::without_line_end(line);
    if let Some(meta) = meta {
        let cut = meta
            .metadata
            .clone()
            .filter(|r| r.start <= r.end && r.end <= line.len());
        push_action(body, &meta.index, meta.id.as_deref());
        match cut {
            Some(r) => {
                body.extend_from_slice(&line[..r.start]);
                body.extend_from_slice(&line[r.end..]);
            }
            None => body.extend_from_slice(line),
        }
        body.push(b'\n');
        return;
    }
    parse_and_append(body, line);
}

/// The action line of a `create` into `index`, with `_id` when given.
fn push_action(body: &mut Vec<u8>, index: &str, id: Option<&str>) {
    body.extend_from_slice(b"{\"create\":{\"_index\":");
    let _ = serde_json::to_writer(&mut *body, index);
    if let Some(id) = id {
        body.extend_from_slice(b",\"_id\":");
        let _ = serde_json::to_writer(&mut *body, id);
    }
    body.extend_from_slice(b"}}\n");
}

/// [`append`] for an event whose routing must be read from its line.
fn parse_and_append(body: &mut Vec<u8>, line: &[u8]) {
    let head: Option<Head<'_>> = serde_json::from_slice(line).ok();
    let (index, id, has_metadata) = match &head {
        Some(h) => {
            let ds = h.data_stream.as_ref();
            let index = data_stream_index(
                ds.and_then(|d| d.kind.as_deref()),
                ds.and_then(|d| d.dataset.as_deref()),
                ds.and_then(|d| d.namespace.as_deref()),
            );
            let id = h
                .metadata
                .as_ref()
                .and_then(|m| m.id.as_ref())
                .map(|s| s.to_string());
            (index, id, h.metadata.is_some())
        }
        None => (
            format!("{DEFAULT_TYPE}-{DEFAULT_DATASET}-{DEFAULT_NAMESPACE}"),
            None,
            false,
        ),
    };
    push_action(body, &index, id.as_deref());
    if has_metadata {
        match serde_json::from_slice::<Map<String, Value>>(line) {
            Ok(mut doc) => {
                doc.remove("@metadata");
                let _ = serde_json::to_writer(&mut *body, &doc);
            }
            Err(_) => body.extend_from_slice(line),
        }
    } else {
        body.extend_from_slice(line);
    }
    body.push(b'\n');
}

/// What became of one document of a bulk request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemAnswer {
    /// Indexed now.
    Written,
    /// A document with its `_id` was already there (409 on `create`): it
    /// was delivered before, by this agent or an earlier leader.
    Duplicate,
    /// Refused for good (400: a mapping conflict, a malformed document):
    /// retrying cannot help.
    Dropped {
        /// The item's HTTP status.
        status: u16,
        /// `error.type: error.reason`.
        reason: String,
    },
    /// Refused for now (429, 5xx, a write block's 403…): send it again
    /// after a backoff.
    Retry {
        /// The item's HTTP status.
        status: u16,
        /// `error.type: error.reason`.
        reason: String,
    },
}

#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    items: Vec<Action>,
}

/// One item of the answer: `{"<action>": {status, error}}`, read without
/// keeping the action's name.
struct Action(Item);

impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Action;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a bulk item: an object with one action")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Action, A::Error> {
                let mut item = None;
                while m.next_key::<serde::de::IgnoredAny>()?.is_some() {
                    let it: Item = m.next_value()?;
                    item.get_or_insert(it);
                }
                Ok(Action(item.unwrap_or(Item {
                    status: 0,
                    error: None,
                })))
            }
        }
        d.deserialize_map(Visit)
    }
}

#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    status: u16,
    #[serde(default)]
    error: Option<Value>,
}

/// Judges a 2xx `_bulk` answer for a request of `sent` documents, one
/// outcome per document in request order. An answer whose item count does
/// not match is an error (nothing is known to be written). Only `status`
/// and `error` of each item are read, so the answer may be filtered to
/// them (`filter_path`).
pub fn judge(answer: &[u8], sent: usize) -> Result<Vec<ItemAnswer>, String> {
    let r: Response = serde_json::from_slice(answer)
        .map_err(|e| format!("the _bulk answer is not the expected JSON: {e}"))?;
    if r.items.len() != sent {
        return Err(format!(
            "the _bulk answer lists {} items for {sent} documents sent",
            r.items.len()
        ));
    }
    Ok(r.items
        .into_iter()
        .map(|Action(i)| classify(i.status, i.error.as_ref()))
        .collect())
}

fn classify(status: u16, error: Option<&Value>) -> ItemAnswer {
    use crate::outputs::retry::{Refusal, http_status};
    match status {
        200..=299 => ItemAnswer::Written,
        409 => ItemAnswer::Duplicate,
        _ => match http_status(status) {
            Refusal::Permanent => ItemAnswer::Dropped {
                status,
                reason: reason(error),
            },
            Refusal::Retry => ItemAnswer::Retry {
                status,
                reason: reason(error),
            },
        },
    }
}

/// `type: reason` of an item error, with the first `caused_by` when given.
fn reason(error: Option<&Value>) -> String {
    let Some(e) = error else {
        return "no error detail".to_string();
    };
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut s = format!("{}: {}", field(e, "type"), field(e, "reason"));
    if let Some(c) = e.get("caused_by") {
        s.push_str(&format!(
            " (caused by {}: {})",
            field(c, "type"),
            field(c, "reason")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(lines: &[&str]) -> Vec<String> {
        let mut body = Vec::new();
        for l in lines {
            append(&mut body, format!("{l}\n").as_bytes(), None);
        }
        String::from_utf8(body)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn events_go_to_their_data_stream_with_their_id_and_without_metadata() {
        let lines = body_of(&[
            r#"{"@timestamp":"2026-12-03T10:00:00.000000Z","@metadata":{"_id":"abc"},"data_stream":{"type":"metrics","dataset":"kubernetes.state_pod","namespace":"prod"},"x":1}"#,
            r#"{"@timestamp":"2026-12-03T10:00:00.000000Z","message":"hi"}"#,
        ]);
        assert_eq!(
            lines[0],
            r#"{"create":{"_index":"metrics-kubernetes.state_pod-prod","_id":"abc"}}"#
        );
        let src: Value = serde_json::from_str(&lines[1]).unwrap();
        assert!(src.get("@metadata").is_none());
        assert_eq!(src["x"], 1);
        assert_eq!(lines[2], r#"{"create":{"_index":"logs-generic-default"}}"#);
        assert_eq!(
            lines[3],
            r#"{"@timestamp":"2026-12-03T10:00:00.000000Z","message":"hi"}"#
        );
    }

    #[test]
    fn a_line_that_is_not_json_is_sent_as_it_is() {
        let lines = body_of(&["not json"]);
        assert_eq!(lines[0], r#"{"create":{"_index":"logs-generic-default"}}"#);
        assert_eq!(lines[1], "not json");
    }

    #[test]
    fn items_are_judged_by_status() {
        let answer = br#"{"took":3,"errors":true,"items":[
            {"create":{"_index":"a","_id":"1","status":201}},
            {"create":{"_index":"a","_id":"2","status":409,"error":{"type":"version_conflict_engine_exception","reason":"exists"}}},
            {"create":{"_index":"a","status":400,"error":{"type":"mapper_parsing_exception","reason":"failed to parse field [n]","caused_by":{"type":"illegal_argument_exception","reason":"object"}}}},
            {"create":{"_index":"a","status":429,"error":{"type":"es_rejected_execution_exception","reason":"queue full"}}},
            {"create":{"_index":"a","status":503,"error":{"type":"unavailable_shards_exception","reason":"primary"}}},
            {"create":{"_index":"a","status":403,"error":{"type":"cluster_block_exception","reason":"index [a] blocked by: [FORBIDDEN/8/index write (api)];"}}},
            {"create":{"_index":"a","status":404,"error":{"type":"index_not_found_exception","reason":"no such index [a]"}}}
        ]}"#;
        let out = judge(answer, 7).unwrap();
        assert_eq!(out[0], ItemAnswer::Written);
        assert_eq!(out[1], ItemAnswer::Duplicate);
        assert!(
            matches!(&out[2], ItemAnswer::Dropped { status: 400, reason } if reason.contains("mapper_parsing_exception") && reason.contains("caused by illegal_argument_exception"))
        );
        assert!(matches!(out[3], ItemAnswer::Retry { status: 429, .. }));
        assert!(matches!(out[4], ItemAnswer::Retry { status: 503, .. }));
        // A write block or a missing index can be lifted: kept, not lost.
        assert!(
            matches!(&out[5], ItemAnswer::Retry { status: 403, reason } if reason.contains("cluster_block_exception"))
        );
        assert!(matches!(out[6], ItemAnswer::Retry { status: 404, .. }));
        assert_eq!(
            out.iter()
                .filter(|o| !matches!(o, ItemAnswer::Retry { .. }))
                .count(),
            3,
            "written, duplicate and dropped are settled"
        );
    }

    #[test]
    fn a_filtered_answer_is_judged_like_a_whole_one() {
        // `filter_path=errors,items.*.status,items.*.error`, as sent.
        let answer = br#"{"errors":true,"items":[{"create":{"status":201}},{"index":{"status":409,"error":{"type":"version_conflict_engine_exception","reason":"exists"}}},{"create":{"status":429,"error":{"type":"es_rejected_execution_exception","reason":"queue full"}}}]}"#;
        let out = judge(answer, 3).unwrap();
        assert_eq!(out[0], ItemAnswer::Written);
        assert_eq!(out[1], ItemAnswer::Duplicate);
        assert!(
            matches!(&out[2], ItemAnswer::Retry { status: 429, reason } if reason.contains("queue full"))
        );
        // An item without a status is not known to be written.
        let answer = br#"{"errors":false,"items":[{"create":{}}]}"#;
        assert!(matches!(
            judge(answer, 1).unwrap()[0],
            ItemAnswer::Retry { status: 0, .. }
        ));
    }

    #[test]
    fn an_answer_with_the_wrong_item_count_is_an_error() {
        let answer = br#"{"errors":false,"items":[{"create":{"status":201}}]}"#;
        assert!(judge(answer, 2).unwrap_err().contains("1 items for 2"));
        assert!(judge(b"<html>", 1).is_err());
    }
}
