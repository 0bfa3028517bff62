//! The stopped-term acknowledgement: a leader whose term was ended by an
//! edit of the Lease (another holder named, the holder cleared), once its
//! leader-only work has provably ended, records that on the Lease. The
//! candidate the record names (or anyone, when it names nobody) may then
//! take the Lease at once with its own acquiring write, instead of waiting
//! out a duration nobody is working under.
//!
//! Rules kept here:
//! - only work that ended (`WorkEnd::Stopped`) is acknowledged, never
//!   abandoned work;
//! - the acknowledgement is written only while the record still carries
//!   the term (its `acquireTime` and `leaseTransitions`) and names someone
//!   else or nobody, and is not a release (free already); it is based on the resourceVersion read (409 if the
//!   Lease changed) and leaves the record as it is;
//! - it may fail (RBAC revoked, partition): after a few attempts nothing
//!   changes and the others wait as before.

use super::io::{Event, Request};
use super::machine::{Core, OpKind};
use super::record::{Observed, Term};
use super::time::Instant;
use super::view::Known;

/// Attempts (conflicts and failures) before giving an acknowledgement up.
pub(super) const ATTEMPTS: u8 = 5;

impl Core {
    /// The work of `term` has ended: acknowledge it when the record calls
    /// for it.
    pub(super) fn ack_later(&mut self, term: Term) {
        self.ack_due = Some((term, ATTEMPTS));
    }

    /// The term to acknowledge and the record to write it on now, if
    /// any; forgets an acknowledgement that is no longer called for.
    fn ack_target(&mut self) -> Option<(Term, Observed)> {
        let (term, _) = self.ack_due.as_ref()?;
        let target = match &self.view.known {
            Known::Present(obs)
                if obs.record.comes_from(term)
                    && obs.record.holder != self.id
                    && !obs.record.is_release_shape()
                    && obs.stopped.as_ref() != Some(term)
                    && !self.abandoned.contains(term) =>
            {
                Some((term.clone(), obs.clone()))
            }
            Known::Unknown => return None,
            _ => None,
        };
        if target.is_none() {
            self.ack_due = None;
        }
        target
    }

    /// Sends the acknowledgement if one is called for; returns whether it did.
    pub(super) fn send_ack_if_due(&mut self, now: Instant) -> bool {
        let Some((term, obs)) = self.ack_target() else {
            return false;
        };
        let op = self.new_op(now, OpKind::Acknowledge(term.clone()));
        let timeout = self.call_timeout();
        self.send(Request::Acknowledge {
            op,
            stopped: term,
            resource_version: obs.resource_version,
            timeout,
        });
        true
    }

    /// The acknowledgement was written (or the answer shows the record).
    pub(super) fn on_ack_written(&mut self, term: &Term, obs: &Observed) {
        if obs.stopped.as_ref() == Some(term) {
            self.ack_due = None;
            self.emit(Event::Acknowledged { term: term.clone() });
        }
    }

    /// A conflict or failure: one attempt fewer.
    pub(super) fn ack_attempt_failed(&mut self) {
        if let Some((_, left)) = &mut self.ack_due {
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.ack_due = None;
            }
        }
    }
}
