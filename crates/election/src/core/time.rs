//! Time types of the core: a monotonic [`Instant`] that tests can simulate,
//! and a [`WallTime`] used only to stamp the record (`acquireTime`,
//! `renewTime`), never to judge expiry.

use std::fmt;
use std::ops::Add;
use std::time::Duration;

use jiff::Timestamp;

/// A point on the local monotonic clock, as a duration since an arbitrary
/// origin chosen by the driver. The core never reads a clock itself, so a
/// simulation can run it on virtual time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(Duration);

impl Instant {
    /// The origin of the clock.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// The instant `since_origin` after the origin.
    pub const fn from_duration(since_origin: Duration) -> Self {
        Instant(since_origin)
    }

    /// The instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(Duration::from_nanos(nanos))
    }

    /// Time since the origin.
    pub const fn as_duration(self) -> Duration {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    /// Saturates instead of overflowing: the core must never panic.
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(rhs))
    }
}

/// A UTC wall-clock time with microsecond precision, the precision of a
/// Kubernetes `MicroTime`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WallTime {
    micros: i64,
}

impl WallTime {
    /// The time `micros` microseconds after 1970-01-01T00:00:00Z.
    pub const fn from_unix_micros(micros: i64) -> Self {
        WallTime { micros }
    }

    /// Microseconds since 1970-01-01T00:00:00Z.
    pub const fn unix_micros(self) -> i64 {
        self.micros
    }

    /// Formats as a Kubernetes `MicroTime` the way client-go writes it:
    /// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, UTC, exactly six fractional digits.
    ///
    /// A time outside the years -9999..=9999 (only ever a corrupt value) is
    /// clamped to the nearest end of that range rather than panicking.
    pub fn to_micro_time(self) -> String {
        let at = Timestamp::from_microsecond(self.micros).unwrap_or(if self.micros < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        });
        format!("{at:.6}")
    }

    /// Parses an RFC 3339 timestamp (up to nine fractional digits, `Z` or a
    /// numeric offset, which is applied). Digits past the microsecond are
    /// truncated. The grammar is jiff's, the same that reads the typed
    /// `MicroTime` fields of k8s-openapi, so a few RFC 3339 relatives (an
    /// RFC 9557 `[zone]` suffix, the basic ISO 8601 form) are accepted too,
    /// and a leap second (`:60`) reads as `:59`.
    /// Returns `None` for anything else, so a garbage time in a Lease is
    /// reported, not a panic.
    pub fn parse_rfc3339(text: &str) -> Option<WallTime> {
        let at: Timestamp = text.parse().ok()?;
        let micros = at.as_nanosecond().div_euclid(1_000);
        i64::try_from(micros).ok().map(WallTime::from_unix_micros)
    }
}

impl fmt::Display for WallTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_micro_time())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_micro_time_with_six_digits_and_z() {
        assert_eq!(
            WallTime::from_unix_micros(0).to_micro_time(),
            "1970-01-01T00:00:00.000000Z"
        );
        let t = WallTime::parse_rfc3339("2024-02-29T23:59:58.5Z").unwrap();
        assert_eq!(t.to_micro_time(), "2024-02-29T23:59:58.500000Z");
        let t = WallTime::from_unix_micros(1_700_000_000_123_456);
        assert_eq!(t.to_micro_time(), "2023-11-14T22:13:20.123456Z");
    }

    #[test]
    fn parse_round_trips_and_applies_offsets() {
        for s in [
            "2023-11-14T22:13:20.123456Z",
            "1999-12-31T23:59:59.000001Z",
            "2100-03-01T00:00:00.000000Z",
        ] {
            assert_eq!(WallTime::parse_rfc3339(s).unwrap().to_micro_time(), s);
        }
        let a = WallTime::parse_rfc3339("2023-11-14T23:13:20.1234569+01:00").unwrap();
        assert_eq!(a.to_micro_time(), "2023-11-14T22:13:20.123456Z");
        assert_eq!(
            WallTime::parse_rfc3339("2023-11-14T22:13:20Z")
                .unwrap()
                .unix_micros(),
            1_700_000_000_000_000
        );
    }

    #[test]
    fn pre_epoch_and_out_of_range_times_neither_drift_nor_panic() {
        let t = WallTime::from_unix_micros(-1);
        assert_eq!(t.to_micro_time(), "1969-12-31T23:59:59.999999Z");
        assert_eq!(WallTime::parse_rfc3339(&t.to_micro_time()), Some(t));
        assert_eq!(
            WallTime::parse_rfc3339("1969-12-31T23:59:59.9999999Z"),
            Some(t)
        );
        let late = WallTime::from_unix_micros(i64::MAX).to_micro_time();
        assert!(late.starts_with("9999-12-"), "{late}");
        let early = WallTime::from_unix_micros(i64::MIN).to_micro_time();
        assert!(early.starts_with("-009999-"), "{early}");
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for s in [
            "",
            "yesterday",
            "2023-13-01T00:00:00Z",
            "2023-02-30T00:00:00Z",
            "2023-01-01T00:00:00",
            "2023-01-01T00:00:00.Z",
            "2023-01-01T25:00:00Z",
            "2023-01-01T00:00:00Zjunk",
            "２０２３-01-01T00:00:00Z",
        ] {
            assert_eq!(WallTime::parse_rfc3339(s), None, "{s}");
        }
    }
}
