//! The pipeline between inputs and outputs: the event an input produces
//! (its document with, beside it, its input, its delivery acknowledgement
//! and the leadership term it belongs to), the acknowledgements that let a
//! replaying input move its checkpoint only past delivered events, and the
//! publisher through which inputs hand events to an output's queue, after
//! the input's processors ran on them.
//!
//! Inputs depend on this layer and never on the runtime; outputs take its
//! events; it hands them to an output's queue and depends on nothing above
//! (runtime, command line).

pub mod ack;
pub mod event;
pub mod json_text;
pub mod processing;
pub mod publisher;
pub mod queue;
pub mod routing;
