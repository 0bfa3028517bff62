//! `leasehold elect` as a process: its exit codes, its JSON lines, and its
//! command run only while leading, against a real control plane.

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::Duration;

use anyhow::{Context, Result, bail};
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

/// Names that can never be created, absurd timings, negative durations and
/// unusable kubeconfigs are usage errors: exit 2 naming the rule, before
/// any JSON line.
#[test]
fn misconfigurations_exit_2_naming_what_is_wrong() {
    fn base<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["--identity", "a"];
        v.extend_from_slice(extra);
        v
    }
    let long = "a".repeat(300);
    for lease in ["BadName", long.as_str(), "a b", "..", "a/b"] {
        let err = elect_rejects(&base(&["--lease", lease]));
        assert!(
            err.contains("--lease: invalid lease name"),
            "{lease}: {err}"
        );
        assert!(err.contains("RFC 1123 subdomain"), "{err}");
        assert!(
            !err.contains("Role"),
            "wrong RBAC advice for {lease}: {err}"
        );
    }
    let err = elect_rejects(&base(&["--lease", "l", "--namespace", ""]));
    assert!(err.contains("--namespace: invalid namespace"), "{err}");
    for fleet in ["a b", "-x", "my/fleet"] {
        let flag = format!("--fleet={fleet}");
        let err = elect_rejects(&base(&["--lease", "l", &flag]));
        assert!(
            err.contains("invalid --fleet (LEASEHOLD_FLEET)") && err.contains("label value"),
            "{fleet}: {err}"
        );
    }
    for timings in [["3ms", "2ms", "1ms"], ["15ms", "10ms", "2ms"]] {
        let err = elect_rejects(&base(&[
            "--lease",
            "l",
            "--lease-duration",
            timings[0],
            "--renew-deadline",
            timings[1],
            "--retry-period",
            timings[2],
        ]));
        assert!(
            err.contains("whole number of seconds"),
            "{timings:?}: {err}"
        );
    }
    let err = elect_rejects(&base(&["--lease", "l", "--retry-period", "50ms"]));
    assert!(err.contains("retry period must be at least 100ms"), "{err}");
    let err = elect_rejects(&base(&["--lease", "l", "--lease-duration", "-1s"]));
    assert!(err.contains("must not be negative"), "{err}");
    assert!(!err.contains("-- -1"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.kubeconfig");
    let no_context = dir.path().join("no-context.kubeconfig");
    std::fs::write(
        &no_context,
        "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n",
    )
    .unwrap();
    for kubeconfig in [missing.as_path(), dir.path(), no_context.as_path()] {
        let out = StdCommand::new(leasehold())
            .args(["elect", "--lease", "l", "--identity", "a", "--kubeconfig"])
            .arg(kubeconfig)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{kubeconfig:?}: {err}");
        assert!(err.contains("kubeconfig"), "{err}");
        assert!(
            out.stdout.is_empty(),
            "a JSON line before the usage error: {:?}",
            out.stdout
        );
    }
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

// ---------------------------------------------------------------------------
// Containment of the command's whole process tree, and output that never
// delays a step-down. Timings 3s/2s/500ms: grace 0.4 × (3s − 2s) = 400 ms.

const LEASE_DURATION: Duration = Duration::from_secs(3);
const TIMINGS: [&str; 3] = ["3s", "2s", "500ms"];
/// The forked command samples every 50 ms.
const SAMPLE: Duration = Duration::from_millis(50);
/// Long enough to see a surviving sampler write several times.
const QUIET: Duration = Duration::from_millis(500);

/// A string found in the command line of every long-lived process of one
/// test's command tree, and of no other process (it is also a number of
/// seconds, about a day, for `sleep`).
fn marker() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "86400.{}{:03}{:09}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

/// Live processes whose command line holds `marker`, apart from elect
/// itself (whose arguments hold the command). The keeper counts.
fn tree(marker: &str) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<String> = raw
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_elect = args.get(1).map(String::as_str) == Some("elect");
        (!is_elect && args.iter().any(|a| a.contains(marker)) && process_running(pid))
            .then(|| (pid, args.join(" ")))
    })
    .collect()
}

/// Kills whatever of a test's tree is left, so a failing test leaves
/// nothing running behind it.
struct KillLeftovers(String);

impl Drop for KillLeftovers {
    fn drop(&mut self) {
        for (pid, _) in tree(&self.0) {
            let _ = StdCommand::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// `sh` that starts a sampler which leaves the process group and session
/// (`setsid`, double fork), a sampler that stays in the group, and then
/// becomes a long `sleep`. Both samplers append a timestamp (ns) to `out`
/// every 50 ms.
fn forked_command(out: &Path, marker: &str) -> Vec<String> {
    sampling_command(out, marker, r#"cd / && exec sleep "$1""#)
}

/// The samplers of [`forked_command`], then `last` in the command itself.
fn sampling_command(out: &Path, marker: &str, last: &str) -> Vec<String> {
    let script = format!(
        r#"(setsid sh -c 'while :; do date +%s%N >> "$0"; sleep 0.05; done' "$0" "$1" &); (while :; do date +%s%N >> "$0"; sleep 0.05; done) & {last}"#
    );
    [
        "--",
        "sh",
        "-c",
        &script,
        &out.display().to_string(),
        marker,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Waits (bounded) until the samplers have written at least twice each and
/// the tree has all of its long-lived processes (two samplers and the
/// command).
async fn tree_runs(out: &Path, marker: &str) -> Result<()> {
    tree_has(out, marker, 3).await
}

async fn tree_has(out: &Path, marker: &str, processes: usize) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while file_len(out) < 4 * 20 || tree(marker).len() < processes {
        if tokio::time::Instant::now() > deadline {
            bail!("the command tree did not start: {:?}", tree(marker));
        }
        tokio::time::sleep(SAMPLE).await;
    }
    Ok(())
}

/// Waits up to `within` until no process of the tree is left, then checks
/// that nothing writes its output any more over several sample intervals.
async fn tree_gone(out: &Path, marker: &str, within: Duration) -> Result<()> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = tree(marker);
        if left.is_empty() {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("processes of the command tree survived for {within:?}: {left:#?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let len = file_len(out);
    tokio::time::sleep(QUIET.max(SAMPLE * 10)).await;
    if file_len(out) != len {
        bail!("the command tree's output still grows after its stop");
    }
    Ok(())
}

/// A leader running [`forked_command`] with `marker`, once its tree runs;
/// returns it, its namespace and the samplers' output file.
async fn leading_with_forked_command(
    fleet: &mut Fleet,
    prefix: &str,
    k: u32,
    dir: &Path,
    marker: &str,
) -> Result<(usize, String, PathBuf)> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace(prefix).await?;
    let out = dir.join("samples");
    let idx = fleet.spawn(Spec {
        kind: Kind::Leasehold,
        program: leasehold(),
        lease: "forked".into(),
        namespace: ns.name().into(),
        identity: ControlPlane::agent_user(k),
        kubeconfig: plane.agent_kubeconfig(k),
        timings: TIMINGS.map(String::from),
        extra: forked_command(&out, marker),
    })?;
    fleet.wait_for_leader(Duration::from_secs(10)).await?;
    tree_runs(&out, marker).await?;
    Ok((idx, ns.name().to_string(), out))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_whole_process_tree_before_exit() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut fleet = Fleet::new();
    let marker = marker();
    let _cleanup = KillLeftovers(marker.clone());
    let (a, _, out) =
        leading_with_forked_command(&mut fleet, "tree-term", 1, dir.path(), &marker).await?;
    fleet.terminate(a, Duration::from_secs(5)).await?;
    // elect exits only once its work is gone: nothing may be left now.
    tree_gone(&out, &marker, Duration::ZERO).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_elect_takes_the_whole_process_tree_with_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut fleet = Fleet::new();
    let marker = marker();
    let _cleanup = KillLeftovers(marker.clone());
    let (a, _, out) =
        leading_with_forked_command(&mut fleet, "tree-kill", 2, dir.path(), &marker).await?;
    fleet.kill(a, Duration::from_secs(5)).await?;
    // Nothing of elect runs any more: the tree must be gone before anyone
    // else could see the lease expire.
    tree_gone(&out, &marker, LEASE_DURATION).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_command_left_behind_is_stopped_at_step_down() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("tree-left").await?;
    let dir = tempfile::tempdir()?;
    let (marker, out) = (marker(), dir.path().join("samples"));
    let _cleanup = KillLeftovers(marker.clone());
    let mut fleet = Fleet::new();
    // The command itself exits at once; its two samplers live on.
    let a = fleet.spawn(Spec {
        kind: Kind::Leasehold,
        program: leasehold(),
        lease: "left".into(),
        namespace: ns.name().into(),
        identity: ControlPlane::agent_user(4),
        kubeconfig: plane.agent_kubeconfig(4),
        timings: TIMINGS.map(String::from),
        extra: sampling_command(&out, &marker, "exit 0"),
    })?;
    fleet.wait_for_leader(Duration::from_secs(10)).await?;
    tree_has(&out, &marker, 2).await?;
    fleet.terminate(a, Duration::from_secs(5)).await?;
    tree_gone(&out, &marker, Duration::ZERO).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_whose_keeper_was_killed_is_still_stopped() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut fleet = Fleet::new();
    let marker = marker();
    let _cleanup = KillLeftovers(marker.clone());
    let (a, _, out) =
        leading_with_forked_command(&mut fleet, "tree-keeper", 5, dir.path(), &marker).await?;
    // Someone kills the process that holds the tree: its orphans are
    // re-parented to elect, which must still stop them with the term.
    let keepers: Vec<u32> = tree(&marker)
        .into_iter()
        .filter(|(_, args)| args.contains(" __keep "))
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(keepers.len(), 1, "{:?}", tree(&marker));
    StdCommand::new("kill")
        .args(["-KILL", &keepers[0].to_string()])
        .status()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while process_running(keepers[0]) {
        assert!(tokio::time::Instant::now() < deadline, "keeper lives on");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tree_has(&out, &marker, 2).await?;
    fleet.terminate(a, Duration::from_secs(5)).await?;
    tree_gone(&out, &marker, Duration::ZERO).await
}

/// Replaces the holder of `namespace/lease` as an admin would, with a long
/// duration so that nobody takes the lease back during the test.
async fn overwrite_holder(namespace: &str, lease: &str, holder: &str) -> Result<()> {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let admin = ControlPlane::shared().admin_client().await?;
    let resource =
        ApiResource::from_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"));
    let api: Api<DynamicObject> = Api::namespaced_with(admin, namespace, &resource);
    for _ in 0..20 {
        let mut object = api.get(lease).await?;
        let micros = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_micros() as i64;
        let now = leasehold_election::core::WallTime::from_unix_micros(micros).to_micro_time();
        let spec = &mut object.data["spec"];
        spec["holderIdentity"] = serde_json::json!(holder);
        spec["leaseDurationSeconds"] = serde_json::json!(60);
        spec["acquireTime"] = serde_json::json!(now);
        spec["renewTime"] = serde_json::json!(now);
        match api.replace(lease, &PostParams::default(), &object).await {
            Ok(_) => return Ok(()),
            // The leader renewed in between: read again.
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("could not overwrite the holder of {namespace}/{lease}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_down_stops_the_whole_process_tree() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut fleet = Fleet::new();
    let marker = marker();
    let _cleanup = KillLeftovers(marker.clone());
    let (a, ns, out) =
        leading_with_forked_command(&mut fleet, "tree-stepdown", 3, dir.path(), &marker).await?;
    overwrite_holder(&ns, "forked", "intruder").await?;
    let started = tokio::time::Instant::now();
    fleet
        .wait_for(LEASE_DURATION, "a follows the intruder", |_, i, r| {
            i == a && r.state == State::Following && r.holder.as_deref() == Some("intruder")
        })
        .await?;
    // elect runs on as a follower; its command tree must be gone before
    // anyone could see its lease expire.
    let left = LEASE_DURATION.saturating_sub(started.elapsed());
    tree_gone(&out, &marker, left).await?;
    fleet.shutdown(Duration::from_secs(5)).await
}

/// A pipe whose buffer is full and whose reader does not read: a write to
/// the returned write end blocks. Returns (read end, write end).
fn stalled_pipe() -> Result<(std::fs::File, std::os::fd::OwnedFd)> {
    use std::io::Write as _;
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe2: {}", std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these two descriptors, owned by nobody.
    let (read, write) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            OwnedFd::from_raw_fd(fds[1]),
        )
    };
    // One page, so that it fills at once (failure is fine: it only fills
    // a bigger buffer).
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    // Fill it through a second open file description, non-blocking: making
    // the write end itself non-blocking would make elect's writes fail
    // instead of block.
    let mut filler = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{}", write.as_raw_fd()))?;
    // Newlines, so that the reader later sees empty lines, then elect's.
    for chunk in [4096, 1] {
        loop {
            match filler.write(&vec![b'\n'; chunk]) {
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok((read, write))
}

/// Starts `leasehold elect` as agent `k` in `namespace` with the forked
/// command and the given stdout and stderr.
fn spawn_elect(
    namespace: &str,
    k: u32,
    command: Vec<String>,
    stdout: std::process::Stdio,
    stderr: std::process::Stdio,
) -> Result<tokio::process::Child> {
    let plane = ControlPlane::shared();
    let mut cmd = tokio::process::Command::new(leasehold());
    cmd.args(["elect", "--lease", "forked", "--namespace", namespace])
        .args(["--identity", &ControlPlane::agent_user(k)])
        .arg("--kubeconfig")
        .arg(plane.agent_kubeconfig(k))
        .args([
            "--lease-duration",
            TIMINGS[0],
            "--renew-deadline",
            TIMINGS[1],
        ])
        .args(["--retry-period", TIMINGS[2]])
        .args(command)
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true);
    Ok(cmd.spawn()?)
}

/// Microseconds since the epoch of a line's `ts`.
fn ts_micros(line: &serde_json::Value) -> Result<i64> {
    let ts = line["ts"].as_str().unwrap_or_default();
    leasehold_election::core::WallTime::parse_rfc3339(ts)
        .map(|t| t.unix_micros())
        .ok_or_else(|| anyhow::anyhow!("bad ts in {line}"))
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stdout_delays_neither_step_down_nor_the_truth_of_the_lines() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("stalled-stdout").await?;
    let dir = tempfile::tempdir()?;
    let (marker, out) = (marker(), dir.path().join("samples"));
    let _cleanup = KillLeftovers(marker.clone());
    let (read, write) = stalled_pipe()?;
    let mut elect = spawn_elect(
        ns.name(),
        1,
        forked_command(&out, &marker),
        write.into(),
        std::process::Stdio::inherit(),
    )?;
    // Nothing can be read from elect: it leads once its command samples.
    tree_runs(&out, &marker).await?;
    let first_sample: i64 = std::fs::read_to_string(&out)?
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no sample"))?;
    overwrite_holder(ns.name(), "forked", "intruder").await?;
    // Its stop must not wait for the stalled stdout: the tree is gone
    // before anyone could see the lease expire.
    tree_gone(&out, &marker, LEASE_DURATION).await?;

    // Now read: the lines come out, stamped with when things happened.
    let read_from = now_micros();
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(read).lines().map_while(Result::ok) {
            if !line.is_empty() && tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !seen
        .iter()
        .any(|v: &serde_json::Value| v["holder"] == "intruder")
    {
        let line = tokio::time::timeout_at(deadline, lines.recv())
            .await
            .map_err(|_| anyhow::anyhow!("no step-down line; lines: {seen:?}"))?
            .ok_or_else(|| anyhow::anyhow!("elect closed stdout; lines: {seen:?}"))?;
        seen.push(serde_json::from_str(&line)?);
    }
    let leading = seen
        .iter()
        .find(|v| v["state"] == "leading")
        .ok_or_else(|| anyhow::anyhow!("no leading line: {seen:?}"))?;
    let following = seen.last().unwrap_or(leading);
    assert_eq!(following["state"], "following", "{seen:?}");
    // The step-up came before the command's first sample (ns vs µs), the
    // step-down before the lines could be read.
    assert!(
        ts_micros(leading)? <= first_sample / 1000,
        "leading at {} but sampling since {first_sample}",
        leading["ts"]
    );
    assert!(
        ts_micros(following)? < read_from,
        "the step-down line carries its printing time: {following}"
    );
    elect.start_kill()?;
    elect.wait().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stderr_delays_no_step_down() -> Result<()> {
    use tokio::io::AsyncBufReadExt as _;
    let plane = ControlPlane::shared();
    let ns = plane.namespace("stalled-stderr").await?;
    let dir = tempfile::tempdir()?;
    let (marker, out) = (marker(), dir.path().join("samples"));
    let _cleanup = KillLeftovers(marker.clone());
    let (_read, write) = stalled_pipe()?;
    let mut elect = spawn_elect(
        ns.name(),
        2,
        forked_command(&out, &marker),
        std::process::Stdio::piped(),
        write.into(),
    )?;
    let stdout = elect
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut next = async |what: &str, within: Duration| -> Result<serde_json::Value> {
        let line = tokio::time::timeout(within, lines.next_line())
            .await
            .map_err(|_| anyhow::anyhow!("no {what} line within {within:?}"))??
            .ok_or_else(|| anyhow::anyhow!("elect closed stdout before {what}"))?;
        Ok(serde_json::from_str(&line)?)
    };
    while next("leading", Duration::from_secs(10)).await?["state"] != "leading" {}
    tree_runs(&out, &marker).await?;
    overwrite_holder(ns.name(), "forked", "intruder").await?;
    let started = tokio::time::Instant::now();
    while next("step-down", LEASE_DURATION).await?["holder"] != "intruder" {}
    tree_gone(
        &out,
        &marker,
        LEASE_DURATION.saturating_sub(started.elapsed()),
    )
    .await?;
    // SIGTERM: elect still says `stopped` and exits 0, though its logs
    // cannot be written.
    let pid = elect.id().ok_or_else(|| anyhow::anyhow!("elect exited"))?;
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    while next("stopped", Duration::from_secs(5)).await?["state"] != "stopped" {}
    let status = tokio::time::timeout(Duration::from_secs(5), elect.wait()).await??;
    assert!(status.success(), "{status}");
    Ok(())
}

/// Runs elect with `kubeconfig` until its stderr contains `needle`
/// (bounded), then stops it; returns the stderr read so far.
async fn stderr_until(
    kubeconfig: &Path,
    namespace: &str,
    lease: &str,
    needle: &str,
    within: Duration,
) -> Result<String> {
    stderr_until_running(kubeconfig, namespace, lease, &[], needle, within).await
}

/// As [`stderr_until`], with `command` after `--`.
async fn stderr_until_running(
    kubeconfig: &Path,
    namespace: &str,
    lease: &str,
    command: &[&str],
    needle: &str,
    within: Duration,
) -> Result<String> {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(leasehold())
        .args([
            "elect",
            "--lease",
            lease,
            "--namespace",
            namespace,
            "--identity",
            "a",
            "--kubeconfig",
        ])
        .arg(kubeconfig)
        .args([
            "--lease-duration",
            "3s",
            "--renew-deadline",
            "2s",
            "--retry-period",
            "500ms",
        ])
        .args(if command.is_empty() {
            &[][..]
        } else {
            &["--"][..]
        })
        .args(command)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("piped")).lines();
    let mut seen = String::new();
    let found = tokio::time::timeout(within, async {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains(needle) {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    child.kill().await?;
    anyhow::ensure!(found, "no {needle:?} on stderr within {within:?}:\n{seen}");
    Ok(seen)
}

/// A rejected token, a dead port and an untrusted server certificate are
/// each explained with the server, the user and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credential_and_connection_problems_are_explained() -> Result<()> {
    let plane = ControlPlane::shared();
    let good: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(plane.agent_kubeconfig(1))?)?;
    let dir = tempfile::tempdir()?;
    let write = |name: &str, edit: &dyn Fn(&mut serde_json::Value)| -> Result<PathBuf> {
        let mut kc = good.clone();
        edit(&mut kc);
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_string(&kc)?)?;
        Ok(path)
    };
    let bad_token = write("token", &|kc| {
        kc["users"][0]["user"]["token"] = "not-a-token".into()
    })?;
    let dead_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let dead = write("dead", &|kc| {
        kc["clusters"][0]["cluster"]["server"] = format!("https://127.0.0.1:{dead_port}").into()
    })?;
    let no_ca = write("no-ca", &|kc| {
        kc["clusters"][0]["cluster"]
            .as_object_mut()
            .unwrap()
            .remove("certificate-authority-data");
    })?;
    // Bounded by a few retry periods (500 ms) and call timeouts (1 s).
    let within = Duration::from_secs(15);
    let err = stderr_until(
        &bad_token,
        "leasehold",
        "creds",
        "rejected the credentials",
        within,
    )
    .await?;
    assert!(err.contains(&ControlPlane::agent_user(1)), "{err}");
    assert!(err.contains("401 Unauthorized"), "{err}");
    let err = stderr_until(&dead, "leasehold", "creds", "connection refused", within).await?;
    assert!(err.contains(&format!("127.0.0.1:{dead_port}")), "{err}");
    stderr_until(&no_ca, "leasehold", "creds", "TLS verification", within).await?;
    Ok(())
}

/// A namespace that does not exist is named in an error, not retried in a
/// silent hot loop (the backoff itself is pinned by the core's unit test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_namespace_is_named() -> Result<()> {
    let plane = ControlPlane::shared();
    let err = stderr_until(
        &plane.admin_kubeconfig(),
        "no-such-namespace",
        "lease",
        "namespace \"no-such-namespace\" does not exist",
        // One read and one create, each bounded by the call timeout.
        Duration::from_secs(15),
    )
    .await?;
    assert!(err.contains("create it"), "{err}");
    Ok(())
}

/// A Lease whose duration is far above ours is honoured and reported as
/// what the Lease records, without blaming its holder (an admin may have
/// written it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_longer_recorded_duration_is_reported_as_the_lease_s() -> Result<()> {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let plane = ControlPlane::shared();
    let admin = plane.admin_client().await?;
    let resource =
        ApiResource::from_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"));
    let leases: Api<DynamicObject> = Api::namespaced_with(admin, "leasehold", &resource);
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_micros() as i64;
    let now = leasehold_election::core::WallTime::from_unix_micros(micros).to_micro_time();
    let lease: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "recorded-long"},
        "spec": {"holderIdentity": "written-by-admin", "leaseDurationSeconds": 3600,
                 "acquireTime": now, "renewTime": now, "leaseTransitions": 0}
    }))?;
    leases.create(&PostParams::default(), &lease).await?;
    // Reported on the first read: a few call timeouts at most.
    let err = stderr_until(
        &plane.agent_kubeconfig(1),
        "leasehold",
        "recorded-long",
        "the Lease records a duration far above ours",
        Duration::from_secs(15),
    )
    .await?;
    assert!(!err.contains("written by the holder"), "{err}");
    Ok(())
}

/// A leader whose command keeps failing restarts it with backoff, then
/// hands the lease over so a healthy candidate does the work, and stays a
/// candidate itself; it does not take the lease back during the hold-back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_hands_the_lease_to_a_healthy_candidate() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("failing").await?;
    let dir = tempfile::tempdir()?;
    let spec = |k: u32, extra: Vec<String>| Spec {
        kind: Kind::Leasehold,
        program: leasehold(),
        lease: "failing".into(),
        namespace: ns.name().into(),
        identity: ControlPlane::agent_user(k),
        kubeconfig: plane.agent_kubeconfig(k),
        timings: ["3s".into(), "2s".into(), "500ms".into()],
        extra,
    };
    let broken: Vec<String> = ["--command-failures", "3", "--", "sh", "-c", "exit 3"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut fleet = Fleet::new();
    let a = fleet.spawn(spec(1, broken))?;
    let (leader, _) = fleet.wait_for_leader(Duration::from_secs(10)).await?;
    assert_eq!(leader, a);
    let b_id = ControlPlane::agent_user(2);
    let b = fleet.spawn(spec(2, command(dir.path(), &b_id)))?;
    // Three failures with 1 s and 2 s of backoff between them, then the
    // release: well inside the bound below.
    fleet
        .wait_for(
            Duration::from_secs(15),
            "the healthy candidate leads",
            |_, i, r| i == b && r.state == State::Leading,
        )
        .await?;
    file_appears(
        &dir.path().join(format!("{b_id}.running")),
        Duration::from_secs(5),
    )
    .await?;
    assert!(
        fleet.is_running(a),
        "the failing candidate left the election"
    );
    // The hold-back is twice the lease duration; B keeps leading through it.
    fleet.observe(Duration::from_secs(6)).await?;
    assert_eq!(fleet.leader(), Some(b));
    let a_last = fleet
        .history()
        .iter()
        .rev()
        .find(|r| r.identity == ControlPlane::agent_user(1))
        .map(|r| r.state.clone());
    assert_eq!(a_last, Some(State::Following));
    fleet.shutdown(Duration::from_secs(5)).await?;
    assert!(fleet.violations().is_empty(), "{:?}", fleet.violations());
    Ok(())
}

/// Shutdown is bounded and can be hurried: after `stopped` elect exits at
/// once; a second signal says what it waits for; a third kills the command
/// and exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_exits_promptly_and_a_third_signal_does_not_wait() -> Result<()> {
    use tokio::io::AsyncBufReadExt as _;
    let plane = ControlPlane::shared();
    let dir = tempfile::tempdir()?;
    let pidfile = dir.path().join("pid");
    // A command that ignores SIGTERM: stopping it takes the whole grace of
    // 0.4 × (10 s − 4 s) = 2.4 s, a window for the extra signals.
    let stubborn = r#"trap '' TERM; echo $$ > "$0"; while :; do sleep 0.05; done"#;
    let cooperative = "while :; do sleep 0.05; done";
    for (round, script) in [(1, cooperative), (2, stubborn)] {
        let ns = plane.namespace("hurry").await?;
        let mut child = tokio::process::Command::new(leasehold())
            .args(["elect", "--lease", "hurry", "--namespace", ns.name()])
            .args(["--identity", &ControlPlane::agent_user(1), "--kubeconfig"])
            .arg(plane.agent_kubeconfig(1))
            .args([
                "--lease-duration",
                "10s",
                "--renew-deadline",
                "4s",
                "--retry-period",
                "1s",
            ])
            .args(["--", "sh", "-c", script])
            .arg(&pidfile)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().expect("running") as i32;
        let mut out = tokio::io::BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut err = tokio::io::BufReader::new(child.stderr.take().expect("piped")).lines();
        // Lead first (a missing Lease is created after one lease duration).
        tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = out.next_line().await? {
                if line.contains("\"leading\"") {
                    return Ok::<_, anyhow::Error>(());
                }
            }
            bail!("elect ended before leading")
        })
        .await??;
        // SAFETY: kill(2) on the child this test spawned and has not reaped.
        let signal = |sig| unsafe { libc::kill(pid, sig) };
        if round == 1 {
            signal(libc::SIGTERM);
            let stopped = tokio::time::timeout(Duration::from_secs(20), async {
                while let Some(line) = out.next_line().await? {
                    if line.contains("\"stopped\"") {
                        return Ok::<_, anyhow::Error>(std::time::Instant::now());
                    }
                }
                bail!("no stopped line")
            })
            .await??;
            let status = child.wait().await?;
            let lag = stopped.elapsed();
            assert_eq!(status.code(), Some(0));
            // Bounded by the retry period (1 s), far above the few
            // milliseconds it takes, far below a runtime-teardown hang.
            assert!(
                lag < Duration::from_secs(1),
                "exit {lag:?} after the stopped line"
            );
            continue;
        }
        let command_pid: i32 = file_appears(&pidfile, Duration::from_secs(5))
            .await?
            .parse()?;
        // Signals sent back to back may be merged: each is sent once the
        // previous one was acknowledged on stderr.
        signal(libc::SIGTERM);
        tokio::time::timeout(Duration::from_secs(2), async {
            while let Some(line) = err.next_line().await? {
                if line.contains("signal received") {
                    return Ok::<_, anyhow::Error>(());
                }
            }
            bail!("stderr ended")
        })
        .await??;
        signal(libc::SIGTERM);
        let said = tokio::time::timeout(Duration::from_secs(2), async {
            while let Some(line) = err.next_line().await? {
                if line.contains("still stopping") {
                    return Ok::<_, anyhow::Error>(line);
                }
            }
            bail!("stderr ended")
        })
        .await??;
        assert!(said.contains("waiting for"), "{said}");
        let third = std::time::Instant::now();
        signal(libc::SIGTERM);
        let status = child.wait().await?;
        assert_eq!(status.code(), Some(1), "a hurried exit is not a clean one");
        // At once: well before the 2.4 s grace of the ignoring command.
        assert!(
            third.elapsed() < Duration::from_millis(2400),
            "{:?}",
            third.elapsed()
        );
        // SIGKILL is delivered before elect exits; dying takes a moment.
        let gone_by = std::time::Instant::now() + Duration::from_secs(1);
        while process_running(command_pid as u32) && std::time::Instant::now() < gone_by {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            !process_running(command_pid as u32),
            "the command outlived a hurried exit"
        );
    }
    Ok(())
}

/// A command that cannot be started is named with the operating system's
/// reason, while leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_cannot_start_says_why() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("unstartable").await?;
    let seen = stderr_until_running(
        &plane.agent_kubeconfig(1),
        ns.name(),
        "unstartable",
        &["/nonexistent/worker"],
        "cannot be started: /nonexistent/worker: No such file or directory",
        Duration::from_secs(10),
    )
    .await?;
    assert!(seen.contains("while leading"), "{seen}");
    Ok(())
}

/// A Lease in a namespace that does not exist can never be created:
/// `elect` says so on stderr, at the default level, naming the namespace
/// and the fix, long before the first create (one lease duration later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_namespace_is_named_on_stderr_at_once() -> Result<()> {
    use tokio::io::AsyncBufReadExt;
    let plane = ControlPlane::shared();
    let missing = format!("no-such-ns-{}", std::process::id());
    let mut child = tokio::process::Command::new(leasehold())
        .args(["elect", "--lease", "nowhere", "--namespace", &missing])
        .args(["--identity", "someone"])
        .arg("--kubeconfig")
        .arg(plane.admin_kubeconfig())
        .args(["--lease-duration", "15s", "--renew-deadline", "10s"])
        .args(["--retry-period", "2s"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stderr = child.stderr.take().context("stderr")?;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let found = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = lines.next_line().await? {
            if line.contains(&format!("namespace \"{missing}\" does not exist")) {
                return Ok::<_, anyhow::Error>(Some(line));
            }
        }
        Ok(None)
    })
    .await;
    let _ = child.kill().await;
    let line = match found {
        Ok(Ok(Some(line))) => line,
        other => anyhow::bail!("no line naming the missing namespace within 10 s: {other:?}"),
    };
    assert!(line.contains("kubectl create namespace"), "{line}");
    Ok(())
}
