//! Reads a disk queue back, in order, into its writer's channel: the
//! records with what travels beside them when this run stored them, and
//! an earlier run's gated records bound to a term already over.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::budget::ByteBudget;
use super::disk::DiskQueue;
use super::metrics::OutputHandles;
use crate::pipeline::ack::Ack;
use crate::pipeline::event::{Event, GatedTerm};

/// Hands the lines of a disk queue to its writer in order, until the
/// queue is closed and read to its end or the writer is gone.
pub(super) async fn feed_from_disk(
    name: Arc<str>,
    disk: Arc<DiskQueue>,
    tx: mpsc::Sender<Event>,
    max: usize,
    abort: CancellationToken,
    metrics: Arc<OutputHandles>,
    budget: ByteBudget,
) {
    let input: Arc<str> = Arc::from("queue.disk");
    let earlier_term = GatedTerm::of_an_earlier_run();
    let mut warned = false;
    loop {
        let read = tokio::select! {
            biased;
            _ = abort.cancelled() => return,
            r = disk.next_records(max) => r,
        };
        let records = match read {
            Ok(Some(lines)) => lines,
            Ok(None) => return,
            Err(e) => {
                // Reported once in the log and kept in `/status` (the
                // output is failing) until a read succeeds; a shutdown
                // stops the retries.
                let why = format!("cannot read the disk queue: {e}");
                if !warned {
                    tracing::error!(output = %name, "{why}; retrying every second");
                    warned = true;
                }
                metrics.health.failed(why);
                tokio::select! {
                    biased;
                    _ = abort.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                continue;
            }
        };
        warned = false;
        for record in records {
            // The hand-over to the writer holds its bytes too.
            let permit = tokio::select! {
                biased;
                _ = abort.cancelled() => return,
                p = budget.reserve(budget.cost(record.line.len())) => p,
            };
            let Some(permit) = permit else { return };
            let gated_of_earlier_run =
                record.carried.is_none() && record.earlier_run && is_gated(&record.line);
            let mut event = match record.carried {
                Some(carried) => Event::from_carried(Arc::clone(&input), record.line, carried),
                None => Event::from_line(Arc::clone(&input), record.line, Ack::untracked()),
            };
            if gated_of_earlier_run {
                // Its term ended with the run that stored it, and its
                // checkpoint never moved past it: the writer discards it.
                event = event.with_term(Arc::clone(&earlier_term));
            }
            if tx.send(event).await.is_err() {
                return;
            }
            permit.forget();
        }
    }
}

/// Whether a stored document comes from a leader-gated input: only those
/// carry the `leader` stamp (a payload cannot set it).
fn is_gated(line: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Stamp {
        leader: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Stamp>(line).is_ok_and(|s| s.leader.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_documents_stamped_with_a_term_are_gated() {
        assert!(is_gated(
            b"{\"a\":1,\"leader\":{\"lease\":\"l\",\"term\":2}}\n"
        ));
        assert!(!is_gated(b"{\"a\":{\"leader\":1}}\n"));
        assert!(!is_gated(b"not json\n"));
    }
}
