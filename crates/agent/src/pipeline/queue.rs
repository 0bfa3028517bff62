//! The queue interface between inputs and outputs: what a publisher hands
//! its events to. Each output implements it with its own queue (in memory
//! or on disk, see `outputs`); the pipeline knows nothing else of them.

use std::fmt;

use futures_util::future::BoxFuture;

use crate::pipeline::event::Event;

/// The error of [`EventQueue::send`] once its output has shut down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the output has shut down")
    }
}

impl std::error::Error for Closed {}

/// One output's queue, for one input's events.
pub trait EventQueue: Send + Sync + 'static {
    /// Queues `ev`, waiting while the queue is full (never drops).
    ///
    /// Cancel-safe: if the future is dropped before it completes, the
    /// event was not queued. Fails only when the output has shut down.
    fn send(&self, ev: Event) -> BoxFuture<'_, Result<(), Closed>>;
}
