//! The loader's limits hold after alias expansion, on a thread with a
//! tokio worker's default stack (2 MiB): documents that expand past them are
//! refused with an error naming the limit, and the deepest document that is
//! accepted goes through `check`, rendering and output without running out
//! of stack.

use leasehold_policy::yaml::{MAX_DEPTH, MAX_NODES, MAX_TEXT_BYTES};
use leasehold_policy::{Policy, PolicyError, Vars, check, render};

const STACK: usize = 2 << 20;

/// Loads, checks and renders `text` on a thread with a 2 MiB stack; returns
/// the load error, if any.
fn run_small_stack(text: String) -> Result<(), PolicyError> {
    std::thread::Builder::new()
        .name("2MiB".into())
        .stack_size(STACK)
        .spawn(move || {
            let policy = Policy::parse(&text, "limits.yaml")?;
            let _ = check(&policy, None);
            let vars = Vars::from_json(&serde_json::json!({"env": {"A": "1"}})).unwrap();
            if let Ok(r) = render(&policy, &vars) {
                let doc = r.to_json();
                let _ = serde_json::to_string(&doc).unwrap();
                let _ = leasehold_policy::value::to_yaml(&leasehold_policy::Value::from_json(&doc));
            }
            Ok(())
        })
        .unwrap()
        .join()
        .expect("the loader must not crash")
}

fn nested(levels: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(levels), "]".repeat(levels))
}

/// About 32 KB: each anchor nests 120 levels deep and holds the previous
/// one, so the expanded tree is 15,000 levels deep while no single line of
/// the source nests deeper than the limit.
fn deep_alias_document() -> String {
    let mut s = format!("a0: &a0 {}\n", nested(120, "x"));
    for i in 1..125 {
        s.push_str(&format!(
            "a{i}: &a{i} {}\n",
            nested(120, &format!("*a{}", i - 1))
        ));
    }
    s
}

/// The classic: ten lists of ten aliases, nine times over (10^9 values from
/// under 1 KB).
fn billion_laughs() -> String {
    let mut s = String::from("l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..9 {
        let p = format!("*l{}", i - 1);
        s.push_str(&format!("l{i}: &l{i} [{}]\n", vec![p; 10].join(", ")));
    }
    s.push_str("inputs:\n  - type: t\n    x: *l8\n");
    s
}

#[test]
fn deep_aliases_are_refused_naming_the_depth_limit() {
    let doc = deep_alias_document();
    assert!(doc.len() > 30_000 && doc.len() < 40_000, "{}", doc.len());
    let e = run_small_stack(doc).unwrap_err();
    assert_eq!((e.pos.line, e.pos.column), (2, 129), "{e}");
    assert!(
        e.message.contains(&format!(
            "alias `*a0` expands to nesting deeper than {MAX_DEPTH} levels"
        )),
        "{e}"
    );
    assert!(e.message.contains("limit"), "{e}");
}

#[test]
fn a_billion_laughs_is_refused_naming_the_size_limit() {
    let e = run_small_stack(billion_laughs()).unwrap_err();
    assert!(e.message.contains(&format!("more than {MAX_NODES}")), "{e}");
    assert!(e.message.contains("limit"), "{e}");
    assert!(e.hint.as_deref().unwrap_or("").contains("alias"), "{e}");
}

#[test]
fn aliases_of_a_long_string_are_refused_naming_the_text_limit() {
    // 64 KiB of text, 16^4 times: 4 GiB from a 65 KiB document, with few
    // values (65,536 strings).
    let mut s = format!("s0: &s0 '{}'\n", "x".repeat(64 << 10));
    for i in 1..5 {
        let p = format!("*s{}", i - 1);
        s.push_str(&format!("s{i}: &s{i} [{}]\n", vec![p; 16].join(", ")));
    }
    let e = run_small_stack(s).unwrap_err();
    assert!(
        e.message
            .contains(&format!("more than {} MiB", MAX_TEXT_BYTES >> 20)),
        "{e}"
    );
}

#[test]
fn the_deepest_accepted_policy_fits_a_small_stack() {
    // The input's `deep` list sits at depth 4 (document, `inputs`, the
    // input, the list); the aliases bring it to exactly MAX_DEPTH
    // collections in all.
    let h = MAX_DEPTH - 4;
    let a = h / 2;
    let doc = |wrap: usize| {
        format!(
            "d: &d {}\ne: &e {}\ninputs:\n  - type: t\n    deep: {}\n",
            nested(a, "'${env.A}'"),
            nested(h - a, "*d"),
            nested(wrap, "*e"),
        )
    };
    run_small_stack(doc(1)).unwrap();
    // One more level is refused.
    let e = run_small_stack(doc(2)).unwrap_err();
    assert_eq!(e.pos.line, 5, "{e}");
    assert!(
        e.message
            .contains("alias `*e` expands to nesting deeper than"),
        "{e}"
    );
}

#[test]
fn the_deepest_accepted_condition_fits_a_small_stack() {
    let depth = leasehold_policy::cond::parser::MAX_DEPTH;
    let cond = format!(
        "{}${{env.A}} == '1'{}",
        "(".repeat(depth - 1),
        ")".repeat(depth - 1)
    );
    let doc = format!("inputs:\n  - type: t\n    condition: \"{cond}\"\n");
    run_small_stack(doc).unwrap();
}

#[test]
fn wide_documents_load_in_linear_time() {
    // 30,000 keys in one mapping and a merge of all of them: quadratic
    // duplicate-key or merge checks would take many seconds.
    let n = 30_000;
    let mut s = String::from("base: &b\n");
    for i in 0..n {
        s.push_str(&format!("  k{i}: {i}\n"));
    }
    s.push_str("copy:\n  <<: *b\n");
    for i in 0..n {
        s.push_str(&format!("  k{i}: x\n"));
    }
    let start = std::time::Instant::now();
    let p = Policy::parse(&s, "wide.yaml").unwrap();
    let elapsed = start.elapsed();
    assert_eq!(p.section("copy").unwrap().entries().len(), n);
    assert!(elapsed.as_secs() < 20, "{elapsed:?}");
}
