//! The single watch on the Lease: started at once, resumed from the last
//! resourceVersion, re-listed after 410, retried with jitter; polling
//! covers the time it is down.

use super::io::{Event, Failure, Request, Warning, WatchEvent, WatchId};
use super::machine::{Core, WatchState};
use super::time::Instant;
use super::timers::TimerKind;

/// How often a lasting refusal to watch is reported again.
const REFUSAL_REPEAT: std::time::Duration = std::time::Duration::from_secs(600);

impl Core {
    pub(super) fn ensure_watch(&mut self, now: Instant) {
        if matches!(self.watch, WatchState::Down | WatchState::Forbidden)
            && !self.timers.is_set(TimerKind::WatchRetry)
            && !self.watch_needs_read
        {
            self.watch_id += 1;
            self.watch = WatchState::Starting;
            self.watch_started_at = now;
            let from = self.view.last_rv.clone();
            self.send(Request::StartWatch {
                watch: WatchId(self.watch_id),
                from,
            });
        }
    }

    fn retry_watch_later(&mut self, now: Instant, factor: u32) {
        let d = self.rng.scale(self.timings.retry_period(), 1.0, 2.2) * factor;
        self.timers.set(TimerKind::WatchRetry, now + d);
    }

    pub(super) fn on_watch(&mut self, now: Instant, event: WatchEvent) {
        if self.watch == WatchState::Up
            && matches!(
                event,
                WatchEvent::Expired | WatchEvent::Ended | WatchEvent::Failed(_)
            )
        {
            // Changes may be missed until the watch is back. A watch that
            // never came up missed nothing: polling was the view all along
            // (a Role without `watch` refuses every start).
            self.view.gap = true;
        }
        match event {
            WatchEvent::Started => {
                self.watch = WatchState::Up;
                self.watch_refused_since = None;
                self.watch_refusal_reported = None;
                self.timers.clear(TimerKind::Poll);
            }
            WatchEvent::Upsert(obs) => self.observe(now, obs),
            WatchEvent::Deleted => self.observe_absent(now),
            WatchEvent::Bookmark(rv) => self.view.last_rv = Some(rv),
            WatchEvent::Expired => {
                // Rule: re-list on 410, then watch from the fresh version.
                self.watch = WatchState::Down;
                self.watch_needs_read = true;
                self.view.last_rv = None;
                self.read_due = true;
            }
            WatchEvent::Ended => {
                self.watch = WatchState::Down;
                if now.saturating_since(self.watch_started_at) < self.timings.retry_period() {
                    self.retry_watch_later(now, 1);
                }
            }
            WatchEvent::Failed(Failure::Forbidden) => {
                // Rule: a 403 is transient at first (an API server that
                // just restarted refuses until its RBAC cache is filled):
                // retry soon; report it (and poll meanwhile) only once it
                // has lasted a lease duration, and again every ten minutes.
                self.watch = WatchState::Forbidden;
                let since = *self.watch_refused_since.get_or_insert(now);
                let lasting = now.saturating_since(since) >= self.timings.lease_duration();
                let due = self
                    .watch_refusal_reported
                    .is_none_or(|at| now.saturating_since(at) >= REFUSAL_REPEAT);
                if lasting && due {
                    self.watch_refusal_reported = Some(now);
                    self.emit(Event::Warn(Warning::WatchForbidden));
                }
                self.retry_watch_later(now, if lasting { 5 } else { 1 });
            }
            WatchEvent::Failed(_) => {
                self.watch = WatchState::Down;
                self.retry_watch_later(now, 1);
            }
        }
    }
}
