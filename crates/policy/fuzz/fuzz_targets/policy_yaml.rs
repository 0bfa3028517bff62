//! Loads arbitrary text as a policy, then checks and renders it: nothing may
//! panic, and rendering must be deterministic.
#![no_main]

use leasehold_policy::{Policy, Vars, check, render};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(policy) = Policy::parse(text, "fuzz.yaml") else { return };
    let _ = check(&policy, None);
    let vars = Vars::from_json(&serde_json::json!({
        "env": {"A": "1"},
        "kubernetes_leaderelection": {"leader": true}
    }))
    .unwrap_or_default();
    let a = render(&policy, &vars);
    let b = render(&policy, &vars);
    assert_eq!(a, b);
    if let Ok(r) = a {
        let _ = r.to_json();
    }
});
