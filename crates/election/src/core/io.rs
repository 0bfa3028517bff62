//! What goes into the core (inputs) and what comes out (actions).

use std::time::Duration;

use super::record::{LeaseRecord, Observed, Term};
use super::time::Instant;

/// Identifies one API request, so a late answer to an abandoned request is
/// recognised and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(pub u64);

/// Identifies one watch stream; events of a replaced stream are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WatchId(pub u64);

/// Why a request failed, as far as the election cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// 403: missing RBAC rights. Retried with backoff; the driver explains.
    Forbidden,
    /// The per-call timeout passed; the request may or may not have applied.
    Timeout,
    /// Anything else (5xx, connection refused, undecodable answer…).
    Other,
}

/// Result of a `Get`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadResult {
    /// The Lease exists.
    Found(Observed),
    /// 404: there is no Lease yet.
    NotFound,
    /// The read failed.
    Failed(Failure),
}

/// Result of a `Create` or `Update`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteResult {
    /// Written; the Lease as stored by the API server.
    Ok(Observed),
    /// 409: someone else wrote first (or the Lease already exists).
    Conflict,
    /// 404 on update: the Lease was deleted meanwhile.
    NotFound,
    /// The write failed; it may or may not have applied.
    Failed(Failure),
}

/// One item of the watch stream on the single Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// The server accepted the watch request.
    Started,
    /// `ADDED` or `MODIFIED`.
    Upsert(Observed),
    /// `DELETED`.
    Deleted,
    /// `BOOKMARK`: nothing changed up to this resourceVersion.
    Bookmark(String),
    /// `ERROR` with code 410: the resourceVersion is too old; re-list.
    Expired,
    /// The stream ended (server timeout, connection closed).
    Ended,
    /// The watch request itself failed.
    Failed(Failure),
}

/// A timer the core asks the driver to keep. One per kind; setting a kind
/// again replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimerKind {
    /// The leader's next renew is due.
    Renew,
    /// The leader's renew deadline: step down if not renewed by then.
    RenewDeadline,
    /// The known record expires; attempt to acquire at this instant.
    Expiry,
    /// Poll the Lease (only while the watch is down).
    Poll,
    /// End of a backoff after a failed request.
    Backoff,
    /// Try to start the watch again.
    WatchRetry,
    /// The in-flight request's timeout.
    Request,
    /// Give up releasing during shutdown.
    StopDeadline,
}

impl TimerKind {
    pub(crate) const ALL: [TimerKind; 8] = [
        TimerKind::Renew,
        TimerKind::RenewDeadline,
        TimerKind::Expiry,
        TimerKind::Poll,
        TimerKind::Backoff,
        TimerKind::WatchRetry,
        TimerKind::Request,
        TimerKind::StopDeadline,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// An observation fed to the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A `Get` finished.
    ReadDone {
        /// The request.
        op: OpId,
        /// Its result.
        result: ReadResult,
    },
    /// A `Create` or `Update` finished.
    WriteDone {
        /// The request.
        op: OpId,
        /// Its result.
        result: WriteResult,
    },
    /// Something arrived on a watch stream.
    Watch {
        /// The stream.
        watch: WatchId,
        /// What arrived.
        event: WatchEvent,
    },
    /// A timer set with [`Action::SetTimer`] is due.
    TimerFired(TimerKind),
    /// Stop: step down, release if configured, then emit [`Action::Stopped`].
    Shutdown,
    /// The leader-only work of the last term has completely stopped.
    LeaderWorkStopped,
}

/// Why a leader stopped leading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepDownReason {
    /// The Lease names another holder.
    OtherHolder(String),
    /// The Lease names this identity but with a term this process did not write.
    OtherTerm,
    /// The Lease was deleted.
    Deleted,
    /// No successful renew for `renew_deadline`.
    RenewDeadline,
    /// Shutdown was requested.
    Shutdown,
}

/// Something the core noticed that an operator should know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// The record's duration is far above the configured one (honoured).
    SuspiciousDuration {
        /// The holder that wrote it.
        holder: String,
        /// `leaseDurationSeconds` found.
        seconds: i32,
        /// This process's configured lease duration.
        configured: Duration,
    },
    /// The record has no positive duration: treated as expired.
    MissingDuration {
        /// The holder named in it.
        holder: String,
    },
    /// Watching is forbidden: the candidate polls instead.
    WatchForbidden,
}

/// Something the core asks the driver to do (or to tell the world).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read the Lease.
    Get {
        /// Request id to answer with.
        op: OpId,
        /// Per-call timeout.
        timeout: Duration,
    },
    /// Create the Lease with this record.
    Create {
        /// Request id to answer with.
        op: OpId,
        /// The record to write.
        record: LeaseRecord,
        /// Per-call timeout.
        timeout: Duration,
    },
    /// Replace the Lease's record, conditional on `resource_version`.
    Update {
        /// Request id to answer with.
        op: OpId,
        /// The record to write (other spec fields stay as found).
        record: LeaseRecord,
        /// The last resourceVersion read; the write fails with 409 if stale.
        resource_version: String,
        /// Per-call timeout.
        timeout: Duration,
    },
    /// (Re)start the watch, replacing any previous stream.
    StartWatch {
        /// The new stream's id.
        watch: WatchId,
        /// Resume after this resourceVersion; `None` means from the current state.
        from: Option<String>,
    },
    /// Close the watch stream.
    StopWatch,
    /// Deliver [`Input::TimerFired`] at `at` (replaces the previous one of this kind).
    SetTimer {
        /// Which timer.
        kind: TimerKind,
        /// When.
        at: Instant,
    },
    /// Forget the timer of this kind.
    CancelTimer(TimerKind),
    /// This process now leads. Start leader-only work.
    StepUp {
        /// The term begun (or resumed).
        term: Term,
    },
    /// This process no longer leads. Cancel leader-only work now, then
    /// report [`Input::LeaderWorkStopped`].
    StepDown {
        /// Why.
        reason: StepDownReason,
    },
    /// Not leading; the Lease's holder as last seen (`None` if free or absent).
    Following {
        /// Current holder.
        holder: Option<String>,
    },
    /// The lease was released for others to take at once.
    Released,
    /// The core has finished; no more actions follow.
    Stopped,
    /// Report this to the operator.
    Warn(Warning),
}
