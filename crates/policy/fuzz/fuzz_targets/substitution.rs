//! Parses and applies arbitrary substitution templates.
#![no_main]

use leasehold_policy::subst::{parse, Resolved};
use leasehold_policy::Vars;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let vars = Vars::from_json(&serde_json::json!({
        "env": {"A": "1", "B": ""},
        "host": {"ip": ["a", "b"], "n": 3, "m": {"k": 1.5}}
    }))
    .unwrap_or_default();
    if let Ok(t) = parse(text, "env") {
        for r in t.refs() {
            let _ = r.repr();
        }
        if let Resolved::Value(v) = t.apply(&vars) {
            let _ = v.to_subst_text();
        }
        // a string without `$` is returned unchanged
        if !text.contains('$') {
            assert_eq!(t.apply(&vars), Resolved::Value(leasehold_policy::Value::Str(text.to_string())));
        }
    }
});
