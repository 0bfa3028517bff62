//! Delivers state changes to the user's hook on a thread of its own, so a
//! hook that blocks (printing to a stalled pipe) never holds up the
//! election loop or a step-down.

use std::sync::mpsc;

use super::{StateChange, StateHook};

/// The loop's end of the hook thread; sending never blocks.
pub(crate) struct HookSender {
    tx: mpsc::Sender<StateChange>,
    done: tokio::sync::oneshot::Receiver<()>,
}

impl HookSender {
    /// Starts the delivery thread. It ends when the sender is dropped,
    /// after delivering what was sent.
    pub(crate) fn start(hook: StateHook) -> std::io::Result<HookSender> {
        let (tx, rx) = mpsc::channel::<StateChange>();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("leasehold-state-hook".into())
            .spawn(move || {
                for change in rx {
                    hook(&change);
                }
                let _ = done_tx.send(());
            })?;
        Ok(HookSender { tx, done })
    }

    pub(crate) fn send(&self, change: StateChange) {
        // The thread only stops after the sender is gone.
        let _ = self.tx.send(change);
    }

    /// Lets the thread deliver what is queued, waiting at most `limit`
    /// (a hook stuck on a stalled pipe must not hang shutdown).
    pub(crate) async fn finish(self, limit: std::time::Duration) {
        let HookSender { tx, done } = self;
        drop(tx);
        if tokio::time::timeout(limit, done).await.is_err() {
            tracing::warn!(
                ?limit,
                "state hook still busy at shutdown; not waiting for it"
            );
        }
    }
}
