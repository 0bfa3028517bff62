//! The events one writer lane took from its queue, held until each is
//! settled: their lines (what the sink is given), their acknowledgements
//! and their leadership terms (which the sink never sees).

use std::sync::Arc;

use tokio_util::task::task_tracker::TaskTrackerToken;

use super::sink::{Answer, Answers, Outgoing, push_sparse, retain_flagged};
use crate::pipeline::ack::Ack;
use crate::pipeline::event::{Event, GatedTerm};

/// Events not settled yet, in the order they were taken.
#[derive(Debug, Default)]
pub(super) struct Batch {
    /// Shared with the sink for the length of one attempt.
    out: Arc<Outgoing>,
    /// The events' acknowledgements, in the lines' order.
    acks: Vec<Ack>,
    /// The events' leadership terms, in the lines' order; empty while no
    /// event has one.
    terms: Vec<Option<Arc<GatedTerm>>>,
}

/// What settling one attempt's answers did, for the writer's counters
/// and log.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Settled {
    /// Lines delivered, duplicates included.
    pub(super) delivered: usize,
    /// Of those, lines the receiver already held.
    pub(super) duplicates: usize,
    /// Lines refused for good.
    pub(super) dropped: usize,
    /// Why the first and the last refused line were refused.
    pub(super) first_drop: Option<Arc<str>>,
    pub(super) last_drop: Option<Arc<str>>,
}

impl Batch {
    /// Adds an event (with its acknowledgement, term and routing).
    pub(super) fn push(&mut self, event: Event) {
        let (line, carried) = event.into_parts();
        push_sparse(&mut self.terms, self.acks.len(), carried.term);
        self.acks.push(carried.ack);
        Arc::make_mut(&mut self.out).push(line, carried.meta);
    }

    /// Events not settled yet.
    pub(super) fn len(&self) -> usize {
        self.acks.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.acks.is_empty()
    }

    /// What the sink is given for the next attempt.
    pub(super) fn outgoing(&self) -> Arc<Outgoing> {
        Arc::clone(&self.out)
    }

    /// Settles the lines by `answers`: a delivered line is acknowledged, a
    /// refused one acknowledged as dropped (its producer moves past it: no
    /// replay would pass), and both leave the batch; the lines to retry
    /// stay, in order.
    pub(super) fn settle(&mut self, answers: &Answers) -> Settled {
        let mut settled = Settled::default();
        let mut keep = Vec::with_capacity(self.acks.len());
        let mut left = Vec::new();
        for (k, mut ack) in std::mem::take(&mut self.acks).into_iter().enumerate() {
            match answers.answer(k) {
                Answer::Retry => {
                    keep.push(true);
                    left.push(ack);
                    continue;
                }
                Answer::Delivered => settled.delivered += 1,
                Answer::Duplicate => {
                    settled.delivered += 1;
                    settled.duplicates += 1;
                }
                Answer::Drop(why) => {
                    settled.dropped += 1;
                    settled.first_drop.get_or_insert_with(|| Arc::clone(why));
                    settled.last_drop = Some(Arc::clone(why));
                    ack.mark_dropped();
                }
            }
            keep.push(false);
            ack.settle();
        }
        self.acks = left;
        if self.acks.is_empty() {
            // All settled (the usual case): nothing to keep in order.
            self.out = Arc::default();
            self.terms.clear();
        } else if self.acks.len() < keep.len() {
            Arc::make_mut(&mut self.out).retain(&keep);
            retain_flagged(&mut self.terms, &keep);
        }
        settled
    }

    /// Removes the events whose leadership term has ended, without
    /// acknowledging them (their input's successor re-reads them from the
    /// last acknowledged checkpoint); returns how many.
    pub(super) fn discard_ended_terms(&mut self) -> usize {
        let over: Vec<bool> = self
            .terms
            .iter()
            .map(|f| f.as_ref().is_some_and(|f| f.is_over()))
            .collect();
        let n = over.iter().filter(|&&o| o).count();
        if n == 0 {
            return 0;
        }
        let keep: Vec<bool> = over.iter().map(|o| !o).collect();
        Arc::make_mut(&mut self.out).retain(&keep);
        retain_flagged(&mut self.acks, &keep);
        retain_flagged(&mut self.terms, &keep);
        n
    }

    /// Guards holding the step-down of every term among the events, one
    /// per term.
    pub(super) fn hold_terms(&self) -> Vec<TaskTrackerToken> {
        let mut seen: Vec<&Arc<GatedTerm>> = Vec::new();
        for f in self.terms.iter().flatten() {
            if !seen.iter().any(|s| Arc::ptr_eq(s, f)) {
                seen.push(f);
            }
        }
        seen.into_iter().map(|f| f.hold()).collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value};
    use tokio_util::sync::CancellationToken;
    use tokio_util::task::TaskTracker;

    use super::super::file::tests::line;
    use super::*;
    use crate::pipeline::ack::tests::Recorder;

    fn ev(n: usize) -> Event {
        let text = String::from_utf8(line(n)).unwrap();
        let doc: Map<String, Value> = serde_json::from_str(text.trim_end()).unwrap();
        Event::new(Arc::from("input"), doc, Ack::untracked())
    }

    fn answers(lines: Vec<Answer>) -> Answers {
        Answers {
            lines,
            error: Some("some left".into()),
            retry_after: None,
        }
    }

    #[test]
    fn only_settled_lines_are_acknowledged_and_the_rest_stay_in_order() {
        use Answer::*;
        let r = Arc::new(Recorder::default());
        let mut batch = Batch::default();
        batch.push(ev(0)); // no acknowledgement
        for n in 1..5 {
            batch.push(ev(n).with_ack(Ack::new(r.clone(), n as u64)));
        }
        // The server took lines 2 and 4 of 0..5.
        let s = batch.settle(&answers(vec![Retry, Retry, Delivered, Retry, Duplicate]));
        assert_eq!((s.delivered, s.duplicates, s.dropped), (2, 1, 0));
        assert_eq!(*r.0.lock().unwrap(), [2, 4]);
        assert_eq!(batch.outgoing().lines(), [line(0), line(1), line(3)]);
        // Answers missing at the end count as retry.
        let s = batch.settle(&answers(vec![Delivered, Drop("mapping".into())]));
        assert_eq!((s.delivered, s.dropped), (1, 1));
        assert_eq!(s.first_drop.as_deref(), Some("mapping"));
        assert_eq!(*r.0.lock().unwrap(), [2, 4, 1]);
        assert_eq!(batch.outgoing().lines(), [line(3)]);
        batch.settle(&Answers::delivered(1));
        assert_eq!(*r.0.lock().unwrap(), [2, 4, 1, 3]);
        assert!(batch.is_empty());
    }

    #[test]
    fn a_dropped_line_is_acknowledged_as_dropped() {
        use crate::pipeline::ack::Tally;
        let tally = Arc::new(Tally::default());
        let mut batch = Batch::default();
        let mut ack = Ack::untracked().counted(&tally);
        ack.arm();
        batch.push(ev(0).with_ack(ack));
        batch.settle(&answers(vec![Answer::Drop("too large".into())]));
        assert_eq!(tally.dropped.get(), 1);
        assert_eq!(tally.delivered.get(), 0);
    }

    #[test]
    fn events_of_an_ended_term_leave_unacknowledged_and_terms_are_held_once() {
        let r = Arc::new(Recorder::default());
        let over = CancellationToken::new();
        let step_down = TaskTracker::new();
        let ended = GatedTerm::new(over.clone(), step_down.clone());
        let running = GatedTerm::new(CancellationToken::new(), TaskTracker::new());
        let mut batch = Batch::default();
        batch.push(ev(0).with_ack(Ack::new(r.clone(), 0)));
        batch.push(
            ev(1)
                .with_ack(Ack::new(r.clone(), 1))
                .with_term(ended.clone()),
        );
        batch.push(ev(2).with_term(ended));
        batch.push(ev(3).with_term(running));
        let holds = batch.hold_terms();
        assert_eq!(holds.len(), 2);
        assert_eq!(step_down.len(), 1);
        drop(holds);
        assert_eq!(batch.discard_ended_terms(), 0);
        over.cancel();
        assert_eq!(batch.discard_ended_terms(), 2);
        assert_eq!(batch.outgoing().lines(), [line(0), line(3)]);
        assert_eq!(batch.hold_terms().len(), 1);
        batch.settle(&Answers::delivered(2));
        assert_eq!(*r.0.lock().unwrap(), [0], "1 was discarded, not settled");
    }
}
