//! Election candidates as real processes (`leasehold elect` or the client-go
//! peer in `interop/clientgo`), which share one command line and print one
//! JSON object per line on every change. A [`Fleet`] runs several, turns
//! their lines into [`Report`]s, and judges from the candidates' own
//! timestamps that no two of them ever claim to lead at once.
//!
//! The judgement exempts nobody: a leader that was told to stop leads until
//! the line in which it says it no longer does (or, if it dies without one,
//! until its death was observed here), and a successor's `leading` line must
//! come after that.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::overlap::{Interval, Overlap, now_micros, overlaps, parse_rfc3339_micros};

/// What a candidate process said about itself.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// It holds the lease and runs leader-only work.
    Leading,
    /// It is a candidate and somebody else (or nobody) holds the lease.
    Following,
    /// Its last line: it has left the election at shutdown.
    Stopped,
}

/// One JSON line of a candidate, plus when this process read it.
#[derive(Debug, Clone, Deserialize)]
pub struct Report {
    /// RFC 3339 UTC timestamp written by the candidate.
    pub ts: String,
    /// The candidate's identity.
    pub identity: String,
    /// Its state after the change.
    pub state: State,
    /// The holder it believes in, if any.
    pub holder: Option<String>,
    /// The term (leaseTransitions) while leading.
    pub term: Option<i64>,
    /// When the line was read here (monotonic).
    #[serde(skip, default = "Instant::now")]
    pub received: Instant,
}

impl Report {
    /// `ts` in unix microseconds (checked when the line is read, so this
    /// is `Some` for every report a [`Fleet`] hands out).
    pub fn micros(&self) -> Option<i64> {
        parse_rfc3339_micros(&self.ts)
    }
}

/// Which implementation a candidate runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `leasehold elect`.
    Leasehold,
    /// client-go's `leaderelection` (`interop/clientgo`).
    ClientGo,
}

/// How to start one candidate.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Implementation, for reporting and for choosing whom to stop.
    pub kind: Kind,
    /// The program: `leasehold` (then `elect` is passed first) or the client-go peer.
    pub program: PathBuf,
    /// Lease name.
    pub lease: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// Candidate identity.
    pub identity: String,
    /// Kubeconfig the candidate authenticates with.
    pub kubeconfig: PathBuf,
    /// `--lease-duration`, `--renew-deadline`, `--retry-period` values, e.g. `["3s", "2s", "500ms"]`.
    pub timings: [String; 3],
    /// Further arguments (for example `--no-release`).
    pub extra: Vec<String>,
}

// Events carry the run (one process of a member) they come from.
enum Event {
    Line(usize, Result<Report, String>),
    // Stdout closed, i.e. the process is gone; wall time (µs) it was seen.
    Exited(usize, i64),
}

struct Member {
    spec: Spec,
    child: Option<Child>,
    leading: bool,
    // Printed a line since it was (re)started, so its signal handlers are set.
    reported: bool,
    // Index of its current (or last) run in `Fleet::runs`.
    run: usize,
}

/// One process of a member, from start to exit.
struct Run {
    member: usize,
    number: usize,
    reports: Vec<Report>,
    exited_at: Option<i64>,
}

/// Several candidates on one Lease, watched line by line.
pub struct Fleet {
    members: Vec<Member>,
    runs: Vec<Run>,
    events_tx: mpsc::UnboundedSender<Event>,
    events: mpsc::UnboundedReceiver<Event>,
    history: Vec<Report>,
}

/// One candidate process's leadership of one term, from its own lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeadingSpan {
    /// Index of the member in its fleet.
    pub member: usize,
    /// The member's identity.
    pub identity: String,
    /// Which start of that member (0 for the first process, 1 after one
    /// restart, …).
    pub run: usize,
    /// The term it printed.
    pub term: Option<i64>,
    /// `ts` of its `leading` line, unix µs.
    pub start: i64,
    /// `ts` of its next line that is not `leading` for that term; or, if it
    /// died still leading, when its death was observed; `None` while it
    /// runs and still says it leads.
    pub end: Option<i64>,
}

impl Default for Fleet {
    fn default() -> Self {
        Fleet::new()
    }
}

impl Fleet {
    /// An empty fleet.
    pub fn new() -> Fleet {
        let (events_tx, events) = mpsc::unbounded_channel();
        Fleet {
            members: Vec::new(),
            runs: Vec::new(),
            events_tx,
            events,
            history: Vec::new(),
        }
    }

    /// Starts a candidate and returns its index in this fleet.
    pub fn spawn(&mut self, spec: Spec) -> Result<usize> {
        let idx = self.members.len();
        self.members.push(Member {
            spec,
            child: None,
            leading: false,
            reported: false,
            run: usize::MAX,
        });
        self.restart(idx)?;
        Ok(idx)
    }

    /// Starts member `idx` again (after it stopped), with the same identity,
    /// as a restarted container of the same pod would.
    pub fn restart(&mut self, idx: usize) -> Result<()> {
        let run = self.runs.len();
        let number = self.runs.iter().filter(|r| r.member == idx).count();
        let m = &mut self.members[idx];
        if m.child.is_some() {
            bail!("{} is still running", m.spec.identity);
        }
        let s = &m.spec;
        let mut cmd = Command::new(&s.program);
        if s.kind == Kind::Leasehold {
            cmd.arg("elect");
        }
        cmd.args([
            "--lease",
            &s.lease,
            "--namespace",
            &s.namespace,
            "--identity",
            &s.identity,
        ])
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .args([
            "--lease-duration",
            &s.timings[0],
            "--renew-deadline",
            &s.timings[1],
        ])
        .args(["--retry-period", &s.timings[2]])
        .args(&s.extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
        // A program file just written may still be open for writing in a
        // child another thread forked and has not yet exec'd: exec then
        // fails with ETXTBSY until that child execs. Retried, bounded.
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                r => break r.with_context(|| format!("starting {}", s.program.display()))?,
            }
        };
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let tx = self.events_tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let parsed = serde_json::from_str::<Report>(&line)
                    .map_err(|e| format!("{e}: {line}"))
                    .and_then(|r| match r.micros() {
                        Some(_) => Ok(r),
                        None => Err(format!("bad ts: {line}")),
                    });
                if tx.send(Event::Line(run, parsed)).is_err() {
                    return;
                }
            }
            let _ = tx.send(Event::Exited(run, now_micros()));
        });
        m.child = Some(child);
        m.reported = false;
        m.leading = false;
        m.run = run;
        self.runs.push(Run {
            member: idx,
            number,
            reports: Vec::new(),
            exited_at: None,
        });
        Ok(())
    }

    /// The spec of member `idx`.
    pub fn spec(&self, idx: usize) -> &Spec {
        &self.members[idx].spec
    }

    /// Number of members, running or not.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the fleet has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether member `idx` is running.
    pub fn is_running(&self, idx: usize) -> bool {
        self.members[idx].child.is_some()
    }

    /// The member that last said it leads and has not said otherwise since.
    pub fn leader(&self) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.leading && m.child.is_some())
    }

    /// Every report so far, in arrival order.
    pub fn history(&self) -> &[Report] {
        &self.history
    }

    /// The identity of member `idx`.
    pub fn identity(&self, idx: usize) -> &str {
        &self.members[idx].spec.identity
    }

    /// The last line member `idx` printed since it was last started.
    pub fn last_report(&self, idx: usize) -> Option<&Report> {
        let m = &self.members[idx];
        self.runs.get(m.run).and_then(|r| r.reports.last())
    }

    /// Every leading interval so far, from the candidates' own lines,
    /// ordered by start.
    pub fn leading_spans(&self) -> Vec<LeadingSpan> {
        let mut out = Vec::new();
        for run in &self.runs {
            let identity = &self.members[run.member].spec.identity;
            let mut open: Option<(Option<i64>, i64)> = None;
            for r in &run.reports {
                let ts = r.micros().unwrap_or(i64::MIN);
                let leading = r.state == State::Leading;
                if let Some((term, start)) = open {
                    if leading && r.term == term {
                        continue;
                    }
                    out.push(LeadingSpan {
                        member: run.member,
                        identity: identity.clone(),
                        run: run.number,
                        term,
                        start,
                        end: Some(ts),
                    });
                    open = None;
                }
                if leading {
                    open = Some((r.term, ts));
                }
            }
            if let Some((term, start)) = open {
                out.push(LeadingSpan {
                    member: run.member,
                    identity: identity.clone(),
                    run: run.number,
                    term,
                    start,
                    end: run.exited_at,
                });
            }
        }
        out.sort_by_key(|l| l.start);
        out
    }

    /// Pairs of leading intervals (of different processes or terms) that
    /// share time, judged from the candidates' `ts` (empty is good).
    pub fn overlaps(&self) -> Vec<Overlap> {
        let intervals: Vec<Interval> = self
            .leading_spans()
            .into_iter()
            .map(|l| Interval {
                label: format!(
                    "{} (start {}) leading term {}",
                    l.identity,
                    l.run,
                    l.term.map_or("?".into(), |t| t.to_string())
                ),
                start: l.start,
                end: l.end,
            })
            .collect();
        overlaps(&intervals)
    }

    /// [`Fleet::overlaps`] as text: moments where two candidates claimed to
    /// lead at once (empty is good).
    pub fn violations(&self) -> Vec<String> {
        self.overlaps().iter().map(ToString::to_string).collect()
    }

    /// Handles events until `done` holds for a report, or fails after `within`.
    pub async fn wait_for(
        &mut self,
        within: Duration,
        what: &str,
        mut done: impl FnMut(&Fleet, usize, &Report) -> bool,
    ) -> Result<(usize, Report)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let event = tokio::time::timeout_at(deadline, self.events.recv())
                .await
                .map_err(|_| anyhow!("{what}: not within {within:?}; {}", self.recent(40)))?
                .ok_or_else(|| anyhow!("event channel closed"))?;
            if let Some((idx, report)) = self.apply(event)?
                && done(self, idx, &report)
            {
                return Ok((idx, report));
            }
        }
    }

    /// Waits until member `idx` has printed its first line since it was
    /// started. Both candidate programs set up their signal handling before
    /// that line, so a SIGTERM sent earlier could kill one unhandled.
    pub async fn wait_started(&mut self, idx: usize, within: Duration) -> Result<()> {
        if self.members[idx].reported {
            return Ok(());
        }
        let what = format!("{} to start", self.members[idx].spec.identity);
        self.wait_for(within, &what, |f, _, _| f.members[idx].reported)
            .await?;
        Ok(())
    }

    /// Waits until some running member leads; returns it and its latest
    /// report. Reports read while waiting for something else (say, a process
    /// to exit) count too.
    pub async fn wait_for_leader(&mut self, within: Duration) -> Result<(usize, Report)> {
        if self.leader().is_none() {
            self.wait_for(within, "a leader", |f, _, _| f.leader().is_some())
                .await?;
        }
        let idx = self.leader().ok_or_else(|| anyhow!("leader vanished"))?;
        let identity = &self.members[idx].spec.identity;
        let report = self.history.iter().rev().find(|r| &r.identity == identity);
        Ok((
            idx,
            report
                .cloned()
                .ok_or_else(|| anyhow!("leader without a report"))?,
        ))
    }

    /// The last `n` reports, one per line, for error messages.
    pub fn recent(&self, n: usize) -> String {
        let skip = self.history.len().saturating_sub(n);
        let mut text = format!(
            "last {} of {} reports:",
            self.history.len() - skip,
            self.history.len()
        );
        for r in &self.history[skip..] {
            text.push_str(&format!(
                "\n  {} {} {:?} holder={} term={}",
                r.ts,
                r.identity,
                r.state,
                r.holder.as_deref().unwrap_or("-"),
                r.term.map_or("-".into(), |t| t.to_string())
            ));
        }
        text
    }

    /// Handles every event for `window` (a bounded observation, for
    /// showing that nothing more happens).
    pub async fn observe(&mut self, window: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + window;
        while let Ok(event) = tokio::time::timeout_at(deadline, self.events.recv()).await {
            let event = event.ok_or_else(|| anyhow!("event channel closed"))?;
            self.apply(event)?;
        }
        Ok(())
    }

    /// Handles the events that have already arrived, without waiting.
    pub fn drain(&mut self) -> Result<()> {
        while let Ok(event) = self.events.try_recv() {
            self.apply(event)?;
        }
        Ok(())
    }

    /// Whether the fleet is settled: a running member leads, and every other
    /// running member's last line says it follows that leader.
    pub fn settled(&self) -> Option<usize> {
        let leader = self.leader()?;
        let id = self.identity(leader);
        let all_follow = (0..self.members.len())
            .filter(|&i| i != leader && self.members[i].child.is_some())
            .all(|i| {
                self.last_report(i)
                    .is_some_and(|r| r.state == State::Following && r.holder.as_deref() == Some(id))
            });
        all_follow.then_some(leader)
    }

    /// Waits until the fleet is [settled](Fleet::settled); returns the leader.
    pub async fn wait_settled(&mut self, within: Duration) -> Result<usize> {
        self.drain()?;
        if let Some(l) = self.settled() {
            return Ok(l);
        }
        self.wait_for(within, "a leader followed by every candidate", |f, _, _| {
            f.settled().is_some()
        })
        .await?;
        self.settled()
            .ok_or_else(|| anyhow!("settled fleet unsettled"))
    }

    /// Checks that every member is still a candidate: its process runs and
    /// its last line is `leading` or `following`. Returns what is wrong.
    pub fn still_candidates(&mut self) -> Result<()> {
        self.drain()?;
        let mut wrong = Vec::new();
        for idx in 0..self.members.len() {
            let id = self.members[idx].spec.identity.clone();
            let exited = match self.members[idx].child.as_mut() {
                None => Some("is not running".to_string()),
                Some(c) => match c.try_wait() {
                    Ok(None) => None,
                    Ok(Some(status)) => Some(format!("exited ({status})")),
                    Err(e) => Some(format!("cannot be waited on: {e}")),
                },
            };
            if let Some(why) = exited {
                wrong.push(format!("{id} {why}"));
                continue;
            }
            match self.last_report(idx).map(|r| &r.state) {
                Some(State::Leading | State::Following) => {}
                other => wrong.push(format!("{id}'s last line is {other:?}")),
            }
        }
        if !wrong.is_empty() {
            bail!(
                "not every member is still a candidate: {}",
                wrong.join("; ")
            );
        }
        Ok(())
    }

    fn apply(&mut self, event: Event) -> Result<Option<(usize, Report)>> {
        match event {
            Event::Exited(run, at) => {
                self.runs[run].exited_at = Some(at);
                let idx = self.runs[run].member;
                if self.members[idx].run == run {
                    self.members[idx].leading = false;
                }
                Ok(None)
            }
            Event::Line(run, parsed) => {
                let idx = self.runs[run].member;
                let report = parsed.map_err(|e| {
                    anyhow!(
                        "{} printed a bad line: {e}",
                        self.members[idx].spec.identity
                    )
                })?;
                self.runs[run].reports.push(report.clone());
                if self.members[idx].run == run {
                    self.members[idx].leading = report.state == State::Leading;
                    self.members[idx].reported = true;
                }
                self.history.push(report.clone());
                Ok(Some((idx, report)))
            }
        }
    }

    /// Sends SIGTERM to member `idx` (once it has started) and waits
    /// (bounded) until it has exited, handling its last reports. Fails if it
    /// does not exit with status 0.
    pub async fn terminate(&mut self, idx: usize, within: Duration) -> Result<()> {
        self.wait_started(idx, within).await?;
        let pid = self.members[idx]
            .child
            .as_ref()
            .and_then(|c| c.id())
            .ok_or_else(|| anyhow!("not running"))?;
        signal(pid, "TERM")?;
        let status = self.reap(idx, within).await?;
        if !status.success() {
            bail!(
                "{} exited with {status} after SIGTERM",
                self.members[idx].spec.identity
            );
        }
        Ok(())
    }

    /// Kills member `idx` with SIGKILL (no release) and waits until it is gone.
    pub async fn kill(&mut self, idx: usize, within: Duration) -> Result<()> {
        let child = self.members[idx]
            .child
            .as_mut()
            .ok_or_else(|| anyhow!("not running"))?;
        child.start_kill()?;
        self.reap(idx, within).await?;
        Ok(())
    }

    async fn reap(&mut self, idx: usize, within: Duration) -> Result<std::process::ExitStatus> {
        let identity = self.members[idx].spec.identity.clone();
        let run = self.members[idx].run;
        let deadline = tokio::time::Instant::now() + within;
        // Drain its output first, so its last lines are judged in order.
        while self.runs[run].exited_at.is_none() {
            let event = tokio::time::timeout_at(deadline, self.events.recv())
                .await
                .map_err(|_| anyhow!("{identity} did not exit within {within:?}"))?
                .ok_or_else(|| anyhow!("event channel closed"))?;
            self.apply(event)?;
        }
        let mut child = self.members[idx]
            .child
            .take()
            .ok_or_else(|| anyhow!("not running"))?;
        let status = tokio::time::timeout_at(deadline, child.wait())
            .await
            .map_err(|_| {
                anyhow!("{identity} closed stdout but did not exit within {within:?}")
            })??;
        self.members[idx].leading = false;
        Ok(status)
    }

    /// Stops every running member with SIGTERM (used at the end of a test).
    pub async fn shutdown(&mut self, within: Duration) -> Result<()> {
        for idx in 0..self.members.len() {
            if self.members[idx].child.is_some() {
                self.terminate(idx, within).await?;
            }
        }
        Ok(())
    }
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{sig} {pid} failed");
    }
    Ok(())
}

/// Path of the client-go peer, built (once per source version) by
/// `interop/clientgo/build`.
pub fn clientgo_candidate() -> Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../interop/clientgo/build");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("running interop/clientgo/build")?;
    if !out.status.success() {
        bail!("interop/clientgo/build failed ({})", out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout
        .lines()
        .last()
        .ok_or_else(|| anyhow!("interop/clientgo/build printed no path"))?;
    Ok(PathBuf::from(path.trim()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const WITHIN: Duration = Duration::from_secs(10);

    fn line(id: &str, ts: &str, state: &str, term: &str) -> String {
        format!(
            "echo '{{\"ts\":\"{ts}\",\"identity\":\"{id}\",\"state\":\"{state}\",\"holder\":null,\"term\":{term}}}'\n"
        )
    }

    /// A fake candidate: prints `first`, then on SIGTERM prints `on_term` and
    /// exits 0.
    fn script(dir: &Path, id: &str, first: &[String], on_term: &[String]) -> Spec {
        let mut body = String::from("#!/bin/sh\n");
        body.push_str(&format!(
            "trap '{}exit 0' TERM\n",
            on_term.concat().replace('\n', "; ").replace('\'', "'\\''")
        ));
        body.push_str(&first.concat());
        body.push_str("i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n");
        let path = dir.join(id);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Spec {
            kind: Kind::ClientGo,
            program: path,
            lease: "l".into(),
            namespace: "n".into(),
            identity: id.into(),
            kubeconfig: "/dev/null".into(),
            timings: ["3s", "2s", "500ms"].map(String::from),
            extra: Vec::new(),
        }
    }

    // One test: every script is written before any process starts (a script
    // still open for writing while another thread forks cannot be run).
    #[tokio::test]
    async fn a_stopped_or_killed_leader_is_not_exempt() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Leads from 10:00:00; told to stop, it says so as of 10:00:03.
        let slow = script(
            d,
            "slow",
            &[line("slow", "2000-01-01T10:00:00.000000Z", "leading", "1")],
            &[line(
                "slow",
                "2000-01-01T10:00:03.000000Z",
                "stopped",
                "null",
            )],
        );
        // Claims to lead from 10:00:02, before the other one let go.
        let early = script(
            d,
            "early",
            &[line("early", "2000-01-01T10:00:02.000000Z", "leading", "2")],
            &[],
        );
        // Leads from 10:00:00 and is killed; its death is seen now, long after.
        let killed = script(
            d,
            "killed",
            &[line(
                "killed",
                "2000-01-01T10:00:00.000000Z",
                "leading",
                "1",
            )],
            &[],
        );
        let after = script(
            d,
            "after",
            &[line("after", "2000-01-01T10:00:05.000000Z", "leading", "2")],
            &[],
        );

        let mut fleet = Fleet::new();
        let a = fleet.spawn(slow).unwrap();
        fleet.wait_for_leader(WITHIN).await.unwrap();
        fleet.terminate(a, WITHIN).await.unwrap();
        assert!(fleet.violations().is_empty(), "{:?}", fleet.violations());
        let b = fleet.spawn(early).unwrap();
        fleet.wait_started(b, WITHIN).await.unwrap();
        let found = fleet.overlaps();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].micros, Some(1_000_000));
        fleet.shutdown(WITHIN).await.unwrap();

        let mut fleet = Fleet::new();
        let k = fleet.spawn(killed).unwrap();
        fleet.wait_for_leader(WITHIN).await.unwrap();
        fleet.kill(k, WITHIN).await.unwrap();
        let n = fleet.spawn(after).unwrap();
        fleet.wait_started(n, WITHIN).await.unwrap();
        let found = fleet.overlaps();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].first.label.starts_with("killed"), "{found:?}");
        assert!(found[0].first.end.is_some(), "{found:?}");
        fleet.shutdown(WITHIN).await.unwrap();
    }
}
