//! Leader election on a `coordination.k8s.io/v1` Lease, wire-compatible with
//! client-go's `LeaseLock`, that never leaves the election and always stops
//! leading on loss.
//!
//! - [`core`] is a deterministic state machine holding every rule of the
//!   election (no clock, no I/O), tested on simulated time.
//! - [`Elector`] drives it with kube-rs and tokio: one watch on the Lease,
//!   polling only while the watch is down, per-call timeouts, release on
//!   shutdown.

#![warn(missing_docs)]

pub mod core;
mod driver;
pub mod names;

pub use crate::core::{Term, TimingError, Timings};
pub use driver::{
    ANNOTATION_PREFIX, BuildError, Checkpoints, ELECTION_LABEL, ElectionHandle, Elector,
    ElectorBuilder, FLEET_LABEL, Fence, HealthCheck, LeaderTask, Leadership, LeaseLock, LockError,
    LockWatchEvent, Metrics, NoMetrics, Resigner, SimpleMetrics, StateChange, StateHook,
};
