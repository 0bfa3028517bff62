//! Leader-only work that leaves its own evidence: a command for
//! `leasehold elect -- …` that appends `<identity> <term> <unix µs> <pid>`
//! to a shared file every ~20 ms while it runs. Overlap is then judged from
//! what the work wrote, not from what the elector said about it.
//!
//! The sampler is one bash process that never forks while sampling: the
//! timestamp is `$EPOCHREALTIME` and the pause is a `read -t` on a FIFO
//! nobody writes to. Its loop is bounded (it ends once a stop file exists or
//! the sample file is gone, both done when the [`WorkLog`] is dropped, and
//! after a maximum number of samples), so a sampler that escaped its elector
//! cannot run on forever.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

use crate::overlap::{Interval, Overlap, overlaps};

/// Pause between samples, in seconds (as `read -t` takes it).
const PERIOD: &str = "0.02";
/// Longest a sampler runs: this many samples (at least 5 minutes).
const MAX_SAMPLES: u32 = 15_000;

// $1 file, $2 fifo, $3 stop file, $4 identity. LEASEHOLD_TERM comes from elect.
const SAMPLER: &str = r#"exec 3>>"$1" 4<>"$2"
for ((i = 0; i < MAX; i++)); do
  [[ -e $3 || ! -e $1 ]] && exit 0
  printf '%s %s %s %s\n' "$4" "${LEASEHOLD_TERM:--}" "${EPOCHREALTIME/[.,]/}" "$BASHPID" >&3
  read -t PERIOD -u 4 _
done"#;

/// One line a sampler wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Identity of the candidate whose command wrote it.
    pub identity: String,
    /// `LEASEHOLD_TERM` the command was started with.
    pub term: i64,
    /// When, unix microseconds.
    pub at: i64,
    /// The sampler's pid (one per run of the command).
    pub pid: u32,
}

/// Samples of one sampler process: one run of the leader-only work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkRun {
    /// Identity of the candidate.
    pub identity: String,
    /// Its term.
    pub term: i64,
    /// The sampler's pid.
    pub pid: u32,
    /// First sample, unix microseconds.
    pub first: i64,
    /// Last sample, unix microseconds.
    pub last: i64,
    /// Number of samples.
    pub count: usize,
}

/// A shared sample file in a temporary directory, and the commands that
/// write to it.
pub struct WorkLog {
    dir: tempfile::TempDir,
}

impl WorkLog {
    /// A new, empty log.
    pub fn new() -> Result<WorkLog> {
        let dir = tempfile::Builder::new()
            .prefix("leasehold-work-")
            .tempdir()
            .context("creating the work log directory")?;
        let status = std::process::Command::new("mkfifo")
            .arg(dir.path().join("pause"))
            .status()
            .context("running mkfifo")?;
        if !status.success() {
            bail!("mkfifo failed: {status}");
        }
        std::fs::write(dir.path().join("samples"), b"").context("creating the sample file")?;
        Ok(WorkLog { dir })
    }

    /// The file the samplers append to.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("samples")
    }

    fn script(&self) -> String {
        SAMPLER
            .replace("MAX", &MAX_SAMPLES.to_string())
            .replace("PERIOD", PERIOD)
    }

    fn args(&self, identity: &str, script: String) -> Vec<String> {
        let d = self.dir.path();
        vec![
            "--".into(),
            "bash".into(),
            "-c".into(),
            script,
            "sampler".into(),
            self.path().display().to_string(),
            d.join("pause").display().to_string(),
            d.join("stop").display().to_string(),
            identity.into(),
        ]
    }

    /// Arguments to append to `leasehold elect` (starting with `--`): the
    /// command is the sampler itself.
    pub fn command(&self, identity: &str) -> Vec<String> {
        self.args(identity, self.script())
    }

    /// Like [`WorkLog::command`], but the sampler runs in a child of the
    /// command (a shell that forks it and waits), as leader-only work that
    /// is a process tree does: stopping only the command's own process
    /// leaves the sampler running.
    pub fn forking_command(&self, identity: &str) -> Vec<String> {
        self.args(identity, format!("( {} ) & wait", self.script()))
    }

    /// Every sample so far, in file order. A torn last line (being written
    /// right now) is skipped.
    pub fn samples(&self) -> Result<Vec<Sample>> {
        let text = std::fs::read_to_string(self.path()).context("reading the sample file")?;
        let complete = match text.rfind('\n') {
            Some(n) => &text[..=n],
            None => "",
        };
        complete
            .lines()
            .map(|line| {
                let bad = || anyhow!("bad sample line {line:?}");
                let mut f = line.split(' ');
                let identity = f.next().ok_or_else(bad)?.to_string();
                let term = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
                let at = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
                let pid = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
                if f.next().is_some() {
                    return Err(bad());
                }
                Ok(Sample {
                    identity,
                    term,
                    at,
                    pid,
                })
            })
            .collect()
    }

    /// Samples grouped by sampler process (identity, term, pid), ordered by
    /// first sample.
    pub fn runs(&self) -> Result<Vec<WorkRun>> {
        let mut runs: BTreeMap<(String, i64, u32), WorkRun> = BTreeMap::new();
        for s in self.samples()? {
            let run = runs
                .entry((s.identity.clone(), s.term, s.pid))
                .or_insert(WorkRun {
                    identity: s.identity.clone(),
                    term: s.term,
                    pid: s.pid,
                    first: s.at,
                    last: s.at,
                    count: 0,
                });
            run.first = run.first.min(s.at);
            run.last = run.last.max(s.at);
            run.count += 1;
        }
        let mut runs: Vec<WorkRun> = runs.into_values().collect();
        runs.sort_by_key(|r| r.first);
        Ok(runs)
    }

    /// Pairs of runs of the work that ran at the same time, each run being
    /// `[first sample, last sample]`. Runs are told apart by identity, term
    /// and process, so two runs with the same term (a term reused) are
    /// judged against each other too.
    pub fn overlaps(&self) -> Result<Vec<Overlap>> {
        let intervals: Vec<Interval> = self
            .runs()?
            .into_iter()
            .map(|r| Interval {
                label: format!("work of {} term {} (pid {})", r.identity, r.term, r.pid),
                start: r.first,
                // Closed at the last sample: two samples at the same
                // microsecond are an overlap too.
                end: Some(r.last + 1),
            })
            .collect();
        Ok(overlaps(&intervals))
    }

    /// Waits (bounded) until `pred` holds for some sample; returns it.
    /// Polls the file every 20 ms: the samplers are separate processes with
    /// nothing to wait on.
    pub async fn wait_for_sample(
        &self,
        within: Duration,
        what: &str,
        mut pred: impl FnMut(&Sample) -> bool,
    ) -> Result<Sample> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(s) = self.samples()?.into_iter().find(|s| pred(s)) {
                return Ok(s);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("no sample {what} within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The directory holding the sample file.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for WorkLog {
    fn drop(&mut self) {
        // Any sampler still running (one that outlived its elector) exits
        // at its next sample, seeing the stop file or, once the directory
        // is removed, the sample file gone.
        let _ = std::fs::write(self.dir.path().join("stop"), b"");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(log: &WorkLog, args: &[String], term: &str) -> std::process::Child {
        // args[0] is "--", then the program and its arguments.
        std::process::Command::new(&args[1])
            .args(&args[2..])
            .env("LEASEHOLD_TERM", term)
            .spawn()
            .unwrap_or_else(|e| panic!("starting the sampler in {}: {e}", log.dir().display()))
    }

    fn wait_samples(log: &WorkLog, term: i64, at_least: usize) {
        for _ in 0..250 {
            let n = log
                .samples()
                .unwrap()
                .iter()
                .filter(|s| s.term == term)
                .count();
            if n >= at_least {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("fewer than {at_least} samples of term {term} within 5 s");
    }

    fn count(log: &WorkLog, term: i64) -> usize {
        log.samples()
            .unwrap()
            .iter()
            .filter(|s| s.term == term)
            .count()
    }

    #[test]
    fn samplers_write_until_killed_and_a_forked_one_until_the_log_is_dropped() {
        let log = WorkLog::new().unwrap();
        let mut direct = run(&log, &log.command("a"), "1");
        let mut forked = run(&log, &log.forking_command("b"), "2");
        wait_samples(&log, 1, 3);
        wait_samples(&log, 2, 3);
        direct.kill().unwrap();
        forked.kill().unwrap();
        direct.wait().unwrap();
        forked.wait().unwrap();
        let (a, b) = (count(&log, 1), count(&log, 2));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(count(&log, 1), a, "the sampler is the command: it died");
        assert!(count(&log, 2) > b, "the forked sampler outlives its shell");
        let s = log.samples().unwrap();
        assert!(
            s.iter().all(|s| (s.identity == "a") == (s.term == 1)),
            "{s:?}"
        );
        // Dropping the log stops it.
        std::fs::write(log.dir().join("stop"), b"").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let b = count(&log, 2);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            count(&log, 2),
            b,
            "the forked sampler ignored the stop file"
        );
        assert!(log.overlaps().unwrap().len() == 1, "a and b ran at once");
    }

    #[test]
    fn samples_parse_and_group_by_process() {
        let log = WorkLog::new().unwrap();
        std::fs::write(
            log.path(),
            "a 1 100 7\na 1 150 7\nb 2 140 9\nb 2 300 9\na 3 400 11\nb 2 31",
        )
        .unwrap();
        let runs = log.runs().unwrap();
        assert_eq!(runs.len(), 3);
        assert_eq!((runs[0].first, runs[0].last, runs[0].count), (100, 150, 2));
        let found = log.overlaps().unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].micros, Some(11));
    }
}
