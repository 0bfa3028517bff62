//! The runtime heartbeat: a task that records the time at a fixed period.
//! When the last record grows old, the runtime no longer schedules tasks in
//! time and the agent should be restarted.

use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

/// How often the heartbeat task ticks.
pub const TICK_EVERY: Duration = Duration::from_millis(250);

/// The time of the last tick, shared by the ticking task and its readers.
#[derive(Debug)]
pub struct Heartbeat {
    last: watch::Sender<Instant>,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self::new()
    }
}

impl Heartbeat {
    /// A heartbeat that ticked just now.
    pub fn new() -> Self {
        Heartbeat {
            last: watch::Sender::new(Instant::now()),
        }
    }

    /// Records a tick now.
    pub fn tick(&self) {
        self.last.send_replace(Instant::now());
    }

    /// How long ago the last tick was.
    pub fn age(&self) -> Duration {
        self.last.borrow().elapsed()
    }

    /// `Err` with a reason when the last tick is older than `stale_after`.
    pub fn check(&self, stale_after: Duration) -> Result<(), String> {
        let age = self.age();
        if age > stale_after {
            Err(format!(
                "no heartbeat for {age:.1?} (limit {stale_after:?})"
            ))
        } else {
            Ok(())
        }
    }

    /// Spawns the task that ticks every `every` until `shutdown` is
    /// cancelled. The first tick comes one period from now.
    pub fn spawn(
        self: std::sync::Arc<Self>,
        every: Duration,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    _ = interval.tick() => self.tick(),
                }
            }
        })
    }

    /// Records `at` as the last tick.
    #[cfg(test)]
    pub(crate) fn set_last_tick(&self, at: Instant) {
        self.last.send_replace(at);
    }

    /// Observes ticks.
    #[cfg(test)]
    pub(crate) fn subscribe(&self) -> watch::Receiver<Instant> {
        self.last.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn stale_only_when_the_last_tick_is_older_than_the_limit() {
        let h = Heartbeat::new();
        let limit = Duration::from_secs(5);
        assert!(h.check(limit).is_ok());
        h.set_last_tick(Instant::now() - Duration::from_secs(10));
        let err = h.check(limit).unwrap_err();
        assert!(err.contains("no heartbeat for"), "{err}");
        h.tick();
        assert!(h.check(limit).is_ok());
    }

    #[tokio::test]
    async fn the_task_ticks_and_stops_on_shutdown() {
        let h = Arc::new(Heartbeat::new());
        h.set_last_tick(Instant::now() - Duration::from_secs(10));
        let mut ticks = h.subscribe();
        ticks.mark_unchanged();
        let shutdown = CancellationToken::new();
        let task = h.clone().spawn(Duration::from_millis(5), shutdown.clone());
        tokio::time::timeout(Duration::from_secs(10), ticks.changed())
            .await
            .expect("no tick within the deadline")
            .unwrap();
        assert!(h.check(Duration::from_secs(5)).is_ok());
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("task did not stop")
            .unwrap();
    }
}
