//! `kubernetes/events` across failovers, on the real control plane: the
//! test creates Events at a steady rate through the API while three agents
//! run one policy with a leader-gated events input. Judged from the agents'
//! files: across a SIGTERM handover every Event appears exactly once; across
//! a SIGKILL every Event appears at least once and every repeat carries the
//! same document id.

mod agents;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agents::access::create_ticks;
use agents::cluster::Cluster;
use agents::*;
use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use leasehold_testkit::ControlPlane;
use serde_json::Value;

/// Lets agents 1..=3 read Events in `ns`.
async fn grant_events(plane: &ControlPlane, ns: &str) -> Result<()> {
    let admin = plane.admin_client().await?;
    let role = Role {
        metadata: ObjectMeta {
            name: Some("events-reader".into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["events".into()]),
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &role)
        .await?;
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("events-reader".into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: "events-reader".into(),
        },
        subjects: Some(
            (1..=3)
                .map(|k| Subject {
                    kind: "User".into(),
                    name: ControlPlane::agent_user(k),
                    ..Default::default()
                })
                .collect(),
        ),
    };
    Api::<RoleBinding>::namespaced(admin, ns)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// Every shipped Event document, by Event name: (agent, id) per copy.
fn shipped(c: &Cluster<'_>) -> Result<BTreeMap<String, Vec<(String, String)>>> {
    let mut by: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for dir in &c.outs {
        let Ok(text) = std::fs::read_to_string(dir.join("events.ndjson")) else {
            continue;
        };
        for line in text.lines() {
            let v: Value = serde_json::from_str(line)?;
            if v["input"]["id"] != "events" {
                continue;
            }
            let name = v["kubernetes"]["event"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let agent = v["agent"]["name"].as_str().unwrap_or_default().to_string();
            let id = v["@metadata"]["_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            by.entry(name).or_default().push((agent, id));
        }
    }
    Ok(by)
}

/// Runs the scenario; `kill` picks SIGKILL instead of SIGTERM. Returns the
/// shipped copies per Event and how many Events were created.
async fn handover(
    prefix: &str,
    signal: i32,
) -> Result<(BTreeMap<String, Vec<(String, String)>>, usize)> {
    let plane = ControlPlane::shared();
    let mut c = Cluster::start(plane, prefix, 3, Some(policy("run-lease", "  - id: events\n    type: kubernetes/events\n    condition: ${kubernetes_leaderelection.leader} == true\n    namespaces: ['${env.POD_NAMESPACE}']\n"))).await?;
    grant_events(plane, c.ns.name()).await?;
    let api: Api<Event> = Api::namespaced(plane.admin_client().await?, c.ns.name());
    let stop = Arc::new(AtomicBool::new(false));
    let ticks = tokio::spawn(create_ticks(api, c.ns.name().to_string(), stop.clone()));
    let t0 = now_us();
    let leader = c.current_leader()?;
    // Let the leader ship for a while, then stop it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while shipped(&c)?.len() < 20 {
        if Instant::now() > deadline {
            bail!(
                "the leader shipped no events; its log:\n{}",
                c.agent(&leader).log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let i = Cluster::index(&leader);
    let mut a = c.agents[i].take().expect("leader running");
    a.signal(signal);
    a.wait_exit(Duration::from_secs(15))?;
    let next = c.leader_after(now_us(), &[&leader])?;
    // The successor ships for a while too.
    let before = shipped(&c)?.len();
    let deadline = Instant::now() + Duration::from_secs(20);
    while shipped(&c)?.len() < before + 20 {
        if Instant::now() > deadline {
            bail!(
                "{next} shipped no events after the handover; its log:\n{}",
                c.agent(&next).log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let created = ticks.await??;
    // The first leader ever starts from the state it finds (no history is
    // replayed): from the first Event it shipped on, everything created
    // reaches the files (bounded wait).
    let first = shipped(&c)?
        .keys()
        .filter_map(|k| k.strip_prefix("tick-")?.parse::<usize>().ok())
        .min()
        .unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let by = loop {
        let by = shipped(&c)?;
        if (first..created).all(|n| by.contains_key(&format!("tick-{n}"))) {
            break by;
        }
        if Instant::now() > deadline {
            let missing: Vec<usize> = (first..created)
                .filter(|n| !by.contains_key(&format!("tick-{n}")))
                .collect();
            let sample: Vec<&String> = by.keys().take(5).collect();
            bail!(
                "{} of the {created} events from tick-{first} on never shipped, e.g. {:?}; shipped e.g. {sample:?}",
                missing.len(),
                &missing[..missing.len().min(10)]
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    c.check(t0)?;
    Ok((by, created))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_handover_ships_every_event_exactly_once() -> Result<()> {
    let (by, created) = handover("run-events-term", libc::SIGTERM).await?;
    let twice: Vec<(&String, &Vec<(String, String)>)> =
        by.iter().filter(|(_, v)| v.len() > 1).collect();
    println!(
        "SIGTERM handover: {created} events created, {} shipped, {} more than once",
        by.len(),
        twice.len()
    );
    assert!(twice.is_empty(), "shipped twice: {twice:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_handover_ships_every_event_at_least_once_with_stable_ids() -> Result<()> {
    let (by, created) = handover("run-events-kill", libc::SIGKILL).await?;
    let mut repeats = 0;
    for (name, copies) in &by {
        let ids: std::collections::BTreeSet<&String> = copies.iter().map(|(_, id)| id).collect();
        assert_eq!(
            ids.len(),
            1,
            "{name}: copies with different ids: {copies:?}"
        );
        repeats += copies.len() - 1;
    }
    println!(
        "SIGKILL handover: {created} events created, {} shipped, {repeats} repeated copies (same id)",
        by.len()
    );
    Ok(())
}
