//! One term of the leader-only command, from step-up to the moment its
//! whole process tree is gone.
//!
//! Each term runs on a thread of its own (not a runtime task), so starting,
//! stopping, the grace timer, killing and reaping go on even if every
//! runtime worker is blocked; the elector's cancellation wakes that thread
//! directly (see [`super::wait`]). The future handed to the elector only
//! waits for the thread, so the elector releases the lease, or leads again,
//! only once the tree is gone.
//!
//! Containment, in layers:
//! 1. the command runs under a keeper process ([`super::keeper`]) in a new
//!    session; stopping the term is a SIGTERM to the keeper, which stops
//!    the command's group and every descendant, SIGKILLs after the grace,
//!    and reaps everything before it exits. The keeper also does all this
//!    when elect dies, even by SIGKILL (parent-death signal);
//! 2. if the keeper does not finish within the hard limit, elect SIGKILLs
//!    the keeper's whole session and every descendant itself;
//! 3. elect is a child subreaper, so if a keeper died early (killed by
//!    someone), its orphans are re-parented to elect; after every term elect
//!    SIGKILLs and reaps its children that live outside its own session and
//!    are not a running keeper. Only a keeper's tree can be there: any
//!    other child elect has (say, a kubeconfig credential plugin) is in
//!    elect's session, since it cannot join another session.

use std::collections::BTreeSet;
use std::future::Future;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use leasehold_election::Term;
use tokio_util::sync::CancellationToken;

use super::procs;
use super::wait;

/// What to run while leading, and how to stop it.
pub struct Work {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// SIGTERM to SIGKILL.
    pub grace: Duration,
    /// From SIGTERM to elect killing the keeper's session itself, should the
    /// keeper not have finished by then.
    pub hard_stop: Duration,
    /// Failures in a row while leading before the lease is handed over
    /// (0: never).
    pub max_failures: u32,
    /// How long to leave the lease to others after handing it over.
    pub hold_back: Duration,
    /// Set once the elector runs.
    pub resigner: Arc<std::sync::OnceLock<leasehold_election::Resigner>>,
}

/// Keepers alive now (spawned and not yet reaped). The orphan sweep leaves
/// them alone; spawning and sweeping hold the lock, so a keeper being born
/// is never taken for an orphan.
static KEEPERS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn keepers() -> MutexGuard<'static, BTreeSet<i32>> {
    KEEPERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts the term's thread at once and returns a future that completes
/// when the term's command tree is gone (after `token` is cancelled).
pub fn term(work: Arc<Work>, term: Term, token: CancellationToken) -> impl Future<Output = ()> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let thread_token = token.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("term-{}", term.transitions))
        .spawn(move || {
            run_term(&work, &term, &thread_token);
            let _ = done_tx.send(());
        });
    async move {
        match spawned {
            Ok(_) => {
                let _ = done_rx.await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start the thread of the leader-only command");
                token.cancelled().await;
            }
        }
    }
}

/// A run at least this long counts as healthy: the failure count and the
/// restart backoff start over.
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// Restart backoff while leading: 1 s doubling up to 60 s.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// One term: runs the command, restarts it with backoff when its tree
/// ends while leading, and hands the lease over after `max_failures`
/// failures in a row, so one broken node cannot silence the cluster.
fn run_term(work: &Work, term: &Term, token: &CancellationToken) {
    let name = &work.command[0];
    let mut failures = 0u32;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let started = Instant::now();
        match Keeper::spawn(work, term) {
            Err(e) => tracing::error!(command = %name, error = %e, "cannot start command"),
            Ok(keeper) => {
                tracing::info!(command = %name, pid = keeper.pid, term = term.transitions, "command started");
                if wait::first_cancelled(&[token, &keeper.exited], None) == Some(0) {
                    stop(keeper, work, name);
                    break;
                }
                let status = keeper.reap();
                let how = status.as_ref().map_or("ended".into(), describe);
                match status.map(|s| s.code()) {
                    Some(Some(127)) => tracing::error!(
                        command = %name,
                        "command {how} while leading: {}",
                        why_unstartable(name)
                    ),
                    _ => tracing::warn!(command = %name, "command {how} while leading"),
                }
            }
        }
        // Whatever a killed keeper left must not run beside the next one.
        sweep_orphans();
        if started.elapsed() >= HEALTHY_RUN {
            failures = 0;
            backoff = FIRST_BACKOFF;
        }
        failures += 1;
        if work.max_failures > 0 && failures >= work.max_failures {
            tracing::error!(
                command = %name,
                failures,
                hold_back = ?work.hold_back,
                "command failed {failures} times in a row while leading; handing the lease over and holding back so a healthy candidate takes the work (this candidate stays in the election)"
            );
            match work.resigner.get() {
                Some(r) => r.resign(work.hold_back),
                None => tracing::error!("cannot hand the lease over: the elector is not running"),
            }
            wait::cancelled(token);
            break;
        }
        tracing::warn!(command = %name, failures, max = work.max_failures, ?backoff, "restarting the command");
        if wait::cancelled_by(token, Instant::now() + backoff) {
            break;
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    sweep_orphans();
}

/// A spawned keeper, not yet reaped.
struct Keeper {
    child: Child,
    pid: i32,
    /// Cancelled once the keeper has exited (it is then a zombie until
    /// [`Keeper::reap`], so its pid cannot be reused while we signal it).
    exited: CancellationToken,
}

impl Keeper {
    fn spawn(work: &Work, term: &Term) -> std::io::Result<Keeper> {
        let elect = std::process::id() as i32;
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("leasehold")
            .arg("__keep")
            .arg("--grace")
            .arg(format!("{}us", work.grace.as_micros()))
            .arg("--parent")
            .arg(elect.to_string())
            .arg("--")
            .args(&work.command)
            .env("LEASEHOLD_TERM", term.transitions.to_string())
            // stdout carries only our JSON lines, which tools parse; the
            // command's own output goes to stderr beside our logs.
            .stdout(std::io::stderr());
        // SAFETY: only async-signal-safe calls (setsid, prctl, getppid)
        // between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Sent when the thread that forks us (this term's thread,
                // which outlives the keeper) or the whole of elect dies.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // elect may have died before the signal was armed.
                if libc::getppid() != elect {
                    return Err(std::io::Error::other(
                        "elect exited before the command started",
                    ));
                }
                Ok(())
            });
        }
        let mut registry = keepers();
        let child = cmd.spawn()?;
        let pid = child.id() as i32;
        registry.insert(pid);
        drop(registry);
        let exited = CancellationToken::new();
        let notify = exited.clone();
        let watcher = std::thread::Builder::new()
            .name(format!("keeper-{pid}"))
            .spawn(move || {
                wait_exit(pid);
                notify.cancel();
            });
        if let Err(e) = watcher {
            // Without a watcher the keeper's end cannot be seen: kill it now
            // (what it started is swept at the end of the term).
            procs::signal(pid, libc::SIGKILL);
            let mut child = child;
            let _ = child.wait();
            keepers().remove(&pid);
            return Err(e);
        }
        Ok(Keeper { child, pid, exited })
    }

    /// Waits for the keeper to exit, then reaps and forgets it. (The lock
    /// is taken only once the wait cannot block.)
    fn reap(mut self) -> Option<ExitStatus> {
        wait::cancelled(&self.exited);
        let mut registry = keepers();
        let status = self.child.wait().ok();
        registry.remove(&self.pid);
        status
    }
}

/// Blocks until process `pid` has exited, without reaping it.
fn wait_exit(pid: i32) {
    loop {
        // SAFETY: siginfo_t is plain data, written by waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is valid for the call.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Stops a running term: SIGTERM to the keeper, which does the rest; past
/// the hard limit, elect kills the keeper's session itself.
fn stop(keeper: Keeper, work: &Work, name: &str) {
    let started = Instant::now();
    procs::signal(keeper.pid, libc::SIGTERM);
    if !wait::cancelled_by(&keeper.exited, started + work.hard_stop) {
        tracing::warn!(command = %name, limit = ?work.hard_stop, "command tree not gone in time; killing its session");
        kill_session(keeper.pid);
        if !wait::cancelled_by(&keeper.exited, Instant::now() + Duration::from_secs(1)) {
            tracing::error!(command = %name, pid = keeper.pid, "keeper did not exit after SIGKILL; it is reaped when it does");
            let _ = std::thread::Builder::new().spawn(move || keeper.reap());
            return;
        }
    }
    let pid = keeper.pid;
    let status = keeper.reap();
    let elapsed = started.elapsed();
    if status.is_some_and(|s| s.code().is_some()) {
        tracing::info!(command = %name, ?elapsed, "command stopped, with every process it started");
    } else {
        let how = status.as_ref().map_or("ended".into(), describe);
        tracing::warn!(command = %name, keeper = pid, ?elapsed, "keeper {how}; sweeping what it left");
    }
}

/// Kills every running command tree at once (a third stop signal: the
/// operator does not want to wait for graceful stops).
pub fn kill_all_now() {
    let alive: Vec<i32> = keepers().iter().copied().collect();
    for sid in alive {
        kill_session(sid);
    }
}

/// Says how a process ended, in words: "exited with code 3", "killed by
/// signal 15 (SIGTERM)".
pub fn describe(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        // The keeper passes a command killed by signal N on as 128 + N.
        (Some(code), _) if (129..=192).contains(&code) => format!(
            "exited with code {code} (killed by signal {} ({}))",
            code - 128,
            signal_name(code - 128)
        ),
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig} ({})", signal_name(sig)),
        _ => "ended".into(),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// SIGKILLs every process of session `sid` and every descendant of `sid`.
fn kill_session(sid: i32) {
    let table = procs::scan();
    let mut victims = procs::descendants(&table, sid);
    victims.extend(table.iter().filter(|p| p.session == sid).map(|p| p.pid));
    victims.insert(sid);
    for pid in victims {
        procs::signal(pid, libc::SIGKILL);
    }
}

/// SIGKILLs and reaps the orphans of dead keepers that were re-parented to
/// elect (see the module doc for why only those match). Bounded.
fn sweep_orphans() {
    let me = std::process::id() as i32;
    // SAFETY: getsid has no memory effects.
    let own_session = unsafe { libc::getsid(0) };
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut killed = BTreeSet::new();
    loop {
        let registry = keepers();
        let table = procs::scan();
        let orphans: Vec<i32> = table
            .iter()
            .filter(|p| p.ppid == me && p.session != own_session && !registry.contains(&p.pid))
            .map(|p| p.pid)
            .collect();
        if orphans.is_empty() {
            break;
        }
        for &pid in &orphans {
            // Their descendants too: killing them in one round saves the
            // rounds of re-parenting one generation at a time.
            for d in procs::descendants(&table, pid) {
                procs::signal(d, libc::SIGKILL);
            }
            procs::signal(pid, libc::SIGKILL);
        }
        drop(registry);
        for &pid in &orphans {
            if procs::reap_one(pid) {
                killed.insert(pid);
            }
        }
        if Instant::now() >= deadline {
            tracing::error!(
                ?orphans,
                "could not reap every process left by a dead keeper"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if !killed.is_empty() {
        tracing::warn!(?killed, "killed and reaped processes left by a dead keeper");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt as _;

    #[test]
    fn endings_are_said_in_words() {
        assert_eq!(
            describe(&ExitStatus::from_raw(3 << 8)),
            "exited with code 3"
        );
        assert_eq!(
            describe(&ExitStatus::from_raw(15)),
            "killed by signal 15 (SIGTERM)"
        );
        assert_eq!(
            describe(&ExitStatus::from_raw(143 << 8)),
            "exited with code 143 (killed by signal 15 (SIGTERM))"
        );
    }
}

/// Why `program` could not be started (the keeper exited 127): looked up as
/// `execvp` would, so the message names the real cause.
fn why_unstartable(program: &str) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let check = |path: &std::path::Path| -> Result<(), String> {
        match std::fs::metadata(path) {
            Err(e) => Err(format!("{}: {e}", path.display())),
            Ok(m) if m.is_dir() => Err(format!("{} is a directory", path.display())),
            Ok(m) if m.permissions().mode() & 0o111 == 0 => {
                Err(format!("{} is not executable", path.display()))
            }
            Ok(_) => Ok(()),
        }
    };
    if program.contains('/') {
        return match check(std::path::Path::new(program)) {
            Err(e) => format!("cannot be started: {e}"),
            Ok(()) => "it exists and is executable; it (or its interpreter) exited with 127".into(),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut reasons = Vec::new();
    for dir in std::env::split_paths(&path) {
        match check(&dir.join(program)) {
            Ok(()) => return "it exited with 127 (a command it ran was not found?)".into(),
            Err(e) if !e.contains("No such file") => reasons.push(e),
            Err(_) => {}
        }
    }
    if reasons.is_empty() {
        format!("cannot be started: {program:?} is not found in PATH")
    } else {
        format!("cannot be started: {}", reasons.join("; "))
    }
}

#[cfg(test)]
mod unstartable_tests {
    use super::why_unstartable;

    #[test]
    fn the_reason_is_named() {
        assert_eq!(
            why_unstartable("/nonexistent/worker"),
            "cannot be started: /nonexistent/worker: No such file or directory (os error 2)"
        );
        assert!(why_unstartable("/").contains("/ is a directory"));
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "x").unwrap();
        let p = plain.display().to_string();
        assert!(
            why_unstartable(&p).contains("is not executable"),
            "{}",
            why_unstartable(&p)
        );
        assert!(why_unstartable("no-such-program-here").contains("not found in PATH"));
    }
}
