//! The sans-IO election core: a deterministic state machine with no clock,
//! no I/O and no async runtime. Inputs are observations with the current
//! instant; outputs are actions for a driver to perform.
//!
//! ```
//! use leasehold_election::core::*;
//! let cfg = Config { identity: "pod-a".into(), timings: Timings::default(), release_on_shutdown: true, seed: 1 };
//! let mut core = Core::new(cfg, Instant::ZERO, WallTime::from_unix_micros(0)).unwrap();
//! // The first request is a read of the Lease.
//! let first: Vec<Action> = std::iter::from_fn(|| core.poll_action()).collect();
//! assert!(first.iter().any(|a| matches!(a, Action::Get { .. })));
//! ```

mod io;
mod machine;
mod record;
mod rng;
mod time;
mod timings;

pub use io::{
    Action, Failure, Input, OpId, ReadResult, StepDownReason, TimerKind, Warning, WatchEvent,
    WatchId, WriteResult,
};
pub use machine::{Config, ConfigError, Core, until};
pub use record::{LeaseRecord, Observed, Term};
pub use time::{Instant, WallTime};
pub use timings::{MAX_TIMING, TimingError, Timings};

#[cfg(test)]
mod tests;
