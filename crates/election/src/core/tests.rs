//! One focused test per contract rule, driving the core by hand.

use std::time::Duration;

use super::*;

const ME: &str = "pod-a";

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Requests and events in one list, in the order a driver handles them.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Action {
    Get {
        op: OpId,
        timeout: Duration,
    },
    Create {
        op: OpId,
        record: LeaseRecord,
        timeout: Duration,
    },
    Update {
        op: OpId,
        record: LeaseRecord,
        resource_version: String,
        timeout: Duration,
    },
    Acknowledge {
        op: OpId,
        stopped: Term,
        resource_version: String,
    },
    StartWatch {
        watch: WatchId,
        from: Option<String>,
    },
    StopWatch,
    Abandon(OpId),
    StepUp {
        term: Term,
    },
    StepDown {
        reason: StepDownReason,
    },
    Following {
        holder: Option<String>,
    },
    Renewed,
    SlowPath,
    Released,
    Acknowledged(Term),
    Stopped,
    Warn(Warning),
}

fn from_event(e: Event) -> Action {
    match e {
        Event::StepUp { term } => Action::StepUp { term },
        Event::StepDown { reason, .. } => Action::StepDown { reason },
        Event::Following { holder } => Action::Following { holder },
        Event::Renewed => Action::Renewed,
        Event::SlowPath => Action::SlowPath,
        Event::Released => Action::Released,
        Event::Acknowledged { term } => Action::Acknowledged(term),
        Event::Stopped => Action::Stopped,
        Event::Warn(w) => Action::Warn(w),
    }
}

fn from_request(r: Request) -> Action {
    match r {
        Request::Get { op, timeout } => Action::Get { op, timeout },
        Request::Create {
            op,
            record,
            timeout,
        } => Action::Create {
            op,
            record,
            timeout,
        },
        Request::Update {
            op,
            record,
            resource_version,
            timeout,
        } => Action::Update {
            op,
            record,
            resource_version,
            timeout,
        },
        Request::Acknowledge {
            op,
            stopped,
            resource_version,
            ..
        } => Action::Acknowledge {
            op,
            stopped,
            resource_version,
        },
        Request::StartWatch { watch, from } => Action::StartWatch { watch, from },
        Request::StopWatch => Action::StopWatch,
        Request::Abandon(op) => Action::Abandon(op),
    }
}

/// A hand-driven candidate: local time, wall time and collected actions.
struct H {
    core: Core,
    now: Instant,
    wall: WallTime,
    out: Vec<Action>,
}

impl H {
    fn new(release: bool) -> H {
        H::with(Timings::default(), release)
    }

    fn with(timings: Timings, release: bool) -> H {
        let cfg = Config {
            identity: ME.into(),
            timings,
            release_on_shutdown: release,
            seed: 42,
        };
        let now = Instant::from_duration(secs(100.0));
        let wall = WallTime::from_unix_micros(1_700_000_000_000_000);
        let mut h = H {
            core: Core::new(cfg, now, wall).unwrap(),
            now,
            wall,
            out: Vec::new(),
        };
        h.collect();
        h
    }

    fn collect(&mut self) {
        while let Some(e) = self.core.poll_event() {
            self.out.push(from_event(e));
        }
        while let Some(r) = self.core.poll_request() {
            self.out.push(from_request(r));
        }
    }

    fn take(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.out)
    }

    fn feed(&mut self, input: Input) {
        self.core.handle(self.now, self.wall, input);
        self.collect();
    }

    /// Moves both clocks forward and fires every timer that became due.
    fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
        self.wall = WallTime::from_unix_micros(self.wall.unix_micros() + d.as_micros() as i64);
        self.feed(Input::Timeout);
    }

    /// Lets a missing Lease be waited out (answering polls with 404) until
    /// the candidate creates it.
    fn wait_absent(&mut self) {
        for _ in 0..80 {
            if self.has(|a| matches!(a, Action::Create { .. })) {
                return;
            }
            self.advance(secs(0.5));
            if matches!(self.out.last(), Some(Action::Get { .. })) {
                self.read(ReadResult::NotFound);
            }
        }
    }

    /// The record of `term` as this candidate writes it.
    fn core_record(&self, term: &Term) -> LeaseRecord {
        LeaseRecord {
            holder: term.holder.clone(),
            duration_secs: Some(15),
            acquire_time: Some(term.acquire_time),
            renew_time: Some(term.acquire_time),
            transitions: Some(term.transitions),
        }
    }

    fn last_op(&self) -> OpId {
        self.out
            .iter()
            .rev()
            .find_map(|a| match a {
                Action::Get { op, .. }
                | Action::Create { op, .. }
                | Action::Update { op, .. }
                | Action::Acknowledge { op, .. } => Some(*op),
                _ => None,
            })
            .expect("a request was sent")
    }

    fn read(&mut self, result: ReadResult) {
        let op = self.last_op();
        self.feed(Input::ReadDone { op, result });
    }

    fn write(&mut self, result: WriteResult) {
        let op = self.last_op();
        self.feed(Input::WriteDone { op, result });
    }

    fn watch_id(&self) -> WatchId {
        self.out
            .iter()
            .rev()
            .find_map(|a| match a {
                Action::StartWatch { watch, .. } => Some(*watch),
                _ => None,
            })
            .expect("a watch was started")
    }

    fn watch(&mut self, watch: WatchId, event: WatchEvent) {
        self.feed(Input::Watch { watch, event });
    }

    /// The update sent last, as (record, resourceVersion).
    fn update(&self) -> Option<(LeaseRecord, String)> {
        self.out.iter().rev().find_map(|a| match a {
            Action::Update {
                record,
                resource_version,
                ..
            } => Some((record.clone(), resource_version.clone())),
            _ => None,
        })
    }

    fn has(&self, f: impl Fn(&Action) -> bool) -> bool {
        self.out.iter().any(f)
    }

    /// Leads on a freshly created Lease at resourceVersion "1".
    fn leading() -> (H, WatchId) {
        let mut h = H::new(true);
        let w = h.watch_id();
        h.watch(w, WatchEvent::Started);
        h.read(ReadResult::NotFound);
        // A missing Lease is created after one lease duration.
        h.advance(secs(15.0));
        let record = match h.out.last() {
            Some(Action::Create { record, .. }) => record.clone(),
            other => panic!("expected create, got {other:?}"),
        };
        h.write(WriteResult::Ok(obs("1", record)));
        assert!(h.core.term().is_some());
        h.take();
        (h, w)
    }
}

fn obs(rv: &str, record: LeaseRecord) -> Observed {
    Observed {
        resource_version: rv.into(),
        record,
        stopped: None,
    }
}

/// A graceful release written at `at` (RFC 3339).
fn released(transitions: i32, at: &str) -> LeaseRecord {
    LeaseRecord {
        holder: String::new(),
        duration_secs: Some(1),
        acquire_time: WallTime::parse_rfc3339(at),
        renew_time: WallTime::parse_rfc3339(at),
        transitions: Some(transitions),
    }
}

fn held_by(holder: &str, duration: i32, transitions: i32) -> LeaseRecord {
    LeaseRecord {
        holder: holder.into(),
        duration_secs: Some(duration),
        acquire_time: WallTime::parse_rfc3339("2020-01-01T00:00:00Z"),
        renew_time: WallTime::parse_rfc3339("2020-01-01T00:00:00Z"),
        transitions: Some(transitions),
    }
}

#[test]
fn starts_by_reading_and_watching_with_bounded_call_timeout() {
    let h = H::new(true);
    assert!(h.has(|a| matches!(a, Action::Get { timeout, .. } if *timeout == secs(5.0))));
    assert!(h.has(|a| matches!(a, Action::StartWatch { from: None, .. })));
    let short = H::with(Timings::new(secs(3.0), secs(1.5), secs(0.5)).unwrap(), true);
    assert!(short.has(|a| matches!(a, Action::Get { timeout, .. } if *timeout == secs(1.0))));
    let cfg = Config {
        identity: String::new(),
        timings: Timings::default(),
        release_on_shutdown: true,
        seed: 0,
    };
    assert_eq!(
        Core::new(cfg, Instant::ZERO, WallTime::from_unix_micros(0)).err(),
        Some(ConfigError::EmptyIdentity)
    );
}

#[test]
fn absent_lease_is_created_with_client_go_fields_and_leads() {
    let mut h = H::new(true);
    h.read(ReadResult::NotFound);
    // A missing Lease is created after one lease duration.
    h.wait_absent();
    let Some(Action::Create { record, .. }) = h.out.last().cloned() else {
        panic!("no create: {:?}", h.out)
    };
    assert_eq!(record.holder, ME);
    assert_eq!(record.duration_secs, Some(15));
    assert_eq!(record.acquire_time, Some(h.wall));
    assert_eq!(record.renew_time, Some(h.wall));
    assert_eq!(record.transitions, Some(0));
    h.write(WriteResult::Ok(obs("1", record)));
    let term = Term {
        holder: ME.into(),
        acquire_time: h.wall,
        transitions: 0,
    };
    assert!(h.has(|a| *a == Action::StepUp { term: term.clone() }));
}

#[test]
fn renew_uses_cached_version_keeps_acquire_and_transitions() {
    let (mut h, _) = H::leading();
    let acquired = h.core.term().unwrap().clone();
    h.advance(secs(2.0));
    assert!(
        !h.has(|a| matches!(a, Action::Get { .. })),
        "renew must not read first"
    );
    let (record, rv) = h.update().expect("renew sent after retry period");
    assert_eq!(rv, "1");
    assert_eq!(record.acquire_time, Some(acquired.acquire_time));
    assert_eq!(record.transitions, Some(acquired.transitions));
    assert_eq!(record.renew_time, Some(h.wall));
    h.write(WriteResult::Ok(obs("2", record)));
    h.take();
    h.advance(secs(2.0));
    assert_eq!(h.update().unwrap().1, "2");
}

#[test]
fn expiry_is_judged_from_local_observation_and_record_duration() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    // renewTime is years old and the record's duration (30 s) is not ours
    // (15 s): neither matters except the duration, counted from now.
    h.read(ReadResult::Found(obs("7", held_by("pod-b", 30, 4))));
    let expiry = h.now + secs(30.0);
    assert_eq!(h.core.timer(TimerKind::Expiry), Some(expiry));
    assert!(h.has(|a| *a
        == Action::Following {
            holder: Some("pod-b".into())
        }));
    h.take();
    h.advance(secs(29.999));
    assert!(h.update().is_none(), "taken before expiry: {:?}", h.out);
    h.advance(secs(0.001));
    let (record, rv) = h.update().expect("takeover at the exact expiry instant");
    assert_eq!(rv, "7");
    assert_eq!(record.holder, ME);
    assert_eq!(record.transitions, Some(5));
    assert_eq!(record.acquire_time, Some(h.wall));
    assert_eq!(record.renew_time, Some(h.wall));
}

#[test]
fn a_change_of_the_record_restarts_the_expiry_wait() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs("7", held_by("pod-b", 15, 1))));
    h.advance(secs(10.0));
    let mut renewed = held_by("pod-b", 15, 1);
    renewed.renew_time = WallTime::parse_rfc3339("2020-01-01T00:00:10Z");
    h.watch(w, WatchEvent::Upsert(obs("8", renewed)));
    h.take();
    h.advance(secs(14.0));
    assert!(h.update().is_none());
    h.advance(secs(1.0));
    assert_eq!(h.update().unwrap().1, "8");
}

#[test]
fn free_or_durationless_records_are_taken_at_once() {
    let mut h = H::new(true);
    h.read(ReadResult::Found(obs("3", held_by("", 1, 2))));
    assert_eq!(h.update().unwrap().0.transitions, Some(3));
    let mut h = H::new(true);
    let mut broken = held_by("pod-b", 0, 0);
    broken.duration_secs = None;
    broken.acquire_time = None;
    broken.transitions = None;
    h.read(ReadResult::Found(obs("3", broken)));
    assert!(h.has(
        |a| matches!(a, Action::Warn(Warning::MissingDuration { holder }) if holder == "pod-b")
    ));
    assert_eq!(h.update().unwrap().0.transitions, Some(1));
}

#[test]
fn far_longer_record_duration_is_honoured_but_reported() {
    let mut h = H::new(true);
    h.read(ReadResult::Found(obs("3", held_by("pod-b", 3600, 0))));
    assert!(h.has(|a| matches!(
        a,
        Action::Warn(Warning::SuspiciousDuration { seconds: 3600, .. })
    )));
    assert_eq!(h.core.timer(TimerKind::Expiry), Some(h.now + secs(3600.0)));
}

#[test]
fn conflict_rereads_at_once_and_retries_with_the_new_version() {
    let mut h = H::new(true);
    h.read(ReadResult::Found(obs("3", held_by("", 1, 2))));
    h.write(WriteResult::Conflict);
    assert!(
        matches!(h.out.last(), Some(Action::Get { .. })),
        "{:?}",
        h.out
    );
    h.read(ReadResult::Found(obs(
        "4",
        released(3, "2020-01-01T00:01:00Z"),
    )));
    assert_eq!(h.update().unwrap().1, "4");
}

#[test]
fn failed_renew_rereads_before_the_next_write() {
    let (mut h, _) = H::leading();
    h.advance(secs(2.0));
    h.write(WriteResult::Failed(Failure::Other));
    h.take();
    h.advance(secs(2.0));
    let first_request = h
        .out
        .iter()
        .find(|a| matches!(a, Action::Get { .. } | Action::Update { .. }));
    assert!(
        matches!(first_request, Some(Action::Get { .. })),
        "{:?}",
        h.out
    );
    assert!(h.has(|a| *a == Action::SlowPath));
}

#[test]
fn leader_steps_down_at_renew_deadline_from_start_of_last_good_renew() {
    let (mut h, _) = H::leading();
    h.advance(secs(2.0)); // renew sent at t0 + 2
    h.advance(secs(1.5)); // ...and succeeds 1.5 s later
    let (record, _) = h.update().unwrap();
    h.write(WriteResult::Ok(obs("2", record)));
    assert_eq!(h.core.step_down_deadline(), Some(h.now + secs(8.5)));
    h.take();
    // Every later renew hangs (timeouts); the deadline still holds.
    h.advance(secs(8.499));
    assert!(
        !h.has(|a| matches!(a, Action::StepDown { .. })),
        "{:?}",
        h.out
    );
    h.advance(secs(0.001));
    assert!(h.has(|a| *a
        == Action::StepDown {
            reason: StepDownReason::RenewDeadline
        }));
    assert!(h.core.term().is_none());
}

#[test]
fn leader_steps_down_when_another_holder_or_term_is_seen() {
    let (mut h, w) = H::leading();
    h.watch(w, WatchEvent::Upsert(obs("5", held_by("admin-set", 15, 1))));
    assert!(h.has(|a| *a
        == Action::StepDown {
            reason: StepDownReason::OtherHolder("admin-set".into())
        }));
    assert!(h.has(|a| *a
        == Action::Following {
            holder: Some("admin-set".into())
        }));

    let (mut h, w) = H::leading();
    h.watch(w, WatchEvent::Upsert(obs("5", held_by(ME, 15, 9))));
    assert!(h.has(|a| *a
        == Action::StepDown {
            reason: StepDownReason::OtherTerm
        }));

    let (mut h, w) = H::leading();
    h.watch(w, WatchEvent::Deleted);
    assert!(h.has(|a| *a
        == Action::StepDown {
            reason: StepDownReason::Deleted
        }));
}

#[test]
fn stale_versions_are_ignored() {
    let (mut h, w) = H::leading();
    h.advance(secs(2.0));
    let (record, _) = h.update().unwrap();
    h.write(WriteResult::Ok(obs("9", record)));
    h.take();
    h.watch(w, WatchEvent::Upsert(obs("8", held_by("pod-b", 15, 0))));
    assert!(
        !h.has(|a| matches!(a, Action::StepDown { .. })),
        "{:?}",
        h.out
    );
}

#[test]
fn after_losing_it_stays_a_candidate_and_leads_again() {
    let (mut h, w) = H::leading();
    h.watch(w, WatchEvent::Upsert(obs("5", held_by("pod-b", 15, 1))));
    h.feed(Input::WorkEnded(WorkEnd::Stopped));
    h.take();
    h.watch(
        w,
        WatchEvent::Upsert(obs("6", released(1, "2020-01-01T00:01:00Z"))),
    );
    let (record, rv) = h.update().expect("released lease taken at once");
    assert_eq!((rv.as_str(), record.transitions), ("6", Some(2)));
    h.write(WriteResult::Ok(obs("7", record)));
    assert!(h.has(|a| matches!(a, Action::StepUp { term } if term.transitions == 2)));
}

#[test]
fn no_new_term_until_the_previous_leader_work_stopped() {
    let (mut h, w) = H::leading();
    h.watch(
        w,
        WatchEvent::Upsert(obs("5", released(1, "2020-01-01T00:01:00Z"))),
    );
    assert!(h.update().is_none(), "acquired while old work still runs");
    h.feed(Input::WorkEnded(WorkEnd::Stopped));
    assert!(h.update().is_some());
}

#[test]
fn a_previous_container_with_the_same_identity_is_waited_out() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs("3", held_by(ME, 15, 4))));
    assert!(h.update().is_none(), "took over a term it did not write");
    h.advance(secs(15.0));
    assert_eq!(h.update().unwrap().0.transitions, Some(5));
}

#[test]
fn a_timed_out_acquire_later_seen_applied_is_retaken_at_once_with_a_new_term() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs("3", held_by("", 1, 2))));
    let (attempt, _) = h.update().unwrap();
    h.advance(secs(5.0)); // the call times out in the core
    assert!(!h.has(|a| matches!(a, Action::StepUp { .. })));
    h.advance(secs(4.5)); // backoff, then a read shows it applied
    h.read(ReadResult::Found(obs("4", attempt.clone())));
    let (retake, rv) = h.update().expect("retakes its own leftover term at once");
    assert_eq!(rv, "4");
    assert_eq!(attempt.transitions, Some(3));
    assert_eq!(
        retake.transitions,
        Some(4),
        "a new term, above every one seen"
    );
    assert_eq!(retake.acquire_time, Some(h.wall));
    h.write(WriteResult::Ok(obs("5", retake)));
    assert!(h.has(|a| matches!(a, Action::StepUp { term } if term.transitions == 4)));
}

#[test]
fn shutdown_steps_down_then_releases_only_after_work_stopped() {
    let (mut h, _) = H::leading();
    let transitions = h.core.term().unwrap().transitions;
    h.feed(Input::Shutdown);
    assert_eq!(
        h.out.first(),
        Some(&Action::StepDown {
            reason: StepDownReason::Shutdown
        })
    );
    assert!(h.update().is_none(), "released before leader work stopped");
    h.feed(Input::WorkEnded(WorkEnd::Stopped));
    let (record, rv) = h.update().expect("release");
    assert_eq!(rv, "1");
    assert_eq!(record.holder, "");
    assert_eq!(record.duration_secs, Some(1));
    assert_eq!(
        (record.acquire_time, record.renew_time),
        (Some(h.wall), Some(h.wall))
    );
    assert_eq!(record.transitions, Some(transitions));
    h.write(WriteResult::Ok(obs("2", record)));
    assert!(h.has(|a| *a == Action::Released));
    assert!(h.has(|a| *a == Action::Stopped), "{:?}", h.out);
    assert!(h.core.is_stopped());
}

#[test]
fn shutdown_without_release_stops_without_writing() {
    let mut h = H::new(false);
    h.read(ReadResult::NotFound);
    // A missing Lease is created after one lease duration.
    h.wait_absent();
    let Some(Action::Create { record, .. }) = h.out.last().cloned() else {
        panic!()
    };
    h.write(WriteResult::Ok(obs("1", record)));
    h.take();
    h.feed(Input::Shutdown);
    h.feed(Input::WorkEnded(WorkEnd::Stopped));
    assert!(h.update().is_none());
    assert!(h.has(|a| *a == Action::Stopped), "{:?}", h.out);
}

#[test]
fn polls_with_jitter_only_while_the_watch_is_down() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs("3", held_by("pod-b", 15, 0))));
    assert_eq!(h.core.timer(TimerKind::Poll), None, "{:?}", h.out);
    h.take();
    h.advance(secs(5.0));
    h.watch(w, WatchEvent::Ended);
    // An ended stream resumes from the last version at once.
    assert!(h.has(|a| matches!(a, Action::StartWatch { from: Some(v), .. } if v == "3")));
    let poll = h
        .core
        .timer(TimerKind::Poll)
        .map(|at| at.saturating_since(h.now));
    let poll = poll.expect("polling while the watch is down");
    assert!(poll >= secs(2.0) && poll < secs(4.4), "{poll:?}");
}

#[test]
fn expired_watch_relists_then_watches_from_the_fresh_version() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs("3", held_by("pod-b", 15, 0))));
    h.take();
    h.watch(w, WatchEvent::Expired);
    assert!(
        matches!(h.out.as_slice(), [Action::Get { .. }, ..]),
        "{:?}",
        h.out
    );
    assert!(!h.has(|a| matches!(a, Action::StartWatch { .. })));
    h.read(ReadResult::Found(obs("40", held_by("pod-b", 15, 0))));
    assert!(h.has(|a| matches!(a, Action::StartWatch { from: Some(v), .. } if v == "40")));
}

#[test]
fn forbidden_watch_is_retried_soon_and_reported_only_when_it_lasts() {
    let mut h = H::new(true);
    let w = h.watch_id();
    // A refusal right after an API server restart: retried soon, silently,
    // while polling covers the gap.
    h.watch(w, WatchEvent::Failed(Failure::Forbidden));
    h.read(ReadResult::Found(obs("3", held_by("pod-b", 15, 0))));
    assert!(!h.has(|a| matches!(a, Action::Warn(_))), "{:?}", h.out);
    assert!(h.core.timer(TimerKind::Poll).is_some());
    let retry = h.core.timer(TimerKind::WatchRetry).expect("retried");
    assert!(retry.saturating_since(h.now) <= secs(4.4), "{retry:?}");
    // Still refused a lease duration later: reported once...
    let mut warnings = 0;
    for _ in 0..40 {
        h.take();
        h.advance(secs(1.0));
        if matches!(h.out.last(), Some(Action::Get { .. })) {
            h.read(ReadResult::Found(obs("3", held_by("pod-b", 15, 0))));
        }
        if let Some(Action::StartWatch { watch, .. }) = h
            .out
            .iter()
            .find(|a| matches!(a, Action::StartWatch { .. }))
            .cloned()
        {
            h.watch(watch, WatchEvent::Failed(Failure::Forbidden));
        }
        warnings += h
            .out
            .iter()
            .filter(|a| **a == Action::Warn(Warning::WatchForbidden))
            .count();
    }
    assert_eq!(warnings, 1, "reported once within ten minutes");
    // ...and the candidate still elects by polling.
    assert!(h.update().is_some() || h.has(|a| matches!(a, Action::Get { .. })));
}

/// A Role without `watch`: every watch start is refused and polling finds
/// the Lease missing. A watch that never came up missed nothing polling
/// did not see, so the missing Lease is created one lease duration after
/// it was first seen missing (plus a poll), not only once a refusal
/// happens to come later than that.
#[test]
fn refused_watch_starts_do_not_restart_the_wait_for_a_missing_lease() {
    let mut h = H::new(true);
    let t = Timings::default();
    let start = h.now;
    let mut refused = 0;
    let mut created = None;
    for _ in 0..1200 {
        let actions = h.take();
        if actions.iter().any(|a| matches!(a, Action::Create { .. })) {
            created = Some(h.now.saturating_since(start));
            break;
        }
        for a in actions {
            match a {
                Action::Get { op, .. } => h.feed(Input::ReadDone {
                    op,
                    result: ReadResult::NotFound,
                }),
                Action::StartWatch { watch, .. } => {
                    refused += 1;
                    h.watch(watch, WatchEvent::Failed(Failure::Forbidden));
                }
                _ => {}
            }
        }
        if h.out.is_empty() {
            h.advance(secs(0.05));
        }
    }
    let created = created.expect("the missing Lease was never created");
    let bound = t.lease_duration() + t.retry_period().mul_f64(2.0 * 2.2);
    assert!(
        created <= bound,
        "created after {created:?} (bound {bound:?}), {refused} refused watch starts"
    );
    assert!(refused >= 3, "the watch was retried meanwhile: {refused}");
}

/// Item: a create refused with 404 (namespace missing) backs off with a
/// growing delay and says so each time; never a hot loop.
#[test]
fn missing_namespace_backs_off_and_is_reported() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::NotFound);
    h.wait_absent();
    let mut creates = 0;
    let mut warnings = 0;
    let start = h.now;
    for _ in 0..600 {
        if let Some(op) = h.out.iter().rev().find_map(|a| match a {
            Action::Create { op, .. } => Some(*op),
            _ => None,
        }) {
            creates += 1;
            h.take();
            h.feed(Input::WriteDone {
                op,
                result: WriteResult::NotFound,
            });
            warnings += h
                .out
                .iter()
                .filter(|a| **a == Action::Warn(Warning::NamespaceNotFound))
                .count();
        }
        if matches!(h.out.last(), Some(Action::Get { .. })) {
            h.read(ReadResult::NotFound);
        }
        h.advance(secs(0.1));
    }
    let elapsed = h.now.saturating_since(start);
    assert!(creates >= 3, "gave up: {creates} creates in {elapsed:?}");
    // At most one create per 2 retry periods on average (the backoff grows
    // to 16 × retry): far from the ~30 requests/s of a hot loop.
    assert!(
        (creates as f64) < elapsed.as_secs_f64() / 4.0,
        "{creates} creates in {elapsed:?}"
    );
    assert_eq!(warnings, creates, "every refused create is reported");
}

#[test]
fn hung_request_times_out_inside_the_core() {
    let mut h = H::new(true);
    let first = h.last_op();
    h.take();
    h.advance(secs(5.0));
    h.feed(Input::ReadDone {
        op: first,
        result: ReadResult::NotFound,
    });
    assert!(
        !h.has(|a| matches!(a, Action::Create { .. })),
        "late answer accepted: {:?}",
        h.out
    );
}

#[test]
fn a_conflict_renews_a_watch_that_missed_the_write() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs("3", held_by("", 1, 2))));
    let op = h.last_op();
    h.take();
    h.feed(Input::WriteDone {
        op,
        result: WriteResult::Conflict,
    });
    assert!(
        h.has(|a| matches!(a, Action::StartWatch { from: Some(v), .. } if v == "3")),
        "{:?}",
        h.out
    );
    assert!(h.watch_id() != w);
}

#[test]
fn our_acquire_seen_on_the_watch_first_is_not_reported_as_following_ourselves() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::NotFound);
    // A missing Lease is created after one lease duration.
    h.advance(secs(15.0));
    let Some(Action::Create { record, .. }) = h.out.last().cloned() else {
        panic!("no create: {:?}", h.out)
    };
    // The API server's watch event often beats the answer to the write.
    let before = h.out.len();
    h.watch(w, WatchEvent::Upsert(obs("1", record.clone())));
    assert!(
        !h.out[before..]
            .iter()
            .any(|a| matches!(a, Action::Following { holder: Some(x) } if x == ME)),
        "{:?}",
        &h.out[before..]
    );
    h.write(WriteResult::Ok(obs("1", record)));
    assert!(h.has(|a| matches!(a, Action::StepUp { .. })), "{:?}", h.out);
}

// ---- third-party edits, stuck work, stale answers, shutdown mid-acquire ----

/// Item: a leader that sees its own term's record shortened renews at
/// once and steps down before the short lease could expire for others.
#[test]
fn shortened_own_record_renews_at_once_and_shrinks_the_deadline() {
    let (mut h, w) = H::leading();
    let term = h.core.term().unwrap().clone();
    let mut edited = h.core_record(&term);
    // 12 s instead of 15: the deadline keeps the 5 s margin, 7 s from the
    // start of the acquiring write.
    edited.duration_secs = Some(12);
    h.advance(secs(0.5));
    h.watch(w, WatchEvent::Upsert(obs("2", edited.clone())));
    let (renew, rv) = h.update().expect("renews at once");
    assert_eq!((rv.as_str(), renew.duration_secs), ("2", Some(15)));
    assert_eq!(h.core.step_down_deadline(), Some(h.now + secs(6.5)));
    assert!(h.has(|a| matches!(a, Action::Warn(Warning::ShortenedDuration { seconds: 12 }))));
    // The renew restores the full deadline.
    h.write(WriteResult::Ok(obs("3", renew)));
    assert_eq!(h.core.step_down_deadline(), Some(h.now + secs(10.0)));

    // Shortened to 1 s: no margin left: step down at once, then hold the
    // record (fence) until the work has stopped, then retake with a new term.
    let (mut h, w) = H::leading();
    let term = h.core.term().unwrap().clone();
    let mut edited = h.core_record(&term);
    edited.duration_secs = Some(1);
    h.watch(w, WatchEvent::Upsert(obs("2", edited)));
    assert!(h.has(|a| *a
        == Action::StepDown {
            reason: StepDownReason::RenewDeadline
        }));
    let (fence, _) = h
        .update()
        .expect("fences its own shortened record while draining");
    assert_eq!((fence.holder.as_str(), fence.duration_secs), (ME, Some(15)));
    assert_eq!(fence.transitions, Some(term.transitions));
    h.write(WriteResult::Ok(obs("3", fence)));
    h.take();
    h.feed(Input::WorkEnded(WorkEnd::Stopped));
    let (retake, rv) = h.update().expect("retakes at once once the work stopped");
    assert_eq!(
        (rv.as_str(), retake.transitions),
        ("3", Some(term.transitions + 1))
    );
}

/// Item: a deleted Lease, or a holder cleared by someone else, is free
/// only after the previous record's duration from when it was seen; a
/// graceful release is free at once.
#[test]
fn deleted_or_cleared_lease_is_waited_out_release_is_not() {
    for edit in ["delete", "clear"] {
        let mut h = H::new(true);
        let w = h.watch_id();
        h.watch(w, WatchEvent::Started);
        h.read(ReadResult::Found(obs("3", held_by("pod-b", 15, 2))));
        h.advance(secs(3.0));
        h.take();
        if edit == "delete" {
            h.watch(w, WatchEvent::Deleted);
        } else {
            let mut cleared = held_by("", 15, 2);
            cleared.renew_time = WallTime::parse_rfc3339("2020-01-01T00:00:09Z");
            h.watch(w, WatchEvent::Upsert(obs("4", cleared)));
        }
        assert!(
            !h.has(|a| matches!(a, Action::Create { .. } | Action::Update { .. })),
            "{edit}: taken at once: {:?}",
            h.out
        );
        h.advance(secs(14.999));
        assert!(
            !h.has(|a| matches!(a, Action::Create { .. } | Action::Update { .. })),
            "{edit}"
        );
        h.advance(secs(0.001));
        assert!(
            h.has(|a| matches!(a, Action::Create { .. } | Action::Update { .. })),
            "{edit}: not taken after the wait: {:?}",
            h.out
        );
    }
    // The leader steps down at once on both.
    let (mut h, w) = H::leading();
    let mut cleared = held_by("", 15, 0);
    cleared.renew_time = WallTime::parse_rfc3339("2020-01-01T00:00:09Z");
    h.watch(w, WatchEvent::Upsert(obs("2", cleared)));
    assert!(h.has(|a| *a
        == Action::StepDown {
            reason: StepDownReason::Cleared
        }));
    // A release is taken at once.
    let mut h = H::new(true);
    h.read(ReadResult::Found(obs("3", held_by("pod-b", 15, 2))));
    let w = h.watch_id();
    h.watch(
        w,
        WatchEvent::Upsert(obs("4", released(2, "2020-01-01T00:01:00Z"))),
    );
    assert!(h.update().is_some(), "{:?}", h.out);
}

/// Item: terms never go backwards, even if the transitions were removed
/// from the record or the Lease was deleted and created again.
#[test]
fn new_terms_are_numbered_above_every_transition_seen() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs("3", held_by("pod-b", 15, 4))));
    let mut dropped = held_by("pod-b", 15, 0);
    dropped.transitions = None;
    dropped.renew_time = WallTime::parse_rfc3339("2020-01-01T00:00:05Z");
    h.watch(w, WatchEvent::Upsert(obs("4", dropped)));
    assert!(h.has(|a| matches!(
        a,
        Action::Warn(Warning::TransitionsWentBack {
            found: 0,
            highest: 4
        })
    )));
    h.advance(secs(15.0));
    assert_eq!(h.update().unwrap().0.transitions, Some(5));

    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs(
        "3",
        released(7, "2020-01-01T00:01:00Z"),
    )));
    h.write(WriteResult::Conflict);
    h.read(ReadResult::NotFound);
    // A missing Lease is created after one lease duration.
    h.wait_absent();
    let created = h.out.iter().rev().find_map(|a| match a {
        Action::Create { record, .. } => Some(record.clone()),
        _ => None,
    });
    assert_eq!(created.expect("created").transitions, Some(8));
}

/// Item: work that ignores cancellation is given up on: the candidate
/// stands again, and never releases a lease that work may still act under.
#[test]
fn abandoned_work_lets_the_election_go_on_but_is_never_released() {
    let (mut h, _) = H::leading();
    let term = h.core.term().unwrap().clone();
    h.feed(Input::Shutdown);
    h.feed(Input::WorkEnded(WorkEnd::Abandoned));
    assert!(h.has(|a| *a == Action::Warn(Warning::WorkAbandoned { term: term.clone() })));
    assert!(
        h.update().is_none(),
        "released a lease whose work may run: {:?}",
        h.out
    );
    assert!(h.has(|a| *a == Action::Stopped));

    let (mut h, w) = H::leading();
    h.watch(w, WatchEvent::Upsert(obs("5", held_by("pod-b", 15, 1))));
    h.feed(Input::WorkEnded(WorkEnd::Abandoned));
    h.take();
    h.watch(
        w,
        WatchEvent::Upsert(obs("6", released(1, "2020-01-01T00:01:00Z"))),
    );
    assert!(
        h.update().is_some(),
        "still a candidate after abandoned work"
    );
}

/// Item: an acquire answer older than a record already known never makes
/// a leader (the admin overwrote the Lease after our write applied).
#[test]
fn no_step_up_on_an_answer_older_than_the_known_record() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs(
        "7",
        released(1, "2020-01-01T00:01:00Z"),
    )));
    let (attempt, _) = h.update().unwrap();
    let op = h.last_op();
    h.watch(w, WatchEvent::Upsert(obs("9", held_by("pod-b", 15, 3))));
    h.feed(Input::WriteDone {
        op,
        result: WriteResult::Ok(obs("8", attempt)),
    });
    assert!(
        !h.has(|a| matches!(a, Action::StepUp { .. })),
        "{:?}",
        h.out
    );
    assert!(h.core.term().is_none());
}

/// Item: shutdown while an acquire's outcome is unknown reads first and
/// releases the lease if the write did apply.
#[test]
fn shutdown_mid_acquire_resolves_with_a_read_and_releases() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs(
        "3",
        released(1, "2020-01-01T00:01:00Z"),
    )));
    let (attempt, _) = h.update().unwrap();
    h.feed(Input::Shutdown);
    h.take();
    h.advance(secs(5.0)); // the acquire times out: outcome unknown
    assert!(
        !h.has(|a| *a == Action::Stopped),
        "stopped without a read: {:?}",
        h.out
    );
    h.advance(secs(4.5)); // after the backoff (at most 2.2 × 2 s), a read
    h.read(ReadResult::Found(obs("4", attempt)));
    let (release, rv) = h.update().expect("releases the term it may hold");
    assert_eq!((release.holder.as_str(), rv.as_str()), ("", "4"));
    h.write(WriteResult::Ok(obs("5", release)));
    assert!(h.has(|a| *a == Action::Stopped));
}

/// Item: no "following ourselves" after a deadline step-down or at
/// shutdown, and a re-lead after the deadline is a new term.
#[test]
fn never_following_itself_and_relead_is_a_new_term() {
    let (mut h, _) = H::leading();
    let term = h.core.term().unwrap().clone();
    h.take();
    h.advance(secs(10.0));
    assert!(h.has(|a| *a
        == Action::StepDown {
            reason: StepDownReason::RenewDeadline
        }));
    assert!(
        h.has(|a| *a == Action::Following { holder: None }),
        "{:?}",
        h.out
    );
    assert!(!h.has(|a| matches!(a, Action::Following { holder: Some(x) } if x == ME)));
    h.feed(Input::WorkEnded(WorkEnd::Stopped));
    let op = h.out.iter().rev().find_map(|a| match a {
        Action::Get { op, .. } => Some(*op),
        _ => None,
    });
    h.take();
    h.feed(Input::ReadDone {
        op: op.expect("re-reads after a deadline step-down"),
        result: ReadResult::Found(obs("1", h.core_record(&term))),
    });
    let (retake, _) = h.update().expect("retakes its own leftover term");
    assert_eq!(retake.transitions, Some(term.transitions + 1));
    h.write(WriteResult::Ok(obs("2", retake)));
    assert!(
        h.has(|a| matches!(a, Action::StepUp { term: t } if t.transitions == term.transitions + 1))
    );
}

/// A late answer never extends a term whose deadline already passed.
#[test]
fn deadline_is_judged_before_a_late_answer() {
    let (mut h, _) = H::leading();
    h.advance(secs(2.0));
    let (renew, _) = h.update().unwrap();
    let op = h.last_op();
    h.take();
    // The loop was starved: the answer is handled 9 s after it was sent,
    // past the deadline of the acquiring write (10 s from its start).
    h.now = h.now + secs(7.5);
    h.feed(Input::WriteDone {
        op,
        result: WriteResult::Ok(obs("2", renew)),
    });
    assert!(
        h.core.term().is_some(),
        "renew sent at +2 s keeps it until +12 s"
    );
    h.now = h.now + secs(2.5);
    h.feed(Input::Timeout);
    assert!(h.has(|a| *a
        == Action::StepDown {
            reason: StepDownReason::RenewDeadline
        }));
    // The watchdog path: a forced step-down.
    let (mut h, _) = H::leading();
    h.feed(Input::WatchdogFired);
    assert!(h.has(|a| *a
        == Action::StepDown {
            reason: StepDownReason::RenewDeadline
        }));
}

/// Item: a candidate that has never seen the Lease cannot tell a first
/// start from a deletion under a live leader, so it waits one lease
/// duration before creating it.
#[test]
fn a_lease_never_seen_is_created_only_after_one_lease_duration() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::NotFound);
    h.advance(secs(14.999));
    assert!(
        !h.has(|a| matches!(a, Action::Create { .. })),
        "{:?}",
        h.out
    );
    h.advance(secs(0.001));
    assert!(h.has(|a| matches!(a, Action::Create { .. })), "{:?}", h.out);
}

/// A candidate cut off while the Lease was missing may have missed its
/// creation and deletion: seeing it missing again after the gap starts the
/// wait anew.
#[test]
fn missing_again_after_a_gap_restarts_the_wait() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::NotFound);
    h.advance(secs(10.0));
    // The watch breaks; a poll (after the gap) finds the Lease missing.
    h.watch(w, WatchEvent::Ended);
    h.take();
    let mut seen_again = None;
    for _ in 0..300 {
        h.advance(secs(0.1));
        if matches!(h.out.last(), Some(Action::Get { .. })) {
            h.read(ReadResult::NotFound);
            seen_again.get_or_insert(h.now);
        }
        if h.has(|a| matches!(a, Action::Create { .. })) {
            break;
        }
    }
    assert!(
        h.has(|a| matches!(a, Action::Create { .. })),
        "never created"
    );
    let seen_again = seen_again.expect("polled while the watch was down");
    let created_at = h.now;
    assert!(
        created_at.saturating_since(seen_again) >= secs(15.0) - secs(0.1),
        "created {:?} after seeing it missing again",
        created_at.saturating_since(seen_again)
    );
}

/// Item: a leader whose work keeps failing resigns: it steps down, releases
/// once the work stopped, leaves the lease to others for the hold-back, and
/// stays a candidate that takes the lease again afterwards if nobody did.
#[test]
fn resigning_releases_and_holds_back_but_stays_a_candidate() {
    let (mut h, w) = H::leading();
    h.feed(Input::Resign {
        hold_back: secs(30.0),
    });
    assert!(h.has(|a| *a
        == Action::StepDown {
            reason: StepDownReason::Resigned
        }));
    assert!(h.update().is_none(), "released before the work stopped");
    h.feed(Input::WorkEnded(WorkEnd::Stopped));
    let (release, rv) = h.update().expect("releases after the work stopped");
    assert_eq!(
        (release.holder.as_str(), release.duration_secs),
        ("", Some(1))
    );
    assert_eq!(rv, "1");
    h.write(WriteResult::Ok(obs("2", release.clone())));
    assert!(h.has(|a| *a == Action::Released));
    assert!(
        !h.core.is_stopped(),
        "resigning is not leaving the election"
    );
    h.take();
    h.watch(w, WatchEvent::Upsert(obs("2", release)));
    h.advance(secs(29.9));
    assert!(
        h.update().is_none(),
        "took the lease back during the hold-back"
    );
    h.advance(secs(0.2));
    let (again, _) = h.update().expect("stands again after the hold-back");
    assert_eq!(again.holder, ME);
}

/// A deferral (several elections in one program) delays taking a free
/// lease by that long, can be changed while waiting, and never delays a
/// step-down or retaking a leftover term of our own.
#[test]
fn deferred_acquisition_waits_past_a_free_lease_and_never_delays_step_down() {
    let mut h = H::new(true);
    h.feed(Input::DeferAcquisition(secs(3.0)));
    h.read(ReadResult::Found(obs("3", held_by("", 1, 2))));
    assert!(h.update().is_none(), "took a free lease without deferring");
    h.advance(secs(2.9));
    assert!(h.update().is_none(), "took it before the deferral ended");
    h.advance(secs(0.2));
    assert_eq!(h.update().expect("takes it after").0.holder, ME);

    // Shortening the deferral while waiting takes effect at once.
    let mut h = H::new(true);
    h.feed(Input::DeferAcquisition(secs(10.0)));
    h.read(ReadResult::Found(obs("3", held_by("", 1, 2))));
    h.advance(secs(1.0));
    assert!(h.update().is_none());
    h.feed(Input::DeferAcquisition(secs(0.5)));
    assert!(h.update().is_some(), "a shorter deferral was not applied");

    // A leader with a deferral still steps down at once on another holder.
    let (mut h, w) = H::leading();
    h.feed(Input::DeferAcquisition(secs(30.0)));
    h.watch(w, WatchEvent::Upsert(obs("2", held_by("pod-b", 15, 1))));
    assert!(h.has(|a| matches!(a, Action::StepDown { .. })));
}

/// A paused candidate takes no lease, however free; resumed, it takes a
/// free one at once. A pause never ends a term already led.
#[test]
fn a_paused_candidate_takes_nothing_until_resumed() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.feed(Input::PauseAcquisition(true));
    h.read(ReadResult::Found(obs("3", held_by("", 1, 2))));
    assert!(h.update().is_none(), "took a free lease while paused");
    h.advance(secs(60.0));
    assert!(h.update().is_none(), "took it later while still paused");
    h.feed(Input::PauseAcquisition(false));
    assert_eq!(h.update().expect("takes it once resumed").0.holder, ME);

    let (mut h, _) = H::leading();
    h.feed(Input::PauseAcquisition(true));
    assert!(!h.has(|a| matches!(a, Action::StepDown { .. })));
    h.advance(secs(2.5));
    let (renew, _) = h.update().expect("a paused leader still renews");
    assert_eq!(renew.holder, ME);
}

/// The record `term` left, with its holder overwritten to `holder`.
fn overwritten(h: &H, term: &Term, holder: &str) -> LeaseRecord {
    LeaseRecord {
        holder: holder.into(),
        ..h.core_record(term)
    }
}

#[test]
fn an_overwritten_leader_acknowledges_its_stop_once_its_work_has_ended() {
    let (mut h, w) = H::leading();
    let term = h.core.term().unwrap().clone();
    let record = overwritten(&h, &term, "pod-b");
    h.watch(w, WatchEvent::Upsert(obs("2", record.clone())));
    assert!(h.has(
        |a| matches!(a, Action::StepDown { reason: StepDownReason::OtherHolder(b) } if b == "pod-b")
    ));
    assert!(
        !h.has(|a| matches!(a, Action::Acknowledge { .. })),
        "not while the work may still run: {:?}",
        h.out
    );
    h.take();
    h.feed(Input::WorkEnded(WorkEnd::Stopped));
    let ack = Action::Acknowledge {
        op: h.last_op(),
        stopped: term.clone(),
        resource_version: "2".into(),
    };
    assert!(h.has(|a| *a == ack), "{:?}", h.out);
    let mut stored = obs("3", record);
    stored.stopped = Some(term.clone());
    h.write(WriteResult::Ok(stored.clone()));
    assert!(h.has(|a| *a == Action::Acknowledged(term.clone())));
    h.take();
    // Written once: the record now carries it.
    h.advance(secs(3.0));
    assert!(
        !h.has(|a| matches!(a, Action::Acknowledge { .. })),
        "{:?}",
        h.out
    );
}

#[test]
fn abandoned_work_or_a_record_that_moved_on_is_not_acknowledged() {
    let (mut h, w) = H::leading();
    let term = h.core.term().unwrap().clone();
    h.watch(
        w,
        WatchEvent::Upsert(obs("2", overwritten(&h, &term, "pod-b"))),
    );
    h.feed(Input::WorkEnded(WorkEnd::Abandoned));
    assert!(
        !h.has(|a| matches!(a, Action::Acknowledge { .. })),
        "{:?}",
        h.out
    );

    let (mut h, w) = H::leading();
    let term = h.core.term().unwrap().clone();
    h.watch(
        w,
        WatchEvent::Upsert(obs("2", overwritten(&h, &term, "pod-b"))),
    );
    // pod-b takes it with a term of its own before our work has ended.
    h.watch(
        w,
        WatchEvent::Upsert(obs("3", held_by("pod-b", 15, term.transitions + 1))),
    );
    h.feed(Input::WorkEnded(WorkEnd::Stopped));
    assert!(
        !h.has(|a| matches!(a, Action::Acknowledge { .. })),
        "{:?}",
        h.out
    );
}

#[test]
fn a_conflicting_acknowledgement_is_retried_on_the_fresh_record_a_few_times() {
    let (mut h, w) = H::leading();
    let term = h.core.term().unwrap().clone();
    let record = overwritten(&h, &term, "pod-b");
    h.watch(w, WatchEvent::Upsert(obs("2", record.clone())));
    h.feed(Input::WorkEnded(WorkEnd::Stopped));
    for attempt in 0..super::acknowledge::ATTEMPTS {
        assert!(
            h.has(|a| matches!(a, Action::Acknowledge { .. })),
            "attempt {attempt}: {:?}",
            h.out
        );
        h.write(WriteResult::Conflict);
        let get = h.last_op();
        h.take();
        // The re-read finds the same record (someone else's label edit).
        let rv = (10 + u32::from(attempt)).to_string();
        h.feed(Input::ReadDone {
            op: get,
            result: ReadResult::Found(obs(&rv, record.clone())),
        });
    }
    assert!(
        !h.has(|a| matches!(a, Action::Acknowledge { .. })),
        "given up after the attempts: {:?}",
        h.out
    );
}

#[test]
fn the_candidate_an_acknowledged_overwrite_names_takes_over_at_once() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    let old = Term {
        holder: "pod-z".into(),
        acquire_time: WallTime::parse_rfc3339("2020-01-01T00:00:00Z").unwrap(),
        transitions: 3,
    };
    h.read(ReadResult::Found(obs("1", held_by("pod-z", 15, 3))));
    h.take();
    // Named by an overwrite: still waits while pod-z's work may run.
    h.watch(w, WatchEvent::Upsert(obs("2", held_by(ME, 15, 3))));
    h.advance(secs(1.0));
    assert!(h.update().is_none(), "{:?}", h.out);
    // pod-z acknowledges: taken at once, with a term of our own.
    let mut acked = obs("3", held_by(ME, 15, 3));
    acked.stopped = Some(old.clone());
    h.watch(w, WatchEvent::Upsert(acked));
    let (record, rv) = h.update().expect("an acquiring write at once");
    assert_eq!((record.holder.as_str(), rv.as_str()), (ME, "3"));
    assert_eq!(record.transitions, Some(4));
    assert_eq!(record.acquire_time, Some(h.wall));
}

#[test]
fn an_acknowledgement_frees_only_for_the_named_candidate_or_a_cleared_holder() {
    let old = Term {
        holder: "pod-z".into(),
        acquire_time: WallTime::parse_rfc3339("2020-01-01T00:00:00Z").unwrap(),
        transitions: 3,
    };
    let seen = |record: LeaseRecord, stopped: Term| {
        let mut h = H::new(true);
        let w = h.watch_id();
        h.watch(w, WatchEvent::Started);
        h.read(ReadResult::Found(obs("1", held_by("pod-z", 15, 3))));
        let mut o = obs("2", record);
        o.stopped = Some(stopped);
        h.take();
        h.watch(w, WatchEvent::Upsert(o));
        h.advance(secs(1.0));
        h.update().is_some()
    };
    // Another candidate is named: it takes over, we wait.
    assert!(!seen(held_by("pod-b", 15, 3), old.clone()));
    // Nobody is named: anyone may.
    assert!(seen(
        LeaseRecord {
            holder: String::new(),
            ..held_by("pod-z", 15, 3)
        },
        old.clone()
    ));
    // The acknowledgement is of another term than the record comes from.
    let earlier = Term {
        transitions: 2,
        ..old.clone()
    };
    assert!(!seen(held_by(ME, 15, 3), earlier));
    assert!(seen(held_by(ME, 15, 3), old));
}

#[test]
fn a_create_that_lands_after_a_deletion_under_a_leader_starts_no_term_until_that_record_expired() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::NotFound);
    h.wait_absent();
    let Some(Action::Create { record, .. }) = h.out.last().cloned() else {
        panic!("no create: {:?}", h.out)
    };
    // While the create is in flight: another candidate's create wins and
    // an admin deletes that Lease; ours lands after the deletion.
    h.watch(w, WatchEvent::Upsert(obs("5", held_by("pod-b", 15, 0))));
    h.watch(w, WatchEvent::Deleted);
    h.write(WriteResult::Ok(obs("6", record.clone())));
    assert!(
        !h.has(|a| matches!(a, Action::StepUp { .. })),
        "no term on a create that crossed a deletion: {:?}",
        h.out
    );
    assert!(h.has(|a| matches!(a, Action::Warn(Warning::CreateCrossedDeletion))));
    h.take();
    // Our record is waited out like anyone's, then taken over with a new term.
    for _ in 0..28 {
        h.advance(secs(0.5));
        assert!(h.update().is_none(), "taken over before the record expired");
    }
    h.advance(secs(2.0));
    let (takeover, rv) = h.update().expect("taken over once it expired");
    assert_eq!(rv, "6");
    assert_eq!(takeover.transitions, Some(1), "a new term");
    h.write(WriteResult::Ok(obs("7", takeover)));
    assert!(h.has(|a| matches!(a, Action::StepUp { term } if term.transitions == 1)));
}
