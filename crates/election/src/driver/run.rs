//! The driver loop: performs the core's requests through a [`LeaseLock`],
//! reports its events, and feeds results back, on tokio time. Events are
//! handled before requests, so a step-down cancels the work first. Nothing
//! here blocks: state hooks run on their own thread, and the renew
//! deadline is also enforced by a watchdog thread.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant as TokioInstant;
use tokio_util::sync::CancellationToken;

use super::lock::{LeaseLock, LockError, LockWatchEvent};
use super::watchdog::Watchdog;
use super::{LeaderTask, Leadership, Settings, StateChange};
use crate::core::{
    Core, Event, Failure, Input, Instant, OpId, ReadResult, Request, StepDownReason, Term,
    WallTime, Warning, WatchEvent, WatchId, WorkEnd, WriteResult,
};

/// Everything the loop owns.
pub(crate) struct Driver {
    pub(crate) settings: Settings,
    pub(crate) lock: Arc<dyn LeaseLock>,
    pub(crate) core: Core,
    pub(crate) origin: TokioInstant,
    pub(crate) state: watch::Sender<Leadership>,
    pub(crate) token: watch::Sender<Option<(Term, CancellationToken)>>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) task: Option<LeaderTask>,
    pub(crate) inputs: (mpsc::UnboundedSender<Input>, mpsc::UnboundedReceiver<Input>),
}

struct LedTerm {
    token: CancellationToken,
    join: Option<JoinHandle<()>>,
}

struct Run {
    d: Driver,
    tx: mpsc::UnboundedSender<Input>,
    rx: mpsc::UnboundedReceiver<Input>,
    watchdog: Watchdog,
    requests: HashMap<OpId, (JoinHandle<()>, TokioInstant)>,
    watch_task: Option<JoinHandle<()>>,
    leader: Option<LedTerm>,
    /// The rename fence's sibling watch, and the scope it may list (`None`
    /// until known).
    fence_task: Option<JoinHandle<()>>,
    fence_scope: watch::Receiver<Option<super::fence::Scope>>,
    /// When the last term's work was cancelled (by the watchdog, if it
    /// fired first), reported as the instant leading stopped.
    stepped_down_at: Option<SystemTime>,
}

pub(crate) fn now_instant(origin: TokioInstant) -> Instant {
    Instant::from_duration(TokioInstant::now().saturating_duration_since(origin))
}

pub(crate) fn now_wall() -> WallTime {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    WallTime::from_unix_micros(i64::try_from(micros).unwrap_or(i64::MAX))
}

/// A new term's work behind the rename fence: the siblings are listed
/// after the acquiring write and before the work starts; if one is held,
/// the term is handed back without working.
async fn fenced(
    fence: super::fence::FenceRuntime,
    mut scope: watch::Receiver<Option<super::fence::Scope>>,
    work: Option<futures_util::future::BoxFuture<'static, ()>>,
    token: CancellationToken,
    inputs: mpsc::UnboundedSender<Input>,
    hold_back: Duration,
    lease: String,
) {
    let known = tokio::select! {
        // A closed channel (the watch ended with the election) leaves nothing to fence against.
        known = scope.wait_for(Option::is_some) => known.ok().and_then(|k| *k).unwrap_or(super::fence::Scope::Off),
        () = token.cancelled() => return,
    };
    let confirmed = tokio::select! {
        c = fence.confirm(known) => c,
        () = token.cancelled() => return,
    };
    match confirmed {
        Ok(()) => {
            if let Some(work) = work {
                work.await;
            }
        }
        Err(why) => {
            tracing::warn!(
                lease,
                ?hold_back,
                "{why}: handing this term back before any work (the Lease was renamed while agents still use the other)"
            );
            let _ = inputs.send(Input::Resign { hold_back });
        }
    }
}

impl Driver {
    pub(crate) async fn run(mut self) {
        let (tx, rx) = {
            let (closed_tx, closed_rx) = mpsc::unbounded_channel();
            std::mem::replace(&mut self.inputs, (closed_tx, closed_rx))
        };
        let fire = tx.clone();
        let watchdog = match Watchdog::start(move || {
            let _ = fire.send(Input::WatchdogFired);
        }) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the election watchdog thread; not standing for election");
                self.state.send_replace(Leadership::Stopped);
                return;
            }
        };
        let mut run = Run {
            d: self,
            tx,
            rx,
            watchdog,
            requests: HashMap::new(),
            watch_task: None,
            leader: None,
            stepped_down_at: None,
            fence_task: None,
            fence_scope: watch::channel(None).1,
        };
        if let Some(fence) = run.d.settings.fence.clone() {
            let (scope_tx, scope_rx) = watch::channel(None);
            run.fence_scope = scope_rx;
            run.fence_task = Some(tokio::spawn(fence.watch(run.tx.clone(), scope_tx)));
        }
        run.main().await;
    }
}

impl Run {
    fn label(&self) -> String {
        self.d.lock.describe()
    }

    async fn main(&mut self) {
        let mut shutdown_sent = false;
        self.perform();
        while !self.d.core.is_stopped() {
            let next = self
                .d
                .core
                .poll_timeout()
                .map(|at| self.d.origin + at.as_duration());
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let input = tokio::select! {
                biased;
                _ = self.d.shutdown.cancelled(), if !shutdown_sent => {
                    shutdown_sent = true;
                    Input::Shutdown
                }
                Some(input) = self.rx.recv() => input,
                _ = sleep => Input::Timeout,
            };
            self.feed(input);
        }
        if let Some(t) = self.watch_task.take() {
            t.abort();
        }
        if let Some(t) = self.fence_task.take() {
            t.abort();
        }
        for (_, (t, _)) in self.requests.drain() {
            t.abort();
        }
        if let Some(hook) = self.d.settings.hook.take() {
            hook.finish(Duration::from_secs(1)).await;
        }
    }

    fn feed(&mut self, input: Input) {
        // A watchdog message is stale unless the current term's watchdog fired.
        if input == Input::WatchdogFired && self.watchdog.fired_at().is_none() {
            return;
        }
        if let Input::ReadDone { op, .. } | Input::WriteDone { op, .. } = &input
            && let Some((_, started)) = self.requests.remove(op)
            && self.leader.is_some()
            && matches!(input, Input::WriteDone { .. })
        {
            let lease = self.d.settings.lease.clone();
            self.d
                .settings
                .metrics
                .renew_latency(&lease, started.elapsed());
        }
        let (now, wall) = (now_instant(self.d.origin), now_wall());
        self.d.core.handle(now, wall, input);
        self.perform();
    }

    fn perform(&mut self) {
        while let Some(event) = self.d.core.poll_event() {
            self.on_event(event);
        }
        while let Some(request) = self.d.core.poll_request() {
            self.on_request(request);
        }
    }

    fn to_std(&self, at: Instant) -> std::time::Instant {
        (self.d.origin + at.as_duration()).into_std()
    }

    // ---- events ------------------------------------------------------------

    fn on_event(&mut self, event: Event) {
        match event {
            Event::StepUp { term } => self.step_up(term),
            Event::StepDown { term, reason } => self.step_down(term, reason),
            Event::Following { holder } => {
                let at = self.stepped_down_at.take();
                self.publish(Leadership::Following { holder }, at);
            }
            Event::Renewed => {
                if let Some(start) = self.d.core.last_renew_start() {
                    let start = self.d.origin + start.as_duration();
                    self.d.settings.health.renewed(start);
                }
                if let Some(deadline) = self.d.core.step_down_deadline() {
                    let deadline = self.to_std(deadline);
                    self.watchdog.extend(deadline);
                }
            }
            Event::SlowPath => self.d.settings.metrics.slow_path(&self.d.settings.lease),
            Event::Released => tracing::info!(lease = %self.label(), "released the lease"),
            Event::Acknowledged { term } => tracing::info!(
                lease = %self.label(),
                term = term.transitions,
                "recorded on the lease that the work of our lost term has stopped: the holder it names may take it at once"
            ),
            Event::Stopped => self.publish(Leadership::Stopped, None),
            Event::Warn(w) => self.warn(w),
        }
    }

    fn publish(&self, state: Leadership, at: Option<SystemTime>) {
        if *self.d.state.borrow() == state {
            return;
        }
        if let Leadership::Following { holder } = &state {
            tracing::info!(lease = %self.label(), holder = holder.as_deref().unwrap_or(""), "following");
        }
        if let Some(hook) = &self.d.settings.hook {
            hook.send(StateChange {
                state: state.clone(),
                at: at.unwrap_or_else(SystemTime::now),
            });
        }
        self.d.state.send_replace(state);
    }

    fn warn(&self, w: Warning) {
        let lease = self.label();
        match w {
            Warning::WatchForbidden => {
                let msg = super::errors::forbidden_message(
                    "watch",
                    &self.d.settings.namespace,
                    &self.d.settings.lease,
                );
                tracing::warn!(lease, "{msg}");
            }
            Warning::SuspiciousDuration {
                holder,
                seconds,
                configured,
            } => tracing::warn!(
                lease,
                holder,
                seconds,
                ?configured,
                "the Lease records a duration far above ours; honouring it, so a takeover may take that long"
            ),
            Warning::MissingDuration { holder } => tracing::warn!(
                lease,
                holder,
                "the Lease has no positive leaseDurationSeconds; treating it as expired"
            ),
            Warning::ShortenedDuration { seconds } => tracing::warn!(
                lease,
                seconds,
                "the Lease of our term was edited to a shorter duration; renewing at once and stepping down if that fails in time"
            ),
            Warning::TransitionsWentBack { found, highest } => tracing::warn!(
                lease,
                found,
                highest,
                "the Lease's leaseTransitions went backwards (edited); new terms continue above the highest seen"
            ),
            Warning::NamespaceNotFound => tracing::error!(
                lease,
                namespace = %self.d.settings.namespace,
                "cannot create the Lease: namespace {:?} does not exist (404); create it, or pass the namespace the agent's Role is in; retrying with backoff",
                self.d.settings.namespace
            ),
            Warning::WorkAbandoned { term } => tracing::error!(
                lease,
                transitions = term.transitions,
                "leader-only work ignored cancellation and could not be stopped; the lease is left to expire instead of being released"
            ),
            Warning::CreateCrossedDeletion => tracing::warn!(
                lease,
                "the Lease was deleted under its leader while this agent created it anew; no term starts until that record has expired, so the deleted leader's work has stopped first"
            ),
        }
    }

    fn step_up(&mut self, term: Term) {
        let label = self.d.settings.lease.clone();
        tracing::info!(lease = %self.label(), identity = %term.holder, transitions = term.transitions, "became leader");
        let token = CancellationToken::new();
        if let Some(deadline) = self.d.core.step_down_deadline() {
            self.watchdog.arm(token.clone(), self.to_std(deadline));
        }
        let work = self
            .d
            .task
            .as_ref()
            .map(|task| task(term.clone(), token.clone()));
        let join = match self.d.settings.fence.clone() {
            None => work.map(tokio::spawn),
            Some(fence) => Some(tokio::spawn(fenced(
                fence,
                self.fence_scope.clone(),
                work,
                token.clone(),
                self.tx.clone(),
                self.fence_hold_back(),
                self.label(),
            ))),
        };
        self.leader = Some(LedTerm {
            token: token.clone(),
            join,
        });
        self.d.settings.metrics.transition(&label);
        self.d.settings.metrics.leader_status(&label, true);
        self.d.token.send_replace(Some((term.clone(), token)));
        self.publish(
            Leadership::Leading {
                term,
                since: std::time::Instant::now(),
            },
            None,
        );
        self.event("became leader");
    }

    /// How long a leader that found a sibling held leaves its Lease to
    /// others: one to two retry periods, so that two who saw each other
    /// do not stand again together.
    fn fence_hold_back(&self) -> Duration {
        let retry = self.d.settings.timings.retry_period();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        retry + retry.mul_f64(f64::from(nanos % 1000) / 1000.0)
    }

    /// Cancels leader-only work first, then changes the state, then reports
    /// the work ended once it has (aborting it after a grace period, and
    /// giving up on it after a second one).
    fn step_down(&mut self, term: Term, reason: StepDownReason) {
        let Some(current) = self.leader.take() else {
            return;
        };
        current.token.cancel();
        let fired = self.watchdog.disarm();
        self.stepped_down_at = Some(fired.unwrap_or_else(SystemTime::now));
        self.d.token.send_replace(None);
        self.d.settings.health.not_leading();
        let label = self.d.settings.lease.clone();
        self.d.settings.metrics.leader_status(&label, false);
        tracing::info!(lease = %self.label(), transitions = term.transitions, ?reason, "stopped leading");
        self.event("stopped leading");
        let tx = self.tx.clone();
        let grace = self.d.settings.work_grace;
        let lease = self.label();
        tokio::spawn(async move {
            let end = match current.join {
                None => WorkEnd::Stopped,
                Some(mut join) => {
                    if tokio::time::timeout(grace, &mut join).await.is_ok() {
                        WorkEnd::Stopped
                    } else {
                        tracing::warn!(
                            lease,
                            ?grace,
                            "leader-only work ignored cancellation; aborting it"
                        );
                        join.abort();
                        match tokio::time::timeout(grace, join).await {
                            Ok(_) => WorkEnd::Stopped,
                            Err(_) => WorkEnd::Abandoned,
                        }
                    }
                }
            };
            let _ = tx.send(Input::WorkEnded(end));
        });
    }

    fn event(&self, what: &str) {
        if self.d.settings.events
            && let Some(client) = &self.d.settings.client
        {
            let s = &self.d.settings;
            super::events::post(
                client.clone(),
                s.namespace.clone(),
                s.lease.clone(),
                s.identity.clone(),
                format!("{} {what}", s.identity),
                s.timings.call_timeout(),
            );
        }
    }

    // ---- requests ------------------------------------------------------------

    fn on_request(&mut self, request: Request) {
        match request {
            Request::Get { op, timeout } => {
                let fut = self.d.lock.get();
                self.spawn_request(op, timeout, true, fut);
            }
            Request::Create {
                op,
                record,
                timeout,
            } => {
                let fut = self.d.lock.create(record);
                self.spawn_request(op, timeout, false, fut);
            }
            Request::Update {
                op,
                record,
                resource_version,
                timeout,
            } => {
                let fut = self.d.lock.update(resource_version, record);
                self.spawn_request(op, timeout, false, fut);
            }
            Request::Acknowledge {
                op,
                stopped,
                resource_version,
                timeout,
            } => {
                let fut = self.d.lock.acknowledge(resource_version, stopped);
                self.spawn_request(op, timeout, false, fut);
            }
            Request::StartWatch { watch, from } => self.start_watch(watch, from),
            Request::StopWatch => {
                if let Some(t) = self.watch_task.take() {
                    t.abort();
                }
            }
            Request::Abandon(op) => {
                if let Some((t, _)) = self.requests.remove(&op) {
                    t.abort();
                }
            }
        }
    }

    fn spawn_request(
        &mut self,
        op: OpId,
        timeout: Duration,
        read: bool,
        fut: futures_util::future::BoxFuture<'static, Result<crate::core::Observed, LockError>>,
    ) {
        let tx = self.tx.clone();
        let metrics = self.d.settings.metrics.clone();
        let lease = self.d.settings.lease.clone();
        let task = tokio::spawn(async move {
            let result = match tokio::time::timeout(timeout, fut).await {
                Ok(r) => r,
                Err(_) => {
                    metrics.request(&lease, if read { "get" } else { "update" }, "timeout");
                    Err(LockError::Failed(Failure::Timeout))
                }
            };
            let input = if read {
                let result = match result {
                    Ok(obs) => ReadResult::Found(obs),
                    Err(LockError::NotFound) => ReadResult::NotFound,
                    Err(LockError::Failed(f)) => ReadResult::Failed(f),
                    Err(_) => ReadResult::Failed(Failure::Other),
                };
                Input::ReadDone { op, result }
            } else {
                let result = match result {
                    Ok(obs) => WriteResult::Ok(obs),
                    Err(LockError::Conflict) => WriteResult::Conflict,
                    Err(LockError::NotFound) => WriteResult::NotFound,
                    Err(LockError::Failed(f)) => WriteResult::Failed(f),
                    Err(_) => WriteResult::Failed(Failure::Other),
                };
                Input::WriteDone { op, result }
            };
            let _ = tx.send(input);
        });
        // The core has one request in flight; any other is abandoned.
        for (_, (t, _)) in self.requests.drain() {
            t.abort();
        }
        self.requests.insert(op, (task, TokioInstant::now()));
    }

    fn start_watch(&mut self, watch: WatchId, from: Option<String>) {
        if let Some(t) = self.watch_task.take() {
            t.abort();
        }
        let tx = self.tx.clone();
        let timeout = self.d.settings.timings.call_timeout();
        let fut = self.d.lock.watch(from);
        self.watch_task = Some(tokio::spawn(async move {
            let send = |event: WatchEvent| {
                let _ = tx.send(Input::Watch { watch, event });
            };
            let mut stream = match tokio::time::timeout(timeout, fut).await {
                Err(_) => return send(WatchEvent::Failed(Failure::Timeout)),
                Ok(Err(LockError::Gone)) => return send(WatchEvent::Expired),
                Ok(Err(LockError::Failed(f))) => return send(WatchEvent::Failed(f)),
                Ok(Err(_)) => return send(WatchEvent::Failed(Failure::Other)),
                Ok(Ok(s)) => s,
            };
            send(WatchEvent::Started);
            while let Some(event) = stream.next().await {
                match event {
                    LockWatchEvent::Upsert(obs) => send(WatchEvent::Upsert(obs)),
                    LockWatchEvent::Deleted => send(WatchEvent::Deleted),
                    LockWatchEvent::Bookmark(rv) => send(WatchEvent::Bookmark(rv)),
                    LockWatchEvent::Expired => return send(WatchEvent::Expired),
                }
            }
            send(WatchEvent::Ended);
        }));
    }
}
