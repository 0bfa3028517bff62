//! When periodic inputs fetch, and the ids of what they fetch.
//!
//! Fetches happen on wall-clock multiples of `period` (as Metricbeat's
//! period alignment does), and a document's id is derived from the input,
//! the metricset, the object and the aligned timestamp. Two agents that
//! both fetched in one period during a handover therefore write documents
//! with the same timestamps and ids, and a sink drops the repeats.

use std::time::Duration;

/// The first multiple of `period` (since the Unix epoch, in microseconds)
/// strictly after `now_us`.
pub fn next_aligned(now_us: i64, period: Duration) -> i64 {
    let p = i64::try_from(period.as_micros()).unwrap_or(i64::MAX).max(1);
    (now_us.div_euclid(p) + 1).saturating_mul(p)
}

/// Now, in microseconds since the Unix epoch.
pub fn now_us() -> i64 {
    jiff::Timestamp::now().as_microsecond()
}

/// Sleeps until wall-clock time `at_us`.
pub async fn sleep_until_wall(at_us: i64) {
    let delta = at_us.saturating_sub(now_us());
    if delta > 0 {
        tokio::time::sleep(Duration::from_micros(delta as u64)).await;
    }
}

pub use crate::pipeline::event::{document_id, rfc3339_us};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_align_on_the_wall_clock() {
        let s = Duration::from_secs(10);
        assert_eq!(next_aligned(0, s), 10_000_000);
        assert_eq!(next_aligned(9_999_999, s), 10_000_000);
        assert_eq!(next_aligned(10_000_000, s), 20_000_000);
        assert_eq!(
            next_aligned(1_796_284_960_685_504, s),
            1_796_284_970_000_000
        );
        assert_eq!(next_aligned(5, Duration::ZERO), 6);
    }

    #[test]
    fn ids_depend_on_every_part_and_its_boundaries() {
        let id = document_id(&["in", "state_pod", "ns/pod", "2026"]);
        assert_eq!(id.len(), 32);
        assert_eq!(id, document_id(&["in", "state_pod", "ns/pod", "2026"]));
        assert_ne!(id, document_id(&["in", "state_pod", "ns/pod", "2027"]));
        assert_ne!(document_id(&["ab", "c"]), document_id(&["a", "bc"]));
    }

    #[test]
    fn timestamps_are_formatted() {
        assert_eq!(
            rfc3339_us(1_796_284_970_000_000),
            "2026-12-03T08:02:50.000000Z"
        );
    }
}
