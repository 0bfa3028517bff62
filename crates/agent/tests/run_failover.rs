//! `leasehold run` on the real control plane: three agents with one policy
//! (a leader-gated and a node-local `exec` input, each agent writing to its
//! own `file` output). Every test judges the agents from the files alone:
//! the gated events come from one agent at a time (per-agent, per-term
//! time ranges never overlap, the departing leader included), `leader.term`
//! increases at each handover, node-local events come from every agent
//! throughout, and after each disruption the agent that lost the lease
//! leads again later (it stayed a candidate).

mod agents;

use std::time::Duration;

use agents::cluster::*;
use agents::*;
use anyhow::{Context, Result, bail};
use leasehold_testkit::{Component, ControlPlane, LeaseAdmin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_leader() -> Result<()> {
    let plane = ControlPlane::shared();
    let mut c = Cluster::start(plane, "run-kill", 3, None).await?;
    let t0 = now_us();
    let leader = c.current_leader()?;
    let i = Cluster::index(&leader);
    let mut a = c.agents[i].take().unwrap();
    let killed_at = now_us();
    a.signal(libc::SIGKILL);
    a.wait_exit(Duration::from_secs(5))?;
    let evs = c.events()?;
    let rs = check_one_at_a_time(&evs, "gated")?;
    let term = term_of(&rs, &leader)?;
    // A SIGKILLed agent's gated command dies with it (parent-death signal).
    let last = last_gated_of(&evs, &leader, term).unwrap_or(0);
    assert!(
        last <= killed_at + 250_000,
        "gated events after the kill: {} ms",
        (last - killed_at) / 1000
    );
    let (next, _) = wait_gated_from(
        &c.dirs(),
        &[&leader],
        killed_at,
        Duration::from_secs(LEASE_S + RETRY_S) + MARGIN,
    )?;
    let rs = c.check(t0)?;
    assert!(term_of(&rs, &next)? > term);
    c.agents[i] = Some(c.spawn(i as u32 + 1)?);
    c.lead_again(&leader)?;
    c.check(t0)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_leader_hands_over_within_a_second() -> Result<()> {
    let plane = ControlPlane::shared();
    let mut c = Cluster::start(plane, "run-term", 3, None).await?;
    let t0 = now_us();
    let leader = c.current_leader()?;
    let i = Cluster::index(&leader);
    let mut a = c.agents[i].take().unwrap();
    let signalled = now_us();
    a.stop_cleanly()?;
    let evs = c.events()?;
    let term = term_of(&check_one_at_a_time(&evs, "gated")?, &leader)?;
    let last_old = last_gated_of(&evs, &leader, term).unwrap_or(signalled);
    let (next, first_new) = wait_gated_from(
        &c.dirs(),
        &[&leader],
        signalled,
        Duration::from_secs(LEASE_S) + MARGIN,
    )?;
    let gap_ms = (first_new - last_old) / 1000;
    println!("SIGTERM handover: last event of {leader} to first of {next}: {gap_ms} ms");
    // The lease is released: the successor does not wait for it to expire.
    assert!(
        first_new - signalled < 1_000_000 + MARGIN.as_micros() as i64 / 3,
        "gated events resumed {} ms after SIGTERM",
        (first_new - signalled) / 1000
    );
    c.check(t0)?;
    c.agents[i] = Some(c.spawn(i as u32 + 1)?);
    c.lead_again(&leader)?;
    c.check(t0)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwritten_holder_stops_the_old_leader_at_once() -> Result<()> {
    let plane = ControlPlane::shared();
    let mut c = Cluster::start(plane, "run-overwrite", 3, None).await?;
    let t0 = now_us();
    let leader = c.current_leader()?;
    let before = now_us();
    c.lease.overwrite_holder("intruder").await?;
    let after = now_us();
    let (next, _) = wait_gated_from(
        &c.dirs(),
        &[],
        after + 300_000,
        Duration::from_secs(2 * LEASE_S + RETRY_S) + MARGIN,
    )?;
    let last = last_gated_before(&c.events()?, &leader, before)?;
    let stop_ms = (last - after) as f64 / 1000.0;
    println!(
        "overwrite: old leader's last gated event {stop_ms:.1} ms after the overwrite returned; next leader {next}"
    );
    assert!(
        last <= after + 100_000 + 150_000,
        "old leader wrote gated events {stop_ms:.1} ms after the overwrite"
    );
    c.check(t0)?;
    c.lead_again(&leader)?;
    c.check(t0)?;
    Ok(())
}

/// The bug report's edit: an admin names another agent. The old leader
/// stops its gated input, records on the Lease that it did, and the named
/// agent's gated events follow at once instead of a lease duration later,
/// never overlapping the old leader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overwrite_naming_another_agent_hands_over_at_once() -> Result<()> {
    let plane = ControlPlane::shared();
    let mut c = Cluster::start(plane, "run-named", 3, None).await?;
    let t0 = now_us();
    let leader = c.current_leader()?;
    let named = format!("agent-{}", (Cluster::index(&leader) + 1) % 3 + 1);
    let before = now_us();
    c.lease.overwrite_holder(&named).await?;
    let (next, first_new) = wait_gated_from(
        &c.dirs(),
        &[&leader],
        before,
        Duration::from_secs(LEASE_S + RETRY_S) + MARGIN,
    )?;
    let last_old = last_gated_before(&c.events()?, &leader, before)?;
    println!(
        "overwrite to {named}: old leader's last gated event {:.1} ms, {next}'s first {:.1} ms after the overwrite",
        (last_old - before) as f64 / 1000.0,
        (first_new - before) as f64 / 1000.0
    );
    assert_eq!(next, named, "the agent the admin named leads");
    // Waiting out the record would put the first event a lease duration
    // after the overwrite.
    assert!(
        first_new - before < Duration::from_secs(LEASE_S).as_micros() as i64,
        "{next}'s gated events resumed {} ms after the overwrite",
        (first_new - before) / 1000
    );
    assert!(
        first_new > last_old,
        "the new term's events follow the old's"
    );
    c.check(t0)?;
    c.lead_again(&leader)?;
    c.check(t0)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_rolebinding_steps_the_leader_down_and_restored_it_leads_again() -> Result<()> {
    let plane = ControlPlane::shared();
    let mut c = Cluster::start(plane, "run-rbac", 3, None).await?;
    let t0 = now_us();
    let leader = c.current_leader()?;
    let k = Cluster::index(&leader) as u32 + 1;
    let revoked = now_us();
    c.ns.revoke(k).await?;
    let (next, _) = wait_gated_from(
        &c.dirs(),
        &[&leader],
        revoked,
        Duration::from_secs(LEASE_S + RENEW_S + RETRY_S) + MARGIN,
    )?;
    let last = last_gated_before(&c.events()?, &leader, revoked)?;
    // It stops at the renew deadline at the latest.
    assert!(
        last <= revoked + (RENEW_S * 1_000_000) as i64 + MARGIN.as_micros() as i64 / 3,
        "old leader kept writing {} ms",
        (last - revoked) / 1000
    );
    println!(
        "RoleBinding deleted: {leader} stopped after {} ms, {next} took over",
        (last - revoked) / 1000
    );
    c.ns.grant(k).await?;
    c.lead_again(&leader)?;
    c.check(t0)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_api_server_stops_gated_work_and_a_leader_returns_after_resume() -> Result<()> {
    let plane = ControlPlane::dedicated()?;
    let mut c = Cluster::start(&plane, "run-pause", 3, None).await?;
    let t0 = now_us();
    let leader = c.current_leader()?;
    let paused = now_us();
    plane.pause(Component::ApiServer)?;
    // Hold the pause past the renew deadline and the lease duration.
    std::thread::sleep(Duration::from_secs(LEASE_S + 1));
    let evs = c.events()?;
    let rs = check_one_at_a_time(&evs, "gated")?;
    let term = term_of(&rs, &leader)?;
    let last = last_gated_of(&evs, &leader, term).context("leader's events")?;
    plane.resume(Component::ApiServer)?;
    let resumed = now_us();
    assert!(
        last <= paused + (RENEW_S * 1_000_000) as i64 + 500_000,
        "leader kept writing {} ms into the pause",
        (last - paused) / 1000
    );
    assert!(
        !evs.iter()
            .any(|e| e.input == "gated" && e.at > last && e.at < resumed),
        "gated events while nobody could renew"
    );
    let (next, at) = wait_gated_from(
        &c.dirs(),
        &[],
        resumed,
        Duration::from_secs(LEASE_S + RETRY_S) + MARGIN,
    )?;
    println!(
        "API server paused: {leader} stopped {} ms after the pause; {next} leads {} ms after resume",
        (last - paused) / 1000,
        (at - resumed) / 1000
    );
    c.check(t0)?;
    c.lead_again(&leader)?;
    c.check(t0)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_named_elections_are_led_by_two_agents() -> Result<()> {
    let plane = ControlPlane::shared();
    let text = format!(
        r#"providers:
  kubernetes_leaderelection:
    namespace: ${{env.POD_NAMESPACE}}
    identity: ${{env.POD_NAME}}
    leader_leaseduration: {LEASE_S}
    leader_renewdeadline: {RENEW_S}
    leader_retryperiod: {RETRY_S}
    elections:
      state_metrics:
        leader_lease: lease-a
      events:
        leader_lease: lease-b
outputs:
  default: {{type: file, path: '${{env.OUT_DIR}}', filename: events}}
inputs:
  - id: gated
    type: exec
    condition: ${{kubernetes_leaderelection.state_metrics.leader}} == true
    command: [sh, -c, 'while :; do echo a; sleep 0.05; done']
  - id: gated-b
    type: exec
    condition: ${{kubernetes_leaderelection.events.leader}} == true
    command: [sh, -c, 'while :; do echo b; sleep 0.05; done']
  - id: local
    type: exec
    command: [sh, -c, 'while :; do echo local; sleep 0.05; done']
"#
    );
    let c = Cluster::start(plane, "run-two", 3, Some(text)).await?;
    let admin = plane.admin_client().await?;
    let a = LeaseAdmin::new(admin.clone(), c.ns.name(), "lease-a");
    let b = LeaseAdmin::new(admin, c.ns.name(), "lease-b");
    let holder = |l: Option<k8s_openapi::api::coordination::v1::Lease>| {
        l.and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    };
    // Settled: both held, and still by the same agents a lease duration later.
    let deadline = std::time::Instant::now() + Duration::from_secs(2 * LEASE_S) + MARGIN;
    let (ha, hb) = loop {
        let (ha, hb) = (holder(a.get().await?), holder(b.get().await?));
        if let (Some(x), Some(y)) = (&ha, &hb) {
            tokio::time::sleep(Duration::from_secs(LEASE_S)).await;
            let (ha2, hb2) = (holder(a.get().await?), holder(b.get().await?));
            if ha2 == ha && hb2 == hb {
                break (x.clone(), y.clone());
            }
        }
        if std::time::Instant::now() > deadline {
            bail!("leases not settled: a={ha:?} b={hb:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_ne!(ha, hb, "one agent leads both elections");
    let evs = c.events()?;
    check_one_at_a_time(&evs, "gated")?;
    check_one_at_a_time(&evs, "gated-b")?;
    assert!(
        evs.iter()
            .any(|e| e.input == "gated" && e.agent == ha && e.lease.as_deref() == Some("lease-a"))
    );
    assert!(
        evs.iter().any(|e| e.input == "gated-b"
            && e.agent == hb
            && e.lease.as_deref() == Some("lease-b"))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ships_every_printed_line_releases_the_lease_and_exits_0() -> Result<()> {
    let plane = ControlPlane::shared();
    let text = policy("run-lease", "")
        .replace(
            "command: [sh, -c, 'while :; do echo gated; sleep 0.05; done']",
            "command: [sh, -c, 'i=0; while :; do i=$((i+1)); echo $i; echo $i >> \"$SIDE\"; sleep 0.01; done']\n    env: {SIDE: '${env.OUT_DIR}.gated'}",
        )
        .replace(
            "command: [sh, -c, 'while :; do echo local; sleep 0.05; done']",
            "command: [sh, -c, 'i=0; while :; do i=$((i+1)); echo $i; echo $i >> \"$SIDE\"; sleep 0.01; done']\n    env: {SIDE: '${env.OUT_DIR}.local'}",
        );
    let mut c = Cluster::start(plane, "run-flush", 1, Some(text)).await?;
    c.current_leader()?;
    let mut a = c.agents[0].take().unwrap();
    a.stop_cleanly()?;
    let evs = c.events()?;
    for input in ["gated", "local"] {
        let side = std::fs::read_to_string(format!("{}.{input}", c.outs[0].display()))?;
        let printed: Vec<&str> = side.lines().collect();
        let written: std::collections::HashSet<&str> = evs
            .iter()
            .filter(|e| e.input == input)
            .map(|e| e.message.as_str())
            .collect();
        let last = printed.last().context("nothing printed")?;
        assert!(
            written.contains(last),
            "{input}: last printed line {last} not in the output ({} lines printed)",
            printed.len()
        );
        let missing = printed.iter().filter(|l| !written.contains(*l)).count();
        assert_eq!(missing, 0, "{input}: {missing} printed lines missing");
    }
    let lease = c.lease.get().await?.context("lease")?;
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.is_empty(),
        "lease still held by {holder:?} after SIGTERM"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_on_a_leader_and_a_follower() -> Result<()> {
    let plane = ControlPlane::shared();
    let c = Cluster::start(plane, "run-status", 2, None).await?;
    let leader = c.current_leader()?;
    let follower = if leader == "agent-1" {
        "agent-2"
    } else {
        "agent-1"
    };
    let (l, f) = (c.agent(&leader), c.agent(follower));
    // The follower learns the holder from its watch; wait for it (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(RETRY_S) + MARGIN;
    let fs = loop {
        let s = f.status()?;
        if s["elections"][0]["holder"] == leader.as_str() || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let ls = l.status()?;
    assert_eq!(ls["identity"], leader.as_str());
    assert_eq!(ls["elections"][0]["name"], "default");
    assert_eq!(ls["elections"][0]["lease"], "run-lease");
    assert_eq!(ls["elections"][0]["namespace"], c.ns.name());
    assert_eq!(ls["elections"][0]["state"], "leading", "{ls:#}");
    assert_eq!(ls["elections"][0]["holder"], leader.as_str());
    assert!(ls["elections"][0]["term"].as_u64().is_some(), "{ls:#}");
    let running = |s: &serde_json::Value| -> Vec<String> {
        s["inputs"]["running"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["id"].as_str().map(str::to_string))
            .collect()
    };
    let mut lr = running(&ls);
    lr.sort();
    assert_eq!(lr, ["gated", "local"]);
    assert_eq!(fs["elections"][0]["state"], "following", "{fs:#}");
    assert_eq!(fs["elections"][0]["holder"], leader.as_str(), "{fs:#}");
    assert_eq!(running(&fs), ["local"]);
    assert!(
        fs["inputs"]["dropped"]
            .as_array()
            .is_some_and(|d| d.iter().any(|x| x["id"] == "gated")),
        "{fs:#}"
    );
    assert!(ls["policy"]["loaded_at"].is_string() && ls["policy"]["last_error"].is_null());
    let body = serde_json::to_string(&ls)?;
    assert!(
        !body.contains("token") && !body.contains("BEGIN"),
        "secrets in /status: {body}"
    );
    let (code, lm) = l.get("/metrics")?;
    assert_eq!(code, 200);
    let (_, fm) = f.get("/metrics")?;
    assert!(
        lm.contains("leader_election_master_status{name=\"run-lease\"} 1"),
        "{lm}"
    );
    assert!(
        fm.contains("leader_election_master_status{name=\"run-lease\"} 0"),
        "{fm}"
    );
    assert!(lm.contains("leasehold_inputs_running 2"), "{lm}");
    assert!(fm.contains("leasehold_inputs_running 1"), "{fm}");
    assert!(
        lm.contains("leasehold_events_produced_total{input=\"gated\"}"),
        "{lm}"
    );
    assert!(
        lm.contains("leasehold_output_events_written_total{output=\"default\"}"),
        "{lm}"
    );
    for a in [l, f] {
        assert_eq!(a.get("/livez")?.0, 200);
        assert_eq!(a.get("/readyz")?.0, 200);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_input_failing_on_the_leader_hands_the_lease_over() -> Result<()> {
    let plane = ControlPlane::shared();
    let text = policy("run-lease", "")
        .replace(
            "    leader_retryperiod: 1\n",
            "    leader_retryperiod: 1\n    handover_after_failures: 2\n",
        )
        .replace(
            "command: [sh, -c, 'while :; do echo gated; sleep 0.05; done']",
            "command: [sh, -c, 'if [ \"$POD_NAME\" = agent-1 ]; then echo broken; echo ${kubernetes_leaderelection.term} >> ${env.OUT_DIR}-runs; exit 1; fi; while :; do echo gated; sleep 0.05; done']",
        );
    let mut c = Cluster::start(plane, "run-handover", 3, Some(text)).await?;
    let t0 = now_us();
    // The time of agent-1's first event as leader: the agents stopped on
    // the way wrote their last events before it.
    let led = c.lead_again("agent-1")?;
    // Two failures (the second after the 1 s backoff), then the handover.
    let (next, took_over) = wait_gated_from(
        &c.dirs(),
        &["agent-1"],
        led,
        Duration::from_secs(2 + RETRY_S) + MARGIN,
    )?;
    // It holds back (2 × lease duration): it does not take the lease again
    // although it stays a candidate.
    tokio::time::sleep(Duration::from_secs(LEASE_S)).await;
    let holder = c
        .lease
        .get()
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some(next.as_str()));
    let evs = c.events()?;
    let term = ranges(&evs, "gated")?
        .into_iter()
        .rfind(|r| r.agent == "agent-1" && r.first < took_over)
        .context("agent-1 never led")?;
    // Each failing run marks its term in a file beside agent-1's output:
    // the runs are counted from what the work did, and there are exactly
    // `handover_after_failures` of them in the term.
    let runs_file = format!("{}-runs", c.dirs()[0].display());
    let marks = std::fs::read_to_string(&runs_file).with_context(|| runs_file.clone())?;
    let runs = marks
        .lines()
        .filter(|l| l.trim() == term.term.to_string())
        .count();
    assert_eq!(
        runs, 2,
        "agent-1's failing runs in term {}: {marks:?}",
        term.term
    );
    // The sink has the first run's line; the second's may be refused as its
    // term ended at the handover (concepts.md, "Terms end in the outputs
    // too"), never more than one line per run.
    assert!(
        (1..=2).contains(&term.count),
        "agent-1's lines in its term: {term:?}"
    );
    assert!(term.last < took_over, "{term:?} vs handover at {took_over}");
    println!(
        "handover after 2 failures: {} ms from the first failure to {next}'s first event",
        (took_over - term.first) / 1000
    );
    c.check(t0)?;
    Ok(())
}

/// One term's gated events on one Lease.
#[derive(Debug)]
struct LeaseRange {
    agent: String,
    lease: String,
    first: i64,
    last: i64,
}

/// The gated events' time ranges per (agent, Lease, term), checked so
/// that no two overlap (the same agent's on two Leases included).
fn check_across_leases(evs: &[Ev]) -> Result<Vec<LeaseRange>> {
    use std::collections::BTreeMap;
    let mut by: BTreeMap<(String, String, i64), (i64, i64)> = BTreeMap::new();
    for e in evs.iter().filter(|e| e.input == "gated") {
        let key = (
            e.agent.clone(),
            e.lease
                .clone()
                .context("gated event without leader.lease")?,
            e.term.context("gated event without leader.term")?,
        );
        let r = by.entry(key).or_insert((e.at, e.at));
        r.0 = r.0.min(e.at);
        r.1 = r.1.max(e.at);
    }
    let mut rs: Vec<LeaseRange> = by
        .into_iter()
        .map(|((agent, lease, _), (first, last))| LeaseRange {
            agent,
            lease,
            first,
            last,
        })
        .collect();
    rs.sort_by_key(|r| r.first);
    for (i, a) in rs.iter().enumerate() {
        for b in &rs[i + 1..] {
            if b.first <= a.last {
                bail!("two terms produced gated events at once: {a:?} and {b:?}\nall: {rs:#?}");
            }
        }
    }
    Ok(rs)
}

/// How the new policy reaches each agent.
#[derive(Clone, Copy, Debug)]
enum Rollout {
    /// The pod is replaced (a DaemonSet's rolling update).
    Restart,
    /// The mounted policy changes under the running agent (a ConfigMap
    /// update), swapped in by a rename as the kubelet does.
    Reload,
}

/// A DaemonSet's rolling update that renames `leader_lease`, one pod at a
/// time, the leader last, with the new Lease already created empty (as the
/// chart and the kustomize base ship it, so it may be taken at once): the
/// agents on the new name keep out while the old Lease is held, so the
/// gated input never runs twice; the cost is the gap between the old
/// leader's last event and the first on the new Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renamed_in_a_rolling_update_never_runs_a_gated_input_twice() -> Result<()> {
    rename(Rollout::Restart, "run-rename").await
}

/// As above, with the new policy reaching the running agents one at a
/// time (a ConfigMap update): the reloaded leader releases the old Lease,
/// which an agent still on the old name takes, until the last one reloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renamed_by_a_configmap_update_never_runs_a_gated_input_twice() -> Result<()> {
    rename(Rollout::Reload, "run-rename-reload").await
}

async fn rename(rollout: Rollout, prefix: &str) -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace(prefix).await?;
    let fleet = ns.name().to_string();
    let dir = tempfile::tempdir()?;
    let policies: Vec<_> = (1..=3)
        .map(|k| dir.path().join(format!("policy-{k}.yml")))
        .collect();
    for p in &policies {
        std::fs::write(p, policy("lease-old", ""))?;
    }
    LeaseAdmin::new(plane.admin_client().await?, ns.name(), "lease-new")
        .create_empty()
        .await?;
    let outs: Vec<_> = (1..=3)
        .map(|k| dir.path().join(format!("out-{k}")))
        .collect();
    let dirs: Vec<&std::path::Path> = outs.iter().map(|p| p.as_path()).collect();
    let env = [("LEASEHOLD_FLEET", fleet.clone())];
    let start = |i: usize| -> Result<AgentProc> {
        let k = i as u32 + 1;
        let mut a = AgentProc::spawn_with_env(
            &policies[i],
            &plane.agent_kubeconfig(k),
            k,
            ns.name(),
            &outs[i],
            &env,
        )?;
        a.wait_ready()?;
        Ok(a)
    };
    let renamed = |i: usize| -> Result<()> {
        let tmp = dir.path().join("policy.tmp");
        std::fs::write(&tmp, policy("lease-new", ""))?;
        std::fs::rename(&tmp, &policies[i])?;
        Ok(())
    };
    let mut agents: Vec<Option<AgentProc>> = Vec::new();
    for i in 0..3 {
        agents.push(Some(start(i)?));
    }
    let (leader, _) = wait_gated_from(&dirs, &[], now_us(), Duration::from_secs(LEASE_S) + MARGIN)?;
    let li = Cluster::index(&leader);
    // Followers first, then the leader, as a rollout that reaches the
    // leader's node last: the longest time with both names in use.
    let order: Vec<usize> = (0..3).filter(|i| *i != li).chain([li]).collect();
    let mut leader_renamed = 0;
    for (n, i) in order.into_iter().enumerate() {
        if n == 2 {
            leader_renamed = now_us();
        }
        match rollout {
            Rollout::Restart => {
                let mut a = agents[i].take().context("running")?;
                a.stop_cleanly()?;
                renamed(i)?;
                agents[i] = Some(start(i)?);
            }
            Rollout::Reload => {
                renamed(i)?;
                let a = agents[i].as_ref().context("running")?;
                a.wait_log("policy reloaded", Duration::from_secs(5))?;
            }
        }
        if n < 2 {
            // A new-name agent beside an old-name leader: give it a lease
            // duration to (wrongly) take the new Lease.
            let fenced = agents[i].as_ref().context("running")?;
            fenced.wait_log(
                "not standing while Lease",
                Duration::from_secs(LEASE_S) + MARGIN,
            )?;
            tokio::time::sleep(Duration::from_secs(LEASE_S)).await;
            check_across_leases(&all_events(&dirs)?)?;
        }
    }
    // The first event on the new Lease.
    let bound = Duration::from_secs(LEASE_S + RETRY_S) + MARGIN;
    let deadline = std::time::Instant::now() + bound;
    let (next, first_new) = loop {
        let evs = all_events(&dirs)?;
        if let Some(e) = evs
            .iter()
            .filter(|e| e.input == "gated" && e.lease.as_deref() == Some("lease-new"))
            .min_by_key(|e| e.at)
        {
            break (e.agent.clone(), e.at);
        }
        if std::time::Instant::now() >= deadline {
            bail!("nobody led the new Lease within {bound:?} of the last rename");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Let the new leader run, then judge everything written.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let evs = all_events(&dirs)?;
    let rs = check_across_leases(&evs)?;
    let last_old = rs
        .iter()
        .filter(|r| r.lease == "lease-old")
        .map(|r| r.last)
        .max()
        .context("no gated events on the old Lease")?;
    println!(
        "rename ({rollout:?}): the last agent on lease-old renamed at +0 ms, its last gated event there +{} ms, the first on lease-new ({next}) +{} ms: a {} ms gap",
        (last_old - leader_renamed) / 1000,
        (first_new - leader_renamed) / 1000,
        (first_new - last_old) / 1000
    );
    assert!(first_new > last_old);
    // The old name's leader worked to the end: the first two agents on the
    // new name never did until then.
    assert!(
        rs.iter()
            .filter(|r| r.lease == "lease-old")
            .all(|r| r.agent == leader),
        "only {leader} led the old Lease: {rs:?}"
    );
    Ok(())
}

/// The leader alone loses the API server (its connections go through a
/// proxy that starts dropping everything): it cannot renew, and cannot
/// write the stopped-term acknowledgement either, so it stops its gated
/// input at the renew deadline and the others wait out the lease before
/// one of them takes it — judged from the outputs: no overlap, the old
/// leader's last gated event before its renew deadline, the next leader's
/// first one no earlier than a lease duration after the old leader's last
/// possible renewal. Its node-local input never stops, and once healed it
/// is a candidate again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_stops_and_the_others_wait_out_its_lease() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("run-partition").await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("policy.yml");
    std::fs::write(&path, policy("run-lease", ""))?;
    let proxy = plane.fault_proxy()?;
    let via = plane.agent_kubeconfig_via(1, &proxy, dir.path())?;
    let outs: Vec<_> = (1..=3)
        .map(|k| dir.path().join(format!("out-{k}")))
        .collect();
    let dirs: Vec<&std::path::Path> = outs.iter().map(|p| p.as_path()).collect();
    // agent-1 (behind the proxy) starts alone, so it leads.
    let t0 = now_us();
    let mut agents = vec![AgentProc::start(&path, &via, 1, ns.name(), &outs[0])?];
    let (leader, _) = wait_gated_from(&dirs, &[], t0, Duration::from_secs(LEASE_S) + MARGIN)?;
    assert_eq!(leader, "agent-1");
    for k in 2..=3 {
        agents.push(AgentProc::start(
            &path,
            &plane.agent_kubeconfig(k),
            k,
            ns.name(),
            &outs[k as usize - 1],
        )?);
    }
    // Both followers see agent-1 hold the Lease before the cut.
    for a in &agents[1..] {
        a.wait_log("following", Duration::from_secs(LEASE_S) + MARGIN)?;
    }
    let cut = now_us();
    proxy.blackhole();
    let (next, first_new) = wait_gated_from(
        &dirs,
        &["agent-1"],
        cut,
        Duration::from_secs(LEASE_S + RETRY_S) + MARGIN,
    )?;
    let evs = all_events(&dirs)?;
    let rs = check_one_at_a_time(&evs, "gated")?;
    let old_last = last_gated_before(&evs, "agent-1", cut)?;
    println!(
        "partitioned leader: its last gated event {} ms after the cut, {next}'s first {} ms after the cut",
        (old_last - cut) / 1000,
        (first_new - cut) / 1000
    );
    // agent-1 renewed at most one retry period before the cut, so its
    // term ends (renew deadline) within RENEW_S of the cut...
    assert!(
        old_last <= cut + Duration::from_secs(RENEW_S).as_micros() as i64 + 250_000,
        "agent-1 worked {} ms after the cut",
        (old_last - cut) / 1000
    );
    // ...and nobody may take the Lease before it expired for them: no
    // shortcut without the old leader's acknowledgement.
    let wait_floor = Duration::from_secs(LEASE_S - RETRY_S).as_micros() as i64;
    assert!(
        first_new - cut >= wait_floor,
        "{next} led {} ms after the cut, before agent-1's lease could expire",
        (first_new - cut) / 1000
    );
    assert!(rs.iter().any(|r| r.agent == next));
    // agent-1's node-local input ran through the partition.
    let to = now_us() - 200_000;
    let gap = largest_gap(&evs, "agent-1", "local", cut, to);
    assert!(
        gap < 1_000_000,
        "agent-1's node-local events stopped for {} ms",
        gap / 1000
    );
    // Healed, it stays a candidate: stop the others and it leads.
    proxy.heal();
    for a in agents.iter_mut().skip(1) {
        a.stop_cleanly()?;
    }
    let healed = now_us();
    let (again, _) = wait_gated_from(
        &dirs,
        &[],
        healed,
        Duration::from_secs(LEASE_S + RETRY_S) + MARGIN,
    )?;
    assert_eq!(again, "agent-1", "the healed agent leads again");
    check_one_at_a_time(&all_events(&dirs)?, "gated")?;
    Ok(())
}
