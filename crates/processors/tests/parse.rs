//! Reading `processors:`: warnings for what leasehold lacks, errors (with
//! paths) for what is malformed.

mod common;

use common::{parse_errors, warnings};
use leasehold_processors::Processors;
use serde_json::json;

fn paths(errors: &[(String, String)]) -> Vec<&str> {
    errors.iter().map(|(p, _)| p.as_str()).collect()
}

#[test]
fn null_and_empty_lists_are_no_processors() {
    for v in [json!(null), json!([])] {
        let parsed = Processors::parse(&v).unwrap();
        assert!(parsed.processors.is_empty());
        assert!(parsed.warnings.is_empty());
    }
}

#[test]
fn unavailable_processors_are_skipped_with_a_warning() {
    let parsed = Processors::parse(&json!([
        {"add_tags": {"tags": ["a"]}},
        {"add_cloud_metadata": null},
        {"add_docker_metadata": {"host": "unix:///var/run/docker.sock"}},
        {"community_id": null},
        {"add_feilds": {"fields": {"a": 1}}}
    ]))
    .unwrap();
    assert!(!parsed.processors.is_empty());
    assert_eq!(
        parsed.warnings[2],
        "processors.3: processor `community_id` is not available in leasehold; events pass unprocessed by it"
    );
    assert!(parsed.warnings[0].starts_with("processors.1: processor `add_cloud_metadata`"));
    assert!(parsed.warnings[1].starts_with("processors.2: processor `add_docker_metadata`"));
    assert!(
        parsed.warnings[3].contains("check the spelling"),
        "{}",
        parsed.warnings[3]
    );
    assert_eq!(parsed.warnings.len(), 4);
}

#[test]
fn the_brief_example_path() {
    let errors = parse_errors(json!([
        {"add_tags": {"tags": ["a"]}},
        {"drop_event": {"when": {"equals": {"a": 1}}}},
        {"rename": {"fields": [{"to": "b"}]}}
    ]));
    assert_eq!(paths(&errors), ["processors.2.rename.fields.0.from"]);
    assert!(errors[0].1.contains("required"), "{}", errors[0].1);
}

#[test]
fn malformed_entries() {
    let errors = parse_errors(json!([
        "add_tags",
        {"add_tags": {"tags": ["a"]}, "drop_event": {}},
        {},
        {"add_tags": ["a"]}
    ]));
    assert_eq!(
        paths(&errors),
        [
            "processors.0",
            "processors.1",
            "processors.2",
            "processors.3.add_tags"
        ]
    );
    assert!(errors[1].1.contains("own `- ` item"), "{}", errors[1].1);
    assert_eq!(
        paths(&parse_errors(json!({"add_tags": 1}))),
        ["processors.add_tags"]
    );
    assert_eq!(paths(&parse_errors(json!("x"))), ["processors"]);
}

#[test]
fn all_errors_are_reported_at_once() {
    let errors = parse_errors(json!([
        {"add_fields": {"target": "x"}},
        {"add_tags": {"tags": "a", "when": {"equal": {"a": 1}}}},
        {"timestamp": {"field": "ts", "layouts": ["2006-01-02", "yyyy-MM-dd"], "timezone": "Mars/Olympus"}},
        {"drop_fields": {"fields": ["/(/"], "ignore_missing": "sometimes"}},
        {"decode_json_fields": {"fields": ["m"], "max_depth": 0, "extraneous": 1}},
        {"dissect": {"tokenizer": "%{a|date}"}},
        {"add_locale": {"format": "iso"}},
        {"copy_fields": {"fields": {"from": "a", "to": "b"}}}
    ]));
    assert_eq!(
        paths(&errors),
        [
            "processors.0.add_fields.fields",
            "processors.1.add_tags.when.equal",
            "processors.2.timestamp.timezone",
            "processors.2.timestamp.layouts.1",
            "processors.3.drop_fields.ignore_missing",
            "processors.3.drop_fields.fields.0",
            "processors.4.decode_json_fields.extraneous",
            "processors.4.decode_json_fields.max_depth",
            "processors.5.dissect.tokenizer",
            "processors.6.add_locale.format",
            "processors.7.copy_fields.fields",
        ]
    );
    for (path, message) in &errors {
        assert!(!message.is_empty(), "{path}");
    }
}

#[test]
fn unknown_settings_are_errors_where_beats_refuses_them_and_warnings_elsewhere() {
    let errors = parse_errors(json!([{"add_fields": {"fields": {"a": 1}, "targt": "x"}}]));
    assert_eq!(paths(&errors), ["processors.0.add_fields.targt"]);
    assert!(errors[0].1.contains("`target`"), "{}", errors[0].1);
    let w = warnings(
        json!([{"rename": {"fields": [{"from": "a", "to": "b"}], "ignore_mising": true}}]),
    );
    assert_eq!(w.len(), 1);
    assert!(
        w[0].starts_with("processors.0.rename.ignore_mising:"),
        "{}",
        w[0]
    );
}

#[test]
fn timestamp_test_samples_must_parse() {
    let errors = parse_errors(json!([{"timestamp": {
        "field": "ts",
        "layouts": ["2006-01-89T15:04:05Z07:00"],
        "test": ["2015-03-07T11:06:39Z"]
    }}]));
    assert_eq!(paths(&errors), ["processors.0.timestamp.test.0"]);
}

#[test]
fn timestamp_requires_field_and_layouts() {
    let errors = parse_errors(json!([{"timestamp": {}}]));
    assert_eq!(
        paths(&errors),
        [
            "processors.0.timestamp.layouts",
            "processors.0.timestamp.field"
        ]
    );
}

#[test]
fn if_needs_then() {
    let errors = parse_errors(json!([{"if": {"equals": {"a": 1}}, "else": []}]));
    assert_eq!(paths(&errors), ["processors.0.then"]);
    let errors =
        parse_errors(json!([{"if": {"equals": {"a": 1}}, "then": [{"add_tags": {}}], "when": {}}]));
    assert_eq!(
        paths(&errors),
        ["processors.0.when", "processors.0.then.0.add_tags.tags"]
    );
}

#[test]
fn several_conditions_in_one_map_warn() {
    let w =
        warnings(json!([{"drop_event": {"when": {"equals": {"a": 1}, "contains": {"b": "x"}}}}]));
    assert_eq!(w.len(), 1);
    assert!(
        w[0].starts_with("processors.0.drop_event.when:"),
        "{}",
        w[0]
    );
}

#[test]
fn dotted_setting_keys_are_nested_keys() {
    let parsed = Processors::parse(&json!([{"add_fields.fields.a": 1}])).unwrap();
    let mut event = serde_json::Map::new();
    parsed.processors.apply(&mut event);
    assert_eq!(
        serde_json::Value::Object(event),
        json!({"fields": {"a": 1}})
    );
}

#[test]
fn processors_are_shared_between_threads_and_clones_behave_alike() {
    fn shareable<T: Send + Sync + Clone + 'static>(t: &T) -> T {
        t.clone()
    }
    let p = common::parse(json!([{"add_tags": {"tags": ["x"]}}]));
    let clone = shareable(&p);
    let handle = std::thread::spawn(move || {
        let mut event = serde_json::Map::new();
        clone.apply(&mut event);
        serde_json::Value::Object(event)
    });
    let mut event = serde_json::Map::new();
    p.apply(&mut event);
    assert_eq!(handle.join().unwrap(), serde_json::Value::Object(event));
}

#[test]
fn parse_error_displays_path_and_message() {
    let errors = Processors::parse(&json!([{"add_tags": {}}])).unwrap_err();
    assert_eq!(
        errors[0].to_string(),
        "processors.0.add_tags.tags: `tags` is required, e.g. `tags: [web, production]`"
    );
}
