//! Intervals on the wall clock (unix microseconds) and the one rule every
//! election test judges them by: no two of them may share an instant.

use std::fmt;

/// A span of time in which one party (a candidate's term, one run of
/// leader-only work) believed or acted as the leader: `[start, end)`, with
/// `end == None` meaning "still open".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// Who: identity, term and whatever else tells this interval apart.
    pub label: String,
    /// First instant, unix microseconds.
    pub start: i64,
    /// First instant after it, unix microseconds; `None` while still open.
    pub end: Option<i64>,
}

impl Interval {
    fn end_or_max(&self) -> i64 {
        self.end.unwrap_or(i64::MAX)
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.end {
            Some(end) => write!(
                f,
                "{} [{}, {})",
                self.label,
                micros_to_rfc3339(self.start),
                micros_to_rfc3339(end)
            ),
            None => write!(
                f,
                "{} [{}, still open)",
                self.label,
                micros_to_rfc3339(self.start)
            ),
        }
    }
}

/// Two intervals that share time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The interval that started first.
    pub first: Interval,
    /// The one that started while `first` had not ended.
    pub second: Interval,
    /// Length of the shared time in microseconds; `None` if both are open.
    pub micros: Option<i64>,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.micros {
            Some(us) => write!(f, "overlap of {us} µs: {} and {}", self.first, self.second),
            None => write!(
                f,
                "overlap without end (both still open): {} and {}",
                self.first, self.second
            ),
        }
    }
}

/// Every pair of intervals that share at least one instant. Empty intervals
/// (end at or before start) share nothing.
pub fn overlaps(intervals: &[Interval]) -> Vec<Overlap> {
    let mut sorted: Vec<&Interval> = intervals.iter().collect();
    sorted.sort_by_key(|i| (i.start, i.end_or_max()));
    let mut found = Vec::new();
    for (n, a) in sorted.iter().enumerate() {
        for b in &sorted[n + 1..] {
            if b.start >= a.end_or_max() {
                // Sorted by start: every later one starts after `a` too.
                break;
            }
            let end = a.end_or_max().min(b.end_or_max());
            if b.start < end {
                found.push(Overlap {
                    first: (*a).clone(),
                    second: (*b).clone(),
                    micros: (end != i64::MAX).then(|| end - b.start),
                });
            }
        }
    }
    found
}

/// Parses an RFC 3339 UTC timestamp as written by the candidates
/// (`2026-12-02T12:00:00.123456Z`, any number of fractional digits up to
/// nine, or none) into unix microseconds.
pub fn parse_rfc3339_micros(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || *b.last()? != b'Z' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let s = ts.get(range)?;
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let frac = &ts[19..ts.len() - 1];
    let micros_frac = if frac.is_empty() {
        0
    } else {
        let digits = frac.strip_prefix('.')?;
        if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let padded = format!("{digits:0<9}");
        padded[..6].parse::<i64>().ok()?
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(secs * 1_000_000 + micros_frac)
}

/// Formats unix microseconds as `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
pub fn micros_to_rfc3339(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The wall clock now, in unix microseconds.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

// Days since 1970-01-01 of a proleptic Gregorian date: count whole 400-year
// eras (146097 days each) from 0000-03-01, then the day within the era with
// years starting in March so that the leap day falls last.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

// The inverse of `days_from_civil`.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(label: &str, start: i64, end: Option<i64>) -> Interval {
        Interval {
            label: label.into(),
            start,
            end,
        }
    }

    #[test]
    fn timestamps_round_trip_and_match_known_instants() {
        assert_eq!(parse_rfc3339_micros("1970-01-01T00:00:00.000000Z"), Some(0));
        assert_eq!(
            parse_rfc3339_micros("2026-12-02T12:00:00.123456Z"),
            Some(1_796_212_800_123_456)
        );
        assert_eq!(
            parse_rfc3339_micros("2000-02-29T23:59:59Z"),
            Some(951_868_799_000_000)
        );
        assert_eq!(
            parse_rfc3339_micros("2024-03-01T00:00:00.5Z"),
            Some(1_709_251_200_500_000)
        );
        for bad in [
            "",
            "2026-12-02 12:00:00Z",
            "2026-12-02T12:00:00",
            "2026-13-02T12:00:00Z",
            "2026-12-02T12:00:00.Z",
            "2026-12-02T12:00:00.1234567890Z",
        ] {
            assert_eq!(parse_rfc3339_micros(bad), None, "{bad}");
        }
        for us in [0, 1, 951_868_799_000_000, 1_796_212_800_123_456] {
            assert_eq!(parse_rfc3339_micros(&micros_to_rfc3339(us)), Some(us));
        }
    }

    #[test]
    fn only_shared_instants_count() {
        // Touching ends do not overlap; empty intervals never do.
        let none = overlaps(&[
            iv("a", 0, Some(10)),
            iv("b", 10, Some(20)),
            iv("c", 20, None),
            iv("d", 15, Some(15)),
        ]);
        assert!(none.is_empty(), "{none:?}");
        let found = overlaps(&[iv("a", 0, Some(10)), iv("b", 9, Some(20))]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].micros, Some(1));
        // A long interval overlaps everything inside it, even past a gap.
        let found = overlaps(&[
            iv("long", 0, None),
            iv("x", 5, Some(6)),
            iv("y", 50, Some(60)),
        ]);
        assert_eq!(found.len(), 2, "{found:?}");
        let both_open = overlaps(&[iv("a", 0, None), iv("b", 3, None)]);
        assert_eq!(both_open[0].micros, None);
        assert!(both_open[0].to_string().contains("both still open"));
    }
}
