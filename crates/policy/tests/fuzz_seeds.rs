//! Replays the seed inputs of the `policy_yaml` fuzz target
//! (`fuzz/seeds/policy_yaml`) the way the target runs them, on a thread with
//! a tokio worker's default stack (2 MiB), so each case found once stays
//! fixed without a nightly toolchain. Seeds listed below must also give the
//! error they were added for.

use std::path::PathBuf;

use leasehold_policy::yaml::{MAX_DEPTH, MAX_NODES, MAX_TEXT_BYTES};
use leasehold_policy::{Policy, Vars, check, render};

/// (seed file, text the load or render error must contain)
fn expected() -> [(&'static str, String); 5] {
    let values = format!("too many values: more than {MAX_NODES}");
    [
        (
            "alias-depth.yaml",
            format!("nesting deeper than {MAX_DEPTH} levels"),
        ),
        ("billion-laughs.yaml", values.clone()),
        (
            "alias-text-bomb.yaml",
            format!("too much text: more than {} MiB", MAX_TEXT_BYTES >> 20),
        ),
        ("merge-key-bomb.yaml", values),
        (
            "empty-variable.yaml",
            "3:9: in `${}`: empty variable reference".into(),
        ),
    ]
}

/// What the fuzz target does, returning the first error it meets.
fn fuzz_body(text: &str) -> Option<String> {
    let policy = match Policy::parse(text, "fuzz.yaml") {
        Ok(p) => p,
        Err(e) => return Some(e.to_string()),
    };
    let _ = check(&policy, None);
    let vars = Vars::from_json(&serde_json::json!({
        "env": {"A": "1"},
        "kubernetes_leaderelection": {"leader": true}
    }))
    .unwrap_or_default();
    let a = render(&policy, &vars);
    let b = render(&policy, &vars);
    assert_eq!(a, b, "rendering must be deterministic");
    match a {
        Ok(r) => {
            let _ = r.to_json();
            None
        }
        Err(e) => Some(e.to_string()),
    }
}

#[test]
fn seeds_replay_on_a_small_stack() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/policy_yaml");
    let expected = expected();
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let outcome = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || fuzz_body(&text))
            .unwrap()
            .join()
            .unwrap_or_else(|_| panic!("{name}: the fuzz body panicked"));
        if let Some((_, want)) = expected.iter().find(|(n, _)| *n == name) {
            let got = outcome.unwrap_or_default();
            assert!(got.contains(want), "{name}: {got}");
        }
        seen.push(name);
    }
    for (name, _) in &expected {
        assert!(seen.iter().any(|s| s == name), "missing seed {name}");
    }
}
