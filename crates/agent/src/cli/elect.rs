//! `leasehold elect`: join a Lease election, print one JSON line per state
//! change on stdout, and optionally run a command only while leading.
//!
//! Other tools (interop tests, benchmarks) parse the output, so its shape
//! is fixed: `{"ts","identity","state","holder","term"}` per line, with
//! `state` one of `leading`, `following`, `stopped`.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use leasehold_election::core::WallTime;
use leasehold_election::{Elector, Leadership, Term, Timings};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

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
    /// Kubeconfig file [default: KUBECONFIG, in-cluster, ~/.kube/config].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How long others wait before taking over a silent lease.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renew.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// Pace of renewals and of polling when watching is not possible.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// Do not release the lease on shutdown.
    #[arg(long)]
    pub no_release: bool,
    /// Command to run only while leading.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Parses a duration like `15s`, `500ms`, `1m30s` or `1.5s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad =
        || format!("invalid duration {text:?}: use a number with a unit, e.g. 15s, 500ms, 1m30s");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

fn default_identity() -> Option<String> {
    let env = std::env::var("POD_NAME").ok().filter(|s| !s.is_empty());
    env.or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    })
    .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
}

fn default_namespace() -> String {
    const SA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
    std::fs::read_to_string(SA)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "default".into())
}

/// One output line.
fn line(identity: &str, state: &Leadership) -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    let (name, holder, term) = match state {
        Leadership::Leading { term, .. } => {
            ("leading", Some(term.holder.clone()), Some(term.transitions))
        }
        Leadership::Following { holder } => ("following", holder.clone(), None),
        Leadership::Unknown => ("following", None, None),
        Leadership::Stopped => ("stopped", None, None),
    };
    serde_json::json!({
        "ts": WallTime::from_unix_micros(micros).to_micro_time(),
        "identity": identity,
        "state": name,
        "holder": holder,
        "term": term,
    })
    .to_string()
}

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// Runs `leasehold elect`; returns the exit code.
pub fn run(args: &ElectArgs) -> i32 {
    let timings = match Timings::new(args.lease_duration, args.renew_deadline, args.retry_period) {
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
    if identity.is_empty() || args.lease.is_empty() {
        eprintln!("leasehold elect: --lease and --identity must not be empty");
        return 2;
    }
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .try_init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold elect: cannot start runtime: {e}");
            return 1;
        }
    };
    rt.block_on(elect(args, timings, identity))
}

async fn client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| format!("no Kubernetes configuration found: {e}"))?,
    };
    kube::Client::try_from(config).map_err(|e| format!("building client: {e}"))
}

async fn elect(args: &ElectArgs, timings: Timings, identity: String) -> i32 {
    let namespace = args.namespace.clone().unwrap_or_else(default_namespace);
    let client = match client(args.kubeconfig.as_ref()).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("leasehold elect: {e}");
            return 1;
        }
    };
    let (mut term_sig, mut int_sig) = match (
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()),
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            eprintln!("leasehold elect: cannot install signal handlers");
            return 1;
        }
    };
    print(&line(&identity, &Leadership::Unknown));
    let printer_identity = identity.clone();
    let last = Mutex::new(line_key(&Leadership::Unknown));
    let mut builder = Elector::builder(client, namespace, args.lease.clone(), identity)
        .timings(timings)
        .release_on_shutdown(!args.no_release)
        .on_state(move |state| {
            let key = line_key(state);
            let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
            if *last != key {
                *last = key;
                print(&line(&printer_identity, state));
            }
        });
    if !args.command.is_empty() {
        let command = Arc::new(args.command.clone());
        // SIGKILL well inside lease_duration − renew_deadline.
        let grace = (timings.lease_duration() - timings.renew_deadline()) * 2 / 5;
        builder = builder
            .on_leading(move |term, token| run_while_leading(command.clone(), term, token, grace));
    }
    let handle = match builder.spawn() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("leasehold elect: {e}");
            return 2;
        }
    };
    tokio::select! {
        _ = term_sig.recv() => {}
        _ = int_sig.recv() => {}
    }
    tracing::info!("signal received: stopping");
    handle.shutdown().await;
    0
}

/// What a line says, without its timestamp, to print changes only.
fn line_key(state: &Leadership) -> (u8, Option<String>, Option<i32>) {
    match state {
        Leadership::Leading { term, .. } => (0, Some(term.holder.clone()), Some(term.transitions)),
        Leadership::Following { holder } => (1, holder.clone(), None),
        Leadership::Unknown => (1, None, None),
        Leadership::Stopped => (2, None, None),
    }
}

/// Makes the kernel SIGKILL the command when elect dies, even by SIGKILL,
/// so leader-only work can never outlive the elector that gates it. (The
/// signal follows the spawning thread, a runtime worker that lives as long
/// as the runtime.)
fn die_with_parent(elect_pid: u32) -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) and getppid have no memory effects.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // The parent may have died before prctl took effect.
        if u32::try_from(libc::getppid()).ok() != Some(elect_pid) {
            return Err(std::io::Error::other(
                "elect exited before the command started",
            ));
        }
    }
    Ok(())
}

/// Runs the command for one term: started at step-up, SIGTERM at step-down,
/// SIGKILL after `grace`.
async fn run_while_leading(
    command: Arc<Vec<String>>,
    term: Term,
    token: CancellationToken,
    grace: Duration,
) {
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .env("LEASEHOLD_TERM", term.transitions.to_string())
        // stdout carries only our JSON lines, which tools parse; the
        // command's own output goes to stderr beside our logs.
        .stdout(std::io::stderr())
        .kill_on_drop(true);
    let elect_pid = std::process::id();
    // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and
    // exec.
    unsafe {
        cmd.pre_exec(move || die_with_parent(elect_pid));
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(command = %command[0], error = %e, "cannot start command");
            return token.cancelled().await;
        }
    };
    tokio::select! {
        status = child.wait() => {
            tracing::warn!(command = %command[0], ?status, "command exited while leading; it starts again at the next term");
            token.cancelled().await;
        }
        _ = token.cancelled() => stop(&mut child, grace, &command[0]).await,
    }
}

async fn stop(child: &mut Child, grace: Duration, name: &str) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: kill(2) with a pid we spawned and still own (not reaped).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => tracing::info!(command = %name, ?status, "command stopped"),
        Err(_) => {
            tracing::warn!(command = %name, ?grace, "command ignored SIGTERM; sending SIGKILL");
            let _ = child.kill().await;
        }
    }
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
    }

    #[test]
    fn lines_have_the_fixed_shape() {
        let v: serde_json::Value =
            serde_json::from_str(&line("pod-a", &Leadership::Following { holder: None })).unwrap();
        assert_eq!(v["state"], "following");
        assert!(v["holder"].is_null() && v["term"].is_null());
        let ts = v["ts"].as_str().unwrap();
        assert!(ts.ends_with('Z') && ts.len() == 27, "{ts}");
        let term = Term {
            holder: "pod-a".into(),
            acquire_time: WallTime::from_unix_micros(0),
            transitions: 4,
        };
        let v: serde_json::Value = serde_json::from_str(&line(
            "pod-a",
            &Leadership::Leading {
                term,
                since: std::time::Instant::now(),
            },
        ))
        .unwrap();
        assert_eq!(
            (
                v["state"].as_str(),
                v["holder"].as_str(),
                v["term"].as_i64()
            ),
            (Some("leading"), Some("pod-a"), Some(4))
        );
    }
}
