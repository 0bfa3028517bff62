//! Election timings and the rule that makes them safe.

use std::fmt;
use std::time::Duration;

/// Lease duration, renew deadline and retry period of one candidate.
///
/// A config is valid only if `lease_duration > renew_deadline >
/// 1.2 × retry_period` and all are positive: a leader then always stops
/// (at `renew_deadline`) before any other candidate can see its lease as
/// expired (at `lease_duration`), and has time for more than one renew
/// attempt in between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

/// Upper bound for every timing, so arithmetic on instants can never
/// overflow and a typo (`15h`) is caught.
pub const MAX_TIMING: Duration = Duration::from_secs(24 * 3600);

/// Why a set of timings was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimingError {
    /// The Lease stores whole seconds: the lease duration must be a whole
    /// number of seconds, at least 1 s.
    NotWholeSeconds {
        /// The lease duration given.
        lease_duration: Duration,
    },
    /// A timing is below the floor a real API server can honour.
    BelowFloor {
        /// Name of the offending setting.
        name: &'static str,
        /// The value given.
        value: Duration,
        /// The smallest accepted value.
        floor: Duration,
    },
    /// One of the timings is zero.
    NotPositive {
        /// Name of the offending setting.
        name: &'static str,
    },
    /// One of the timings is longer than [`MAX_TIMING`].
    TooLong {
        /// Name of the offending setting.
        name: &'static str,
        /// The value given.
        value: Duration,
    },
    /// `lease_duration > renew_deadline` does not hold.
    DurationNotAboveDeadline {
        /// The lease duration given.
        lease_duration: Duration,
        /// The renew deadline given.
        renew_deadline: Duration,
    },
    /// `renew_deadline > 1.2 × retry_period` does not hold.
    DeadlineNotAboveRetry {
        /// The renew deadline given.
        renew_deadline: Duration,
        /// The retry period given.
        retry_period: Duration,
    },
}

impl fmt::Display for TimingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimingError::NotWholeSeconds { lease_duration } => write!(
                f,
                "lease duration must be a whole number of seconds, at least 1s, since the Lease stores whole seconds (got {lease_duration:?}; did you mean seconds instead of milliseconds?)"
            ),
            TimingError::BelowFloor { name, value, floor } => write!(
                f,
                "{name} must be at least {floor:?} (got {value:?}): API calls time out after max(1s, renew deadline / 2), which must stay below the renew deadline, and faster retries only load the API server"
            ),
            TimingError::NotPositive { name } => write!(f, "{name} must be positive"),
            TimingError::TooLong { name, value } => {
                write!(f, "{name} must be at most {:?}, got {value:?}", MAX_TIMING)
            }
            TimingError::DurationNotAboveDeadline {
                lease_duration,
                renew_deadline,
            } => write!(
                f,
                "lease duration must be greater than renew deadline (got lease duration {lease_duration:?}, renew deadline {renew_deadline:?})"
            ),
            TimingError::DeadlineNotAboveRetry {
                renew_deadline,
                retry_period,
            } => write!(
                f,
                "renew deadline must be greater than 1.2 × retry period (got renew deadline {renew_deadline:?}, retry period {retry_period:?}, 1.2 × retry period = {:?})",
                retry_period.mul_f64(1.2)
            ),
        }
    }
}

impl std::error::Error for TimingError {}

impl Default for Timings {
    /// client-go's defaults: 15 s / 10 s / 2 s.
    fn default() -> Self {
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timings {
    /// Validates and builds timings; see the type docs for the rule.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Timings, TimingError> {
        for (name, value) in [
            ("lease duration", lease_duration),
            ("renew deadline", renew_deadline),
            ("retry period", retry_period),
        ] {
            if value.is_zero() {
                return Err(TimingError::NotPositive { name });
            }
            if value > MAX_TIMING {
                return Err(TimingError::TooLong { name, value });
            }
        }
        if lease_duration <= renew_deadline {
            return Err(TimingError::DurationNotAboveDeadline {
                lease_duration,
                renew_deadline,
            });
        }
        // 1.2 × retry < deadline  <=>  6 × retry < 5 × deadline, exact in integers.
        if retry_period.as_nanos() * 6 >= renew_deadline.as_nanos() * 5 {
            return Err(TimingError::DeadlineNotAboveRetry {
                renew_deadline,
                retry_period,
            });
        }
        Ok(Timings {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }

    /// The stricter rules for timings used on a real Lease: a whole-second
    /// lease duration (the Lease stores seconds), a renew deadline of at
    /// least 1.5 s (so the per-call timeout, `max(1 s, renew_deadline / 2)`,
    /// stays below it), and a retry period of at least 100 ms. Simulations may
    /// use finer timings; electors check this at start.
    pub fn check_for_lease(&self) -> Result<(), TimingError> {
        let d = self.lease_duration;
        if d.subsec_nanos() != 0 || d < Duration::from_secs(1) {
            return Err(TimingError::NotWholeSeconds { lease_duration: d });
        }
        let deadline_floor = Duration::from_millis(1500);
        if self.renew_deadline < deadline_floor {
            return Err(TimingError::BelowFloor {
                name: "renew deadline",
                value: self.renew_deadline,
                floor: deadline_floor,
            });
        }
        let retry_floor = Duration::from_millis(100);
        if self.retry_period < retry_floor {
            return Err(TimingError::BelowFloor {
                name: "retry period",
                value: self.retry_period,
                floor: retry_floor,
            });
        }
        Ok(())
    }

    /// How long a holder may go without renewing before others may take over.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// How long a leader keeps leading without a successful renew.
    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    /// Pace of renewals, and base of the polling and backoff jitter.
    pub fn retry_period(&self) -> Duration {
        self.retry_period
    }

    /// Timeout of every single API call: `max(1 s, renew_deadline / 2)`, so
    /// one hung request cannot use up the renew deadline.
    pub fn call_timeout(&self) -> Duration {
        (self.renew_deadline / 2).max(Duration::from_secs(1))
    }

    /// `leaseDurationSeconds` to write: the lease duration rounded up to
    /// whole seconds, so others never wait less than this process assumes.
    pub fn lease_duration_seconds(&self) -> i32 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Duration {
        Duration::from_secs_f64(x)
    }

    #[test]
    fn defaults_are_client_go_defaults_and_valid() {
        let d = Timings::default();
        assert_eq!(Timings::new(s(15.0), s(10.0), s(2.0)), Ok(d));
        assert_eq!(d.call_timeout(), s(5.0));
        assert_eq!(d.lease_duration_seconds(), 15);
    }

    #[test]
    fn each_rule_is_named_with_values() {
        let e = Timings::new(s(10.0), s(10.0), s(2.0)).unwrap_err();
        assert!(matches!(e, TimingError::DurationNotAboveDeadline { .. }));
        assert!(
            e.to_string()
                .contains("lease duration must be greater than renew deadline"),
            "{e}"
        );
        assert!(e.to_string().contains("10s"), "{e}");
        let e = Timings::new(s(15.0), s(2.4), s(2.0)).unwrap_err();
        assert!(
            matches!(e, TimingError::DeadlineNotAboveRetry { .. }),
            "{e}"
        );
        assert!(e.to_string().contains("1.2 × retry period"), "{e}");
        assert!(Timings::new(s(15.0), s(2.41), s(2.0)).is_ok());
        assert_eq!(
            Timings::new(s(0.0), s(1.0), s(0.5)),
            Err(TimingError::NotPositive {
                name: "lease duration"
            })
        );
        assert!(matches!(
            Timings::new(s(1e6), s(1.0), s(0.5)),
            Err(TimingError::TooLong { .. })
        ));
    }

    #[test]
    fn short_timings_round_duration_up_and_keep_a_one_second_timeout() {
        let t = Timings::new(s(2.5), s(2.0), s(0.5)).unwrap();
        assert_eq!(t.lease_duration_seconds(), 3);
        assert_eq!(t.call_timeout(), s(1.0));
    }

    #[test]
    fn lease_timings_need_whole_seconds_and_sane_floors() {
        let ms = Duration::from_millis;
        assert!(Timings::default().check_for_lease().is_ok());
        assert!(
            Timings::new(s(3.0), s(2.0), ms(500))
                .unwrap()
                .check_for_lease()
                .is_ok()
        );
        let typo = Timings::new(ms(15), ms(10), ms(2)).unwrap();
        let e = typo.check_for_lease().unwrap_err();
        assert!(e.to_string().contains("whole number of seconds"), "{e}");
        let tiny = Timings::new(ms(3), ms(2), ms(1)).unwrap().check_for_lease();
        assert!(matches!(tiny, Err(TimingError::NotWholeSeconds { .. })));
        let fast = Timings::new(s(2.0), s(1.2), ms(500))
            .unwrap()
            .check_for_lease();
        assert!(matches!(
            fast,
            Err(TimingError::BelowFloor {
                name: "renew deadline",
                ..
            })
        ));
        let hot = Timings::new(s(3.0), s(2.0), ms(50))
            .unwrap()
            .check_for_lease();
        assert!(matches!(
            hot,
            Err(TimingError::BelowFloor {
                name: "retry period",
                ..
            })
        ));
    }
}
