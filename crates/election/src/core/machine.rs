//! The candidate state machine: its state, its inputs (`handle_*`) and
//! its outputs (`poll_*`). The rules live in the sibling modules, one job
//! each: `view` (what the Lease says and when it may be taken), `ops`
//! (requests and their answers), `leading` (terms and step-down),
//! `watching` (the watch and polling), `stopping` (shutdown).

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use super::io::{
    Event, Input, OpId, ReadResult, Request, WatchEvent, WatchId, WorkEnd, WriteResult,
};
use super::phase::{Leader, Phase};
use super::record::{Observed, Term};
use super::rng::Rng;
use super::time::{Instant, WallTime};
use super::timers::{TimerKind, Timers};
use super::timings::Timings;
use super::view::View;

/// Settings of one candidate.
#[derive(Clone, Debug)]
pub struct Config {
    /// This candidate's identity (`holderIdentity` it writes). Not empty.
    pub identity: String,
    /// Validated timings.
    pub timings: Timings,
    /// Release the lease on shutdown so another candidate takes it at once.
    pub release_on_shutdown: bool,
    /// Seed of the jitter generator (any value; the simulation replays it).
    pub seed: u64,
}

/// The configuration cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// An empty identity would read as "released" to every other candidate.
    EmptyIdentity,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::EmptyIdentity => f.write_str("identity must not be empty"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// What a request in flight is for.
#[derive(Clone, Debug)]
pub(super) enum OpKind {
    Read,
    /// Create or takeover of a new term.
    Acquire(Term),
    Renew(WallTime),
    /// While draining: rewrite our old term's record with our duration,
    /// so an edit that shortened it cannot let anyone in before our work
    /// has stopped.
    Fence,
    Release,
    /// The stopped-term acknowledgement of this term.
    Acknowledge(Term),
}

#[derive(Clone, Debug)]
pub(super) struct InFlight {
    pub(super) id: OpId,
    pub(super) kind: OpKind,
    pub(super) sent_at: Instant,
}

/// Where the watch on the Lease stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WatchState {
    Down,
    Starting,
    Up,
    Forbidden,
}

/// How many terms of ours are remembered (acquire attempts whose outcome
/// is unknown, terms led before).
pub(super) const MAX_OWN_TERMS: usize = 8;

/// One candidate's election logic, in the sans-IO style: feed observations
/// through the `handle_*` methods with the current instant, then drain
/// [`Core::poll_event`] (first) and [`Core::poll_request`], and call
/// [`Core::handle_timeout`] once [`Core::poll_timeout`] has passed.
/// Deterministic: no clock, no I/O, no threads.
#[derive(Debug)]
pub struct Core {
    pub(super) id: String,
    pub(super) timings: Timings,
    pub(super) release_on_shutdown: bool,
    pub(super) rng: Rng,

    pub(super) phase: Phase,
    pub(super) view: View,
    /// Terms this process wrote that it does not lead now; a record still
    /// showing one may be taken at once (with a new term) once no work runs.
    pub(super) own_terms: Vec<Term>,
    /// A create is in flight (`Some`), and whether another holder's live
    /// record was seen meanwhile (`Some(true)`): then the create can only
    /// have landed after that record was deleted, under a leader that may
    /// not know yet, and its answer must not start a term.
    pub(super) create_crossed: Option<bool>,
    /// Terms whose work may still run: never released.
    pub(super) abandoned: Vec<Term>,

    pub(super) op: Option<InFlight>,
    pub(super) next_op: u64,
    /// The next request must be a read (start, after a conflict or failure).
    pub(super) read_due: bool,
    /// The leader's renew is due.
    pub(super) renew_due: bool,
    /// A write's outcome is unknown and no read has resolved it since.
    pub(super) in_doubt: bool,

    pub(super) watch: WatchState,
    pub(super) watch_id: u64,
    pub(super) watch_started_at: Instant,
    /// After a 410 the watch restarts only from a fresh read.
    pub(super) watch_needs_read: bool,

    pub(super) timers: Timers,
    pub(super) stopping: bool,
    pub(super) stop_deadline_passed: bool,

    pub(super) published: Option<Option<String>>,
    /// Since when the watch has been refused (403), and when that was last
    /// reported; cleared when a watch starts.
    pub(super) watch_refused_since: Option<Instant>,
    pub(super) watch_refusal_reported: Option<Instant>,
    /// Consecutive creates refused with 404 (missing namespace).
    pub(super) create_not_found: u32,
    /// After resigning: release our term once the work stopped, and do not
    /// acquire before this instant.
    pub(super) release_due: bool,
    pub(super) hold_back_until: Option<Instant>,
    /// Extra wait before taking a free lease (see [`Input::DeferAcquisition`]).
    pub(super) acquire_delay: Duration,
    /// No lease is taken while set (see [`Input::PauseAcquisition`]).
    pub(super) acquire_paused: bool,
    /// A term of ours whose work has stopped, to acknowledge on the Lease
    /// while the record still comes from it, and the attempts left.
    pub(super) ack_due: Option<(Term, u8)>,

    pub(super) events: VecDeque<Event>,
    pub(super) requests: VecDeque<Request>,
}

impl Core {
    /// A new candidate at `now`. Its first requests read and watch the Lease.
    pub fn new(config: Config, now: Instant, wall: WallTime) -> Result<Core, ConfigError> {
        if config.identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        let mut core = Core {
            id: config.identity,
            timings: config.timings,
            release_on_shutdown: config.release_on_shutdown,
            rng: Rng::new(config.seed),
            phase: Phase::Candidate,
            view: View::new(now),
            own_terms: Vec::new(),
            create_crossed: None,
            abandoned: Vec::new(),
            op: None,
            next_op: 0,
            read_due: true,
            renew_due: false,
            in_doubt: false,
            watch: WatchState::Down,
            watch_id: 0,
            watch_started_at: now,
            watch_needs_read: false,
            timers: Timers::default(),
            stopping: false,
            stop_deadline_passed: false,
            published: None,
            watch_refused_since: None,
            watch_refusal_reported: None,
            create_not_found: 0,
            release_due: false,
            hold_back_until: None,
            acquire_delay: Duration::ZERO,
            acquire_paused: false,
            ack_due: None,
            events: VecDeque::new(),
            requests: VecDeque::new(),
        };
        core.step(now, wall);
        Ok(core)
    }

    // ---- inputs ----------------------------------------------------------

    /// A read finished.
    pub fn handle_read(&mut self, now: Instant, wall: WallTime, op: OpId, result: ReadResult) {
        if self.begin(now) {
            if let Some(f) = self.take_op(op) {
                self.on_read(now, result, &f);
            }
            self.step(now, wall);
        }
    }

    /// A create or update finished.
    pub fn handle_write(&mut self, now: Instant, wall: WallTime, op: OpId, result: WriteResult) {
        if self.begin(now) {
            if let Some(f) = self.take_op(op) {
                self.on_write(now, f, result);
            }
            self.step(now, wall);
        }
    }

    /// Something arrived on watch stream `watch`.
    pub fn handle_watch(
        &mut self,
        now: Instant,
        wall: WallTime,
        watch: WatchId,
        event: WatchEvent,
    ) {
        if self.begin(now) {
            if watch.0 == self.watch_id {
                self.on_watch(now, event);
            }
            self.step(now, wall);
        }
    }

    /// Time has passed (call at or after [`Core::poll_timeout`]; calling
    /// earlier or late is harmless).
    pub fn handle_timeout(&mut self, now: Instant, wall: WallTime) {
        if self.begin(now) {
            self.step(now, wall);
        }
    }

    /// The driver's watchdog cancelled the leader-only work: end the term.
    pub fn handle_watchdog(&mut self, now: Instant, wall: WallTime) {
        if self.begin(now) {
            self.step_down(super::io::StepDownReason::RenewDeadline);
            self.step(now, wall);
        }
    }

    /// Stop: step down, release if configured and ours, then [`Event::Stopped`].
    pub fn handle_shutdown(&mut self, now: Instant, wall: WallTime) {
        if self.begin(now) {
            self.on_shutdown(now);
            self.step(now, wall);
        }
    }

    /// Hands the lease over (see [`Input::Resign`]).
    pub fn handle_resign(&mut self, now: Instant, wall: WallTime, hold_back: Duration) {
        if self.begin(now) {
            self.on_resign(now, hold_back);
            self.step(now, wall);
        }
    }

    /// Changes the wait before taking a free lease (see
    /// [`Input::DeferAcquisition`]).
    pub fn handle_defer_acquisition(&mut self, now: Instant, wall: WallTime, delay: Duration) {
        if self.begin(now) {
            self.acquire_delay = delay;
            self.timers.clear(TimerKind::Expiry);
            self.step(now, wall);
        }
    }

    /// Pauses or resumes taking leases (see [`Input::PauseAcquisition`]).
    pub fn handle_pause_acquisition(&mut self, now: Instant, wall: WallTime, paused: bool) {
        if self.begin(now) {
            self.acquire_paused = paused;
            self.timers.clear(TimerKind::Expiry);
            self.step(now, wall);
        }
    }

    /// The leader-only work of the last term has ended.
    pub fn handle_work_ended(&mut self, now: Instant, wall: WallTime, end: WorkEnd) {
        if self.begin(now) {
            self.on_work_ended(end);
            self.step(now, wall);
        }
    }

    /// Feeds any [`Input`] (dispatches to the `handle_*` methods).
    pub fn handle(&mut self, now: Instant, wall: WallTime, input: Input) {
        match input {
            Input::ReadDone { op, result } => self.handle_read(now, wall, op, result),
            Input::WriteDone { op, result } => self.handle_write(now, wall, op, result),
            Input::Watch { watch, event } => self.handle_watch(now, wall, watch, event),
            Input::Timeout => self.handle_timeout(now, wall),
            Input::WatchdogFired => self.handle_watchdog(now, wall),
            Input::Shutdown => self.handle_shutdown(now, wall),
            Input::WorkEnded(end) => self.handle_work_ended(now, wall, end),
            Input::Resign { hold_back } => self.handle_resign(now, wall, hold_back),
            Input::DeferAcquisition(delay) => self.handle_defer_acquisition(now, wall, delay),
            Input::PauseAcquisition(p) => self.handle_pause_acquisition(now, wall, p),
        }
    }

    // ---- outputs ---------------------------------------------------------

    /// The next event to report, in order. Drain these before requests.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next request to perform, in order.
    pub fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    /// When to call [`Core::handle_timeout`] next (`None`: only on input).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if matches!(self.phase, Phase::Stopped) {
            return None;
        }
        let deadline = self.step_down_deadline();
        match (self.timers.earliest(), deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ---- queries ---------------------------------------------------------

    /// The term this candidate leads, if it leads.
    pub fn term(&self) -> Option<&Term> {
        self.leader().map(|l| &l.term)
    }

    /// While leading: the instant at which the term must end unless a
    /// renew succeeds first. A driver arms a watchdog with it that cannot
    /// be delayed by a busy loop.
    pub fn step_down_deadline(&self) -> Option<Instant> {
        self.leader()
            .map(|l| l.deadline(self.timings.lease_duration(), self.timings.renew_deadline()))
    }

    /// Start of the last successful renew while leading.
    pub fn last_renew_start(&self) -> Option<Instant> {
        self.leader().map(|l| l.last_success_start)
    }

    /// The holder named by the Lease as last seen (`None` if free, absent or unknown).
    pub fn known_holder(&self) -> Option<&str> {
        self.view.holder()
    }

    /// When a timer of this kind is due, if set (for diagnostics and tests).
    pub fn timer(&self, kind: TimerKind) -> Option<Instant> {
        self.timers.get(kind)
    }

    /// The highest `leaseTransitions` seen on this Lease.
    pub fn highest_transitions(&self) -> Option<i32> {
        self.view.max_transitions
    }

    /// The phase, for status pages: `candidate`, `leading`, `draining`,
    /// `finishing` or `stopped`.
    pub fn phase_name(&self) -> &'static str {
        match self.phase {
            Phase::Candidate => "candidate",
            Phase::Leading(_) => "leading",
            Phase::Draining { .. } => "draining",
            Phase::Finishing => "finishing",
            Phase::Stopped => "stopped",
        }
    }

    /// True once [`Event::Stopped`] was emitted.
    pub fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped)
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.id
    }

    // ---- shared helpers ----------------------------------------------------

    pub(super) fn leader(&self) -> Option<&Leader> {
        match &self.phase {
            Phase::Leading(l) => Some(l),
            _ => None,
        }
    }

    pub(super) fn leader_mut(&mut self) -> Option<&mut Leader> {
        match &mut self.phase {
            Phase::Leading(l) => Some(l),
            _ => None,
        }
    }

    pub(super) fn emit(&mut self, e: Event) {
        self.events.push_back(e);
    }

    pub(super) fn send(&mut self, r: Request) {
        self.requests.push_back(r);
    }

    /// Common start of every input: nothing after stopping, and the
    /// leader's deadline is judged before the input is applied, so a late
    /// answer can never extend a term that has already run out.
    fn begin(&mut self, now: Instant) -> bool {
        if self.is_stopped() {
            return false;
        }
        self.check_deadline(now);
        true
    }

    fn step(&mut self, now: Instant, wall: WallTime) {
        self.check_timers(now);
        self.check_deadline(now);
        match self.phase {
            Phase::Leading(_) => self.progress_leader(now, wall),
            Phase::Candidate => self.progress_candidate(now, wall),
            Phase::Draining { .. } => self.progress_idle(now, wall),
            Phase::Finishing => self.progress_finish(now, wall),
            Phase::Stopped => {}
        }
    }

    fn check_timers(&mut self, now: Instant) {
        // Per-call timeout, enforced here so a hung driver call can never
        // block the machine; the driver is told to drop the request.
        if self.timers.take_due(TimerKind::Request, now)
            && let Some(f) = self.op.take()
        {
            self.send(Request::Abandon(f.id));
            self.on_failed(now, f, super::io::Failure::Timeout);
        }
        if self.timers.take_due(TimerKind::Renew, now) {
            self.renew_due = true;
        }
        if self.timers.take_due(TimerKind::Poll, now) && self.watch != WatchState::Up {
            self.read_due = true;
        }
        self.timers.take_due(TimerKind::Expiry, now);
        self.timers.take_due(TimerKind::Backoff, now);
        self.timers.take_due(TimerKind::WatchRetry, now);
        if self.timers.take_due(TimerKind::StopDeadline, now) {
            self.stop_deadline_passed = true;
        }
        if self.timers.take_due(TimerKind::HoldBack, now) {
            self.hold_back_until = None;
        }
    }

    pub(super) fn take_op(&mut self, op: OpId) -> Option<InFlight> {
        if self.op.as_ref().is_some_and(|f| f.id == op) {
            self.timers.clear(TimerKind::Request);
            self.op.take()
        } else {
            None
        }
    }

    pub(super) fn new_op(&mut self, now: Instant, kind: OpKind) -> OpId {
        self.create_crossed = None;
        self.next_op += 1;
        let id = OpId(self.next_op);
        self.op = Some(InFlight {
            id,
            kind,
            sent_at: now,
        });
        self.timers
            .set(TimerKind::Request, now + self.timings.call_timeout());
        id
    }

    pub(super) fn call_timeout(&self) -> Duration {
        self.timings.call_timeout()
    }

    /// Waits after a failed request; a leader retries faster, since its
    /// attempts must fit into the renew deadline.
    pub(super) fn backoff(&mut self, now: Instant) {
        let r = self.timings.retry_period();
        let d = if self.leader().is_some() {
            self.rng.scale(r, 0.5, 1.0)
        } else {
            self.rng.scale(r, 1.0, 2.2)
        };
        self.timers.set(TimerKind::Backoff, now + d);
        self.read_due = true;
        self.view.gap = true;
    }

    pub(super) fn gated(&self) -> bool {
        self.timers.is_set(TimerKind::Backoff)
    }

    /// Remembers a term this process wrote, for a quick retake.
    pub(super) fn remember_own(&mut self, term: Term) {
        self.own_terms.retain(|t| t != &term);
        if self.own_terms.len() >= MAX_OWN_TERMS {
            self.own_terms.remove(0);
        }
        self.own_terms.push(term);
    }

    /// The term of ours that this record shows, if any.
    pub(super) fn own_term_in(&self, obs: &Observed) -> Option<&Term> {
        self.own_terms.iter().find(|t| obs.record.is_term(t))
    }
}
