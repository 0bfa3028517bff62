//! Leader election on a `coordination.k8s.io/v1` Lease, wire-compatible with
//! client-go's `LeaseLock`.
//!
//! [`core`] is a deterministic state machine holding every rule of the
//! election; the driver performs its actions with kube-rs and tokio.

pub mod core;
