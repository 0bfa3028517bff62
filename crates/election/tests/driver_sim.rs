//! Randomized schedules that run the real driver loop (`Elector` with its
//! tokio tasks, request timeouts, watch handling and step-down path), not
//! just the core, against an in-memory Lease server behind the
//! [`LeaseLock`] trait, on tokio's paused clock.
//!
//! Each schedule runs three candidates through message delays, failed and
//! lost writes, partitions, restarts and third-party edits of the Lease
//! (delete, clear, intruder, holder overwritten to another candidate or to
//! a name nobody runs, shortened duration, dropped transitions), with the
//! stopped-term acknowledgement kept on the Lease as its annotation is,
//! and judges safety from the leader-only work itself: the intervals in
//! which each candidate's work ran (from its start until its task
//! returned, on the shared virtual clock) never overlap, and terms only
//! grow. After the faults end, a leader must exist again.
//!
//! `LEASEHOLD_DRIVER_SIM_SEED=<n>` replays one schedule,
//! `LEASEHOLD_DRIVER_SIM_COUNT=<n>` runs that many, and
//! `LEASEHOLD_DRIVER_SIM_TRACE=1` prints every server answer and the
//! driver's logs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use leasehold_election::core::{Failure, LeaseRecord, Observed, Term, WallTime};
use leasehold_election::{
    ElectionHandle, Elector, Leadership, LeaseLock, LockError, LockWatchEvent, Timings,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

const SCHEDULES: u64 = 1000;
const CANDIDATES: usize = 3;

#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo).max(1))
    }
}

fn timings() -> Timings {
    Timings::new(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(500),
    )
    .unwrap()
}

/// The in-memory API server holding one Lease.
struct Server {
    rng: Rng,
    lease: Option<(u64, LeaseRecord)>,
    /// The stopped-term annotation: kept by every write, gone with the
    /// Lease, as the API server keeps metadata.
    stopped: Option<Term>,
    rv: u64,
    watchers: Vec<(usize, mpsc::UnboundedSender<LockWatchEvent>)>,
    partitioned: [bool; CANDIDATES],
    faulty: bool,
    /// When the Lease was last created.
    created_at: Option<Instant>,
    /// Holders overwritten by a third party, and acknowledgements written.
    overwrites: u64,
    acks: u64,
    /// When a third party deleted the Lease or dropped its transitions:
    /// a candidate that never saw the earlier terms may start from 0 again.
    resets: Vec<Instant>,
}

impl Server {
    fn observed(&self) -> Option<Observed> {
        self.lease.as_ref().map(|(rv, record)| Observed {
            resource_version: rv.to_string(),
            record: record.clone(),
            stopped: self.stopped.clone(),
        })
    }

    fn store(&mut self, record: Option<LeaseRecord>) -> Option<Observed> {
        self.rv += 1;
        if record.is_none() {
            self.stopped = None;
        }
        self.lease = record.map(|r| (self.rv, r));
        let event = match self.observed() {
            Some(o) => LockWatchEvent::Upsert(o),
            None => LockWatchEvent::Deleted,
        };
        self.watchers
            .retain(|(_, tx)| tx.send(event.clone()).is_ok());
        self.observed()
    }

    fn partition(&mut self, c: usize, on: bool) {
        self.partitioned[c] = on;
        if on {
            // Its open watches break.
            self.watchers.retain(|(w, _)| *w != c);
        }
    }
}

type Shared = Arc<Mutex<Server>>;

struct SimLock {
    server: Shared,
    cand: usize,
}

impl SimLock {
    /// Network and server behaviour for one call: a delay, and whether the
    /// call hangs (partition) or fails before reaching the server.
    fn call(&self) -> (Duration, bool, bool) {
        let mut s = self.server.lock().unwrap();
        let delay = s.rng.millis(0, 40);
        let hang = s.partitioned[self.cand];
        let fail = s.faulty && s.rng.chance(0.05);
        (delay, hang, fail)
    }

    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Server) -> Result<T, LockError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, LockError>> {
        let (delay, hang, fail) = self.call();
        let server = self.server.clone();
        let cand = self.cand;
        async move {
            tokio::time::sleep(delay).await;
            if hang {
                std::future::pending::<()>().await;
            }
            if fail {
                return Err(LockError::Failed(Failure::Other));
            }
            let outcome = {
                let mut s = server.lock().unwrap();
                if s.partitioned[cand] {
                    None
                } else {
                    let result = f(&mut s);
                    // Sometimes the answer is lost although the write applied.
                    let lost = s.faulty && s.rng.chance(0.03);
                    if std::env::var_os("LEASEHOLD_DRIVER_SIM_TRACE").is_some() {
                        let state = s
                            .lease
                            .as_ref()
                            .map(|(rv, r)| (*rv, r.holder.clone(), r.duration_secs, r.transitions));
                        eprintln!(
                            "{:?} pod-{cand} ok={} lost={lost} lease={state:?}",
                            Instant::now(),
                            result.is_ok()
                        );
                    }
                    Some((result, lost))
                }
            };
            let result = match outcome {
                Some((result, false)) => result,
                _ => std::future::pending().await,
            };
            tokio::time::sleep(delay).await;
            result
        }
        .boxed()
    }
}

impl LeaseLock for SimLock {
    fn describe(&self) -> String {
        "sim/lease".into()
    }

    fn get(&self) -> BoxFuture<'static, Result<Observed, LockError>> {
        self.run(|s| s.observed().ok_or(LockError::NotFound))
    }

    fn create(&self, record: LeaseRecord) -> BoxFuture<'static, Result<Observed, LockError>> {
        self.run(move |s| {
            if s.lease.is_some() {
                return Err(LockError::Conflict);
            }
            s.created_at = Some(Instant::now());
            Ok(s.store(Some(record)).expect("stored"))
        })
    }

    fn update(
        &self,
        resource_version: String,
        record: LeaseRecord,
    ) -> BoxFuture<'static, Result<Observed, LockError>> {
        self.run(move |s| match &s.lease {
            None => Err(LockError::NotFound),
            Some((rv, _)) if rv.to_string() != resource_version => Err(LockError::Conflict),
            Some(_) => Ok(s.store(Some(record)).expect("stored")),
        })
    }

    fn acknowledge(
        &self,
        resource_version: String,
        stopped: Term,
    ) -> BoxFuture<'static, Result<Observed, LockError>> {
        self.run(move |s| match s.lease.clone() {
            None => Err(LockError::NotFound),
            Some((rv, _)) if rv.to_string() != resource_version => Err(LockError::Conflict),
            Some((_, record)) => {
                s.stopped = Some(stopped);
                s.acks += 1;
                Ok(s.store(Some(record)).expect("stored"))
            }
        })
    }

    fn watch(
        &self,
        from: Option<String>,
    ) -> BoxFuture<'static, Result<BoxStream<'static, LockWatchEvent>, LockError>> {
        let cand = self.cand;
        self.run(move |s| {
            let (tx, rx) = mpsc::unbounded_channel();
            let current = s.observed();
            let changed = match (&from, &current) {
                (Some(v), Some(o)) => *v != o.resource_version,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if changed {
                let _ = tx.send(match current {
                    Some(o) => LockWatchEvent::Upsert(o),
                    None => LockWatchEvent::Deleted,
                });
            }
            s.watchers.push((cand, tx));
            Ok(tokio_stream_from(rx))
        })
    }
}

fn tokio_stream_from(
    mut rx: mpsc::UnboundedReceiver<LockWatchEvent>,
) -> BoxStream<'static, LockWatchEvent> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}

/// Work intervals `(candidate, term, start, end)`; `end` is `None` while running.
type WorkLog = Arc<Mutex<Vec<(usize, i32, Instant, Option<Instant>)>>>;

fn start(server: &Shared, c: usize, work: &WorkLog, seed: u64) -> ElectionHandle {
    let lock = Arc::new(SimLock {
        server: server.clone(),
        cand: c,
    });
    let work = work.clone();
    Elector::with_lock(lock, format!("pod-{c}"))
        .jitter_seed(seed ^ c as u64)
        .timings(timings())
        .on_leading(move |term, token| {
            let work = work.clone();
            let stop_ms = 1 + (seed ^ term.transitions as u64) % 300;
            async move {
                let idx = {
                    let mut w = work.lock().unwrap();
                    w.push((c, term.transitions, Instant::now(), None));
                    w.len() - 1
                };
                token.cancelled().await;
                // Stopping takes a while, within the driver's grace.
                tokio::time::sleep(Duration::from_millis(stop_ms)).await;
                work.lock().unwrap()[idx].3 = Some(Instant::now());
            }
        })
        .spawn()
        .expect("elector starts")
}

fn check_safety(work: &WorkLog, server: &Shared, seed: u64) {
    let resets = server.lock().unwrap().resets.clone();
    let w = work.lock().unwrap();
    for (i, a) in w.iter().enumerate() {
        for b in w.iter().skip(i + 1) {
            if a.0 == b.0 {
                continue;
            }
            let a_end = a.3.unwrap_or(Instant::now());
            let b_end = b.3.unwrap_or(Instant::now());
            assert!(
                a_end <= b.2 || b_end <= a.2,
                "seed {seed}: work of pod-{} (term {}) and pod-{} (term {}) overlapped: {:?} / {:?}",
                a.0,
                a.1,
                b.0,
                b.1,
                (a.2, a.3),
                (b.2, b.3)
            );
        }
    }
    let mut terms: Vec<(Instant, i32)> = w.iter().map(|x| (x.2, x.1)).collect();
    terms.sort();
    for pair in terms.windows(2) {
        // The earlier term's acquiring write applied up to one round trip
        // (2 × 40 ms) before its work started.
        let acquired = pair[0].0 - Duration::from_millis(100);
        let reset_between = resets.iter().any(|r| *r >= acquired && *r <= pair[1].0);
        assert!(
            pair[1].1 > pair[0].1 || reset_between,
            "seed {seed}: term {} began after term {}; work {:?}; resets {:?}",
            pair[1].1,
            pair[0].1,
            *w,
            resets
        );
    }
}

/// Runs one schedule: (terms led, holders overwritten, acknowledgements).
async fn one_schedule(seed: u64) -> (usize, u64, u64) {
    let mut rng = Rng(seed);
    let server: Shared = Arc::new(Mutex::new(Server {
        rng: Rng(seed ^ 0xA5A5),
        lease: None,
        stopped: None,
        rv: 0,
        watchers: Vec::new(),
        partitioned: [false; CANDIDATES],
        faulty: true,
        resets: Vec::new(),
        created_at: None,
        overwrites: 0,
        acks: 0,
    }));
    let work: WorkLog = Arc::default();
    let mut handles: Vec<Option<ElectionHandle>> = (0..CANDIDATES)
        .map(|c| Some(start(&server, c, &work, seed)))
        .collect();
    // Faults for 40 virtual seconds, one action every 0.2–3 s.
    let fault_end = Instant::now() + Duration::from_secs(40);
    while Instant::now() < fault_end {
        tokio::time::sleep(rng.millis(200, 3000)).await;
        check_safety(&work, &server, seed);
        let c = (rng.next() % CANDIDATES as u64) as usize;
        let wall =
            WallTime::from_unix_micros(1_700_000_000_000_000 + rng.next() as i64 % 1_000_000);
        let restart = {
            let mut restart = false;
            let mut s = server.lock().unwrap();
            if std::env::var_os("LEASEHOLD_DRIVER_SIM_TRACE").is_some() {
                eprintln!("{:?} fault on pod-{c}", Instant::now());
            }
            match rng.next() % 9 {
                // A create cannot be conditional: deleting a Lease moments
                // after it was created lets another candidate's create, sent
                // before it saw the first, land too. Deletes wait out the call
                // timeout after a create.
                0 if s
                    .created_at
                    .is_none_or(|at| at.elapsed() > timings().call_timeout()) =>
                {
                    s.store(None);
                    s.resets.push(Instant::now());
                }
                1 => {
                    if let Some((_, mut r)) = s.lease.clone() {
                        r.holder.clear();
                        s.store(Some(r));
                    }
                }
                2 => {
                    if let Some((_, mut r)) = s.lease.clone() {
                        // The intruder writes its own duration, as a holder does.
                        r.holder = "intruder".into();
                        r.duration_secs = Some(3);
                        r.acquire_time = Some(wall);
                        r.renew_time = Some(wall);
                        s.store(Some(r));
                    }
                }
                // Shortening the lease of a holder that cannot see the edit
                // (partitioned) lets others in before it can know: no elector
                // can prevent that, so it is only done while all are connected.
                3 if !s.partitioned.iter().any(|p| *p) => {
                    if let Some((_, mut r)) = s.lease.clone() {
                        r.duration_secs = Some(1 + (rng.next() % 3) as i32);
                        s.store(Some(r));
                    }
                }
                4 => {
                    if let Some((_, mut r)) = s.lease.clone() {
                        r.transitions = None;
                        s.store(Some(r));
                        s.resets.push(Instant::now());
                    }
                }
                5 => {
                    let on = !s.partitioned[c];
                    s.partition(c, on);
                }
                6 | 7 => restart = true,
                // An admin names another holder and changes nothing else:
                // a candidate (which may take it at once once the old
                // leader acknowledged its stop) or a name nobody runs.
                _ => {
                    if let Some((_, mut r)) = s.lease.clone() {
                        r.holder = if rng.chance(0.7) {
                            format!("pod-{c}")
                        } else {
                            "not-a-candidate".into()
                        };
                        s.store(Some(r));
                        s.overwrites += 1;
                    }
                }
            }
            restart
        };
        if restart {
            // Graceful restart of one candidate.
            if let Some(h) = handles[c].take() {
                h.shutdown().await;
            }
            handles[c] = Some(start(&server, c, &work, seed.wrapping_add(c as u64)));
        }
    }
    {
        let mut s = server.lock().unwrap();
        s.faulty = false;
        for c in 0..CANDIDATES {
            s.partition(c, false);
        }
    }
    // Liveness: a leader within one lease duration after the slowest wait
    // the faults can leave (an intruder's or a shortened record, a
    // deleted lease's carried duration, hanging calls), plus retries.
    let t = timings();
    let bound = t.lease_duration() * 3 + t.renew_deadline() + t.retry_period() * 4;
    let healed = Instant::now();
    loop {
        let leaders: Vec<String> = handles
            .iter()
            .flatten()
            .filter_map(|h| match &*h.state().borrow() {
                Leadership::Leading { term, .. } => Some(term.holder.clone()),
                _ => None,
            })
            .collect();
        // Converged: one leader, and the Lease names it with its term (an
        // edit in the last instant of the faults may still be in flight).
        let converged = leaders.len() == 1
            && server.lock().unwrap().lease.as_ref().is_some_and(|(_, r)| {
                r.holder == leaders[0] && r.transitions.is_some() && r.duration_secs == Some(3)
            });
        // Requests answered with a loss during the faults hang until their
        // call timeout: wait those out before judging the shutdown.
        if converged && healed.elapsed() > t.call_timeout() * 2 {
            break;
        }
        assert!(
            healed.elapsed() < bound,
            "seed {seed}: no single leader {bound:?} after the faults ended ({leaders:?} leading)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    check_safety(&work, &server, seed);
    for h in handles.into_iter().flatten() {
        h.shutdown().await;
    }
    check_safety(&work, &server, seed);
    let terms = work.lock().unwrap().len();
    assert!(terms >= 1, "seed {seed}: nobody ever led");
    let every = handles_all_stopped(&work);
    assert!(every, "seed {seed}: work still running after shutdown");
    let (overwrites, acks) = {
        let s = server.lock().unwrap();
        (s.overwrites, s.acks)
    };
    assert!(
        !matches!(
            server
                .lock()
                .unwrap()
                .lease
                .as_ref()
                .map(|(_, r)| r.holder.starts_with("pod-")),
            Some(true)
        ),
        "seed {seed}: the last leader did not release the lease at shutdown: {:?}",
        server.lock().unwrap().lease
    );
    (terms, overwrites, acks)
}

fn handles_all_stopped(work: &WorkLog) -> bool {
    work.lock().unwrap().iter().all(|w| w.3.is_some())
}

#[tokio::test(start_paused = true)]
async fn the_driver_loop_keeps_work_from_overlapping_through_faults_and_edits() {
    if std::env::var_os("LEASEHOLD_DRIVER_SIM_TRACE").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("leasehold_election=debug")
            .with_test_writer()
            .try_init();
    }
    let seeds: Vec<u64> = match std::env::var("LEASEHOLD_DRIVER_SIM_SEED") {
        Ok(v) => vec![v.parse().expect("a number")],
        Err(_) => {
            let count = std::env::var("LEASEHOLD_DRIVER_SIM_COUNT")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(SCHEDULES);
            (1..=count).collect()
        }
    };
    let (mut schedules, mut terms, mut overwrites, mut acks) = (0, 0, 0, 0);
    for seed in seeds {
        let (t, o, a) = one_schedule(seed).await;
        (terms, overwrites, acks) = (terms + t, overwrites + o, acks + a);
        schedules += 1;
    }
    println!(
        "{schedules} schedules, {terms} terms, {overwrites} holders overwritten, {acks} stopped terms acknowledged, no overlapping work"
    );
    // Overwrites must reach the acknowledgement, or its path went untested.
    assert!(
        schedules < 50 || acks > 0,
        "{overwrites} overwrites and not one acknowledgement"
    );
    // The faults must actually move leadership around, or nothing was tested.
    assert!(
        terms >= 3 * schedules,
        "only {terms} terms in {schedules} schedules"
    );
}
