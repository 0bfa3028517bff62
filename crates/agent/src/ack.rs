//! Delivery acknowledgements from outputs back to the input that produced
//! an event: the way an input that can replay (a file read from a
//! recorded offset) learns which of its events are safe, so it records
//! progress only for those.
//!
//! An event may carry one [`Ack`]. Its output settles it once the event
//! is delivered for good: written by the sink (or refused for good by the
//! server, which no replay would change), or stored in the output's disk
//! queue. An event lost before that (the process dies, a shutdown gives
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
    fn settling_reaches_the_target_with_the_events_number() {
        let r = Arc::new(Recorder::default());
        let a = Ack::new(r.clone(), 7);
        let b = Ack::new(r.clone(), 8);
        b.settle();
        drop(a); // dropped unsettled: never acknowledged
        assert_eq!(*r.0.lock().unwrap(), [8]);
    }
}
