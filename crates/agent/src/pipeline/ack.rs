//! Delivery acknowledgements from outputs back to the input that produced
//! an event: the way an input that can replay (a file read from a
//! recorded offset) learns which of its events are safe, so it records
//! progress only for those.
//!
//! Every event carries one [`Ack`]. Its output settles it once the event
//! is delivered for good: written by the sink (or refused for good by the
//! server, which no replay would change), or, for a node-local input,
//! stored in the output's disk queue (a gated input's checkpoint is the
//! cluster's, so its events count only once the sink has them). An event
//! lost before that (its term ended, a shutdown gives up on a queue, the
//! process dies) is never acknowledged, so its input replays it after the
//! next start: delivery is at least once. Each ending is also counted per
//! input ([`Tally`]), so produced = delivered + dropped + discarded +
//! in flight can be checked from `/metrics`.

use std::fmt;
use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;

/// Receives the acknowledgements of one producer's events.
pub trait AckTarget: Send + Sync + 'static {
    /// Event `seq` (a number the producer gave it) was delivered, or
    /// refused for good: either way its producer may move past it.
    fn acknowledged(&self, seq: u64);
}

/// How an event's trip ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The sink has it (or already had it: same id).
    Delivered,
    /// The sink refused it for good (a mapping error, an event over the
    /// size limit): counted, never retried.
    Dropped,
    /// It never reached the sink and is not settled: its leadership term
    /// ended, or a shutdown gave up on it. A producer that replays reads
    /// it again from its last acknowledged checkpoint.
    Discarded,
}

/// Per-input counts of events queued and of how they ended. An event is
/// counted queued when its output takes it ([`Ack::arm`]) and then ended
/// exactly once, when its [`Ack`] is settled or dropped: queued =
/// delivered + dropped + discarded + in flight.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Events an output took.
    pub queued: Counter,
    /// Events the sink has (for a node-local input with a disk queue:
    /// stored there, which survives a restart like its checkpoint).
    pub delivered: Counter,
    /// Events refused for good.
    pub dropped: Counter,
    /// Events given up before the sink had them.
    pub discarded: Counter,
}

impl Tally {
    fn count(&self, outcome: Outcome) {
        match outcome {
            Outcome::Delivered => self.delivered.inc(),
            Outcome::Dropped => self.dropped.inc(),
            Outcome::Discarded => self.discarded.inc(),
        };
    }
}

/// The acknowledgement every event carries to its producer. It ends
/// exactly once: settled by the output (delivered, or dropped for good),
/// or dropped unsettled (discarded: the producer is not told, so it
/// replays). Not `Clone`: one event, one ending.
pub struct Ack {
    /// `None` for a producer that keeps no checkpoint.
    target: Option<Arc<dyn AckTarget>>,
    seq: u64,
    tally: Option<Arc<Tally>>,
    /// Set once an output took the event: only then is its ending counted.
    armed: bool,
    /// Set by the output that refused the event for good.
    dropped: bool,
    /// Cleared once the ending is reported.
    open: bool,
}

impl Ack {
    /// An acknowledgement of event `seq` for `target`.
    pub fn new(target: Arc<dyn AckTarget>, seq: u64) -> Self {
        Ack {
            target: Some(target),
            seq,
            tally: None,
            armed: false,
            dropped: false,
            open: true,
        }
    }

    /// The acknowledgement of an event whose producer keeps no
    /// checkpoint: its ending is only counted (see [`Ack::counted`]).
    pub fn untracked() -> Self {
        Ack {
            target: None,
            seq: 0,
            tally: None,
            armed: false,
            dropped: false,
            open: true,
        }
    }

    /// The same acknowledgement, counted in `tally` once armed.
    pub fn counted(mut self, tally: &Arc<Tally>) -> Self {
        self.tally = Some(Arc::clone(tally));
        self
    }

    /// Counts the event queued: its output took it, and from now on its
    /// ending is counted too. Called once the output can no longer give
    /// the event back (an event refused before that was never queued).
    pub fn arm(&mut self) {
        if let (Some(t), false) = (&self.tally, self.armed) {
            t.queued.inc();
            self.armed = true;
        }
    }

    /// Marks the event refused for good: [`Ack::settle`] then counts it
    /// dropped (its producer still moves past it: no replay would pass).
    pub fn mark_dropped(&mut self) {
        self.dropped = true;
    }

    /// Whether the event was marked refused for good.
    pub fn is_dropped(&self) -> bool {
        self.dropped
    }

    /// Tells the producer the event was delivered (or refused for good).
    pub fn settle(mut self) {
        self.open = false;
        if let Some(t) = &self.target {
            t.acknowledged(self.seq);
        }
        if let (Some(t), true) = (&self.tally, self.armed) {
            t.count(if self.dropped {
                Outcome::Dropped
            } else {
                Outcome::Delivered
            });
        }
    }
}

impl Drop for Ack {
    fn drop(&mut self) {
        if let (Some(t), true) = (&self.tally, self.open && self.armed) {
            t.count(Outcome::Discarded);
        }
    }
}

impl fmt::Debug for Ack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ack")
            .field("seq", &self.seq)
            .field("dropped", &self.dropped)
            .finish()
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

    /// Forgets every position in flight (what they described is gone: a
    /// truncated file); acknowledgements of them are ignored from now on.
    pub fn reset(&mut self) {
        self.first += self.pending.len() as u64;
        self.pending.clear();
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
    fn a_reset_forgets_what_was_in_flight_and_ignores_its_acknowledgements() {
        let mut o = InOrder::default();
        let a = o.push(10);
        let b = o.push(20);
        o.unpush(a); // not the newest: kept
        o.unpush(b);
        assert_eq!(o.in_flight(), 1);
        assert_eq!(o.ack(a), Some(10));
        let c = o.push(30);
        o.reset();
        assert_eq!(o.ack(c), None, "c described bytes before the truncation");
        assert_eq!(o.in_flight(), 0);
        let d = o.push(5);
        assert!(d > c, "numbers are never reused");
        assert_eq!(o.ack(d), Some(5));
    }

    proptest::proptest! {
        /// Whatever the order of acknowledgements, the position reported
        /// last is the end of the longest delivered prefix.
        #[test]
        fn the_position_is_the_end_of_the_delivered_prefix(
            lens in proptest::collection::vec(1u64..100, 1..40),
            order in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..60),
        ) {
            let mut o = InOrder::default();
            let mut ends = Vec::new();
            let mut end = 0;
            for l in &lens {
                end += l;
                ends.push(end);
                o.push(end);
            }
            let mut delivered = vec![false; lens.len()];
            let mut reached = 0;
            for i in order {
                let i = i.index(lens.len());
                delivered[i] = true;
                if let Some(p) = o.ack(i as u64) {
                    reached = p;
                }
                let prefix = delivered.iter().take_while(|d| **d).count();
                let want = if prefix == 0 { 0 } else { ends[prefix - 1] };
                proptest::prop_assert_eq!(reached, want);
                proptest::prop_assert_eq!(o.in_flight(), lens.len() - prefix);
            }
        }
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

    #[test]
    fn every_ending_is_counted_once() {
        let r = Arc::new(Recorder::default());
        let tally = Arc::new(Tally::default());
        let armed = |a: Ack| {
            let mut a = a.counted(&tally);
            a.arm();
            a.arm();
            a
        };
        armed(Ack::new(r.clone(), 1)).settle();
        let mut refused = armed(Ack::new(r.clone(), 2));
        refused.mark_dropped();
        refused.settle();
        drop(armed(Ack::new(r.clone(), 3)));
        armed(Ack::untracked()).settle();
        drop(Ack::untracked());
        // Never taken by an output: neither queued nor ended.
        drop(Ack::new(r.clone(), 4).counted(&tally));
        // Refused for good still lets the producer move past it.
        assert_eq!(*r.0.lock().unwrap(), [1, 2]);
        assert_eq!(tally.queued.get(), 4);
        assert_eq!(tally.delivered.get(), 2);
        assert_eq!(tally.dropped.get(), 1);
        assert_eq!(tally.discarded.get(), 1);
    }
}
