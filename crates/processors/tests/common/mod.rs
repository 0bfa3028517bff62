//! Helpers shared by the integration tests.

#![allow(dead_code)]

use leasehold_processors::{Processors, RunError, Verdict};
use serde_json::{Map, Value};

/// Parses `processors`, failing the test on any error.
pub fn parse(processors: Value) -> Processors {
    match Processors::parse(&processors) {
        Ok(p) => p.processors,
        Err(e) => panic!("unexpected parse errors: {e:?}"),
    }
}

/// Runs `processors` on `event`: the verdict, the event after, and the
/// processor failures.
pub fn run(processors: Value, event: Value) -> (Verdict, Value, Vec<RunError>) {
    let p = parse(processors);
    let mut event: Map<String, Value> = match event {
        Value::Object(m) => m,
        other => panic!("an event is an object, not {other}"),
    };
    let mut errors = Vec::new();
    let verdict = p.apply_reporting(&mut event, &mut |e| errors.push(e));
    (verdict, Value::Object(event), errors)
}

/// Runs and expects the event kept without processor failures.
pub fn ok(processors: Value, event: Value) -> Value {
    let (verdict, out, errors) = run(processors, event);
    assert_eq!(verdict, Verdict::Keep);
    assert!(errors.is_empty(), "unexpected failures: {errors:?}");
    out
}

/// The parse errors as (path, message).
pub fn parse_errors(processors: Value) -> Vec<(String, String)> {
    match Processors::parse(&processors) {
        Ok(p) => panic!("expected parse errors, got {:?}", p.processors),
        Err(errors) => errors.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

/// The warnings of a policy that parses.
pub fn warnings(processors: Value) -> Vec<String> {
    match Processors::parse(&processors) {
        Ok(p) => p.warnings,
        Err(e) => panic!("unexpected parse errors: {e:?}"),
    }
}
