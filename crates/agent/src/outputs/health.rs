//! Whether each output is delivering: the last success, the last error and
//! how many attempts in a row failed, for `/status`.

use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use crate::pipeline::event::now_rfc3339;

/// One output's delivery health as `/status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OutputHealth {
    /// `idle` before the first write, `ok` after a write succeeded,
    /// `failing` while writes fail (events wait in the queue meanwhile).
    pub state: HealthState,
    /// Write attempts that failed since the last success.
    pub consecutive_failures: u64,
    /// The latest failure's message; kept after recovery for diagnosis.
    pub last_error: Option<String>,
    /// When the latest failure happened (RFC 3339, UTC).
    pub last_error_at: Option<String>,
    /// When a write last succeeded (RFC 3339, UTC).
    pub last_success_at: Option<String>,
    /// Events the server refused for good (a malformed document) and that
    /// were therefore dropped: the only events an output ever gives up.
    pub events_dropped: u64,
    /// Why the latest of them was refused, as the server said it.
    pub last_drop_reason: Option<String>,
    /// When the latest of them was dropped (RFC 3339, UTC).
    pub last_drop_at: Option<String>,
}

/// See [`OutputHealth::state`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// Nothing written yet.
    #[default]
    Idle,
    /// The last write succeeded.
    Ok,
    /// The last write failed; it is being retried.
    Failing,
}

/// One output's health: its writer reports each write attempt's outcome,
/// `/status` reads it. Clones share it.
#[derive(Clone, Debug, Default)]
pub(super) struct HealthHandle(Arc<Mutex<OutputHealth>>);

impl HealthHandle {
    /// A copy of the health now.
    pub(super) fn get(&self) -> OutputHealth {
        lock(&self.0).clone()
    }

    pub(super) fn succeeded(&self) {
        let mut h = lock(&self.0);
        h.state = HealthState::Ok;
        h.consecutive_failures = 0;
        h.last_success_at = Some(now_rfc3339());
    }

    /// `count` events were refused for good and dropped, the latest
    /// because of `reason` (already redacted) when the sink said it.
    pub(super) fn dropped(&self, count: u64, reason: Option<String>) {
        let mut h = lock(&self.0);
        h.events_dropped += count;
        if reason.is_some() {
            h.last_drop_reason = reason;
        }
        h.last_drop_at = Some(now_rfc3339());
    }

    pub(super) fn failed(&self, error: String) {
        let mut h = lock(&self.0);
        h.state = HealthState::Failing;
        h.consecutive_failures += 1;
        h.last_error = Some(error);
        h.last_error_at = Some(now_rfc3339());
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_then_a_success_reads_ok_with_the_error_kept() {
        let h = HealthHandle::default();
        assert_eq!(h.get().state, HealthState::Idle);
        let reader = h.clone();
        h.failed("connection refused".into());
        h.failed("connection refused".into());
        let now = reader.get();
        assert_eq!(now.state, HealthState::Failing);
        assert_eq!(now.consecutive_failures, 2);
        h.succeeded();
        let now = reader.get();
        assert_eq!(now.state, HealthState::Ok);
        assert_eq!(now.consecutive_failures, 0);
        assert_eq!(now.last_error.as_deref(), Some("connection refused"));
        assert!(now.last_success_at.is_some());
    }

    #[test]
    fn dropped_events_add_up_and_keep_the_latest_reason() {
        let h = HealthHandle::default();
        assert_eq!(h.get().events_dropped, 0);
        h.dropped(2, Some("HTTP 400: mapper_parsing_exception".into()));
        h.dropped(1, None);
        let now = h.get();
        assert_eq!(now.events_dropped, 3);
        assert_eq!(
            now.last_drop_reason.as_deref(),
            Some("HTTP 400: mapper_parsing_exception")
        );
        assert!(now.last_drop_at.is_some());
    }
}
