//! Harness for `leasehold run` tests: agent processes on the real control
//! plane, each writing to its own `file` output, and the checks that judge
//! them from what they wrote (the events' own `@timestamp`s), never from
//! what an agent says about itself.

#![allow(dead_code)]

pub mod access;
pub mod cluster;
pub mod docs;
pub mod static_http;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

/// Lease timings of the test policies, in seconds: duration, renew
/// deadline, retry period (the smallest whole seconds the rule allows).
pub const LEASE_S: u64 = 3;
pub const RENEW_S: u64 = 2;
pub const RETRY_S: u64 = 1;

/// Slack for a small, busy CI machine on every bound derived from timings.
pub const MARGIN: Duration = Duration::from_secs(3);

/// The binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_leasehold")
}

/// What a finished command printed, stdout then stderr, for assertions on
/// a CLI's words wherever it put them.
pub fn printed(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The test policy: a gated and a node-local `exec` input printing a line
/// every 50 ms, each agent writing to `${env.OUT_DIR}`.
pub fn policy(lease: &str, extra_inputs: &str) -> String {
    format!(
        r#"providers:
  kubernetes_leaderelection:
    leader_lease: {lease}
    namespace: ${{env.POD_NAMESPACE}}
    identity: ${{env.POD_NAME}}
    leader_leaseduration: {LEASE_S}
    leader_renewdeadline: {RENEW_S}
    leader_retryperiod: {RETRY_S}
agent:
  shutdown_timeout: 10s
outputs:
  default:
    type: file
    path: ${{env.OUT_DIR}}
    filename: events
inputs:
  - id: gated
    type: exec
    condition: ${{kubernetes_leaderelection.leader}} == true
    command: [sh, -c, 'while :; do echo gated; sleep 0.05; done']
  - id: local
    type: exec
    command: [sh, -c, 'while :; do echo local; sleep 0.05; done']
{extra_inputs}"#
    )
}

/// Lines written to stderr so far, and a signal for new ones.
#[derive(Default)]
struct Log {
    lines: Mutex<Vec<String>>,
    more: Condvar,
    /// stderr reached its end: every line the process wrote is in `lines`.
    ended: Mutex<bool>,
    end: Condvar,
}

/// One `leasehold run` process.
pub struct AgentProc {
    /// `agent-K`, its identity.
    pub name: String,
    /// Where its file output writes.
    pub out: PathBuf,
    /// Its monitoring address.
    pub http: std::net::SocketAddr,
    child: Child,
    log: Arc<Log>,
}

impl AgentProc {
    /// Starts agent `k` (identity `agent-k`) with `policy` in namespace `ns`,
    /// writing to `out`, and waits until its monitoring server is up.
    pub fn start(
        policy: &Path,
        kubeconfig: &Path,
        k: u32,
        ns: &str,
        out: &Path,
    ) -> Result<AgentProc> {
        let mut a = Self::spawn(policy, kubeconfig, k, ns, out)?;
        a.wait_ready()?;
        Ok(a)
    }

    /// Agent 1 in namespace `default`, for policies without elections
    /// (outputs under test), writing to `out`.
    pub fn start_alone(
        plane: &leasehold_testkit::ControlPlane,
        policy: &Path,
        out: &Path,
    ) -> Result<AgentProc> {
        Self::start(policy, &plane.agent_kubeconfig(1), 1, "default", out)
    }

    /// Starts the process without waiting for it (see
    /// [`AgentProc::wait_ready`]), so several agents can start together.
    pub fn spawn(
        policy: &Path,
        kubeconfig: &Path,
        k: u32,
        ns: &str,
        out: &Path,
    ) -> Result<AgentProc> {
        Self::spawn_with_env(policy, kubeconfig, k, ns, out, &[])
    }

    /// As [`AgentProc::spawn`], with more environment variables.
    pub fn spawn_with_env(
        policy: &Path,
        kubeconfig: &Path,
        k: u32,
        ns: &str,
        out: &Path,
        env: &[(&str, String)],
    ) -> Result<AgentProc> {
        let name = format!("agent-{k}");
        let mut child = Command::new(binary())
            .args(["run", "-c"])
            .arg(policy)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--http", "127.0.0.1:0", "--log-level", "info"])
            .env("POD_NAME", &name)
            .env("POD_NAMESPACE", ns)
            .env("OUT_DIR", out)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting leasehold run")?;
        let log = Arc::new(Log::default());
        let stderr = child.stderr.take().context("stderr")?;
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lines.lock().unwrap().push(line);
                sink.more.notify_all();
            }
            *sink.ended.lock().unwrap() = true;
            sink.end.notify_all();
        });
        Ok(AgentProc {
            name,
            out: out.to_path_buf(),
            http: "127.0.0.1:1".parse().unwrap(),
            child,
            log,
        })
    }

    /// Sends SIGTERM and requires a clean exit (code 0) within 15 s; the
    /// error carries the agent's log.
    pub fn stop_cleanly(&mut self) -> Result<()> {
        self.signal(libc::SIGTERM);
        let code = self.wait_exit(Duration::from_secs(15))?;
        if code != Some(0) {
            bail!(
                "{} exited with {code:?} after SIGTERM; log:\n{}",
                self.name,
                self.log()
            );
        }
        Ok(())
    }

    /// Waits until the monitoring server is up and learns its address.
    pub fn wait_ready(&mut self) -> Result<()> {
        let agent = self;
        let line = agent
            .wait_log("monitoring on http://", Duration::from_secs(15))
            .with_context(|| format!("{} did not start", agent.name))?;
        let addr = line
            .split("monitoring on http://")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .ok_or_else(|| anyhow!("no address in {line:?}"))?;
        agent.http = addr
            .parse()
            .with_context(|| format!("address in {line:?}"))?;
        Ok(())
    }

    /// Waits for a stderr line containing `needle`.
    pub fn wait_log(&self, needle: &str, within: Duration) -> Result<String> {
        let deadline = Instant::now() + within;
        let mut lines = self.log.lines.lock().unwrap();
        loop {
            if let Some(l) = lines.iter().find(|l| l.contains(needle)) {
                return Ok(l.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                bail!(
                    "{}: no log line with {needle:?} within {within:?}; log:\n{}",
                    self.name,
                    lines.join("\n")
                );
            }
            lines = self.log.more.wait_timeout(lines, deadline - now).unwrap().0;
        }
    }

    /// Everything logged so far.
    pub fn log(&self) -> String {
        self.log.lines.lock().unwrap().join("\n")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal.
    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child by its pid.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Waits for the exit (bounded) and returns the exit code.
    pub fn wait_exit(&mut self, within: Duration) -> Result<Option<i32>> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait()? {
                // The last lines it wrote may still be in the pipe: wait
                // for its end (bounded: a child of its own could hold it).
                let ended = self.log.ended.lock().unwrap();
                let _ = self
                    .log
                    .end
                    .wait_timeout_while(ended, Duration::from_secs(5), |e| !*e)
                    .unwrap();
                return Ok(s.code());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} did not exit within {within:?}; log:\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// GET `path` on the monitoring server: (status, body).
    pub fn get(&self, path: &str) -> Result<(u16, String)> {
        http_get(self.http, path)
    }

    /// `/status` as JSON.
    pub fn status(&self) -> Result<Value> {
        let (code, body) = self.get("/status")?;
        if code != 200 {
            bail!("/status answered {code}: {body}");
        }
        Ok(serde_json::from_str(&body)?)
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 GET over loopback.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("bad response {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    // Chunked bodies: drop the chunk sizes.
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    };
    Ok((code, body))
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// One event as the tests need it.
#[derive(Debug, Clone)]
pub struct Ev {
    /// The agent whose output holds it (`agent.name`).
    pub agent: String,
    /// `input.id`.
    pub input: String,
    /// `@timestamp` in microseconds since the epoch.
    pub at: i64,
    /// `leader.term`, when stamped.
    pub term: Option<i64>,
    /// `leader.lease`, when stamped.
    pub lease: Option<String>,
    /// `message`.
    pub message: String,
}

/// Every event in the `events.ndjson*` files of `dir`, in file order
/// (rotated files first).
pub fn read_events(dir: &Path) -> Result<Vec<Ev>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("events.ndjson"))
        })
        .collect();
    // events.ndjson.N (oldest first), then events.ndjson.
    files.sort_by_key(|p| {
        let n = p
            .to_string_lossy()
            .rsplit('.')
            .next()
            .and_then(|s| s.parse::<u32>().ok());
        std::cmp::Reverse(n.unwrap_or(0))
    });
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f)?;
        for line in complete_lines(&text) {
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("{}: bad line {line:?}", f.display()))?;
            out.push(Ev {
                agent: v["agent"]["name"].as_str().unwrap_or_default().to_string(),
                input: v["input"]["id"].as_str().unwrap_or_default().to_string(),
                at: parse_ts(v["@timestamp"].as_str().unwrap_or_default())?,
                term: v["leader"]["term"].as_i64(),
                lease: v["leader"]["lease"].as_str().map(str::to_string),
                message: v["message"].as_str().unwrap_or_default().to_string(),
            });
        }
    }
    Ok(out)
}

/// The lines of `text` that end in a newline: a line an agent is writing
/// right now is read next time, whole.
pub fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| l.trim_end_matches(['\n', '\r']))
}

/// RFC 3339 to microseconds since the epoch.
pub fn parse_ts(s: &str) -> Result<i64> {
    let t: jiff::Timestamp = s.parse().with_context(|| format!("bad @timestamp {s:?}"))?;
    Ok(t.as_microsecond())
}

/// Now, in microseconds since the epoch.
pub fn now_us() -> i64 {
    jiff::Timestamp::now().as_microsecond()
}

/// The gated events' time ranges: one per (agent, term), first and last
/// `@timestamp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub agent: String,
    pub term: i64,
    pub first: i64,
    pub last: i64,
    pub count: usize,
}

/// Groups the events of input `input` by (agent, term).
pub fn ranges(events: &[Ev], input: &str) -> Result<Vec<Range>> {
    let mut by: BTreeMap<(String, i64), Range> = BTreeMap::new();
    for e in events.iter().filter(|e| e.input == input) {
        let term = e
            .term
            .ok_or_else(|| anyhow!("gated event without leader.term: {e:?}"))?;
        let r = by.entry((e.agent.clone(), term)).or_insert(Range {
            agent: e.agent.clone(),
            term,
            first: e.at,
            last: e.at,
            count: 0,
        });
        r.first = r.first.min(e.at);
        r.last = r.last.max(e.at);
        r.count += 1;
    }
    let mut v: Vec<Range> = by.into_values().collect();
    v.sort_by_key(|r| r.first);
    Ok(v)
}

/// The safety check: ranges of different agents never overlap, and terms
/// increase from one range to the next. Returns the ranges.
pub fn check_one_at_a_time(events: &[Ev], input: &str) -> Result<Vec<Range>> {
    let rs = ranges(events, input)?;
    for (i, a) in rs.iter().enumerate() {
        for b in &rs[i + 1..] {
            if a.agent != b.agent && b.first <= a.last {
                bail!(
                    "two agents produced gated events at once: {a:?} and {b:?}\nall ranges: {rs:#?}"
                );
            }
        }
    }
    for w in rs.windows(2) {
        if w[1].term <= w[0].term {
            bail!(
                "leader.term did not increase at a handover: {:?} then {:?}\nall ranges: {rs:#?}",
                w[0],
                w[1]
            );
        }
    }
    Ok(rs)
}

/// All events of all `dirs`.
pub fn all_events(dirs: &[&Path]) -> Result<Vec<Ev>> {
    let mut v = Vec::new();
    for d in dirs {
        if d.exists() {
            v.extend(read_events(d)?);
        }
    }
    Ok(v)
}

/// Waits (polling the outputs, bounded) until some agent other than those
/// in `not` writes a gated event after `after_us`; returns its name and the
/// event's time.
pub fn wait_gated_from(
    dirs: &[&Path],
    not: &[&str],
    after_us: i64,
    within: Duration,
) -> Result<(String, i64)> {
    let deadline = Instant::now() + within;
    loop {
        let evs = all_events(dirs)?;
        if let Some(e) = evs
            .iter()
            .filter(|e| e.input == "gated" && e.at > after_us && !not.contains(&e.agent.as_str()))
            .min_by_key(|e| e.at)
        {
            return Ok((e.agent.clone(), e.at));
        }
        if Instant::now() >= deadline {
            bail!(
                "no gated event from an agent other than {not:?} after {after_us} within {within:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Largest gap between consecutive events of `input` from `agent` within
/// `[from, to]`, in microseconds.
pub fn largest_gap(events: &[Ev], agent: &str, input: &str, from: i64, to: i64) -> i64 {
    let mut ts: Vec<i64> = events
        .iter()
        .filter(|e| e.agent == agent && e.input == input && e.at >= from && e.at <= to)
        .map(|e| e.at)
        .collect();
    ts.sort_unstable();
    let mut edges = vec![from];
    edges.extend(ts);
    edges.push(to);
    edges.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
}
