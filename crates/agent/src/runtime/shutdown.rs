//! Stopping the agent within `agent.shutdown_timeout`: inputs first,
//! then the outputs drain while this agent still leads, then the leases
//! are released and the registries written once more.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Agent, Stopping};

impl Agent {
    /// Stops inputs (letting them ship what they already produced),
    /// flushes outputs, then releases the leases: all within
    /// `agent.shutdown_timeout`. The outputs drain while this agent still
    /// leads, so the checkpoints its release writes cover what they
    /// delivered; what they could not deliver is read again by the next
    /// leader.
    pub(super) async fn shutdown(mut self) {
        let by = Deadlines::new(Instant::now(), self.loaded.settings.shutdown_timeout);
        self.board.set_ready(false, "shutting down");
        if let Some((_, p)) = self.provider.take() {
            p.shutdown().await;
        }
        let ids: Vec<String> = self.running.keys().cloned().collect();
        for id in ids {
            self.stop_input(&id);
        }
        for s in &self.stopping {
            // Shutting down: no more reading to the end.
            s.cancel.cancel();
        }
        for Stopping { join, abandon, .. } in std::mem::take(&mut self.stopping) {
            let mut join = join;
            tokio::select! {
                _ = &mut join => {}
                () = tokio::time::sleep_until(by.inputs) => {
                    abandon.cancel();
                    let _ = tokio::time::timeout(Duration::from_millis(200), &mut join).await;
                    join.abort();
                }
            }
        }
        let on_disk: Vec<String> = self
            .outputs
            .names()
            .into_iter()
            .filter(|n| self.outputs.has_disk_queue(n))
            .collect();
        let left = self.outputs.shutdown(by.outputs).await;
        self.balancers.shutdown(by.leases).await;
        let handles: Vec<_> = self
            .elections
            .iter_mut()
            .filter_map(|e| e.handle.take())
            .collect();
        let all = futures_util::future::join_all(handles.into_iter().map(|h| h.shutdown()));
        if tokio::time::timeout_at(by.leases, all).await.is_err() {
            tracing::warn!(
                "leases not released within the shutdown timeout; they expire on their own"
            );
        }
        // Everything the outputs delivered is acknowledged now: record it.
        self.registry_flush.abort();
        let registries = Arc::clone(&self.registries);
        if let Ok(Some(e)) = tokio::task::spawn_blocking(move || registries.flush_all()).await {
            tracing::error!("at shutdown: {e}");
        }
        for (name, n, on_disk) in left_behind(left, &on_disk) {
            if on_disk {
                tracing::warn!(output = %name, "{n} event(s) not written before the shutdown timeout stay in the disk queue; they are sent after the next start");
            } else {
                tracing::error!(output = %name, "{n} event(s) could not be written before the shutdown timeout");
            }
        }
        tracing::info!("stopped");
    }
}

/// When each step of a shutdown must be done: the inputs leave a quarter
/// of the timeout (at most 5 s) to the outputs and the leases, the outputs
/// half of that to the leases, and the leases end it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Deadlines {
    inputs: Instant,
    outputs: Instant,
    leases: Instant,
}

impl Deadlines {
    fn new(now: Instant, timeout: Duration) -> Deadlines {
        let leases = now + timeout;
        let reserve = (timeout / 4).min(Duration::from_secs(5));
        Deadlines {
            inputs: leases - reserve,
            outputs: leases - reserve / 2,
            leases,
        }
    }
}

/// The outputs that left events unwritten, with how many and whether
/// they stay in a disk queue (sent after the next start) or are lost.
fn left_behind(left: Vec<(String, usize)>, on_disk: &[String]) -> Vec<(String, usize, bool)> {
    left.into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| {
            let kept = on_disk.contains(&name);
            (name, n, kept)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_stop_first_outputs_drain_next_and_the_leases_go_last() {
        let now = Instant::now();
        let d = Deadlines::new(now, Duration::from_secs(20));
        assert_eq!(d.leases, now + Duration::from_secs(20));
        assert_eq!(d.inputs, now + Duration::from_secs(15));
        assert_eq!(d.outputs, now + Duration::from_millis(17_500));
        // A long timeout keeps at most 5 s for outputs and leases.
        let d = Deadlines::new(now, Duration::from_secs(600));
        assert_eq!(d.leases - d.inputs, Duration::from_secs(5));
        // A short one keeps the order.
        let d = Deadlines::new(now, Duration::from_secs(1));
        assert!(d.inputs < d.outputs && d.outputs < d.leases);
    }

    #[test]
    fn what_a_disk_queue_keeps_is_told_apart_from_what_is_lost() {
        let left = vec![
            ("disk".to_string(), 3),
            ("memory".to_string(), 2),
            ("drained".to_string(), 0),
        ];
        assert_eq!(
            left_behind(left, &["disk".to_string(), "drained".to_string()]),
            [
                ("disk".to_string(), 3, true),
                ("memory".to_string(), 2, false)
            ]
        );
    }
}
