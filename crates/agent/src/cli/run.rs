//! `leasehold run -c POLICY`: the agent. Runs the policy's inputs, the
//! leader-gated ones only while this agent leads their election, writes
//! their events to the outputs, serves monitoring, reloads on SIGHUP or
//! when the policy file changes, and stops cleanly on SIGTERM/SIGINT.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::kubeconn::default_identity;
use crate::runtime::{self, Agent, RunOptions, Statics, providers};

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Arguments of `leasehold run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The policy file (YAML or JSON).
    #[arg(
        short = 'c',
        long = "config",
        value_name = "POLICY",
        default_value = "leasehold.yml"
    )]
    pub config: PathBuf,
    /// A directory of files of inputs (Elastic Agent's `inputs.d`): the
    /// `inputs:` of each `*.yml` in it are added to the policy's, and a
    /// change to any of them reloads the policy like a change to it.
    #[arg(long, value_name = "DIR", env = "LEASEHOLD_INPUTS_DIR")]
    pub inputs_dir: Option<PathBuf>,
    /// Elastic Agent's defaults where they differ from leasehold's (set by
    /// Elastic's command line): the single election's Lease is
    /// `elastic-agent-cluster-leader` unless the policy names one.
    #[arg(long)]
    pub elastic_defaults: bool,
    /// Serve /livez, /readyz, /metrics and /status on HOST:PORT (overrides
    /// `agent.monitoring.http`).
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<String>,
    /// Kubeconfig file [default: the provider's `kube_config`, KUBECONFIG,
    /// ~/.kube/config, else in-cluster].
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Where the agent keeps state across restarts (disk queues of outputs
    /// with `queue.disk` and no `queue.disk.path`).
    #[arg(
        long = "path.data",
        value_name = "DIR",
        env = "LEASEHOLD_PATH_DATA",
        default_value = "/var/lib/leasehold"
    )]
    pub data_path: PathBuf,
    /// The fleet these agents form (one DaemonSet), written as a label on
    /// every Lease they hold: an agent then neither takes a Lease nor
    /// runs its gated inputs while another Lease of the same fleet and
    /// election is held, so renaming `leader_lease` (or its namespace) in
    /// a rolling update never runs a gated input twice. Unset: no fence.
    #[arg(long, value_name = "NAME", env = "LEASEHOLD_FLEET")]
    pub fleet: Option<String>,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level or `tracing` filter [default: RUST_LOG, else info].
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
}

/// Runs the agent; returns the exit code (0 after a clean stop, 2 for a
/// policy or usage error at start, 1 when it cannot run at all).
pub fn run(args: &RunArgs) -> i32 {
    let http = match args.http.as_deref().map(parse_http) {
        None => None,
        Some(Ok(a)) => Some(a),
        Some(Err(e)) => {
            eprintln!("leasehold run: --http: {e}");
            return 2;
        }
    };
    if let Some(level) = &args.log_level
        && let Err(e) = super::elect::logs::parse_filter(level)
    {
        eprintln!("leasehold run: --log-level {level:?}: {e}");
        return 2;
    }
    let logs = match super::elect::logs::init_with(
        args.log_format == LogFormat::Json,
        args.log_level.as_deref(),
    ) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("leasehold run: cannot start logging: {e}");
            return 1;
        }
    };
    let identity = default_identity().unwrap_or_else(|| "leasehold".into());
    let id = providers::random_id();
    let statics = Statics {
        env: providers::env(),
        host: providers::host(),
        agent: providers::agent(&id, &identity),
        fields: crate::pipeline::publisher::AgentFields {
            id,
            name: identity,
            version: env!("CARGO_PKG_VERSION").into(),
            node: crate::pipeline::publisher::AgentFields::node_name(),
        },
        elastic_defaults: args.elastic_defaults,
    };
    let files = runtime::policy_files::PolicyFiles {
        policy: args.config.clone(),
        inputs_dir: args.inputs_dir.clone(),
    };
    let loaded = match runtime::load(&files, &statics) {
        Ok(l) => l,
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!(
                "leasehold run: {}: {} error(s); not started",
                args.config.display(),
                errors.len()
            );
            return 2;
        }
    };
    // The identity of the first election names the agent (`agent.name`).
    let mut statics = statics;
    if let Some(identity) = loaded.elections.iter().find_map(|e| e.identity.clone()) {
        statics.agent = providers::agent(&statics.fields.id, &identity);
        statics.fields.name = identity;
    }
    let fleet = match super::fleet::fleet_arg(args.fleet.as_deref()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let opts = RunOptions {
        files,
        http,
        kubeconfig: args.kubeconfig.clone(),
        data_path: args.data_path.clone(),
        fleet,
    };
    let code = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => {
            let code = rt.block_on(async move {
                match Agent::start(opts, statics, loaded).await {
                    Ok(agent) => agent.run().await,
                    Err(e) => {
                        tracing::error!("{e}");
                        1
                    }
                }
            });
            rt.shutdown_timeout(Duration::from_millis(200));
            code
        }
        Err(e) => {
            eprintln!("leasehold run: cannot start the runtime: {e}");
            1
        }
    };
    logs.flush(Instant::now() + Duration::from_secs(1));
    code
}

fn parse_http(s: &str) -> Result<std::net::SocketAddr, String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} is not HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{port:?} is not a port number"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    runtime::config::listen_addr(if host.is_empty() { "0.0.0.0" } else { host }, port)
}
