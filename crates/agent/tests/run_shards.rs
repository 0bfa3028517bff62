//! A sharded election on the real control plane: four agents, one
//! election of eight shards, each shard running a gated `exec` input (its
//! shard number, every 50 ms) and a `kubernetes/events` input over four
//! namespaces split by namespace hash. One agent starts alone and leads
//! every shard; three more join and the shards spread two per agent. Then
//! each agent in turn is stopped (SIGKILL and SIGTERM alternating) and
//! started again. Judged from what the agents wrote: no two agents ever
//! wrote one shard's documents at once, each shard's documents resumed
//! within the bound its stop allows, every Event created reached a file
//! with one id (a repeat after a SIGKILL carries the same id), each from
//! the shard its namespace hashes to. And a change of the shard count in
//! a rolling update never runs the old and the new shards at once.

mod agents;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agents::access::{event, grant_reads};
use agents::cluster::Cluster;
use agents::*;
use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, PostParams};
use leasehold_testkit::{ControlPlane, TestNamespace};
use serde_json::Value;

const SHARDS: usize = 8;
const AGENTS: u32 = 4;

/// A test policy: election `NAME` of `shards` shards on Lease `NAME`, the
/// test timings, a file output, and `inputs` (policy text).
fn sharded_policy(name: &str, shards: usize, inputs: &str) -> String {
    format!(
        r#"providers:
  kubernetes_leaderelection:
    namespace: ${{env.POD_NAMESPACE}}
    identity: ${{env.POD_NAME}}
    leader_leaseduration: {LEASE_S}
    leader_renewdeadline: {RENEW_S}
    leader_retryperiod: {RETRY_S}
    elections:
      {name}: {{leader_lease: {name}, shards: {shards}}}
agent:
  shutdown_timeout: 10s
outputs:
  default: {{type: file, path: '${{env.OUT_DIR}}', filename: events, rotate_every_kb: 1048576}}
inputs:
{inputs}"#
    )
}

/// The gated `tick` input of election `work`: its shard number every 50 ms.
const TICK: &str = "  - id: tick\n    type: exec\n    condition: ${kubernetes_leaderelection.work.leader} == true\n    command: [sh, -c, 'while :; do echo ${kubernetes_leaderelection.work.shard}; sleep 0.05; done']\n";

/// The policy of the four-agent test: election `work` of eight shards,
/// each running `tick` and `events`, and a node-local `local` input.
fn shard_policy(event_namespaces: &[&str]) -> String {
    let namespaces: Vec<String> = event_namespaces.iter().map(|n| format!("'{n}'")).collect();
    let inputs = format!(
        "{TICK}  - id: events\n    type: kubernetes/events\n    condition: ${{kubernetes_leaderelection.work.leader}} == true\n    namespaces: [{}]\n    shard: ${{kubernetes_leaderelection.work.shard}}\n    shards: ${{kubernetes_leaderelection.work.shards}}\n  - id: local\n    type: exec\n    command: [sh, -c, 'while :; do echo local; sleep 0.05; done']\n",
        namespaces.join(", ")
    );
    sharded_policy("work", SHARDS, &inputs)
}

/// The shard a namespace's Events belong to: FNV-1a 64 of the name,
/// modulo the shard count (as documented).
fn shard_of(namespace: &str) -> usize {
    let h = namespace.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (h % SHARDS as u64) as usize
}

/// Waits until every shard is held by one of `agents`, each leading ⌊8/n⌋
/// or ⌈8/n⌉ of them, unchanged for a lease duration; returns the holders.
async fn wait_spread(api: &Api<Lease>, agents: &[String], within: Duration) -> Result<Vec<String>> {
    let deadline = Instant::now() + within;
    let (floor, ceil) = (SHARDS / agents.len(), SHARDS.div_ceil(agents.len()));
    let spread = |h: &[Option<String>]| -> Option<Vec<String>> {
        let h: Vec<String> = h.iter().cloned().collect::<Option<Vec<String>>>()?;
        let fine = h.iter().all(|x| agents.contains(x))
            && agents.iter().all(|a| {
                let n = h.iter().filter(|x| *x == a).count();
                (floor..=ceil).contains(&n)
            });
        fine.then_some(h)
    };
    let mut last = Vec::new();
    while Instant::now() < deadline {
        last = holders_of(api, SHARDS).await?;
        if let Some(h) = spread(&last) {
            tokio::time::sleep(Duration::from_secs(LEASE_S)).await;
            if holders_of(api, SHARDS)
                .await?
                .iter()
                .cloned()
                .collect::<Option<Vec<_>>>()
                == Some(h.clone())
            {
                return Ok(h);
            }
            continue;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("shards not spread over {agents:?} within {within:?}: holders {last:?}")
}

/// The agents' lines about moving shards and about who each of them saw
/// holding each shard (an agent hands over only while it sees every
/// shard held), for a failure message.
fn moves(c: &Cluster<'_>) -> String {
    let mut out = String::from("agents' hand-overs and views of the shards:");
    for a in c.agents.iter().flatten() {
        for line in a.log().lines().filter(|l| {
            [
                "handing",
                "came back",
                "candidate",
                "following",
                "leading election",
                "stepped down",
            ]
            .iter()
            .any(|w| l.contains(w))
        }) {
            out.push_str(&format!("\n  {}: {line}", a.name));
        }
    }
    out
}

/// The `tick` documents of each shard: (agent, time), and a check that
/// each carries its shard's number.
fn ticks(evs: &[Ev]) -> Result<Vec<Vec<(String, i64)>>> {
    let mut out = vec![Vec::new(); SHARDS];
    for e in evs {
        let Some(i) = e.input.strip_prefix("tick-shard-") else {
            continue;
        };
        let i: usize = i.parse().context("shard number")?;
        ensure!(
            e.message == i.to_string(),
            "shard {i} printed {:?}",
            e.message
        );
        out[i].push((e.agent.clone(), e.at));
    }
    for t in &mut out {
        t.sort_by_key(|(_, at)| *at);
    }
    Ok(out)
}

/// Every shipped Event by (namespace, name): the id of each copy, after
/// checking it came from the shard its namespace hashes to.
fn shipped_events(c: &Cluster<'_>) -> Result<BTreeMap<(String, String), Vec<String>>> {
    let mut by: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for dir in &c.outs {
        let Ok(text) = std::fs::read_to_string(dir.join("events.ndjson")) else {
            continue;
        };
        for line in complete_lines(&text) {
            let v: Value = serde_json::from_str(line)?;
            let Some(shard) = v["input"]["id"]
                .as_str()
                .and_then(|i| i.strip_prefix("events-shard-"))
            else {
                continue;
            };
            let meta = &v["kubernetes"]["event"]["metadata"];
            let ns = meta["namespace"].as_str().unwrap_or_default().to_string();
            let name = meta["name"].as_str().unwrap_or_default().to_string();
            ensure!(
                shard == shard_of(&ns).to_string(),
                "an Event of namespace {ns} (shard {}) shipped by shard {shard}",
                shard_of(&ns)
            );
            let id = v["@metadata"]["_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            by.entry((ns, name)).or_default().push(id);
        }
    }
    Ok(by)
}

/// Creates Events round-robin in `namespaces`, one every 40 ms, until
/// `stop` (at most 6,000); returns their (namespace, name).
async fn create_events(
    admin: kube::Client,
    namespaces: Vec<String>,
    stop: Arc<AtomicBool>,
) -> Result<Vec<(String, String)>> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let mut created = Vec::new();
    while !stop.load(Ordering::Relaxed) && created.len() < 6_000 {
        let ns = &namespaces[created.len() % namespaces.len()];
        let name = format!("tick-{}", created.len());
        let api: Api<Event> = Api::namespaced(admin.clone(), ns);
        let ev = event(
            ns,
            &name,
            "ticker",
            "Tick",
            &name,
            Time(jiff::Timestamp::now()),
        );
        api.create(&PostParams::default(), &ev).await?;
        created.push((ns.clone(), name));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    Ok(created)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_agents_share_eight_shards_and_hand_them_over_one_owner_at_a_time() -> Result<()> {
    let plane = ControlPlane::shared();
    // The Role the docs give for sharded elections: candidate Leases are
    // created, renewed, listed and deleted.
    let ns = plane
        .namespace_with_verbs(
            "run-shards",
            &["get", "list", "watch", "create", "update", "delete"],
        )
        .await?;
    let mut event_ns: Vec<TestNamespace> = Vec::new();
    for _ in 0..4 {
        let n = plane.namespace("run-shards-ev").await?;
        grant_reads(plane, n.name(), "events-reader", &["events"], &[1, 2, 3, 4]).await?;
        event_ns.push(n);
    }
    let names: Vec<&str> = event_ns.iter().map(TestNamespace::name).collect();
    let mut c = Cluster::start_in(plane, ns, 1, Some(shard_policy(&names))).await?;
    let admin = plane.admin_client().await?;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), c.ns.name());
    let bound = Duration::from_secs(LEASE_S + RENEW_S + 2 * RETRY_S) + MARGIN;

    // Alone, agent-1 leads every shard.
    wait_spread(
        &leases,
        &["agent-1".into()],
        bound + Duration::from_secs(LEASE_S),
    )
    .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let creating = tokio::spawn(create_events(
        admin.clone(),
        names.iter().map(|s| s.to_string()).collect(),
        stop.clone(),
    ));

    // Three more join: the shards spread, two each.
    for k in 2..=AGENTS {
        c.add(k)?;
    }
    for a in c.agents.iter_mut().flatten() {
        a.wait_ready()?;
    }
    let all: Vec<String> = (1..=AGENTS).map(|k| format!("agent-{k}")).collect();
    let settle = Duration::from_secs(20 * LEASE_S) + MARGIN;
    let t_join = now_us();
    let spread = wait_spread(&leases, &all, settle)
        .await
        .with_context(|| moves(&c))?;
    println!(
        "joined: spread in {} ms: {spread:?}",
        (now_us() - t_join) / 1000
    );
    // At steady state each shard's documents come from its holder alone.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let recent = now_us() - 700_000;
    let t = ticks(&c.events()?)?;
    for (i, docs) in t.iter().enumerate() {
        let writers: std::collections::BTreeSet<&String> = docs
            .iter()
            .filter(|(_, at)| *at > recent)
            .map(|(a, _)| a)
            .collect();
        ensure!(
            writers.len() == 1 && writers.contains(&spread[i]),
            "shard {i}: held by {} but written by {writers:?} in the last 0.7 s",
            spread[i]
        );
    }

    // Each agent in turn: stopped (SIGKILL, SIGTERM alternating), its shards
    // resume elsewhere, it starts again and gets its share back.
    for k in 1..=AGENTS {
        let name = format!("agent-{k}");
        let (sig, resume) = if k % 2 == 1 {
            // The Lease must expire first: up to a lease duration after the
            // last renewal, then a deferral of at most a retry period.
            (
                libc::SIGKILL,
                Duration::from_secs(2 * LEASE_S + RETRY_S) + MARGIN,
            )
        } else {
            (libc::SIGTERM, Duration::from_secs(LEASE_S) + MARGIN)
        };
        let led: Vec<usize> = holders_of(&leases, SHARDS)
            .await?
            .iter()
            .enumerate()
            .filter(|(_, h)| h.as_deref() == Some(name.as_str()))
            .map(|(i, _)| i)
            .collect();
        ensure!(!led.is_empty(), "{name} leads no shard before its stop");
        let i = k as usize - 1;
        let mut a = c.agents[i].take().context("agent running")?;
        a.signal(sig);
        a.wait_exit(Duration::from_secs(15))?;
        let others: Vec<String> = all.iter().filter(|a| **a != name).cloned().collect();
        wait_spread(&leases, &others, settle)
            .await
            .with_context(|| moves(&c))?;
        // Its shards' documents resumed from another agent within the bound.
        let t = ticks(&c.events()?)?;
        for s in &led {
            let last_own = t[*s]
                .iter()
                .filter(|(a, _)| *a == name)
                .map(|(_, at)| *at)
                .max()
                .context("the stopped agent's last document")?;
            let next = t[*s]
                .iter()
                .find(|(a, at)| *a != name && *at > last_own)
                .map(|(_, at)| *at)
                .with_context(|| format!("shard {s} never resumed after {name} stopped"))?;
            let gap = Duration::from_micros(u64::try_from(next - last_own).unwrap_or(0));
            println!(
                "{name} stopped ({sig}): shard {s} resumed after {} ms",
                gap.as_millis()
            );
            ensure!(
                gap <= resume,
                "shard {s} was silent {gap:?} after {name} stopped (bound {resume:?})"
            );
        }
        c.agents[i] = Some(c.spawn(k)?);
        wait_spread(&leases, &all, settle)
            .await
            .with_context(|| moves(&c))?;
    }

    stop.store(true, Ordering::Relaxed);
    let created = creating.await??;
    // Every Event created once the shards were led reaches a file (bounded
    // wait), each with one id however often it was shipped.
    let deadline = Instant::now() + Duration::from_secs(30);
    let by = loop {
        let by = shipped_events(&c)?;
        let missing: Vec<&(String, String)> =
            created.iter().filter(|k| !by.contains_key(*k)).collect();
        if missing.is_empty() {
            break by;
        }
        if Instant::now() > deadline {
            bail!(
                "{} of {} Events never shipped, e.g. {:?}",
                missing.len(),
                created.len(),
                &missing[..missing.len().min(5)]
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut repeats = 0;
    for (key, ids) in &by {
        let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
        ensure!(
            distinct.len() == 1,
            "{key:?}: copies with different ids: {ids:?}"
        );
        repeats += ids.len() - 1;
    }
    println!(
        "{} Events created, {} shipped, {repeats} repeated copies (same id, after the SIGKILLs)",
        created.len(),
        by.len()
    );
    // Safety over everything written: per shard, one agent at a time, terms
    // increasing.
    let evs = c.events()?;
    for s in 0..SHARDS {
        check_one_at_a_time(&evs, &format!("tick-shard-{s}"))?;
    }
    Ok(())
}

/// A policy of `shards` shards of election `work`, a gated `tick` input
/// only.
fn count_policy(shards: usize) -> String {
    sharded_policy("work", shards, TICK)
}

/// The holder of each Lease of election `work` with `count` shards, as
/// the API server has it.
async fn holders_of(api: &Api<Lease>, count: usize) -> Result<Vec<Option<String>>> {
    let mut out = Vec::new();
    for i in 0..count {
        let l = api.get_opt(&format!("work-{i}-of-{count}")).await?;
        out.push(
            l.and_then(|l| l.spec)
                .and_then(|s| s.holder_identity)
                .filter(|h| !h.is_empty()),
        );
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_shard_count_in_a_rolling_update_waits_for_the_old_shards_to_let_go() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane
        .namespace_with_verbs(
            "run-reshard",
            &["get", "list", "watch", "create", "update", "delete"],
        )
        .await?;
    let dir = tempfile::Builder::new()
        .prefix("leasehold-reshard-")
        .tempdir()?;
    let (old, new) = (dir.path().join("two.yml"), dir.path().join("four.yml"));
    std::fs::write(&old, count_policy(2))?;
    std::fs::write(&new, count_policy(4))?;
    let env = [("LEASEHOLD_FLEET", "reshard".to_string())];
    let out = |k: u32| dir.path().join(format!("out-{k}"));
    let start = |policy: &std::path::Path, k: u32| -> Result<AgentProc> {
        let mut a = AgentProc::spawn_with_env(
            policy,
            &plane.agent_kubeconfig(k),
            k,
            ns.name(),
            &out(k),
            &env,
        )?;
        a.wait_ready()?;
        Ok(a)
    };
    let leases: Api<Lease> = Api::namespaced(plane.admin_client().await?, ns.name());
    let bound = Duration::from_secs(LEASE_S + RENEW_S + 2 * RETRY_S) + MARGIN;
    let wait_held = |count: usize, by: Vec<&'static str>| {
        let leases = leases.clone();
        async move {
            let deadline = Instant::now() + bound + Duration::from_secs(10 * LEASE_S);
            loop {
                let h = holders_of(&leases, count).await?;
                if h.iter()
                    .all(|x| x.as_deref().is_some_and(|x| by.contains(&x)))
                {
                    return Ok::<_, anyhow::Error>(h);
                }
                if Instant::now() > deadline {
                    bail!("the {count} shards not all held by {by:?}: {h:?}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // Two agents on two shards.
    let mut a1 = start(&old, 1)?;
    let mut a2 = start(&old, 2)?;
    wait_held(2, vec!["agent-1", "agent-2"]).await?;
    // The rolling update reaches a third pod: on four shards it leads none
    // while the two-shard Leases are held, also as they move.
    let mut a3 = start(&new, 3)?;
    a1.stop_cleanly()?;
    wait_held(2, vec!["agent-2"]).await?;
    tokio::time::sleep(Duration::from_secs(2 * LEASE_S)).await;
    let early = holders_of(&leases, 4).await?;
    ensure!(
        early.iter().all(Option::is_none),
        "a four-shard Lease was taken while the two-shard ones were held: {early:?}"
    );
    // The last pod on two shards goes: the new count takes over.
    a2.stop_cleanly()?;
    wait_held(4, vec!["agent-3"]).await?;
    let dirs = [out(1), out(2), out(3)];
    let evs = all_events(
        &dirs
            .iter()
            .map(std::path::PathBuf::as_path)
            .collect::<Vec<_>>(),
    )?;
    let of = |suffix: &str| -> Vec<i64> {
        evs.iter()
            .filter(|e| {
                e.input.starts_with("tick-shard-")
                    && e.lease.as_deref().is_some_and(|l| l.ends_with(suffix))
            })
            .map(|e| e.at)
            .collect()
    };
    let (two, four) = (of("-of-2"), of("-of-4"));
    let last_two = two
        .iter()
        .max()
        .copied()
        .context("no documents of the two shards")?;
    let first_four = four
        .iter()
        .min()
        .copied()
        .context("no documents of the four shards")?;
    println!(
        "two shards' last document, then four shards' first: {} ms apart",
        (first_four - last_two) / 1000
    );
    ensure!(
        first_four > last_two,
        "the four-shard inputs wrote while the two-shard ones still did"
    );
    a3.stop_cleanly()?;
    Ok(())
}

/// Every `state_pod` document's pod (`namespace/name`) by shard, from the
/// agents' files; and who wrote each shard's documents (checked one at a
/// time by the caller).
fn pods_by_shard(
    c: &Cluster<'_>,
    shards: usize,
) -> Result<Vec<std::collections::BTreeSet<String>>> {
    let mut out = vec![std::collections::BTreeSet::new(); shards];
    for dir in &c.outs {
        let Ok(text) = std::fs::read_to_string(dir.join("events.ndjson")) else {
            continue;
        };
        for line in complete_lines(&text) {
            let v: Value = serde_json::from_str(line)?;
            let Some(i) = v["input"]["id"]
                .as_str()
                .and_then(|i| i.strip_prefix("state-shard-"))
            else {
                continue;
            };
            let i: usize = i.parse()?;
            let k = &v["kubernetes"];
            if let (Some(ns), Some(pod)) = (k["namespace"].as_str(), k["pod"]["name"].as_str()) {
                out[i].insert(format!("{ns}/{pod}"));
            }
        }
    }
    Ok(out)
}

/// A simulated cluster (500 Nodes, 5,000 Pods made through the API) on a
/// control plane of this test's own, kube-state-metrics run as four shards
/// (`--shard`/`--total-shards`, shard I on 127.0.I.1), three agents with a
/// `state_pod` input on a four-shard election pointing shard I at
/// 127.0.I.1: every Pod is reported, each by exactly one shard, and each
/// shard's documents come from one agent at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_state_metrics_over_a_simulated_cluster_report_every_pod_once() -> Result<()> {
    const KSM_SHARDS: usize = 4;
    let plane = ControlPlane::dedicated()?;
    let admin = plane.admin_client().await?;
    let sim = leasehold_testkit::simulated::populate(&admin, "sim", 500, 5, 5_000).await?;
    println!(
        "simulated cluster: {} Nodes and {} Pods made in {:.1} s",
        sim.nodes.len(),
        sim.pods.len(),
        sim.took.as_secs_f64()
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut ksm = Vec::new();
    for i in 0..KSM_SHARDS {
        let addr = std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(127, 0, i as u8, 1), port);
        ksm.push(leasehold_testkit::KubeStateMetrics::start_shard(
            &plane,
            i as u32,
            KSM_SHARDS as u32,
            addr,
        )?);
    }
    let ns = plane
        .namespace_with_verbs(
            "run-ksm-shards",
            &["get", "list", "watch", "create", "update", "delete"],
        )
        .await?;
    let policy = sharded_policy(
        "ksm",
        KSM_SHARDS,
        &format!(
            "  - id: state\n    type: kubernetes/metrics\n    condition: ${{kubernetes_leaderelection.ksm.leader}} == true\n    streams:\n      - metricsets: [state_pod]\n        period: 3s\n        hosts: ['127.0.${{kubernetes_leaderelection.ksm.shard}}.1:{port}']\n"
        ),
    );
    let c = Cluster::start_in(&plane, ns, 3, Some(policy)).await?;
    let want: std::collections::BTreeSet<String> = sim.pods.iter().cloned().collect();
    let deadline = Instant::now() + Duration::from_secs(20 * LEASE_S) + MARGIN;
    let by_shard = loop {
        let by_shard = pods_by_shard(&c, KSM_SHARDS)?;
        let seen: std::collections::BTreeSet<&String> = by_shard.iter().flatten().collect();
        if want.iter().all(|p| seen.contains(p)) {
            break by_shard;
        }
        if Instant::now() > deadline {
            let sizes: Vec<usize> = by_shard.iter().map(|s| s.len()).collect();
            bail!(
                "{} of {} Pods never reported (per shard: {sizes:?})",
                want.iter().filter(|p| !seen.contains(p)).count(),
                want.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let sizes: Vec<usize> = by_shard
        .iter()
        .map(|s| s.iter().filter(|p| want.contains(*p)).count())
        .collect();
    println!("Pods per shard: {sizes:?}");
    ensure!(
        sizes.iter().sum::<usize>() == want.len(),
        "a Pod reported by two shards (per shard {sizes:?}, {} Pods)",
        want.len()
    );
    ensure!(
        sizes.iter().all(|n| *n > 0),
        "a shard reported no Pod: {sizes:?}"
    );
    let evs = c.events()?;
    for i in 0..KSM_SHARDS {
        check_one_at_a_time(&evs, &format!("state-shard-{i}"))?;
    }
    Ok(())
}
