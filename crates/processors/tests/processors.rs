//! Each processor on the examples of Elastic's documentation (and of Beats'
//! own tests), then its edge cases.

mod common;

use common::{ok, parse, run};
use leasehold_processors::Verdict;
use serde_json::{Value, json};

// ---------------------------------------------------------------- add_fields

#[test]
fn add_fields_doc_example() {
    let out = ok(
        json!([{"add_fields": {"target": "project", "fields": {"name": "myproject", "id": "574734885120952459"}}}]),
        json!({"message": "m"}),
    );
    assert_eq!(
        out,
        json!({"message": "m", "project": {"name": "myproject", "id": "574734885120952459"}})
    );
}

#[test]
fn add_fields_defaults_to_fields_and_merges() {
    let p = json!([{"add_fields": {"fields": {"field": "test"}}}]);
    assert_eq!(
        ok(p.clone(), json!({})),
        json!({"fields": {"field": "test"}})
    );
    assert_eq!(
        ok(p.clone(), json!({"fields": {"existing": "a"}})),
        json!({"fields": {"existing": "a", "field": "test"}})
    );
    assert_eq!(
        ok(p, json!({"fields": {"field": "old"}})),
        json!({"fields": {"field": "test"}})
    );
}

#[test]
fn add_fields_under_root_expands_dotted_keys_and_merges() {
    let out = ok(
        json!([{"add_fields": {"target": "", "fields": {"a.new": "test", "a.change": "b"}}}]),
        json!({"a": {"old": "value", "change": "a"}}),
    );
    assert_eq!(
        out,
        json!({"a": {"old": "value", "new": "test", "change": "b"}})
    );
}

#[test]
fn add_fields_dotted_target_nests() {
    let out = ok(
        json!([{"add_fields": {"target": "orchestrator.cluster", "fields": {"name": "prod"}}}]),
        json!({"orchestrator": {"type": "kubernetes"}}),
    );
    assert_eq!(
        out,
        json!({"orchestrator": {"type": "kubernetes", "cluster": {"name": "prod"}}})
    );
}

#[test]
fn add_fields_two_processors_combine() {
    let out = ok(
        json!([
            {"add_fields": {"fields": {"l1": "a"}}},
            {"add_fields": {"fields": {"l2": "b"}}},
            {"add_fields": {"target": "b", "fields": {"l3": "c"}}}
        ]),
        json!({}),
    );
    assert_eq!(
        out,
        json!({"fields": {"l1": "a", "l2": "b"}, "b": {"l3": "c"}})
    );
}

// ------------------------------------------------------------------ add_tags

#[test]
fn add_tags_doc_example() {
    let out = ok(
        json!([{"add_tags": {"tags": ["web", "production"], "target": "environment"}}]),
        json!({}),
    );
    assert_eq!(out, json!({"environment": ["web", "production"]}));
}

#[test]
fn add_tags_appends_like_beats_without_deduplicating() {
    let out = ok(
        json!([{"add_tags": {"tags": ["web", "production"]}}]),
        json!({"tags": ["web"]}),
    );
    assert_eq!(out, json!({"tags": ["web", "web", "production"]}));
}

#[test]
fn add_tags_refuses_a_non_list_target() {
    let (verdict, out, errors) = run(
        json!([{"add_tags": {"tags": ["x"]}}]),
        json!({"tags": "not a list"}),
    );
    assert_eq!(verdict, Verdict::Keep);
    assert_eq!(out, json!({"tags": "not a list"}));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].processor, "processors.0.add_tags");
}

// ---------------------------------------------------------------- add_labels

#[test]
fn add_labels_doc_example() {
    let out = ok(
        json!([{"add_labels": {"labels": {
            "number": 1,
            "with.dots": "test",
            "nested": {"with.dots": "nested"},
            "array": ["do", "re", {"with.field": "mi"}]
        }}}]),
        json!({}),
    );
    // Beats stores every label as a string (the documentation shows 1).
    assert_eq!(
        out,
        json!({"labels": {
            "number": "1",
            "with.dots": "test",
            "nested.with.dots": "nested",
            "array.0": "do",
            "array.1": "re",
            "array.2.with.field": "mi"
        }})
    );
}

#[test]
fn add_labels_merge() {
    let out = ok(
        json!([
            {"add_labels": {"labels": {"l1": "a", "lc": "a"}}},
            {"add_labels.labels": {"l2": "b", "lc": "b"}}
        ]),
        json!({"labels": {"existing": "x"}}),
    );
    assert_eq!(
        out,
        json!({"labels": {"existing": "x", "l1": "a", "l2": "b", "lc": "b"}})
    );
}

// ---------------------------------------------------------------- drop_event

#[test]
fn drop_event_with_condition() {
    let p = json!([
        {"drop_event": {"when": {"equals": {"http.response.code": 200}}}},
        {"add_tags": {"tags": ["kept"]}}
    ]);
    let (verdict, _, _) = run(p.clone(), json!({"http": {"response": {"code": 200}}}));
    assert_eq!(verdict, Verdict::Drop);
    let out = ok(p, json!({"http": {"response": {"code": 500}}}));
    assert_eq!(out["tags"], json!(["kept"]));
}

#[test]
fn drop_event_without_condition_drops_everything_and_stops() {
    let p = json!([{"drop_event": {}}, {"add_tags": {"tags": ["never"]}}]);
    let (verdict, out, _) = run(p.clone(), json!({"a": 1}));
    assert_eq!(verdict, Verdict::Drop);
    assert_eq!(out, json!({"a": 1}));
    let w = common::warnings(p);
    assert!(w[0].contains("drops every event"), "{w:?}");
}

// --------------------------------------------------------------- drop_fields

#[test]
fn drop_fields_removes_listed_fields() {
    let out = ok(
        json!([{"drop_fields": {"fields": ["field1", "kubernetes.labels.app"], "ignore_missing": false}}]),
        json!({"field1": 1, "field2": 2, "kubernetes": {"labels": {"app": "a", "tier": "b"}}}),
    );
    assert_eq!(
        out,
        json!({"field2": 2, "kubernetes": {"labels": {"tier": "b"}}})
    );
}

#[test]
fn drop_fields_missing_field_is_an_error_unless_ignored_but_the_rest_is_dropped() {
    let p = json!([{"drop_fields": {"fields": ["nope", "a"]}}]);
    let (verdict, out, errors) = run(p, json!({"a": 1, "b": 2}));
    assert_eq!(verdict, Verdict::Keep);
    assert_eq!(out, json!({"b": 2}));
    assert_eq!(errors.len(), 1);
    assert!(errors[0].message.contains("nope"));

    let (_, out, errors) = run(
        json!([{"drop_fields": {"fields": ["nope", "a"], "ignore_missing": true}}]),
        json!({"a": 1, "b": 2}),
    );
    assert_eq!(out, json!({"b": 2}));
    assert!(errors.is_empty());
}

#[test]
fn drop_fields_regexp_and_protected_fields() {
    let p =
        json!([{"drop_fields": {"fields": ["/^kubernetes\\.labels\\./", "@timestamp", "type"]}}]);
    let w = common::warnings(p.clone());
    assert_eq!(w.len(), 2, "{w:?}");
    let out = ok(
        p,
        json!({"@timestamp": "t", "type": "x", "kubernetes": {"labels": {"a": 1, "b": 2}, "namespace": "n"}}),
    );
    assert_eq!(
        out,
        json!({"@timestamp": "t", "type": "x", "kubernetes": {"labels": {}, "namespace": "n"}})
    );
}

#[test]
fn drop_fields_cleanup_removes_emptied_objects() {
    let out = ok(
        json!([{"drop_fields": {"fields": ["a.b.c"], "cleanup": true}}]),
        json!({"a": {"b": {"c": 1}}, "d": 1}),
    );
    assert_eq!(out, json!({"d": 1}));
}

// ------------------------------------------------------------ include_fields

#[test]
fn include_fields_keeps_listed_and_mandatory_fields() {
    let out = ok(
        json!([{"include_fields": {"fields": ["message", "kubernetes.pod.name", "missing"]}}]),
        json!({
            "@timestamp": "2026-01-01T00:00:00.000000Z",
            "type": "t",
            "message": "m",
            "kubernetes": {"pod": {"name": "p", "uid": "u"}, "namespace": "n"},
            "host": {"name": "h"}
        }),
    );
    assert_eq!(
        out,
        json!({
            "@timestamp": "2026-01-01T00:00:00.000000Z",
            "type": "t",
            "message": "m",
            "kubernetes": {"pod": {"name": "p"}}
        })
    );
}

#[test]
fn include_fields_empty_list_keeps_only_mandatory_fields() {
    let out = ok(
        json!([{"include_fields": {"fields": []}}]),
        json!({"@timestamp": "t", "message": "m"}),
    );
    assert_eq!(out, json!({"@timestamp": "t"}));
}

// -------------------------------------------------------------------- rename

#[test]
fn rename_doc_example() {
    let out = ok(
        json!([{"rename": {"fields": [{"from": "a.g", "to": "e.d"}], "ignore_missing": false, "fail_on_error": true}}]),
        json!({"a": {"g": 1, "h": 2}}),
    );
    assert_eq!(out, json!({"a": {"h": 2}, "e": {"d": 1}}));
}

#[test]
fn rename_beats_cases() {
    let rename = |pairs: Value| json!([{"rename": {"fields": pairs}}]);
    // Adds a level to a literal dotted key.
    assert_eq!(
        ok(
            rename(json!([{"from": "a.b", "to": "a.b.c"}])),
            json!({"a.b": 1})
        ),
        json!({"a": {"b": {"c": 1}}})
    );
    // Renames the target first: order matters.
    assert_eq!(
        ok(
            rename(json!([{"from": "b", "to": "c"}, {"from": "a", "to": "b"}])),
            json!({"a": 2, "b": "q"})
        ),
        json!({"b": 2, "c": "q"})
    );
    // Resolves a key / object conflict.
    assert_eq!(
        ok(
            rename(json!([{"from": "a", "to": "a.value"}])),
            json!({"a": 5, "a.b": 6})
        ),
        json!({"a.b": 6, "a": {"value": 5}})
    );
    assert_eq!(
        ok(
            rename(json!([{"from": "a", "to": "a.value"}, {"from": "c", "to": "a.c"}])),
            json!({"a": 7, "c": 8})
        ),
        json!({"a": {"value": 7, "c": 8}})
    );
}

#[test]
fn rename_never_overwrites_and_sets_error_message() {
    let (verdict, out, errors) = run(
        json!([{"rename": {"fields": [{"from": "a", "to": "b"}]}}]),
        json!({"a": 2, "b": "q"}),
    );
    assert_eq!(verdict, Verdict::Keep);
    assert_eq!(
        out,
        json!({"a": 2, "b": "q", "error": {"message":
            "failed to rename fields in processor: target field b already exists, drop or rename this field first"}})
    );
    assert_eq!(errors.len(), 1);
}

#[test]
fn rename_fail_on_error_rolls_back_earlier_pairs() {
    let (_, out, errors) = run(
        json!([{"rename": {"fields": [
            {"from": "x", "to": "y"},
            {"from": "c", "to": "a.c"},
            {"from": "a", "to": "a.value"}
        ]}}]),
        json!({"a": 9, "c": 10, "x": 1}),
    );
    assert_eq!(errors.len(), 1);
    assert_eq!(out["a"], json!(9));
    assert_eq!(out["c"], json!(10));
    assert_eq!(out["x"], json!(1));
    assert!(out.get("y").is_none());
    let msg = out["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("failed to rename fields in processor: could not put value: a.c"),
        "{msg}"
    );
}

#[test]
fn rename_single_pair_failing_after_removal_restores_the_literal_key() {
    let (_, out, errors) = run(
        json!([{"rename": {"fields": [{"from": "k.v", "to": "s.t"}]}}]),
        json!({"k.v": 1, "s": "scalar"}),
    );
    assert_eq!(errors.len(), 1);
    assert_eq!(out["k.v"], json!(1));
    assert_eq!(out["s"], json!("scalar"));
    assert!(out.get("k").is_none());
}

#[test]
fn rename_without_fail_on_error_keeps_going() {
    let (_, out, errors) = run(
        json!([{"rename": {"fail_on_error": false, "fields": [
            {"from": "c", "to": "a.c"},
            {"from": "a", "to": "a.value"}
        ]}}]),
        json!({"a": 9, "c": 10}),
    );
    // Beats' "partially works because fail_on_error is false": `c` cannot
    // go under the scalar `a` (and is not lost), then `a` moves.
    assert_eq!(out, json!({"a": {"value": 9}, "c": 10}));
    assert_eq!(errors.len(), 1);
}

#[test]
fn rename_missing_source() {
    let p = |ignore: bool| json!([{"rename": {"ignore_missing": ignore, "fields": [{"from": "a", "to": "b"}]}}]);
    assert_eq!(ok(p(true), json!({"c": 5})), json!({"c": 5}));
    let (_, out, errors) = run(p(false), json!({"c": 5}));
    assert_eq!(errors.len(), 1);
    assert_eq!(
        out,
        json!({"c": 5, "error": {"message":
            "failed to rename fields in processor: could not fetch value for key: a, Error: key not found"}})
    );
}

// --------------------------------------------------------------- copy_fields

#[test]
fn copy_fields_doc_example() {
    let out = ok(
        json!([{"copy_fields": {"fields": [{"from": "message", "to": "event.original"}],
                               "fail_on_error": false, "ignore_missing": true}}]),
        json!({"message": "my-interesting-message"}),
    );
    assert_eq!(
        out,
        json!({"message": "my-interesting-message", "event": {"original": "my-interesting-message"}})
    );
}

#[test]
fn copy_fields_beats_cases() {
    let copy =
        |from: &str, to: &str| json!([{"copy_fields": {"fields": [{"from": from, "to": to}]}}]);
    assert_eq!(
        ok(
            copy("dotted.message", "message_copied"),
            json!({"dotted.message": "l"})
        ),
        json!({"dotted.message": "l", "message_copied": "l"})
    );
    assert_eq!(
        ok(
            copy("message.original", "message.copied"),
            json!({"message.original": 42})
        ),
        json!({"message.original": 42, "message": {"copied": 42}})
    );
    assert_eq!(
        ok(
            copy("message.original", "message"),
            json!({"message.original": 42})
        ),
        json!({"message.original": 42, "message": 42})
    );
    // The copy of an object is independent of the original.
    let out = ok(
        json!([
            {"copy_fields": {"fields": [{"from": "message.original", "to": "message_copied"}]}},
            {"drop_fields": {"fields": ["message.original.original"]}}
        ]),
        json!({"message": {"original": {"original": "original"}}}),
    );
    assert_eq!(
        out,
        json!({"message": {"original": {}}, "message_copied": {"original": "original"}})
    );
}

#[test]
fn copy_fields_to_an_existing_field_fails_and_changes_nothing() {
    let (_, out, errors) = run(
        json!([{"copy_fields": {"fields": [{"from": "message.original", "to": "message"}]}}]),
        json!({"message": {"original": 42}}),
    );
    assert_eq!(errors.len(), 1);
    assert_eq!(out["message"], json!({"original": 42}));
    assert!(
        out["error"]["message"]
            .as_str()
            .unwrap()
            .contains("target field message already exists")
    );
}

// -------------------------------------------------------- decode_json_fields

const NESTED: &str = r#"{"log":"{\"level\":\"info\"}","stream":"stderr","count":3}"#;

#[test]
fn decode_json_fields_in_place_depth_one_and_two() {
    let out = ok(
        json!([{"decode_json_fields": {"fields": ["msg"]}}]),
        json!({"msg": NESTED, "pipeline": "us1"}),
    );
    assert_eq!(
        out,
        json!({"msg": {"log": "{\"level\":\"info\"}", "stream": "stderr", "count": 3}, "pipeline": "us1"})
    );
    let out = ok(
        json!([{"decode_json_fields": {"fields": ["msg"], "max_depth": 2}}]),
        json!({"msg": NESTED}),
    );
    assert_eq!(
        out,
        json!({"msg": {"log": {"level": "info"}, "stream": "stderr", "count": 3}})
    );
}

#[test]
fn decode_json_fields_target_and_root() {
    let out = ok(
        json!([{"decode_json_fields": {"fields": ["msg"], "max_depth": 2, "target": "doc"}}]),
        json!({"msg": NESTED}),
    );
    assert_eq!(out["doc"]["log"], json!({"level": "info"}));
    assert_eq!(out["msg"], json!(NESTED));

    let out = ok(
        json!([{"decode_json_fields": {"fields": ["msg"], "max_depth": 2, "target": ""}}]),
        json!({"msg": NESTED, "pipeline": "us1", "stream": "keep"}),
    );
    // Without overwrite_keys, existing keys stay.
    assert_eq!(
        out,
        json!({"msg": NESTED, "pipeline": "us1", "stream": "keep", "log": {"level": "info"}, "count": 3})
    );
    let out = ok(
        json!([{"decode_json_fields": {"fields": ["msg"], "target": "", "overwrite_keys": true}}]),
        json!({"msg": r#"{"@metadata":{"beat":"libbeat"},"msg":"overwrite metadata test"}"#}),
    );
    assert_eq!(out, json!({"msg": "overwrite metadata test"}));
}

#[test]
fn decode_json_fields_arrays_and_strings_left_alone() {
    let input = json!({"msg": r#"{
        "someDate": "2016-09-28T01:40:26.760+0000",
        "someNumberAsString": "1475026826760",
        "someNumber": 1475026826760,
        "someMap": "{\"a\":\"b\"}",
        "someArray": "[1,2,3]",
        "bad": "[]]"
    }"#});
    let out = ok(
        json!([{"decode_json_fields": {"fields": ["msg"], "process_array": true, "max_depth": 10}}]),
        input.clone(),
    );
    assert_eq!(
        out["msg"],
        json!({"someDate": "2016-09-28T01:40:26.760+0000", "someNumberAsString": "1475026826760",
               "someNumber": 1475026826760u64, "someMap": {"a": "b"}, "someArray": [1, 2, 3], "bad": "[]]"})
    );
    let out = ok(
        json!([{"decode_json_fields": {"fields": ["msg"], "max_depth": 10}}]),
        input,
    );
    assert_eq!(out["msg"]["someArray"], json!("[1,2,3]"));
    assert_eq!(out["msg"]["someMap"], json!({"a": "b"}));
}

#[test]
fn decode_json_fields_errors() {
    // Not a string, missing: untouched, no error.
    assert_eq!(
        ok(
            json!([{"decode_json_fields": {"fields": ["msg", "nope"]}}]),
            json!({"msg": 123})
        ),
        json!({"msg": 123})
    );
    // Invalid JSON: untouched; with add_error_key an `error` object.
    let (_, out, errors) = run(
        json!([{"decode_json_fields": {"fields": "message", "add_error_key": true}}]),
        json!({"message": "Broken JSON [["}),
    );
    assert_eq!(errors.len(), 1);
    assert_eq!(out["message"], json!("Broken JSON [["));
    assert_eq!(out["error"]["field"], json!("message"));
    assert_eq!(out["error"]["data"], json!("Broken JSON [["));
    assert_eq!(out["error"]["type"], json!("json"));
    assert!(
        out["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("parsing input as JSON: ")
    );
    let (_, out, _) = run(
        json!([{"decode_json_fields": {"fields": ["message"]}}]),
        json!({"message": "11:38:04,323 |-INFO testing"}),
    );
    assert_eq!(out, json!({"message": "11:38:04,323 |-INFO testing"}));
}

#[test]
fn decode_json_fields_timestamp_and_error_key() {
    let p = |add: bool| json!([{"decode_json_fields": {"fields": ["msg"], "target": "", "overwrite_keys": true, "add_error_key": add}}]);
    assert_eq!(
        ok(p(true), json!({"msg": r#"{"@timestamp":"{}"}"#})),
        json!({"msg": r#"{"@timestamp":"{}"}"#,
               "error": {"message": "@timestamp not overwritten (parse error on {})", "type": "json"}})
    );
    assert_eq!(
        ok(p(false), json!({"msg": r#"{"@timestamp":"{}"}"#})),
        json!({"msg": r#"{"@timestamp":"{}"}"#})
    );
    assert_eq!(
        ok(
            p(false),
            json!({"@timestamp": "old", "msg": r#"{"@timestamp":"2016-04-05T18:47:18.444Z"}"#})
        )["@timestamp"],
        json!("2016-04-05T18:47:18.444000Z")
    );
}

#[test]
fn decode_json_fields_expand_keys() {
    let out = ok(
        json!([{"decode_json_fields": {"fields": ["msg"], "expand_keys": true, "target": ""}}]),
        json!({"msg": r#"{"a.b": {"c": "c"}, "a.b.d": "d"}"#}),
    );
    assert_eq!(out["a"], json!({"b": {"c": "c", "d": "d"}}));
    let out = ok(
        json!([{"decode_json_fields": {"fields": ["msg"], "expand_keys": true, "target": "", "add_error_key": true}}]),
        json!({"msg": r#"{"a.b": "c", "a.b.c": "d"}"#}),
    );
    assert!(out.get("a").is_none());
    assert!(
        out["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot expand")
    );
}

// ---------------------------------------------------------------- add_locale

#[test]
fn add_locale_offset_and_abbreviation() {
    let out = ok(json!([{"add_locale": null}]), json!({}));
    let tz = out["event"]["timezone"].as_str().unwrap();
    let re = regex::Regex::new(r"^[+-]\d\d:\d\d$").unwrap();
    assert!(re.is_match(tz), "{tz}");

    let out = ok(
        json!([{"add_locale": {"format": "Abbreviation"}}]),
        json!({"event": {"kind": "e"}}),
    );
    assert!(!out["event"]["timezone"].as_str().unwrap().is_empty());
    assert_eq!(out["event"]["kind"], json!("e"));
}

// ------------------------------------------------------------------- dissect

#[test]
fn dissect_doc_example() {
    let out = ok(
        json!([{"dissect": {
            "tokenizer": "\"%{service.pid|integer} - %{service.name} - %{service.status}\"",
            "field": "message",
            "target_prefix": ""
        }}]),
        json!({"message": "\"321 - App01 - WebServer is up and running\""}),
    );
    assert_eq!(
        out["service"],
        json!({"pid": 321, "name": "App01", "status": "WebServer is up and running"})
    );
}

#[test]
fn dissect_defaults_to_message_and_dissect_prefix() {
    let out = ok(
        json!([{"dissect": {"tokenizer": "%{key1} %{key2} %{key3}"}}]),
        json!({"message": "a b c d"}),
    );
    assert_eq!(
        out["dissect"],
        json!({"key1": "a", "key2": "b", "key3": "c d"})
    );
}

#[test]
fn dissect_mismatch_flags_the_event() {
    let p = |ignore: bool| json!([{"dissect": {"tokenizer": "/var/log/%{key}.log", "ignore_failure": ignore}}]);
    let (_, out, errors) = run(p(false), json!({"message": "foobar"}));
    assert_eq!(
        out,
        json!({"message": "foobar", "log": {"flags": ["dissect_parsing_error"]}})
    );
    assert_eq!(errors.len(), 1);
    let (_, out, errors) = run(p(true), json!({"message": "foobar"}));
    assert_eq!(out["log"]["flags"], json!(["dissect_parsing_error"]));
    assert!(errors.is_empty());
    // A missing field is an error without a flag.
    let (_, out, errors) = run(p(false), json!({}));
    assert_eq!(out, json!({}));
    assert_eq!(errors.len(), 1);
}

#[test]
fn dissect_existing_keys() {
    let p = |overwrite: bool| json!([{"dissect": {"tokenizer": "%{a} %{b}", "target_prefix": "", "overwrite_keys": overwrite}}]);
    let (_, out, errors) = run(p(false), json!({"message": "1 2", "b": "old"}));
    assert_eq!(out, json!({"message": "1 2", "b": "old"}));
    assert!(
        errors[0]
            .message
            .contains("cannot override existing key with `b`")
    );
    assert_eq!(
        ok(p(true), json!({"message": "1 2", "b": "old"})),
        json!({"message": "1 2", "a": "1", "b": "2"})
    );
}

#[test]
fn dissect_trims_values() {
    let out = ok(
        json!([{"dissect": {"tokenizer": "%{a}|%{b}", "trim_values": "all", "trim_chars": " \t"}}]),
        json!({"message": " x \t|\ty "}),
    );
    assert_eq!(out["dissect"], json!({"a": "x", "b": "y"}));
}

// ----------------------------------------------------------------- timestamp

#[test]
fn timestamp_doc_example() {
    let p = json!([
        {"timestamp": {
            "field": "start_time",
            "layouts": ["2006-01-02T15:04:05Z", "2006-01-02T15:04:05.999Z"],
            "test": ["2019-06-22T16:33:51Z", "2019-11-18T04:59:51.123Z"]
        }},
        {"drop_fields": {"fields": ["start_time"]}}
    ]);
    assert_eq!(
        ok(
            p.clone(),
            json!({"start_time": "2019-06-22T16:33:51Z", "@timestamp": "x"})
        ),
        json!({"@timestamp": "2019-06-22T16:33:51.000000Z"})
    );
    assert_eq!(
        ok(p, json!({"start_time": "2019-11-18T04:59:51.123Z"})),
        json!({"@timestamp": "2019-11-18T04:59:51.123000Z"})
    );
}

#[test]
fn timestamp_unix_layouts() {
    let p = |layout: &str| json!([{"timestamp": {"field": "ts", "layouts": [layout], "target_field": "t"}}]);
    let want = json!("2015-03-07T11:06:39.000000Z");
    for v in [
        json!(1425726399),
        json!(1425726399.0),
        json!("1425726399"),
        json!("1425726399.0"),
    ] {
        assert_eq!(ok(p("UNIX"), json!({"ts": v}))["t"], want);
    }
    for v in [
        json!(1425726399000u64),
        json!("1425726399000"),
        json!("1425726399000.0"),
    ] {
        assert_eq!(ok(p("UNIX_MS"), json!({"ts": v}))["t"], want);
    }
    assert_eq!(
        ok(p("UNIX_MS"), json!({"ts": 1425726399123u64}))["t"],
        json!("2015-03-07T11:06:39.123000Z")
    );
}

#[test]
fn timestamp_timezone_applies_to_times_without_one() {
    for (tz, want) in [
        ("+0430", "2015-03-07T06:36:39.000000Z"),
        ("-03:30", "2015-03-07T14:36:39.000000Z"),
        ("+04", "2015-03-07T07:06:39.000000Z"),
    ] {
        let out = ok(
            json!([{"timestamp": {"field": "ts", "layouts": ["Mon Jan _2 15:04:05 2006"], "timezone": tz}}]),
            json!({"ts": "Sat Mar  7 11:06:39 2015"}),
        );
        assert_eq!(out["@timestamp"], json!(want), "{tz}");
    }
}

#[test]
fn timestamp_missing_and_failures() {
    let p = |extra: Value| {
        let mut s = json!({"field": "ts", "layouts": ["2006-01-02T15:04:05Z07:00"]});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        json!([{"timestamp": s}])
    };
    let (_, out, errors) = run(p(json!({})), json!({"@timestamp": "orig"}));
    assert_eq!(out["@timestamp"], json!("orig"));
    assert!(errors[0].message.contains("failed to get time field"));
    assert!(
        run(p(json!({"ignore_missing": true})), json!({}))
            .2
            .is_empty()
    );

    let (_, out, errors) = run(p(json!({})), json!({"ts": "3:04PM", "@timestamp": "orig"}));
    assert_eq!(out["@timestamp"], json!("orig"));
    assert!(errors[0].message.contains("failed parsing time field"));
    let (_, out, errors) = run(
        p(json!({"ignore_failure": true})),
        json!({"ts": "3:04PM", "@timestamp": "orig"}),
    );
    assert_eq!(out["@timestamp"], json!("orig"));
    assert!(errors.is_empty());
}

#[test]
fn timestamp_tries_layouts_in_order() {
    let out = ok(
        json!([{"timestamp": {"field": "ts", "layouts": ["UNIX", "02/Jan/2006:15:04:05 -0700"]}}]),
        json!({"ts": "07/Mar/2015:12:06:39 +0100"}),
    );
    assert_eq!(out["@timestamp"], json!("2015-03-07T11:06:39.000000Z"));
}

// ------------------------------------------------------ conditions, if/else

#[test]
fn when_applies_a_processor_only_to_matching_events() {
    let p =
        json!([{"add_tags": {"tags": ["private"], "when": {"network": {"source.ip": "private"}}}}]);
    assert_eq!(
        ok(p.clone(), json!({"source": {"ip": "10.1.1.1"}}))["tags"],
        json!(["private"])
    );
    assert!(
        ok(p.clone(), json!({"source": {"ip": "8.8.8.8"}}))
            .get("tags")
            .is_none()
    );
    assert!(ok(p, json!({})).get("tags").is_none());
}

#[test]
fn if_then_else() {
    let p = json!([{
        "if": {"regexp": {"message": "^ERR"}},
        "then": [{"add_tags": {"tags": ["error"]}}],
        "else": {"drop_event": {}}
    }]);
    assert_eq!(
        ok(p.clone(), json!({"message": "ERR boom"}))["tags"],
        json!(["error"])
    );
    assert_eq!(run(p, json!({"message": "fine"})).0, Verdict::Drop);
}

#[test]
fn metadata_processors_do_nothing_and_warn_nothing() {
    let parsed = leasehold_processors::Processors::parse(&json!([
        {"add_host_metadata": {"netinfo.enabled": false}},
        {"add_kubernetes_metadata": null}
    ]))
    .unwrap();
    assert!(parsed.warnings.is_empty());
    assert!(parsed.processors.is_empty());
    let mut event = json!({"a": 1}).as_object().cloned().unwrap();
    assert_eq!(parsed.processors.apply(&mut event), Verdict::Keep);
    assert_eq!(Value::Object(event), json!({"a": 1}));
}

#[test]
fn a_failing_processor_does_not_stop_the_next_ones() {
    let out = run(
        json!([
            {"rename": {"fields": [{"from": "nope", "to": "x"}]}},
            {"add_tags": {"tags": ["after"]}}
        ]),
        json!({}),
    )
    .1;
    assert_eq!(out["tags"], json!(["after"]));
}

#[test]
fn processors_run_in_order_on_the_whole_document() {
    let p = parse(json!([
        {"dissect": {"tokenizer": "%{ts} %{level} %{msg}", "target_prefix": ""}},
        {"timestamp": {"field": "ts", "layouts": ["2006-01-02T15:04:05Z07:00"]}},
        {"drop_fields": {"fields": ["ts"]}},
        {"drop_event": {"when": {"equals": {"level": "DEBUG"}}}},
        {"rename": {"fields": [{"from": "level", "to": "log.level"}]}}
    ]));
    let mut event = json!({"message": "2026-12-03T07:31:48.123456+01:00 INFO hello world"})
        .as_object()
        .cloned()
        .unwrap();
    assert_eq!(p.apply(&mut event), Verdict::Keep);
    assert_eq!(
        Value::Object(event),
        json!({
            "message": "2026-12-03T07:31:48.123456+01:00 INFO hello world",
            "@timestamp": "2026-12-03T06:31:48.123456Z",
            "msg": "hello world",
            "log": {"level": "INFO"}
        })
    );
    let mut debug = json!({"message": "2026-12-03T07:31:48Z DEBUG x"})
        .as_object()
        .cloned()
        .unwrap();
    assert_eq!(p.apply(&mut debug), Verdict::Drop);
}
