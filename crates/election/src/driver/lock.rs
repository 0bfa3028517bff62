//! The Lease I/O behind a small trait, as client-go's
//! `resourcelock.Interface`: the driver loop runs against any
//! implementation (the API server through kube-rs, or a simulated server
//! in tests).

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

use crate::core::{Failure, LeaseRecord, Observed, Term};

/// Why a lock operation failed, as far as the election cares.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockError {
    /// 404: no such Lease.
    NotFound,
    /// 409: someone else wrote first, or the Lease already exists.
    Conflict,
    /// 410: the resourceVersion to watch from is too old.
    Gone,
    /// Anything else; the operation may or may not have applied.
    Failed(Failure),
}

/// One item of a watch on the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockWatchEvent {
    /// Created or changed.
    Upsert(Observed),
    /// Deleted.
    Deleted,
    /// Nothing changed up to this resourceVersion.
    Bookmark(String),
    /// The stream's resourceVersion is too old: re-list.
    Expired,
}

/// Reads, writes and watches one Lease. Every future must be cancel-safe:
/// the driver drops (aborts) requests the core has given up on.
pub trait LeaseLock: Send + Sync + 'static {
    /// `namespace/name`, for logs.
    fn describe(&self) -> String;
    /// Reads the Lease.
    fn get(&self) -> BoxFuture<'static, Result<Observed, LockError>>;
    /// Creates the Lease with `record`.
    fn create(&self, record: LeaseRecord) -> BoxFuture<'static, Result<Observed, LockError>>;
    /// Replaces the record of the Lease as read at exactly
    /// `resource_version` (its other fields come from that same object),
    /// failing with [`LockError::Conflict`] if it changed since.
    fn update(
        &self,
        resource_version: String,
        record: LeaseRecord,
    ) -> BoxFuture<'static, Result<Observed, LockError>>;
    /// Records on the Lease as read at exactly `resource_version`, record
    /// unchanged, that the work of `stopped` has ended (the stopped-term
    /// acknowledgement), failing with [`LockError::Conflict`] if it
    /// changed since.
    fn acknowledge(
        &self,
        resource_version: String,
        stopped: Term,
    ) -> BoxFuture<'static, Result<Observed, LockError>>;
    /// Watches the Lease after `from` (or from its current state). The
    /// stream ends when the server ends it.
    fn watch(
        &self,
        from: Option<String>,
    ) -> BoxFuture<'static, Result<BoxStream<'static, LockWatchEvent>, LockError>>;
}
