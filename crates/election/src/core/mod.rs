//! The sans-IO election core: a deterministic state machine with no clock,
//! no I/O and no async runtime, in the style of `quinn-proto`. Observations
//! go in through `handle_*(now, …)`; requests, events and the next timeout
//! come out through [`Core::poll_request`], [`Core::poll_event`] and
//! [`Core::poll_timeout`].
//!
//! ```
//! use leasehold_election::core::*;
//! let cfg = Config { identity: "pod-a".into(), timings: Timings::default(), release_on_shutdown: true, seed: 1 };
//! let mut core = Core::new(cfg, Instant::ZERO, WallTime::from_unix_micros(0)).unwrap();
//! // The first request is a read of the Lease.
//! let first: Vec<Request> = std::iter::from_fn(|| core.poll_request()).collect();
//! assert!(first.iter().any(|r| matches!(r, Request::Get { .. })));
//! ```

mod acknowledge;
mod io;
mod leading;
mod machine;
mod ops;
mod phase;
mod record;
mod rng;
mod stopping;
mod time;
mod timers;
mod timings;
mod view;
mod watching;

pub use io::{
    Event, Failure, Input, OpId, ReadResult, Request, StepDownReason, Warning, WatchEvent, WatchId,
    WorkEnd, WriteResult,
};
pub use machine::{Config, ConfigError, Core};
pub use record::{LeaseRecord, Observed, Term};
pub use time::{Instant, WallTime};
pub use timers::TimerKind;
pub use timings::{MAX_TIMING, TimingError, Timings};
#[cfg(test)]
mod tests;
