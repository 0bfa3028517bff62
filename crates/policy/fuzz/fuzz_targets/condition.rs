//! Parses and evaluates arbitrary conditions, strict and lenient.
#![no_main]

use leasehold_policy::cond::{Condition, EvalOptions};
use leasehold_policy::Vars;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let vars = Vars::from_json(&serde_json::json!({
        "env": {"A": "1"},
        "kubernetes_leaderelection": {"leader": true, "term": 9},
        "d": {"l": [1, "x", 2.5], "m": {"k": "v"}}
    }))
    .unwrap_or_default();
    if let Ok(c) = Condition::parse(text) {
        let lenient = c.eval(&vars, EvalOptions::default());
        let strict = c.eval(&vars, EvalOptions { strict: true });
        // strict mode can only turn results into errors, never change them
        if let (Ok(a), Ok(b)) = (&lenient, &strict) {
            assert_eq!(a, b);
        }
    }
});
