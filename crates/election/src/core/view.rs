//! What this candidate knows about the Lease, and when it may take it.
//!
//! Rules kept here:
//! - expiry is judged on the local clock: `observed_at` (when the record
//!   last changed here) plus a wait, never by comparing `renewTime`;
//! - only a graceful release (the release shape, freshly written) is free
//!   at once; a holder cleared any other way is free only after the last
//!   held record's duration from when the change was seen; a missing Lease
//!   (deleted, or never seen) after at least our own lease duration;
//! - a record that comes from a term its leader acknowledged as stopped
//!   (see `acknowledge`) is free at once for the candidate it names, or
//!   for anyone when it names nobody;
//! - stale answers (older resourceVersions) are ignored;
//! - the highest `leaseTransitions` ever seen is kept, so terms never go
//!   backwards.

use std::time::Duration;

use super::io::{Event, StepDownReason, Warning};
use super::machine::Core;
use super::phase::Phase;
use super::record::{LeaseRecord, Observed};
use super::time::Instant;
use super::timers::TimerKind;

/// A record duration above this multiple of ours is reported as suspicious.
const SUSPICIOUS_FACTOR: u32 = 4;

/// What the Lease looked like when last seen.
#[derive(Clone, Debug)]
pub(super) enum Known {
    /// Never read.
    Unknown,
    /// The Lease does not exist.
    Absent,
    /// The Lease as last seen.
    Present(Observed),
}

#[derive(Clone, Debug)]
pub(super) struct View {
    pub(super) known: Known,
    /// When `known` last changed, on the local monotonic clock.
    pub(super) observed_at: Instant,
    /// How long after `observed_at` the known state may be taken.
    pub(super) wait: Duration,
    /// Duration of the last held record seen: what a cleared holder or a
    /// deleted Lease must still wait out.
    pub(super) carry: Duration,
    /// Latest resourceVersion seen anywhere (watch resume point).
    pub(super) last_rv: Option<String>,
    /// Highest `leaseTransitions` seen on this Lease.
    pub(super) max_transitions: Option<i32>,
    warned_record: Option<(String, Option<i32>)>,
    warned_transitions: Option<i32>,
    /// Since the Lease was last seen missing, this candidate may have
    /// missed changes (a request failed, the watch went down): seeing it
    /// missing again then starts the wait anew, since it may have been
    /// created and deleted meanwhile.
    pub(super) gap: bool,
}

impl View {
    pub(super) fn new(now: Instant) -> View {
        View {
            known: Known::Unknown,
            observed_at: now,
            wait: Duration::ZERO,
            carry: Duration::ZERO,
            last_rv: None,
            max_transitions: None,
            warned_record: None,
            warned_transitions: None,
            gap: false,
        }
    }

    pub(super) fn holder(&self) -> Option<&str> {
        match &self.known {
            Known::Present(o) if !o.record.is_free() => Some(&o.record.holder),
            _ => None,
        }
    }

    pub(super) fn present(&self) -> Option<&Observed> {
        match &self.known {
            Known::Present(o) => Some(o),
            _ => None,
        }
    }

    /// When the known state may be taken by anyone (not counting terms of
    /// our own, which [`Core`] handles).
    pub(super) fn free_at(&self) -> Option<Instant> {
        match self.known {
            Known::Unknown => None,
            _ => Some(self.observed_at + self.wait),
        }
    }

    /// The transitions a new term must carry: above every value seen.
    pub(super) fn next_transitions(&self, record: Option<&LeaseRecord>) -> i32 {
        let found = record.map_or(0, LeaseRecord::transitions_or_zero);
        match self.max_transitions {
            Some(max) => max.max(found).saturating_add(1),
            None if record.is_some() => found.saturating_add(1),
            // A Lease created from nothing starts at 0, as client-go's does.
            None => 0,
        }
    }
}

impl Core {
    /// Stores a record; returns whether it is news (differs from, and is not
    /// older than, the one known). `observed_at` moves only on news.
    pub(super) fn remember(&mut self, now: Instant, obs: &Observed) -> bool {
        if self.create_crossed == Some(false)
            && !obs.record.is_free()
            && obs.record.holder != self.id
        {
            self.create_crossed = Some(true);
        }
        let previous = match &self.view.known {
            Known::Present(o) => {
                if o == obs || rv_older(&obs.resource_version, &o.resource_version) {
                    return false;
                }
                Some(o.record.clone())
            }
            _ => None,
        };
        self.view.last_rv = Some(obs.resource_version.clone());
        self.note_transitions(&obs.record);
        self.warn_about(&obs.record);
        let record = &obs.record;
        let view = &mut self.view;
        if !record.is_free() {
            view.wait = record.duration();
            view.carry = view.wait;
        } else if record.is_release_shape()
            && previous.is_none_or(|p| p.renew_time != record.renew_time)
        {
            // A graceful release, freshly written: free at once.
            view.wait = Duration::ZERO;
            view.carry = Duration::ZERO;
        } else {
            // Cleared by someone else: wait out the last holder's duration.
            view.wait = record.duration().max(view.carry);
            view.carry = view.wait;
        }
        if obs.comes_from_stopped_term() && (record.is_free() || record.holder == self.id) {
            // The leader of the term this record comes from said on the
            // Lease that its work has ended: the candidate it names (after
            // an overwrite), or anyone when it names nobody, may take it
            // now, with a term of its own. Everybody else still waits.
            view.wait = Duration::ZERO;
        }
        view.known = Known::Present(obs.clone());
        view.observed_at = now;
        self.timers.clear(TimerKind::Expiry);
        true
    }

    /// A record was read or watched.
    pub(super) fn observe(&mut self, now: Instant, obs: Observed) {
        if !self.remember(now, &obs) {
            return;
        }
        if matches!(self.phase, Phase::Leading(_)) {
            self.leader_observes(&obs);
            return;
        }
        // The watch often shows our own acquire before its answer arrives:
        // that is not "following ourselves", the answer decides in a moment.
        if let Some(super::machine::InFlight {
            kind: super::machine::OpKind::Acquire(term),
            ..
        }) = &self.op
            && obs.record.is_term(term)
        {
            return;
        }
        self.publish_following();
    }

    /// The Lease is gone (404 on read, or a DELETED event).
    pub(super) fn observe_absent(&mut self, now: Instant) {
        if !matches!(self.view.known, Known::Absent) || self.view.gap {
            self.view.gap = false;
            self.view.known = Known::Absent;
            self.view.observed_at = now;
            // Rule: a missing Lease is created only once it has been seen
            // missing for the last held record's duration, and never less
            // than our own lease duration: a candidate that never saw the
            // Lease (just started) or missed its last holder cannot tell a
            // first start from a deletion under a live leader.
            self.view.wait = self.view.carry.max(self.timings.lease_duration());
            self.timers.clear(TimerKind::Expiry);
        }
        self.view.last_rv = None;
        if matches!(self.phase, Phase::Leading(_)) {
            self.step_down(StepDownReason::Deleted);
        } else {
            self.publish_following();
        }
    }

    fn note_transitions(&mut self, record: &LeaseRecord) {
        let found = record.transitions_or_zero();
        match self.view.max_transitions {
            Some(max) if found < max => {
                if self.view.warned_transitions == Some(found) {
                    return;
                }
                self.view.warned_transitions = Some(found);
                self.emit(Event::Warn(Warning::TransitionsWentBack {
                    found,
                    highest: max,
                }));
            }
            _ => self.view.max_transitions = Some(found),
        }
    }

    fn warn_about(&mut self, record: &LeaseRecord) {
        if record.is_free() || record.holder == self.id {
            return;
        }
        let key = (record.holder.clone(), record.duration_secs);
        if self.view.warned_record.as_ref() == Some(&key) {
            return;
        }
        let configured = self.timings.lease_duration();
        let warning = match record.duration_secs {
            Some(s) if s > 0 => (record.duration() > configured * SUSPICIOUS_FACTOR).then(|| {
                Warning::SuspiciousDuration {
                    holder: key.0.clone(),
                    seconds: s,
                    configured,
                }
            }),
            _ => Some(Warning::MissingDuration {
                holder: key.0.clone(),
            }),
        };
        if let Some(w) = warning {
            self.view.warned_record = Some(key);
            self.emit(Event::Warn(w));
        }
    }

    /// Reports the holder while not leading. A leftover term of this very
    /// process is not "another holder": it is reported as none.
    pub(super) fn publish_following(&mut self) {
        if matches!(self.phase, Phase::Leading(_) | Phase::Stopped)
            || matches!(self.view.known, Known::Unknown)
        {
            return;
        }
        let own = self
            .view
            .present()
            .is_some_and(|o| self.own_term_in(o).is_some());
        let holder = if own {
            None
        } else {
            self.view.holder().map(str::to_owned)
        };
        if self.published.as_ref() != Some(&holder) {
            self.published = Some(holder.clone());
            self.emit(Event::Following { holder });
        }
    }
}

/// `a` is an older resourceVersion than `b`. resourceVersions are opaque
/// unless both are decimal integers (as the API server's are), in which
/// case they are ordered; opaque ones are never judged older.
pub(super) fn rv_older(a: &str, b: &str) -> bool {
    match (a.parse::<u128>(), b.parse::<u128>()) {
        (Ok(x), Ok(y)) => x < y,
        _ => false,
    }
}
