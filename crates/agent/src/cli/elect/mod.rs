//! `leasehold elect`: join a Lease election, print one JSON line per state
//! change on stdout ([`output`]), and optionally run a command only while
//! leading ([`supervise`], [`keeper`]).
//!
//! Nothing that elect writes can delay a step-down: JSON lines and logs go
//! through writer threads whose senders never block ([`pump`], [`logs`]),
//! and the command's stop runs on a thread of its own.

mod keeper;
pub(crate) mod logs;
mod output;
mod procs;
pub(crate) mod pump;
mod supervise;
mod wait;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use leasehold_election::{Elector, StateChange, Timings, names};

use crate::kubeconn::{connect, default_identity, default_namespace};

pub use keeper::{KeepArgs, run as keep};

/// Flags of `leasehold elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// Name of the Lease.
    #[arg(long)]
    pub lease: String,
    /// Namespace of the Lease [default: service-account namespace, then
    /// POD_NAMESPACE, then `default`].
    #[arg(long)]
    pub namespace: Option<String>,
    /// Identity to write as holder [default: POD_NAME, then the hostname].
    #[arg(long)]
    pub identity: Option<String>,
    /// Kubeconfig file [default: KUBECONFIG, else ~/.kube/config, else in-cluster].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How long others wait before taking over a silent lease.
    #[arg(long, default_value = "15s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renew.
    #[arg(long, default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub renew_deadline: Duration,
    /// Pace of renewals and of polling when watching is not possible.
    #[arg(long, default_value = "2s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub retry_period: Duration,
    /// Do not release the lease on shutdown.
    #[arg(long)]
    pub no_release: bool,
    /// Label the Lease with this fleet (and `leasehold.dev/election:
    /// default`) and keep out while another Lease with the same labels is
    /// held, so a renamed `--lease` never runs the command twice during a
    /// rollout. Needs list and watch on leases. Unset: no fence.
    #[arg(long, value_name = "NAME", env = "LEASEHOLD_FLEET")]
    pub fleet: Option<String>,
    /// Failures in a row of the command while leading (it is restarted
    /// with backoff in between) before the lease is handed over and left
    /// to other candidates for twice the lease duration; 0 never hands it
    /// over.
    #[arg(long, default_value_t = 3)]
    pub command_failures: u32,
    /// Command to run only while leading.
    #[arg(last = true)]
    pub command: Vec<String>,
}

pub use crate::units::parse_duration_text as parse_duration;

/// How long exit waits for the writer threads: a stalled stdout or stderr
/// must not hang exit forever.
const EXIT_FLUSH: Duration = Duration::from_secs(1);

/// Runs `leasehold elect`; returns the exit code.
pub fn run(args: &ElectArgs) -> i32 {
    let timings = match Timings::new(args.lease_duration, args.renew_deadline, args.retry_period)
        .and_then(|t| t.check_for_lease().map(|()| t))
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("leasehold elect: invalid timings: {e}");
            return 2;
        }
    };
    let Some(identity) = args.identity.clone().or_else(default_identity) else {
        eprintln!("leasehold elect: no identity: pass --identity or set POD_NAME");
        return 2;
    };
    if identity.is_empty() {
        eprintln!("leasehold elect: --identity must not be empty");
        return 2;
    }
    let namespace = args.namespace.clone().unwrap_or_else(default_namespace);
    if let Err(e) = names::validate_lease_name(&args.lease) {
        eprintln!("leasehold elect: --lease: {e}");
        return 2;
    }
    if let Err(e) = names::validate_namespace(&namespace) {
        eprintln!("leasehold elect: --namespace: {e}");
        return 2;
    }
    let fleet = match super::fleet::fleet_arg(args.fleet.as_deref()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("leasehold elect: {e}");
            return 2;
        }
    };
    // Orphans of a command tree whose keeper died come to elect, not init.
    if !args.command.is_empty()
        && let Err(e) = procs::become_subreaper()
    {
        eprintln!("leasehold elect: cannot become a child subreaper: {e}");
        return 1;
    }
    // Up to here errors are written directly: nothing runs yet that a
    // blocked stderr could delay. From here on, only the pumps write.
    let (lines, logs) = match (
        pump::Pump::unbounded(libc::STDOUT_FILENO, "elect-stdout"),
        logs::init(),
    ) {
        (Ok(lines), Ok(logs)) => (Arc::new(lines), logs),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("leasehold elect: cannot start output threads: {e}");
            return 1;
        }
    };
    let code = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => {
            let code = rt.block_on(elect(
                args, timings, identity, namespace, fleet, &lines, &logs,
            ));
            // Exit promptly once `stopped` is out: no waiting on tasks or
            // blocking threads that are still winding down.
            rt.shutdown_timeout(Duration::from_millis(50));
            code
        }
        Err(e) => {
            tracing::error!("cannot start runtime: {e}");
            1
        }
    };
    let deadline = Instant::now() + EXIT_FLUSH;
    lines.flush(deadline);
    logs.flush(deadline);
    code
}

/// Writes an error for the user through the stderr pump (never blocking).
fn complain(logs: &pump::Pump, text: &str) {
    logs.send(format!("leasehold elect: {text}\n").into_bytes());
}

async fn elect(
    args: &ElectArgs,
    timings: Timings,
    identity: String,
    namespace: String,
    fleet: Option<String>,
    lines: &Arc<pump::Pump>,
    logs: &pump::Pump,
) -> i32 {
    let conn = match connect(args.kubeconfig.as_deref()).await {
        Ok(c) => c,
        Err(e) => {
            complain(logs, &e);
            return 2;
        }
    };
    let (mut term_sig, mut int_sig) = match (
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()),
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            complain(logs, "cannot install signal handlers");
            return 1;
        }
    };
    let reporter = Arc::new(output::Reporter::start(identity.clone(), lines.clone()));
    let hook = reporter.clone();
    let mut builder = Elector::builder(conn.client, namespace, args.lease.clone(), identity)
        .connection_info(conn.server, conn.user)
        .timings(timings)
        .release_on_shutdown(!args.no_release)
        .on_state(move |change: &StateChange| hook.report(&change.state, change.at));
    if let Some(fleet) = fleet {
        builder = builder.fence(leasehold_election::Fence {
            fleet,
            election: "default".into(),
            peers: Vec::new(),
            shards: None,
        });
    }
    let resigner: Arc<std::sync::OnceLock<leasehold_election::Resigner>> = Arc::default();
    if !args.command.is_empty() {
        // SIGKILL well inside lease_duration − renew_deadline; elect itself
        // steps in only if the keeper has not finished a little later.
        let window = timings.lease_duration() - timings.renew_deadline();
        let work = Arc::new(supervise::Work {
            command: args.command.clone(),
            grace: window * 2 / 5,
            hard_stop: window / 2,
            max_failures: args.command_failures,
            hold_back: timings.lease_duration() * 2,
            resigner: resigner.clone(),
        });
        builder = builder.on_leading(move |term, token| supervise::term(work.clone(), term, token));
    }
    let handle = match builder.spawn() {
        Ok(h) => h,
        Err(e) => {
            complain(logs, &e.to_string());
            return 2;
        }
    };
    let _ = resigner.set(handle.resigner());
    tokio::select! {
        _ = term_sig.recv() => {}
        _ = int_sig.recv() => {}
    }
    tracing::info!("signal received: stopping");
    let mut shutdown = std::pin::pin!(handle.shutdown());
    let mut signals = 1;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = term_sig.recv() => signals += 1,
            _ = int_sig.recv() => signals += 1,
        }
        if signals == 2 {
            tracing::warn!(
                "still stopping: waiting for the command's process tree to exit (SIGKILL after its grace) and for the lease to be released; send the signal once more to kill the command and exit at once"
            );
        } else {
            tracing::warn!(
                "third signal: killing the command and exiting without releasing the lease"
            );
            supervise::kill_all_now();
            return 1;
        }
    }
    // The elector reports `stopped` from its own thread; give it a moment
    // so the line carries its instant, then make sure the line is there.
    reporter.finish(Duration::from_millis(200));
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go_durations() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        for bad in ["", "15", "s", "15x", "-1s", "1..2s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(
            parse_duration("-1s")
                .unwrap_err()
                .contains("must not be negative")
        );
    }
}
