//! Requests: deciding which one to send next in each phase, building them
//! as client-go's LeaseLock would, and applying their answers.

use super::io::{Event, Failure, ReadResult, Request, Warning, WriteResult};
use super::machine::{Core, InFlight, OpKind, WatchState};
use super::phase::Phase;
use super::record::{LeaseRecord, Observed, Term};
use super::time::{Instant, WallTime};
use super::timers::TimerKind;
use super::view::{Known, rv_older};

impl Core {
    // ---- what to send next ------------------------------------------------

    pub(super) fn progress_candidate(&mut self, now: Instant, wall: WallTime) {
        self.ensure_watch(now);
        if self.op.is_none() && !self.gated() {
            if self.read_due || matches!(self.view.known, Known::Unknown) {
                self.send_get(now);
            } else if self.release_due {
                self.release_after_resign(now, wall);
            } else if !self.send_ack_if_due(now)
                && self.hold_back_until.is_none()
                && !self.acquire_paused
            {
                self.try_acquire(now, wall);
            }
        }
        self.schedule_poll(now);
    }

    /// After resigning: release our term if the Lease still shows it (and
    /// no work of ours may still run under it).
    fn release_after_resign(&mut self, now: Instant, wall: WallTime) {
        let target = self.view.present().filter(|o| {
            self.own_term_in(o).is_some() && !self.abandoned.iter().any(|t| o.record.is_term(t))
        });
        match target.cloned() {
            Some(obs) => self.send_release(now, wall, &obs),
            None => self.release_due = false,
        }
    }

    /// Rule: take the lease once it may be taken — at once for a graceful
    /// release or a leftover term of our own, otherwise once `observed_at`
    /// plus the wait has passed on the local clock; any deferral asked for
    /// is added (except for our own leftover term).
    fn try_acquire(&mut self, now: Instant, wall: WallTime) {
        let Some(free_at) = self.view.free_at() else {
            return;
        };
        let free_at = free_at + self.acquire_delay;
        match self.view.known.clone() {
            Known::Unknown => {}
            Known::Absent if now >= free_at => self.send_create(now, wall),
            Known::Present(obs) if self.own_term_in(&obs).is_some() || now >= free_at => {
                self.send_takeover(now, wall, &obs);
            }
            _ => self.timers.set(TimerKind::Expiry, free_at),
        }
    }

    /// Draining: no new term may start; keep the view fresh, and hold a
    /// shortened record of our own term until the work has stopped.
    pub(super) fn progress_idle(&mut self, now: Instant, wall: WallTime) {
        self.ensure_watch(now);
        if self.op.is_none() && !self.gated() {
            if self.read_due {
                self.send_get(now);
            } else if let Some(obs) = self.view.present().cloned()
                && obs.record.duration() < self.timings.lease_duration()
                && let Some(term) = self.own_term_in(&obs).cloned()
            {
                self.send_update(now, wall, &term, obs.resource_version, OpKind::Fence);
            }
        }
        self.schedule_poll(now);
    }

    pub(super) fn progress_leader(&mut self, now: Instant, wall: WallTime) {
        self.ensure_watch(now);
        if self.op.is_some() || self.gated() {
            return;
        }
        if self.read_due {
            self.emit(Event::SlowPath);
            self.send_get(now);
        } else if self.renew_due {
            self.send_renew(now, wall);
        }
    }

    /// Rule: poll (with jitter) only while the watch is down.
    pub(super) fn schedule_poll(&mut self, now: Instant) {
        if self.op.is_none() && self.watch != WatchState::Up && !self.timers.is_set(TimerKind::Poll)
        {
            let d = self.rng.scale(self.timings.retry_period(), 1.0, 2.2);
            self.timers.set(TimerKind::Poll, now + d);
        }
    }

    // ---- building requests ----------------------------------------------------

    pub(super) fn send_get(&mut self, now: Instant) {
        let op = self.new_op(now, OpKind::Read);
        let timeout = self.call_timeout();
        self.send(Request::Get { op, timeout });
    }

    fn record_for(&self, term: &Term, wall: WallTime) -> LeaseRecord {
        LeaseRecord {
            holder: self.id.clone(),
            duration_secs: Some(self.timings.lease_duration_seconds()),
            acquire_time: Some(term.acquire_time),
            renew_time: Some(wall),
            transitions: Some(term.transitions),
        }
    }

    fn send_create(&mut self, now: Instant, wall: WallTime) {
        let term = Term {
            holder: self.id.clone(),
            acquire_time: wall,
            transitions: self.view.next_transitions(None),
        };
        self.remember_own(term.clone());
        let record = self.record_for(&term, wall);
        let op = self.new_op(now, OpKind::Acquire(term));
        self.create_crossed = Some(false);
        let timeout = self.call_timeout();
        self.send(Request::Create {
            op,
            record,
            timeout,
        });
    }

    /// Rule: taking over sets acquireTime = renewTime = now and
    /// transitions above every value seen on this Lease.
    fn send_takeover(&mut self, now: Instant, wall: WallTime, obs: &Observed) {
        let term = Term {
            holder: self.id.clone(),
            acquire_time: wall,
            transitions: self.view.next_transitions(Some(&obs.record)),
        };
        self.remember_own(term.clone());
        let rv = obs.resource_version.clone();
        self.send_update(now, wall, &term, rv, OpKind::Acquire(term.clone()));
    }

    /// Rule: renew with the cached version, keeping acquireTime and transitions.
    fn send_renew(&mut self, now: Instant, wall: WallTime) {
        let Some(l) = self.leader() else { return };
        let (term, rv) = (l.term.clone(), l.resource_version.clone());
        self.send_update(now, wall, &term, rv, OpKind::Renew(wall));
    }

    /// Rule: every write carries the resourceVersion of the record it is
    /// based on.
    fn send_update(&mut self, now: Instant, wall: WallTime, term: &Term, rv: String, kind: OpKind) {
        let record = self.record_for(term, wall);
        let op = self.new_op(now, kind);
        let timeout = self.call_timeout();
        self.send(Request::Update {
            op,
            record,
            resource_version: rv,
            timeout,
        });
    }

    /// Rule: release writes holder "", duration 1, acquire = renew = now,
    /// transitions unchanged.
    pub(super) fn send_release(&mut self, now: Instant, wall: WallTime, obs: &Observed) {
        let record = LeaseRecord {
            holder: String::new(),
            duration_secs: Some(1),
            acquire_time: Some(wall),
            renew_time: Some(wall),
            transitions: Some(obs.record.transitions_or_zero()),
        };
        let op = self.new_op(now, OpKind::Release);
        let timeout = self.call_timeout();
        self.send(Request::Update {
            op,
            record,
            resource_version: obs.resource_version.clone(),
            timeout,
        });
    }

    // ---- answers ---------------------------------------------------------------

    pub(super) fn on_read(&mut self, now: Instant, result: ReadResult, _f: &InFlight) {
        match result {
            ReadResult::Found(obs) => {
                self.resolved_by_read();
                self.observe(now, obs);
            }
            ReadResult::NotFound => {
                self.resolved_by_read();
                self.observe_absent(now);
            }
            ReadResult::Failed(_) => self.backoff(now),
        }
    }

    fn resolved_by_read(&mut self) {
        self.read_due = false;
        self.in_doubt = false;
        self.watch_needs_read = false;
    }

    pub(super) fn on_write(&mut self, now: Instant, f: InFlight, result: WriteResult) {
        match result {
            WriteResult::Ok(obs) => self.on_write_ok(now, f, obs),
            // Rule: a create refused with 404 means the namespace is
            // missing: back off (growing) and say so; never a hot loop.
            WriteResult::NotFound
                if matches!(f.kind, OpKind::Acquire(_)) && self.view.present().is_none() =>
            {
                self.create_not_found = self.create_not_found.saturating_add(1);
                self.emit(Event::Warn(Warning::NamespaceNotFound));
                let factor = 1u32 << self.create_not_found.min(4);
                let d = self.rng.scale(self.timings.retry_period(), 1.0, 2.2) * factor;
                self.timers.set(TimerKind::Backoff, now + d);
                self.read_due = true;
            }
            // Rule: 409 means someone else wrote: re-read, no backoff.
            WriteResult::Conflict | WriteResult::NotFound => {
                if matches!(f.kind, OpKind::Acknowledge(_)) {
                    self.ack_attempt_failed();
                }
                self.read_due = true;
                // The watch did not show that write in time; it may be a
                // stream silently stuck behind a dead connection: renew it.
                if self.watch == WatchState::Up {
                    self.watch = WatchState::Down;
                    self.view.gap = true;
                }
            }
            WriteResult::Failed(failure) => self.on_failed(now, f, failure),
        }
    }

    fn on_write_ok(&mut self, now: Instant, f: InFlight, obs: Observed) {
        self.create_not_found = 0;
        // Rule: an answer older than a record already known does not
        // count; the newer record decides (someone wrote after us).
        let stale = self
            .view
            .present()
            .is_some_and(|k| rv_older(&obs.resource_version, &k.resource_version));
        match f.kind {
            OpKind::Acquire(term) => {
                if stale {
                    return;
                }
                // Rule: a create that crossed another holder's record (it
                // landed after that record was deleted) starts no term: the
                // record is treated as anyone's, waited out for its
                // duration, then taken over with a new term. The deleted
                // record's leader may still be working until its deadline.
                if self.create_crossed.take() == Some(true) {
                    self.own_terms.retain(|t| *t != term);
                    self.emit(Event::Warn(Warning::CreateCrossedDeletion));
                    self.remember(now, &obs);
                    self.in_doubt = false;
                    return;
                }
                self.remember(now, &obs);
                if !obs.record.is_term(&term) {
                    self.read_due = true;
                    return;
                }
                self.in_doubt = false;
                let in_time = now < f.sent_at + self.timings.renew_deadline();
                if matches!(self.phase, Phase::Candidate) && in_time {
                    self.step_up(term, obs.resource_version, f.sent_at);
                }
                // Otherwise it is a leftover term of ours: released when
                // stopping, or retaken at once with a new term.
            }
            OpKind::Renew(_) => {
                if stale {
                    return;
                }
                if self.leader().is_some_and(|l| obs.record.is_term(&l.term)) {
                    self.credit(f.sent_at);
                    self.renew_due = false;
                    let next = f.sent_at + self.timings.retry_period();
                    self.timers.set(TimerKind::Renew, next);
                }
                self.observe(now, obs);
            }
            OpKind::Release => {
                self.remember(now, &obs);
                self.emit(Event::Released);
                self.release_due = false;
                if self.stopping {
                    self.stop();
                } else {
                    self.publish_following();
                }
            }
            OpKind::Acknowledge(term) => {
                if stale {
                    return;
                }
                self.observe(now, obs.clone());
                self.on_ack_written(&term, &obs);
            }
            OpKind::Read | OpKind::Fence => self.observe(now, obs),
        }
    }

    /// A request failed or timed out: it may or may not have applied.
    pub(super) fn on_failed(&mut self, now: Instant, f: InFlight, _failure: Failure) {
        match f.kind {
            OpKind::Acquire(_) | OpKind::Release | OpKind::Fence => self.in_doubt = true,
            OpKind::Renew(renew_time) => {
                self.in_doubt = true;
                if let Some(l) = self.leader_mut() {
                    if l.unknown_renews.len() >= 8 {
                        l.unknown_renews.remove(0);
                    }
                    l.unknown_renews.push((renew_time, f.sent_at));
                }
            }
            OpKind::Acknowledge(_) => self.ack_attempt_failed(),
            OpKind::Read => {}
        }
        // Rule: re-read only after a failure; retry with jittered backoff.
        self.backoff(now);
    }
}
