//! The real kube-state-metrics, watching a test control plane as an
//! identity that may only list and watch what it exports.
//!
//! Started and stopped through `controlplane/ksm`, the same script a user
//! runs; the binary is built and cached by `controlplane/build`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;

use crate::plane::{ControlPlane, config_from, script};
use crate::process::process_running;

/// Bound of one scrape: connecting, sending and reading the whole reply.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// What `controlplane/ksm up` records in `DIR/ksm.json`.
#[derive(Debug, Deserialize)]
struct Info {
    pid: u32,
    #[serde(default = "loopback")]
    host: std::net::Ipv4Addr,
    port: u16,
    telemetry_port: u16,
    kubeconfig: PathBuf,
}

/// A running kube-state-metrics (`--host 127.0.0.1`), exporting namespaces,
/// nodes, pods, deployments, daemonsets and leases of one control plane.
/// Stopped when dropped, and in any case with its plane (`controlplane/down`
/// stops it too). At most one runs per plane: prefer
/// [`ControlPlane::kube_state_metrics`], which shares it.
pub struct KubeStateMetrics {
    dir: PathBuf,
    /// Which shard it is, if started as one.
    shard: Option<u32>,
    pid: u32,
    host: std::net::Ipv4Addr,
    port: u16,
    telemetry_port: u16,
    kubeconfig: PathBuf,
}

impl KubeStateMetrics {
    /// Runs `controlplane/ksm up` for `plane` and returns once it is ready
    /// (every resource listed, `/metrics` answering). Blocks for a few
    /// seconds; fails if one already runs for this plane.
    pub fn start(plane: &ControlPlane) -> Result<KubeStateMetrics> {
        Self::start_with(plane, None, None)
    }

    /// Starts shard `shard` of `total` (`--shard`, `--total-shards`),
    /// serving `/metrics` on `addr`: several shards can share one port on
    /// different loopback addresses (127.0.1.I), so that a policy can name
    /// shard I's host from the shard number alone.
    pub fn start_shard(
        plane: &ControlPlane,
        shard: u32,
        total: u32,
        addr: std::net::SocketAddrV4,
    ) -> Result<KubeStateMetrics> {
        Self::start_with(plane, Some((shard, total)), Some(addr))
    }

    fn start_with(
        plane: &ControlPlane,
        shard: Option<(u32, u32)>,
        addr: Option<std::net::SocketAddrV4>,
    ) -> Result<KubeStateMetrics> {
        let dir = plane.dir().to_path_buf();
        let mut cmd = Command::new(script("ksm"));
        cmd.arg("up").arg("--dir").arg(&dir);
        if let Some((i, n)) = shard {
            cmd.args(["--shard", &i.to_string(), "--total-shards", &n.to_string()]);
        }
        if let Some(a) = addr {
            cmd.args([
                "--host",
                &a.ip().to_string(),
                "--port",
                &a.port().to_string(),
            ]);
        }
        let up = cmd
            .stdin(Stdio::null())
            .output()
            .context("running controlplane/ksm up")?;
        if !up.status.success() {
            bail!(
                "controlplane/ksm up failed ({}):\n{}",
                up.status,
                String::from_utf8_lossy(&up.stderr)
            );
        }
        let file = match shard {
            None => "ksm.json".to_string(),
            Some((i, _)) => format!("ksm-shard-{i}.json"),
        };
        let info: Info = serde_json::from_slice(
            &std::fs::read(dir.join(&file)).with_context(|| format!("reading {file}"))?,
        )
        .with_context(|| format!("parsing {file}"))?;
        Ok(KubeStateMetrics {
            dir,
            shard: shard.map(|(i, _)| i),
            pid: info.pid,
            host: info.host,
            port: info.port,
            telemetry_port: info.telemetry_port,
            kubeconfig: info.kubeconfig,
        })
    }

    /// The URL of the exported object metrics.
    pub fn url(&self) -> String {
        format!("http://{}:{}/metrics", self.host, self.port)
    }

    /// The URL of kube-state-metrics' metrics about itself.
    pub fn telemetry_url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.telemetry_port)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The kubeconfig of its identity (list and watch only).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Client configuration of its identity, to check what it may not do.
    pub async fn config(&self) -> Result<kube::Config> {
        config_from(&self.kubeconfig).await
    }

    /// One blocking `GET /metrics`, bounded by [`SCRAPE_TIMEOUT`]; the body
    /// in the Prometheus text format.
    pub fn scrape(&self) -> Result<String> {
        http_get(SocketAddr::from((self.host, self.port)), "/metrics")
    }

    /// One blocking `GET /metrics` of its own telemetry.
    pub fn scrape_telemetry(&self) -> Result<String> {
        http_get(
            SocketAddr::from(([127, 0, 0, 1], self.telemetry_port)),
            "/metrics",
        )
    }

    /// Runs `controlplane/ksm down` (SIGTERM, then SIGKILL after a bounded
    /// wait); nothing happens if it already stopped.
    pub fn stop(&self) -> Result<()> {
        let mut cmd = Command::new(script("ksm"));
        cmd.arg("down").arg("--dir").arg(&self.dir);
        if let Some(i) = self.shard {
            cmd.args(["--shard", &i.to_string()]);
        }
        let down = cmd
            .stdin(Stdio::null())
            .output()
            .context("running controlplane/ksm down")?;
        if !down.status.success() {
            bail!(
                "controlplane/ksm down failed ({}):\n{}",
                down.status,
                String::from_utf8_lossy(&down.stderr)
            );
        }
        Ok(())
    }
}

impl Drop for KubeStateMetrics {
    fn drop(&mut self) {
        // Usually already stopped with its plane.
        if process_running(self.pid) {
            let _ = self.stop();
        }
    }
}

fn loopback() -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::LOCALHOST
}

/// A blocking HTTP/1.0 GET (the reply is then neither chunked nor kept
/// alive) of `path` on `addr`; fails unless the status is 200.
fn http_get(addr: SocketAddr, path: &str) -> Result<String> {
    let deadline = std::time::Instant::now() + SCRAPE_TIMEOUT;
    let mut conn = TcpStream::connect_timeout(&addr, SCRAPE_TIMEOUT)
        .with_context(|| format!("connecting to {addr}"))?;
    conn.set_write_timeout(Some(SCRAPE_TIMEOUT))?;
    write!(conn, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .with_context(|| format!("sending GET {path} to {addr}"))?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            bail!("GET http://{addr}{path}: no complete reply within {SCRAPE_TIMEOUT:?}");
        }
        conn.set_read_timeout(Some(left))?;
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("reading GET http://{addr}{path}")),
        }
    }
    let reply = String::from_utf8(reply)
        .with_context(|| format!("GET http://{addr}{path}: the reply is not UTF-8"))?;
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("GET http://{addr}{path}: malformed reply"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("GET http://{addr}{path}: {status}");
    }
    Ok(body.to_owned())
}
