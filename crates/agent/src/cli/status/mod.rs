//! `leasehold status`: which agent leads, and is it healthy? Judges a Lease
//! from the API (`--lease`), or reads a running agent's `/status`
//! (`--agent`), and says what looks wrong and what to do about it.
//!
//! Exit codes: 0 nothing wrong, 1 problems found (listed), 2 the question
//! could not be answered (bad arguments, API unreachable or forbidden).

mod agent;
pub mod assess;
pub mod render;

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::kubeobj::Pod;
use clap::{Args, ValueEnum};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use self::assess::{Expect, HolderPod, LeaseFacts, Record};
use crate::kubeconn::{connect, default_namespace};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// `leasehold status`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["lease", "agent"])))]
pub struct StatusArgs {
    /// The Lease of the election to judge.
    #[arg(long, value_name = "NAME")]
    pub lease: Option<String>,
    /// The Lease's namespace [default: the pod's namespace, POD_NAMESPACE, else default].
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Kubeconfig file [default: KUBECONFIG, else ~/.kube/config, else in-cluster].
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The agents' configured `leader_leaseduration`, in seconds: a Lease
    /// recording far more is reported.
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    pub lease_duration: i64,
    /// The DaemonSet whose pods are the candidates: a holder that is not
    /// one of its pods is reported.
    #[arg(long, value_name = "NAME")]
    pub daemonset: Option<String>,
    /// A running agent's monitoring address (`http://HOST:PORT`): report
    /// its `/status` instead of a Lease.
    #[arg(long, value_name = "URL", conflicts_with_all = ["lease", "namespace", "daemonset"])]
    pub agent: Option<String>,
    /// `table` for people, `json` for scripts.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Judge the Lease as of this time (RFC 3339) instead of now, e.g. when
    /// replaying an incident.
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
}

/// Runs the command; returns the exit code.
pub fn run(args: &StatusArgs) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold status: cannot start: {e}");
            return 2;
        }
    };
    let result = rt.block_on(async {
        match &args.agent {
            Some(url) => agent::report(url, args.format).await,
            None => lease_report(args).await,
        }
    });
    match result {
        Ok((text, problems)) => {
            print!("{text}");
            i32::from(problems)
        }
        Err(e) => {
            eprintln!("leasehold status: {e}");
            2
        }
    }
}

/// The Lease's report and whether it found problems.
async fn lease_report(args: &StatusArgs) -> Result<(String, bool), String> {
    let name = args.lease.clone().unwrap_or_default();
    if args.lease_duration < 1 {
        return Err("--lease-duration must be at least 1 second".into());
    }
    let now = match &args.at {
        None => jiff::Timestamp::now(),
        Some(t) => t.parse().map_err(|e| {
            format!("--at {t:?} is not an RFC 3339 time ({e}); e.g. 2026-12-03T10:00:00Z")
        })?,
    };
    let namespace = args.namespace.clone().unwrap_or_else(default_namespace);
    let conn = connect(args.kubeconfig.as_deref()).await?;
    let leases: Api<Lease> = Api::namespaced(conn.client.clone(), &namespace);
    let lease = leases.get_opt(&name).await.map_err(|e| {
        format!(
            "cannot read Lease {namespace}/{name} from {} as {}: {e}; the identity needs `get` on leases.coordination.k8s.io in {namespace}",
            conn.server, conn.user
        )
    })?;
    let record = lease.map(record_of);
    let holder = record
        .as_ref()
        .and_then(|r| r.holder.clone())
        .filter(|h| !h.is_empty());
    let holder_pod = match holder {
        None => HolderPod::NotChecked,
        Some(h) => pod_of(Api::namespaced(conn.client.clone(), &namespace), &h).await,
    };
    let facts = LeaseFacts {
        namespace,
        name,
        record,
        holder_pod,
    };
    let expect = Expect {
        duration_s: args.lease_duration,
        daemonset: args.daemonset.clone(),
    };
    let report = assess::assess(&facts, &expect, now);
    let text = match args.format {
        Format::Table => render::table(&report),
        Format::Json => render::json(&report),
    };
    Ok((text, !report.problems.is_empty()))
}

fn record_of(l: Lease) -> Record {
    let spec = l.spec.unwrap_or_default();
    let checkpoints: BTreeMap<String, String> = l
        .metadata
        .annotations
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(leasehold_election::ANNOTATION_PREFIX)
                .map(|n| (n.to_string(), v))
        })
        .collect();
    Record {
        holder: spec.holder_identity,
        acquired: spec.acquire_time.map(|t| t.0),
        renewed: spec.renew_time.map(|t| t.0),
        duration_s: spec.lease_duration_seconds.map(i64::from),
        transitions: spec.lease_transitions.map(i64::from),
        checkpoints,
    }
}

async fn pod_of(pods: Api<Pod>, name: &str) -> HolderPod {
    match pods.get_opt(name).await {
        Ok(Some(p)) => HolderPod::Present {
            phase: p
                .status
                .and_then(|s| s.phase)
                .unwrap_or_else(|| "Unknown".into()),
            daemonset: p
                .metadata
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .find(|o| o.kind == "DaemonSet")
                .map(|o| o.name),
        },
        Ok(None) => HolderPod::Absent,
        Err(kube::Error::Api(s)) if s.code == 403 => HolderPod::Unknown {
            reason: "not allowed to read pods".into(),
        },
        Err(e) => HolderPod::Unknown {
            reason: e.to_string(),
        },
    }
}
