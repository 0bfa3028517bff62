//! `apply` never panics, whatever the event holds.

mod common;

use leasehold_processors::{Processors, Verdict};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Every processor, several conditions, reading the fields the generated
/// events use (`a`, `b`, `message`, `ts`, nested and dotted).
fn all_processors() -> Processors {
    common::parse(json!([
        {"add_fields": {"target": "a", "fields": {"x": 1, "b.c": "d"}}},
        {"add_fields": {"target": "", "fields": {"b": {"y": true}}}},
        {"add_tags": {"tags": ["t"], "target": "a.tags"}},
        {"add_labels": {"labels": {"k": "v", "n": {"m": 1}}}},
        {"copy_fields": {"fields": [{"from": "a", "to": "b.copy"}, {"from": "message", "to": "a.b"}]}},
        {"rename": {"fields": [{"from": "b", "to": "a.b.c"}, {"from": "a.b", "to": "a"}], "fail_on_error": false}},
        {"rename": {"fields": [{"from": "ts", "to": "a.ts"}]}},
        {"decode_json_fields": {"fields": ["message", "a", "b.c"], "max_depth": 3, "process_array": true,
                                "target": "", "overwrite_keys": true, "expand_keys": true, "add_error_key": true}},
        {"decode_json_fields": {"fields": ["message"], "target": "a.json", "expand_keys": true}},
        {"dissect": {"tokenizer": "%{a} %{+a/2} %{?k} %{&k} %{n|integer}%{f#2}%{rest->}", "target_prefix": "",
                     "overwrite_keys": true, "trim_values": "all", "trim_chars": " é"}},
        {"dissect": {"tokenizer": "%{x}-%{y}", "field": "a.b"}},
        {"timestamp": {"field": "ts", "layouts": ["UNIX", "UNIX_MS", "2006-01-02T15:04:05.999Z07:00",
                       "Jan _2 15:04:05 MST", "002 3:04PM"], "timezone": "+0530"}},
        {"timestamp": {"field": "message", "layouts": ["Mon, 02 Jan 2006 15:04:05 -0700"], "target_field": "a.b.c"}},
        {"add_locale": {"format": "abbreviation"}},
        {"if": {"or": [{"regexp": {"message": "^[a-z]+$"}}, {"range": {"a.x.gt": 0}}]},
         "then": [{"drop_fields": {"fields": ["/^b/", "zz"], "cleanup": true}}],
         "else": [{"include_fields": {"fields": ["a", "message", "b.c"]}}]},
        {"drop_fields": {"fields": ["a.tags", "x"], "when": {"and": [
            {"not": {"has_fields": ["nope"]}},
            {"network": {"ip": ["private", "2001:db8::/32"]}},
            {"contains": {"message": "e"}},
            {"equals": {"a.x": 1}}
        ]}}},
        {"drop_event": {"when": {"equals": {"message": "drop me"}}}}
    ]))
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,24}".prop_map(Value::String),
        // Text the processors look for: JSON, times, addresses, patterns.
        prop_oneof![
            Just(r#"{"a.b": {"c": 1}, "a": "x", "@timestamp": "2016-04-05T18:47:18Z", "type": "_t"}"#.to_owned()),
            Just(r#"{"a": "{\"b\": \"[1, {\\\"c\\\": 2}]\"}", "n": [1, "[2]"]}"#.to_owned()),
            Just("[1, 2, \"{}\"]".to_owned()),
            Just("1425726399.5".to_owned()),
            Just("2019-11-18T04:59:51.123+05:30".to_owned()),
            Just("Dec 31 23:59:60 XYZT".to_owned()),
            Just("366 12:00AM".to_owned()),
            Just("10.1.2.3".to_owned()),
            Just("a b c d 12xyz rest   ".to_owned()),
            Just("é é é é 99éé".to_owned()),
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let keys = prop_oneof![
            Just("a".to_owned()),
            Just("b".to_owned()),
            Just("b.c".to_owned()),
            Just("message".to_owned()),
            Just("ts".to_owned()),
            Just("ip".to_owned()),
            Just("labels".to_owned()),
            Just("tags".to_owned()),
            Just("error".to_owned()),
            Just("log".to_owned()),
            Just("event".to_owned()),
            "[a-z.]{0,6}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_event() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(
        prop_oneof![
            Just("a".to_owned()),
            Just("b".to_owned()),
            Just("b.c".to_owned()),
            Just("message".to_owned()),
            Just("ts".to_owned()),
            Just("ip".to_owned()),
            Just("@timestamp".to_owned()),
            Just("tags".to_owned()),
            Just("log".to_owned()),
            "[a-z.@]{0,8}",
        ],
        arb_json(),
        0..8,
    )
    .prop_map(|m| m.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn apply_never_panics(mut event in arb_event()) {
        let processors = all_processors();
        let mut errors = 0usize;
        let verdict = processors.apply_reporting(&mut event, &mut |_| errors += 1);
        // A dropped event is one whose message asked for it (the last step).
        if verdict == Verdict::Drop {
            prop_assert_eq!(event.get("message"), Some(&json!("drop me")));
        }
    }

    #[test]
    fn apply_never_panics_on_any_message(message in "\\PC{0,64}", ts in "\\PC{0,32}") {
        let processors = all_processors();
        let mut event = json!({"message": message, "ts": ts}).as_object().cloned().unwrap_or_default();
        let _ = processors.apply(&mut event);
    }
}
