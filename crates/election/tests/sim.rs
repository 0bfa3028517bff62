//! Randomized fault schedules on simulated time against the sans-IO core.
//!
//! A simulated API server holds one Lease with resourceVersions and 409
//! semantics, serves reads, writes and watches over a network with delays,
//! drops, timeouts and partitions, and 2–5 candidates run with clock rate
//! skew up to 1 %, crash, restart, shut down (also right after sending an
//! acquiring write, sometimes losing the connection as it applies), lose
//! RBAC rights, and have their loop starved for up to two renew deadlines
//! (inputs and timers arrive late; the driver's watchdog still cancels a
//! leader's work at its deadline, and the loop is then told
//! `WatchdogFired` first). A third party edits the Lease: deletes it,
//! clears the holder, takes it over as "intruder" (fresh times, same
//! duration, transitions + 1), shortens its duration to 1..=ceil(D)
//! seconds, drops its transitions, overwrites the holder with another
//! candidate's identity or a name nobody runs (every other field kept).
//! Candidates have acquisition paused for a while (the rename fence).
//! A leader whose term such an edit ended acknowledges its stopped work on
//! the Lease (kept there as the API server keeps an annotation), and the
//! candidate the record names may then take it at once. Leader-only work takes a while to stop
//! after the step-down, and sometimes ignores cancellation: the driver
//! aborts it after a grace of (lease_duration − renew_deadline) / 2 and
//! reports it abandoned after another.
//!
//! Checked on every schedule:
//! - safety: no two candidates lead, or run leader-only work the library
//!   is still responsible for, at overlapping true instants. Work that
//!   survives the driver's abort no longer counts (in-process code that
//!   ignores cancellation cannot be stopped); instead its term's lease
//!   must never be released by that instance, which is checked;
//! - an acknowledgement is only ever written for work that has ended;
//! - terms never go backwards: an acquiring write is above the highest
//!   transitions its candidate has seen and above the record it replaces,
//!   and a step-up is above every earlier one since the last third-party
//!   delete or drop of transitions;
//! - an acquire answer older than a record the candidate already took in
//!   never starts a term;
//! - shutdown: an instance that stops of its own accord with release on
//!   never leaves the Lease naming a term it knew it held, or wrote and
//!   never read back;
//! - liveness: once faults stop, a leader exists within the bound of
//!   `liveness_bound` and keeps leading;
//! - candidacy: every live candidate stays a candidate and ends up
//!   following the leader; one whose work was abandoned leads again once
//!   everyone else has shut down.
//!
//! What the core cannot know is not asked of it:
//! - a shortened duration is honoured only by a holder that sees the
//!   edit: the edit is made while the holder is reachable and watching,
//!   and when it leaves less time than the work needs to stop, the
//!   holder's renew or fence must get through too;
//! - after a delete, a create is unconditional: a process that never saw
//!   the Lease (or whose view lags behind the holder) creates it at once,
//!   and a create already on its way lands on the deleted Lease. The
//!   delete is made only when every running instance has taken in the
//!   current record and no create is on its way, and no process starts
//!   for the deleted record's duration (`LEASEHOLD_SIM_DELETE_ANYTIME=1`
//!   drops these precautions and shows the overlaps);
//! - a write that lands after the shutdown's resolving read is not known
//!   to the stopping instance.
//!
//! `LEASEHOLD_SIM_SEED=<n>` replays one schedule (printed on failure);
//! `LEASEHOLD_SIM_COUNT=<n>` changes the number of schedules;
//! `LEASEHOLD_SIM_TRACE=1` prints every event of a replayed schedule.

#[path = "sim/model.rs"]
mod model;
#[path = "sim/server.rs"]
mod server;
#[path = "sim/world.rs"]
mod world;

use model::Rng;
use world::{Sim, Stats};

const DEFAULT_SCHEDULES: u64 = 10_000;

fn schedule_seed(base: u64, i: u64) -> u64 {
    Rng(base ^ i.wrapping_mul(0xA24B_AED4_963E_E407)).next()
}

fn run_one(seed: u64) -> Result<Stats, String> {
    let result = std::panic::catch_unwind(|| {
        let mut sim = Sim::new(seed);
        sim.run();
        sim.stats
    });
    result.map_err(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("schedule failed: {msg}\n  replay with LEASEHOLD_SIM_SEED={seed}")
    })
}

#[test]
fn randomized_fault_schedules_keep_safety_liveness_and_candidacy() {
    if let Ok(seed) = std::env::var("LEASEHOLD_SIM_SEED") {
        let seed: u64 = seed.parse().expect("LEASEHOLD_SIM_SEED is a u64");
        match run_one(seed) {
            Ok(stats) => eprintln!("{stats:?}"),
            Err(e) => panic!("{e}"),
        }
        return;
    }
    let count: u64 = std::env::var("LEASEHOLD_SIM_COUNT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SCHEDULES);
    let threads = 2;
    let started = std::time::Instant::now();
    let results: Vec<(Stats, Vec<(u64, String)>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let (mut stats, mut failures) = (Stats::default(), Vec::new());
                    for i in (t..count).step_by(threads as usize) {
                        match run_one(schedule_seed(0x1ea5e401d, i)) {
                            Ok(s) => stats.add(&s),
                            Err(e) => failures.push((i, e)),
                        }
                    }
                    (stats, failures)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("sim thread"))
            .collect()
    });
    let mut stats = Stats::default();
    for (s, _) in &results {
        stats.add(s);
    }
    let mut failures: Vec<&(u64, String)> = results.iter().flat_map(|r| &r.1).collect();
    failures.sort_by_key(|f| f.0);
    eprintln!(
        "{count} schedules, {} failed, {:?}\n{}",
        failures.len(),
        started.elapsed(),
        stats.summary()
    );
    for (i, f) in failures.iter().take(10) {
        eprintln!("schedule #{i}: {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {count} schedules failed; first (schedule #{}): {}",
        failures.len(),
        failures[0].0,
        failures[0].1
    );
    // Sanity: the schedules actually exercise re-election and each kind
    // of trouble modelled.
    assert!(
        stats.step_ups > count,
        "only {} step-ups in {count} schedules",
        stats.step_ups
    );
    if count >= 1000 {
        let exercised = [
            ("watchdog firings during stalls", stats.watchdogs),
            ("acquisition pauses", stats.pauses),
            ("abandoned works", stats.abandoned),
            ("terms led again after abandoned work", stats.relead),
            (
                "shutdowns right after an acquiring write",
                stats.mid_acquire,
            ),
            ("deleted leases", stats.third[0]),
            ("cleared holders", stats.third[1]),
            ("intruders", stats.third[2]),
            ("shortened durations", stats.third[3]),
            (
                "durations shortened below the work's stop time",
                stats.shorten_short,
            ),
            ("fencing writes of a draining candidate", stats.fences),
            ("connections cut as an acquiring write applied", stats.cuts),
            ("dropped transitions", stats.third[4]),
            ("holders overwritten", stats.third[5]),
            ("stopped terms acknowledged", stats.acks),
        ];
        for (what, n) in exercised {
            assert!(n > 0, "no {what} in {count} schedules");
        }
    }
}

#[test]
fn a_seed_replays_the_same_schedule() {
    for i in 0..20 {
        let seed = schedule_seed(7, i);
        assert_eq!(run_one(seed), run_one(seed));
    }
}
