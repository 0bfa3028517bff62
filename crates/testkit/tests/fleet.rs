//! The fleet's overlap check must be able to fail: two scripted "candidates"
//! that both claim to lead are caught, one that stops first is not.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_testkit::candidates::{Fleet, Kind, Spec, State};

const WITHIN: Duration = Duration::from_secs(10);

/// A fake candidate: prints `states` as report lines, then waits for SIGTERM.
fn script(dir: &tempfile::TempDir, name: &str, states: &[&str]) -> PathBuf {
    let mut body = String::from("#!/bin/sh\ntrap 'exit 0' TERM\n");
    for state in states {
        let term = if *state == "leading" { "1" } else { "null" };
        body.push_str(&format!(
            "echo '{{\"ts\":\"2026-01-01T00:00:00.000000Z\",\"identity\":\"{name}\",\"state\":\"{state}\",\"holder\":null,\"term\":{term}}}'\n"
        ));
    }
    body.push_str("while :; do sleep 1; done\n");
    let path = dir.path().join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn spec(program: PathBuf, identity: &str) -> Spec {
    Spec {
        kind: Kind::ClientGo,
        program,
        lease: "l".into(),
        namespace: "n".into(),
        identity: identity.into(),
        kubeconfig: "/dev/null".into(),
        timings: ["3s", "2s", "500ms"].map(String::from),
        extra: Vec::new(),
    }
}

// One test, not two: a script still open for writing in one test thread
// while another thread forks cannot be executed (ETXTBSY), so every script is
// written before any process is spawned.
#[tokio::test]
async fn overlapping_leaders_are_caught_and_a_clean_handover_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let both_a = spec(script(&dir, "both-a", &["following", "leading"]), "both-a");
    let both_b = spec(script(&dir, "both-b", &["following", "leading"]), "both-b");
    let steps_down = spec(script(&dir, "down-a", &["leading", "following"]), "down-a");
    let takes_over = spec(script(&dir, "down-b", &["leading"]), "down-b");

    // a leads, then b claims to lead while a still does: one violation.
    let mut fleet = Fleet::new();
    let a = fleet.spawn(both_a).unwrap();
    fleet.wait_for_leader(WITHIN).await.unwrap();
    let b = fleet.spawn(both_b).unwrap();
    fleet
        .wait_for(WITHIN, "b leading", |_, i, r| {
            i == b && r.state == State::Leading
        })
        .await
        .unwrap();
    assert_eq!(fleet.violations().len(), 1, "{:?}", fleet.violations());
    fleet.terminate(a, WITHIN).await.unwrap();
    fleet.terminate(b, WITHIN).await.unwrap();

    // a leads and steps down before b leads: no violation.
    let mut fleet = Fleet::new();
    let a = fleet.spawn(steps_down).unwrap();
    fleet
        .wait_for(WITHIN, "a following", |_, i, r| {
            i == a && r.state == State::Following
        })
        .await
        .unwrap();
    let b = fleet.spawn(takes_over).unwrap();
    let (leader, _) = fleet.wait_for_leader(WITHIN).await.unwrap();
    assert_eq!(leader, b);
    assert!(fleet.violations().is_empty(), "{:?}", fleet.violations());
    fleet.shutdown(WITHIN).await.unwrap();
}
