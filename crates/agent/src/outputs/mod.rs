//! Event outputs: where finished events go.
//!
//! Every output named in the policy's `outputs:` section gets a bounded
//! queue and a writer task (for a network output, one lane per request in
//! flight). Inputs hand events to an [`EventSender`], which waits while the
//! queue is full and never drops an event. A sink (`sink::Sink`) only
//! encodes, sends and answers per line (delivered, duplicate, retry, drop
//! with a reason); the writer (`writer`) alone settles those answers for
//! every sink: acknowledgements, retries with backoff, ended terms.
//! [`Outputs::shutdown`] closes the queues and lets the writers drain and
//! flush.
//!
//! Kinds: `console` (NDJSON on standard output), `file` (NDJSON in a
//! directory, rotated by size like Beats' file output), `elasticsearch`
//! and `otlp`.

mod batch;
mod budget;
mod common;
mod console;
pub mod disk;
mod disk_feed;
pub mod elasticsearch;
mod file;
mod health;
mod kind;
mod metrics;
pub mod otlp;
pub mod retry;
mod running;
mod settings;
mod sink;
mod types;
mod wire;
mod writer;

pub use file::FileSettings;
pub use health::{HealthState, OutputHealth};
pub use kind::OutputKind;
pub use metrics::OutputMetrics;
pub use running::{Closed, EventSender, Outputs};
pub use settings::*;
pub use types::output_types;
