//! Time types of the core: a monotonic [`Instant`] that tests can simulate,
//! and a [`WallTime`] used only to stamp the record (`acquireTime`,
//! `renewTime`), never to judge expiry.

use std::fmt;
use std::ops::Add;
use std::time::Duration;

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

const MICROS_PER_SEC: i64 = 1_000_000;
const SECS_PER_DAY: i64 = 86_400;

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
    pub fn to_micro_time(self) -> String {
        let secs = self.micros.div_euclid(MICROS_PER_SEC);
        let frac = self.micros.rem_euclid(MICROS_PER_SEC);
        let days = secs.div_euclid(SECS_PER_DAY);
        let sod = secs.rem_euclid(SECS_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
            sod / 3600,
            (sod / 60) % 60,
            sod % 60
        )
    }

    /// Parses an RFC 3339 timestamp (any number of fractional digits,
    /// `Z` or a numeric offset). Returns `None` for anything else, so a
    /// garbage time in a Lease is reported, not a panic.
    pub fn parse_rfc3339(text: &str) -> Option<WallTime> {
        let b = text.as_bytes();
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
            return None;
        }
        if b[13] != b':' || b[16] != b':' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let s = text.get(r)?;
            if !s.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return None;
        }
        if hour > 23 || min > 59 || sec > 60 {
            return None;
        }
        let mut i = 19;
        let mut frac_micros = 0i64;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                if i - start < 6 {
                    frac_micros = frac_micros * 10 + i64::from(b[i] - b'0');
                }
                i += 1;
            }
            let digits = i - start;
            if digits == 0 {
                return None;
            }
            for _ in digits..6 {
                frac_micros *= 10;
            }
        }
        let offset_secs = match b.get(i) {
            Some(b'Z' | b'z') if i + 1 == b.len() => 0,
            Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
                let oh = num(i + 1..i + 3)?;
                let om = num(i + 4..i + 6)?;
                if oh > 23 || om > 59 {
                    return None;
                }
                let o = oh * 3600 + om * 60;
                if *sign == b'+' { o } else { -o }
            }
            _ => return None,
        };
        let days = days_from_civil(year, month, day);
        let secs = days * SECS_PER_DAY + hour * 3600 + min * 60 + sec - offset_secs;
        Some(WallTime {
            micros: secs * MICROS_PER_SEC + frac_micros,
        })
    }
}

impl fmt::Display for WallTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_micro_time())
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (era arithmetic on
/// 400-year cycles starting in March).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
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
