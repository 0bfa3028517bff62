//! The tokio + kube-rs driver: runs a [`Core`](crate::core::Core) against a
//! real API server.
//!
//! ```no_run
//! use leasehold_election::{Elector, Leadership};
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! let handle = Elector::builder(client, "kube-system", "ksm-leader", "pod-a")
//!     .on_leading(|term, token| async move {
//!         println!("leading term {}", term.transitions);
//!         token.cancelled().await; // do leader-only work until this fires
//!     })
//!     .spawn()?;
//! let mut state = handle.state();
//! while !matches!(*state.borrow_and_update(), Leadership::Leading { .. }) {
//!     state.changed().await?;
//! }
//! handle.shutdown().await; // stops the work, then releases the lease
//! # Ok(()) }
//! ```

mod checkpoint;
mod errors;
mod events;
mod fence;
mod health;
mod hook;
mod kube_lock;
mod lease;
mod lock;
mod metrics;
mod run;
mod watchdog;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

pub use checkpoint::{ANNOTATION_PREFIX, Checkpoints};
pub use fence::{ELECTION_LABEL, FLEET_LABEL, Fence};
pub use health::HealthCheck;
pub use lock::{LeaseLock, LockError, LockWatchEvent};
pub use metrics::{Metrics, NoMetrics, SimpleMetrics};

use crate::core::{Config, ConfigError, Core, Term, Timings};

/// What this process currently is in one election.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leadership {
    /// Not known yet (the Lease has not been read).
    Unknown,
    /// Another holder (or nobody) holds the lease; this process is a candidate.
    Following {
        /// The holder named in the Lease, `None` if free or absent.
        holder: Option<String>,
    },
    /// This process leads.
    Leading {
        /// The term, for fencing data produced while leading.
        term: Term,
        /// When this term began locally.
        since: std::time::Instant,
    },
    /// Shut down; the election has ended for this process.
    Stopped,
}

impl Leadership {
    /// True while leading.
    pub fn is_leading(&self) -> bool {
        matches!(self, Leadership::Leading { .. })
    }
}

/// Leader-only work started at every step-up; it must return soon after
/// its token is cancelled (it is aborted after a grace period otherwise).
pub type LeaderTask = Arc<dyn Fn(Term, CancellationToken) -> BoxFuture<'static, ()> + Send + Sync>;

/// A state change and the instant it happened (taken when the elector
/// changed state, not when the hook runs, so a slow reader still reports
/// true times).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateChange {
    /// The new state.
    pub state: Leadership,
    /// When the elector changed to it.
    pub at: std::time::SystemTime,
}

/// Called in order for every state change, on a dedicated thread: a hook
/// that blocks (a stalled stdout) delays only later hook calls, never the
/// election or a step-down.
pub type StateHook = Arc<dyn Fn(&StateChange) + Send + Sync>;

/// Why an elector could not be started.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// An empty namespace, lease name or identity.
    Empty(&'static str),
    /// The core refused the configuration.
    Config(ConfigError),
    /// A helper thread could not be started.
    Thread(std::io::Error),
    /// The lease name or namespace is not a valid Kubernetes name.
    Name(crate::names::NameError),
    /// The timings cannot be used on a real Lease.
    Timings(crate::core::TimingError),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Empty(what) => write!(f, "{what} must not be empty"),
            BuildError::Config(e) => e.fmt(f),
            BuildError::Thread(e) => write!(f, "cannot start the elector's thread: {e}"),
            BuildError::Name(e) => e.fmt(f),
            BuildError::Timings(e) => write!(f, "invalid timings: {e}"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Settings shared by the loop and its tasks.
pub(crate) struct Settings {
    /// The rename fence, if asked for (and the lock is the API server).
    pub(crate) fence: Option<fence::FenceRuntime>,
    /// For Events; `None` when the lock is not the API server.
    pub(crate) client: Option<kube::Client>,
    pub(crate) namespace: String,
    pub(crate) lease: String,
    pub(crate) identity: String,
    pub(crate) timings: Timings,
    pub(crate) events: bool,
    pub(crate) metrics: Arc<dyn Metrics>,
    pub(crate) health: HealthCheck,
    pub(crate) work_grace: Duration,
    pub(crate) hook: Option<hook::HookSender>,
}

/// Entry point: `Elector::builder(..)`.
pub struct Elector;

impl Elector {
    /// An elector for Lease `lease` in `namespace`, standing as `identity`
    /// (conventionally the pod name, so `kubectl get lease` shows who leads).
    pub fn builder(
        client: kube::Client,
        namespace: impl Into<String>,
        lease: impl Into<String>,
        identity: impl Into<String>,
    ) -> ElectorBuilder {
        let (namespace, lease) = (namespace.into(), lease.into());
        ElectorBuilder {
            lock: Arc::new(kube_lock::KubeLock::new(
                client.clone(),
                &namespace,
                &lease,
                Arc::new(NoMetrics),
                errors::Endpoint::default(),
                Checkpoints::default(),
                "",
            )),
            client: Some(client),
            namespace,
            lease,
            identity: identity.into(),
            timings: Timings::default(),
            release_on_shutdown: true,
            events: false,
            metrics: Arc::new(NoMetrics),
            task: None,
            hook: None,
            custom_lock: false,
            endpoint: errors::Endpoint::default(),
            seed: None,
            fence: None,
        }
    }

    /// An elector for Lease `lease` reached through `api` (its client and
    /// namespace; the client's default namespace if `api` is cluster-wide).
    pub fn for_api(
        api: kube::Api<k8s_openapi::api::coordination::v1::Lease>,
        lease: impl Into<String>,
        identity: impl Into<String>,
    ) -> ElectorBuilder {
        let namespace = api.namespace().map(str::to_owned);
        let client = api.into_client();
        let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
        Elector::builder(client, namespace, lease, identity)
    }

    /// An elector on any [`LeaseLock`] (a simulated server in tests, a
    /// proxy…); Kubernetes Events are not posted.
    pub fn with_lock(lock: Arc<dyn LeaseLock>, identity: impl Into<String>) -> ElectorBuilder {
        let described = lock.describe();
        let (namespace, lease) = match described.split_once('/') {
            Some((ns, name)) => (ns.to_owned(), name.to_owned()),
            None => (String::new(), described),
        };
        ElectorBuilder {
            lock,
            client: None,
            namespace,
            lease,
            identity: identity.into(),
            timings: Timings::default(),
            release_on_shutdown: true,
            events: false,
            metrics: Arc::new(NoMetrics),
            task: None,
            hook: None,
            custom_lock: true,
            endpoint: errors::Endpoint::default(),
            seed: None,
            fence: None,
        }
    }
}

/// Configures and starts an elector.
pub struct ElectorBuilder {
    seed: Option<u64>,
    fence: Option<Fence>,
    lock: Arc<dyn LeaseLock>,
    endpoint: errors::Endpoint,
    /// Set when the lock was given by the caller (not rebuilt with metrics).
    custom_lock: bool,
    client: Option<kube::Client>,
    namespace: String,
    lease: String,
    identity: String,
    timings: Timings,
    release_on_shutdown: bool,
    events: bool,
    metrics: Arc<dyn Metrics>,
    task: Option<LeaderTask>,
    hook: Option<StateHook>,
}

impl ElectorBuilder {
    /// Calls `f` for every state change, in order, on a dedicated thread
    /// (never on the election loop, so it cannot delay a step-down). Each
    /// change carries the instant it happened.
    pub fn on_state(mut self, f: impl Fn(&StateChange) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(f));
        self
    }

    /// Names the API server URL and the credentials (e.g. "user agent-1 of
    /// kubeconfig /etc/k.conf") in error messages about connections,
    /// TLS and rejected credentials.
    pub fn connection_info(mut self, server: impl Into<String>, user: impl Into<String>) -> Self {
        self.endpoint = errors::Endpoint {
            server: server.into(),
            user: user.into(),
        };
        self
    }

    /// Seeds the jitter of polling and backoff (default: from the clock and
    /// the identity), so a simulation can replay a schedule exactly.
    pub fn jitter_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Lease duration, renew deadline and retry period (default 15/10/2 s).
    pub fn timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// Release the lease on shutdown so others take it at once (default on).
    pub fn release_on_shutdown(mut self, release: bool) -> Self {
        self.release_on_shutdown = release;
        self
    }

    /// Post Kubernetes Events on the Lease at step-up and step-down.
    pub fn emit_events(mut self, events: bool) -> Self {
        self.events = events;
        self
    }

    /// Where to report metrics (default: nowhere).
    pub fn metrics(mut self, metrics: Arc<dyn Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Leader-only work, started at every step-up with the term and a token
    /// that is cancelled at step-down, before the state stops saying
    /// "leading". Shutdown releases the lease only after it has returned.
    pub fn on_leading<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Term, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.task = Some(Arc::new(move |term, token| Box::pin(f(term, token))));
        self
    }

    /// Fences renames of the Lease: every write labels it with `fence`,
    /// and this candidate neither takes the Lease nor starts work while
    /// another Lease with the same labels is held (see [`Fence`]). Needs
    /// `list` and `watch` on leases (cluster-wide to fence a change of
    /// namespace too); without them the fence is off and says so. Ignored
    /// on a custom lock.
    pub fn fence(mut self, fence: Fence) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Starts the elector on the current tokio runtime.
    pub fn spawn(self) -> Result<ElectionHandle, BuildError> {
        for (what, v) in [
            ("namespace", &self.namespace),
            ("lease name", &self.lease),
            ("identity", &self.identity),
        ] {
            if self.custom_lock && what == "namespace" {
                continue;
            }
            if v.is_empty() {
                return Err(BuildError::Empty(what));
            }
        }
        crate::names::validate_lease_name(&self.lease).map_err(BuildError::Name)?;
        if let Some(f) = &self.fence {
            for (key, value) in f.labels() {
                crate::names::validate_label_value(key, &value).map_err(BuildError::Name)?;
            }
        }
        if !self.custom_lock {
            crate::names::validate_namespace(&self.namespace).map_err(BuildError::Name)?;
        }
        self.timings
            .check_for_lease()
            .map_err(BuildError::Timings)?;
        let origin = tokio::time::Instant::now();
        let config = Config {
            identity: self.identity.clone(),
            timings: self.timings,
            release_on_shutdown: self.release_on_shutdown,
            seed: self.seed.unwrap_or_else(|| seed(&self.identity)),
        };
        let core = Core::new(config, run::now_instant(origin), run::now_wall())
            .map_err(BuildError::Config)?;
        let t = self.timings;
        // The old leader's work must be gone before anyone else can see
        // the lease expire: well inside lease_duration − renew_deadline.
        let work_grace = (t.lease_duration() - t.renew_deadline()) / 2;
        let health = HealthCheck::new(t.lease_duration(), t.retry_period() * 2);
        let checkpoints = Checkpoints::default();
        let lock: Arc<dyn LeaseLock> = match (&self.client, self.custom_lock) {
            (Some(client), false) => Arc::new(
                kube_lock::KubeLock::new(
                    client.clone(),
                    &self.namespace,
                    &self.lease,
                    self.metrics.clone(),
                    self.endpoint.clone(),
                    checkpoints.clone(),
                    &self.identity,
                )
                .labelled(
                    self.fence
                        .iter()
                        .flat_map(|f| f.labels())
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                ),
            ),
            _ => self.lock.clone(),
        };
        // A candidate that never leads still exports its 0, so dashboards
        // see every candidate, not only past leaders.
        self.metrics.leader_status(&self.lease, false);
        let fence = match (&self.client, self.custom_lock, self.fence) {
            (Some(client), false, Some(f)) => Some(fence::FenceRuntime::new(
                f,
                client.clone(),
                &self.namespace,
                &self.lease,
            )),
            _ => None,
        };
        let settings = Settings {
            fence,
            client: self.client.clone(),
            namespace: self.namespace.clone(),
            lease: self.lease.clone(),
            identity: self.identity,
            timings: t,
            events: self.events,
            metrics: self.metrics,
            health: health.clone(),
            work_grace,
            hook: match self.hook {
                Some(h) => Some(hook::HookSender::start(h).map_err(BuildError::Thread)?),
                None => None,
            },
        };
        let (state_tx, state_rx) = watch::channel(Leadership::Unknown);
        let (token_tx, token_rx) = watch::channel(None);
        let shutdown = CancellationToken::new();
        let driver = run::Driver {
            lock,
            settings,
            core,
            origin,
            state: state_tx,
            token: token_tx,
            shutdown: shutdown.clone(),
            task: self.task,
            inputs: tokio::sync::mpsc::unbounded_channel(),
        };
        let resign_tx = driver.inputs.0.clone();
        let join = tokio::spawn(driver.run());
        Ok(ElectionHandle {
            resigner: Resigner(resign_tx),
            state: state_rx,
            token: token_rx,
            guard: Some(shutdown.drop_guard()),
            join: Some(join),
            health,
            checkpoints,
        })
    }
}

fn seed(identity: &str) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    identity
        .bytes()
        .fold(nanos ^ u64::from(std::process::id()), |h, b| {
            h.rotate_left(5) ^ u64::from(b)
        })
}

/// Hands the lease over from outside the election loop.
#[derive(Clone, Debug)]
pub struct Resigner(tokio::sync::mpsc::UnboundedSender<crate::core::Input>);

impl Resigner {
    /// If leading: step down now (cancelling the leader-only work), release
    /// the lease once the work has stopped, and leave it to the other
    /// candidates for `hold_back` before standing again. The elector stays
    /// a candidate throughout. Does nothing when not leading.
    pub fn resign(&self, hold_back: Duration) {
        let _ = self.0.send(crate::core::Input::Resign { hold_back });
    }
}

/// A running elector. Dropping it requests shutdown (without waiting).
pub struct ElectionHandle {
    resigner: Resigner,
    state: watch::Receiver<Leadership>,
    token: watch::Receiver<Option<(Term, CancellationToken)>>,
    guard: Option<DropGuard>,
    join: Option<JoinHandle<()>>,
    health: HealthCheck,
    checkpoints: Checkpoints,
}

impl ElectionHandle {
    /// The current state, updated at every change.
    pub fn state(&self) -> watch::Receiver<Leadership> {
        self.state.clone()
    }

    /// While leading: the term and its token, cancelled at step-down. For
    /// callers that manage leader-only work themselves instead of
    /// [`ElectorBuilder::on_leading`].
    pub fn leader_token(&self) -> Option<(Term, CancellationToken)> {
        self.token.borrow().clone()
    }

    /// A handle for leader-only work that finds it cannot do its job here
    /// (its process keeps failing): see [`Resigner::resign`].
    pub fn resigner(&self) -> Resigner {
        self.resigner.clone()
    }

    /// From now on, wait `delay` past the moment a lease becomes free
    /// before taking it (see [`crate::core::Input::DeferAcquisition`]): a
    /// program leading several elections uses it to leave free leases to
    /// less busy candidates. Never delays a step-down.
    pub fn defer_acquisition(&self, delay: Duration) {
        let _ = self
            .resigner
            .0
            .send(crate::core::Input::DeferAcquisition(delay));
    }

    /// Handover checkpoints kept in the Lease's annotations (see
    /// [`Checkpoints`]); empty for elections on a custom lock.
    pub fn checkpoints(&self) -> Checkpoints {
        self.checkpoints.clone()
    }

    /// A health check to expose on a liveness endpoint.
    pub fn health(&self) -> HealthCheck {
        self.health.clone()
    }

    /// Steps down (cancelling leader-only work and waiting for it), releases
    /// the lease if configured, and returns when the elector has stopped.
    pub async fn shutdown(mut self) {
        if let Some(g) = self.guard.take() {
            drop(g);
        }
        if let Some(j) = self.join.take() {
            let _ = j.await;
        }
    }
}
