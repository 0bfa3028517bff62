//! Blocking a plain thread on cancellation tokens.
//!
//! The stop path of a term runs on its own thread so that it reacts even
//! when every runtime worker is busy or blocked: the elector may cancel a
//! term's token from a watchdog thread, and that cancellation wakes this
//! thread directly (the token calls our waker, which unparks the thread),
//! with no runtime involved.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::thread::Thread;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Blocks until one of `tokens` is cancelled, and returns its index; or
/// returns `None` once `deadline` has passed. The lowest index wins when
/// several are cancelled.
pub fn first_cancelled(tokens: &[&CancellationToken], deadline: Option<Instant>) -> Option<usize> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut futures: Vec<_> = tokens.iter().map(|t| Box::pin(t.cancelled())).collect();
    loop {
        for (i, f) in futures.iter_mut().enumerate() {
            if f.as_mut().poll(&mut cx).is_ready() {
                return Some(i);
            }
        }
        match deadline {
            None => std::thread::park(),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return None;
                }
                std::thread::park_timeout(d - now);
            }
        }
    }
}

/// Blocks until `token` is cancelled.
pub fn cancelled(token: &CancellationToken) {
    first_cancelled(&[token], None);
}

/// Blocks until `token` is cancelled or `deadline` passes; true if cancelled.
pub fn cancelled_by(token: &CancellationToken, deadline: Instant) -> bool {
    first_cancelled(&[token], Some(deadline)).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_cancel_from_another_thread_wakes_the_waiter() {
        let (a, b) = (CancellationToken::new(), CancellationToken::new());
        let b2 = b.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b2.cancel();
        });
        assert_eq!(first_cancelled(&[&a, &b], None), Some(1));
        canceller.join().unwrap();
        assert!(b.is_cancelled() && !a.is_cancelled());
    }

    #[test]
    fn the_deadline_bounds_the_wait() {
        let a = CancellationToken::new();
        let started = Instant::now();
        assert!(!cancelled_by(&a, started + Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
        a.cancel();
        assert!(cancelled_by(&a, started));
    }
}
