//! A real Kubernetes node (containerd, kubelet, scheduler, controller
//! manager) beside the test control plane, run by `controlplane/node`:
//! pods are scheduled, started and logged for real.
//!
//! One node per machine (fixed ports, the `lh0` bridge): a test binary
//! takes it with [`Node::up`] and gives it back with [`Node::down`] (or on
//! drop, also when the test fails).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::plane::{ControlPlane, script};
use crate::tools;

/// The image name the agent's archive is imported under: the one the
/// shipped manifests name.
pub const AGENT_IMAGE: &str = "ghcr.io/leasehold/leasehold:0.1.0";
/// A busybox image for workloads (`sh`, `echo`, `sleep`).
pub const BUSYBOX_IMAGE: &str = "leasehold.local/busybox:1";

/// A running node; stopped by [`Node::down`] or on drop.
pub struct Node {
    work: tempfile::TempDir,
    kubeconfig: PathBuf,
    up: bool,
}

impl Node {
    /// Builds the images (the agent's from `agent_binary`, as the
    /// Dockerfile ships it) and brings a node up on `plane`, Ready.
    pub fn up(plane: &ControlPlane, agent_binary: &Path) -> Result<Node> {
        let work = tempfile::Builder::new()
            .prefix("leasehold-node-")
            .tempdir()?;
        let w = work.path().to_str().context("work path")?.to_string();
        let bin = agent_binary.to_str().context("agent path")?.to_string();
        node(&["images", "--work", &w, "--leasehold", &bin])?;
        let plane_dir = plane.dir().to_str().context("plane path")?.to_string();
        let mut node_ = Node {
            work,
            kubeconfig: plane.admin_kubeconfig(),
            up: true,
        };
        if let Err(e) = node(&["up", "--plane", &plane_dir, "--work", &w]) {
            node_.stop()?;
            return Err(e);
        }
        Ok(node_)
    }

    /// Where the node keeps its state and logs (`logs/kubelet.log`, …).
    pub fn work(&self) -> &Path {
        self.work.path()
    }

    /// Runs `kubectl` as the plane's admin; its standard output.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let kc = self.kubeconfig.to_str().context("kubeconfig path")?;
        let mut all = vec!["--kubeconfig", kc];
        all.extend_from_slice(args);
        tools::run(&tools::kubectl()?, &all, stdin)
    }

    /// Waits until the pods of `namespace` matching `selector` are at least
    /// `count` and all Ready; returns their names.
    pub fn wait_ready(
        &self,
        namespace: &str,
        selector: &str,
        count: usize,
        within: Duration,
    ) -> Result<Vec<String>> {
        let deadline = Instant::now() + within;
        loop {
            let out = self.kubectl(
                &["get", "pods", "-n", namespace, "-l", selector, "-o", "json"],
                None,
            )?;
            let list: serde_json::Value = serde_json::from_str(&out)?;
            let pods = list["items"].as_array().cloned().unwrap_or_default();
            let ready = |p: &serde_json::Value| {
                p["metadata"]["deletionTimestamp"].is_null()
                    && p["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
            };
            let live: Vec<&serde_json::Value> = pods
                .iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect();
            if live.len() >= count && live.iter().all(|p| ready(p)) {
                return Ok(live
                    .iter()
                    .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
                    .collect());
            }
            if Instant::now() > deadline {
                bail!(
                    "pods {selector} in {namespace}: {} of {count} Ready within {within:?}: {}",
                    live.iter().filter(|p| ready(p)).count(),
                    self.kubectl(&["get", "pods", "-n", namespace, "-o", "wide"], None)
                        .unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Stops the node: its pods get their grace period, then every process
    /// it started is stopped and the host is left as it was.
    pub fn down(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        if !self.up {
            return Ok(());
        }
        self.up = false;
        let w = self.work.path().to_str().context("work path")?.to_string();
        node(&["down", "--work", &w]).map(drop)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("stopping the node: {e:#}");
        }
    }
}

fn node(args: &[&str]) -> Result<String> {
    tools::run(&script("node"), args, None)
}
