//! Election candidates as real processes (`leasehold elect` or the client-go
//! peer in `interop/clientgo`), which share one command line and print one
//! JSON object per line on every change. A [`Fleet`] runs several, turns
//! their lines into [`Report`]s, and checks as reports arrive that no two
//! candidates ever claim to lead at once.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

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

enum Event {
    Line(usize, Result<Report, String>),
    Exited(usize),
}

struct Member {
    spec: Spec,
    child: Option<Child>,
    leading: bool,
    // Signalled to stop: its leadership may end at any moment until it exits.
    departing: bool,
    // Printed a line since it was (re)started, so its signal handlers are set.
    reported: bool,
}

/// Several candidates on one Lease, watched line by line.
pub struct Fleet {
    members: Vec<Member>,
    events_tx: mpsc::UnboundedSender<Event>,
    events: mpsc::UnboundedReceiver<Event>,
    violations: Vec<String>,
    history: Vec<Report>,
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
            events_tx,
            events,
            violations: Vec::new(),
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
            departing: false,
            reported: false,
        });
        self.restart(idx)?;
        Ok(idx)
    }

    /// Starts member `idx` again (after it stopped), with the same identity,
    /// as a restarted container of the same pod would.
    pub fn restart(&mut self, idx: usize) -> Result<()> {
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
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", s.program.display()))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let tx = self.events_tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let parsed =
                    serde_json::from_str::<Report>(&line).map_err(|e| format!("{e}: {line}"));
                if tx.send(Event::Line(idx, parsed)).is_err() {
                    return;
                }
            }
            let _ = tx.send(Event::Exited(idx));
        });
        m.child = Some(child);
        m.departing = false;
        m.reported = false;
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

    /// Moments where two candidates claimed to lead at once (empty is good).
    pub fn violations(&self) -> &[String] {
        &self.violations
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
                .map_err(|_| {
                    anyhow!(
                        "{what}: not within {within:?}; reports so far: {:#?}",
                        self.history
                    )
                })?
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

    fn apply(&mut self, event: Event) -> Result<Option<(usize, Report)>> {
        match event {
            Event::Exited(idx) => {
                self.members[idx].leading = false;
                Ok(None)
            }
            Event::Line(idx, parsed) => {
                let report = parsed.map_err(|e| {
                    anyhow!(
                        "{} printed a bad line: {e}",
                        self.members[idx].spec.identity
                    )
                })?;
                let leading = report.state == State::Leading;
                if leading {
                    for (other, m) in self.members.iter().enumerate() {
                        if other != idx && m.leading && m.child.is_some() && !m.departing {
                            self.violations.push(format!(
                                "{} reported leading (term {:?}) at {} while {} was leading",
                                report.identity, report.term, report.ts, m.spec.identity
                            ));
                        }
                    }
                }
                self.members[idx].leading = leading;
                self.members[idx].reported = true;
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
        self.members[idx].departing = true;
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
        self.members[idx].departing = true;
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
        let deadline = tokio::time::Instant::now() + within;
        // Drain its output first, so its last lines are judged in order.
        loop {
            let event = tokio::time::timeout_at(deadline, self.events.recv())
                .await
                .map_err(|_| anyhow!("{identity} did not exit within {within:?}"))?
                .ok_or_else(|| anyhow!("event channel closed"))?;
            let exited = matches!(event, Event::Exited(i) if i == idx);
            self.apply(event)?;
            if exited {
                break;
            }
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
        self.members[idx].departing = false;
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
