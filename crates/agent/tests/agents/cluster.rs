//! A cluster of `leasehold run` agents with one policy on the real control
//! plane, each writing to its own file output, and the checks shared by the
//! failover tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use leasehold_testkit::{ControlPlane, LeaseAdmin, TestNamespace};

use super::*;

pub struct Cluster<'p> {
    pub plane: &'p ControlPlane,
    pub ns: TestNamespace,
    pub lease: LeaseAdmin,
    pub policy: PathBuf,
    pub outs: Vec<PathBuf>,
    pub agents: Vec<Option<AgentProc>>,
    /// When each agent's current process was started.
    pub started: Vec<i64>,
    _dir: tempfile::TempDir,
}

impl<'p> Cluster<'p> {
    pub async fn start(
        plane: &'p ControlPlane,
        prefix: &str,
        n: u32,
        policy_text: Option<String>,
    ) -> Result<Cluster<'p>> {
        let ns = plane.namespace(prefix).await?;
        Self::start_in(plane, ns, n, policy_text).await
    }

    /// As [`Cluster::start`], in namespace `ns` (for narrower or wider
    /// rights than [`ControlPlane::namespace`] grants).
    pub async fn start_in(
        plane: &'p ControlPlane,
        ns: TestNamespace,
        n: u32,
        policy_text: Option<String>,
    ) -> Result<Cluster<'p>> {
        let dir = tempfile::Builder::new()
            .prefix("leasehold-run-")
            .tempdir()?;
        let path = dir.path().join("policy.yml");
        std::fs::write(
            &path,
            policy_text.unwrap_or_else(|| policy("run-lease", "")),
        )?;
        let lease = LeaseAdmin::new(plane.admin_client().await?, ns.name(), "run-lease");
        let mut c = Cluster {
            plane,
            ns,
            lease,
            policy: path,
            outs: (1..=n)
                .map(|k| dir.path().join(format!("out-{k}")))
                .collect(),
            agents: Vec::new(),
            started: vec![0; n as usize],
            _dir: dir,
        };
        // All at once, as a DaemonSet's pods start.
        for k in 1..=n {
            c.started[k as usize - 1] = now_us();
            let a = AgentProc::spawn(
                &c.policy,
                &c.plane.agent_kubeconfig(k),
                k,
                c.ns.name(),
                &c.outs[k as usize - 1],
            )?;
            c.agents.push(Some(a));
        }
        for a in c.agents.iter_mut().flatten() {
            a.wait_ready()?;
        }
        Ok(c)
    }

    /// Adds agent `k` (the next after the last) to the cluster, started.
    pub fn add(&mut self, k: u32) -> Result<()> {
        anyhow::ensure!(
            k as usize == self.agents.len() + 1,
            "agents are added in order"
        );
        let out = self.outs[0].with_file_name(format!("out-{k}"));
        self.outs.push(out);
        self.started.push(0);
        let a = self.spawn(k)?;
        self.agents.push(Some(a));
        Ok(())
    }

    pub fn spawn(&mut self, k: u32) -> Result<AgentProc> {
        self.started[k as usize - 1] = now_us();
        AgentProc::start(
            &self.policy,
            &self.plane.agent_kubeconfig(k),
            k,
            self.ns.name(),
            &self.outs[k as usize - 1],
        )
    }

    pub fn index(name: &str) -> usize {
        name.trim_start_matches("agent-")
            .parse::<usize>()
            .unwrap_or(1)
            - 1
    }

    pub fn agent(&self, name: &str) -> &AgentProc {
        self.agents[Self::index(name)]
            .as_ref()
            .expect("agent running")
    }

    pub fn dirs(&self) -> Vec<&Path> {
        self.outs.iter().map(PathBuf::as_path).collect()
    }

    pub fn events(&self) -> Result<Vec<Ev>> {
        all_events(&self.dirs())
    }

    /// Waits for the first gated event and returns who wrote it.
    pub fn leader_after(&self, after: i64, not: &[&str]) -> Result<String> {
        Ok(self.first_gated_after(after, not)?.0)
    }

    /// The first gated event after `after` from an agent not in `not`: who
    /// wrote it and when.
    fn first_gated_after(&self, after: i64, not: &[&str]) -> Result<(String, i64)> {
        let bound = Duration::from_secs(LEASE_S + RENEW_S + 2 * RETRY_S) + MARGIN;
        wait_gated_from(&self.dirs(), not, after, bound)
    }

    /// The agent writing gated events now.
    pub fn current_leader(&self) -> Result<String> {
        self.leader_after(now_us(), &[])
    }

    /// Safety over everything written so far, and node-local events from
    /// every running agent (no gap above one second while it ran).
    pub fn check(&self, from: i64) -> Result<Vec<Range>> {
        let evs = self.events()?;
        let rs = check_one_at_a_time(&evs, "gated")?;
        let to = now_us() - 200_000;
        for (a, started) in self.agents.iter().zip(&self.started) {
            let Some(a) = a else { continue };
            let since = from.max(first_local(&evs, &a.name, *started));
            let gap = largest_gap(&evs, &a.name, "local", since, to);
            if gap > 1_000_000 {
                bail!(
                    "{}: node-local events stopped for {} ms",
                    a.name,
                    gap / 1000
                );
            }
        }
        Ok(rs)
    }

    /// Makes `name` lead again by stopping (SIGTERM) whoever leads instead,
    /// at most twice, then restarts those stopped: proof that `name` stayed
    /// a candidate. Returns the time of `name`'s first gated event as leader.
    pub fn lead_again(&mut self, name: &str) -> Result<i64> {
        let mut stopped = Vec::new();
        for _ in 0..self.agents.len() {
            let now = now_us();
            let not: Vec<&str> = stopped.iter().map(String::as_str).collect();
            let (leader, first) = self.first_gated_after(now, &not)?;
            if leader == name {
                for s in stopped {
                    let k = Self::index(&s);
                    self.agents[k] = Some(self.spawn(k as u32 + 1)?);
                }
                return Ok(first);
            }
            let i = Self::index(&leader);
            let mut a = self.agents[i].take().context("leader not running")?;
            a.stop_cleanly()?;
            stopped.push(leader);
        }
        bail!("{name} never led again")
    }
}

pub fn first_local(evs: &[Ev], agent: &str, since: i64) -> i64 {
    evs.iter()
        .filter(|e| e.agent == agent && e.input == "local" && e.at >= since)
        .map(|e| e.at)
        .min()
        .unwrap_or(i64::MAX / 2)
}

pub fn last_gated_of(evs: &[Ev], agent: &str, term: i64) -> Option<i64> {
    evs.iter()
        .filter(|e| e.input == "gated" && e.agent == agent && e.term == Some(term))
        .map(|e| e.at)
        .max()
}

/// The last gated event of the term `agent` led when `before` came (its
/// newest term begun before then), judged one term at a time.
pub fn last_gated_before(evs: &[Ev], agent: &str, before: i64) -> Result<i64> {
    let rs = check_one_at_a_time(evs, "gated")?;
    let term = rs
        .iter()
        .filter(|r| r.agent == agent && r.first < before)
        .map(|r| r.term)
        .max()
        .context("old term")?;
    last_gated_of(evs, agent, term).context("old leader's events")
}

pub fn term_of(rs: &[Range], agent: &str) -> Result<i64> {
    rs.iter()
        .rev()
        .find(|r| r.agent == agent)
        .map(|r| r.term)
        .context("no term for the leader")
}
