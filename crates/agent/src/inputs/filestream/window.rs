//! Which of a file's events are delivered, as one offset: the end of the
//! longest run of acknowledged events from the oldest one in flight.
//! Outputs may acknowledge out of order (an Elasticsearch bulk request
//! judges each document); the offset only moves past an event once every
//! event before it is delivered too, so a restart from it loses nothing.

use std::collections::VecDeque;

/// The events of one file between being queued and being delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckWindow {
    /// The number of `pending[0]`.
    first: u64,
    /// Each event in flight: its end offset, and whether it is delivered.
    pending: VecDeque<(u64, bool)>,
    /// Where a restart resumes: everything before it is delivered.
    acked: u64,
}

impl AckWindow {
    /// A window with everything before `acked` delivered.
    pub fn new(acked: u64) -> Self {
        AckWindow {
            first: 0,
            pending: VecDeque::new(),
            acked,
        }
    }

    /// Records an event ending at `end`; returns its number.
    pub fn push(&mut self, end: u64) -> u64 {
        self.pending.push_back((end, false));
        self.first + self.pending.len() as u64 - 1
    }

    /// Forgets event `seq` if it is the newest: it was never queued.
    pub fn unpush(&mut self, seq: u64) {
        if self.pending.len() as u64 + self.first == seq + 1 {
            self.pending.pop_back();
        }
    }

    /// Marks event `seq` delivered; true when the offset moved.
    pub fn ack(&mut self, seq: u64) -> bool {
        let Some(idx) = seq.checked_sub(self.first) else {
            return false; // from before a reset
        };
        match self.pending.get_mut(idx as usize) {
            Some(entry) => entry.1 = true,
            None => return false,
        }
        let mut moved = false;
        while let Some(&(end, true)) = self.pending.front() {
            self.pending.pop_front();
            self.first += 1;
            self.acked = self.acked.max(end);
            moved = true;
        }
        moved
    }

    /// Everything before this offset is delivered.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Events queued and not yet delivered.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Starts over at `offset` (the file was truncated: what was in
    /// flight described bytes that are gone). Acknowledgements of the
    /// events before the reset are ignored.
    pub fn reset(&mut self, offset: u64) {
        self.first += self.pending.len() as u64;
        self.pending.clear();
        self.acked = offset;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_offset_moves_only_over_a_delivered_prefix() {
        let mut w = AckWindow::new(100);
        let a = w.push(110);
        let b = w.push(125);
        let c = w.push(130);
        assert!(!w.ack(b), "b is delivered but a is not");
        assert_eq!(w.acked(), 100);
        assert!(w.ack(a));
        assert_eq!(w.acked(), 125, "a and b are delivered");
        assert_eq!(w.in_flight(), 1);
        assert!(!w.ack(a), "a second acknowledgement changes nothing");
        assert!(w.ack(c));
        assert_eq!(w.acked(), 130);
        assert_eq!(w.in_flight(), 0);
    }

    #[test]
    fn an_event_never_queued_is_forgotten_and_a_reset_ignores_the_old_ones() {
        let mut w = AckWindow::new(0);
        let a = w.push(10);
        let b = w.push(20);
        w.unpush(a); // not the newest: kept
        w.unpush(b);
        assert_eq!(w.in_flight(), 1);
        assert!(w.ack(a));
        assert_eq!(w.acked(), 10);
        let c = w.push(30);
        w.reset(0);
        assert!(!w.ack(c), "c described bytes before the truncation");
        assert_eq!(w.acked(), 0);
        let d = w.push(5);
        assert!(d > c);
        assert!(w.ack(d));
        assert_eq!(w.acked(), 5);
    }

    proptest! {
        /// Whatever the order of acknowledgements, the offset is the end
        /// of the longest delivered prefix.
        #[test]
        fn the_offset_is_the_end_of_the_delivered_prefix(
            lens in prop::collection::vec(1u64..100, 1..40),
            order in prop::collection::vec(any::<prop::sample::Index>(), 0..60),
        ) {
            let mut w = AckWindow::new(0);
            let mut ends = Vec::new();
            let mut end = 0;
            for l in &lens {
                end += l;
                ends.push(end);
                w.push(end);
            }
            let mut delivered = vec![false; lens.len()];
            for i in order {
                let i = i.index(lens.len());
                delivered[i] = true;
                w.ack(i as u64);
                let prefix = delivered.iter().take_while(|d| **d).count();
                let want = if prefix == 0 { 0 } else { ends[prefix - 1] };
                prop_assert_eq!(w.acked(), want);
                prop_assert_eq!(w.in_flight(), lens.len() - prefix);
            }
        }
    }
}
