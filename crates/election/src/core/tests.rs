//! One focused test per contract rule, driving the core by hand.

use std::time::Duration;

use super::*;

const ME: &str = "pod-a";

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
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
        while let Some(a) = self.core.poll_action() {
            self.out.push(a);
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
        for kind in TimerKind::ALL {
            self.feed(Input::TimerFired(kind));
        }
    }

    fn last_op(&self) -> OpId {
        self.out
            .iter()
            .rev()
            .find_map(|a| match a {
                Action::Get { op, .. } | Action::Create { op, .. } | Action::Update { op, .. } => {
                    Some(*op)
                }
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
    assert!(h.has(|a| *a
        == Action::SetTimer {
            kind: TimerKind::Expiry,
            at: expiry
        }));
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
    assert!(h.has(|a| matches!(a, Action::SetTimer { kind: TimerKind::Expiry, at } if *at == h.now + secs(3600.0))));
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
    h.read(ReadResult::Found(obs("4", held_by("", 1, 3))));
    assert_eq!(h.update().unwrap().1, "4");
}

#[test]
fn failed_renew_rereads_before_the_next_write() {
    let (mut h, _) = H::leading();
    h.advance(secs(2.0));
    h.write(WriteResult::Failed(Failure::Other));
    h.take();
    h.advance(secs(2.0));
    assert!(
        matches!(h.out.first(), Some(Action::Get { .. })),
        "{:?}",
        h.out
    );
}

#[test]
fn leader_steps_down_at_renew_deadline_from_start_of_last_good_renew() {
    let (mut h, _) = H::leading();
    h.advance(secs(2.0)); // renew sent at t0 + 2
    h.advance(secs(1.5)); // ...and succeeds 1.5 s later
    let (record, _) = h.update().unwrap();
    h.write(WriteResult::Ok(obs("2", record)));
    assert!(h.has(|a| *a
        == Action::SetTimer {
            kind: TimerKind::RenewDeadline,
            at: h.now + secs(8.5)
        }));
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
    h.feed(Input::LeaderWorkStopped);
    h.take();
    h.watch(w, WatchEvent::Upsert(obs("6", held_by("", 1, 1))));
    let (record, rv) = h.update().expect("released lease taken at once");
    assert_eq!((rv.as_str(), record.transitions), ("6", Some(2)));
    h.write(WriteResult::Ok(obs("7", record)));
    assert!(h.has(|a| matches!(a, Action::StepUp { term } if term.transitions == 2)));
}

#[test]
fn no_new_term_until_the_previous_leader_work_stopped() {
    let (mut h, w) = H::leading();
    h.watch(w, WatchEvent::Upsert(obs("5", held_by("", 1, 1))));
    assert!(h.update().is_none(), "acquired while old work still runs");
    h.feed(Input::LeaderWorkStopped);
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
fn a_timed_out_acquire_later_seen_applied_is_confirmed() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs("3", held_by("", 1, 2))));
    let (attempt, _) = h.update().unwrap();
    h.advance(secs(5.0)); // the call times out in the core
    assert!(!h.has(|a| matches!(a, Action::StepUp { .. })));
    h.advance(secs(4.5)); // backoff, then a read shows it applied
    h.read(ReadResult::Found(obs("4", attempt.clone())));
    let (confirm, rv) = h.update().expect("confirms its own term");
    assert_eq!(rv, "4");
    assert_eq!(
        (confirm.acquire_time, confirm.transitions),
        (attempt.acquire_time, attempt.transitions)
    );
    h.write(WriteResult::Ok(obs("5", confirm)));
    assert!(h.has(|a| matches!(a, Action::StepUp { term } if term.transitions == 3)));
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
    h.feed(Input::LeaderWorkStopped);
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
    assert_eq!(h.out.last(), Some(&Action::Stopped));
    assert!(h.core.is_stopped());
}

#[test]
fn shutdown_without_release_stops_without_writing() {
    let mut h = H::new(false);
    h.read(ReadResult::NotFound);
    let Some(Action::Create { record, .. }) = h.out.last().cloned() else {
        panic!()
    };
    h.write(WriteResult::Ok(obs("1", record)));
    h.take();
    h.feed(Input::Shutdown);
    h.feed(Input::LeaderWorkStopped);
    assert!(h.update().is_none());
    assert_eq!(h.out.last(), Some(&Action::Stopped));
}

#[test]
fn polls_with_jitter_only_while_the_watch_is_down() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Started);
    h.read(ReadResult::Found(obs("3", held_by("pod-b", 15, 0))));
    assert!(
        !h.has(|a| matches!(
            a,
            Action::SetTimer {
                kind: TimerKind::Poll,
                ..
            }
        )),
        "{:?}",
        h.out
    );
    h.take();
    h.advance(secs(5.0));
    h.watch(w, WatchEvent::Ended);
    // An ended stream resumes from the last version at once.
    assert!(h.has(|a| matches!(a, Action::StartWatch { from: Some(v), .. } if v == "3")));
    let poll = h.out.iter().find_map(|a| match a {
        Action::SetTimer {
            kind: TimerKind::Poll,
            at,
        } => Some(at.saturating_since(h.now)),
        _ => None,
    });
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
fn forbidden_watch_warns_once_and_falls_back_to_polling() {
    let mut h = H::new(true);
    let w = h.watch_id();
    h.watch(w, WatchEvent::Failed(Failure::Forbidden));
    h.read(ReadResult::Found(obs("3", held_by("pod-b", 15, 0))));
    assert!(h.has(|a| *a == Action::Warn(Warning::WatchForbidden)));
    assert!(h.has(|a| matches!(
        a,
        Action::SetTimer {
            kind: TimerKind::Poll,
            ..
        }
    )));
    h.take();
    h.advance(secs(20.0));
    let w2 = h.watch_id();
    h.watch(w2, WatchEvent::Failed(Failure::Forbidden));
    assert!(!h.has(|a| matches!(a, Action::Warn(_))), "warned twice");
    // Still elects by polling: the lease expired meanwhile.
    assert!(h.update().is_some() || h.has(|a| matches!(a, Action::Get { .. })));
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
