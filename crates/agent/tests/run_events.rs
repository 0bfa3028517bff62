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

use agents::access::{create_ticks, event, grant_events};
use agents::cluster::Cluster;
use agents::*;
use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ObjectMeta, PostParams};
use leasehold_testkit::ControlPlane;
use serde_json::Value;

/// Every shipped Event document, by Event name: (agent, id) per copy.
fn shipped(c: &Cluster<'_>) -> Result<BTreeMap<String, Vec<(String, String)>>> {
    let mut by: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for dir in &c.outs {
        let Ok(text) = std::fs::read_to_string(dir.join("events.ndjson")) else {
            continue;
        };
        for line in complete_lines(&text) {
            let v: Value = serde_json::from_str(line)?;
            if v["input"]["id"] != "events" {
                continue;
            }
            // Either input type routes Events to Elastic's dataset.
            let ds = &v["data_stream"];
            anyhow::ensure!(
                ds["dataset"] == "kubernetes.event"
                    && (ds["type"] == "metrics" || v["input"]["type"] == "kubernetes/events"),
                "routed elsewhere: {v}"
            );
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

/// The leader-gated `kubernetes/events` input of these tests.
const EVENTS_INPUT: &str = "  - id: events\n    type: kubernetes/events\n    condition: ${kubernetes_leaderelection.leader} == true\n    namespaces: ['${env.POD_NAMESPACE}']\n";

/// Runs the scenario; `kill` picks SIGKILL instead of SIGTERM. Returns the
/// shipped copies per Event and how many Events were created.
async fn handover(
    prefix: &str,
    signal: i32,
) -> Result<(BTreeMap<String, Vec<(String, String)>>, usize)> {
    handover_of(prefix, signal, EVENTS_INPUT).await
}

/// As [`handover`] with the input given as policy text (id `events`).
async fn handover_of(
    prefix: &str,
    signal: i32,
    input: &str,
) -> Result<(BTreeMap<String, Vec<(String, String)>>, usize)> {
    let plane = ControlPlane::shared();
    let mut c = Cluster::start(plane, prefix, 3, Some(policy("run-lease", input))).await?;
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

/// Elastic's manifest runs Events as the `event` metricset of its
/// leader-gated `kubernetes/metrics` input: the same watch, checkpoint and
/// ids, into the `metrics-kubernetes.event-*` data stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_metricset_hands_over_as_kubernetes_events_does() -> Result<()> {
    let input = "  - id: events\n    type: kubernetes/metrics\n    condition: ${kubernetes_leaderelection.leader} == true\n    streams:\n      - data_stream: {dataset: kubernetes.event, type: metrics}\n        metricsets: [event]\n        period: 10s\n        namespace: ${env.POD_NAMESPACE}\n";
    let (by, created) = handover_of("run-events-ms", libc::SIGTERM, input).await?;
    let twice: Vec<(&String, &Vec<(String, String)>)> =
        by.iter().filter(|(_, v)| v.len() > 1).collect();
    println!(
        "event metricset, SIGTERM handover: {created} events created, {} shipped, {} more than once",
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

/// A checkpoint too old to watch from (the API server answers 410 after an
/// etcd compaction): the new leader lists the Events and ships exactly those
/// newer than the checkpoint's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_too_old_to_watch_from_ships_what_is_newer_by_time() -> Result<()> {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use leasehold_testkit::Component;
    let plane = ControlPlane::dedicated()?;
    let ns = plane.namespace("events-gone").await?;
    grant_events(&plane, ns.name()).await?;
    let admin = plane.admin_client().await?;
    let api: Api<Event> = Api::namespaced(admin.clone(), ns.name());
    let now = jiff::Timestamp::now();
    let at = |secs_ago: i64| Time(now - jiff::SignedDuration::from_secs(secs_ago));
    let mut old_rv = String::new();
    for (n, secs_ago) in [(0, 120), (1, 110), (2, 100), (3, 20), (4, 10)] {
        let ev = event(
            ns.name(),
            &format!("gone-{n}"),
            "p",
            "Gone",
            &n.to_string(),
            at(secs_ago),
        );
        let created = api.create(&PostParams::default(), &ev).await?;
        if n == 2 {
            old_rv = created.metadata.resource_version.unwrap_or_default();
        }
    }
    // The checkpoint says: shipped up to gone-2 (60 s ago as its time).
    let checkpoint = format!(
        "{old_rv}|{}",
        (now - jiff::SignedDuration::from_secs(60)).as_microsecond()
    );
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("run-lease".into()),
            annotations: Some(
                [(
                    format!(
                        "{}events.{}",
                        leasehold_election::ANNOTATION_PREFIX,
                        ns.name()
                    ),
                    checkpoint,
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            ..Default::default()
        }),
    };
    Api::<Lease>::namespaced(admin, ns.name())
        .create(&PostParams::default(), &lease)
        .await?;
    // Compact etcd past that resourceVersion and restart the API server so
    // its watch cache cannot serve it either: a watch from it gets 410.
    plane.kill(Component::ApiServer)?;
    let revision = plane.etcd_revision()?;
    plane.etcd_compact(revision)?;
    plane.start_again(Component::ApiServer)?;
    let dir = tempfile::tempdir()?;
    let policy_path = dir.path().join("p.yml");
    std::fs::write(
        &policy_path,
        policy(
            "run-lease",
            "  - id: events\n    type: kubernetes/events\n    condition: ${kubernetes_leaderelection.leader} == true\n    namespaces: ['${env.POD_NAMESPACE}']\n",
        ),
    )?;
    let out = dir.path().join("out-1");
    let agent = AgentProc::start(&policy_path, &plane.agent_kubeconfig(1), 1, ns.name(), &out)?;
    agent.wait_log("too old to resume (410)", Duration::from_secs(30))?;
    let deadline = Instant::now() + Duration::from_secs(15);
    let names = loop {
        let text = std::fs::read_to_string(out.join("events.ndjson")).unwrap_or_default();
        let names: Vec<String> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["input"]["id"] == "events")
            .filter_map(|v| {
                v["kubernetes"]["event"]["metadata"]["name"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect();
        if names.len() >= 2 || Instant::now() > deadline {
            break names;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        names,
        ["gone-3", "gone-4"],
        "shipped after the 410: {names:?}"
    );
    Ok(())
}
