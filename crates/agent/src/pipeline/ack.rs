//! Delivery acknowledgements from outputs back to the input that produced
//! an event: the way an input that can replay (a file read from a
//! recorded offset) learns which of its events are safe, so it records
//! progress only for those.
//!
//! An event may carry one [`Ack`]. Its output settles it once the event
//! is delivered for good: written by the sink (or refused for good by the
//! server, which no replay would change), or, for a node-local input,
//! stored in the output's disk queue (a gated input's checkpoint is the
//! cluster's, so its events count only once the sink has them). An event lost before that (the process dies, a shutdown gives
//! up on a queue) is never acknowledged, so its input replays it after the
//! next start: delivery is at least once.

use std::fmt;
use std::sync::Arc;

/// Receives the acknowledgements of one producer's events.
pub trait AckTarget: Send + Sync + 'static {
    /// Event `seq` (a number the producer gave it) was delivered.
    fn acknowledged(&self, seq: u64);
}

/// The acknowledgement an event carries to its producer.
#[derive(Clone)]
pub struct Ack {
    target: Arc<dyn AckTarget>,
    seq: u64,
}

impl Ack {
    /// An acknowledgement of event `seq` for `target`.
    pub fn new(target: Arc<dyn AckTarget>, seq: u64) -> Self {
        Ack { target, seq }
    }

    /// Tells the producer the event was delivered.
    pub fn settle(self) {
        self.target.acknowledged(self.seq);
    }
}

impl fmt::Debug for Ack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ack").field("seq", &self.seq).finish()
    }
}

/// Positions of a stream in the order its events were queued, and the
/// newest one before which everything is delivered: the point a
/// checkpoint may move to. Outputs may acknowledge out of order (an
/// Elasticsearch bulk request judges each document); a position counts
/// only once every event queued before it is delivered too.
#[derive(Debug)]
pub struct InOrder<P> {
    /// The number of `pending[0]`.
    first: u64,
    /// Each position queued, and whether it is delivered.
    pending: std::collections::VecDeque<(P, bool)>,
}

impl<P> Default for InOrder<P> {
    fn default() -> Self {
        InOrder {
            first: 0,
            pending: std::collections::VecDeque::new(),
        }
    }
}

impl<P> InOrder<P> {
    /// Records the position after an event about to be queued; returns
    /// the number its acknowledgement carries.
    pub fn push(&mut self, pos: P) -> u64 {
        self.pending.push_back((pos, false));
        self.first + self.pending.len() as u64 - 1
    }

    /// Records a position reached without an event (a watch bookmark): it
    /// counts as delivered once everything before it is.
    pub fn push_done(&mut self, pos: P) -> Option<P> {
        let seq = self.push(pos);
        self.ack(seq)
    }

    /// Forgets the newest position if it is `seq`: its event was refused
    /// before it was queued.
    pub fn unpush(&mut self, seq: u64) {
        if self.pending.len() as u64 + self.first == seq + 1 {
            self.pending.pop_back();
        }
    }

    /// Marks `seq` delivered; returns the newest position before which
    /// everything is delivered, when that moved.
    pub fn ack(&mut self, seq: u64) -> Option<P> {
        let idx = seq.checked_sub(self.first)?;
        self.pending.get_mut(idx as usize)?.1 = true;
        let mut last = None;
        while self.pending.front().is_some_and(|(_, done)| *done) {
            last = self.pending.pop_front().map(|(p, _)| p);
            self.first += 1;
        }
        last
    }

    /// Positions queued and not yet delivered.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records what was acknowledged, in order.
    #[derive(Default)]
    pub(crate) struct Recorder(pub Mutex<Vec<u64>>);

    impl AckTarget for Recorder {
        fn acknowledged(&self, seq: u64) {
            self.0.lock().unwrap().push(seq);
        }
    }

    #[test]
    fn a_position_counts_once_everything_before_it_is_delivered() {
        let mut o = InOrder::default();
        let a = o.push("a");
        let b = o.push("b");
        let c = o.push("c");
        assert_eq!(o.ack(b), None, "a is still in flight");
        assert_eq!(o.ack(a), Some("b"));
        assert_eq!(o.push_done("bookmark"), None, "c is still in flight");
        assert_eq!(o.ack(c), Some("bookmark"));
        assert_eq!(o.in_flight(), 0);
        assert_eq!(o.ack(c), None, "acknowledged twice");
        let d = o.push("d");
        o.unpush(d);
        assert_eq!(o.push_done("e"), Some("e"));
    }

    #[test]
    fn settling_reaches_the_target_with_the_events_number() {
        let r = Arc::new(Recorder::default());
        let a = Ack::new(r.clone(), 7);
        let b = Ack::new(r.clone(), 8);
        b.settle();
        drop(a); // dropped unsettled: never acknowledged
        assert_eq!(*r.0.lock().unwrap(), [8]);
    }
}
