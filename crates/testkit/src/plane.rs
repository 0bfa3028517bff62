//! Starting, stopping and disturbing a real kube-apiserver + etcd.
//!
//! All process management goes through `controlplane/lib/controlplane.py`, the
//! same code behind `controlplane/up` and `controlplane/down`, so tests run the
//! control plane exactly as the README tells users to.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Deserialize;

use crate::ksm::KubeStateMetrics;
use crate::namespace::TestNamespace;
use crate::proxy::FaultProxy;

/// Number of agent identities every test control plane is started with.
pub const AGENTS: u32 = 5;

/// Namespace `controlplane/up` creates, with a `leasehold-lease` Role and one
/// RoleBinding per agent.
pub const BASE_NAMESPACE: &str = "leasehold";

/// One of the two processes of the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// The etcd server.
    Etcd,
    /// The Kubernetes API server.
    ApiServer,
}

impl Component {
    fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::ApiServer => "kube-apiserver",
        }
    }
}

#[derive(Debug, Deserialize)]
struct State {
    apiserver_port: u16,
    etcd_client_port: u16,
    agents: u32,
}

/// A running local control plane. [`ControlPlane::shared`] gives the one that
/// a whole test binary shares; [`ControlPlane::dedicated`] gives one that a
/// disruptive test (pausing or stopping components) owns alone.
///
/// Processes are stopped when a dedicated plane is dropped, and in every case
/// when the test process exits, however it exits: a watchdog child holds the
/// read end of a pipe whose write end only this process holds, and runs
/// `controlplane/down` when it sees end-of-file.
pub struct ControlPlane {
    dir: PathBuf,
    apiserver_port: u16,
    etcd_client_port: u16,
    agents: u32,
    // Keeps the watchdog's pipe open for as long as this plane lives.
    watchdog: Mutex<Option<(Child, ChildStdin)>>,
    // Started on first use; `down` (run by the watchdog) stops it.
    ksm: OnceLock<KubeStateMetrics>,
    ksm_starting: Mutex<()>,
    _tempdir: tempfile::TempDir,
}

static SHARED: OnceLock<ControlPlane> = OnceLock::new();

impl ControlPlane {
    /// The control plane shared by every test in this binary, started on
    /// first use. Panics with the reason if it cannot be started, since no
    /// test that asks for it could run.
    pub fn shared() -> &'static ControlPlane {
        SHARED.get_or_init(|| {
            ControlPlane::start(AGENTS)
                .unwrap_or_else(|e| panic!("cannot start the local control plane: {e:#}"))
        })
    }

    /// A control plane of this test's own, stopped when dropped.
    pub fn dedicated() -> Result<ControlPlane> {
        ControlPlane::start(AGENTS)
    }

    fn start(agents: u32) -> Result<ControlPlane> {
        let tempdir = tempfile::Builder::new()
            .prefix("leasehold-controlplane-")
            .tempdir()
            .context("creating a directory for the control plane")?;
        let dir = tempdir.path().to_path_buf();
        let up = Command::new(script("up"))
            .args([
                "--dir".as_ref(),
                dir.as_os_str(),
                "--agents".as_ref(),
                agents.to_string().as_ref(),
            ])
            .stdin(Stdio::null())
            .output()
            .context("running controlplane/up")?;
        if !up.status.success() {
            // Whatever `up` managed to start must not outlive us.
            let _ = Command::new(script("down")).arg("--dir").arg(&dir).output();
            bail!(
                "controlplane/up failed ({}):\n{}",
                up.status,
                String::from_utf8_lossy(&up.stderr)
            );
        }
        let watchdog = spawn_watchdog(&dir)?;
        let state: State = serde_json::from_slice(
            &std::fs::read(dir.join("state.json"))
                .context("reading the control plane's state.json")?,
        )
        .context("parsing the control plane's state.json")?;
        Ok(ControlPlane {
            dir,
            apiserver_port: state.apiserver_port,
            etcd_client_port: state.etcd_client_port,
            agents: state.agents,
            watchdog: Mutex::new(Some(watchdog)),
            ksm: OnceLock::new(),
            ksm_starting: Mutex::new(()),
            _tempdir: tempdir,
        })
    }

    /// Number of agent identities (`agent-1` ..= `agent-N`).
    pub fn agents(&self) -> u32 {
        self.agents
    }

    /// The `leasehold` namespace made by `controlplane/up`, shared by all
    /// tests of this plane: prefer [`ControlPlane::namespace`] in tests.
    pub async fn base_namespace(&self) -> Result<TestNamespace> {
        TestNamespace::base(self).await
    }

    /// The directory `controlplane/up` wrote its kubeconfigs, pids and logs to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The API server's loopback address.
    pub fn apiserver_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.apiserver_port))
    }

    /// etcd's client address (plain HTTP on loopback; the API server is
    /// its only other client).
    pub fn etcd_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.etcd_client_port))
    }

    /// Calls etcd's HTTP/JSON gateway: `POST /v3/{path}` with `body`.
    pub fn etcd_call(&self, path: &str, body: &serde_json::Value) -> Result<serde_json::Value> {
        etcd_post(self.etcd_addr(), path, body)
    }

    /// etcd's current revision (the newest `resourceVersion` of anything).
    pub fn etcd_revision(&self) -> Result<i64> {
        let reply = self.etcd_call(
            "kv/range",
            &serde_json::json!({"key": base64(b"leasehold-testkit/"), "count_only": true}),
        )?;
        header_revision(&reply)
    }

    /// Writes `value` at `key` directly into etcd, beside the API server's
    /// data; returns the new revision. Moves the revision on without
    /// touching any Kubernetes object.
    pub fn etcd_put(&self, key: &str, value: &str) -> Result<i64> {
        let reply = self.etcd_call(
            "kv/put",
            &serde_json::json!({"key": base64(key.as_bytes()), "value": base64(value.as_bytes())}),
        )?;
        header_revision(&reply)
    }

    /// Compacts etcd's history up to `revision` (physically): watches and
    /// reads from older revisions then fail with "compacted", which the API
    /// server answers with 410 Gone.
    pub fn etcd_compact(&self, revision: i64) -> Result<()> {
        self.etcd_call(
            "kv/compaction",
            &serde_json::json!({"revision": revision.to_string(), "physical": true}),
        )?;
        Ok(())
    }

    /// Path of the kubeconfig of a user in `system:masters`.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// Path of agent `k`'s kubeconfig (1-based). Agents have no rights of
    /// their own beyond what RoleBindings give them.
    pub fn agent_kubeconfig(&self, k: u32) -> PathBuf {
        assert!(
            (1..=self.agents).contains(&k),
            "agent {k} does not exist: this control plane has agents 1..={}",
            self.agents
        );
        self.dir.join(format!("agent-{k}.kubeconfig"))
    }

    /// The user name agent `k` authenticates as.
    pub fn agent_user(k: u32) -> String {
        format!("system:serviceaccount:{BASE_NAMESPACE}:agent-{k}")
    }

    /// Client configuration of the admin user.
    pub async fn admin_config(&self) -> Result<kube::Config> {
        config_from(&self.admin_kubeconfig()).await
    }

    /// Client configuration of agent `k`, talking to the API server directly.
    pub async fn agent_config(&self, k: u32) -> Result<kube::Config> {
        config_from(&self.agent_kubeconfig(k)).await
    }

    /// Client configuration of agent `k` whose every connection goes through
    /// `proxy`, so faults can be injected on this agent's traffic alone.
    pub async fn agent_config_via(&self, k: u32, proxy: &FaultProxy) -> Result<kube::Config> {
        let mut config = self.agent_config(k).await?;
        config.cluster_url = format!("https://{}", proxy.addr())
            .parse()
            .context("building the proxy URL")?;
        Ok(config)
    }

    /// A client of the admin user (call from inside the runtime that uses it).
    pub async fn admin_client(&self) -> Result<kube::Client> {
        Ok(kube::Client::try_from(self.admin_config().await?)?)
    }

    /// A client of agent `k` (call from inside the runtime that uses it).
    pub async fn agent_client(&self, k: u32) -> Result<kube::Client> {
        Ok(kube::Client::try_from(self.agent_config(k).await?)?)
    }

    /// The kube-state-metrics of this plane, started on first use (blocks
    /// for a few seconds then) and stopped with the plane.
    pub fn kube_state_metrics(&self) -> Result<&KubeStateMetrics> {
        if let Some(ksm) = self.ksm.get() {
            return Ok(ksm);
        }
        let _starting = self
            .ksm_starting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(ksm) = self.ksm.get() {
            return Ok(ksm);
        }
        let ksm = KubeStateMetrics::start(self)?;
        Ok(self.ksm.get_or_init(|| ksm))
    }

    /// A kubeconfig file of agent `k` (written into `dir`) whose every
    /// connection goes through `proxy`, for an agent process cut off alone.
    pub fn agent_kubeconfig_via(&self, k: u32, proxy: &FaultProxy, dir: &Path) -> Result<PathBuf> {
        let text = std::fs::read_to_string(self.agent_kubeconfig(k))?;
        let mut kc: serde_json::Value =
            serde_json::from_str(&text).context("the agent kubeconfig is JSON")?;
        let clusters = kc["clusters"]
            .as_array_mut()
            .context("clusters in the agent kubeconfig")?;
        for c in clusters {
            c["cluster"]["server"] = format!("https://{}", proxy.addr()).into();
        }
        let path = dir.join(format!("agent-{k}-via-proxy.kubeconfig"));
        std::fs::write(&path, serde_json::to_vec(&kc)?)?;
        Ok(path)
    }

    /// A fault-injecting TCP proxy in front of this API server.
    pub fn fault_proxy(&self) -> Result<FaultProxy> {
        FaultProxy::start(self.apiserver_addr())
    }

    /// A fresh namespace with the `leasehold-lease` Role (leases: get, list,
    /// watch, create, update, patch) bound to every agent.
    pub async fn namespace(&self, prefix: &str) -> Result<TestNamespace> {
        TestNamespace::create(self, prefix, crate::namespace::LEASE_VERBS).await
    }

    /// A fresh namespace whose Role grants only `verbs` on leases, for tests
    /// of agents with narrower rights (for example no `watch`).
    pub async fn namespace_with_verbs(
        &self,
        prefix: &str,
        verbs: &[&str],
    ) -> Result<TestNamespace> {
        TestNamespace::create(self, prefix, verbs).await
    }

    /// Freezes a component with SIGSTOP: connections stay open, nothing answers.
    /// Returns once every thread of the process is stopped (SIGSTOP takes
    /// effect asynchronously; a request sent at once could still be served).
    pub fn pause(&self, c: Component) -> Result<()> {
        self.signal(c, "STOP")?;
        let pid = self.pid(c)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !all_threads_stopped(pid) {
            if std::time::Instant::now() > deadline {
                bail!(
                    "{} (pid {pid}) did not stop within 5 s of SIGSTOP",
                    c.name()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// Lets a paused component run again with SIGCONT.
    pub fn resume(&self, c: Component) -> Result<()> {
        self.signal(c, "CONT")
    }

    /// Stops a component and waits until its process has exited.
    pub fn stop(&self, c: Component) -> Result<()> {
        self.component_command("stop", c)
    }

    /// Kills a component with SIGKILL, as a crash would (no graceful
    /// shutdown, open connections cut), and waits until it is gone. Faster
    /// than [`ControlPlane::stop`] for an API server with open watches.
    pub fn kill(&self, c: Component) -> Result<()> {
        let pid = self.pid(c)?;
        self.signal(c, "KILL")?;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while crate::process_running(pid) {
            if std::time::Instant::now() > deadline {
                bail!("{} (pid {pid}) survived SIGKILL for 10 s", c.name());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Forget it, so that it can be started again.
        self.stop(c)
    }

    /// Starts a stopped component again on the same ports and data, and waits
    /// until it is ready (`/health` for etcd, `/readyz` for the API server).
    pub fn start_again(&self, c: Component) -> Result<()> {
        self.component_command("start", c)
    }

    fn component_command(&self, verb: &str, c: Component) -> Result<()> {
        let out = Command::new("python3")
            .arg(controlplane_dir().join("lib/controlplane.py"))
            .args([verb, "--dir"])
            .arg(&self.dir)
            .arg(c.name())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running controlplane {verb} {}", c.name()))?;
        if !out.status.success() {
            bail!(
                "controlplane {verb} {} failed: {}",
                c.name(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// The pid of a running component, as recorded in `DIR/pids`.
    pub fn pid(&self, c: Component) -> Result<u32> {
        let pids =
            std::fs::read_to_string(self.dir.join("pids")).context("reading the pids file")?;
        pids.lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(name, _)| *name == c.name())
            .and_then(|(_, pid)| pid.trim().parse().ok())
            .ok_or_else(|| {
                anyhow!(
                    "{} is not running (not in {}/pids)",
                    c.name(),
                    self.dir.display()
                )
            })
    }

    fn signal(&self, c: Component, sig: &str) -> Result<()> {
        let pid = self.pid(c)?;
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .context("running kill")?;
        if !status.success() {
            bail!("kill -{sig} {pid} ({}) failed", c.name());
        }
        Ok(())
    }

    /// Stops both components, and kube-state-metrics if it was started,
    /// now (also done on drop and at process exit).
    pub fn shutdown(&self) {
        let taken = self.watchdog.lock().map(|mut w| w.take()).unwrap_or(None);
        if let Some((mut child, stdin)) = taken {
            // Closing the pipe is the watchdog's signal to run `down`.
            drop(stdin);
            let _ = child.wait();
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn controlplane_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../controlplane")
}

pub(crate) fn script(name: &str) -> PathBuf {
    controlplane_dir().join(name)
}

fn spawn_watchdog(dir: &Path) -> Result<(Child, ChildStdin)> {
    use std::os::unix::process::CommandExt;
    // `read` returns at end-of-file, i.e. when this process has closed the
    // pipe or died; then the plane is stopped and its directory removed. Its own process group keeps a terminal's Ctrl-C (sent to
    // the test's group) from killing it before it has cleaned up.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("read _ignored; \"$0\" --dir \"$1\" >/dev/null 2>&1; rm -rf \"$1\"")
        .arg(script("down"))
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting the control plane watchdog")?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| anyhow!("watchdog has no stdin"))?;
    // Nothing is ever written; flushing an empty buffer checks the pipe.
    stdin.flush()?;
    Ok((child, stdin))
}

/// One HTTP/1.0 request to etcd's gateway (no chunked replies to decode).
fn etcd_post(
    addr: std::net::SocketAddr,
    path: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value> {
    use std::io::Read;
    let body = body.to_string();
    let mut conn = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connecting to etcd at {addr}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(
        conn,
        "POST /v3/{path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = Vec::new();
    conn.read_to_end(&mut reply)
        .with_context(|| format!("reading etcd's reply to {path}"))?;
    let reply = String::from_utf8_lossy(&reply);
    let (head, payload) = reply
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("etcd {path}: malformed reply {reply:?}"))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        bail!("etcd {path}: {status}: {payload}");
    }
    serde_json::from_str(payload).with_context(|| format!("etcd {path}: {payload}"))
}

fn header_revision(reply: &serde_json::Value) -> Result<i64> {
    let rev = &reply["header"]["revision"];
    rev.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| rev.as_i64())
        .ok_or_else(|| anyhow!("etcd reply without a revision: {reply}"))
}

/// Standard base64 with padding (etcd's gateway wants keys and values so).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(crate) async fn config_from(path: &Path) -> Result<kube::Config> {
    let kubeconfig =
        Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading {}", path.display()))?;
    // Tests must never hang on a dead server for kube's 295 s default.
    config.read_timeout = Some(Duration::from_secs(30));
    config.connect_timeout = Some(Duration::from_secs(10));
    Ok(config)
}

/// Whether every thread of `pid` is stopped (state `T` or `t`), read from
/// `/proc/PID/task/*/stat`.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|t| t.ok()).all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with(['T', 't']))
            })
            .unwrap_or(true)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(super::base64(plain.as_bytes()), encoded);
        }
    }
}
