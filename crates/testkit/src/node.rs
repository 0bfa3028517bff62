//! A real Kubernetes node (containerd, kubelet, scheduler, controller
//! manager) beside the test control plane, run by `controlplane/node`:
//! pods are scheduled, started and logged for real.
//!
//! One node per machine (fixed ports, the `lh0` bridge): a test binary
//! takes it with [`Node::up`] and gives it back with [`Node::down`] (or on
//! drop, also when the test fails).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::plane::{ControlPlane, script};
use crate::tools;

/// The image name the agent's archive is imported under: the one the
/// shipped manifests name.
pub const AGENT_IMAGE: &str = "ghcr.io/leasehold/leasehold:0.1.0";
/// A busybox image for workloads (`sh`, `echo`, `sleep`).
pub const BUSYBOX_IMAGE: &str = "leasehold.local/busybox:1";
/// kube-state-metrics, the version the plane builds, as an image.
pub const KSM_IMAGE: &str = "leasehold.local/kube-state-metrics:v2.20.0";
/// The kubelet's HTTPS port on the node (`controlplane/node`).
pub const KUBELET_PORT: u16 = 19650;

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

    /// Gives the imported image `source` the name `target` too, as a
    /// registry would serve a new tag of the same build.
    pub fn tag_image(&self, source: &str, target: &str) -> Result<()> {
        let w = self.work.path().to_str().context("work path")?;
        node(&["tag", "--work", w, source, target]).map(drop)
    }

    /// `GET path` of the kubelet as the bearer of `token` (verifying the
    /// kubelet's own serving certificate): the body, or the kubelet's
    /// refusal as the error. The token goes through a private kubeconfig,
    /// never a command line.
    pub fn kubelet_get(&self, path: &str, token: &str) -> Result<String> {
        let ca = self.work.path().join("kubelet/pki/kubelet.crt");
        let config = serde_json::json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "kubelet",
            "clusters": [{"name": "kubelet", "cluster": {
                "server": format!("https://127.0.0.1:{KUBELET_PORT}"),
                "certificate-authority": ca,
            }}],
            "users": [{"name": "bearer", "user": {"token": token}}],
            "contexts": [{"name": "kubelet", "context": {"cluster": "kubelet", "user": "bearer"}}],
        });
        let file = tempfile::Builder::new()
            .prefix("kubelet-")
            .tempfile_in(self.work.path())?;
        std::fs::write(file.path(), config.to_string())?;
        let kc = file.path().to_str().context("kubeconfig path")?;
        tools::run(
            &tools::kubectl()?,
            &["--kubeconfig", kc, "get", "--raw", path],
            None,
        )
    }

    /// Waits until the pods of `namespace` matching `selector` are at least
    /// `count` and all Ready (pods being deleted do not count); returns
    /// their names. Watches the pods through the API (no polling, no
    /// kubectl): every change is checked as it happens.
    pub async fn wait_ready(
        &self,
        namespace: &str,
        selector: &str,
        count: usize,
        within: Duration,
    ) -> Result<Vec<String>> {
        use futures_util::StreamExt;
        use k8s_openapi::api::core::v1::Pod;
        use kube::api::{Api, ListParams, WatchParams};
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&self.kubeconfig)?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        let pods: Api<Pod> = Api::namespaced(kube::Client::try_from(config)?, namespace);
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let list = pods.list(&ListParams::default().labels(selector)).await?;
            let live: Vec<&Pod> = list
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let ready = live.iter().filter(|p| pod_ready(p)).count();
            if live.len() >= count && ready == live.len() {
                return Ok(live
                    .iter()
                    .filter_map(|p| p.metadata.name.clone())
                    .collect());
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let rv = list.metadata.resource_version.unwrap_or_default();
            let params = WatchParams::default()
                .labels(selector)
                .timeout(left.as_secs().clamp(1, 290) as u32);
            let changed = async {
                let mut events = pods.watch(&params, &rv).await?.boxed();
                events.next().await.transpose()?;
                anyhow::Ok(())
            };
            let waited = tokio::time::timeout_at(deadline, changed).await;
            if let Ok(result) = waited {
                result.with_context(|| format!("watching pods {selector} in {namespace}"))?;
                continue;
            }
            let states: Vec<String> = list
                .items
                .iter()
                .map(|p| {
                    format!(
                        "{} {}{}",
                        p.metadata.name.as_deref().unwrap_or("?"),
                        p.status
                            .as_ref()
                            .and_then(|s| s.phase.as_deref())
                            .unwrap_or("?"),
                        if pod_ready(p) { " Ready" } else { "" }
                    )
                })
                .collect();
            bail!(
                "pods {selector} in {namespace}: {ready} of {count} Ready within {within:?}: {states:?}"
            );
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

/// Whether the pod's Ready condition is true.
fn pod_ready(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn node(args: &[&str]) -> Result<String> {
    tools::run(&script("node"), args, None)
}

#[cfg(test)]
mod tests {
    /// The image name follows the version `controlplane/` builds.
    #[test]
    fn the_ksm_image_names_the_version_the_plane_builds() {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../controlplane/lib/controlplane.py");
        let text = std::fs::read_to_string(script).unwrap();
        let version = text
            .lines()
            .find_map(|l| l.strip_prefix("KSM_VERSION = "))
            .unwrap()
            .trim_matches('"');
        assert!(super::KSM_IMAGE.ends_with(&format!(":{version}")));
    }
}
