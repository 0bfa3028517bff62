//! What goes into the core (observations) and what comes out of it
//! (requests to perform and events to report).

use std::time::Duration;

use super::record::{LeaseRecord, Observed, Term};

/// Identifies one API request, so a late answer to an abandoned request is
/// recognised and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(pub u64);

/// Identifies one watch stream; events of a replaced stream are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WatchId(pub u64);

/// Why a request failed, as far as the election cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// 403: missing RBAC rights. Retried with backoff; the driver explains.
    Forbidden,
    /// The per-call timeout passed; the request may or may not have applied.
    Timeout,
    /// Anything else (5xx, connection refused, undecodable answer…).
    Other,
}

/// Result of a read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadResult {
    /// The Lease exists.
    Found(Observed),
    /// 404: there is no Lease.
    NotFound,
    /// The read failed.
    Failed(Failure),
}

/// Result of a create or update.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
#[non_exhaustive]
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

/// How the leader-only work of a term ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkEnd {
    /// Every task and process of the work is gone.
    Stopped,
    /// The work ignored cancellation and could not be confirmed gone. The
    /// election goes on without it, but a lease it may still act under is
    /// never released (it is left to expire).
    Abandoned,
}

/// An observation fed to the core. Each variant has its own `handle_*`
/// method on [`Core`](super::Core); this enum serves drivers and
/// simulations that queue observations.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Input {
    /// A read finished.
    ReadDone {
        /// The request.
        op: OpId,
        /// Its result.
        result: ReadResult,
    },
    /// A create or update finished.
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
    /// The instant of [`Core::poll_timeout`](super::Core::poll_timeout) has passed.
    Timeout,
    /// The driver's watchdog cancelled the leader-only work at the renew
    /// deadline while the loop could not run: the term is over.
    WatchdogFired,
    /// Stop: step down, release if configured, then emit [`Event::Stopped`].
    Shutdown,
    /// The leader-only work of the last term has ended.
    WorkEnded(WorkEnd),
    /// Hand the lease over: step down, release it once the work has
    /// stopped, and do not take it again for `hold_back` (unless still
    /// nobody else has by then). Candidacy goes on.
    Resign {
        /// How long to leave the lease to others.
        hold_back: std::time::Duration,
    },
    /// From now on, wait this long past the moment a lease becomes free
    /// (released, expired or missing) before taking it; a leftover term of
    /// our own is still taken at once. A program that runs several
    /// elections uses it to leave free leases to less busy candidates.
    /// Never delays a step-down.
    DeferAcquisition(std::time::Duration),
    /// While `true`, take no lease at all, free or not (a term already led
    /// goes on). A program that sees another Lease guarding the same work
    /// held (the Lease was renamed while some candidates still use the
    /// old name) keeps out until that Lease is free.
    PauseAcquisition(bool),
}

/// Why a leader stopped leading.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepDownReason {
    /// The Lease names another holder.
    OtherHolder(String),
    /// The Lease names this identity but with a term this process did not write.
    OtherTerm,
    /// The holder was cleared by someone else (not a release of ours).
    Cleared,
    /// The Lease was deleted.
    Deleted,
    /// No successful renew for `renew_deadline` (or for the shortened
    /// duration an edit left in the record).
    RenewDeadline,
    /// Shutdown was requested.
    Shutdown,
    /// This process handed the lease over (its leader-only work kept failing).
    Resigned,
}

/// Something the core noticed that an operator should know.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Warning {
    /// The record's duration is far above the configured one (honoured).
    SuspiciousDuration {
        /// The holder named in the record.
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
    /// Our own term's record was edited to a duration shorter than our
    /// renew deadline: renewing at once, stepping down if that fails.
    ShortenedDuration {
        /// `leaseDurationSeconds` found.
        seconds: i32,
    },
    /// The record's `leaseTransitions` went below a value seen before (a
    /// third-party edit); new terms continue above the highest seen.
    TransitionsWentBack {
        /// The value found.
        found: i32,
        /// The highest seen before.
        highest: i32,
    },
    /// The leader-only work ignored cancellation; the lease of its term is
    /// left to expire instead of being released.
    WorkAbandoned {
        /// The term whose work may still run.
        term: Term,
    },
    /// Watching has been refused (403) for a whole lease duration: the
    /// candidate polls instead. Repeated every ten minutes while it lasts.
    WatchForbidden,
    /// Creating the Lease failed with 404: its namespace does not exist.
    /// Retried with a growing backoff; repeated at every attempt.
    NamespaceNotFound,
    /// Our create of a missing Lease landed after another holder's record
    /// of it was deleted (someone deleted the Lease under its leader): no
    /// term starts; the record is waited out like anyone's.
    CreateCrossedDeletion,
}

/// An API request (or watch control) for the driver to perform.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
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
    /// Replace the Lease's record, conditional on `resource_version`. The
    /// rest of the object (metadata, `strategy`, `preferredHolder`) must be
    /// taken from the object read at exactly that resourceVersion.
    Update {
        /// Request id to answer with.
        op: OpId,
        /// The record to write.
        record: LeaseRecord,
        /// The resourceVersion the write is based on; 409 if stale.
        resource_version: String,
        /// Per-call timeout.
        timeout: Duration,
    },
    /// Record on the Lease, as read at `resource_version` and otherwise
    /// unchanged, that the leader-only work of `stopped` (a term of this
    /// process) has ended: the stopped-term acknowledgement. 409 if the
    /// Lease changed since.
    Acknowledge {
        /// Request id to answer with (as a write).
        op: OpId,
        /// The term whose work has stopped.
        stopped: Term,
        /// The resourceVersion the write is based on.
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
    /// Abandon the request in flight (its answer would be ignored).
    Abandon(OpId),
}

impl Request {
    /// The request id, for requests that are answered.
    pub fn op(&self) -> Option<OpId> {
        match self {
            Request::Get { op, .. }
            | Request::Create { op, .. }
            | Request::Update { op, .. }
            | Request::Acknowledge { op, .. } => Some(*op),
            _ => None,
        }
    }
}

/// Something the election reports. Drivers handle events before requests:
/// a step-down cancels leader-only work before anything else happens.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// This process now leads a new term it acquired. Start leader-only work.
    StepUp {
        /// The term begun.
        term: Term,
    },
    /// This process no longer leads. Cancel leader-only work now, then
    /// report [`Input::WorkEnded`].
    StepDown {
        /// The term that ended.
        term: Term,
        /// Why.
        reason: StepDownReason,
    },
    /// Not leading; the Lease's holder as last seen (`None` if free,
    /// absent, or a leftover term of this process).
    Following {
        /// Current holder.
        holder: Option<String>,
    },
    /// A renew (or the acquiring write) succeeded; the step-down deadline
    /// moved. Drivers re-arm their watchdog from [`Core::step_down_deadline`](super::Core::step_down_deadline).
    Renewed,
    /// The leader had to re-read the Lease before writing (client-go's
    /// "slow path").
    SlowPath,
    /// The lease was released for others to take at once.
    Released,
    /// The Lease now records that the work of `term` (ours, lost to an
    /// edit) has stopped, so the candidate it names may take it at once.
    Acknowledged {
        /// The term whose work stopped.
        term: Term,
    },
    /// The core has finished; no more requests or events follow.
    Stopped,
    /// Report this to the operator.
    Warn(Warning),
}
