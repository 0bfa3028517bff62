//! How an OTLP export fails, over gRPC or HTTP alike.

use std::time::Duration;

/// An export that failed as a whole.
#[derive(Debug)]
pub struct ExportError {
    /// Whether sending the same data again may succeed.
    pub retryable: bool,
    /// The server's `Retry-After`, when it gave one.
    pub retry_after: Option<Duration>,
    /// What happened.
    pub message: String,
}
