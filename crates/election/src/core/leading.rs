//! Terms: stepping up, renewing, and stepping down at the first sign of
//! loss. Stepping down makes the candidate a follower again; nothing but
//! shutdown ends candidacy.

use super::io::{Event, StepDownReason, Warning, WorkEnd};
use super::machine::Core;
use super::phase::{Leader, Phase};
use super::record::{Observed, Term};
use super::time::Instant;
use super::timers::TimerKind;

/// How many abandoned terms are remembered (never released).
const MAX_ABANDONED: usize = 8;

impl Core {
    /// Starts leading `term`, acquired by a write sent at `sent_at`.
    pub(super) fn step_up(&mut self, term: Term, resource_version: String, sent_at: Instant) {
        self.own_terms.retain(|t| t != &term);
        self.phase = Phase::Leading(Leader {
            term: term.clone(),
            resource_version,
            last_success_start: sent_at,
            unknown_renews: Vec::new(),
            allowed: self.timings.lease_duration(),
        });
        self.renew_due = false;
        self.published = None;
        self.timers.clear(TimerKind::Expiry);
        self.timers.clear(TimerKind::Poll);
        self.timers
            .set(TimerKind::Renew, sent_at + self.timings.retry_period());
        self.emit(Event::StepUp { term });
        self.emit(Event::Renewed);
    }

    /// A write of ours sent at `sent_at` is known applied.
    pub(super) fn credit(&mut self, sent_at: Instant) {
        let full = self.timings.lease_duration();
        if let Some(l) = self.leader_mut() {
            if sent_at > l.last_success_start {
                l.last_success_start = sent_at;
            }
            l.unknown_renews.clear();
            l.allowed = full;
            self.emit(Event::Renewed);
        }
    }

    /// A newer record was seen while leading.
    pub(super) fn leader_observes(&mut self, obs: &Observed) {
        let full = self.timings.lease_duration();
        let Some(l) = self.leader_mut() else { return };
        if obs.record.is_term(&l.term) {
            l.resource_version = obs.resource_version.clone();
            let applied = l
                .unknown_renews
                .iter()
                .filter(|(t, _)| Some(*t) == obs.record.renew_time)
                .map(|(_, s)| *s)
                .min();
            if let Some(sent_at) = applied {
                self.credit(sent_at);
            }
            // Rule: honour the duration of our own term's record as others
            // see it: renew at once to restore ours; the deadline shrinks
            // so the work stops before the short lease could expire.
            let seen = obs.record.duration();
            if seen < full
                && let Some(l) = self.leader_mut()
            {
                l.allowed = l.allowed.min(seen);
                self.renew_due = true;
                self.timers.clear(TimerKind::Renew);
                self.emit(Event::Warn(Warning::ShortenedDuration {
                    seconds: obs.record.duration_secs.unwrap_or(0),
                }));
            }
            return;
        }
        // Rule: another holder, another term of this identity, or a holder
        // cleared by someone else, seen while leading: step down now.
        let reason = if obs.record.is_free() {
            StepDownReason::Cleared
        } else if obs.record.holder == self.id {
            StepDownReason::OtherTerm
        } else {
            StepDownReason::OtherHolder(obs.record.holder.clone())
        };
        self.step_down(reason);
    }

    /// Rule: step down when the deadline (from the start of the last
    /// successful write) has passed, whatever calls are still hanging.
    pub(super) fn check_deadline(&mut self, now: Instant) {
        if self.step_down_deadline().is_some_and(|d| now >= d) {
            self.step_down(StepDownReason::RenewDeadline);
        }
    }

    /// Ends the term: the event comes first (drivers cancel the work on
    /// it), then the candidate waits for the work to end before any new term.
    pub(super) fn step_down(&mut self, reason: StepDownReason) {
        let Phase::Leading(l) = &self.phase else {
            return;
        };
        let term = l.term.clone();
        // After a shortened record the view is fresh; otherwise a deadline
        // step-down re-reads to learn what happened.
        let shortened = l.allowed < self.timings.lease_duration();
        self.phase = Phase::Draining { term: term.clone() };
        self.renew_due = false;
        self.timers.clear(TimerKind::Renew);
        if matches!(reason, StepDownReason::RenewDeadline) && !shortened {
            self.read_due = true;
        }
        self.remember_own(term.clone());
        self.emit(Event::StepDown { term, reason });
        self.publish_following();
    }

    /// Rule: resigning steps down like any loss, then releases the term
    /// once the work has stopped and holds back from acquiring for a while,
    /// so a healthy candidate takes over; the candidate stays in the
    /// election and may lead again after the hold-back.
    pub(super) fn on_resign(&mut self, now: Instant, hold_back: std::time::Duration) {
        if !matches!(self.phase, Phase::Leading(_)) || self.stopping {
            return;
        }
        self.hold_back_until = Some(now + hold_back);
        self.timers.set(TimerKind::HoldBack, now + hold_back);
        self.release_due = true;
        self.step_down(StepDownReason::Resigned);
    }

    /// The work of the last term ended: the candidate may lead again (or
    /// finish stopping).
    pub(super) fn on_work_ended(&mut self, end: WorkEnd) {
        let Phase::Draining { term } = &self.phase else {
            return;
        };
        let term = term.clone();
        if end == WorkEnd::Abandoned {
            if self.abandoned.len() >= MAX_ABANDONED {
                self.abandoned.remove(0);
            }
            self.abandoned.push(term.clone());
            self.emit(Event::Warn(Warning::WorkAbandoned { term }));
        } else {
            self.ack_later(term);
        }
        self.phase = if self.stopping {
            Phase::Finishing
        } else {
            Phase::Candidate
        };
        self.publish_following();
    }
}
