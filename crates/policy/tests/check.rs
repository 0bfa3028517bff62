//! `check` diagnostics: every error class and the lints.

use leasehold_policy::{Policy, Severity, Vars, check};

fn diags(src: &str) -> Vec<(Severity, usize, usize, String)> {
    let p = Policy::parse(src, "c.yaml").unwrap();
    check(&p, None)
        .into_iter()
        .map(|d| (d.severity, d.pos.line, d.pos.column, d.message))
        .collect()
}

fn has(d: &[(Severity, usize, usize, String)], sev: Severity, line: usize, text: &str) -> bool {
    d.iter()
        .any(|(s, l, _, m)| *s == sev && *l == line && m.contains(text))
}

#[test]
fn clean_policy_has_no_diagnostics() {
    let d = diags(
        "providers:\n  kubernetes_leaderelection:\n    leader_lease: lock\ninputs:\n  - id: a\n    type: t\n    condition: ${kubernetes_leaderelection.leader} == true\n    x: ${env.X|'d'}\n",
    );
    assert!(d.is_empty(), "{d:?}");
}

#[test]
fn lint_table() {
    use Severity::*;
    let cases: Vec<(&str, Severity, &str)> = vec![
        (
            "${kubernetes_leaderelection.leader} == 'true'",
            Warning,
            "always false",
        ),
        (
            "${kubernetes_leaderelection.leader} != 'false'",
            Warning,
            "always true",
        ),
        (
            "'true' == ${kubernetes_leaderelection.leader}",
            Warning,
            "always false",
        ),
        ("${env.REPLICAS} == 3", Warning, "always false"),
        (
            "${kubernetes_leaderelection.term} == '3'",
            Warning,
            "fails at evaluation",
        ),
        ("${env.NAME} > 3", Warning, "numbers only"),
        (
            "${kubernetes_leaderelection.leader} and 'x'",
            Warning,
            "needs booleans",
        ),
        ("not ${env.FLAG}", Warning, "`not` is applied"),
        ("${HOSTNAME} == 'a'", Warning, "default provider"),
        (
            "${docker.container.name} == 'a'",
            Warning,
            "neither supported nor configured",
        ),
        ("length('a', 'b') == 1", Error, "takes exactly 1"),
        ("match('a') == true", Error, "at least 2"),
        ("length('abc')", Error, "not a boolean"),
        ("1 ==", Error, "expected a value"),
        ("${x", Error, "expected"),
    ];
    for (cond, sev, text) in cases {
        let src = format!(
            "inputs:\n  - type: t\n    condition: \"{}\"\n",
            cond.replace('"', "\\\"")
        );
        let d = diags(&src);
        assert!(has(&d, sev, 3, text), "{cond}: {d:?}");
    }
}

#[test]
fn condition_errors_point_into_the_line() {
    let d = diags("inputs:\n  - type: t\n    condition: 1 == 1 and\n");
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].1, d[0].2), (3, 26), "{d:?}");
}

#[test]
fn sample_vars_give_types() {
    let p = Policy::parse(
        "inputs:\n  - type: t\n    condition: ${custom.flag} == 'yes'\n",
        "c.yaml",
    )
    .unwrap();
    assert!(check(&p, None).iter().any(|d| d.message.contains("custom")));
    let v = Vars::from_json(&serde_json::json!({"custom": {"flag": true}})).unwrap();
    let d = check(&p, Some(&v));
    assert!(
        d.iter().any(|d| d.message.contains("always false")),
        "{d:?}"
    );
}

#[test]
fn structural_errors() {
    use Severity::*;
    let d = diags(
        r#"
providers:
  kubernetes_leaderelection:
    leader_lease: Not_Valid
    leader_leaseduration: "15s"
    leader_renewdeadline: 0
    namespace: kube_system
    identity: ""
    leader_retry: 2
  docker: {}
  local:
    vars: [1]
inputs:
  - id: a
    streams: []
  - id: a
    type: ""
  - type: t
    id: [x]
    v: "${a"
    w: "${b.}"
    y: "${}"
    z: "${env.U:http://x}"
    nested:
      - condition: 5
"#,
    );
    let expect = [
        (Error, 4, "not a valid Kubernetes object name"),
        (Error, 5, "must be whole seconds, found \"15s\""),
        (Error, 6, "must be positive"),
        (Error, 7, "not a valid namespace"),
        (Error, 8, "must not be empty"),
        (Warning, 9, "unknown setting"),
        (Warning, 10, "not supported by leasehold"),
        (Error, 12, "local.vars"),
        (Error, 14, "has no `type`"),
        (Error, 16, "already used"),
        (Error, 17, "non-empty string"),
        (Error, 19, "`id` must be"),
        (Error, 20, "missing its ending"),
        (Error, 21, "cannot end with"),
        (Error, 22, "empty variable"),
        (Warning, 23, "only the first"),
        (Error, 25, "must be a string or a boolean"),
    ];
    for (sev, line, text) in expect {
        assert!(has(&d, sev, line, text), "line {line} {text:?}: {d:#?}");
    }
}

#[test]
fn lease_timings_are_validated() {
    let d = diags(
        "providers:\n  kubernetes_leaderelection:\n    leader_leaseduration: 10\n    leader_renewdeadline: 10\n",
    );
    assert!(
        has(&d, Severity::Error, 4, "duration > renew deadline"),
        "{d:?}"
    );
    let d = diags(
        "providers:\n  kubernetes_leaderelection:\n    leader_renewdeadline: 2\n    leader_retryperiod: 2\n",
    );
    assert!(d.iter().any(|x| x.3.contains("1.2")), "{d:?}");
}

#[test]
fn lease_timings_follow_the_election_rule() {
    let timings = |d: i64, r: i64, p: i64| {
        diags(&format!(
            "providers:\n  kubernetes_leaderelection:\n    leader_leaseduration: {d}\n    leader_renewdeadline: {r}\n    leader_retryperiod: {p}\n"
        ))
    };
    assert!(timings(15, 10, 2).is_empty());
    assert!(timings(60, 13, 10).is_empty());
    // exactly 1.2 × retry period is not enough
    let d = timings(60, 12, 10);
    assert!(has(&d, Severity::Error, 5, "1.2"), "{d:?}");
    // the election refuses timings over a day; so does check
    let d = timings(100_000, 10, 2);
    assert!(
        has(&d, Severity::Error, 3, "at most 86400 seconds"),
        "{d:?}"
    );
    let d = timings(15, 10, -2);
    assert!(has(&d, Severity::Error, 5, "must be positive"), "{d:?}");
    assert_eq!(
        leasehold_policy::providers::check_lease_timings(86_400_000, 86_399_999, 1),
        Ok(())
    );
}

#[test]
fn named_elections_are_checked() {
    use Severity::*;
    let src = "providers:
  kubernetes_leaderelection:
    leader_lease: lh
    leader_leaseduration: 20
    elections:
      state_metrics:
        leader_lease: same
      events:
        leader_lease: same
        leader_renewdeadline: 25
      leader: {}
      Bad-Name: {}
      ok: 3
      fine:
        handover_after_failures: 0
inputs:
  - type: t
    condition: ${kubernetes_leaderelection.events.leader} == 'true'
";
    let d = diags(src);
    assert!(
        has(&d, Error, 9, "already used by the election at line 6"),
        "{d:?}"
    );
    assert!(has(&d, Error, 10, "duration > renew deadline"), "{d:?}");
    assert!(
        has(&d, Error, 11, "`leader` cannot name an election"),
        "{d:?}"
    );
    assert!(
        has(&d, Error, 12, "`Bad-Name` cannot name an election"),
        "{d:?}"
    );
    assert!(has(&d, Error, 13, "must be a mapping"), "{d:?}");
    assert!(has(&d, Error, 15, "between 1 and 1000"), "{d:?}");
    // The named election's `leader` is a boolean, as in the single form.
    assert!(has(&d, Warning, 18, "always false"), "{d:?}");
    let ok = diags(
        "providers:\n  kubernetes_leaderelection:\n    elections:\n      a: {}\n      b: {leader_lease: x}\ninputs:\n  - type: t\n    condition: ${kubernetes_leaderelection.a.leader} == true\n",
    );
    assert!(ok.is_empty(), "{ok:?}");
}

fn diags_with(src: &str, sample: Option<&Vars>) -> Vec<(Severity, usize, usize, String)> {
    let p = Policy::parse(src, "c.yaml").unwrap();
    check(&p, sample)
        .into_iter()
        .map(|d| (d.severity, d.pos.line, d.pos.column, d.message))
        .collect()
}

fn env(pairs: &[(&str, &str)]) -> Vars {
    let mut vars = Vars::new();
    vars.set_provider(
        "env",
        leasehold_policy::Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), leasehold_policy::Value::Str(v.to_string())))
                .collect(),
        ),
    );
    vars
}

#[test]
fn lease_timings_from_variables_are_judged_only_with_their_values() {
    use Severity::*;
    // The renew deadline breaks the rule against the default duration (15),
    // but the duration comes from a variable: a warning that check cannot
    // judge, not an error.
    let src = "providers:\n  kubernetes_leaderelection:\n    leader_leaseduration: ${env.LEASE}\n    leader_renewdeadline: 20\n    leader_retryperiod: \"4\"\n";
    let d = diags(src);
    assert!(has(&d, Warning, 3, "cannot be judged"), "{d:?}");
    assert!(!d.iter().any(|x| x.0 == Error), "{d:?}");
    // With the value, as the agent will read it.
    assert!(diags_with(src, Some(&env(&[("LEASE", "30")]))).is_empty());
    let d = diags_with(src, Some(&env(&[("LEASE", "20")])));
    assert!(has(&d, Error, 5, "duration > renew deadline"), "{d:?}");
    assert!(
        has(
            &d,
            Error,
            5,
            "leader_leaseduration 20, leader_renewdeadline 20"
        ),
        "{d:?}"
    );
    let d = diags_with(src, Some(&env(&[("LEASE", "30s")])));
    assert!(
        has(
            &d,
            Error,
            3,
            "must be whole seconds, found \"30s\" (from \"${env.LEASE}\")"
        ),
        "{d:?}"
    );
    // Sample variables without it: still only a warning.
    let d = diags_with(src, Some(&env(&[("OTHER", "1")])));
    assert!(has(&d, Warning, 3, "cannot be judged"), "{d:?}");
    assert!(!d.iter().any(|x| x.0 == Error), "{d:?}");
    // A value that is not whole seconds is not replaced by the default to
    // judge the others against: only their own bounds are checked.
    let d = diags(
        "providers:\n  kubernetes_leaderelection:\n    leader_leaseduration: 15s\n    leader_renewdeadline: 20\n    leader_retryperiod: 0\n",
    );
    assert!(has(&d, Error, 3, "must be whole seconds"), "{d:?}");
    assert!(
        has(&d, Error, 5, "`leader_retryperiod` must be positive"),
        "{d:?}"
    );
    assert_eq!(d.len(), 2, "no rule error against a default: {d:?}");
    // Digits in a string are whole seconds, and judged.
    let d = diags("providers:\n  kubernetes_leaderelection:\n    leader_leaseduration: \"10\"\n");
    assert!(has(&d, Error, 3, "duration > renew deadline"), "{d:?}");
}
