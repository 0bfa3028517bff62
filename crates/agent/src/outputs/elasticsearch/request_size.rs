//! How many documents go in one `_bulk` request, shared by every lane of
//! an output. A `413 Request Entity Too Large` (the body exceeded the
//! server's `http.max_content_length`) halves it; requests accepted at a
//! smaller size grow it back, so one large document does not leave the
//! output sending one document per request for the rest of its run.
//! A single document refused with 413 cannot be made smaller: it is
//! dropped for good by the caller.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Requests accepted in a row at a reduced size before it doubles.
pub const GROW_AFTER: usize = 8;

/// Documents per request now, between 1 and `bulk_max_size`.
#[derive(Debug)]
pub struct RequestSize {
    max: usize,
    now: AtomicUsize,
    accepted: AtomicUsize,
}

impl RequestSize {
    /// Starts at `max` (`bulk_max_size`, at least 1).
    pub fn new(max: usize) -> RequestSize {
        let max = max.max(1);
        RequestSize {
            max,
            now: AtomicUsize::new(max),
            accepted: AtomicUsize::new(0),
        }
    }

    /// Documents per request now.
    pub fn get(&self) -> usize {
        self.now.load(Ordering::Relaxed).clamp(1, self.max)
    }

    /// A request of `sent` documents was answered 413: later requests
    /// carry at most half of them.
    pub fn too_large(&self, sent: usize) {
        self.now.fetch_min((sent / 2).max(1), Ordering::Relaxed);
        self.accepted.store(0, Ordering::Relaxed);
    }

    /// A request was accepted: after [`GROW_AFTER`] in a row below
    /// `max`, the size doubles (at most `max`).
    pub fn accepted(&self) {
        let now = self.get();
        if now >= self.max {
            return;
        }
        if self.accepted.fetch_add(1, Ordering::Relaxed) + 1 >= GROW_AFTER {
            self.accepted.store(0, Ordering::Relaxed);
            self.now
                .store(now.saturating_mul(2).min(self.max), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_413_halves_and_accepted_requests_grow_it_back_to_the_maximum() {
        let s = RequestSize::new(1600);
        assert_eq!(s.get(), 1600);
        s.too_large(1600);
        s.too_large(800);
        assert_eq!(s.get(), 400);
        // A 413 of an older, larger request does not raise it.
        s.too_large(1600);
        assert_eq!(s.get(), 400);
        let mut sizes = Vec::new();
        for _ in 0..GROW_AFTER * 3 {
            s.accepted();
            sizes.push(s.get());
        }
        assert_eq!(sizes[GROW_AFTER - 2], 400);
        assert_eq!(sizes[GROW_AFTER - 1], 800);
        assert_eq!(sizes[2 * GROW_AFTER - 1], 1600);
        assert_eq!(*sizes.last().unwrap(), 1600, "never above the maximum");
    }

    #[test]
    fn down_to_one_document_and_up_again() {
        let s = RequestSize::new(50);
        for _ in 0..10 {
            s.too_large(s.get());
        }
        assert_eq!(s.get(), 1);
        // A 413 between accepted requests starts the count again.
        for _ in 0..GROW_AFTER - 1 {
            s.accepted();
        }
        s.too_large(1);
        for _ in 0..GROW_AFTER - 1 {
            s.accepted();
        }
        assert_eq!(s.get(), 1);
        s.accepted();
        assert_eq!(s.get(), 2);
        assert_eq!(RequestSize::new(0).get(), 1);
    }
}
