//! Mapping between a Lease object and the core's record. Reading is
//! lenient (a malformed Lease never panics or aborts the election); writing
//! changes only the five election fields and keeps everything else found
//! (`strategy`, `preferredHolder`, labels, annotations…), or, for the
//! stopped-term acknowledgement, only its annotation.

use kube::api::{ApiResource, DynamicObject};
use serde_json::{Map, Value};

use crate::core::{LeaseRecord, Observed, Term, WallTime};

/// The annotation of the stopped-term acknowledgement:
/// `<leaseTransitions>/<acquireTime>/<holder>` of the term whose work its
/// leader declared stopped.
pub const STOPPED_TERM_ANNOTATION: &str = "leasehold.dev/stopped-term";

/// The annotation's value for `term`.
pub(crate) fn format_term(term: &Term) -> String {
    format!(
        "{}/{}/{}",
        term.transitions,
        term.acquire_time.to_micro_time(),
        term.holder
    )
}

/// A term read back from the annotation; `None` when malformed.
pub(crate) fn parse_term(text: &str) -> Option<Term> {
    let mut parts = text.splitn(3, '/');
    let transitions = parts.next()?.parse().ok()?;
    let acquire_time = WallTime::parse_rfc3339(parts.next()?)?;
    let holder = parts.next().filter(|h| !h.is_empty())?.to_string();
    Some(Term {
        holder,
        acquire_time,
        transitions,
    })
}

/// The `coordination.k8s.io/v1` Lease resource.
pub(crate) fn lease_resource() -> ApiResource {
    ApiResource {
        group: "coordination.k8s.io".into(),
        version: "v1".into(),
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        plural: "leases".into(),
    }
}

/// Reads the record out of a Lease. Returns the record and notes about
/// fields that could not be understood.
pub(crate) fn parse(obj: &DynamicObject) -> (Observed, Vec<String>) {
    let mut notes = Vec::new();
    let spec = obj.data.get("spec").and_then(Value::as_object);
    let field = |name: &str| spec.and_then(|s| s.get(name)).filter(|v| !v.is_null());
    let holder = match field("holderIdentity") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        // Not a string: someone holds it, we cannot tell who. Never "free".
        Some(other) => {
            notes.push(format!("holderIdentity is not a string: {other}"));
            other.to_string()
        }
    };
    let int = |name: &str, notes: &mut Vec<String>| match field(name) {
        None => None,
        Some(v) => match v.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) => Some(n),
            None => {
                notes.push(format!("{name} is not a 32-bit integer: {v}"));
                None
            }
        },
    };
    let time = |name: &str, notes: &mut Vec<String>| match field(name) {
        None => None,
        Some(v) => match v.as_str().and_then(WallTime::parse_rfc3339) {
            Some(t) => Some(t),
            None => {
                notes.push(format!("{name} is not a valid time: {v}"));
                None
            }
        },
    };
    let record = LeaseRecord {
        holder,
        duration_secs: int("leaseDurationSeconds", &mut notes),
        acquire_time: time("acquireTime", &mut notes),
        renew_time: time("renewTime", &mut notes),
        transitions: int("leaseTransitions", &mut notes),
    };
    let resource_version = obj.metadata.resource_version.clone().unwrap_or_default();
    let stopped = obj
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STOPPED_TERM_ANNOTATION))
        .and_then(|v| {
            let t = parse_term(v);
            if t.is_none() {
                notes.push(format!(
                    "annotation {STOPPED_TERM_ANNOTATION} is malformed: {v:?}"
                ));
            }
            t
        });
    (
        Observed {
            resource_version,
            record,
            stopped,
        },
        notes,
    )
}

fn put(spec: &mut Map<String, Value>, record: &LeaseRecord) {
    spec.insert(
        "holderIdentity".into(),
        Value::String(record.holder.clone()),
    );
    let mut set = |k: &str, v: Option<Value>| match v {
        Some(v) => {
            spec.insert(k.into(), v);
        }
        None => {
            spec.remove(k);
        }
    };
    set(
        "leaseDurationSeconds",
        record.duration_secs.map(Value::from),
    );
    set(
        "acquireTime",
        record
            .acquire_time
            .map(|t| Value::String(t.to_micro_time())),
    );
    set(
        "renewTime",
        record.renew_time.map(|t| Value::String(t.to_micro_time())),
    );
    set("leaseTransitions", record.transitions.map(Value::from));
}

/// A new Lease carrying `record`.
pub(crate) fn build_new(namespace: &str, name: &str, record: &LeaseRecord) -> DynamicObject {
    let mut obj = DynamicObject::new(name, &lease_resource()).within(namespace);
    let mut spec = Map::new();
    put(&mut spec, record);
    obj.data = serde_json::json!({ "spec": spec });
    obj
}

/// `base` (the Lease as last read) with its election fields replaced by
/// `record` and its resourceVersion set to `rv` for optimistic concurrency.
pub(crate) fn build_update(
    base: Option<&DynamicObject>,
    namespace: &str,
    name: &str,
    record: &LeaseRecord,
    rv: &str,
) -> DynamicObject {
    let mut obj = match base {
        Some(b) => b.clone(),
        None => DynamicObject::new(name, &lease_resource()).within(namespace),
    };
    if !obj.data.is_object() {
        obj.data = Value::Object(Map::new());
    }
    let data = obj.data.as_object_mut().expect("made an object above");
    let spec = data
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    if !spec.is_object() {
        *spec = Value::Object(Map::new());
    }
    if let Some(spec) = spec.as_object_mut() {
        put(spec, record);
    }
    obj.metadata.resource_version = Some(rv.to_string());
    obj.metadata.managed_fields = None;
    obj
}

/// `base` (the Lease as read at `rv`) with the stopped-term
/// acknowledgement of `term` and nothing else changed.
pub(crate) fn build_ack(base: &DynamicObject, rv: &str, term: &Term) -> DynamicObject {
    let mut obj = base.clone();
    obj.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(STOPPED_TERM_ANNOTATION.to_string(), format_term(term));
    obj.metadata.resource_version = Some(rv.to_string());
    obj.metadata.managed_fields = None;
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(spec: Value) -> DynamicObject {
        let mut o = DynamicObject::new("l", &lease_resource()).within("ns");
        o.metadata.resource_version = Some("12".into());
        o.data = serde_json::json!({ "spec": spec });
        o
    }

    #[test]
    fn reads_client_go_lease() {
        let (o, notes) = parse(&obj(serde_json::json!({
            "holderIdentity": "pod-b", "leaseDurationSeconds": 15,
            "acquireTime": "2024-05-01T10:00:00.000000Z", "renewTime": "2024-05-01T10:00:09.123456Z",
            "leaseTransitions": 3, "strategy": "OldestEmulationVersion"
        })));
        assert!(notes.is_empty());
        assert_eq!(o.resource_version, "12");
        assert_eq!(o.record.holder, "pod-b");
        assert_eq!(o.record.duration_secs, Some(15));
        assert_eq!(o.record.transitions, Some(3));
        assert_eq!(
            o.record.renew_time.unwrap().to_micro_time(),
            "2024-05-01T10:00:09.123456Z"
        );
    }

    #[test]
    fn malformed_lease_is_read_without_panic_and_never_free_by_accident() {
        let (o, notes) = parse(&obj(serde_json::json!({
            "holderIdentity": 42, "leaseDurationSeconds": "fifteen",
            "acquireTime": "yesterday", "renewTime": 7, "leaseTransitions": 1e12
        })));
        assert_eq!(notes.len(), 5, "{notes:?}");
        assert!(!o.record.is_free());
        assert_eq!(o.record.duration_secs, None);
        assert_eq!(
            (
                o.record.acquire_time,
                o.record.renew_time,
                o.record.transitions
            ),
            (None, None, None)
        );
        let mut empty = obj(Value::Null);
        empty.data = Value::String("garbage".into());
        let (o, _) = parse(&empty);
        assert!(o.record.is_free());
    }

    #[test]
    fn update_keeps_other_fields_and_formats_micro_time() {
        let base = obj(serde_json::json!({
            "holderIdentity": "pod-b", "strategy": "OldestEmulationVersion", "preferredHolder": "pod-c"
        }));
        let record = LeaseRecord {
            holder: "pod-a".into(),
            duration_secs: Some(15),
            acquire_time: Some(WallTime::from_unix_micros(1_700_000_000_000_000)),
            renew_time: Some(WallTime::from_unix_micros(1_700_000_000_500_000)),
            transitions: Some(4),
        };
        let o = build_update(Some(&base), "ns", "l", &record, "13");
        assert_eq!(o.metadata.resource_version.as_deref(), Some("13"));
        let spec = &o.data["spec"];
        assert_eq!(spec["strategy"], "OldestEmulationVersion");
        assert_eq!(spec["preferredHolder"], "pod-c");
        assert_eq!(spec["holderIdentity"], "pod-a");
        assert_eq!(spec["renewTime"], "2023-11-14T22:13:20.500000Z");
        assert_eq!(spec["acquireTime"], "2023-11-14T22:13:20.000000Z");
        assert_eq!(spec["leaseTransitions"], 4);
        assert_eq!(parse(&o).0.record, record);
    }

    #[test]
    fn the_acknowledgement_names_a_term_and_changes_nothing_else() {
        let base = obj(serde_json::json!({
            "holderIdentity": "pod-b", "leaseDurationSeconds": 15,
            "acquireTime": "2024-05-01T10:00:00.000000Z", "leaseTransitions": 3,
        }));
        let term = Term {
            holder: "pod-a/x".into(),
            acquire_time: WallTime::parse_rfc3339("2024-05-01T10:00:00.000000Z").unwrap(),
            transitions: 3,
        };
        let o = build_ack(&base, "12", &term);
        assert_eq!(o.data, base.data, "the record stays as read");
        assert_eq!(
            o.metadata.annotations.as_ref().unwrap()[STOPPED_TERM_ANNOTATION],
            "3/2024-05-01T10:00:00.000000Z/pod-a/x"
        );
        let (seen, notes) = parse(&o);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!(seen.stopped.as_ref(), Some(&term));
        assert!(
            seen.comes_from_stopped_term(),
            "holder overwritten, term kept"
        );
        for bad in [
            "",
            "x/y/z",
            "3/not-a-time/a",
            "3/2024-05-01T10:00:00.000000Z/",
        ] {
            assert_eq!(parse_term(bad), None, "{bad}");
        }
    }
}
