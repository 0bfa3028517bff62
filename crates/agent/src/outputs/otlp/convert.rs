//! Events as OTLP, without I/O.
//!
//! A metric document (`data_stream.type: metrics`) becomes one data point
//! per numeric field: a gauge named by the field's dotted path (a Prometheus
//! document's `prometheus.metrics.NAME` is named `NAME`), a monotonic
//! cumulative sum when the name ends in `_total`. Its other fields become
//! the point's attributes (`prometheus.labels.K` as `K`). Every other event
//! becomes a log record: `message` is the body (the whole document as JSON
//! when there is none) and every other field an attribute, of the resource
//! when it says where the record comes from ([`is_resource`]), of the
//! record otherwise; records with the same resource attributes share one
//! `ResourceLogs`, in the order their first record came. `@timestamp`
//! is the record's or point's time; `@metadata._id` is the attribute
//! `leasehold.event_id`, so a receiver can drop replays.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde_json::{Map, Value};

/// Fields that describe where a metric document comes from: attributes of
/// its points even when numeric (`leader.term`).
const CONTEXT_ROOTS: [&str; 6] = ["agent", "input", "leader", "data_stream", "event", "host"];
const PROMETHEUS_METRICS: &str = "prometheus.metrics.";
const PROMETHEUS_LABELS: &str = "prometheus.labels.";
/// Roots of the fields that say where a log record comes from: the agent,
/// its host and cloud, the input, the data stream, the container and its
/// Pod. They are the same for every line of one source, so they go once
/// per request into the resource rather than into every record.
const RESOURCE_ROOTS: [&str; 8] = [
    "agent",
    "host",
    "cloud",
    "input",
    "data_stream",
    "container",
    "orchestrator",
    "kubernetes",
];
/// Under `kubernetes`, what an Event says: its content, not its source.
const KUBERNETES_EVENT: &str = "kubernetes.event";
/// The attribute carrying `@metadata._id`.
pub const EVENT_ID_ATTRIBUTE: &str = "leasehold.event_id";

/// The two requests a batch becomes (either may be empty), and which lines
/// went into which.
#[derive(Debug, Default)]
pub struct Converted {
    /// Log records, one per line of `log_lines`, in its order.
    pub logs: ExportLogsServiceRequest,
    /// Data points of the lines in `metric_lines`.
    pub metrics: ExportMetricsServiceRequest,
    /// Indexes (in the batch) of the lines sent as log records.
    pub log_lines: Vec<usize>,
    /// Indexes (in the batch) of the lines sent as metrics.
    pub metric_lines: Vec<usize>,
    /// Data points sent.
    pub points: usize,
}

/// Whether the field at `path` is a resource attribute of a log record
/// (under one of [`RESOURCE_ROOTS`], not under `kubernetes.event`).
pub(super) fn is_resource(path: &str) -> bool {
    let under = |root: &str| {
        path.strip_prefix(root)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    };
    RESOURCE_ROOTS.iter().any(|r| under(r)) && !under(KUBERNETES_EVENT)
}

/// The resource attributes of a `ResourceLogs` made here that came from
/// its records' fields (all but the first, `service.name`).
pub(super) fn source_attributes(r: &ResourceLogs) -> &[KeyValue] {
    r.resource
        .as_ref()
        .map_or(&[][..], |r| r.attributes.get(1..).unwrap_or(&[]))
}

/// Converts NDJSON lines; `now_ns` is the observed time of log records.
pub fn convert(lines: &[&[u8]], now_ns: u64) -> Converted {
    let mut out = Converted::default();
    // Records by their resource attributes, in first-seen order, with
    // the indexes of their lines.
    let mut groups: Vec<(Vec<KeyValue>, Vec<LogRecord>, Vec<usize>)> = Vec::new();
    let mut add = |resource: Vec<KeyValue>, record: LogRecord, line: usize| match groups
        .iter_mut()
        .find(|g| g.0 == resource)
    {
        Some(g) => {
            g.1.push(record);
            g.2.push(line);
        }
        None => groups.push((resource, vec![record], vec![line])),
    };
    let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        let doc = match serde_json::from_slice::<Map<String, Value>>(line) {
            Ok(d) => d,
            Err(_) => {
                // Not an object: the text itself is the log body.
                let text = String::from_utf8_lossy(line).trim_end().to_string();
                let record = LogRecord {
                    observed_time_unix_nano: now_ns,
                    body: Some(string(text)),
                    ..Default::default()
                };
                add(Vec::new(), record, i);
                continue;
            }
        };
        let time = doc
            .get("@timestamp")
            .and_then(Value::as_str)
            .map_or(0, parse_time);
        let is_metric = doc
            .get("data_stream")
            .and_then(|d| d.get("type"))
            .and_then(Value::as_str)
            == Some("metrics");
        let mut leaves = Vec::new();
        flatten("", &doc, &mut leaves);
        if is_metric {
            let added = metric_points(&leaves, time, &mut metrics);
            if added > 0 {
                out.points += added;
                out.metric_lines.push(i);
                continue;
            }
        }
        let (resource, record) = log_record(&doc, &leaves, time, now_ns);
        add(resource, record, i);
    }
    let service = kv("service.name", string("leasehold".into()));
    let scope = Some(InstrumentationScope {
        name: "leasehold".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    });
    for (attributes, records, indexes) in groups {
        out.log_lines.extend(indexes);
        out.logs.resource_logs.push(ResourceLogs {
            resource: Some(Resource {
                attributes: std::iter::once(service.clone()).chain(attributes).collect(),
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: scope.clone(),
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    if !metrics.is_empty() {
        out.metrics.resource_metrics.push(ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![service],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope,
                metrics: metrics.into_values().collect(),
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    out
}

/// Adds the data points of one metric document; returns how many.
fn metric_points(
    leaves: &[(String, &Value)],
    time: u64,
    metrics: &mut BTreeMap<String, Metric>,
) -> usize {
    let mut attributes = Vec::new();
    let mut values = Vec::new();
    for (path, v) in leaves {
        let context = CONTEXT_ROOTS
            .iter()
            .any(|r| path == r || path.starts_with(&format!("{r}.")));
        match v {
            Value::Number(n) if !context && path != "@timestamp" => {
                let name = path.strip_prefix(PROMETHEUS_METRICS).unwrap_or(path);
                let value = match n.as_i64() {
                    Some(i) => number_data_point::Value::AsInt(i),
                    None => number_data_point::Value::AsDouble(n.as_f64().unwrap_or(f64::NAN)),
                };
                values.push((name.to_string(), value));
            }
            _ if path == "@timestamp" => {}
            _ if path == "@metadata._id" => {
                if let Some(v) = any(v) {
                    attributes.push(kv(EVENT_ID_ATTRIBUTE, v));
                }
            }
            _ => {
                let key = path.strip_prefix(PROMETHEUS_LABELS).unwrap_or(path);
                if let Some(v) = any(v) {
                    attributes.push(kv(key, v));
                }
            }
        }
    }
    let n = values.len();
    for (name, value) in values {
        let point = NumberDataPoint {
            attributes: attributes.clone(),
            time_unix_nano: time,
            value: Some(value),
            ..Default::default()
        };
        let monotonic = name.ends_with("_total");
        let metric = metrics.entry(name.clone()).or_insert_with(|| Metric {
            name,
            data: Some(if monotonic {
                metric::Data::Sum(Sum {
                    data_points: Vec::new(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: true,
                })
            } else {
                metric::Data::Gauge(Gauge {
                    data_points: Vec::new(),
                })
            }),
            ..Default::default()
        });
        match &mut metric.data {
            Some(metric::Data::Sum(s)) => s.data_points.push(point),
            Some(metric::Data::Gauge(g)) => g.data_points.push(point),
            _ => {}
        }
    }
    n
}

/// A log record of `doc` and its resource attributes.
fn log_record(
    doc: &Map<String, Value>,
    leaves: &[(String, &Value)],
    time: u64,
    now_ns: u64,
) -> (Vec<KeyValue>, LogRecord) {
    let body = match doc.get("message") {
        Some(Value::String(m)) => string(m.clone()),
        _ => string(serde_json::to_string(doc).unwrap_or_default()),
    };
    let mut attributes = Vec::with_capacity(leaves.len());
    let mut resource = Vec::new();
    for (path, v) in leaves {
        match path.as_str() {
            "@timestamp" | "message" => {}
            "@metadata._id" => {
                if let Some(v) = any(v) {
                    attributes.push(kv(EVENT_ID_ATTRIBUTE, v));
                }
            }
            _ => {
                if let Some(v) = any(v) {
                    if is_resource(path) {
                        resource.push(kv(path, v));
                    } else {
                        attributes.push(kv(path, v));
                    }
                }
            }
        }
    }
    let severity_text = doc
        .get("log")
        .and_then(|l| l.get("level"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let record = LogRecord {
        time_unix_nano: time,
        observed_time_unix_nano: now_ns,
        severity_text,
        body: Some(body),
        attributes,
        ..Default::default()
    };
    (resource, record)
}

/// The leaves of a document by dotted path; arrays are leaves.
fn flatten<'a>(prefix: &str, map: &'a Map<String, Value>, out: &mut Vec<(String, &'a Value)>) {
    for (k, v) in map {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Object(inner) => flatten(&path, inner, out),
            _ => out.push((path, v)),
        }
    }
}

/// An RFC 3339 `@timestamp` in nanoseconds since the epoch; 0 (unset)
/// when it is not one.
pub(super) fn parse_time(t: &str) -> u64 {
    t.parse::<jiff::Timestamp>()
        .ok()
        .map_or(0, |t| u64::try_from(t.as_nanosecond()).unwrap_or(0))
}

/// A JSON value as an OTLP value; `null` has none.
pub(super) fn any(v: &Value) -> Option<AnyValue> {
    let value = match v {
        Value::Null => return None,
        Value::Bool(b) => any_value::Value::BoolValue(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => any_value::Value::IntValue(i),
            None => any_value::Value::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => any_value::Value::StringValue(s.clone()),
        Value::Array(items) => any_value::Value::ArrayValue(ArrayValue {
            values: items.iter().filter_map(any).collect(),
        }),
        Value::Object(_) => any_value::Value::StringValue(v.to_string()),
    };
    Some(AnyValue { value: Some(value) })
}

pub(super) fn string(s: String) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s)),
    }
}

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(value),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
        attrs
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref())
            .and_then(|v| v.value.as_ref())
    }

    #[test]
    fn a_log_event_keeps_its_message_time_and_fields() {
        let line = br#"{"@timestamp":"2026-12-03T10:00:00.000001Z","@metadata":{"_id":"x1"},"message":"hi","leader":{"lease":"l","term":4},"data_stream":{"type":"logs","dataset":"d","namespace":"default"}}"#;
        let c = convert(&[line], 7);
        assert_eq!(c.log_lines, [0]);
        let r = &c.logs.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(r.time_unix_nano, 1_796_292_000_000_001_000);
        assert_eq!(r.observed_time_unix_nano, 7);
        assert_eq!(
            r.body.as_ref().unwrap().value,
            Some(any_value::Value::StringValue("hi".into()))
        );
        assert_eq!(
            attr(&r.attributes, "leader.term"),
            Some(&any_value::Value::IntValue(4))
        );
        assert_eq!(
            attr(&r.attributes, "leader.lease"),
            Some(&any_value::Value::StringValue("l".into()))
        );
        assert_eq!(
            attr(&r.attributes, EVENT_ID_ATTRIBUTE),
            Some(&any_value::Value::StringValue("x1".into()))
        );
        assert!(attr(&r.attributes, "message").is_none());
    }

    #[test]
    fn a_metric_document_becomes_points_with_its_context_as_attributes() {
        let line = br#"{"@timestamp":"2026-12-03T10:00:00Z","data_stream":{"type":"metrics","dataset":"prometheus.collector","namespace":"default"},"leader":{"lease":"l","term":2},"prometheus":{"labels":{"job":"api"},"metrics":{"up":1,"requests_total":12.5}}}"#;
        let c = convert(&[line], 0);
        assert_eq!(c.metric_lines, [0]);
        assert_eq!(c.points, 2);
        let ms = &c.metrics.resource_metrics[0].scope_metrics[0].metrics;
        let up = ms.iter().find(|m| m.name == "up").unwrap();
        let Some(metric::Data::Gauge(g)) = &up.data else {
            panic!("up is a gauge")
        };
        let p = &g.data_points[0];
        assert_eq!(p.value, Some(number_data_point::Value::AsInt(1)));
        assert_eq!(
            attr(&p.attributes, "job"),
            Some(&any_value::Value::StringValue("api".into()))
        );
        assert_eq!(
            attr(&p.attributes, "leader.term"),
            Some(&any_value::Value::IntValue(2))
        );
        let total = ms.iter().find(|m| m.name == "requests_total").unwrap();
        assert!(matches!(&total.data, Some(metric::Data::Sum(s)) if s.is_monotonic));
    }

    #[test]
    fn a_metric_document_without_numbers_is_a_log_record() {
        let line = br#"{"@timestamp":"2026-12-03T10:00:00Z","data_stream":{"type":"metrics"},"state":"x"}"#;
        let c = convert(&[line, b"not json"], 0);
        assert_eq!(c.log_lines, [0, 1]);
        assert!(c.metrics.resource_metrics.is_empty());
    }
}
