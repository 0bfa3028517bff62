//! Log records written from NDJSON lines straight into OTLP's protobuf
//! wire format (an `ExportLogsServiceRequest`), without I/O.
//!
//! The line is walked once by serde_json's parser and each leaf is written
//! as it is met: no document tree, no message structs, no copy of a key or
//! value beyond the one into the request. The mapping is
//! [`super::convert`]'s for log records (its tests and this module's
//! compare the two): `message` is the body (the line itself when there is
//! none), `@timestamp` the record's time, `log.level` also its
//! `severity_text`, `@metadata._id` the attribute `leasehold.event_id`,
//! every other leaf an attribute named by its dotted path: a resource
//! attribute when it says where the record comes from
//! ([`super::convert::is_resource`]), a record attribute otherwise. Records
//! whose resource attributes are the same bytes share one `ResourceLogs`,
//! so a source's metadata is sent once per request, not once per line. A metric
//! document (`data_stream.type: metrics`) is not written here: the caller
//! converts it into data points.

use std::collections::HashMap;
use std::fmt;

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message as _;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::convert::{EVENT_ID_ATTRIBUTE, any, is_resource, parse_time};

// Field numbers of opentelemetry-proto's messages (logs.proto,
// common.proto, resource.proto, logs_service.proto).
const REQUEST_RESOURCE_LOGS: u32 = 1;
const RESOURCE_LOGS_RESOURCE: u32 = 1;
const RESOURCE_LOGS_SCOPE_LOGS: u32 = 2;
const RESOURCE_ATTRIBUTES: u32 = 1;
const SCOPE_LOGS_SCOPE: u32 = 1;
const SCOPE_LOGS_LOG_RECORDS: u32 = 2;
const SCOPE_NAME: u32 = 1;
const SCOPE_VERSION: u32 = 2;
const RECORD_TIME: u32 = 1;
const RECORD_SEVERITY_TEXT: u32 = 3;
const RECORD_BODY: u32 = 5;
const RECORD_ATTRIBUTES: u32 = 6;
const RECORD_OBSERVED_TIME: u32 = 11;
const KEY_VALUE_KEY: u32 = 1;
const KEY_VALUE_VALUE: u32 = 2;
const ANY_STRING: u32 = 1;
const ANY_BOOL: u32 = 2;
const ANY_INT: u32 = 3;
const ANY_DOUBLE: u32 = 4;

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

/// The log records of one export request, encoded as they are pushed.
#[derive(Default)]
pub struct LogsEncoder {
    /// Records grouped by their resource attributes, in first-seen order.
    groups: Vec<Group>,
    /// Index in `groups` by the encoding of the resource attributes.
    by_resource: HashMap<Vec<u8>, usize>,
    /// The group the last record went to (lines of one source come in
    /// runs, so most records skip the hash).
    last: Option<usize>,
    /// The record being written (its fields, without tag and length).
    record: Vec<u8>,
    /// Its resource attributes (`Resource.attributes` fields).
    resource: Vec<u8>,
    /// Records pushed.
    count: usize,
    /// The dotted path of the leaf being read.
    path: String,
}

/// The records of one resource.
struct Group {
    /// `Resource.attributes` fields, each with its tag and length.
    resource: Vec<u8>,
    /// `ScopeLogs.log_records`, each with its tag and length.
    records: Vec<u8>,
}

/// What one line turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    /// Written as a log record.
    Record,
    /// A metric document: not written, for the caller's data points.
    Metric,
}

impl LogsEncoder {
    /// Log records written so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether no record was written.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Writes `line` (one NDJSON event) as a log record observed at
    /// `now_ns`, unless it is a metric document.
    pub fn push(&mut self, line: &[u8], now_ns: u64) -> Pushed {
        let line = crate::outputs::wire::without_line_end(line);
        self.record.clear();
        self.resource.clear();
        self.path.clear();
        let mut walk = Walk {
            out: &mut self.record,
            resource: &mut self.resource,
            path: &mut self.path,
            body: false,
            metric: false,
        };
        let mut de = serde_json::Deserializer::from_slice(line);
        let walked = Top(&mut walk).deserialize(&mut de).and_then(|()| de.end());
        let (body, metric) = (walk.body, walk.metric);
        match walked {
            Ok(()) if metric => return Pushed::Metric,
            Ok(()) => {
                if !body {
                    // No string `message`: the whole document is the body.
                    any_string(
                        &mut self.record,
                        RECORD_BODY,
                        &String::from_utf8_lossy(line),
                    );
                }
            }
            Err(_) => {
                // Not a JSON object: the text itself is the body.
                self.record.clear();
                self.resource.clear();
                let text = String::from_utf8_lossy(line);
                any_string(&mut self.record, RECORD_BODY, text.trim_end());
            }
        }
        fixed64(&mut self.record, RECORD_OBSERVED_TIME, now_ns);
        self.file_record();
        Pushed::Record
    }

    /// Adds a record built as a message, with the resource attributes
    /// `resource` (a metric document without numbers, converted by
    /// [`super::convert`]).
    pub fn push_record(&mut self, resource: &[KeyValue], record: &LogRecord) {
        self.resource.clear();
        for a in resource {
            key(&mut self.resource, RESOURCE_ATTRIBUTES, LEN);
            varint(&mut self.resource, a.encoded_len() as u64);
            a.encode_raw(&mut self.resource);
        }
        self.record.clear();
        record.encode_raw(&mut self.record);
        self.file_record();
    }

    /// Appends the record in `self.record` to the group of the resource
    /// attributes in `self.resource`.
    fn file_record(&mut self) {
        let group = self.group();
        let records = &mut self.groups[group].records;
        key(records, SCOPE_LOGS_LOG_RECORDS, LEN);
        varint(records, self.record.len() as u64);
        records.extend_from_slice(&self.record);
        self.count += 1;
    }

    /// The group of the resource attributes in `self.resource`, made if
    /// new.
    fn group(&mut self) -> usize {
        if let Some(i) = self.last
            && self.groups[i].resource == self.resource
        {
            return i;
        }
        let i = match self.by_resource.get(self.resource.as_slice()) {
            Some(&i) => i,
            None => {
                let i = self.groups.len();
                self.groups.push(Group {
                    resource: self.resource.clone(),
                    records: Vec::new(),
                });
                self.by_resource.insert(self.resource.clone(), i);
                i
            }
        };
        self.last = Some(i);
        i
    }

    /// The `ExportLogsServiceRequest` of the records pushed: one
    /// `ResourceLogs` per group, its resource [`super::convert`]'s
    /// `service.name` and the group's attributes, its scope the
    /// converter's.
    pub fn finish(self) -> Vec<u8> {
        let mut service = Vec::new();
        let mut kv = Vec::new();
        string(&mut kv, KEY_VALUE_KEY, "service.name");
        nested(&mut kv, KEY_VALUE_VALUE, |b| {
            string(b, ANY_STRING, "leasehold")
        });
        bytes(&mut service, RESOURCE_ATTRIBUTES, &kv);
        let mut scope = Vec::new();
        string(&mut scope, SCOPE_NAME, "leasehold");
        string(&mut scope, SCOPE_VERSION, env!("CARGO_PKG_VERSION"));

        // Per group, beside its bytes: four tags with their lengths
        // (ResourceLogs, Resource, ScopeLogs, scope), at most 6 bytes each.
        let size: usize = self
            .groups
            .iter()
            .map(|g| g.records.len() + g.resource.len() + service.len() + scope.len() + 4 * 6)
            .sum();
        let mut out = Vec::with_capacity(size);
        for g in &self.groups {
            let resource_len = service.len() + g.resource.len();
            let scope_logs_len = field_len(scope.len()) + g.records.len();
            let resource_logs_len = field_len(resource_len) + field_len(scope_logs_len);
            key(&mut out, REQUEST_RESOURCE_LOGS, LEN);
            varint(&mut out, resource_logs_len as u64);
            key(&mut out, RESOURCE_LOGS_RESOURCE, LEN);
            varint(&mut out, resource_len as u64);
            out.extend_from_slice(&service);
            out.extend_from_slice(&g.resource);
            key(&mut out, RESOURCE_LOGS_SCOPE_LOGS, LEN);
            varint(&mut out, scope_logs_len as u64);
            bytes(&mut out, SCOPE_LOGS_SCOPE, &scope);
            out.extend_from_slice(&g.records);
        }
        out
    }
}

/// The state of one line's walk: the record's fields so far and the path.
struct Walk<'a> {
    out: &'a mut Vec<u8>,
    /// The record's resource attributes.
    resource: &'a mut Vec<u8>,
    path: &'a mut String,
    /// A string `message` was written as the body.
    body: bool,
    /// `data_stream.type` is `metrics`.
    metric: bool,
}

impl Walk<'_> {
    fn string(&mut self, s: &str) {
        match self.path.as_str() {
            "@timestamp" => {
                let t = parse_time(s);
                if t != 0 {
                    fixed64(self.out, RECORD_TIME, t);
                }
                return;
            }
            "message" => {
                any_string(self.out, RECORD_BODY, s);
                self.body = true;
                return;
            }
            "log.level" => string(self.out, RECORD_SEVERITY_TEXT, s),
            "data_stream.type" if s == "metrics" => self.metric = true,
            _ => {}
        }
        let value_len = field_len(s.len());
        self.attribute(value_len, |b| string(b, ANY_STRING, s));
    }

    fn int(&mut self, i: i64) {
        if self.skipped() {
            return;
        }
        let value_len = 1 + varint_len(i as u64);
        self.attribute(value_len, |b| {
            key(b, ANY_INT, VARINT);
            varint(b, i as u64);
        });
    }

    fn double(&mut self, f: f64) {
        if self.skipped() {
            return;
        }
        self.attribute(9, |b| {
            key(b, ANY_DOUBLE, FIXED64);
            b.extend_from_slice(&f.to_bits().to_le_bytes());
        });
    }

    fn bool(&mut self, v: bool) {
        if self.skipped() {
            return;
        }
        self.attribute(2, |b| {
            key(b, ANY_BOOL, VARINT);
            b.push(u8::from(v));
        });
    }

    fn array(&mut self, items: Vec<Value>) {
        if self.skipped() {
            return;
        }
        if let Some(v) = any(&Value::Array(items)) {
            let encoded = AnyValue::encode_to_vec(&v);
            self.attribute(encoded.len(), |b| b.extend_from_slice(&encoded));
        }
    }

    /// `@timestamp` and `message` that are not strings are no attributes
    /// (as in [`super::convert`]).
    fn skipped(&self) -> bool {
        matches!(self.path.as_str(), "@timestamp" | "message")
    }

    /// Writes the attribute of the current path, its value `value_len`
    /// bytes written by `value`: to the resource's attributes when the
    /// path says where the record comes from, to the record's otherwise.
    fn attribute(&mut self, value_len: usize, value: impl FnOnce(&mut Vec<u8>)) {
        let (name, out, field) = if self.path == "@metadata._id" {
            (EVENT_ID_ATTRIBUTE, &mut *self.out, RECORD_ATTRIBUTES)
        } else if is_resource(self.path.as_str()) {
            (self.path.as_str(), &mut *self.resource, RESOURCE_ATTRIBUTES)
        } else {
            (self.path.as_str(), &mut *self.out, RECORD_ATTRIBUTES)
        };
        let kv_len = field_len(name.len()) + field_len(value_len);
        key(out, field, LEN);
        varint(out, kv_len as u64);
        string(out, KEY_VALUE_KEY, name);
        key(out, KEY_VALUE_VALUE, LEN);
        varint(out, value_len as u64);
        value(out);
    }
}

/// The document: an object, or an error for anything else.
struct Top<'w, 'a>(&'w mut Walk<'a>);

impl<'de> DeserializeSeed<'de> for Top<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(Object(self.0))
    }
}

/// An object's members, each under the current path.
struct Object<'w, 'a>(&'w mut Walk<'a>);

impl<'de> Visitor<'de> for Object<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<(), M::Error> {
        let walk = self.0;
        let base = walk.path.len();
        while map
            .next_key_seed(Name {
                path: &mut *walk.path,
                dot: base > 0,
            })?
            .is_some()
        {
            map.next_value_seed(Leaf(&mut *walk))?;
            walk.path.truncate(base);
        }
        Ok(())
    }
}

/// A member's name, appended to the path (after a dot below the top).
struct Name<'p> {
    path: &'p mut String,
    dot: bool,
}

impl<'de> DeserializeSeed<'de> for Name<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        if self.dot {
            self.path.push('.');
        }
        self.path.push_str(v);
        Ok(())
    }
}

/// One member's value: recursed into when an object, written otherwise.
struct Leaf<'w, 'a>(&'w mut Walk<'a>);

impl<'de> DeserializeSeed<'de> for Leaf<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Leaf<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<(), M::Error> {
        Object(self.0).visit_map(map)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.string(v);
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.bool(v);
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.0.int(v);
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        match i64::try_from(v) {
            Ok(i) => self.0.int(i),
            Err(_) => self.0.double(v as f64),
        }
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.0.double(v);
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element::<Value>()? {
            items.push(v);
        }
        self.0.array(items);
        Ok(())
    }
}

fn key(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

/// Protobuf's base-128 varint.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Bytes of a length-delimited field of `len` bytes with its one-byte key
/// (every field written here is numbered below 16).
fn field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

fn fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, FIXED64);
    out.extend_from_slice(&v.to_le_bytes());
}

fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    bytes(out, field, s.as_bytes());
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// An `AnyValue` holding `s` as field `field` of the message being written.
fn any_string(out: &mut Vec<u8>, field: u32, s: &str) {
    key(out, field, LEN);
    varint(out, field_len(s.len()) as u64);
    string(out, ANY_STRING, s);
}

/// A message written by `write` as field `field`.
fn nested(out: &mut Vec<u8>, field: u32, write: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    write(&mut inner);
    bytes(out, field, &inner);
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use proptest::prelude::*;

    use super::super::convert::convert;
    use super::*;

    /// Records as [`convert`] makes them, attributes sorted by key.
    fn by_convert(lines: &[&[u8]], now: u64) -> ExportLogsServiceRequest {
        let mut req = convert(lines, now).logs;
        sort(&mut req);
        req
    }

    fn by_encoder(lines: &[&[u8]], now: u64) -> (ExportLogsServiceRequest, Vec<Pushed>) {
        let mut e = LogsEncoder::default();
        let pushed = lines.iter().map(|l| e.push(l, now)).collect();
        let bytes = e.finish();
        let mut req = ExportLogsServiceRequest::decode(bytes.as_slice()).expect("decodes");
        sort(&mut req);
        (req, pushed)
    }

    fn sort(req: &mut ExportLogsServiceRequest) {
        for r in &mut req.resource_logs {
            if let Some(res) = &mut r.resource {
                res.attributes
                    .sort_by_cached_key(|a| (a.key.clone(), format!("{:?}", a.value)));
            }
            for s in &mut r.scope_logs {
                for rec in &mut s.log_records {
                    // Equal keys (`{"a.b":1,"a":{"b":2}}`) by value too:
                    // the converter's map and the line differ in order.
                    rec.attributes
                        .sort_by_cached_key(|a| (a.key.clone(), format!("{:?}", a.value)));
                }
            }
        }
    }

    fn records(req: &ExportLogsServiceRequest) -> &[LogRecord] {
        &req.resource_logs[0].scope_logs[0].log_records
    }

    #[test]
    fn an_event_is_encoded_as_the_converter_builds_it() {
        let lines: [&[u8]; 4] = [
            br#"{"@timestamp":"2026-12-03T10:00:00.000001Z","@metadata":{"_id":"x1"},"message":"h\u00e9 \"q\"","log":{"level":"warn"},"leader":{"lease":"l","term":4},"n":-3,"big":18446744073709551615,"f":1.5,"ok":true,"none":null,"tags":["a",1,{"b":2}],"data_stream":{"type":"logs","dataset":"d","namespace":"default"}}
"#,
            br#"{"no_message":1,"message":7,"@timestamp":3}"#,
            b"not json\n",
            br#"["an","array"]"#,
        ];
        let (got, pushed) = by_encoder(&lines, 7);
        assert_eq!(
            pushed,
            [
                Pushed::Record,
                Pushed::Record,
                Pushed::Record,
                Pushed::Record
            ]
        );
        let mut want = by_convert(&lines, 7);
        // The converter writes a body-less document's body as JSON of
        // its parsed map; the encoder sends the line itself.
        // (The second line has no resource attributes: it opens the
        // second group.)
        let rec = &mut want.resource_logs[1].scope_logs[0].log_records[0];
        rec.body = Some(super::super::convert::string(
            r#"{"no_message":1,"message":7,"@timestamp":3}"#.into(),
        ));
        assert_eq!(got, want);
        let first = &records(&got)[0];
        assert_eq!(first.severity_text, "warn");
        assert_eq!(first.time_unix_nano, 1_796_292_000_000_001_000);
    }

    #[test]
    fn records_of_one_source_share_a_resource_sent_once() {
        let a = |n: u32, pod: &str| {
            format!(
                r#"{{"message":"m{n}","agent":{{"name":"a1"}},"input":{{"id":"logs"}},"kubernetes":{{"pod":{{"name":"{pod}"}},"event":{{"reason":"r{n}"}}}},"log":{{"offset":{n}}}}}"#
            )
        };
        let lines = [a(1, "p"), a(2, "q"), a(3, "p"), "plain".into()];
        let lines: Vec<&[u8]> = lines.iter().map(|l| l.as_bytes()).collect();
        let (got, _) = by_encoder(&lines, 1);
        assert_eq!(got, by_convert(&lines, 1));
        let keys = |attrs: &[KeyValue]| attrs.iter().map(|a| a.key.clone()).collect::<Vec<_>>();
        let groups: Vec<(Vec<String>, Vec<String>)> = got
            .resource_logs
            .iter()
            .map(|r| {
                let records = &r.scope_logs[0].log_records;
                let bodies = records
                    .iter()
                    .map(|rec| format!("{:?}", rec.body.as_ref().unwrap().value))
                    .collect();
                (keys(&r.resource.as_ref().unwrap().attributes), bodies)
            })
            .collect();
        let resource = [
            "agent.name",
            "input.id",
            "kubernetes.pod.name",
            "service.name",
        ];
        assert_eq!(groups.len(), 3, "{groups:?}");
        assert_eq!(groups[0].0, resource);
        assert_eq!(groups[0].1.len(), 2, "p's two records, in order");
        assert!(groups[0].1[0].contains("m1") && groups[0].1[1].contains("m3"));
        assert_eq!(groups[1].0, resource);
        assert_eq!(groups[2].0, ["service.name"]);
        // What an Event says and where in the file a line was stay on
        // the record.
        let first = &got.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(
            keys(&first.attributes),
            ["kubernetes.event.reason", "log.offset"]
        );
    }

    #[test]
    fn resource_fields_are_those_that_name_a_source() {
        use super::super::convert::is_resource;
        for p in [
            "agent",
            "agent.name",
            "host.name",
            "cloud.region",
            "input.id",
        ] {
            assert!(is_resource(p), "{p}");
        }
        for p in ["data_stream.dataset", "container.id", "kubernetes.pod.uid"] {
            assert!(is_resource(p), "{p}");
        }
        for p in [
            "agentx",
            "log.offset",
            "leader.term",
            "message",
            "kubernetes.event.reason",
        ] {
            assert!(!is_resource(p), "{p}");
        }
        assert!(!is_resource("kubernetes.event"));
    }

    #[test]
    fn no_records_make_an_empty_request() {
        assert!(LogsEncoder::default().finish().is_empty());
    }

    #[test]
    fn a_metric_document_is_left_to_the_caller() {
        let line = br#"{"data_stream":{"type":"metrics"},"x":1}"#;
        let mut e = LogsEncoder::default();
        assert_eq!(e.push(line, 0), Pushed::Metric);
        assert!(e.is_empty());
        assert_eq!(e.push(b"{}", 0), Pushed::Record);
        assert_eq!(e.len(), 1);
    }

    #[test]
    fn varints_have_their_length() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut b = Vec::new();
            varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
        }
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            proptest::arbitrary::any::<bool>().prop_map(Value::Bool),
            proptest::arbitrary::any::<i64>().prop_map(Value::from),
            proptest::arbitrary::any::<u64>().prop_map(Value::from),
            (-1e9f64..1e9).prop_map(Value::from),
            "[a-z\u{e9}\"\\\\ ]{0,12}".prop_map(Value::String),
        ]
    }

    fn doc() -> impl Strategy<Value = Value> {
        let value = leaf().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map("[a-z@_.]{1,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        prop::collection::btree_map(
            prop_oneof![
                Just("message".to_string()),
                Just("@timestamp".to_string()),
                Just("log".to_string()),
                Just("agent".to_string()),
                Just("kubernetes".to_string()),
                "[a-z]{1,5}"
            ],
            value,
            0..6,
        )
        .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    proptest! {
        /// Any document with a string `message` (or none) is encoded as
        /// the converter builds it.
        #[test]
        fn any_document_is_encoded_as_the_converter_builds_it(mut d in doc(), msg in "[a-z ]{0,8}") {
            d["message"] = Value::String(msg);
            let line = serde_json::to_vec(&d).unwrap();
            let (got, pushed) = by_encoder(&[&line], 11);
            prop_assert_eq!(pushed, vec![Pushed::Record]);
            prop_assert_eq!(got, by_convert(&[&line], 11));
        }

        /// Any batch is grouped by resource as the converter groups it.
        #[test]
        fn any_batch_is_grouped_as_the_converter_groups_it(docs in prop::collection::vec(doc(), 1..6)) {
            let lines: Vec<Vec<u8>> = docs.iter().map(|d| serde_json::to_vec(d).unwrap()).collect();
            let lines: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
            let (got, _) = by_encoder(&lines, 3);
            let mut want = by_convert(&lines, 3);
            // A body-less document's body: the line, not its parsed map's
            // JSON (whose floats need not print as the line's did); the
            // bodies of documents with a message are compared by
            // `any_document_is_encoded_as_the_converter_builds_it`.
            for (rl, w) in got.resource_logs.iter().zip(&mut want.resource_logs) {
                for (r, wr) in rl.scope_logs[0].log_records.iter().zip(&mut w.scope_logs[0].log_records) {
                    wr.body.clone_from(&r.body);
                }
            }
            prop_assert_eq!(got, want);
        }
    }
}
