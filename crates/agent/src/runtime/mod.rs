//! The agent runtime behind `leasehold run`: providers publish variables,
//! the policy renders into the desired inputs, and the reconciler keeps the
//! running inputs equal to them.
//!
//! Leader-gated inputs (whose conditions read an election's variables) run
//! under that election's term: their cancellation is a child of the term's
//! token, they are tracked by the term, and the elector's step-down waits
//! for them. Stopping never waits for the reconciler.

mod balance;
mod balancers;
mod books;
mod candidacy;
pub mod config;
mod elastic_defaults;
pub mod elections;
pub mod kubernetes;
pub mod policy_check;
pub mod policy_files;
pub mod providers;
mod reconcile;
mod reconciler;
mod self_monitoring;
pub mod state_claims;
pub mod supervisor;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_election::{Leadership, Metrics, SimpleMetrics};
use leasehold_policy::{Policy, Severity, Value, Vars};
use prometheus_client::registry::Registry;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::config::AgentSettings;
use self::elections::{Election, ElectionEvent};
use self::policy_files::{PolicyFiles, Snapshot};
use self::reconcile::Instance;
use self::supervisor::{GatedFailure, Supervised};
use crate::inputs::filestream::registry::Registries;
use crate::inputs::{self, InputSpec};
use crate::kubeconn::{self, Connection};
use crate::monitor::metrics::AgentMetrics;
use crate::monitor::status::{ElectionState, OutputStatus, StatusBoard};
use crate::monitor::{Monitor, SharedRegistry};
use crate::outputs::{self, OutputMetrics, Outputs};
use crate::pipeline::publisher::{AgentFields, EventSink, TermStamp};
use crate::redact::Redactor;

/// The `/status` problem of a filestream registry that cannot be written:
/// it affects readiness (a replaced pod would read the node's logs again).
const REGISTRY_PROBLEM: &str = "filestream registry";
/// The `/status` problem of a reload whose output or agent settings wait
/// for a restart.
const RESTART_PROBLEM: &str = "policy";

/// How often the policy file is checked for changes.
const POLICY_POLL: Duration = Duration::from_secs(1);
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

/// `outputs` with every disk queue that names no path placed under
/// `data_path` (`DATA/queue/OUTPUT`).
/// The next objects the provider changed, if one runs (never otherwise).
async fn next_changes(
    provider: &mut Option<(kubernetes::settings::ProviderSettings, kubernetes::Provider)>,
) -> Option<kubernetes::Changes> {
    match provider {
        Some((_, p)) => match p.changes.recv().await {
            Some(c) => Some(c),
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

fn with_data_path(
    outputs: &[outputs::OutputSettings],
    data_path: &std::path::Path,
) -> Vec<outputs::OutputSettings> {
    let mut out = outputs.to_vec();
    for o in &mut out {
        if let Some(d) = &mut o.disk
            && d.path.is_none()
        {
            d.path = Some(data_path.join("queue").join(&o.name));
        }
    }
    out
}

/// A policy that passed every check, with what was derived from it.
pub struct Loaded {
    /// The policy.
    pub policy: Policy,
    /// Its files' texts, to notice changes.
    pub snapshot: Snapshot,
    /// Static variables.
    pub vars: Vars,
    /// `agent:` settings.
    pub settings: AgentSettings,
    /// `outputs:` settings.
    pub outputs: Vec<outputs::OutputSettings>,
    /// The elections some input refers to.
    pub elections: Vec<leasehold_policy::elections::ElectionSpec>,
    /// Its secrets (as written and as resolved), kept out of messages.
    pub redactor: Redactor,
    /// `providers.kubernetes`, when given and enabled.
    pub kubernetes: Option<kubernetes::settings::ProviderSettings>,
}

/// The static provider values, read once.
pub struct Statics {
    /// `env`.
    pub env: Value,
    /// `host`.
    pub host: Value,
    /// `agent`.
    pub agent: Value,
    /// The agent's fields on events.
    pub fields: AgentFields,
    /// Run with Elastic Agent's defaults where they differ from
    /// leasehold's (started by Elastic's command line): the Lease of the
    /// single election is `elastic-agent-cluster-leader`.
    pub elastic_defaults: bool,
}

/// Reads and checks a policy: every problem with file:line:column, the
/// same as `check` says, plus what only the agent can find (settings that
/// do not resolve). No message quotes a secret of the file: values of
/// secret keys and URL userinfo are redacted.
pub fn load(files: &PolicyFiles, statics: &Statics) -> Result<Loaded, Vec<String>> {
    let snapshot = files.read().map_err(|e| vec![e])?;
    let mut redactor = Redactor::new();
    for text in snapshot.texts() {
        redactor.add_text(text);
    }
    let redact_all = |errors: Vec<String>, r: &Redactor| -> Vec<String> {
        errors.iter().map(|e| r.redact(e)).collect()
    };
    let (policy, file_warnings) = snapshot
        .parse(&files.policy.display().to_string())
        .map_err(|e| redact_all(vec![e.to_string()], &redactor))?;
    for w in file_warnings {
        tracing::warn!("{}", redactor.redact(&w));
    }
    redactor.add_value("", &policy.root.to_value());
    let diags: Vec<_> = policy_check::diagnostics(&policy, None)
        .into_iter()
        .map(|d| policy.relocate_diagnostic(d))
        .collect();
    let errors: Vec<String> = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(ToString::to_string)
        .collect();
    for d in diags.iter().filter(|d| d.severity == Severity::Warning) {
        tracing::warn!("{}", redactor.redact(&d.to_string()));
    }
    if !errors.is_empty() {
        return Err(redact_all(errors, &redactor));
    }
    let file = policy.file.clone();
    let vars = providers::static_vars(&policy, &statics.env, &statics.host, &statics.agent);
    let mut errors = Vec::new();
    // Resolved sections may hold secrets taken from variables (`${env.X}`).
    let mut resolved = |name: &str| {
        let v = config::section(&policy, name, &vars);
        if let Ok(v) = &v {
            redactor.add_value(name, v);
        }
        v
    };
    let agent_section = resolved("agent");
    let outputs_section = resolved("outputs");
    let settings = agent_section
        .map_err(|e| vec![e])
        .and_then(|v| AgentSettings::from_section(&v))
        .map_err(|e| errors.extend(e.into_iter().map(|m| format!("{file}: {m}"))))
        .ok();
    let outs = outputs_section
        .map_err(|e| vec![e])
        .and_then(|v| match v {
            Value::Null => Err(vec![
                "no `outputs:` section: define at least `outputs.default`".to_string(),
            ]),
            v => outputs::parse_outputs(&v).map_err(|errs| {
                errs.into_iter()
                    .map(|e| format!("`{}`: {}", e.path, e.message))
                    .collect()
            }),
        })
        .map_err(|e| errors.extend(e.into_iter().map(|m| format!("{file}: {m}"))))
        .ok();
    let elections = leasehold_policy::elections::elections(&policy, &vars)
        .map(|specs| {
            if statics.elastic_defaults {
                elastic_defaults::lease(&policy, specs)
            } else {
                specs
            }
        })
        .map_err(|e| errors.push(e.to_string()))
        .ok();
    let kube = kubernetes_settings(&policy, &vars)
        .map_err(|e| errors.extend(e.into_iter().map(|m| format!("{file}: {m}"))))
        .ok();
    let mut policy = policy;
    if let (Some(s), Some(o)) = (settings.as_ref().and_then(|s| s.shipping.as_ref()), &outs) {
        let names: Vec<String> = o.iter().map(|o| o.name.clone()).collect();
        if let Err(e) = self_monitoring::add_inputs(&mut policy, s, &names, &statics.fields.id) {
            errors.push(format!("{file}: {e}"));
        }
    }
    match (settings, outs, elections, kube) {
        (Some(settings), Some(outputs), Some(elections), Some(kubernetes)) if errors.is_empty() => {
            Ok(Loaded {
                kubernetes,
                policy,
                snapshot,
                vars,
                settings,
                outputs,
                elections,
                redactor,
            })
        }
        _ => Err(redact_all(errors, &redactor)),
    }
}

/// Reads `providers.kubernetes` (resolved with the static variables);
/// warnings about keys without effect are logged.
fn kubernetes_settings(
    policy: &Policy,
    vars: &Vars,
) -> Result<Option<kubernetes::settings::ProviderSettings>, Vec<String>> {
    let Some(node) = policy
        .section("providers")
        .and_then(|p| p.get(kubernetes::PROVIDER))
    else {
        return Ok(None);
    };
    let path = format!("providers.{}", kubernetes::PROVIDER);
    let v = config::resolve(&node.to_value(), vars, &policy.default_provider(), &path)
        .map_err(|e| vec![e])?;
    let parsed = kubernetes::settings::parse(&v)?;
    for w in &parsed.warnings {
        tracing::warn!("{w}");
    }
    Ok(parsed.settings)
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

    /// Runs until SIGTERM or SIGINT, then shuts down; returns the exit code.
    pub async fn run(mut self) -> i32 {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) else {
            tracing::error!("cannot install signal handlers");
            return 1;
        };
        let specs = self.loaded.elections.clone();
        self.start_elections(specs).await;
        self.start_provider().await;
        self.reconcile();
        self.board.set_ready(true, "running");
        let mut poll = tokio::time::interval(POLICY_POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); break; }
                _ = int.recv() => { tracing::info!("SIGINT: shutting down"); break; }
                _ = hup.recv() => self.reload("SIGHUP").await,
                _ = poll.tick() => {
                    if self.policy_changed() {
                        self.reload("policy file changed").await;
                    }
                    self.prune_stopping();
                }
                Some(ev) = self.events_rx.recv() => {
                    self.on_election_event(ev);
                    while let Ok(ev) = self.events_rx.try_recv() {
                        self.on_election_event(ev);
                    }
                    self.update_deferrals();
                    self.reconcile();
                }
                Some(f) = self.failures_rx.recv() => self.on_gated_failure(f),
                Some(changes) = next_changes(&mut self.provider) => {
                    self.on_provider_changes(changes);
                }
                Some(key) = self.retry_rx.recv() => {
                    self.connect_election(key).await;
                }
                Some(key) = self.balancers.release_rx.recv() => self.hand_over_shard(key),
            }
        }
        self.shutdown().await;
        0
    }

    /// Starts, restarts or stops the `kubernetes` provider to match the
    /// policy. Without a connection it is reported and retried at the next
    /// reload; inputs reading its variables wait.
    async fn start_provider(&mut self) {
        let want = self.loaded.kubernetes.clone();
        if self.provider.as_ref().map(|(s, _)| s) == want.as_ref() {
            return;
        }
        if let Some((_, p)) = self.provider.take() {
            p.shutdown().await;
        }
        let Some(settings) = want else {
            self.board.set_problem(kubernetes::PROVIDER_PROBLEM, None);
            return;
        };
        let kubeconfig = settings
            .kube_config
            .as_ref()
            .map(PathBuf::from)
            .or_else(|| self.opts.kubeconfig.clone());
        match kubeconn::connect(kubeconfig.as_deref()).await {
            Ok(conn) => {
                let p = kubernetes::Provider::start(
                    settings.clone(),
                    conn.client,
                    self.statics.fields.node.clone(),
                    self.board.clone(),
                );
                self.provider = Some((settings, p));
            }
            Err(e) => {
                let why = format!("kubernetes provider cannot connect: {e}");
                tracing::error!("{why}");
                self.board
                    .set_problem(kubernetes::PROVIDER_PROBLEM, Some((why, false)));
            }
        }
    }

    fn policy_changed(&self) -> bool {
        match self.opts.files.read() {
            Ok(snapshot) => snapshot != self.loaded.snapshot,
            // A missing file is reported at reload; the running policy stays.
            Err(_) => false,
        }
    }

    async fn reload(&mut self, why: &str) {
        let new = match load(&self.opts.files, &self.statics) {
            Ok(l) => l,
            Err(errors) => {
                // `load` redacted the rejected file's secrets; these are
                // of the policy in force.
                let errors: Vec<String> = errors
                    .iter()
                    .map(|e| self.loaded.redactor.redact(e))
                    .collect();
                // Status and metrics first: whoever sees the log line finds them updated.
                self.board.policy_rejected(errors.join("; "));
                self.metrics.policy_reload(false);
                for e in &errors {
                    tracing::error!("policy reload ({why}) rejected: {e}");
                }
                // Do not report the same bad file every second.
                if let Ok(snapshot) = self.opts.files.read() {
                    self.loaded.snapshot = snapshot;
                }
                return;
            }
        };
        tracing::info!("policy reloaded ({why})");
        let mut waiting = Vec::new();
        if new.outputs != self.loaded.outputs {
            let names = |o: &[outputs::OutputSettings]| -> Vec<String> {
                o.iter().map(|x| x.name.clone()).collect()
            };
            let (old, now) = (names(&self.loaded.outputs), names(&new.outputs));
            let mut what = Vec::new();
            let added: Vec<&String> = now.iter().filter(|n| !old.contains(n)).collect();
            let removed: Vec<&String> = old.iter().filter(|n| !now.contains(n)).collect();
            let changed: Vec<&String> = new
                .outputs
                .iter()
                .filter(|o| {
                    self.loaded
                        .outputs
                        .iter()
                        .any(|r| r.name == o.name && r != *o)
                })
                .map(|o| &o.name)
                .collect();
            for (label, list) in [("added", added), ("removed", removed), ("changed", changed)] {
                if !list.is_empty() {
                    let quoted: Vec<String> = list.iter().map(|n| format!("`{n}`")).collect();
                    what.push(format!("{label} {}", quoted.join(", ")));
                }
            }
            waiting.push(format!("`outputs:` changed ({})", what.join("; ")));
        }
        if new.settings != self.loaded.settings {
            waiting.push("`agent:` settings changed".to_string());
        }
        self.pending_outputs = (new.outputs != self.loaded.outputs).then(|| new.outputs.clone());
        let restart = (!waiting.is_empty()).then(|| {
            let text = format!(
                "{}: the running ones stay until the agent restarts; restart it (delete the pod) to apply them",
                waiting.join("; ")
            );
            tracing::warn!("{text}");
            (text, false)
        });
        self.board.set_problem(RESTART_PROBLEM, restart);
        let old_specs: Vec<_> = self.elections.iter().map(|e| e.spec.clone()).collect();
        let (outputs, settings) = (self.loaded.outputs.clone(), self.loaded.settings.clone());
        // The outputs keep running with the old settings: keep their
        // secrets redacted too.
        let mut redactor = self.loaded.redactor.clone();
        redactor.extend(&new.redactor);
        self.loaded = Loaded {
            outputs,
            settings,
            redactor,
            ..new
        };
        if old_specs != self.loaded.elections {
            let keep: Vec<_> = self.loaded.elections.clone();
            let (stay, go): (Vec<Election>, Vec<Election>) = std::mem::take(&mut self.elections)
                .into_iter()
                .partition(|e| keep.contains(&e.spec));
            self.elections = stay;
            for e in go {
                self.board.remove_election(&e.spec.label());
                if let Some(h) = e.handle {
                    tracing::info!(lease = %e.spec.lease, "election removed from the policy: stepping down");
                    h.shutdown().await;
                }
            }
            let new_specs: Vec<_> = keep
                .into_iter()
                .filter(|s| !self.elections.iter().any(|e| &e.spec == s))
                .collect();
            self.start_elections(new_specs).await;
        }
        self.start_provider().await;
        self.board
            .policy_loaded(self.opts.files.policy.display().to_string());
        self.metrics.policy_reload(true);
        self.reconcile();
    }

    async fn start_elections(&mut self, specs: Vec<leasehold_policy::elections::ElectionSpec>) {
        let total = self.elections.len() + specs.len();
        let ranks = elections::ranks(total, self.rank_seed);
        for spec in specs {
            let key = self.next_key;
            self.next_key += 1;
            let namespace = spec
                .namespace
                .clone()
                .unwrap_or_else(kubeconn::default_namespace);
            self.elections.push(Election {
                key,
                spec,
                namespace,
                handle: None,
                leading: None,
                holder: None,
                state: ElectionState::Unknown,
                rank: 0,
                deferred: Duration::ZERO,
            });
            self.connect_election(key).await;
        }
        for (e, r) in self.elections.iter_mut().zip(ranks) {
            e.rank = r;
        }
        self.update_deferrals();
        self.publish_elections();
    }

    async fn connect_election(&mut self, key: usize) {
        let Some(i) = self.elections.iter().position(|e| e.key == key) else {
            return;
        };
        if self.elections[i].handle.is_some() {
            return;
        }
        let kc = self.elections[i].spec.kube_config.clone();
        if !self.connections.contains_key(&kc) {
            let path = kc
                .as_deref()
                .map(Path::new)
                .or(self.opts.kubeconfig.as_deref());
            match kubeconn::connect(path).await {
                Ok(c) => {
                    self.connections.insert(kc.clone(), c);
                }
                Err(e) => {
                    tracing::error!(lease = %self.elections[i].spec.lease, "cannot connect to the API server: {e}; retrying in {CONNECT_RETRY:?} (node-local inputs keep running)");
                    let tx = self.retry_tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(CONNECT_RETRY).await;
                        let _ = tx.send(key);
                    });
                    return;
                }
            }
        }
        let Some(conn) = self.connections.get(&kc) else {
            return;
        };
        let e = &self.elections[i];
        let identity = e
            .spec
            .identity
            .clone()
            .unwrap_or_else(|| self.statics.fields.name.clone());
        let metrics: Arc<dyn Metrics> = self.election_metrics.clone();
        let fleet = self.opts.fleet.as_deref();
        match elections::start(e, conn, &identity, fleet, self.events_tx.clone(), metrics) {
            Ok(h) => {
                if let Some(m) = &self.monitor {
                    let health = h.health();
                    m.add_liveness_check(
                        format!("election {}", e.spec.label()),
                        Arc::new(move || health.check()),
                    );
                }
                tracing::info!(lease = %e.spec.lease, namespace = %e.namespace, identity = %identity, "joined election {}", e.spec.label());
                self.board
                    .set_problem(&format!("election {}", e.spec.label()), None);
                self.balancers.ensure(&self.elections, e, conn, &identity);
                self.elections[i].handle = Some(h);
            }
            Err(err) => {
                // Not a candidate: tried again, and not ready meanwhile
                // (this agent can never run the election's inputs).
                tracing::error!(lease = %e.spec.lease, "cannot start election {}: {err}; retrying in {CONNECT_RETRY:?}", e.spec.label());
                self.board.set_problem(
                    &format!("election {}", e.spec.label()),
                    Some((format!("cannot start: {err}"), true)),
                );
                let tx = self.retry_tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(CONNECT_RETRY).await;
                    let _ = tx.send(key);
                });
            }
        }
    }

    fn on_election_event(&mut self, ev: ElectionEvent) {
        match ev {
            ElectionEvent::Leading {
                key,
                term,
                token,
                tracker,
            } => {
                if let Some(e) = self.elections.iter_mut().find(|e| e.key == key)
                    && !token.is_cancelled()
                {
                    tracing::info!(lease = %e.spec.lease, term, "leading election {}", e.spec.label());
                    e.leading = Some(elections::LeaderTerm {
                        term,
                        token,
                        tracker,
                    });
                    e.state = ElectionState::Leading;
                    e.holder = Some(
                        e.spec
                            .identity
                            .clone()
                            .unwrap_or_else(|| self.statics.fields.name.clone()),
                    );
                }
            }
            ElectionEvent::SteppedDown { key, term } => {
                if let Some(e) = self.elections.iter_mut().find(|e| e.key == key)
                    && e.leading.as_ref().is_some_and(|t| t.term == term)
                {
                    tracing::info!(lease = %e.spec.lease, term, "stepped down in election {}", e.spec.label());
                    e.leading = None;
                    if e.state == ElectionState::Leading {
                        e.state = ElectionState::Unknown;
                    }
                }
            }
            ElectionEvent::State { key, state } => {
                if let Some(e) = self.elections.iter_mut().find(|e| e.key == key) {
                    match state {
                        Leadership::Following { holder } => {
                            e.state = ElectionState::Following;
                            e.holder = holder;
                        }
                        Leadership::Leading { .. } => e.state = ElectionState::Leading,
                        Leadership::Stopped => e.state = ElectionState::Stopped,
                        _ => e.state = ElectionState::Unknown,
                    }
                    // A term token cancelled behind our back (shutdown) ends it too.
                    if e.leading.as_ref().is_some_and(|t| t.token.is_cancelled()) {
                        e.leading = None;
                    }
                }
            }
        }
        self.publish_elections();
    }

    fn update_deferrals(&mut self) {
        let delays = elections::deferrals(&self.elections);
        for (e, d) in self.elections.iter_mut().zip(delays) {
            if e.deferred != d
                && let Some(h) = &e.handle
            {
                h.defer_acquisition(d);
                e.deferred = d;
            }
        }
    }

    fn on_gated_failure(&mut self, f: GatedFailure) {
        let Some(e) = self.elections.iter().find(|e| e.key == f.election) else {
            return;
        };
        let Some(t) = &e.leading else { return };
        if t.term != f.term || f.failures < e.spec.handover_after_failures {
            return;
        }
        let hold_back = e.timings().lease_duration() * 2;
        tracing::warn!(
            lease = %e.spec.lease,
            input = %f.id,
            "input failed {} times in a row while leading; handing the lease over and holding back for {hold_back:?} so a healthy agent takes the work (this agent stays a candidate)",
            f.failures
        );
        if let Some(h) = &e.handle {
            h.resigner().resign(hold_back);
        }
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

    fn start_input(&mut self, instance: Instance, spec: InputSpec, fields: Option<&Value>) {
        let keys = spec.input.state_keys();
        if let Some(held) = self.held_by_draining(&keys) {
            // Started by the reconcile after that drain ended.
            tracing::debug!(input = %instance.id, registry = %held, "input waits for its predecessor to read its files to their ends");
            return;
        }
        let Some(sender) = self.outputs.sender(&spec.use_output) else {
            return;
        };
        let term = instance.binding.and_then(|b| {
            self.elections
                .iter()
                .find(|e| e.key == b.election)
                .and_then(|e| e.leading.clone().map(|t| (e, t)))
        });
        let checkpoints = term
            .as_ref()
            .and_then(|(e, _)| e.handle.as_ref().map(|h| h.checkpoints()));
        let (cancel, stamp, grace, tracker, gated) = match &term {
            Some((e, t)) => (
                t.token.child_token(),
                Some(TermStamp {
                    lease: e.spec.lease.clone(),
                    term: t.term,
                    token: t.token.clone(),
                    tracker: t.tracker.clone(),
                }),
                e.stop_grace(),
                Some(t.tracker.clone()),
                Some((e.key, t.term, self.failures_tx.clone())),
            ),
            None => (
                CancellationToken::new(),
                None,
                inputs::exec::DEFAULT_STOP_GRACE,
                None,
                None,
            ),
        };
        let abandon = CancellationToken::new();
        let sink = EventSink::new(
            &instance.id,
            &spec.type_name,
            &self.statics.fields,
            &spec.data_stream,
            stamp,
            abandon.clone(),
            Arc::new(sender.for_input(&instance.id)),
            self.metrics.input_counters(&instance.id),
        );
        let sink = match fields {
            Some(f) => sink.with_fields(f),
            None => sink,
        };
        let sink = match &spec.processors {
            Some(p) => sink.with_processors(Arc::clone(p), &spec.data_stream.dataset),
            None => sink,
        };
        let finish = CancellationToken::new();
        let sup = Supervised {
            id: instance.id.clone(),
            spec: spec.clone(),
            sink,
            cancel: cancel.clone(),
            finish: finish.clone(),
            redactor: self.loaded.redactor.clone(),
            stop_grace: grace,
            cluster: inputs::ClusterAccess {
                kubeconfig: self.opts.kubeconfig.clone(),
                checkpoints,
            },
            registries: Arc::clone(&self.registries),
            gated,
            board: self.board.clone(),
            metrics: self.metrics.clone(),
        };
        let join = match tracker {
            Some(t) => t.spawn(supervisor::supervise(sup)),
            None => tokio::spawn(supervisor::supervise(sup)),
        };
        tracing::info!(input = %instance.id, r#type = %spec.type_name, gated = instance.binding.is_some(), "input started");
        self.board
            .input_started(instance.id.clone(), spec.type_name.clone());
        self.running.insert(
            instance.id.clone(),
            Running {
                instance,
                spec,
                dynamic: fields.is_some(),
                keys,
                cancel,
                finish,
                abandon,
                join,
                grace,
            },
        );
    }

    fn stop_input(&mut self, id: &str) {
        self.stop(id, StopHow::Now, false);
    }

    /// Stops `id`; a dynamic input stopped `for_good` has its metrics and
    /// registries forgotten once it ended (its container is gone).
    fn stop(&mut self, id: &str, how: StopHow, for_good: bool) {
        if let Some(r) = self.running.remove(id) {
            let now = Instant::now();
            let draining = if how == StopHow::Drain {
                r.finish.cancel();
                tracing::info!(input = %id, r#type = %r.spec.type_name, "input stopping: reading its files to their ends first");
                Some((r.keys.clone(), now + self.drain_limit()))
            } else {
                r.cancel.cancel();
                tracing::info!(input = %id, r#type = %r.spec.type_name, "input stopped");
                None
            };
            self.board.input_stopped(id);
            let cut_at = draining.as_ref().map_or(now, |(_, at)| *at);
            // A stopping input may wait for queue room only a while.
            self.stopping.push(Stopping {
                join: r.join,
                cancel: r.cancel,
                abandon: r.abandon,
                until: cut_at + r.grace * 2,
                forget: (for_good && r.dynamic).then(|| id.to_string()),
                draining,
            });
        }
    }

    /// A registry of `keys` that a draining input still holds.
    fn held_by_draining(&self, keys: &[String]) -> Option<String> {
        self.stopping
            .iter()
            .filter(|s| !s.join.is_finished())
            .filter_map(|s| s.draining.as_ref())
            .flat_map(|(held, _)| held.iter())
            .find(|h| keys.contains(h))
            .cloned()
    }

    fn prune_stopping(&mut self) {
        let now = Instant::now();
        let mut ended = Vec::new();
        let mut drained = false;
        self.stopping.retain_mut(|s| {
            if let Some((_, cut_at)) = &s.draining
                && now >= *cut_at
            {
                s.cancel.cancel();
            }
            if now >= s.until {
                s.abandon.cancel();
            }
            if s.join.is_finished() {
                ended.extend(s.forget.take());
                drained |= s.draining.is_some();
                false
            } else {
                true
            }
        });
        if drained {
            // Inputs waiting for those registries start now, before any
            // is forgotten.
            self.reconcile();
        }
        for id in ended {
            // Started again meanwhile (its pod came back): keep.
            if self.running.contains_key(&id) {
                continue;
            }
            self.metrics.forget_input(&id);
            self.outputs.forget_input(&id);
            self.registries.forget_input(&id);
        }
    }

    fn publish_elections(&mut self) {
        for e in &self.elections {
            self.board.set_election(e.spec.label(), e.status());
        }
        self.balancers.publish(&self.elections);
    }

    /// Hands shard `key` over (its balancer found it led by this agent while
    /// another candidate leads two fewer): steps down, releases the Lease
    /// once the shard's work stopped, and holds back a third of a lease
    /// duration so that the other candidate takes it.
    fn hand_over_shard(&mut self, key: usize) {
        let Some(e) = self.elections.iter().find(|e| e.key == key) else {
            return;
        };
        if e.leading.is_none() {
            return;
        }
        if let Some(h) = &e.handle {
            tracing::info!(lease = %e.spec.lease, "handing shard {} over", e.spec.label());
            h.resigner().resign(e.timings().lease_duration() / 3);
        }
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

    /// Stops inputs (letting them ship what they already produced),
    /// flushes outputs, then releases the leases: all within
    /// `agent.shutdown_timeout`. The outputs drain while this agent still
    /// leads, so the checkpoints its release writes cover what they
    /// delivered; what they could not deliver is read again by the next
    /// leader.
    async fn shutdown(mut self) {
        let timeout = self.loaded.settings.shutdown_timeout;
        let deadline = Instant::now() + timeout;
        let reserve = (timeout / 4).min(Duration::from_secs(5));
        self.board.set_ready(false, "shutting down");
        if let Some((_, p)) = self.provider.take() {
            p.shutdown().await;
        }
        let ids: Vec<String> = self.running.keys().cloned().collect();
        for id in ids {
            self.stop_input(&id);
        }
        let inputs_until = deadline - reserve;
        for s in &self.stopping {
            // Shutting down: no more reading to the end.
            s.cancel.cancel();
        }
        for Stopping { join, abandon, .. } in std::mem::take(&mut self.stopping) {
            let mut join = join;
            tokio::select! {
                _ = &mut join => {}
                () = tokio::time::sleep_until(inputs_until) => {
                    abandon.cancel();
                    let _ = tokio::time::timeout(Duration::from_millis(200), &mut join).await;
                    join.abort();
                }
            }
        }
        let outputs_until = deadline - reserve / 2;
        let on_disk: Vec<String> = self
            .outputs
            .names()
            .into_iter()
            .filter(|n| self.outputs.has_disk_queue(n))
            .collect();
        let left = self.outputs.shutdown(outputs_until).await;
        self.balancers.shutdown(deadline).await;
        let handles: Vec<_> = self
            .elections
            .iter_mut()
            .filter_map(|e| e.handle.take())
            .collect();
        let all = futures_util::future::join_all(handles.into_iter().map(|h| h.shutdown()));
        if tokio::time::timeout_at(deadline, all).await.is_err() {
            tracing::warn!(
                "leases not released within the shutdown timeout; they expire on their own"
            );
        }
        // Everything the outputs delivered is acknowledged now: record it.
        self.registry_flush.abort();
        let registries = Arc::clone(&self.registries);
        if let Ok(Some(e)) = tokio::task::spawn_blocking(move || registries.flush_all()).await {
            tracing::error!("at shutdown: {e}");
        }
        for (name, n) in left {
            if n > 0 && on_disk.contains(&name) {
                tracing::warn!(output = %name, "{n} event(s) not written before the shutdown timeout stay in the disk queue; they are sent after the next start");
            } else if n > 0 {
                tracing::error!(output = %name, "{n} event(s) could not be written before the shutdown timeout");
            }
        }
        tracing::info!("stopped");
    }
}
