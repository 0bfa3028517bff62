//! Event outputs: where finished events go.
//!
//! Every output named in the policy's `outputs:` section gets a bounded
//! queue and a writer task (for a network output, one lane per request in
//! flight). Inputs hand events to an [`EventSender`],
//! which waits while the queue is full and never drops an event; the writer
//! takes whatever is queued in batches, writes each batch at once and keeps
//! retrying a batch that failed until it is written. [`Outputs::shutdown`]
//! closes the queues and lets the writers drain and flush.
//!
//! Two kinds exist: `console` (NDJSON on standard output) and `file` (NDJSON
//! in a directory, rotated by size like Beats' file output).

mod budget;
mod common;
mod console;
pub mod disk;
pub mod elasticsearch;
mod file;
mod health;
mod metrics;
pub mod otlp;
mod queue;
pub mod retry;
mod running;
mod settings;
mod wire;

pub use health::{HealthState, OutputHealth};
pub use metrics::OutputMetrics;
pub use running::{Closed, EventSender, Outputs};
pub use settings::*;
