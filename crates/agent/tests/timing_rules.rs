//! The lease timing rule exists twice: in the election crate (what the
//! agent enforces when it starts an elector) and in the policy crate (what
//! `check` says), because the policy crate stays free of the election
//! crate's dependencies. They must refuse exactly the same timings, with
//! the same reason.

use std::time::Duration;

use leasehold_election::{TimingError, Timings};
use leasehold_policy::providers::{
    LeaseTimingError, LeaseTimings, MAX_LEASE_TIMING_MS, check_lease_timings,
};

fn kind_of_election(e: &TimingError) -> String {
    match e {
        TimingError::NotPositive { name } => format!("not positive: {name}"),
        TimingError::TooLong { name, .. } => format!("too long: {name}"),
        TimingError::DurationNotAboveDeadline { .. } => "duration not above deadline".into(),
        TimingError::DeadlineNotAboveRetry { .. } => "deadline not above retry".into(),
        other => format!("other: {other}"),
    }
}

fn kind_of_policy(e: &LeaseTimingError) -> String {
    match e {
        LeaseTimingError::NotPositive { name } => format!("not positive: {name}"),
        LeaseTimingError::TooLong { name } => format!("too long: {name}"),
        LeaseTimingError::DurationNotAboveDeadline => "duration not above deadline".into(),
        LeaseTimingError::DeadlineNotAboveRetry => "deadline not above retry".into(),
    }
}

#[test]
fn both_copies_of_the_timing_rule_agree() {
    // Every boundary of the rule, in milliseconds.
    let values = [
        0,
        1,
        499,
        500,
        999,
        1000,
        1199,
        1200,
        1201,
        1500,
        2000,
        2399,
        2400,
        2401,
        10_000,
        11_999,
        12_000,
        12_001,
        15_000,
        MAX_LEASE_TIMING_MS - 1,
        MAX_LEASE_TIMING_MS,
        MAX_LEASE_TIMING_MS + 1,
    ];
    let mut checked = 0;
    for d in values {
        for r in values {
            for p in values {
                let election = Timings::new(
                    Duration::from_millis(d),
                    Duration::from_millis(r),
                    Duration::from_millis(p),
                )
                .map(|_| ())
                .map_err(|e| kind_of_election(&e));
                let policy = check_lease_timings(d, r, p).map_err(|e| kind_of_policy(&e));
                assert_eq!(election, policy, "{d} ms / {r} ms / {p} ms");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, values.len().pow(3));
}

/// What an `ElectionSpec` can hold (`LeaseTimings`, whole seconds) the
/// election always accepts: the agent converts one into the other without
/// a fallback.
#[test]
fn every_lease_timings_value_is_accepted_by_the_election() {
    let values = [0, 1, 2, 3, 9, 10, 11, 12, 13, 15, 86_399, 86_400, 86_401];
    for d in values {
        for r in values {
            for p in values {
                let election = Timings::new(
                    Duration::from_secs(d),
                    Duration::from_secs(r),
                    Duration::from_secs(p),
                )
                .is_ok();
                let spec = LeaseTimings::from_secs(d, r, p).is_ok();
                assert_eq!(election, spec, "{d} s / {r} s / {p} s");
            }
        }
    }
}
