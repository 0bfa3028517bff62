//! The election state machine. See the crate docs for the rules; each rule
//! is implemented in exactly one place below and named in a comment.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use super::io::{
    Action, Failure, Input, OpId, ReadResult, StepDownReason, TimerKind, Warning, WatchEvent,
    WatchId, WriteResult,
};
use super::record::{LeaseRecord, Observed, Term};
use super::rng::Rng;
use super::time::{Instant, WallTime};
use super::timings::Timings;

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

/// What this candidate last knew about the Lease.
#[derive(Clone, Debug)]
enum Known {
    /// Never read.
    Unknown,
    /// The Lease does not exist.
    Absent,
    /// The Lease as last seen.
    Present(Observed),
}

#[derive(Clone, Debug)]
struct Leader {
    term: Term,
    resource_version: String,
    /// Start of the last successful renew (or of the acquiring write).
    last_success_start: Instant,
    /// Renews whose outcome is unknown: their renewTime and send instant,
    /// credited if the record later shows them applied.
    unknown_renews: Vec<(WallTime, Instant)>,
}

#[derive(Clone, Debug)]
enum OpKind {
    Read,
    /// Create, takeover, or confirmation of a term of ours.
    Acquire(Term),
    Renew(WallTime),
    Release,
}

#[derive(Clone, Debug)]
struct InFlight {
    id: OpId,
    kind: OpKind,
    sent_at: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WatchState {
    Down,
    Starting,
    Up,
    Forbidden,
}

const MAX_UNCONFIRMED: usize = 4;
const MAX_UNKNOWN_RENEWS: usize = 8;
/// A record duration above this multiple of ours is reported as suspicious.
const SUSPICIOUS_FACTOR: u32 = 4;

/// One candidate's election logic: feed [`Input`]s with the current instant
/// through [`Core::handle`], then perform every [`Action`] from
/// [`Core::poll_action`]. Deterministic: no clock, no I/O, no threads.
#[derive(Debug)]
pub struct Core {
    id: String,
    timings: Timings,
    release_on_shutdown: bool,
    rng: Rng,

    known: Known,
    /// When `known` last changed, on the local monotonic clock.
    observed_at: Instant,
    /// Latest resourceVersion seen anywhere (watch resume point).
    last_rv: Option<String>,
    leader: Option<Leader>,
    /// Terms of ours the server may hold that we are not leading on:
    /// acquire attempts with unknown outcome, a term lost by deadline.
    unconfirmed: Vec<Term>,
    work_running: bool,

    op: Option<InFlight>,
    next_op: u64,
    /// The next request must be a read (start, after a conflict or failure).
    read_due: bool,
    /// The leader's renew is due (set when the Renew timer passes, cleared
    /// by a successful renew), so no timer is ever left in the past.
    renew_due: bool,

    watch: WatchState,
    watch_id: u64,
    watch_started_at: Instant,
    /// After a 410 the watch restarts only from a fresh read.
    watch_needs_read: bool,

    timers: [Option<Instant>; 8],
    emitted: [Option<Instant>; 8],

    stopping: bool,
    stop_deadline_passed: bool,
    released: bool,
    stopped: bool,

    published: Option<Option<String>>,
    warned_record: Option<(String, Option<i32>)>,
    warned_watch: bool,

    actions: VecDeque<Action>,
}

impl Core {
    /// A new candidate at `now`. Its first actions read and watch the Lease.
    pub fn new(config: Config, now: Instant, wall: WallTime) -> Result<Core, ConfigError> {
        if config.identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        let mut core = Core {
            id: config.identity,
            timings: config.timings,
            release_on_shutdown: config.release_on_shutdown,
            rng: Rng::new(config.seed),
            known: Known::Unknown,
            observed_at: now,
            last_rv: None,
            leader: None,
            unconfirmed: Vec::new(),
            work_running: false,
            op: None,
            next_op: 0,
            read_due: true,
            renew_due: false,
            watch: WatchState::Down,
            watch_id: 0,
            watch_started_at: now,
            watch_needs_read: false,
            timers: [None; 8],
            emitted: [None; 8],
            stopping: false,
            stop_deadline_passed: false,
            released: false,
            stopped: false,
            published: None,
            warned_record: None,
            warned_watch: false,
            actions: VecDeque::new(),
        };
        core.step(now, wall);
        Ok(core)
    }

    /// Feeds one observation made at `now` (local monotonic) and `wall`
    /// (UTC, used only to stamp records this candidate writes).
    pub fn handle(&mut self, now: Instant, wall: WallTime, input: Input) {
        if self.stopped {
            return;
        }
        match input {
            Input::ReadDone { op, result } => {
                if let Some(f) = self.take_op(op) {
                    self.on_read(now, result, &f);
                }
            }
            Input::WriteDone { op, result } => {
                if let Some(f) = self.take_op(op) {
                    self.on_write(now, f, result);
                }
            }
            Input::Watch { watch, event } => {
                if watch.0 == self.watch_id {
                    self.on_watch(now, event);
                }
            }
            Input::TimerFired(kind) => self.emitted[kind.index()] = None,
            Input::Shutdown => {
                if !self.stopping {
                    self.stopping = true;
                    self.set_timer(TimerKind::StopDeadline, now + self.timings.renew_deadline());
                    if self.leader.is_some() {
                        self.step_down(StepDownReason::Shutdown);
                    }
                }
            }
            Input::LeaderWorkStopped => self.work_running = false,
        }
        self.step(now, wall);
    }

    /// The next action to perform, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The earliest timer set, for drivers that keep a single sleep.
    pub fn next_timer(&self) -> Option<Instant> {
        self.timers.iter().flatten().min().copied()
    }

    /// The term this candidate leads, if it leads.
    pub fn term(&self) -> Option<&Term> {
        self.leader.as_ref().map(|l| &l.term)
    }

    /// Start of the last successful renew while leading.
    pub fn last_renew_start(&self) -> Option<Instant> {
        self.leader.as_ref().map(|l| l.last_success_start)
    }

    /// The holder named by the Lease as last seen (`None` if free, absent or unknown).
    pub fn known_holder(&self) -> Option<&str> {
        match &self.known {
            Known::Present(o) if !o.record.is_free() => Some(&o.record.holder),
            _ => None,
        }
    }

    /// True once [`Action::Stopped`] was emitted.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.id
    }

    // ---- bookkeeping -------------------------------------------------

    fn step(&mut self, now: Instant, wall: WallTime) {
        self.check_timers(now);
        if self.stopping {
            self.progress_stop(now, wall);
        } else {
            self.progress(now, wall);
        }
        self.flush_timers();
    }

    fn emit(&mut self, a: Action) {
        self.actions.push_back(a);
    }

    fn set_timer(&mut self, kind: TimerKind, at: Instant) {
        self.timers[kind.index()] = Some(at);
    }

    fn clear_timer(&mut self, kind: TimerKind) {
        self.timers[kind.index()] = None;
    }

    fn timer(&self, kind: TimerKind) -> Option<Instant> {
        self.timers[kind.index()]
    }

    /// Clears a timer that is due and reports whether it was.
    fn take_due(&mut self, kind: TimerKind, now: Instant) -> bool {
        match self.timer(kind) {
            Some(at) if now >= at => {
                self.clear_timer(kind);
                true
            }
            _ => false,
        }
    }

    fn flush_timers(&mut self) {
        if self.stopped {
            return;
        }
        for kind in TimerKind::ALL {
            let i = kind.index();
            if self.timers[i] != self.emitted[i] {
                match self.timers[i] {
                    Some(at) => self.emit(Action::SetTimer { kind, at }),
                    None => self.emit(Action::CancelTimer(kind)),
                }
                self.emitted[i] = self.timers[i];
            }
        }
    }

    fn take_op(&mut self, op: OpId) -> Option<InFlight> {
        if self.op.as_ref().is_some_and(|f| f.id == op) {
            self.clear_timer(TimerKind::Request);
            self.op.take()
        } else {
            None
        }
    }

    fn new_op(&mut self, now: Instant, kind: OpKind) -> OpId {
        self.next_op += 1;
        let id = OpId(self.next_op);
        self.op = Some(InFlight {
            id,
            kind,
            sent_at: now,
        });
        self.set_timer(TimerKind::Request, now + self.timings.call_timeout());
        id
    }

    fn check_timers(&mut self, now: Instant) {
        // Per-call timeout, enforced here too so a hung driver call can
        // never block the machine.
        if self.take_due(TimerKind::Request, now)
            && let Some(f) = self.op.take()
        {
            self.on_write_failed(now, f, Failure::Timeout);
        }
        // Rule: step down when renew_deadline has passed since the start of
        // the last successful renew, whatever calls are still hanging.
        if let Some(l) = &self.leader
            && now >= l.last_success_start + self.timings.renew_deadline()
        {
            self.step_down(StepDownReason::RenewDeadline);
        }
        if self.take_due(TimerKind::Renew, now) {
            self.renew_due = true;
        }
        if self.take_due(TimerKind::Poll, now) && self.watch != WatchState::Up {
            self.read_due = true;
        }
        self.take_due(TimerKind::Expiry, now);
        self.take_due(TimerKind::Backoff, now);
        self.take_due(TimerKind::WatchRetry, now);
        if self.take_due(TimerKind::StopDeadline, now) {
            self.stop_deadline_passed = true;
        }
    }

    fn backoff(&mut self, now: Instant) {
        let r = self.timings.retry_period();
        // A leader retries faster: it must fit attempts into renew_deadline.
        let d = if self.leader.is_some() {
            self.rng.scale(r, 0.5, 1.0)
        } else {
            self.rng.scale(r, 1.0, 2.2)
        };
        self.set_timer(TimerKind::Backoff, now + d);
        self.read_due = true;
    }

    fn gated(&self) -> bool {
        self.timer(TimerKind::Backoff).is_some()
    }

    // ---- deciding what to do next ------------------------------------

    fn progress(&mut self, now: Instant, wall: WallTime) {
        self.ensure_watch(now);
        if self.op.is_some() {
            return;
        }
        if self.leader.is_some() {
            if self.gated() {
                return;
            }
            if self.read_due {
                self.send_get(now);
            } else if self.renew_due {
                self.send_renew(now, wall);
            }
            return;
        }
        if self.read_due {
            if !self.gated() {
                self.send_get(now);
            }
            return;
        }
        let can_acquire = !self.work_running && !self.gated();
        match self.known.clone() {
            Known::Unknown => self.read_due = true,
            Known::Absent => {
                if can_acquire {
                    self.send_create(now, wall);
                }
            }
            Known::Present(obs) => {
                if let Some(term) = self
                    .unconfirmed
                    .iter()
                    .find(|t| obs.record.is_term(t))
                    .cloned()
                {
                    // A term of ours the server may still hold: confirm it
                    // by renewing; success proves nobody wrote since.
                    if can_acquire {
                        self.send_confirm(now, wall, term, obs.resource_version);
                    }
                } else {
                    // Rule: expired when observed_at + the record's own
                    // duration has passed on the local clock; free at once.
                    let expiry = self.observed_at + obs.record.duration();
                    if obs.record.is_free() || now >= expiry {
                        if can_acquire {
                            self.send_takeover(now, wall, &obs);
                        }
                    } else {
                        self.set_timer(TimerKind::Expiry, expiry);
                    }
                }
            }
        }
        // Rule: poll (with jitter) only while the watch is down.
        if self.op.is_none()
            && self.watch != WatchState::Up
            && self.timer(TimerKind::Poll).is_none()
        {
            let d = self.rng.scale(self.timings.retry_period(), 1.0, 2.2);
            self.set_timer(TimerKind::Poll, now + d);
        }
    }

    fn ensure_watch(&mut self, now: Instant) {
        if matches!(self.watch, WatchState::Down | WatchState::Forbidden)
            && self.timer(TimerKind::WatchRetry).is_none()
            && !self.watch_needs_read
        {
            self.watch_id += 1;
            self.watch = WatchState::Starting;
            self.watch_started_at = now;
            let from = self.last_rv.clone();
            self.emit(Action::StartWatch {
                watch: WatchId(self.watch_id),
                from,
            });
        }
    }

    fn progress_stop(&mut self, now: Instant, wall: WallTime) {
        if self.op.is_some() || self.work_running {
            return;
        }
        let target = match &self.known {
            Known::Present(o)
                if self.release_on_shutdown
                    && !self.released
                    && !self.stop_deadline_passed
                    && self.unconfirmed.iter().any(|t| o.record.is_term(t)) =>
            {
                Some(o.clone())
            }
            _ => None,
        };
        match target {
            Some(_) if self.gated() => {}
            Some(_) if self.read_due => self.send_get(now),
            Some(obs) => self.send_release(now, wall, &obs),
            None => {
                self.emit(Action::StopWatch);
                for kind in TimerKind::ALL {
                    if self.emitted[kind.index()].is_some() {
                        self.emit(Action::CancelTimer(kind));
                    }
                }
                self.timers = [None; 8];
                self.emitted = [None; 8];
                self.emit(Action::Stopped);
                self.stopped = true;
            }
        }
    }

    // ---- requests ----------------------------------------------------

    fn send_get(&mut self, now: Instant) {
        let op = self.new_op(now, OpKind::Read);
        let timeout = self.timings.call_timeout();
        self.emit(Action::Get { op, timeout });
    }

    fn record_for(&self, term: &Term, wall: WallTime) -> LeaseRecord {
        LeaseRecord {
            holder: self.id.clone(),
            duration_secs: Some(self.timings.lease_duration_seconds()),
            acquire_time: Some(term.acquire_time),
            renew_time: Some(wall),
            transitions: Some(term.transitions),
        }
    }

    fn send_create(&mut self, now: Instant, wall: WallTime) {
        let term = Term {
            holder: self.id.clone(),
            acquire_time: wall,
            transitions: 0,
        };
        let record = self.record_for(&term, wall);
        let op = self.new_op(now, OpKind::Acquire(term));
        let timeout = self.timings.call_timeout();
        self.emit(Action::Create {
            op,
            record,
            timeout,
        });
    }

    /// Rule: taking over sets acquireTime = renewTime = now and transitions + 1.
    fn send_takeover(&mut self, now: Instant, wall: WallTime, obs: &Observed) {
        let transitions = obs.record.transitions_or_zero().saturating_add(1);
        let term = Term {
            holder: self.id.clone(),
            acquire_time: wall,
            transitions,
        };
        self.send_update(
            now,
            wall,
            term.clone(),
            obs.resource_version.clone(),
            OpKind::Acquire(term),
        );
    }

    fn send_confirm(&mut self, now: Instant, wall: WallTime, term: Term, rv: String) {
        self.send_update(now, wall, term.clone(), rv, OpKind::Acquire(term));
    }

    /// Rule: renew with the cached object, keeping acquireTime and transitions.
    fn send_renew(&mut self, now: Instant, wall: WallTime) {
        let Some(l) = &self.leader else { return };
        let (term, rv) = (l.term.clone(), l.resource_version.clone());
        self.send_update(now, wall, term, rv, OpKind::Renew(wall));
    }

    /// Rule: every write carries the last resourceVersion read.
    fn send_update(&mut self, now: Instant, wall: WallTime, term: Term, rv: String, kind: OpKind) {
        let record = self.record_for(&term, wall);
        let op = self.new_op(now, kind);
        let timeout = self.timings.call_timeout();
        self.emit(Action::Update {
            op,
            record,
            resource_version: rv,
            timeout,
        });
    }

    /// Rule: release writes holder "", duration 1, acquire = renew = now,
    /// transitions unchanged.
    fn send_release(&mut self, now: Instant, wall: WallTime, obs: &Observed) {
        let record = LeaseRecord {
            holder: String::new(),
            duration_secs: Some(1),
            acquire_time: Some(wall),
            renew_time: Some(wall),
            transitions: Some(obs.record.transitions_or_zero()),
        };
        let op = self.new_op(now, OpKind::Release);
        let timeout = self.timings.call_timeout();
        self.emit(Action::Update {
            op,
            record,
            resource_version: obs.resource_version.clone(),
            timeout,
        });
    }

    // ---- results -----------------------------------------------------

    fn on_read(&mut self, now: Instant, result: ReadResult, f: &InFlight) {
        match result {
            ReadResult::Found(obs) => {
                self.read_due = false;
                self.watch_needs_read = false;
                self.observe(now, obs);
            }
            ReadResult::NotFound => {
                self.read_due = false;
                self.watch_needs_read = false;
                self.last_rv = None;
                self.observe_absent(now);
            }
            ReadResult::Failed(_) => {
                let _ = f;
                self.backoff(now);
            }
        }
    }

    fn on_write(&mut self, now: Instant, f: InFlight, result: WriteResult) {
        match result {
            WriteResult::Ok(obs) => self.on_write_ok(now, f, obs),
            // Rule: 409 means someone else wrote: re-read, no backoff.
            WriteResult::Conflict | WriteResult::NotFound => {
                self.read_due = true;
                // The watch did not show that write in time; it may be a
                // stream silently stuck behind a dead connection: renew it.
                if self.watch == WatchState::Up {
                    self.watch = WatchState::Down;
                }
            }
            WriteResult::Failed(failure) => self.on_write_failed(now, f, failure),
        }
    }

    fn on_write_ok(&mut self, now: Instant, f: InFlight, obs: Observed) {
        match f.kind {
            OpKind::Acquire(term) => {
                self.remember(now, &obs);
                if !obs.record.is_term(&term) {
                    self.read_due = true;
                    return;
                }
                self.unconfirmed.retain(|t| t == &term);
                let deadline = f.sent_at + self.timings.renew_deadline();
                if self.stopping || now >= deadline {
                    // Ours, but not to lead on: release it (stopping) or
                    // confirm it again with a fresh write.
                    if self.unconfirmed.is_empty() {
                        self.unconfirmed.push(term);
                    }
                    return;
                }
                self.unconfirmed.clear();
                self.leader = Some(Leader {
                    term: term.clone(),
                    resource_version: obs.resource_version,
                    last_success_start: f.sent_at,
                    unknown_renews: Vec::new(),
                });
                self.work_running = true;
                self.renew_due = false;
                self.published = None;
                self.clear_timer(TimerKind::Expiry);
                self.clear_timer(TimerKind::Poll);
                self.set_timer(TimerKind::RenewDeadline, deadline);
                self.set_timer(TimerKind::Renew, f.sent_at + self.timings.retry_period());
                self.emit(Action::StepUp { term });
            }
            OpKind::Renew(_) => {
                if let Some(l) = &self.leader
                    && obs.record.is_term(&l.term)
                {
                    self.credit(f.sent_at);
                    self.renew_due = false;
                    self.set_timer(TimerKind::Renew, f.sent_at + self.timings.retry_period());
                }
                self.observe(now, obs);
            }
            OpKind::Release => {
                self.remember(now, &obs);
                self.released = true;
                self.emit(Action::Released);
            }
            OpKind::Read => self.observe(now, obs),
        }
    }

    fn on_write_failed(&mut self, now: Instant, f: InFlight, _failure: Failure) {
        match f.kind {
            OpKind::Acquire(term) => {
                // It may have applied: remember the term as possibly ours.
                if !self.unconfirmed.contains(&term) {
                    if self.unconfirmed.len() >= MAX_UNCONFIRMED {
                        self.unconfirmed.remove(0);
                    }
                    self.unconfirmed.push(term);
                }
            }
            OpKind::Renew(renew_time) => {
                if let Some(l) = &mut self.leader {
                    if l.unknown_renews.len() >= MAX_UNKNOWN_RENEWS {
                        l.unknown_renews.remove(0);
                    }
                    l.unknown_renews.push((renew_time, f.sent_at));
                }
            }
            OpKind::Read | OpKind::Release => {}
        }
        // Rule: re-read only after a failure; retry with jittered backoff.
        self.backoff(now);
    }

    fn credit(&mut self, sent_at: Instant) {
        let deadline = self.timings.renew_deadline();
        if let Some(l) = &mut self.leader {
            if sent_at > l.last_success_start {
                l.last_success_start = sent_at;
            }
            l.unknown_renews.clear();
            let at = l.last_success_start + deadline;
            self.set_timer(TimerKind::RenewDeadline, at);
        }
    }

    fn on_watch(&mut self, now: Instant, event: WatchEvent) {
        match event {
            WatchEvent::Started => {
                self.watch = WatchState::Up;
                self.clear_timer(TimerKind::Poll);
            }
            WatchEvent::Upsert(obs) => self.observe(now, obs),
            WatchEvent::Deleted => self.observe_absent(now),
            WatchEvent::Bookmark(rv) => self.last_rv = Some(rv),
            WatchEvent::Expired => {
                // Rule: re-list on 410, then watch from the fresh version.
                self.watch = WatchState::Down;
                self.watch_needs_read = true;
                self.last_rv = None;
                self.read_due = true;
            }
            WatchEvent::Ended => {
                self.watch = WatchState::Down;
                if now.saturating_since(self.watch_started_at) < self.timings.retry_period() {
                    let d = self.rng.scale(self.timings.retry_period(), 1.0, 2.2);
                    self.set_timer(TimerKind::WatchRetry, now + d);
                }
            }
            WatchEvent::Failed(Failure::Forbidden) => {
                self.watch = WatchState::Forbidden;
                if !self.warned_watch {
                    self.warned_watch = true;
                    self.emit(Action::Warn(Warning::WatchForbidden));
                }
                self.set_timer(
                    TimerKind::WatchRetry,
                    now + self.timings.retry_period() * 10,
                );
            }
            WatchEvent::Failed(_) => {
                self.watch = WatchState::Down;
                let d = self.rng.scale(self.timings.retry_period(), 1.0, 2.2);
                self.set_timer(TimerKind::WatchRetry, now + d);
            }
        }
    }

    // ---- observations ------------------------------------------------

    /// Stores a record; returns whether it differs from the one known.
    /// `observed_at` moves only when the record changes.
    fn remember(&mut self, now: Instant, obs: &Observed) -> bool {
        if let Known::Present(o) = &self.known {
            if o == obs {
                return false;
            }
            // A read or event older than what we know (numeric
            // resourceVersions compared) is stale: ignore it.
            if rv_older(&obs.resource_version, &o.resource_version) {
                return false;
            }
        }
        self.last_rv = Some(obs.resource_version.clone());
        self.warn_about(&obs.record);
        self.known = Known::Present(obs.clone());
        self.observed_at = now;
        self.clear_timer(TimerKind::Expiry);
        true
    }

    fn observe(&mut self, now: Instant, obs: Observed) {
        if !self.remember(now, &obs) {
            return;
        }
        let record = &obs.record;
        if let Some(l) = &mut self.leader {
            if record.is_term(&l.term) {
                l.resource_version = obs.resource_version.clone();
                let applied = l
                    .unknown_renews
                    .iter()
                    .filter(|(t, _)| Some(*t) == record.renew_time)
                    .map(|(_, s)| *s)
                    .min();
                if let Some(sent_at) = applied {
                    self.credit(sent_at);
                }
                return;
            }
            // Rule: another holder or another term seen while leading.
            let reason = if record.holder == self.id {
                StepDownReason::OtherTerm
            } else {
                StepDownReason::OtherHolder(record.holder.clone())
            };
            self.step_down(reason);
            return;
        }
        self.unconfirmed.retain(|t| record.is_term(t));
        // The watch often shows our own acquire before its answer arrives:
        // that is not "following ourselves", the answer decides in a moment.
        if let Some(InFlight {
            kind: OpKind::Acquire(term),
            ..
        }) = &self.op
            && record.is_term(term)
        {
            return;
        }
        self.publish_following();
    }

    fn observe_absent(&mut self, now: Instant) {
        if !matches!(self.known, Known::Absent) {
            self.known = Known::Absent;
            self.observed_at = now;
        }
        self.unconfirmed.clear();
        if self.leader.is_some() {
            self.step_down(StepDownReason::Deleted);
        } else {
            self.publish_following();
        }
    }

    fn warn_about(&mut self, record: &LeaseRecord) {
        if record.is_free() || record.holder == self.id {
            return;
        }
        let key = (record.holder.clone(), record.duration_secs);
        if self.warned_record.as_ref() == Some(&key) {
            return;
        }
        let configured = self.timings.lease_duration();
        let warning = match record.duration_secs {
            Some(s) if s > 0 => {
                if record.duration() > configured * SUSPICIOUS_FACTOR {
                    Some(Warning::SuspiciousDuration {
                        holder: key.0.clone(),
                        seconds: s,
                        configured,
                    })
                } else {
                    None
                }
            }
            _ => Some(Warning::MissingDuration {
                holder: key.0.clone(),
            }),
        };
        if let Some(w) = warning {
            self.warned_record = Some(key);
            self.emit(Action::Warn(w));
        }
    }

    // ---- leadership --------------------------------------------------

    /// Rule: stepping down makes this candidate a follower again; nothing
    /// but shutdown ends candidacy.
    fn step_down(&mut self, reason: StepDownReason) {
        let Some(l) = self.leader.take() else { return };
        let keep_term = matches!(
            reason,
            StepDownReason::RenewDeadline | StepDownReason::Shutdown
        );
        if matches!(reason, StepDownReason::RenewDeadline) {
            self.read_due = true;
        }
        self.clear_timer(TimerKind::Renew);
        self.clear_timer(TimerKind::RenewDeadline);
        self.emit(Action::StepDown { reason });
        if keep_term {
            self.unconfirmed.retain(|t| t != &l.term);
            self.unconfirmed.push(l.term);
        }
        self.publish_following();
    }

    fn publish_following(&mut self) {
        if self.leader.is_some() || matches!(self.known, Known::Unknown) {
            return;
        }
        let holder = self.known_holder().map(str::to_owned);
        if self.published.as_ref() != Some(&holder) {
            self.published = Some(holder.clone());
            self.emit(Action::Following { holder });
        }
    }
}

/// `a` is an older resourceVersion than `b`. resourceVersions are opaque
/// unless both are decimal integers (as the API server's are), in which
/// case they are ordered; opaque ones are never judged older.
fn rv_older(a: &str, b: &str) -> bool {
    match (a.parse::<u128>(), b.parse::<u128>()) {
        (Ok(x), Ok(y)) => x < y,
        _ => false,
    }
}

/// Convenience for drivers: how long from `now` until `at`.
pub fn until(now: Instant, at: Instant) -> Duration {
    at.saturating_since(now)
}
