//! The core's timers: one deadline per kind, and the earliest of them for
//! [`Core::poll_timeout`](super::Core::poll_timeout).

use super::time::Instant;

/// A deadline the core keeps. Setting a kind again replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimerKind {
    /// The leader's next renew is due.
    Renew,
    /// The known record may be taken; attempt to acquire at this instant.
    Expiry,
    /// Poll the Lease (only while the watch is down).
    Poll,
    /// End of a backoff after a failed request.
    Backoff,
    /// Try to start the watch again.
    WatchRetry,
    /// The in-flight request's timeout.
    Request,
    /// Give up releasing during shutdown.
    StopDeadline,
    /// End of the hold-back after resigning.
    HoldBack,
}

const KINDS: usize = 8;

#[derive(Clone, Debug, Default)]
pub(super) struct Timers([Option<Instant>; KINDS]);

impl Timers {
    pub(super) fn set(&mut self, kind: TimerKind, at: Instant) {
        self.0[kind as usize] = Some(at);
    }

    pub(super) fn clear(&mut self, kind: TimerKind) {
        self.0[kind as usize] = None;
    }

    pub(super) fn get(&self, kind: TimerKind) -> Option<Instant> {
        self.0[kind as usize]
    }

    pub(super) fn is_set(&self, kind: TimerKind) -> bool {
        self.get(kind).is_some()
    }

    /// Clears the timer if it is due and reports whether it was, so no
    /// timer is ever left in the past.
    pub(super) fn take_due(&mut self, kind: TimerKind, now: Instant) -> bool {
        match self.get(kind) {
            Some(at) if now >= at => {
                self.clear(kind);
                true
            }
            _ => false,
        }
    }

    pub(super) fn earliest(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }

    pub(super) fn clear_all(&mut self) {
        self.0 = [None; KINDS];
    }
}
