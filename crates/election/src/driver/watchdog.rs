//! The renew-deadline watchdog: a thread of its own per elector that
//! cancels the leader-only work at the step-down deadline, whatever the
//! election loop or the runtime is doing (a starved runtime, a blocked
//! writer, leader work that never yields).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Instant, SystemTime};

use tokio_util::sync::CancellationToken;

struct Armed {
    deadline: Instant,
    token: CancellationToken,
    fired_at: Option<SystemTime>,
}

#[derive(Default)]
struct Slot {
    armed: Option<Armed>,
    closed: bool,
}

/// The loop's handle on the watchdog thread. Dropping it ends the thread.
pub(crate) struct Watchdog {
    shared: Arc<(Mutex<Slot>, Condvar)>,
}

impl Watchdog {
    /// Starts the thread; `on_fire` runs on it right after a cancellation
    /// (to wake the loop), and must not block.
    pub(crate) fn start(on_fire: impl Fn() + Send + 'static) -> std::io::Result<Watchdog> {
        let shared: Arc<(Mutex<Slot>, Condvar)> = Arc::default();
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("leasehold-watchdog".into())
            .spawn(move || watch(&theirs, on_fire))?;
        Ok(Watchdog { shared })
    }

    fn with<R>(&self, f: impl FnOnce(&mut Slot) -> R) -> R {
        let (lock, cv) = &*self.shared;
        let mut slot = lock.lock().unwrap_or_else(|p| p.into_inner());
        let r = f(&mut slot);
        cv.notify_all();
        r
    }

    /// Guards a new term's work: `token` is cancelled at `deadline`.
    pub(crate) fn arm(&self, token: CancellationToken, deadline: Instant) {
        self.with(|s| {
            s.armed = Some(Armed {
                deadline,
                token,
                fired_at: None,
            })
        });
    }

    /// A renew succeeded: the deadline moves (unless it has already fired).
    pub(crate) fn extend(&self, deadline: Instant) {
        self.with(|s| {
            if let Some(a) = &mut s.armed
                && a.fired_at.is_none()
            {
                a.deadline = deadline;
            }
        });
    }

    /// The term ended; returns when the watchdog cancelled its work, if it did.
    pub(crate) fn disarm(&self) -> Option<SystemTime> {
        self.with(|s| s.armed.take().and_then(|a| a.fired_at))
    }

    /// When the watchdog cancelled the current term's work, if it did.
    pub(crate) fn fired_at(&self) -> Option<SystemTime> {
        self.with(|s| s.armed.as_ref().and_then(|a| a.fired_at))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.with(|s| s.closed = true);
    }
}

fn watch(shared: &(Mutex<Slot>, Condvar), on_fire: impl Fn()) {
    let (lock, cv) = shared;
    let mut slot = lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if slot.closed {
            return;
        }
        let now = Instant::now();
        let wait = match &mut slot.armed {
            Some(a) if a.fired_at.is_none() => {
                if now >= a.deadline {
                    a.token.cancel();
                    a.fired_at = Some(SystemTime::now());
                    on_fire();
                    None
                } else {
                    Some(a.deadline - now)
                }
            }
            _ => None,
        };
        slot = match wait {
            Some(d) => {
                cv.wait_timeout(slot, d)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => cv.wait(slot).unwrap_or_else(|p| p.into_inner()),
        };
    }
}
