//! What users deploy, checked against the real API server with the real
//! client tools: the kustomize base and overlay and the Helm chart pass a
//! server-side dry run, `helm lint`, and a real `helm install`/`uninstall`;
//! the chart refuses bad values naming them;
//! the shipped Role and ClusterRole grant exactly what the agent needs;
//! the agent runs with the shipped policy under that identity, leads and
//! ships kube-state-metrics documents; the image builds what CI builds and
//! runs what the DaemonSet runs.

mod agents;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agents::*;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use leasehold_testkit::sinks::{SinkKind, TestSink};
use leasehold_testkit::{ControlPlane, tools};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kubectl(plane: &ControlPlane, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let kc = plane.admin_kubeconfig();
    let mut all = vec!["--kubeconfig", kc.to_str().context("path")?];
    all.extend_from_slice(args);
    tools::run(&tools::kubectl()?, &all, stdin)
}

fn helm(plane: &ControlPlane, args: &[&str]) -> Result<String> {
    let kc = plane.admin_kubeconfig();
    let mut all = vec!["--kubeconfig", kc.to_str().context("path")?];
    all.extend_from_slice(args);
    tools::run(&tools::helm()?, &all, None)
}

fn kustomize(plane: &ControlPlane, dir: &str) -> Result<String> {
    let path = repo().join(dir);
    kubectl(plane, &["kustomize", path.to_str().context("path")?], None)
}

fn chart() -> String {
    repo().join("deploy/helm/leasehold").display().to_string()
}

/// The objects of `yaml` after the API server's dry run (admission,
/// validation, defaulting), as JSON.
fn dry_run(plane: &ControlPlane, yaml: &str) -> Result<Vec<Value>> {
    let out = kubectl(
        plane,
        &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
        Some(yaml),
    )?;
    let v: Value = serde_json::from_str(&out)?;
    Ok(match v["kind"].as_str() {
        Some("List") => v["items"].as_array().cloned().unwrap_or_default(),
        _ => vec![v],
    })
}

async fn ensure_namespace(plane: &ControlPlane, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    match Api::<Namespace>::all(plane.admin_client().await?)
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn find<'a>(objs: &'a [Value], kind: &str) -> Result<&'a Value> {
    objs.iter()
        .find(|o| o["kind"] == kind)
        .with_context(|| format!("no {kind}"))
}

/// The kustomize base, applied for real once per test binary (the
/// namespace `leasehold` and its objects stay for the other tests). The
/// tests that need it wait for one apply: two `kubectl apply` of the same
/// objects at once race (both read a ServiceAccount as absent, the second
/// create is refused).
async fn apply_base(plane: &ControlPlane) -> Result<Vec<Value>> {
    static APPLIED: tokio::sync::OnceCell<Vec<Value>> = tokio::sync::OnceCell::const_new();
    let objs = APPLIED
        .get_or_try_init(|| async {
            ensure_namespace(plane, "leasehold").await?;
            let yaml = kustomize(plane, "deploy/kubernetes/base")?;
            let out = kubectl(plane, &["apply", "-o", "json", "-f", "-"], Some(&yaml))?;
            let v: Value = serde_json::from_str(&out)?;
            anyhow::Ok(v["items"].as_array().cloned().unwrap_or_default())
        })
        .await?;
    Ok(objs.clone())
}

/// The uid the image runs as (`USER` in the Dockerfile) and the pods too.
const IMAGE_UID: &str = "65532";

/// What a DaemonSet runs is the image's entrypoint with `run` on the
/// mounted policy, its data volume and its probes' port.
fn check_daemonset(name: &str, objs: &[Value]) -> Result<()> {
    let ds = find(objs, "DaemonSet")?;
    let pod = &ds["spec"]["template"]["spec"];
    let c = pod["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "leasehold"))
        .with_context(|| format!("{name}: no leasehold container"))?;
    assert!(
        c.get("command").is_none(),
        "{name}: the image's entrypoint runs"
    );
    let args: Vec<&str> = c["args"]
        .as_array()
        .context("args")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        args,
        [
            "run",
            "-c",
            "/etc/leasehold/leasehold.yml",
            "--path.data",
            "/var/lib/leasehold",
            "--http",
            "0.0.0.0:6791"
        ],
        "{name}"
    );
    let mount = |path: &str| {
        c["volumeMounts"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["mountPath"] == path))
            .and_then(|m| m["name"].as_str())
            .map(str::to_string)
    };
    let volume = |v: &str| {
        pod["volumes"]
            .as_array()
            .and_then(|vs| vs.iter().find(|x| x["name"] == v))
            .cloned()
    };
    let policy =
        volume(&mount("/etc/leasehold").context("policy mount")?).context("policy volume")?;
    let cm = find(objs, "ConfigMap")?;
    assert_eq!(
        policy["configMap"]["name"], cm["metadata"]["name"],
        "{name}"
    );
    assert!(
        cm["data"]["leasehold.yml"].is_string(),
        "{name}: the policy key"
    );
    assert!(
        mount("/var/lib/leasehold").is_some(),
        "{name}: the data volume"
    );
    assert_eq!(c["ports"][0]["containerPort"], 6791, "{name}");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez", "{name}");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{name}");
    assert_eq!(
        pod["securityContext"]["runAsUser"].to_string(),
        IMAGE_UID,
        "{name}"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
    assert_eq!(
        c["securityContext"]["readOnlyRootFilesystem"], true,
        "{name}"
    );
    assert_eq!(
        c["securityContext"]["allowPrivilegeEscalation"], false,
        "{name}"
    );
    assert_eq!(
        c["securityContext"]["capabilities"]["drop"][0], "ALL",
        "{name}"
    );
    let grace = pod["terminationGracePeriodSeconds"]
        .as_i64()
        .context("grace")?;
    assert!(
        grace > 25,
        "{name}: the grace period is above shutdown_timeout (25s)"
    );
    for env in ["POD_NAME", "POD_NAMESPACE", "NODE_NAME", "LEASEHOLD_FLEET"] {
        assert!(
            c["env"]
                .as_array()
                .is_some_and(|e| e.iter().any(|x| x["name"] == env)),
            "{name}: no {env}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_and_helm_output_pass_the_api_servers_dry_run_and_lint() -> Result<()> {
    let plane = ControlPlane::shared();
    ensure_namespace(plane, "observability").await?;
    ensure_namespace(plane, "leasehold").await?;
    for dir in [
        "deploy/kubernetes/base",
        "deploy/kubernetes/overlays/example",
    ] {
        let objs = dry_run(plane, &kustomize(plane, dir)?)?;
        let kinds: Vec<&str> = objs.iter().filter_map(|o| o["kind"].as_str()).collect();
        check_daemonset(dir, &objs)?;
        for want in [
            "Namespace",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet",
        ] {
            assert!(kinds.contains(&want), "{dir}: no {want} in {kinds:?}");
        }
    }
    // hostPath volumes need the privileged Pod Security level.
    let base = dry_run(plane, &kustomize(plane, "deploy/kubernetes/base")?)?;
    assert_eq!(
        find(&base, "Namespace")?["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    // The overlay's Lease is its own, in the Role and in the policy.
    let overlay = dry_run(
        plane,
        &kustomize(plane, "deploy/kubernetes/overlays/example")?,
    )?;
    let lease = "leasehold-cluster-leader-observability";
    assert_eq!(
        find(&overlay, "Role")?["rules"][0]["resourceNames"][0],
        lease
    );
    let policy = find(&overlay, "ConfigMap")?["data"]["leasehold.yml"]
        .as_str()
        .context("policy")?;
    assert!(policy.contains(&format!("leader_lease: {lease}")));
    // Each install creates its Lease with no holder, so its first agent
    // leads at once.
    for (objs, name) in [(&overlay, lease), (&base, "leasehold-cluster-leader")] {
        let l = find(objs, "Lease")?;
        assert_eq!(l["metadata"]["name"], name);
        assert!(l["spec"].as_object().is_none_or(|s| s.is_empty()), "{l}");
    }

    // `--strict`: warnings fail too.
    let lint = helm(plane, &["lint", "--strict", &chart()])?;
    assert!(lint.contains("0 chart(s) failed"), "{lint}");
    ensure_namespace(plane, "helm-dry").await?;
    let rendered = helm(plane, &["template", "dry", &chart(), "-n", "helm-dry"])?;
    let objs = dry_run(plane, &rendered)?;
    check_daemonset("Helm chart", &objs)?;
    assert_eq!(
        find(&objs, "Role")?["rules"][0]["resourceNames"][0],
        "dry-leasehold-leader",
        "the Lease is derived from the release name"
    );
    assert_eq!(
        find(&objs, "Lease")?["metadata"]["name"],
        "dry-leasehold-leader",
        "the chart creates the Lease its Role names"
    );
    // Another release gets another Lease.
    let other = helm(plane, &["template", "other", &chart(), "-n", "helm-dry"])?;
    assert!(other.contains("leader_lease: other-leasehold-leader"));
    // With a hostPath data volume the chart adds the root init container.
    let hostpath = helm(
        plane,
        &[
            "template",
            "hp",
            &chart(),
            "-n",
            "helm-dry",
            "--set",
            "data.hostPath=/var/lib/leasehold-hp",
        ],
    )?;
    let objs = dry_run(plane, &hostpath)?;
    let ds = find(&objs, "DaemonSet")?;
    assert_eq!(
        ds["spec"]["template"]["spec"]["initContainers"][0]["command"][1],
        "__chown-data"
    );
    Ok(())
}

/// The chart's large-cluster example (named and sharded elections): its
/// objects pass the dry run, the Lease Role is widened for the candidate
/// Leases (only then), the unsharded named election gets its own empty
/// Lease while the shard Leases are left to the agents, and the policy it
/// renders is one `leasehold check` accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_sharded_example_renders_what_sharded_elections_need() -> Result<()> {
    let plane = ControlPlane::shared();
    ensure_namespace(plane, "helm-dry").await?;
    let example = repo().join("deploy/helm/leasehold/examples/sharded-values.yaml");
    let example = example.to_str().context("path")?;
    let lint = helm(plane, &["lint", "--strict", &chart(), "-f", example])?;
    assert!(lint.contains("0 chart(s) failed"), "{lint}");
    let rendered = helm(
        plane,
        &["template", "sh", &chart(), "-n", "helm-dry", "-f", example],
    )?;
    let objs = dry_run(plane, &rendered)?;
    check_daemonset("Helm chart with sharded elections", &objs)?;
    let rules = find(&objs, "Role")?["rules"]
        .as_array()
        .context("Role rules")?;
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert!(rules[0].get("resourceNames").is_none(), "{rules:?}");
    for verb in ["get", "list", "watch", "create", "update", "delete"] {
        assert!(
            rules[0]["verbs"]
                .as_array()
                .is_some_and(|v| v.iter().any(|x| x == verb)),
            "no {verb} in {rules:?}"
        );
    }
    let leases: Vec<&str> = objs
        .iter()
        .filter(|o| o["kind"] == "Lease")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert_eq!(leases, ["sh-leasehold-leader-apiserver"]);
    let policy = find(&objs, "ConfigMap")?["data"]["leasehold.yml"]
        .as_str()
        .context("policy")?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("leasehold.yml");
    std::fs::write(&file, policy)?;
    let o = Command::new(binary())
        .args(["check", "-c", file.to_str().context("path")?])
        .env("POD_NAMESPACE", "helm-dry")
        .env("POD_NAME", "sh-leasehold-x")
        .output()?;
    let said = printed(&o);
    assert!(
        o.status.success(),
        "check refused the rendered policy: {said}"
    );
    assert!(said.contains("ok (5 input(s), 0 warning(s))"), "{said}");

    // Named elections without shards keep the narrow Role, naming each
    // one's Lease (and not the unnamed election's, unused then).
    let named = helm(
        plane,
        &[
            "template",
            "nm",
            &chart(),
            "-n",
            "helm-dry",
            "--set-json",
            r#"elections={"apiserver":{},"state_metrics":{"leader_lease":"ksm-lease"}}"#,
            "--set-json",
            r#"policy.inputs=[{"id":"ev","type":"kubernetes/events","condition":"${kubernetes_leaderelection.apiserver.leader} == true"}]"#,
        ],
    );
    let objs = dry_run(plane, &named?)?;
    let rule = &find(&objs, "Role")?["rules"][0];
    assert_eq!(
        rule["resourceNames"],
        serde_json::json!(["nm-leasehold-leader-apiserver", "ksm-lease"])
    );
    Ok(())
}

/// Values a user gets wrong are refused by `helm template` (and so by
/// install and upgrade) naming the value, before any object exists.
#[test]
fn the_chart_refuses_bad_values_naming_them() -> Result<()> {
    let refused = |set: &str| -> Result<String> {
        match tools::run(
            &tools::helm()?,
            &["template", "v", &chart(), "--set", set],
            None,
        ) {
            Ok(_) => bail!("helm template accepted --set {set}"),
            Err(e) => Ok(e.to_string()),
        }
    };
    for (set, said) in [
        ("tolerration=1", "'tolerration' not allowed"),
        ("lease.durationSeconds=abc", "/lease/durationSeconds"),
        ("lease.name=Bad_Name", "/lease/name"),
        ("hostPaths.logs=var/log", "/hostPaths/logs"),
        ("monitoring.port=0", "/monitoring/port"),
        ("shutdownTimeoutSeconds=0", "/shutdownTimeoutSeconds"),
        (
            "lease.durationSeconds=10",
            "lease.durationSeconds (10) must be greater than lease.renewDeadlineSeconds (10)",
        ),
        (
            "lease.retryPeriodSeconds=9",
            "lease.renewDeadlineSeconds (10) must be greater than 1.2 × lease.retryPeriodSeconds (9)",
        ),
        // Named elections replace the unnamed one the default inputs read.
        (
            "elections.events.shards=2",
            "policy.inputs read ${kubernetes_leaderelection.leader}, but with `elections` set there is no unnamed election",
        ),
        ("elections.ev.shards=0", "/elections/ev/shards"),
        ("elections.ev.shards=257", "/elections/ev/shards"),
        (
            "elections.Ev.shards=2",
            "elections.Ev: a name uses lower-case letters",
        ),
        (
            "elections.shard.shards=2",
            "elections.shard: `shard` is the name of an election variable",
        ),
    ] {
        let err = refused(set)?;
        assert!(err.contains(said), "--set {set}: {err}");
    }
    // The edge of the timing rule is accepted: 6 × 1 < 5 × 2.
    tools::run(
        &tools::helm()?,
        &[
            "template",
            "v",
            &chart(),
            "--set",
            "lease.durationSeconds=3,lease.renewDeadlineSeconds=2,lease.retryPeriodSeconds=1",
        ],
        None,
    )?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_creates_the_objects_and_uninstall_removes_them() -> Result<()> {
    let plane = ControlPlane::shared();
    let ns = "helm-install";
    ensure_namespace(plane, ns).await?;
    helm(
        plane,
        &["install", "hi", &chart(), "-n", ns, "--wait=false"],
    )?;
    let client = plane.admin_client().await?;
    let ds: Api<k8s_openapi::api::apps::v1::DaemonSet> = Api::namespaced(client.clone(), ns);
    let cm: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    let cr: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    assert!(ds.get_opt("hi-leasehold").await?.is_some());
    assert!(cm.get_opt("hi-leasehold-policy").await?.is_some());
    assert!(cr.get_opt("hi-leasehold-reader").await?.is_some());
    let status = helm(plane, &["status", "hi", "-n", ns])?;
    assert!(status.contains("deployed"), "{status}");
    helm(plane, &["uninstall", "hi", "-n", ns, "--wait"])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ds.get_opt("hi-leasehold").await?.is_some()
        || cr.get_opt("hi-leasehold-reader").await?.is_some()
    {
        if Instant::now() > deadline {
            bail!("uninstall left objects behind");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(cm.get_opt("hi-leasehold-policy").await?.is_none());
    Ok(())
}

/// `kubectl auth can-i` as the agent's ServiceAccount.
fn can_i(plane: &ControlPlane, args: &[&str]) -> Result<bool> {
    let kc = plane.admin_kubeconfig();
    let mut all = vec![
        "--kubeconfig",
        kc.to_str().context("path")?,
        "auth",
        "can-i",
        "--as=system:serviceaccount:leasehold:leasehold",
    ];
    all.extend_from_slice(args);
    let o = Command::new(tools::kubectl()?).args(&all).output()?;
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    match out.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => bail!(
            "can-i {args:?}: {out} {}",
            String::from_utf8_lossy(&o.stderr)
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_roles_grant_what_the_agent_needs_and_nothing_else() -> Result<()> {
    let plane = ControlPlane::shared();
    apply_base(plane).await?;
    let lease = "leases.coordination.k8s.io/leasehold-cluster-leader";
    for (args, want) in [
        (vec!["get", lease, "-n", "leasehold"], true),
        (vec!["update", lease, "-n", "leasehold"], true),
        (vec!["watch", lease, "-n", "leasehold"], true),
        (
            vec!["create", "leases.coordination.k8s.io", "-n", "leasehold"],
            true,
        ),
        (vec!["list", "events", "-A"], true),
        (vec!["watch", "events", "-A"], true),
        (vec!["get", "/metrics"], true),
        // Not another Lease, not Secrets, nothing else written.
        (
            vec![
                "update",
                "leases.coordination.k8s.io/other",
                "-n",
                "leasehold",
            ],
            false,
        ),
        (
            vec!["get", "leases.coordination.k8s.io/other", "-n", "leasehold"],
            false,
        ),
        (vec!["delete", lease, "-n", "leasehold"], false),
        (vec!["patch", lease, "-n", "leasehold"], false),
        // The rename fence: the Leases of its own namespace, not others'.
        (
            vec!["list", "leases.coordination.k8s.io", "-n", "leasehold"],
            true,
        ),
        (
            vec!["watch", "leases.coordination.k8s.io", "-n", "leasehold"],
            true,
        ),
        (
            vec!["list", "leases.coordination.k8s.io", "-n", "kube-system"],
            false,
        ),
        (vec!["update", lease, "-n", "kube-system"], false),
        (vec!["get", "secrets", "-n", "leasehold"], false),
        (vec!["list", "secrets", "-A"], false),
        (vec!["create", "configmaps", "-n", "leasehold"], false),
        (vec!["update", "pods", "-n", "leasehold"], false),
        (vec!["create", "events", "-n", "leasehold"], false),
        (vec!["delete", "events", "-n", "leasehold"], false),
    ] {
        assert_eq!(can_i(plane, &args)?, want, "can-i {args:?}");
    }
    Ok(())
}

/// A kubeconfig for the shipped ServiceAccount, with a token from the
/// TokenRequest API; returns (kubeconfig, token file, CA file, server).
async fn service_account_kubeconfig(
    plane: &ControlPlane,
    dir: &Path,
) -> Result<(PathBuf, PathBuf, PathBuf, String)> {
    let admin = plane.admin_client().await?;
    let sas: Api<ServiceAccount> = Api::namespaced(admin, "leasehold");
    let tr = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = sas
        .create_token_request("leasehold", &PostParams::default(), &tr)
        .await?
        .status
        .context("token status")?
        .token;
    let (_, ca, server) = agents::access::credentials(plane, 1, dir)?;
    let token_file = dir.join("sa-token");
    std::fs::write(&token_file, &token)?;
    let kc = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "leasehold", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "leasehold", "namespace": "leasehold"}}],
    });
    let path = dir.join("sa.kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&kc)?)?;
    Ok((path, token_file, ca, server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_policy_runs_under_the_shipped_identity_and_ships_state_metrics() -> Result<()>
{
    let plane = ControlPlane::shared();
    let objs = apply_base(plane).await?;
    let policy_text = find(&objs, "ConfigMap")?["data"]["leasehold.yml"]
        .as_str()
        .context("policy")?
        .to_string();
    let ksm = plane.kube_state_metrics()?;
    let sink_dir = tempfile::tempdir()?;
    let sink = TestSink::start(SinkKind::OpenSearch, sink_dir.path())?;
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("leasehold.yml");
    std::fs::write(&policy, &policy_text)?;
    let (kubeconfig, token, ca, server) = service_account_kubeconfig(plane, dir.path()).await?;
    let logs = dir.path().join("containers");
    std::fs::create_dir_all(&logs)?;
    std::fs::write(
        logs.join(format!("web-1_shop_web-{}.log", "d".repeat(64))),
        "2026-12-03T10:00:00Z stdout F shipped by the DaemonSet policy\n",
    )?;
    let ksm_host = ksm
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();
    let mut agent = AgentProc::spawn_with_env(
        &policy,
        &kubeconfig,
        1,
        "leasehold",
        &dir.path().join("out"),
        &[
            ("POD_NAME", "leasehold-node-a".into()),
            ("ES_HOSTS", sink.url().to_string()),
            ("KSM_HOST", ksm_host),
            ("API_SERVER", server),
            ("TOKEN_FILE", token.display().to_string()),
            ("CA_FILE", ca.display().to_string()),
            ("LOG_DIR", logs.display().to_string()),
            (
                "LEASEHOLD_PATH_DATA",
                dir.path().join("data").display().to_string(),
            ),
        ],
    )?;
    agent.wait_ready()?;
    // It leads: the shipped Role let it create and hold the Lease.
    let lease = leasehold_testkit::LeaseAdmin::new(
        plane.admin_client().await?,
        "leasehold",
        "leasehold-cluster-leader",
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let holder = lease
            .get()
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity);
        if holder.as_deref() == Some("leasehold-node-a") {
            break;
        }
        if Instant::now() > deadline {
            bail!("never led (holder {holder:?}); log:\n{}", agent.log());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // kube-state-metrics, the API server's metrics and the node's log line
    // arrive in OpenSearch.
    let count = |index: &str| {
        // Missing until its first document arrives.
        let _ = sink.refresh(index);
        sink.count(index).unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = count("metrics-kubernetes.state_namespace-default");
        let api = count("metrics-kubernetes.apiserver-default");
        let logs = count("logs-kubernetes.container_logs-default");
        if state > 0 && api > 0 && logs > 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "state_node {state}, apiserver {api}, container logs {logs}; log:\n{}",
                agent.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A refusal reads "403 Forbidden" (HTTP) or "forbidden: User …" (the
    // API server); a bare "403" also occurs inside timestamps.
    assert!(
        !agent.log().to_ascii_lowercase().contains("forbidden"),
        "a request was forbidden:\n{}",
        agent.log()
    );
    agent.signal(libc::SIGTERM);
    assert_eq!(agent.wait_exit(Duration::from_secs(30))?, Some(0));
    Ok(())
}

#[test]
fn the_image_builds_what_ci_builds_and_runs_what_the_daemonset_runs() -> Result<()> {
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile"))?;
    let lines: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let build = "cargo build --release --locked -p leasehold";
    assert!(
        lines.contains(&format!("RUN {build}").as_str()),
        "the build stage runs `{build}`"
    );
    // The same command as the README's build instructions and the benchmarks.
    let readme = std::fs::read_to_string(repo().join("README.md"))?;
    assert!(readme.contains(build), "README builds differently");
    for bench in ["bench/run-outputs", "bench/run-filestream"] {
        let text = std::fs::read_to_string(repo().join(bench))?;
        assert!(
            text.contains(r#""cargo", "build", "--release", "--locked", "-p", "leasehold""#),
            "{bench}"
        );
    }
    let copy = lines
        .iter()
        .find(|l| l.starts_with("COPY --from=build"))
        .context("COPY")?;
    let parts: Vec<&str> = copy.split_whitespace().collect();
    assert_eq!(
        parts[2], "/src/target/release/leasehold",
        "the release binary"
    );
    let installed = parts[3];
    let entry = lines
        .iter()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .context("ENTRYPOINT")?;
    let entry: Vec<String> = serde_json::from_str(entry)?;
    assert_eq!(entry, [installed]);
    let user = lines
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .context("USER")?;
    assert_eq!(
        user.split(':').next(),
        Some(IMAGE_UID),
        "the DaemonSets run as the image's user"
    );
    // The binary takes exactly these arguments.
    let o = Command::new(binary()).args(["run", "--help"]).output()?;
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in ["-c", "--path.data", "--http"] {
        assert!(help.contains(flag), "run has no {flag}: {help}");
    }
    Ok(())
}
