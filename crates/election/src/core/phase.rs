//! Where a candidate is in its life: the phases are explicit so that every
//! rule can say in which phase it applies.

use std::time::Duration;

use super::record::Term;
use super::time::{Instant, WallTime};

/// The phase of one candidate.
#[derive(Clone, Debug)]
pub(super) enum Phase {
    /// Not leading, standing for election (acquires when the lease may be taken).
    Candidate,
    /// Leading a term this process acquired.
    Leading(Leader),
    /// Stepped down; the leader-only work of `term` has not ended yet, so
    /// no new term may start.
    Draining {
        /// The term that ended.
        term: Term,
    },
    /// Shutdown requested and no work runs: resolve a write in doubt, release if ours, stop.
    Finishing,
    /// Done; nothing more happens.
    Stopped,
}

/// The state of a term being led.
#[derive(Clone, Debug)]
pub(super) struct Leader {
    pub(super) term: Term,
    /// resourceVersion of the newest record of this term seen.
    pub(super) resource_version: String,
    /// Start of the last write known applied (renew or the acquiring write).
    pub(super) last_success_start: Instant,
    /// Renews whose outcome is unknown: their renewTime and send instant,
    /// credited if the record later shows them applied.
    pub(super) unknown_renews: Vec<(WallTime, Instant)>,
    /// The shortest `leaseDurationSeconds` in a record of this term seen
    /// since our last successful write (our configured duration if none
    /// was shorter): what others may use to judge the lease expired.
    pub(super) allowed: Duration,
}

impl Leader {
    /// Rule: step down at `last_success_start + renew_deadline`, or, when
    /// an edit shortened the record to `d`, at `last_success_start + d −
    /// (lease_duration − renew_deadline)`, keeping the configured margin
    /// for the work to stop before anyone else may take over.
    pub(super) fn deadline(&self, lease_duration: Duration, renew_deadline: Duration) -> Instant {
        let margin = lease_duration.saturating_sub(renew_deadline);
        let budget = self.allowed.min(lease_duration).saturating_sub(margin);
        self.last_success_start + budget.min(renew_deadline)
    }
}
