//! The command-line interface of `controlplane/up` and `controlplane/down`,
//! which other tools rely on: the files `up` writes, `--agents`, `--no-rbac`,
//! refusing a directory that is already running, and `down` leaving nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::coordination::v1::Lease;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use leasehold_testkit::process_running;

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../controlplane")
        .join(name)
}

fn run(name: &str, args: &[&str]) -> Output {
    Command::new(script(name)).args(args).output().unwrap()
}

fn pids(dir: &Path) -> Vec<(String, u32)> {
    std::fs::read_to_string(dir.join("pids"))
        .unwrap()
        .lines()
        .map(|l| {
            let (name, pid) = l
                .split_once(' ')
                .unwrap_or_else(|| panic!("bad pids line {l:?}"));
            (
                name.to_string(),
                pid.parse().unwrap_or_else(|_| panic!("bad pid in {l:?}")),
            )
        })
        .collect()
}

async fn client(path: &Path) -> Client {
    let kc = Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// Runs `down` even when an assertion fails half-way.
struct Down<'a>(&'a str);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = run("down", &["--dir", self.0]);
    }
}

#[tokio::test]
async fn up_writes_the_documented_files_and_down_stops_everything() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let _down = Down(d);
    let up = run("up", &["--dir", d, "--agents", "2", "--no-rbac"]);
    assert!(
        up.status.success(),
        "up failed: {}",
        String::from_utf8_lossy(&up.stderr)
    );

    let recorded = pids(dir.path());
    let names: Vec<&str> = recorded.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["etcd", "kube-apiserver"]);
    assert!(recorded.iter().all(|(_, pid)| process_running(*pid)));
    let versions = std::fs::read_to_string(dir.path().join("versions")).unwrap();
    assert!(
        versions
            .lines()
            .any(|l| l.starts_with("kube-apiserver v1.")),
        "{versions}"
    );
    assert!(
        versions.lines().any(|l| l.starts_with("etcd v3.")),
        "{versions}"
    );
    assert!(dir.path().join("agent-2.kubeconfig").exists());
    assert!(
        !dir.path().join("agent-3.kubeconfig").exists(),
        "--agents 2 makes exactly two agents"
    );

    // RBAC is on, and --no-rbac gave the agents no rights: 403, not 404.
    let agent = client(&dir.path().join("agent-1.kubeconfig")).await;
    let err = Api::<Lease>::namespaced(agent, "leasehold")
        .get("x")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
    let admin = client(&dir.path().join("admin.kubeconfig")).await;
    let err = Api::<Lease>::namespaced(admin, "leasehold")
        .get("x")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "admin may look: {err}"
    );

    let again = run("up", &["--dir", d]);
    assert!(
        !again.status.success(),
        "a second up on a running dir must fail"
    );
    assert!(String::from_utf8_lossy(&again.stderr).contains("already has a running control plane"));

    let down = run("down", &["--dir", d]);
    assert!(
        down.status.success(),
        "down failed: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    for (name, pid) in recorded {
        assert!(
            !process_running(pid),
            "{name} (pid {pid}) still running after down"
        );
    }
    assert!(
        run("down", &["--dir", d]).status.success(),
        "down is idempotent"
    );
}

#[test]
fn up_rejects_bad_arguments_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        "up",
        &["--dir", dir.path().to_str().unwrap(), "--agents", "-1"],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--agents"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.path().join("pids").exists(), "nothing was started");
}
