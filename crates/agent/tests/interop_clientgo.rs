//! leasehold and client-go candidates on one Lease of the real API server:
//! they never lead at once, and each takes over from the other, whether the
//! leader exits cleanly (SIGTERM, releasing) or dies (SIGKILL).

use std::path::PathBuf;
use std::time::Duration;

use leasehold_testkit::ControlPlane;
use leasehold_testkit::candidates::{Fleet, Kind, Spec};

/// Short timings keep ten rounds fast; the rules still hold
/// (3 s > 2 s > 1.2 × 0.5 s).
const TIMINGS: [&str; 3] = ["3s", "2s", "500ms"];
/// Longest a handover may take here: a killed leader's lease must expire
/// (3 s) and a client-go candidate may poll up to 2.2 retry periods later.
const TAKEOVER: Duration = Duration::from_secs(20);
const EXIT: Duration = Duration::from_secs(10);
const ROUNDS: usize = 10;

fn other(kind: Kind) -> Kind {
    match kind {
        Kind::Leasehold => Kind::ClientGo,
        Kind::ClientGo => Kind::Leasehold,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leasehold_and_client_go_take_over_from_each_other_and_never_lead_together()
-> anyhow::Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("interop").await?;
    let clientgo = leasehold_testkit::candidates::clientgo_candidate()?;
    let leasehold = PathBuf::from(env!("CARGO_BIN_EXE_leasehold"));

    let mut fleet = Fleet::new();
    let kinds = [
        Kind::Leasehold,
        Kind::ClientGo,
        Kind::Leasehold,
        Kind::ClientGo,
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        let k = i as u32 + 1;
        fleet.spawn(Spec {
            kind,
            program: if kind == Kind::Leasehold {
                leasehold.clone()
            } else {
                clientgo.clone()
            },
            lease: "interop".into(),
            namespace: ns.name().into(),
            identity: format!(
                "{}-{k}",
                if kind == Kind::Leasehold {
                    "leasehold"
                } else {
                    "clientgo"
                }
            ),
            kubeconfig: plane.agent_kubeconfig(k),
            timings: TIMINGS.map(String::from),
            extra: Vec::new(),
        })?;
    }

    let mut handovers = Vec::new();
    let (mut leader, _) = fleet.wait_for_leader(TAKEOVER).await?;
    for round in 0..ROUNDS {
        let from = fleet.spec(leader).kind;
        // Force a handover across implementations: with the leader's
        // same-kind peers stopped, only the other kind can take over.
        let peers: Vec<usize> = (0..fleet.len())
            .filter(|&i| i != leader && fleet.is_running(i) && fleet.spec(i).kind == from)
            .collect();
        for &p in &peers {
            fleet.terminate(p, EXIT).await?;
        }
        // Rounds alternate direction, so graceful and crash handovers each
        // happen in both directions: (A->B, B->A) graceful, then by crash.
        let graceful = round % 4 < 2;
        if graceful {
            fleet.terminate(leader, EXIT).await?;
        } else {
            fleet.kill(leader, EXIT).await?;
        }
        let old = leader;
        let (next, _) = fleet.wait_for_leader(TAKEOVER).await?;
        assert_eq!(
            fleet.spec(next).kind,
            other(from),
            "round {round}: {:#?}",
            fleet.history()
        );
        handovers.push((from, fleet.spec(next).kind, graceful));
        // Bring the stopped candidates back, as restarted pods would be.
        for p in peers.into_iter().chain([old]) {
            fleet.restart(p)?;
        }
        leader = next;
    }
    fleet.shutdown(EXIT).await?;

    assert!(
        fleet.violations().is_empty(),
        "two leaders at once: {:#?}",
        fleet.violations()
    );
    for (from, to) in [
        (Kind::Leasehold, Kind::ClientGo),
        (Kind::ClientGo, Kind::Leasehold),
    ] {
        for graceful in [true, false] {
            assert!(
                handovers.contains(&(from, to, graceful)),
                "no {} handover {from:?} -> {to:?} in {handovers:?}",
                if graceful { "graceful" } else { "crash" }
            );
        }
    }
    Ok(())
}
