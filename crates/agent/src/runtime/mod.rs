//! The agent runtime behind `leasehold run`: providers publish variables,
//! the policy renders into the desired inputs, and the reconciler keeps the
//! running inputs equal to them.
//!
//! Leader-gated inputs (whose conditions read an election's variables) run
//! under that election's term: their cancellation is a child of the term's
//! token, they are tracked by the term, and the elector's step-down waits
//! for them. Stopping never waits for the reconciler.
//!
//! The Agent's life, a module each: `load` (a policy read and checked),
//! this module's `Agent::start` (outputs, monitoring), `run` (the loop:
//! signals, reloads, election events, provider changes), `reconciler`
//! with `reconcile` and `books` (what should run against what runs),
//! `leading` (the elections), `instances` (starting and stopping inputs)
//! and `shutdown` (inputs, outputs, leases, registries, in that order).

mod balance;
mod balancers;
mod books;
mod candidacy;
pub mod config;
mod elastic_defaults;
pub mod elections;
mod instances;
pub mod kubernetes;
mod leading;
mod load;
pub mod policy_check;
pub mod policy_files;
pub mod providers;
mod reconcile;
mod reconciler;
mod run;
mod self_monitoring;
mod shutdown;
pub mod state_claims;
pub mod supervisor;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_election::SimpleMetrics;
use leasehold_policy::{Value, Vars};
use prometheus_client::registry::Registry;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::elections::{Election, ElectionEvent};
use self::load::with_data_path;
pub use self::load::{Loaded, Statics, load};
use self::policy_files::PolicyFiles;
use self::reconcile::Instance;
use self::supervisor::GatedFailure;
use crate::inputs::InputSpec;
use crate::inputs::filestream::registry::Registries;
use crate::kubeconn::Connection;
use crate::monitor::metrics::AgentMetrics;
use crate::monitor::status::{OutputStatus, StatusBoard};
use crate::monitor::{Monitor, SharedRegistry};
use crate::outputs::{self, OutputMetrics, Outputs};

/// The `/status` problem of a filestream registry that cannot be written:
/// it affects readiness (a replaced pod would read the node's logs again).
const REGISTRY_PROBLEM: &str = "filestream registry";
/// The `/status` problem of a reload whose output or agent settings wait
/// for a restart.
const RESTART_PROBLEM: &str = "policy";

/// Wait before retrying a connection that failed.
const CONNECT_RETRY: Duration = Duration::from_secs(10);

/// Options of `leasehold run` that are not in the policy.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The policy file and the directory of files of inputs.
    pub files: PolicyFiles,
    /// `--http`: serve monitoring here, whatever the policy says.
    pub http: Option<std::net::SocketAddr>,
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--path.data`: where state is kept (disk queues by default).
    pub data_path: PathBuf,
    /// `--fleet`: the rename fence's fleet label, if any.
    pub fleet: Option<String>,
}

/// An input being stopped: its task, the token that abandons a wait for
/// queue room (at `until`), and for an input gone for good (its mapping
/// went) its id, whose metrics and registries are forgotten once it ended.
struct Stopping {
    join: JoinHandle<()>,
    cancel: CancellationToken,
    abandon: CancellationToken,
    until: Instant,
    forget: Option<String>,
    /// Reading its files to their ends: the registries it holds until it
    /// ended (an input naming one waits), and when it is cut off.
    draining: Option<(Vec<String>, Instant)>,
}

/// An input the policy renders: its instance, settings and a mapping's
/// fields.
type Desired = (Instance, InputSpec, Option<Value>);

/// How an input is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopHow {
    /// At once.
    Now,
    /// After reading its files to their ends (at most the provider's
    /// `cleanup_timeout`); a successor naming its registries waits.
    Drain,
}

/// One running input instance.
struct Running {
    instance: Instance,
    spec: InputSpec,
    /// Rendered from a provider's mapping: gone for good when stopped.
    dynamic: bool,
    /// The registries it resumes from ([`inputs::Input::state_keys`]).
    keys: Vec<String>,
    cancel: CancellationToken,
    finish: CancellationToken,
    abandon: CancellationToken,
    join: JoinHandle<()>,
    grace: Duration,
}

/// The agent.
pub struct Agent {
    opts: RunOptions,
    statics: Statics,
    loaded: Loaded,
    outputs: Outputs,
    elections: Vec<Election>,
    next_key: usize,
    rank_seed: u64,
    connections: HashMap<Option<String>, Connection>,
    running: HashMap<String, Running>,
    stopping: Vec<Stopping>,
    /// Inputs refused for a registry another owns, logged once each.
    warned_conflicts: HashSet<String>,
    board: StatusBoard,
    metrics: AgentMetrics,
    election_metrics: Arc<SimpleMetrics>,
    monitor: Option<Arc<Monitor>>,
    events_tx: UnboundedSender<ElectionEvent>,
    events_rx: UnboundedReceiver<ElectionEvent>,
    failures_tx: UnboundedSender<GatedFailure>,
    failures_rx: UnboundedReceiver<GatedFailure>,
    retry_tx: UnboundedSender<usize>,
    retry_rx: UnboundedReceiver<usize>,
    /// The outputs of a reloaded policy that differ from the running
    /// ones; they start at the next restart.
    pending_outputs: Option<Vec<outputs::OutputSettings>>,
    /// Delivered offsets of `filestream` inputs, written every second.
    registries: Arc<Registries>,
    registry_flush: JoinHandle<()>,
    /// The `kubernetes` provider, when the policy configures it.
    provider: Option<(kubernetes::settings::ProviderSettings, kubernetes::Provider)>,
    /// The rendering, the provider's mappings and who owns which registry.
    books: books::Books,
    /// What spreads the shards of sharded elections.
    balancers: balancers::Balancers,
}

impl Agent {
    /// Starts outputs and the monitoring server; elections and inputs start
    /// in [`Agent::run`].
    pub async fn start(
        opts: RunOptions,
        statics: Statics,
        loaded: Loaded,
    ) -> Result<Agent, String> {
        let mut registry = Registry::default();
        let metrics = AgentMetrics::register(&mut registry);
        metrics.set_identity(&statics.fields.name);
        let election_metrics = Arc::new(SimpleMetrics::register(&mut registry));
        let output_metrics = OutputMetrics::register(&mut registry);
        let registries = Registries::new(&opts.data_path);
        registries.register_metrics(&mut registry);
        let registry: SharedRegistry = Arc::new(Mutex::new(registry));
        if loaded.settings.shipping.as_ref().is_some_and(|s| s.logs) {
            // From now on: the records of the start are shipped too.
            crate::logtap::tap().open();
        }
        let board = StatusBoard::new();
        board.set_redactor(loaded.redactor.clone());
        board.set_identity(statics.fields.name.clone());
        board.policy_loaded(opts.files.policy.display().to_string());
        let outputs = Outputs::start(
            with_data_path(&loaded.outputs, &opts.data_path),
            output_metrics,
        )
        .map_err(|e| format!("cannot start outputs: {e}"))?;
        let monitor = match opts.http.or(loaded.settings.monitoring) {
            None => None,
            Some(addr) => {
                let m = Arc::new(Monitor::new(board.clone(), registry.clone()));
                let (bound, _join) = m
                    .clone()
                    .serve(addr, CancellationToken::new())
                    .await
                    .map_err(|e| e.to_string())?;
                tracing::info!("monitoring on http://{bound} (/livez, /readyz, /metrics, /status)");
                Some(m)
            }
        };
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let (failures_tx, failures_rx) = mpsc::unbounded_channel();
        let (retry_tx, retry_rx) = mpsc::unbounded_channel();
        let rank_seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32);
        let registry_board = board.clone();
        let registry_flush = tokio::spawn(Arc::clone(&registries).flush_loop(move |error| {
            registry_board.set_problem(REGISTRY_PROBLEM, error.map(|e| (e, true)))
        }));
        let agent = Agent {
            provider: None,
            books: books::Books::default(),
            pending_outputs: None,
            registries,
            registry_flush,
            opts,
            statics,
            loaded,
            outputs,
            elections: Vec::new(),
            next_key: 0,
            rank_seed,
            connections: HashMap::new(),
            running: HashMap::new(),
            stopping: Vec::new(),
            warned_conflicts: HashSet::new(),
            board,
            metrics,
            election_metrics,
            monitor,
            events_tx,
            events_rx,
            failures_tx,
            failures_rx,
            retry_tx,
            retry_rx,
            balancers: balancers::Balancers::default(),
        };
        agent.publish_outputs();
        Ok(agent)
    }

    fn vars(&self) -> Vars {
        let mut vars = self.loaded.vars.clone();
        if let Some(v) = elections::provider_value(&self.elections) {
            vars.set_provider(elections::PROVIDER_NAME, v);
        }
        vars
    }

    /// How long a drained input may read on: the provider's
    /// `cleanup_timeout`, the time a deleted Pod's inputs already get.
    fn drain_limit(&self) -> Duration {
        self.loaded
            .kubernetes
            .as_ref()
            .map_or(kubernetes::settings::DEFAULT_CLEANUP_TIMEOUT, |k| {
                k.cleanup_timeout
            })
    }

    /// Serves the outputs in `/status` live: depth and health are read
    /// each time the document is.
    fn publish_outputs(&self) {
        let outputs: Vec<(String, String, crate::outputs::EventSender)> = self
            .loaded
            .outputs
            .iter()
            .filter_map(|o| {
                let sender = self.outputs.sender(&o.name)?;
                Some((o.name.clone(), o.kind.type_name().to_string(), sender))
            })
            .collect();
        self.board.set_outputs(Arc::new(move || {
            outputs
                .iter()
                .map(|(name, kind, sender)| OutputStatus {
                    name: name.clone(),
                    kind: kind.clone(),
                    queue_depth: sender.depth(),
                    queue_bytes: sender.bytes(),
                    health: sender.health(),
                })
                .collect()
        }));
    }
}
