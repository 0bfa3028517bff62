//! `leasehold elect` as a process: its exit codes, its JSON lines, and its
//! command run only while leading, against a real control plane.

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::Duration;

use anyhow::{Result, bail};
use leasehold_testkit::candidates::{Fleet, Kind, Spec, State};
use leasehold_testkit::{ControlPlane, process_running};

fn leasehold() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_leasehold"))
}

/// Runs `leasehold elect ARGS`, which must exit 2; returns its stderr.
fn elect_rejects(args: &[&str]) -> String {
    let out = StdCommand::new(leasehold())
        .arg("elect")
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "elect {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn invalid_timings_and_flags_exit_2_with_the_reason() {
    let err = elect_rejects(&[
        "--lease",
        "l",
        "--identity",
        "a",
        "--lease-duration",
        "2s",
        "--renew-deadline",
        "3s",
    ]);
    assert!(
        err.contains("lease duration must be greater than renew deadline"),
        "{err}"
    );
    assert!(err.contains("2s") && err.contains("3s"), "{err}");
    let err = elect_rejects(&["--lease", "l", "--identity", "a", "--retry-period", "fast"]);
    assert!(err.contains("invalid duration"), "{err}");
    // Missing --lease.
    elect_rejects(&["--identity", "a"]);
}

/// A command that marks itself running in `dir/<id>.running` (holding its
/// term) and, on SIGTERM, removes the mark and logs that it stopped. It also
/// prints to its stdout, which must not reach elect's stdout: the fleet fails
/// on any line there that is not a JSON report.
fn command(dir: &Path, id: &str) -> Vec<String> {
    let script = r#"echo "leader work of term $LEASEHOLD_TERM"; echo "$LEASEHOLD_TERM" > "$0/$1.running"; trap 'rm -f "$0/$1.running"; echo stopped >> "$0/$1.log"; exit 0' TERM; while :; do sleep 0.05; done"#;
    ["--", "sh", "-c", script, &dir.display().to_string(), id]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

async fn file_appears(path: &Path, within: Duration) -> Result<String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && !s.is_empty()
        {
            return Ok(s.trim().to_string());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{} did not appear within {within:?}", path.display());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_runs_only_while_leading_and_restarts_on_reelection() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("elect-cli").await?;
    let dir = tempfile::tempdir()?;
    let spec = |k: u32| Spec {
        kind: Kind::Leasehold,
        program: leasehold(),
        lease: "cli".into(),
        namespace: ns.name().into(),
        identity: ControlPlane::agent_user(k),
        kubeconfig: plane.agent_kubeconfig(k),
        timings: ["3s".into(), "2s".into(), "500ms".into()],
        extra: command(dir.path(), &ControlPlane::agent_user(k)),
    };
    let (a_id, b_id) = (ControlPlane::agent_user(1), ControlPlane::agent_user(2));
    let mark = |id: &str| dir.path().join(format!("{id}.running"));
    let mut fleet = Fleet::new();
    let a = fleet.spawn(spec(1))?;
    let (leader, report) = fleet.wait_for_leader(Duration::from_secs(10)).await?;
    assert_eq!((leader, report.term), (a, Some(0)));
    assert_eq!(
        file_appears(&mark(&a_id), Duration::from_secs(5)).await?,
        "0"
    );
    let b = fleet.spawn(spec(2))?;
    fleet
        .wait_for(Duration::from_secs(5), "b follows a", |_, i, r| {
            i == b && r.state == State::Following && r.holder.as_deref() == Some(a_id.as_str())
        })
        .await?;
    assert!(!mark(&b_id).exists(), "follower runs the command");

    // SIGTERM: the command is stopped, the lease released, B takes over fast.
    fleet.terminate(a, Duration::from_secs(5)).await?;
    assert_eq!(
        fleet
            .history()
            .iter()
            .rev()
            .find(|r| r.identity == a_id)
            .map(|r| &r.state),
        Some(&State::Stopped)
    );
    assert!(
        !mark(&a_id).exists(),
        "command still marked running after stop"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join(format!("{a_id}.log")))?.trim(),
        "stopped"
    );
    let (leader, report) = fleet.wait_for_leader(Duration::from_millis(1500)).await?;
    assert_eq!((leader, report.term), (b, Some(1)));
    assert_eq!(
        file_appears(&mark(&b_id), Duration::from_secs(5)).await?,
        "1"
    );

    // A comes back as a follower; when B leaves, A leads and runs again.
    fleet.restart(a)?;
    fleet
        .wait_for(Duration::from_secs(5), "a follows b", |_, i, r| {
            i == a && r.state == State::Following && r.holder.as_deref() == Some(b_id.as_str())
        })
        .await?;
    fleet.terminate(b, Duration::from_secs(5)).await?;
    let (leader, report) = fleet.wait_for_leader(Duration::from_millis(1500)).await?;
    assert_eq!((leader, report.term), (a, Some(2)));
    assert_eq!(
        file_appears(&mark(&a_id), Duration::from_secs(5)).await?,
        "2"
    );
    fleet.shutdown(Duration::from_secs(5)).await?;
    assert!(fleet.violations().is_empty(), "{:?}", fleet.violations());
    Ok(())
}

/// A leader running a command that ignores SIGTERM, and that command's pid.
async fn leading_with_stubborn_command(
    fleet: &mut Fleet,
    lease: &str,
    k: u32,
    dir: &Path,
) -> Result<(usize, String)> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace(lease).await?;
    let pidfile = dir.join("pid");
    let script = r#"trap '' TERM; echo $$ > "$0"; while :; do sleep 0.05; done"#;
    let idx = fleet.spawn(Spec {
        kind: Kind::Leasehold,
        program: leasehold(),
        lease: lease.into(),
        namespace: ns.name().into(),
        identity: ControlPlane::agent_user(k),
        kubeconfig: plane.agent_kubeconfig(k),
        timings: ["3s".into(), "2s".into(), "500ms".into()],
        extra: ["--", "sh", "-c", script, &pidfile.display().to_string()]
            .iter()
            .map(|s| s.to_string())
            .collect(),
    })?;
    fleet.wait_for_leader(Duration::from_secs(10)).await?;
    let pid = file_appears(&pidfile, Duration::from_secs(5)).await?;
    Ok((idx, pid))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ignoring_sigterm_is_killed_within_the_grace() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut fleet = Fleet::new();
    let (a, pid) = leading_with_stubborn_command(&mut fleet, "stubborn", 3, dir.path()).await?;
    let started = tokio::time::Instant::now();
    fleet.terminate(a, Duration::from_secs(5)).await?;
    // Grace is 0.4 × (lease_duration − renew_deadline) = 400 ms.
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "stop took {:?}",
        started.elapsed()
    );
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "command {pid} survived"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_dies_with_a_killed_elect() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut fleet = Fleet::new();
    // The command ignores SIGTERM too: only the parent-death SIGKILL stops it.
    let (a, pid) = leading_with_stubborn_command(&mut fleet, "orphan", 4, dir.path()).await?;
    fleet.kill(a, Duration::from_secs(5)).await?;
    let pid: u32 = pid.parse()?;
    // The command is not our child, so it cannot be awaited: look, bounded.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while process_running(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "leader-only command {pid} outlived its SIGKILLed elector"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
