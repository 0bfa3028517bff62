//! `leasehold status` on the real control plane: a healthy, an expired, a
//! released and a stuck Lease, judged as of a fixed time, against golden
//! output in table and JSON form (`UPDATE_GOLDEN=1` rewrites the files);
//! and on a running agent's `/status`.

mod agents;

use std::path::{Path, PathBuf};
use std::process::Command;

use agents::*;
use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use leasehold_testkit::ControlPlane;
use serde_json::json;

/// The Leases are judged as of this time.
const AT: &str = "2026-12-03T10:05:00Z";

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/status")
        .join(name)
}

/// Compares `got` with the golden file, or rewrites it.
fn check_golden(name: &str, got: &str) -> Result<()> {
    let path = golden(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().context("parent")?)?;
        std::fs::write(&path, got)?;
        return Ok(());
    }
    let want = std::fs::read_to_string(&path)
        .with_context(|| format!("{} (run with UPDATE_GOLDEN=1 to write it)", path.display()))?;
    assert_eq!(got, want, "{name} differs from its golden file");
    Ok(())
}

/// `leasehold status` with `args`: (exit code, stdout with the test
/// namespace's random name replaced by `NS`, stderr).
fn status(plane: &ControlPlane, ns: &str, args: &[&str]) -> Result<(i32, String, String)> {
    let o = Command::new(binary())
        .arg("status")
        .arg("--kubeconfig")
        .arg(plane.admin_kubeconfig())
        .args(["-n", ns, "--at", AT, "--daemonset", "leasehold"])
        .args(args)
        .output()?;
    Ok((
        o.status.code().unwrap_or(-1),
        String::from_utf8(o.stdout)?.replace(ns, "NS"),
        String::from_utf8(o.stderr)?,
    ))
}

fn lease(name: &str, holder: Option<&str>, renewed: &str, duration: i32) -> Result<Lease> {
    let mut annotations = serde_json::Map::new();
    if name == "healthy" {
        annotations.insert("leasehold.dev/checkpoint.events".into(), json!("rv-4242"));
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "holderIdentity": holder,
            "acquireTime": "2026-12-03T10:00:00.000000Z",
            "renewTime": renewed,
            "leaseDurationSeconds": duration,
            "leaseTransitions": 7,
        }
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_expired_released_and_stuck_leases_are_told_apart() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("status").await?;
    let client = plane.admin_client().await?;
    let pp = PostParams::default();
    // The candidates: pods of DaemonSet `leasehold` (no controller runs
    // here, so the pod is made by hand and stays Pending).
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "leasehold"},
        "spec": {
            "selector": {"matchLabels": {"app": "leasehold"}},
            "template": {"metadata": {"labels": {"app": "leasehold"}},
                         "spec": {"containers": [{"name": "agent", "image": "leasehold"}]}}
        }
    }))?;
    let ds = Api::<DaemonSet>::namespaced(client.clone(), ns.name())
        .create(&pp, &ds)
        .await?;
    // A new namespace has no `default` ServiceAccount until one is made.
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
    Api::<ServiceAccount>::namespaced(client.clone(), ns.name())
        .create(&pp, &sa)
        .await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "agent-a", "labels": {"app": "leasehold"}, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "leasehold",
            "uid": ds.metadata.uid.context("uid")?, "controller": true
        }]},
        "spec": {"containers": [{"name": "agent", "image": "leasehold"}]}
    }))?;
    Api::<Pod>::namespaced(client.clone(), ns.name())
        .create(&pp, &pod)
        .await?;
    let leases = Api::<Lease>::namespaced(client.clone(), ns.name());
    for l in [
        lease(
            "healthy",
            Some("agent-a"),
            "2026-12-03T10:04:58.000000Z",
            15,
        )?,
        lease(
            "expired",
            Some("agent-a"),
            "2026-12-03T10:04:40.000000Z",
            15,
        )?,
        lease("released", None, "2026-12-03T10:04:59.000000Z", 15)?,
        lease("stuck", Some("agent-a"), "2026-12-03T10:01:00.000000Z", 15)?,
        lease(
            "stranger",
            Some("laptop"),
            "2026-12-03T10:04:59.000000Z",
            3600,
        )?,
    ] {
        leases.create(&pp, &l).await?;
    }
    for (name, code) in [
        ("healthy", 0),
        ("expired", 1),
        ("released", 0),
        ("stuck", 1),
        ("stranger", 1),
        ("absent", 1),
    ] {
        for format in ["table", "json"] {
            let (got, out, err) = status(plane, ns.name(), &["--lease", name, "--format", format])?;
            assert_eq!(got, code, "{name} {format}: exit code; stderr: {err}");
            let ext = if format == "json" { "json" } else { "txt" };
            check_golden(&format!("{name}.{ext}"), &out)?;
        }
    }
    Ok(())
}

#[test]
fn an_unreachable_api_or_a_bad_time_is_an_error_naming_the_fix() -> Result<()> {
    let o = Command::new(binary())
        .args(["status", "--lease", "l", "--at", "yesterday"])
        .output()?;
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8(o.stderr)?.contains("RFC 3339"));
    let o = Command::new(binary())
        .args(["status", "--agent", "http://127.0.0.1:1"])
        .output()?;
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8(o.stderr)?;
    assert!(
        err.contains("cannot reach") && err.contains("monitoring"),
        "{err}"
    );
    let o = Command::new(binary()).args(["status"]).output()?;
    assert_eq!(o.status.code(), Some(2), "either --lease or --agent");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_agents_status_names_its_elections_inputs_and_outputs() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("status-agent").await?;
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("policy.yml");
    std::fs::write(&policy, agents::policy("status-lease", ""))?;
    let agent = AgentProc::start(
        &policy,
        &plane.agent_kubeconfig(1),
        1,
        ns.name(),
        dir.path(),
    )?;
    let url = format!("http://{}", agent.http);
    // Leading: the table shows the election with this agent as holder.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let text = loop {
        let o = Command::new(binary())
            .args(["status", "--agent", &url])
            .output()?;
        let text = String::from_utf8(o.stdout)?;
        if text.contains("leading") {
            assert_eq!(o.status.code(), Some(0), "{text}");
            break text;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "never leading: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(text.contains("Agent:       agent-1"), "{text}");
    assert!(
        text.contains(&format!("{}/status-lease", ns.name())),
        "{text}"
    );
    assert!(text.contains("gated") && text.contains("local"), "{text}");
    let o = Command::new(binary())
        .args(["status", "--agent", &url, "--format", "json"])
        .output()?;
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    assert_eq!(doc["identity"], "agent-1");
    assert_eq!(doc["problems"], json!([]));
    // The Lease as seen from the API agrees.
    let o = Command::new(binary())
        .arg("status")
        .arg("--kubeconfig")
        .arg(plane.admin_kubeconfig())
        .args([
            "--lease",
            "status-lease",
            "-n",
            ns.name(),
            "--lease-duration",
            "3",
            "--format",
            "json",
        ])
        .output()?;
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout)?;
    assert_eq!(doc["holder"], "agent-1");
    assert_eq!(doc["duration_s"], 3);
    Ok(())
}
