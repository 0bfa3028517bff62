//! The driver loop: performs the core's actions with kube-rs and feeds the
//! results back, on tokio time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use kube::api::{Api, DynamicObject, PostParams, WatchEvent as KubeEvent, WatchParams};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant as TokioInstant;
use tokio_util::sync::CancellationToken;

use super::errors::{ApiOutcome, classify, code_label, forbidden_message};
use super::lease::{build_new, build_update, lease_resource, parse};
use super::{LeaderTask, Leadership, Settings};
use crate::core::{
    Action, Core, Failure, Input, Instant, Observed, OpId, ReadResult, StepDownReason, Term,
    TimerKind, WallTime, Warning, WatchEvent, WatchId, WriteResult,
};

/// Everything the loop owns.
pub(crate) struct Driver {
    pub(crate) settings: Settings,
    pub(crate) api: Api<DynamicObject>,
    pub(crate) core: Core,
    pub(crate) origin: TokioInstant,
    pub(crate) state: watch::Sender<Leadership>,
    pub(crate) token: watch::Sender<Option<(Term, CancellationToken)>>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) task: Option<LeaderTask>,
}

struct Run {
    d: Driver,
    tx: mpsc::UnboundedSender<Input>,
    rx: mpsc::UnboundedReceiver<Input>,
    timers: HashMap<TimerKind, TokioInstant>,
    watch_task: Option<JoinHandle<()>>,
    request_task: Option<JoinHandle<()>>,
    /// The Lease as last read, to keep fields we do not manage on writes.
    cache: Arc<Mutex<Option<DynamicObject>>>,
    leader: Option<(Term, CancellationToken, Option<JoinHandle<()>>)>,
    /// Verbs refused with 403 and already explained (explained once per outage).
    forbidden: Arc<Mutex<Vec<&'static str>>>,
    renew_started: Option<TokioInstant>,
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

impl Driver {
    pub(crate) async fn run(self) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut run = Run {
            d: self,
            tx,
            rx,
            timers: HashMap::new(),
            watch_task: None,
            request_task: None,
            cache: Arc::default(),
            leader: None,
            forbidden: Arc::default(),
            renew_started: None,
        };
        run.main().await;
    }
}

impl Run {
    fn lease_label(&self) -> String {
        format!("{}/{}", self.d.settings.namespace, self.d.settings.lease)
    }

    async fn main(&mut self) {
        let mut shutdown_sent = false;
        self.perform();
        loop {
            if self.d.core.is_stopped() {
                break;
            }
            let next = self.timers.values().min().copied();
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = self.d.shutdown.cancelled(), if !shutdown_sent => {
                    shutdown_sent = true;
                    self.feed(Input::Shutdown);
                }
                Some(input) = self.rx.recv() => self.feed(input),
                _ = sleep => {
                    let now = TokioInstant::now();
                    let due: Vec<TimerKind> = self.timers.iter().filter(|(_, at)| **at <= now).map(|(k, _)| *k).collect();
                    for kind in due {
                        self.timers.remove(&kind);
                        self.feed(Input::TimerFired(kind));
                    }
                }
            }
        }
        if let Some(t) = self.watch_task.take() {
            t.abort();
        }
        if let Some(t) = self.request_task.take() {
            t.abort();
        }
    }

    fn feed(&mut self, input: Input) {
        if let Input::WriteDone {
            result: WriteResult::Ok(_),
            ..
        } = &input
            && let Some(started) = self.renew_started.take()
            && self.leader.is_some()
        {
            let label = self.lease_label();
            self.d
                .settings
                .metrics
                .renew_latency(&label, started.elapsed());
            self.d.settings.health.renewed(started);
        }
        let (now, wall) = (now_instant(self.d.origin), now_wall());
        self.d.core.handle(now, wall, input);
        self.perform();
    }

    fn perform(&mut self) {
        while let Some(action) = self.d.core.poll_action() {
            self.act(action);
        }
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Get { op, timeout } => self.request(op, timeout, Req::Get),
            Action::Create {
                op,
                record,
                timeout,
            } => {
                let obj = build_new(&self.d.settings.namespace, &self.d.settings.lease, &record);
                self.request(op, timeout, Req::Create(obj));
            }
            Action::Update {
                op,
                record,
                resource_version,
                timeout,
            } => {
                let base = self.cache.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let obj = build_update(
                    base.as_ref(),
                    &self.d.settings.namespace,
                    &self.d.settings.lease,
                    &record,
                    &resource_version,
                );
                if self.leader.is_some() {
                    self.renew_started = Some(TokioInstant::now());
                }
                self.request(op, timeout, Req::Update(obj));
            }
            Action::StartWatch { watch, from } => self.start_watch(watch, from),
            Action::StopWatch => {
                if let Some(t) = self.watch_task.take() {
                    t.abort();
                }
            }
            Action::SetTimer { kind, at } => {
                let at = self.d.origin + at.as_duration();
                self.timers.insert(kind, at);
            }
            Action::CancelTimer(kind) => {
                self.timers.remove(&kind);
            }
            Action::StepUp { term } => self.step_up(term),
            Action::StepDown { reason } => self.step_down(reason),
            Action::Following { holder } => self.publish(Leadership::Following { holder }),

            Action::Released => tracing::info!(lease = %self.lease_label(), "released the lease"),
            Action::Stopped => {
                self.publish(Leadership::Stopped);
            }
            Action::Warn(w) => self.warn(w),
        }
    }

    fn publish(&self, state: Leadership) {
        if *self.d.state.borrow() == state {
            return;
        }
        if let Leadership::Following { holder } = &state {
            tracing::info!(lease = %self.lease_label(), holder = holder.as_deref().unwrap_or(""), "following");
        }
        if let Some(hook) = &self.d.settings.hook {
            hook(&state);
        }
        self.d.state.send_replace(state);
    }

    fn warn(&self, w: Warning) {
        let lease = self.lease_label();
        match w {
            Warning::WatchForbidden => {
                let msg =
                    forbidden_message("watch", &self.d.settings.namespace, &self.d.settings.lease);
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
                "lease duration written by the holder is far above ours; honouring it, so a takeover may take that long"
            ),
            Warning::MissingDuration { holder } => {
                tracing::warn!(
                    lease,
                    holder,
                    "lease has no positive leaseDurationSeconds; treating it as expired"
                )
            }
        }
    }

    fn step_up(&mut self, term: Term) {
        let label = self.lease_label();
        tracing::info!(lease = %label, identity = %term.holder, transitions = term.transitions, "became leader");
        let token = CancellationToken::new();
        let join = self
            .d
            .task
            .as_ref()
            .map(|task| tokio::spawn(task(term.clone(), token.clone())));
        self.leader = Some((term.clone(), token.clone(), join));
        self.d.settings.health.renewed(TokioInstant::now());
        self.d.settings.metrics.transition(&label);
        self.d.settings.metrics.leader_status(&label, true);
        self.d.token.send_replace(Some((term.clone(), token)));
        self.publish(Leadership::Leading {
            term,
            since: std::time::Instant::now(),
        });
        self.event(format!("{} became leader", self.d.settings.identity));
    }

    /// Cancels leader-only work first, then changes the state, then reports
    /// the work stopped once it has (aborting it after a grace period).
    fn step_down(&mut self, reason: StepDownReason) {
        let Some((term, token, join)) = self.leader.take() else {
            return;
        };
        token.cancel();
        self.d.token.send_replace(None);
        self.d.settings.health.not_leading();
        let label = self.lease_label();
        self.d.settings.metrics.leader_status(&label, false);
        tracing::info!(lease = %label, transitions = term.transitions, ?reason, "stopped leading");
        self.publish(Leadership::Following {
            holder: self.d.core.known_holder().map(str::to_owned),
        });
        self.event(format!("{} stopped leading", self.d.settings.identity));
        let tx = self.tx.clone();
        let grace = self.d.settings.work_grace;
        tokio::spawn(async move {
            if let Some(mut join) = join
                && tokio::time::timeout(grace, &mut join).await.is_err()
            {
                tracing::warn!(lease = %label, ?grace, "leader task ignored cancellation; aborting it");
                join.abort();
                let _ = join.await;
            }
            let _ = tx.send(Input::LeaderWorkStopped);
        });
    }

    fn event(&self, message: String) {
        if self.d.settings.events {
            let s = &self.d.settings;
            super::events::post(
                self.d.settings.client.clone(),
                s.namespace.clone(),
                s.lease.clone(),
                s.identity.clone(),
                message,
                s.timings.call_timeout(),
            );
        }
    }

    fn request(&mut self, op: OpId, timeout: Duration, req: Req) {
        let ctx = self.ctx();
        let tx = self.tx.clone();
        self.request_task = Some(tokio::spawn(async move {
            let input = ctx.perform(op, timeout, req).await;
            let _ = tx.send(input);
        }));
    }

    fn ctx(&self) -> Ctx {
        Ctx {
            api: self.d.api.clone(),
            lease: self.d.settings.lease.clone(),
            namespace: self.d.settings.namespace.clone(),
            label: self.lease_label(),
            metrics: self.d.settings.metrics.clone(),
            cache: self.cache.clone(),
            forbidden: self.forbidden.clone(),
        }
    }

    fn start_watch(&mut self, watch: WatchId, from: Option<String>) {
        if let Some(t) = self.watch_task.take() {
            t.abort();
        }
        let ctx = self.ctx();
        let tx = self.tx.clone();
        let timeout = self.d.settings.timings.call_timeout();
        self.watch_task = Some(tokio::spawn(async move {
            ctx.watch(watch, from, timeout, tx).await
        }));
    }
}

enum Req {
    Get,
    Create(DynamicObject),
    Update(DynamicObject),
}

/// What a request or watch task needs.
struct Ctx {
    api: Api<DynamicObject>,
    lease: String,
    namespace: String,
    label: String,
    metrics: Arc<dyn super::Metrics>,
    cache: Arc<Mutex<Option<DynamicObject>>>,
    forbidden: Arc<Mutex<Vec<&'static str>>>,
}

impl Ctx {
    fn observe(&self, obj: DynamicObject) -> Observed {
        let (observed, notes) = parse(&obj);
        for note in notes {
            tracing::warn!(lease = %self.label, "malformed lease: {note}");
        }
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some(obj);
        observed
    }

    fn count(&self, verb: &'static str, result: &Result<DynamicObject, kube::Error>) {
        let code = match result {
            Ok(_) if verb == "create" => "201".to_string(),
            Ok(_) => "200".to_string(),
            Err(e) => code_label(e),
        };
        self.metrics.request(&self.label, verb, &code);
        let mut f = self.forbidden.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Err(e) if classify(e) == ApiOutcome::Failed(Failure::Forbidden) => {
                if !f.contains(&verb) {
                    f.push(verb);
                    tracing::warn!(lease = %self.label, "{}", forbidden_message(verb, &self.namespace, &self.lease));
                }
            }
            Err(e) => {
                tracing::debug!(lease = %self.label, verb, error = %e, "lease request failed")
            }
            Ok(_) => f.retain(|v| *v != verb),
        }
    }

    async fn perform(&self, op: OpId, timeout: Duration, req: Req) -> Input {
        let pp = PostParams::default();
        let (verb, fut): (
            &'static str,
            futures::future::BoxFuture<'_, Result<DynamicObject, kube::Error>>,
        ) = match &req {
            Req::Get => ("get", Box::pin(self.api.get(&self.lease))),
            Req::Create(obj) => ("create", Box::pin(self.api.create(&pp, obj))),
            Req::Update(obj) => ("update", Box::pin(self.api.replace(&self.lease, &pp, obj))),
        };
        let result = match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => {
                self.metrics.request(&self.label, verb, "timeout");
                tracing::debug!(lease = %self.label, verb, ?timeout, "lease request timed out");
                let failed = Failure::Timeout;
                return match req {
                    Req::Get => Input::ReadDone {
                        op,
                        result: ReadResult::Failed(failed),
                    },
                    _ => Input::WriteDone {
                        op,
                        result: WriteResult::Failed(failed),
                    },
                };
            }
        };
        self.count(verb, &result);
        match req {
            Req::Get => {
                let result = match result {
                    Ok(obj) => ReadResult::Found(self.observe(obj)),
                    Err(e) => match classify(&e) {
                        ApiOutcome::NotFound => ReadResult::NotFound,
                        ApiOutcome::Failed(f) => ReadResult::Failed(f),
                        _ => ReadResult::Failed(Failure::Other),
                    },
                };
                Input::ReadDone { op, result }
            }
            _ => {
                let result = match result {
                    Ok(obj) => WriteResult::Ok(self.observe(obj)),
                    Err(e) => match classify(&e) {
                        // Create answers 409 AlreadyExists; both mean: re-read.
                        ApiOutcome::Conflict => WriteResult::Conflict,
                        ApiOutcome::NotFound => WriteResult::NotFound,
                        ApiOutcome::Failed(f) => WriteResult::Failed(f),
                        ApiOutcome::Gone => WriteResult::Failed(Failure::Other),
                    },
                };
                Input::WriteDone { op, result }
            }
        }
    }

    async fn watch(
        self,
        watch: WatchId,
        from: Option<String>,
        timeout: Duration,
        tx: mpsc::UnboundedSender<Input>,
    ) {
        let send = |event: WatchEvent| {
            let _ = tx.send(Input::Watch { watch, event });
        };
        let wp = WatchParams::default()
            .fields(&format!("metadata.name={}", self.lease))
            .timeout(290);
        let version = from.unwrap_or_else(|| "0".into());
        let stream = match tokio::time::timeout(timeout, self.api.watch(&wp, &version)).await {
            Err(_) => {
                self.metrics.request(&self.label, "watch", "timeout");
                return send(WatchEvent::Failed(Failure::Timeout));
            }
            Ok(Err(e)) => {
                self.metrics.request(&self.label, "watch", &code_label(&e));
                return match classify(&e) {
                    ApiOutcome::Failed(Failure::Forbidden) => {
                        send(WatchEvent::Failed(Failure::Forbidden))
                    }
                    ApiOutcome::Gone => send(WatchEvent::Expired),
                    _ => send(WatchEvent::Failed(Failure::Other)),
                };
            }
            Ok(Ok(stream)) => stream,
        };
        self.metrics.request(&self.label, "watch", "200");
        send(WatchEvent::Started);
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(KubeEvent::Added(obj) | KubeEvent::Modified(obj)) => {
                    if obj.metadata.name.as_deref() == Some(self.lease.as_str()) {
                        send(WatchEvent::Upsert(self.observe(obj)));
                    }
                }
                Ok(KubeEvent::Deleted(obj)) => {
                    if obj.metadata.name.as_deref() == Some(self.lease.as_str()) {
                        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
                        send(WatchEvent::Deleted);
                    }
                }
                Ok(KubeEvent::Bookmark(b)) => {
                    send(WatchEvent::Bookmark(b.metadata.resource_version))
                }
                // 410 arrives as an ERROR event inside a 200 stream.
                Ok(KubeEvent::Error(status)) if status.code == 410 => {
                    return send(WatchEvent::Expired);
                }
                Ok(KubeEvent::Error(status)) => {
                    tracing::debug!(lease = %self.label, ?status, "watch error event");
                    return send(WatchEvent::Ended);
                }
                Err(e) => {
                    tracing::debug!(lease = %self.label, error = %e, "watch stream failed");
                    return send(WatchEvent::Ended);
                }
            }
        }
        send(WatchEvent::Ended);
    }
}

pub(crate) fn lease_api(client: kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client, namespace, &lease_resource())
}
