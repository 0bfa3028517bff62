//! How leasehold writes a time into an event: RFC 3339 in UTC with exactly
//! six fractional digits (`2026-12-03T07:31:48.123456Z`), the form of the
//! agent's own `@timestamp`.

use jiff::Timestamp;
use jiff::tz::Offset;

/// `t` as `YYYY-MM-DDThh:mm:ss.uuuuuuZ` (microseconds, truncated).
pub(crate) fn format_utc_micros(t: Timestamp) -> String {
    let dt = Offset::UTC.to_datetime(t);
    let micros = t.subsec_microsecond().rem_euclid(1_000_000);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        micros
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn six_digits_in_utc() {
        let t = Timestamp::from_nanosecond(1_796_283_108_123_456_789).unwrap();
        assert_eq!(format_utc_micros(t), "2026-12-03T07:31:48.123456Z");
        assert_eq!(
            format_utc_micros(Timestamp::UNIX_EPOCH),
            "1970-01-01T00:00:00.000000Z"
        );
    }
}
