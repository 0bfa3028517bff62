//! Liveness of an elector: a pod that believes it leads but has not renewed
//! for longer than the lease should be restarted, not trusted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug, Default)]
struct Inner {
    /// While leading: when the last renew (or the acquisition) succeeded.
    leading_since_renew: Option<Instant>,
}

/// A cheap, cloneable health check of one elector.
#[derive(Clone, Debug)]
pub struct HealthCheck {
    inner: Arc<Mutex<Inner>>,
    limit: Duration,
}

impl HealthCheck {
    pub(crate) fn new(lease_duration: Duration, margin: Duration) -> Self {
        HealthCheck {
            inner: Arc::default(),
            limit: lease_duration + margin,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    pub(crate) fn renewed(&self, at: Instant) {
        self.with(|i| i.leading_since_renew = Some(at));
    }

    pub(crate) fn not_leading(&self) {
        self.with(|i| i.leading_since_renew = None);
    }

    /// `Err` with a reason when this process believes it leads but has not
    /// renewed within lease duration plus a margin.
    pub fn check(&self) -> Result<(), String> {
        let last = self.with(|i| i.leading_since_renew);
        match last {
            Some(at) if at.elapsed() > self.limit => Err(format!(
                "leading but last renewed {:?} ago (limit {:?})",
                at.elapsed(),
                self.limit
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fails_only_when_leading_without_recent_renew() {
        let h = HealthCheck::new(Duration::from_secs(15), Duration::from_secs(5));
        assert!(h.check().is_ok());
        h.renewed(Instant::now());
        assert!(h.check().is_ok());
        h.renewed(Instant::now() - Duration::from_secs(21));
        assert!(h.check().unwrap_err().contains("last renewed"));
        h.not_leading();
        assert!(h.check().is_ok());
    }
}
