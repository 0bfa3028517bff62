//! The election record: the five `spec` fields of a Lease that client-go's
//! `LeaseLock` reads and writes, and the term a leader holds.

use std::time::Duration;

use super::time::WallTime;

/// The election fields of a Lease spec, as found (missing fields are
/// `None` or empty) or as this process is about to write them.
///
/// `strategy` and `preferredHolder` are not part of it: the driver keeps
/// whatever it found there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `holderIdentity`; empty when absent or released.
    pub holder: String,
    /// `leaseDurationSeconds` as found.
    pub duration_secs: Option<i32>,
    /// `acquireTime`; `None` when absent or unparseable.
    pub acquire_time: Option<WallTime>,
    /// `renewTime`; `None` when absent or unparseable.
    pub renew_time: Option<WallTime>,
    /// `leaseTransitions`; `None` when absent.
    pub transitions: Option<i32>,
}

impl LeaseRecord {
    /// No holder is named (released, cleared, or never held).
    pub fn is_free(&self) -> bool {
        self.holder.is_empty()
    }

    /// The shape of a graceful release as client-go and leasehold write it:
    /// no holder, `leaseDurationSeconds: 1`, `acquireTime == renewTime`.
    /// Only this shape makes a lease free at once; a holder cleared any
    /// other way is waited out like a held lease.
    pub fn is_release_shape(&self) -> bool {
        self.holder.is_empty()
            && self.duration_secs == Some(1)
            && self.renew_time.is_some()
            && self.acquire_time == self.renew_time
    }

    /// How long after this record was observed it expires. A missing, zero
    /// or negative duration means "already expired", as in client-go.
    pub fn duration(&self) -> Duration {
        match self.duration_secs {
            Some(s) if s > 0 => Duration::from_secs(s.unsigned_abs().into()),
            _ => Duration::ZERO,
        }
    }

    /// `leaseTransitions`, with absent read as zero (as client-go does).
    pub fn transitions_or_zero(&self) -> i32 {
        self.transitions.unwrap_or(0).max(0)
    }

    /// Whether this record carries `term`'s `acquireTime` and
    /// `leaseTransitions`, whoever it names now (an overwritten holder
    /// keeps them).
    pub fn comes_from(&self, term: &Term) -> bool {
        self.acquire_time == Some(term.acquire_time)
            && self.transitions_or_zero() == term.transitions
    }

    /// Whether this record is exactly `term` being held.
    pub fn is_term(&self, term: &Term) -> bool {
        self.holder == term.holder
            && self.acquire_time == Some(term.acquire_time)
            && self.transitions_or_zero() == term.transitions
    }
}

/// One tenure of one holder: `(holder, acquireTime, leaseTransitions)` as
/// written when it acquired. Two tenures of the same identity are different
/// terms, which is what lets a restarted pod (same name) tell its previous
/// container's lease from its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Term {
    /// The identity holding the lease.
    pub holder: String,
    /// `acquireTime` written when the term began.
    pub acquire_time: WallTime,
    /// `leaseTransitions` after acquiring; increases with every takeover,
    /// so downstream can drop data stamped with an older term.
    pub transitions: i32,
}

/// A record as read from the API server together with the
/// `resourceVersion` it was read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// `metadata.resourceVersion`, opaque.
    pub resource_version: String,
    /// The election fields.
    pub record: LeaseRecord,
    /// The term whose leader-only work its own holder declared stopped
    /// (the Lease's stopped-term annotation), if any.
    pub stopped: Option<Term>,
}

impl Observed {
    /// A record with no stopped-term acknowledgement.
    pub fn new(resource_version: impl Into<String>, record: LeaseRecord) -> Observed {
        Observed {
            resource_version: resource_version.into(),
            record,
            stopped: None,
        }
    }

    /// Whether the record still carries the term an acknowledgement names
    /// (its `acquireTime` and `leaseTransitions`, whatever holder it names
    /// now): nobody works under it any more. Only the term's own leader
    /// writes that acknowledgement, and every new term changes both
    /// fields, so a record that came from another term never matches.
    pub fn comes_from_stopped_term(&self) -> bool {
        self.stopped
            .as_ref()
            .is_some_and(|t| self.record.comes_from(t))
    }
}
