//! The `script` processor against Beats' documented behaviour, and against
//! scripts written to hurt the agent.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Processors, RunError, Verdict};

fn script(settings: Value) -> Processors {
    match Processors::parse(&json!([{ "script": settings }])) {
        Ok(p) => p.processors,
        Err(e) => panic!("the script does not load: {e:?}"),
    }
}

fn load_error(settings: Value) -> String {
    match Processors::parse(&json!([{ "script": settings }])) {
        Ok(_) => panic!("the script loaded"),
        Err(e) => e
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    }
}

fn js(source: &str) -> Processors {
    script(json!({"lang": "javascript", "source": source}))
}

/// Runs `p` on `event`: the verdict, the event, and the failures reported.
fn run(p: &Processors, event: Value) -> (Verdict, Value, Vec<RunError>) {
    let Value::Object(mut map) = event else {
        panic!("events are objects")
    };
    let mut failures = Vec::new();
    let verdict = p.apply_reporting(&mut map, &mut |e| failures.push(e));
    (verdict, Value::Object(map), failures)
}

#[test]
fn the_event_api_reads_and_writes_fields_as_beats_does() {
    let p = js(r#"
        function process(event) {
            var old = event.Put("a.b", 2);
            event.Put("old_of_a_b", old);
            event.Put("missing_old", event.Put("fresh", "x"));
            event.Put("literal", event.Get("k8s.io/x.y"));
            event.Put("whole_has_a", event.Get().a !== undefined);
            event.Put("absent", event.Get("no.such.key"));
            event.Put("deleted", event.Delete("gone"));
            event.Put("deleted_absent", event.Delete("never"));
            event.Put("renamed", event.Rename("from", "to.nested"));
            event.Put("rename_onto_taken", event.Rename("a.b", "fresh"));
            event.Put("rename_absent", event.Rename("nothing", "x"));
            event.Tag("t1"); event.Tag("t1"); event.Tag("t2");
            event.AppendTo("error.message", "first");
            event.AppendTo("error.message", "second");
            event.AppendTo("error.message", "second");
            event.fields.direct = true;
        }
    "#);
    let (verdict, out, failures) = run(
        &p,
        json!({"a": {"b": 1}, "k8s.io/x.y": "dotted", "gone": 1, "from": "v", "tags": ["t0"]}),
    );
    assert_eq!(verdict, Verdict::Keep);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(
        out,
        json!({
            "a": {"b": 2}, "old_of_a_b": 1, "fresh": "x", "missing_old": null,
            "k8s.io/x.y": "dotted", "literal": "dotted", "whole_has_a": true,
            "absent": null, "deleted": true, "deleted_absent": false,
            "to": {"nested": "v"}, "renamed": true, "rename_onto_taken": false,
            "rename_absent": false, "tags": ["t0", "t1", "t2"],
            "error": {"message": ["first", "second"]}, "direct": true,
        })
    );
}

#[test]
fn a_tag_on_an_event_without_tags_makes_a_list_and_cancel_drops_the_event() {
    let p = js(r#"function process(e) { e.Tag("x"); if (e.Get("drop")) e.Cancel(); }"#);
    let (_, out, _) = run(&p, json!({"m": 1}));
    assert_eq!(out["tags"], json!(["x"]));
    let (verdict, _, failures) = run(&p, json!({"drop": true}));
    assert_eq!(verdict, Verdict::Drop);
    assert!(failures.is_empty());
}

#[test]
fn dotted_annotations_are_renamed_the_way_elastics_audit_log_stream_needs() {
    // The shape of the audit-log stream's processor in Elastic's manifest:
    // keys holding dots are addressed by the whole remaining key.
    let p = js(r#"
        function process(event) {
            var audit = event.Get("kubernetes.audit");
            for (var key in audit["annotations"]) {
                event.Rename("kubernetes.audit.annotations." + key,
                             "kubernetes.audit.annotations." + key.replace(/\./g, "_"));
            }
            return event;
        }
        function test() {
            var e = process(new Event({"kubernetes": {"audit": {"annotations": {"a.b/c": "allow"}}}}));
            if (e.Get("kubernetes.audit.annotations.a_b/c") !== "allow") { throw "expected a_b/c === allow"; }
        }
    "#);
    let (_, out, failures) = run(
        &p,
        json!({"kubernetes": {"audit": {"annotations": {
            "authorization.k8s.io/decision": "allow",
            "authorization.k8s.io/reason": "RBAC: allowed",
        }, "verb": "get"}}}),
    );
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(
        out["kubernetes"]["audit"],
        json!({"annotations": {
            "authorization_k8s_io/decision": "allow",
            "authorization_k8s_io/reason": "RBAC: allowed",
        }, "verb": "get"})
    );
}

#[test]
fn params_reach_register_and_a_failing_test_or_a_bad_script_stops_the_load() {
    let p = script(json!({
        "lang": "js",
        "params": {"threshold": 3, "field": "n"},
        "source": r#"
            var limit, field;
            function register(params) { limit = params.threshold; field = params.field; }
            function process(e) { if (e.Get(field) > limit) e.Tag("big"); }
        "#,
    }));
    let (_, out, _) = run(&p, json!({"n": 5}));
    assert_eq!(out["tags"], json!(["big"]));

    let no_register = load_error(
        json!({"lang": "javascript", "params": {"a": 1}, "source": "function process(e) {}"}),
    );
    assert!(
        no_register.contains("no register function"),
        "{no_register}"
    );
    let failing_test = load_error(json!({"lang": "javascript", "source":
        "function process(e) {} function test() { throw new Error('expected allow'); }"}));
    assert!(
        failing_test
            .starts_with("processors.0.script: failed in test() function: Error: expected allow"),
        "{failing_test}"
    );
    let syntax = load_error(json!({"lang": "javascript", "source": "function process(e) {"}));
    assert!(syntax.contains("SyntaxError"), "{syntax}");
    let missing = load_error(json!({"lang": "javascript", "source": "var x = 1;"}));
    assert!(missing.contains("process function not found"), "{missing}");
    // Strict mode, as Beats compiles scripts.
    let strict = load_error(
        json!({"lang": "javascript", "source": "undeclared = 1; function process(e) {}"}),
    );
    assert!(strict.contains("ReferenceError"), "{strict}");
    let lang = load_error(json!({"lang": "painless", "source": "function process(e) {}"}));
    assert!(lang.contains("`javascript` only"), "{lang}");
    let two = load_error(json!({"lang": "javascript", "source": "x", "file": "/x.js"}));
    assert!(two.contains("only one of"), "{two}");
    let unknown =
        load_error(json!({"lang": "javascript", "source": "function process(e) {}", "sorce": 1}));
    assert!(unknown.contains("processors.0.script.sorce"), "{unknown}");
}

#[test]
fn a_script_in_files_is_read_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.js");
    let b = dir.path().join("b.js");
    std::fs::write(&a, "function helper(e) { e.Put('helped', true); }").unwrap();
    std::fs::write(&b, "function process(e) { helper(e); }").unwrap();
    let p = script(json!({"lang": "javascript", "files": [a, b]}));
    let (_, out, _) = run(&p, json!({}));
    assert_eq!(out["helped"], json!(true));
    let missing = load_error(json!({"lang": "javascript", "file": dir.path().join("none.js")}));
    assert!(missing.contains("cannot read the script file"), "{missing}");
}

#[test]
fn an_exception_keeps_the_changes_made_before_it_tags_and_appends_the_error() {
    let p = js(r#"function process(e) { e.Put("before", 1); e.Get("x").y.z = 2; }"#);
    let (verdict, out, failures) = run(&p, json!({"error": {"message": "earlier"}}));
    assert_eq!(verdict, Verdict::Keep);
    assert_eq!(out["before"], json!(1));
    assert_eq!(out["tags"], json!(["_js_exception"]));
    let messages = out["error"]["message"].as_array().expect("two messages");
    assert_eq!(messages[0], json!("earlier"));
    assert!(
        messages[1].as_str().unwrap().starts_with("TypeError:"),
        "{messages:?}"
    );
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].processor, "processors.0.script");
    assert!(
        failures[0]
            .message
            .starts_with("failed in process function: TypeError")
    );

    // A thrown string, a custom tag; an empty tag_on_exception adds none.
    let custom = script(json!({"lang": "javascript", "tag_on_exception": "_bad",
        "source": "function process(e) { throw 'no good'; }"}));
    let (_, out, _) = run(&custom, json!({"tags": ["_bad"]}));
    assert_eq!(out["tags"], json!(["_bad", "_bad"]));
    assert_eq!(out["error"]["message"], json!("no good"));
    let untagged = script(json!({"lang": "javascript", "tag_on_exception": "",
        "source": "function process(e) { throw 'no good'; }"}));
    let (_, out, _) = run(&untagged, json!({}));
    assert_eq!(out.get("tags"), None);
}

#[test]
fn a_script_that_never_returns_is_stopped_at_its_timeout_and_the_next_event_runs() {
    let timeout = Duration::from_millis(50);
    let p = script(
        json!({"lang": "javascript", "timeout": "50ms", "source": r#"
        function process(e) { if (e.Get("spin")) { while (true) {} } e.Put("ok", true); }
    "#}),
    );
    let started = Instant::now();
    let (verdict, out, failures) = run(&p, json!({"spin": true}));
    let took = started.elapsed();
    assert_eq!(verdict, Verdict::Keep);
    assert_eq!(out["tags"], json!(["_js_exception"]));
    assert!(
        out["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(crate::actions::script::session::TIMEOUT_MESSAGE),
        "{out}"
    );
    assert_eq!(failures.len(), 1);
    assert!(took >= timeout, "stopped before its timeout: {took:?}");
    assert!(
        took < timeout * 20,
        "not stopped near its timeout: {took:?}"
    );
    let (_, out, failures) = run(&p, json!({"spin": false}));
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(out["ok"], json!(true));
}

#[test]
fn a_catastrophic_regular_expression_is_stopped_at_the_timeout_too() {
    let p = script(
        json!({"lang": "javascript", "timeout": "50ms", "source": r#"
        function process(e) { e.Put("m", /^(a+)+$/.test(e.Get("message"))); }
    "#}),
    );
    let (_, out, failures) = run(&p, json!({"message": format!("{}!", "a".repeat(64))}));
    assert_eq!(failures.len(), 1, "{out}");
    assert_eq!(out["tags"], json!(["_js_exception"]));
}

#[test]
fn memory_and_stack_bombs_fail_the_event_not_the_agent() {
    let p = js(r#"
        function deep(n) { return deep(n + 1) + 1; }
        function process(e) {
            if (e.Get("kind") === "memory") { var a = []; while (true) { a.push(new Array(100000).fill("x")); } }
            if (e.Get("kind") === "string") { e.Put("s", "x".repeat(1 << 30)); }
            if (e.Get("kind") === "stack") { deep(0); }
            e.Put("ok", true);
        }
    "#);
    for kind in ["memory", "string", "stack"] {
        let (verdict, out, failures) = run(&p, json!({"kind": kind}));
        assert_eq!(verdict, Verdict::Keep, "{kind}");
        assert_eq!(out["tags"], json!(["_js_exception"]), "{kind}: {out}");
        assert_eq!(failures.len(), 1, "{kind}");
        assert_eq!(out.get("s"), None, "{kind}");
        let (_, out, failures) = run(&p, json!({"kind": "none"}));
        assert!(failures.is_empty(), "after {kind}: {failures:?}");
        assert_eq!(out["ok"], json!(true), "after {kind}");
    }
}

#[test]
fn a_script_cannot_break_the_crossing_or_the_event_api() {
    let p = js(r#"
        JSON.parse = function () { return {}; };
        JSON.stringify = function () { return "{}"; };
        Object.defineProperty = function () {};
        try { Event = null; } catch (e) {}
        function process(e) { e.Put("still", "works"); e.fields = {"replaced": true}; }
    "#);
    let (_, out, failures) = run(&p, json!({"message": "m"}));
    assert!(failures.is_empty(), "{failures:?}");
    // Reassigning `event.fields` does not replace the event (Beats neither).
    assert_eq!(out, json!({"message": "m", "still": "works"}));
}

#[test]
fn a_top_level_that_never_returns_fails_the_load() {
    let e = load_error(
        json!({"lang": "javascript", "source": "while (true) {} function process(e) {}"}),
    );
    assert!(e.contains("took longer than"), "{e}");
}

#[test]
fn integers_beyond_a_doubles_precision_pass_through_untouched() {
    let p = js(r#"function process(e) { e.Put("seen", true); }"#);
    let (_, out, _) = run(
        &p,
        json!({"inode": 18446744073709551615u64, "offset": 9007199254740993u64}),
    );
    assert_eq!(out["inode"], json!(18446744073709551615u64));
    assert_eq!(out["offset"], json!(9007199254740993u64));
}

#[test]
fn a_pods_processors_cannot_run_a_script() {
    let list = json!([
        {"add_tags": {"tags": ["a"]}},
        {"script": {"lang": "javascript", "source": "function process(e) { e.Put('ran', true); }"}},
    ]);
    let confined = Processors::parse_confined(&list).expect("loads");
    assert!(
        confined
            .warnings
            .iter()
            .any(|w| w.contains("cannot run scripts")),
        "{:?}",
        confined.warnings
    );
    assert!(!confined.processors.blocks());
    let (_, out, _) = run(&confined.processors, json!({}));
    assert_eq!(out.get("ran"), None);

    assert!(!js_free().blocks());
}

#[test]
fn a_script_runs_inline_until_a_call_is_slow_then_asks_for_a_blocking_thread() {
    // Millions of steps: far more than 20 ms of CPU on any machine.
    let slow = r#"function process(e) {
        if (e.Get("slow")) { var x = 0; for (var i = 0; i < 3e6; i++) { x += i % 7; } e.Put("x", x); }
    }"#;
    let list = json!([{"add_tags": {"tags": ["a"]}},
        {"script": {"lang": "javascript", "timeout": "30s", "source": slow}}]);
    let p = Processors::parse(&list).expect("loads").processors;
    for _ in 0..3 {
        run(&p, json!({"slow": false}));
        assert!(!p.blocks(), "fast calls stay on the caller's thread");
    }
    run(&p, json!({"slow": true}));
    assert!(
        p.blocks(),
        "a call of millions of steps moves the script off"
    );
    run(&p, json!({"slow": false}));
    assert!(p.blocks(), "for good");
    // Inside a branch too.
    let branch = Processors::parse(&json!([{"if": {"has_fields": ["x"]}, "then": [
        {"script": {"lang": "javascript", "timeout": "30s", "source": slow}}]}]))
    .expect("loads")
    .processors;
    run(&branch, json!({"x": 1, "slow": true}));
    assert!(branch.blocks());
}

fn js_free() -> Processors {
    Processors::parse(&json!([{"add_tags": {"tags": ["a"]}}]))
        .expect("loads")
        .processors
}

#[test]
fn sessions_beyond_max_cached_sessions_are_not_kept() {
    // State kept in a session's globals shows which session ran.
    let p = script(json!({"lang": "javascript", "max_cached_sessions": 0,
        "source": "var n = 0; function process(e) { n++; e.Put('n', n); }"}));
    for _ in 0..3 {
        let (_, out, _) = run(&p, json!({}));
        assert_eq!(out["n"], json!(1), "a fresh session each time");
    }
    let kept = js("var n = 0; function process(e) { n++; e.Put('n', n); }");
    let _ = run(&kept, json!({}));
    let (_, out, _) = run(&kept, json!({}));
    assert_eq!(out["n"], json!(2), "the idle session serves the next event");
}
