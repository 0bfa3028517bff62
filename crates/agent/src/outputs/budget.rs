//! The bytes an output may hold in memory: its queue and the batch being
//! written share one budget, taken when an event is queued and given back
//! when the batch that carried it is done. A queue bounded only in events
//! lets a few large events (1 MB lines from a command, a big scrape) grow
//! memory without limit while the sink is down.

use std::sync::Arc;

use tokio::sync::{Semaphore, SemaphorePermit};

/// A byte budget. Clones share it.
#[derive(Debug, Clone)]
pub struct ByteBudget {
    sem: Arc<Semaphore>,
    total: usize,
}

impl ByteBudget {
    /// A budget of `total` bytes.
    pub fn new(total: u64) -> ByteBudget {
        let total = usize::try_from(total)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        ByteBudget {
            sem: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// The bytes an event of `len` bytes takes: at most the whole budget,
    /// so even an event larger than it can pass alone.
    pub fn cost(&self, len: usize) -> u32 {
        len.min(self.total).min(u32::MAX as usize) as u32
    }

    /// Waits until `cost` bytes are free and takes them. Dropping the
    /// permit gives them back; [`SemaphorePermit::forget`] keeps them taken
    /// until [`ByteBudget::release`].
    pub async fn reserve(&self, cost: u32) -> Option<SemaphorePermit<'_>> {
        self.sem.acquire_many(cost).await.ok()
    }

    /// Gives back `bytes` taken by events that left memory.
    pub fn release(&self, bytes: usize) {
        if bytes > 0 {
            self.sem.add_permits(bytes);
        }
    }

    /// Bytes taken now.
    pub fn used(&self) -> usize {
        self.total.saturating_sub(self.sem.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_are_taken_until_released_and_one_large_event_still_fits() {
        let b = ByteBudget::new(100);
        b.reserve(b.cost(60)).await.unwrap().forget();
        assert_eq!(b.used(), 60);
        // 50 more must wait until the 60 are released.
        let mut wait = Box::pin(b.reserve(b.cost(50)));
        assert!(
            futures_util::FutureExt::now_or_never(wait.as_mut()).is_none(),
            "over the budget"
        );
        b.release(60);
        wait.await.unwrap().forget();
        assert_eq!(b.used(), 50);
        b.release(50);
        // An event larger than the budget takes all of it.
        assert_eq!(b.cost(1000), 100);
        let p = b.reserve(b.cost(1000)).await.unwrap();
        assert_eq!(b.used(), 100);
        drop(p);
        assert_eq!(
            b.used(),
            0,
            "a permit dropped unqueued gives its bytes back"
        );
    }
}
