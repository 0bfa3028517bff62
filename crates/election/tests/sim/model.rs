//! Parameters, randomness and the event types of the simulation.

use std::cmp::Ordering;
use std::time::Duration;

use leasehold_election::core::*;

pub const MS: u64 = 1_000_000;
pub const S: u64 = 1_000_000_000;

/// The simulation's own generator (splitmix64): every choice of a
/// schedule comes from it, so a seed replays the schedule exactly.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Uniform in `[lo, hi)`, or `lo` if the range is empty.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo)
        }
    }

    pub fn f(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

pub fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// One schedule's randomized settings.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub n: usize,
    pub timings: Timings,
    /// Faults (network, process, third-party edits) happen before this instant.
    pub fault_end: u64,
    pub end: u64,
    pub max_delay: u64,
    pub p_drop: f64,
    pub p_slow: f64,
    pub p_err: f64,
    pub p_lost: f64,
    pub p_watch_end: f64,
    /// Longest time cooperative leader-only work takes to stop once cancelled.
    pub work_max: u64,
    /// Chance that a term's work ignores cancellation (and abort).
    pub p_stuck: f64,
    pub faults: usize,
    pub third_party: usize,
    pub twin: bool,
}

impl Params {
    pub fn random(rng: &mut Rng) -> Params {
        let r = rng.f(0.2, 2.0);
        let rd = r * rng.f(1.25, 4.0);
        // Margin for 1 % skew both ways plus the leader-work stop time.
        let d = (rd * rng.f(1.08, 1.8)).max(1.0);
        let timings = Timings::new(
            Duration::from_secs_f64(d),
            Duration::from_secs_f64(rd),
            Duration::from_secs_f64(r),
        )
        .expect("generated timings are valid");
        let dn = ns(timings.lease_duration());
        let fault_end = rng.range(3 * dn, 6 * dn);
        let end = fault_end + liveness_bound(&timings) + 2 * dn;
        let t = ns(timings.call_timeout());
        let margin = dn as f64 * 0.98 - ns(timings.renew_deadline()) as f64 * 1.02;
        Params {
            n: rng.range(2, 6) as usize,
            timings,
            fault_end,
            end,
            // Normal one-way latency stays well below what a renew cycle
            // needs (renew_deadline − retry_period); slow messages during
            // faults go far beyond the call timeout.
            max_delay: rng.range(
                MS,
                (ns(timings.renew_deadline()) / 20).min(t / 3).max(2 * MS),
            ),
            p_drop: rng.f(0.0, 0.1),
            p_slow: rng.f(0.0, 0.05),
            p_err: rng.f(0.0, 0.1),
            p_lost: rng.f(0.0, 0.05),
            p_watch_end: rng.f(0.0, 0.05),
            work_max: (margin * 0.4).max(0.0) as u64,
            p_stuck: if rng.chance(0.4) {
                rng.f(0.1, 0.6)
            } else {
                0.0
            },
            faults: rng.range(0, 14) as usize,
            third_party: if rng.chance(0.5) {
                rng.range(1, 7) as usize
            } else {
                0
            },
            twin: rng.chance(0.2),
        }
    }

    /// The driver's grace before aborting work that ignores cancellation
    /// (and again before giving up on it): (lease_duration − renew_deadline) / 2.
    pub fn grace(&self) -> Duration {
        (self.timings.lease_duration() - self.timings.renew_deadline()) / 2
    }

    /// The longest stall of a candidate's loop.
    pub fn stall_max(&self) -> u64 {
        2 * ns(self.timings.renew_deadline())
    }
}

/// How long after the last fault a stable leader must exist:
/// - one lease duration (with 1 % skew) after the latest record was seen,
///   plus the time to see it (poll jitter up to 2.2 × retry and a call
///   timeout), a backoff, a renew deadline for requests hanging from the
///   fault period, and the acquiring round trip (as without third parties:
///   a deleted Lease or a cleared or foreign holder is waited out for the
///   last held record's duration from when it was seen, the same lease
///   duration);
/// - plus one stall (2 × renew_deadline): a loop starved when the faults
///   stop sees everything that happened meanwhile only at its end;
/// - plus two graces (lease_duration − renew_deadline): a candidate whose
///   work ignores cancellation stays out of the race until the driver gives
///   up on the work.
pub fn liveness_bound(t: &Timings) -> u64 {
    let d = ns(t.lease_duration()) as f64 * 1.02;
    let base =
        ns(t.renew_deadline()) + d as u64 + 5 * ns(t.retry_period()) + 2 * ns(t.call_timeout()) + S;
    let stall = 2 * ns(t.renew_deadline());
    let graces = ns(t.lease_duration() - t.renew_deadline());
    base + stall + graces
}

/// A request on its way to the simulated API server.
#[derive(Debug)]
pub enum Req {
    Get(OpId),
    Create(OpId, LeaseRecord),
    Update(OpId, LeaseRecord, String),
    /// The stopped-term acknowledgement, based on that resourceVersion.
    Ack(OpId, Term, String),
    Watch(WatchId, Option<String>),
}

/// Something that happens to one candidate.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    Partition(u64),
    Heal,
    Crash,
    Restart,
    Shutdown,
    /// Shut down right after the next acquiring write is sent; with `cut`,
    /// the connection also breaks once the server has applied it (its
    /// answer and the watch are lost for a moment).
    ShutdownMidAcquire {
        cut: bool,
    },
    Forbid(u64),
    Unforbid,
    ForbidWatch,
    /// The candidate's loop is starved: its inputs queue up until the end.
    Stall(u64),
    StallEnd(u64),
    /// The driver's watchdog instant of the leader stalled by stall `id`.
    Watchdog(u64),
    /// Acquisition paused for a while (the rename fence saw another Lease
    /// of the election held), then resumed for the same instance.
    Pause(u64),
    Resume(u64),
}

/// An edit of the Lease by someone who is not a candidate.
#[derive(Clone, Copy, Debug)]
pub enum ThirdParty {
    Delete,
    /// `holderIdentity: ""`, every other field kept.
    ClearHolder,
    /// Another client takes the lease over (a fresh term, same duration).
    Intruder,
    /// `leaseDurationSeconds` set to a whole number in 1..=ceil(D); with
    /// `cut`, the holder's connection breaks right after it saw the edit.
    Shorten {
        cut: bool,
    },
    /// `leaseTransitions` removed.
    DropTransitions,
    /// `holderIdentity` set to another candidate's identity (or, without
    /// `to_candidate`, a name nobody runs), every other field kept: an
    /// admin's overwrite.
    Overwrite {
        to_candidate: bool,
    },
}

#[derive(Debug)]
pub enum Ev {
    ToCore(usize, u64, Input),
    ToServer(usize, u64, Req),
    Timer(usize, u64, Instant),
    Fault(usize, Fault),
    Third(ThirdParty),
    /// Cooperative work of (candidate, instance, work id) has stopped.
    WorkStopped(usize, u64, u64),
    /// The driver's abort of stuck work did not stop it: from here on the
    /// library cannot stop it, and safety no longer counts it.
    WorkAborted(usize, u64, u64),
    /// The driver gives up on stuck work and reports it abandoned.
    WorkAbandoned(usize, u64, u64),
}

pub struct Item {
    pub at: u64,
    pub seq: u64,
    pub ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}

impl Eq for Item {}

impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}
