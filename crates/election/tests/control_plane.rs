//! The election against a real kube-apiserver + etcd (testkit), with RBAC
//! on and restricted agent identities. Short timings (3 s / 2 s / 0.5 s).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use kube::api::{Api, DynamicObject, PostParams};
use leasehold_election::core::WallTime;
use leasehold_election::{ElectionHandle, Elector, Leadership, Timings};
use leasehold_testkit::{Component, ControlPlane, TestNamespace};
use serde_json::Value;
use tokio::sync::watch;

const LEASE: &str = "election-test";

fn timings() -> Timings {
    Timings::new(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(500),
    )
    .unwrap()
}

fn lease_api(client: kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = kube::api::ApiResource {
        group: "coordination.k8s.io".into(),
        version: "v1".into(),
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        plural: "leases".into(),
    };
    Api::namespaced_with(client, ns, &ar)
}

fn identity(k: u32) -> String {
    ControlPlane::agent_user(k)
}

async fn candidate(plane: &ControlPlane, k: u32, ns: &str) -> Result<ElectionHandle> {
    let client = plane.agent_client(k).await?;
    Ok(Elector::builder(client, ns, LEASE, identity(k))
        .timings(timings())
        .spawn()?)
}

/// Waits (bounded) until the state satisfies `pred`; returns it.
async fn wait(
    rx: &mut watch::Receiver<Leadership>,
    within: Duration,
    what: &str,
    pred: impl Fn(&Leadership) -> bool,
) -> Result<Leadership> {
    // Owned before matching, so the receiver is free again for the message.
    let outcome = tokio::time::timeout(within, rx.wait_for(|s| pred(s)))
        .await
        .map(|r| r.map(|s| s.clone()));
    match outcome {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(_)) => bail!("elector ended while waiting for {what}"),
        Err(_) => bail!("no {what} within {within:?}; state is {:?}", *rx.borrow()),
    }
}

/// Waits (5 s at most) until the candidate follows agent `k`.
async fn following(rx: &mut watch::Receiver<Leadership>, k: u32) -> Result<()> {
    let holder = Some(identity(k));
    wait(
        rx,
        Duration::from_secs(5),
        &format!("following agent-{k}"),
        |s| {
            *s == Leadership::Following {
                holder: holder.clone(),
            }
        },
    )
    .await?;
    Ok(())
}

async fn leading(rx: &mut watch::Receiver<Leadership>, within: Duration) -> Result<i32> {
    match wait(rx, within, "leadership", Leadership::is_leading).await? {
        Leadership::Leading { term, .. } => Ok(term.transitions),
        _ => unreachable!(),
    }
}

async fn spec(admin: &kube::Client, ns: &str) -> Result<(String, Value)> {
    let obj = lease_api(admin.clone(), ns).get(LEASE).await?;
    Ok((
        obj.metadata.resource_version.clone().unwrap_or_default(),
        obj.data["spec"].clone(),
    ))
}

fn is_micro_time(v: &Value) -> bool {
    let s = v.as_str().unwrap_or("");
    s.len() == 27
        && s.ends_with('Z')
        && s.as_bytes()[19] == b'.'
        && WallTime::parse_rfc3339(s).is_some()
}

async fn ns(plane: &ControlPlane, prefix: &str) -> Result<TestNamespace> {
    plane.namespace(prefix).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_acquisition_writes_a_client_go_record_and_renew_keeps_the_term() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = ns(plane, "first").await?;
    let admin = plane.admin_client().await?;
    let a = candidate(plane, 1, ns.name()).await?;
    let mut st = a.state();
    assert_eq!(leading(&mut st, Duration::from_secs(10)).await?, 0);
    let (_, first) = spec(&admin, ns.name()).await?;
    assert_eq!(first["holderIdentity"], identity(1));
    assert_eq!(first["leaseDurationSeconds"], 3);
    assert_eq!(first["leaseTransitions"], 0);
    assert!(
        is_micro_time(&first["acquireTime"]) && is_micro_time(&first["renewTime"]),
        "{first}"
    );
    // Wait for a few renewals (bounded), then the term must be unchanged.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let renewed = loop {
        let (_, now) = spec(&admin, ns.name()).await?;
        if now["renewTime"] != first["renewTime"] {
            break now;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("renewTime never advanced: {now}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(renewed["acquireTime"], first["acquireTime"]);
    assert_eq!(renewed["leaseTransitions"], 0);
    assert!(is_micro_time(&renewed["renewTime"]));
    assert!(st.borrow().is_leading());
    a.shutdown().await;
    Ok(())
}

/// A candidate on a runtime of its own, so it can be killed without any
/// chance to release (like SIGKILL of its process).
struct Killable {
    rt: Option<tokio::runtime::Runtime>,
    state: watch::Receiver<Leadership>,
    _handle: ElectionHandle,
}

impl Killable {
    fn start(k: u32, ns: String) -> Result<Killable> {
        std::thread::spawn(move || -> Result<Killable> {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            let handle = rt.block_on(async {
                let client = ControlPlane::shared().agent_client(k).await?;
                anyhow::Ok(
                    Elector::builder(client, ns, LEASE, identity(k))
                        .timings(timings())
                        .spawn()?,
                )
            })?;
            Ok(Killable {
                rt: Some(rt),
                state: handle.state(),
                _handle: handle,
            })
        })
        .join()
        .map_err(|_| anyhow::anyhow!("candidate thread panicked"))?
    }

    fn kill(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_after_the_leader_is_killed_without_release() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = ns(plane, "kill").await?;
    let mut a = Killable::start(1, ns.name().to_string())?;
    leading(&mut a.state, Duration::from_secs(10)).await?;
    let b = candidate(plane, 2, ns.name()).await?;
    let mut bs = b.state();
    following(&mut bs, 1).await?;
    a.kill();
    let killed = tokio::time::Instant::now();
    // Expiry is 3 s after B last saw A's renewal; allow a margin.
    assert_eq!(leading(&mut bs, Duration::from_secs(6)).await?, 1);
    let took = killed.elapsed();
    assert!(
        took >= Duration::from_millis(2500),
        "took over before the lease could expire: {took:?}"
    );
    b.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_hands_over_well_before_expiry() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = ns(plane, "release").await?;
    let admin = plane.admin_client().await?;
    let a = candidate(plane, 1, ns.name()).await?;
    let mut a_state = a.state();
    leading(&mut a_state, Duration::from_secs(10)).await?;
    let b = candidate(plane, 2, ns.name()).await?;
    let mut bs = b.state();
    following(&mut bs, 1).await?;
    a.shutdown().await;
    let released = tokio::time::Instant::now();
    assert_eq!(*a_state.borrow(), Leadership::Stopped);
    // Without the release the follower could take over only after a whole
    // lease duration: a handover inside it shows the release worked.
    let expiry = timings().lease_duration();
    assert_eq!(leading(&mut bs, expiry).await?, 1);
    let took = released.elapsed();
    assert!(took < expiry, "handover took {took:?}");
    let (_, s) = spec(&admin, ns.name()).await?;
    assert_eq!(s["holderIdentity"], identity(2));
    b.shutdown().await;
    let (_, s) = spec(&admin, ns.name()).await?;
    assert_eq!(s["holderIdentity"], "");
    assert_eq!(s["leaseDurationSeconds"], 1);
    assert_eq!(s["leaseTransitions"], 1, "release keeps transitions");
    Ok(())
}

async fn overwrite_holder(
    admin: &kube::Client,
    ns: &str,
    holder: &str,
    duration: i64,
) -> Result<()> {
    let api = lease_api(admin.clone(), ns);
    for _ in 0..20 {
        let mut obj = api.get(LEASE).await?;
        obj.data["spec"]["holderIdentity"] = Value::from(holder);
        obj.data["spec"]["leaseDurationSeconds"] = Value::from(duration);
        match api.replace(LEASE, &PostParams::default(), &obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e).context("overwriting the holder"),
        }
    }
    bail!("could not overwrite the holder: always conflicting")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_overwriting_the_holder_makes_the_leader_step_down_at_once() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = ns(plane, "overwrite").await?;
    let admin = plane.admin_client().await?;
    let a = candidate(plane, 1, ns.name()).await?;
    let mut st = a.state();
    leading(&mut st, Duration::from_secs(10)).await?;
    overwrite_holder(&admin, ns.name(), "beats-leader-intruder", 3).await?;
    let written = tokio::time::Instant::now();
    let intruder = Leadership::Following {
        holder: Some("beats-leader-intruder".into()),
    };
    // Seen on the watch, well before the renew deadline would end the term.
    let bound = timings().renew_deadline();
    wait(&mut st, bound, "step-down", |s| *s == intruder).await?;
    assert!(written.elapsed() < bound);
    // It stays a candidate and takes the lease once the intruder's expires.
    assert_eq!(leading(&mut st, Duration::from_secs(6)).await?, 1);
    a.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_candidate_loses_and_regains_leadership_twenty_times() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = ns(plane, "twenty").await?;
    let admin = plane.admin_client().await?;
    let a = candidate(plane, 1, ns.name()).await?;
    let mut st = a.state();
    let mut last = leading(&mut st, Duration::from_secs(10)).await?;
    for round in 0..20 {
        overwrite_holder(&admin, ns.name(), "intruder", 1).await?;
        wait(&mut st, Duration::from_secs(2), "step-down", |s| {
            !s.is_leading()
        })
        .await
        .with_context(|| format!("round {round}"))?;
        let term = leading(&mut st, Duration::from_secs(4))
            .await
            .with_context(|| format!("round {round}"))?;
        assert!(term > last, "round {round}: term {term} after {last}");
        last = term;
    }
    a.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_role_binding_steps_down_before_expiry_and_leads_again_after_restore() -> Result<()>
{
    let plane = ControlPlane::shared();
    let ns = ns(plane, "revoke").await?;
    let a = candidate(plane, 1, ns.name()).await?;
    let mut st = a.state();
    leading(&mut st, Duration::from_secs(10)).await?;
    ns.revoke(1).await?;
    let revoked = tokio::time::Instant::now();
    // The last good renew started at most one retry period before the
    // revocation; the leader must stop within renew_deadline of it, which
    // is before the lease (3 s) can expire for anyone else.
    let expiry = timings().lease_duration();
    wait(&mut st, expiry, "step-down", |s| !s.is_leading()).await?;
    assert!(revoked.elapsed() < expiry);
    ns.grant(1).await?;
    leading(&mut st, Duration::from_secs(10)).await?;
    a.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_forbidden_falls_back_to_polling_and_still_elects() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane
        .namespace_with_verbs("nowatch", &["get", "create", "update"])
        .await?;
    let a = candidate(plane, 1, ns.name()).await?;
    let mut a_state = a.state();
    leading(&mut a_state, Duration::from_secs(10)).await?;
    let b = candidate(plane, 2, ns.name()).await?;
    let mut bs = b.state();
    following(&mut bs, 1).await?;
    a.shutdown().await;
    // Found by polling: within the 1–2.2 × retry period jitter.
    assert_eq!(leading(&mut bs, Duration::from_secs(3)).await?, 1);
    b.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_api_server_steps_the_leader_down_at_renew_deadline_and_a_leader_returns()
-> Result<()> {
    let plane = ControlPlane::dedicated()?;
    let ns = plane.namespace("pause").await?;
    let a = candidate(&plane, 1, ns.name()).await?;
    let mut st = a.state();
    leading(&mut st, Duration::from_secs(10)).await?;
    plane.pause(Component::ApiServer)?;
    let paused = tokio::time::Instant::now();
    let stepped = wait(&mut st, Duration::from_secs(3), "step-down", |s| {
        !s.is_leading()
    })
    .await;
    let took = paused.elapsed();
    plane.resume(Component::ApiServer)?;
    stepped?;
    // Renew deadline (2 s) from the start of the last renew, which began at
    // most one retry period (0.5 s) before the pause.
    assert!(
        took >= Duration::from_millis(1400) && took <= Duration::from_millis(2600),
        "stepped down after {took:?}"
    );
    leading(&mut st, Duration::from_secs(15)).await?;
    a.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_leader_stops_before_the_other_takes_over_and_follows_after_heal() -> Result<()>
{
    let plane = ControlPlane::shared();
    let ns = ns(plane, "partition").await?;
    let proxy = plane.fault_proxy()?;
    let a_client = kube::Client::try_from(plane.agent_config_via(1, &proxy).await?)?;
    let a = Elector::builder(a_client, ns.name(), LEASE, identity(1))
        .timings(timings())
        .spawn()?;
    let mut st = a.state();
    leading(&mut st, Duration::from_secs(10)).await?;
    let b = candidate(plane, 2, ns.name()).await?;
    let mut bs = b.state();
    following(&mut bs, 1).await?;
    proxy.blackhole();
    let cut = tokio::time::Instant::now();
    wait(
        &mut st,
        Duration::from_millis(2800),
        "step-down of the cut-off leader",
        |s| !s.is_leading(),
    )
    .await?;
    assert!(
        !bs.borrow().is_leading(),
        "two leaders: B led before A stepped down"
    );
    assert_eq!(leading(&mut bs, Duration::from_secs(6)).await?, 1);
    assert!(
        cut.elapsed() >= Duration::from_millis(2500),
        "B took over before A's lease could expire"
    );
    proxy.heal();
    let b_holds = Leadership::Following {
        holder: Some(identity(2)),
    };
    wait(
        &mut st,
        Duration::from_secs(15),
        "A following B after heal",
        |s| *s == b_holds,
    )
    .await?;
    b.shutdown().await;
    assert_eq!(
        leading(&mut st, Duration::from_secs(3)).await?,
        2,
        "A stays a candidate and leads again"
    );
    a.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watching_follower_sends_no_requests_at_steady_state() -> Result<()> {
    use leasehold_election::SimpleMetrics;
    use std::sync::Arc;
    let plane = ControlPlane::shared();
    let ns = ns(plane, "steady").await?;
    let a = candidate(plane, 1, ns.name()).await?;
    leading(&mut a.state(), Duration::from_secs(10)).await?;
    let metrics = Arc::new(SimpleMetrics::new());
    let client = plane.agent_client(2).await?;
    let b = Elector::builder(client, ns.name(), LEASE, identity(2))
        .timings(timings())
        .metrics(metrics.clone())
        .spawn()?;
    let mut bs = b.state();
    following(&mut bs, 1).await?;
    let label = LEASE.to_string();
    let count = |m: &SimpleMetrics| {
        ["get", "create", "update", "watch"]
            .iter()
            .map(|v| m.requests(&label, v, "200"))
            .sum::<u64>()
    };
    // Its start-up read and watch may still be in flight: wait for both.
    let started = tokio::time::Instant::now();
    while metrics.requests(&label, "get", "200") == 0
        || metrics.requests(&label, "watch", "200") == 0
    {
        if started.elapsed() > Duration::from_secs(5) {
            bail!("start-up requests never completed:\n{}", metrics.render());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = count(&metrics);
    // Six renew periods of the leader: the follower only listens.
    let mut watched = bs.clone();
    let changed = tokio::time::timeout(Duration::from_secs(3), watched.changed()).await;
    assert!(
        changed.is_err(),
        "follower state changed at steady state: {:?}",
        *bs.borrow()
    );
    assert_eq!(
        count(&metrics),
        before,
        "follower requests at steady state:\n{}",
        metrics.render()
    );
    b.shutdown().await;
    a.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_changes_are_recorded_as_events_on_the_lease() -> Result<()> {
    use k8s_openapi::api::core::v1::Event;
    let plane = ControlPlane::shared();
    let ns = ns(plane, "events").await?;
    let admin = plane.admin_client().await?;
    let a = Elector::builder(admin.clone(), ns.name(), LEASE, "admin-candidate")
        .timings(timings())
        .emit_events(true)
        .spawn()?;
    leading(&mut a.state(), Duration::from_secs(10)).await?;
    a.shutdown().await;
    let events: Api<Event> = Api::namespaced(admin, ns.name());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let list = events.list(&Default::default()).await?;
        let messages: Vec<String> = list
            .items
            .iter()
            .filter(|e| {
                e.reason.as_deref() == Some("LeaderElection")
                    && e.involved_object.name.as_deref() == Some(LEASE)
            })
            .filter_map(|e| e.message.clone())
            .collect();
        // `kubectl get events` shows <unknown> without timestamps.
        assert!(
            list.items
                .iter()
                .all(|e| e.first_timestamp.is_some() && e.last_timestamp.is_some()),
            "events without timestamps: {:?}",
            list.items
        );
        if messages
            .iter()
            .any(|m| m == "admin-candidate became leader")
            && messages
                .iter()
                .any(|m| m == "admin-candidate stopped leading")
        {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("events not recorded: {messages:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Leader work that never yields starves its runtime, so the election loop
/// cannot run its deadline; the watchdog thread still cancels the work at
/// the renew deadline, before the other candidate may take over. Judged
/// from the work's own samples, not from what the elector says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_starving_its_runtime_is_still_cancelled_before_anyone_else_leads() -> Result<()> {
    use std::sync::{Arc, Mutex};
    let plane = ControlPlane::shared();
    let ns = ns(plane, "starve").await?;
    let last_sample: Arc<Mutex<Option<std::time::Instant>>> = Arc::default();
    let client = plane.agent_client(1).await?;
    // The state hook runs on a thread of its own: it reports leadership
    // even while the candidate's runtime is starved.
    let (leading_tx, leading_rx) = std::sync::mpsc::channel();
    let samples = last_sample.clone();
    let namespace = ns.name().to_string();
    // Candidate 1 on a single-threaded runtime of its own, whose leader
    // work blocks that thread while checking only its token.
    let led = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let led_hook = led.clone();
    let starved = std::thread::spawn(move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let handle = Elector::builder(client, namespace, LEASE, identity(1))
                .timings(timings())
                .on_state(move |change| {
                    if change.state.is_leading() {
                        led_hook.store(true, std::sync::atomic::Ordering::SeqCst);
                        let _ = leading_tx.send(());
                    }
                })
                .on_leading(move |_term, token| {
                    let samples = samples.clone();
                    async move {
                        let spin_limit = std::time::Instant::now() + Duration::from_secs(30);
                        while !token.is_cancelled() && std::time::Instant::now() < spin_limit {
                            *samples.lock().unwrap() = Some(std::time::Instant::now());
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                })
                .spawn()?;
            let mut st = handle.state();
            // Back from the starvation: it stepped down and stays a candidate.
            wait(&mut st, Duration::from_secs(30), "step-down", |s| {
                led.load(std::sync::atomic::Ordering::SeqCst)
                    && matches!(s, Leadership::Following { .. })
            })
            .await?;
            handle.shutdown().await;
            Ok(())
        })
    });
    tokio::task::spawn_blocking(move || leading_rx.recv_timeout(Duration::from_secs(10)))
        .await?
        .context("the starved candidate never led")?;
    let b = candidate(plane, 2, ns.name()).await?;
    let mut bs = b.state();
    leading(&mut bs, Duration::from_secs(30)).await?;
    let b_leads = std::time::Instant::now();
    let last = last_sample.lock().unwrap().expect("the work ran");
    assert!(
        last < b_leads,
        "the starved leader's work still ran {:?} after the other took over",
        last - b_leads
    );
    starved.join().expect("starved candidate thread")?;
    b.shutdown().await;
    Ok(())
}

/// Leader work that ignores cancellation (blocked in synchronous code, so
/// not even abortable) must neither stop the candidate from leading again
/// nor hang shutdown; a lease that work may still act under is left to
/// expire, never released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_ignoring_cancellation_neither_blocks_re_election_nor_shutdown() -> Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    let plane = ControlPlane::shared();
    let ns = ns(plane, "stuck").await?;
    let admin = plane.admin_client().await?;
    let client = plane.agent_client(1).await?;
    let unblock = Arc::new(AtomicBool::new(false));
    let (states_tx, states) = mpsc::channel::<Leadership>();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let namespace = ns.name().to_string();
    let work_unblock = unblock.clone();
    // Its own runtime with spare workers: each stuck term pins one.
    let candidate = std::thread::spawn(move || -> Result<Duration> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()?;
        let result = rt.block_on(async move {
            let handle = Elector::builder(client, namespace, LEASE, identity(1))
                .timings(timings())
                .on_state(move |change| {
                    let _ = states_tx.send(change.state.clone());
                })
                .on_leading(move |_term, _token| {
                    let unblock = work_unblock.clone();
                    async move {
                        let limit = std::time::Instant::now() + Duration::from_secs(90);
                        while !unblock.load(Ordering::SeqCst) && std::time::Instant::now() < limit {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                    }
                })
                .spawn()?;
            tokio::task::spawn_blocking(move || stop_rx.recv()).await??;
            let asked = tokio::time::Instant::now();
            handle.shutdown().await;
            Ok(asked.elapsed())
        });
        // The stuck work still pins a worker: don't wait for it here.
        rt.shutdown_background();
        result
    });
    let next_term = |within: Duration| -> Result<i32> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match states.recv_timeout(left)? {
                Leadership::Leading { term, .. } => return Ok(term.transitions),
                _ => continue,
            }
        }
    };
    let t = timings();
    let first = tokio::task::block_in_place(|| next_term(Duration::from_secs(10)))?;
    overwrite_holder(&admin, ns.name(), "intruder", 3).await?;
    // Abandoning the work takes two graces of (D − RD)/2; then the
    // intruder's lease runs out and the candidate leads again.
    let bound = t.lease_duration() * 3 + t.renew_deadline();
    let second = tokio::task::block_in_place(|| next_term(bound))?;
    assert!(second > first, "term {second} after {first}");
    stop_tx.send(())?;
    let took = candidate.join().expect("candidate thread")?;
    assert!(took < bound, "shutdown took {took:?} with stuck work");
    let (_, spec) = spec(&admin, ns.name()).await?;
    assert_eq!(
        spec["holderIdentity"],
        identity(1),
        "released a lease whose work may still run: {spec}"
    );
    unblock.store(true, Ordering::SeqCst);
    Ok(())
}

/// A leader's checkpoint rides on its renewals and its release (no request
/// of its own), and the next leader reads it from the Lease it took over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_ride_on_renewals_and_reach_the_next_leader() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = ns(plane, "checkpoint").await?;
    let admin = plane.admin_client().await?;
    let a = candidate(plane, 1, ns.name()).await?;
    let mut a_state = a.state();
    leading(&mut a_state, Duration::from_secs(10)).await?;
    a.checkpoints().set("events", "rv-100");
    // Written with the next renewal, within a retry period or two.
    let api = lease_api(admin.clone(), ns.name());
    let key = format!("{}events", leasehold_election::ANNOTATION_PREFIX);
    let deadline = tokio::time::Instant::now() + timings().retry_period() * 3;
    loop {
        let lease = api.get(LEASE).await?;
        let value = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&key).cloned());
        if value.as_deref() == Some("rv-100") {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "checkpoint not written: {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let b = candidate(plane, 2, ns.name()).await?;
    let mut bs = b.state();
    following(&mut bs, 1).await?;
    // The last position before the release travels with the release.
    a.checkpoints().set("events", "rv-150");
    a.shutdown().await;
    leading(&mut bs, timings().lease_duration()).await?;
    assert_eq!(b.checkpoints().get("events").as_deref(), Some("rv-150"));
    b.shutdown().await;
    Ok(())
}

/// A new term of ours never writes back a checkpoint an earlier term of
/// ours set: the Lease was released and moved on by a term this process
/// never saw (here an admin writes the release shape with a later
/// checkpoint); re-acquiring keeps the later value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_term_never_writes_back_an_earlier_terms_checkpoint() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = ns(plane, "stale-checkpoint").await?;
    let admin = plane.admin_client().await?;
    let api = lease_api(admin.clone(), ns.name());
    let key = format!("{}events", leasehold_election::ANNOTATION_PREFIX);
    let annotation = |o: &DynamicObject| {
        o.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(&key).cloned())
    };
    let a = candidate(plane, 1, ns.name()).await?;
    let mut a_state = a.state();
    leading(&mut a_state, Duration::from_secs(10)).await?;
    a.checkpoints().set("events", "rv-100");
    let deadline = tokio::time::Instant::now() + timings().retry_period() * 3;
    while annotation(&api.get(LEASE).await?).as_deref() != Some("rv-100") {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "checkpoint not written"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Another leader's term, released, with its later checkpoint.
    let now = WallTime::from_unix_micros(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_micros() as i64,
    )
    .to_micro_time();
    let lease = api.get(LEASE).await?;
    let transitions = lease.data["spec"]["leaseTransitions"].as_i64().unwrap_or(0);
    let patch = serde_json::json!({
        "metadata": {"annotations": {key.clone(): "rv-200"}},
        "spec": {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": transitions + 1,
        },
    });
    api.patch(
        LEASE,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    // This process takes the released Lease again.
    let deadline = tokio::time::Instant::now() + timings().lease_duration() * 2;
    let taken = loop {
        let l = api.get(LEASE).await?;
        let spec = &l.data["spec"];
        if spec["holderIdentity"] == identity(1)
            && spec["leaseTransitions"].as_i64() > Some(transitions + 1)
        {
            break l;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "not taken again: {spec}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(annotation(&taken).as_deref(), Some("rv-200"));
    assert_eq!(a.checkpoints().get("events").as_deref(), Some("rv-200"));
    a.shutdown().await;
    let after = api.get(LEASE).await?;
    assert_eq!(annotation(&after).as_deref(), Some("rv-200"), "release");
    Ok(())
}
