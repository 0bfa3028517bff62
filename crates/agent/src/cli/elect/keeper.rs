//! `leasehold __keep --grace D --parent PID -- CMD...`: the small process
//! that holds one term's command tree, hidden from help.
//!
//! Why a separate process: elect may die by SIGKILL, and then no code of
//! elect runs. The kernel only tells the direct child (parent-death signal),
//! and a command's own children, or a daemon it forked into a new session,
//! would live on. So elect starts this keeper instead of the command:
//!
//! - elect makes it the leader of a new session and sets its parent-death
//!   signal to SIGTERM (checking the parent is still elect, which closes the
//!   race with elect dying before the signal was armed);
//! - the keeper makes itself a child subreaper, so every orphan of the tree
//!   (double forks, `setsid` daemons) is re-parented to it, not to init;
//! - it runs the command in a process group of its own, inside the keeper's
//!   session;
//! - on SIGTERM (elect stopping the term, or elect gone) it sends SIGTERM to
//!   the command's group and to every descendant that left the group, waits
//!   up to the grace for the tree to exit, then SIGKILLs the group and every
//!   descendant found by parent pid, reaping until it has no child left.
//!
//! The keeper writes nothing: its stdout and stderr are elect's stderr,
//! which may be a stalled pipe, and the stop path must never block on it.
//!
//! Exit status: the command's (exit code, or 128 + signal) when the whole
//! tree ended on its own; 0 when stopped and the tree is gone; 1 when elect
//! was gone before anything started; 127 when the command could not be
//! started. If the tree could not be emptied in time, the keeper kills
//! itself with SIGKILL, so that elect, which sees a keeper killed by a
//! signal, sweeps the orphans re-parented to it.

use std::os::unix::process::CommandExt as _;
use std::time::{Duration, Instant};

use clap::Args;

use super::procs::{self, Reaped};

/// Flags of the hidden `leasehold __keep`.
#[derive(Debug, Args)]
pub struct KeepArgs {
    /// Time between SIGTERM and SIGKILL of the command's tree.
    #[arg(long, value_parser = super::parse_duration)]
    pub grace: Duration,
    /// The elect process; once it is gone, the tree is stopped.
    #[arg(long)]
    pub parent: i32,
    /// The command.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// After SIGKILL, how long the keeper keeps killing and reaping a tree that
/// keeps forking before it gives up (bounded, like every loop of the stop).
const KILL_BUDGET: Duration = Duration::from_secs(1);

/// Signals the keeper takes synchronously (blocked, then waited for).
fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Waits up to `timeout` for one of the blocked signals; returns it.
fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` and `ts` are valid for the call; no siginfo is asked for.
    let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

fn parent_is(parent: i32) -> bool {
    // SAFETY: getppid has no memory effects.
    unsafe { libc::getppid() == parent }
}

/// Runs the keeper; returns its exit code.
pub fn run(args: &KeepArgs) -> i32 {
    let set = signal_set();
    // Blocked before the command exists, so a stop request arriving at any
    // moment from now on is pending, never lost. (Before this point the
    // default action of SIGTERM simply ends the keeper, which has started
    // nothing yet.) The command gets an empty mask back, below.
    // SAFETY: `set` is initialised; the old mask is not needed.
    unsafe {
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    if !parent_is(args.parent) {
        return 1;
    }
    if procs::become_subreaper().is_err() {
        return 1;
    }
    let Some((program, rest)) = args.command.split_first() else {
        return 127;
    };
    let mut command = std::process::Command::new(program);
    command.args(rest).process_group(0);
    // SAFETY: sigprocmask is async-signal-safe and touches only `empty`.
    unsafe {
        command.pre_exec(|| {
            // A blocked mask is inherited across exec: without this, the
            // command would never see the SIGTERM meant for it.
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = command.spawn();
    let Ok(child) = child else {
        return 127;
    };
    let Ok(group) = i32::try_from(child.id()) else {
        return 127;
    };
    // The std handle is not used to wait: every child is reaped below.
    drop(child);
    let mut status = None;
    loop {
        let sig = wait_signal(&set, Duration::from_millis(100));
        let reaped = procs::reap_all(|pid, st| {
            if pid == group {
                status = Some(st);
            }
        });
        if reaped == Reaped::None {
            // The command and every descendant ended on their own.
            return status.map_or(0, procs::exit_code);
        }
        let stop = matches!(sig, Some(s) if s != libc::SIGCHLD);
        if stop || !parent_is(args.parent) {
            return stop_tree(group, args.grace, &set);
        }
    }
}

/// SIGTERM to the tree, SIGKILL after `grace`, reap everything.
fn stop_tree(group: i32, grace: Duration, set: &libc::sigset_t) -> i32 {
    let me = std::process::id() as i32;
    let started = Instant::now();
    let table = procs::scan();
    // The group gets one SIGTERM (a shell trap must not run twice); the
    // descendants that left it get theirs one by one.
    let tree = procs::descendants(&table, me);
    for p in table
        .iter()
        .filter(|p| p.pgrp != group && tree.contains(&p.pid))
    {
        procs::signal(p.pid, libc::SIGTERM);
    }
    procs::signal(-group, libc::SIGTERM);
    loop {
        if procs::reap_all(|_, _| {}) == Reaped::None {
            return 0;
        }
        let left = grace.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        wait_signal(set, left.min(Duration::from_millis(50)));
    }
    procs::signal(-group, libc::SIGKILL);
    let deadline = Instant::now() + KILL_BUDGET.max(grace);
    loop {
        // A killed process's children are re-parented to the keeper, so
        // each round finds what the previous one left.
        for pid in procs::descendants(&procs::scan(), me) {
            procs::signal(pid, libc::SIGKILL);
        }
        if procs::reap_all(|_, _| {}) == Reaped::None {
            return 0;
        }
        if Instant::now() >= deadline {
            break;
        }
        wait_signal(set, Duration::from_millis(10));
    }
    // Give up loudly: a keeper dead by a signal makes elect sweep.
    procs::signal(me, libc::SIGKILL);
    1
}
