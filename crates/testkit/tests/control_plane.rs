//! The testkit's promises, checked against the real API server: identities
//! have exactly the rights their bindings give, and each fault does what the
//! election tests rely on it to do.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use leasehold_testkit::{Component, ControlPlane};

/// Bound for anything that should settle within moments (RBAC informers,
/// reconnects); generous so a loaded CI machine does not flake.
const SETTLE: Duration = Duration::from_secs(30);

fn lease(name: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Retries `op` until it returns `Some`, at most for `SETTLE`. Used only
/// where the API server offers nothing to wait on (authorizer caches,
/// listeners coming back).
async fn eventually<T, F, Fut>(what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + SETTLE;
    let mut backoff = Duration::from_millis(20);
    loop {
        if let Some(v) = op().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {SETTLE:?}");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

#[tokio::test]
async fn server_is_a_real_kube_apiserver_of_the_pinned_version() {
    let plane = ControlPlane::shared();
    let admin = plane.admin_client().await.unwrap();
    let info = admin.apiserver_version().await.unwrap();
    let pinned = std::fs::read_to_string(plane.dir().join("versions")).unwrap();
    let want = pinned
        .lines()
        .find_map(|l| l.strip_prefix("kube-apiserver "))
        .unwrap();
    assert_eq!(info.git_version, want);
    assert_eq!(info.major, "1");
}

#[tokio::test]
async fn agents_can_use_leases_in_their_namespace_and_nothing_else() {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("rights").await.unwrap();
    let agent = plane.agent_client(2).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(agent.clone(), ns.name());
    leases
        .create(&PostParams::default(), &lease("mine"))
        .await
        .unwrap();
    assert!(leases.get("mine").await.is_ok());

    let err = Api::<Namespace>::all(agent)
        .list(&Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "listing namespaces should be forbidden: {err}"
    );
}

#[tokio::test]
async fn a_revoked_agent_gets_403_naming_leases_and_a_granted_one_works_again() {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("revoke").await.unwrap();
    let agent = plane.agent_client(1).await.unwrap();
    let leases: Api<Lease> = Api::namespaced(agent, ns.name());
    leases
        .create(&PostParams::default(), &lease("held"))
        .await
        .unwrap();

    ns.revoke(1).await.unwrap();
    let status = eventually("403 after revoke", || async {
        match leases.get("held").await {
            Err(kube::Error::Api(s)) if s.code == 403 => Some(s),
            _ => None,
        }
    })
    .await;
    assert_eq!(status.reason, "Forbidden");
    assert!(
        status.message.contains("leases"),
        "message should name leases: {}",
        status.message
    );
    assert!(
        status.message.contains(ns.name()),
        "message should name the namespace: {}",
        status.message
    );

    ns.grant(1).await.unwrap();
    eventually("access after grant", || async {
        leases.get("held").await.ok()
    })
    .await;
}

#[tokio::test]
async fn revoking_one_agent_leaves_the_others_alone() {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("alone").await.unwrap();
    ns.revoke(3).await.unwrap();
    let three: Api<Lease> = Api::namespaced(plane.agent_client(3).await.unwrap(), ns.name());
    eventually("403 for agent 3", || async {
        matches!(three.get("x").await, Err(kube::Error::Api(s)) if s.code == 403).then_some(())
    })
    .await;
    let four: Api<Lease> = Api::namespaced(plane.agent_client(4).await.unwrap(), ns.name());
    // A 404 (not a 403) proves agent 4 is still authorized to look.
    let err = four.get("x").await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "agent 4 should still be allowed: {err}"
    );
}

#[tokio::test]
async fn a_blackholed_proxy_makes_requests_hit_their_timeout_until_healed() {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("blackhole").await.unwrap();
    let proxy = plane.fault_proxy().unwrap();
    let mut config = plane.agent_config_via(1, &proxy).await.unwrap();
    config.read_timeout = Some(Duration::from_millis(500));
    let client = Client::try_from(config).unwrap();
    let leases: Api<Lease> = Api::namespaced(client, ns.name());
    leases
        .create(&PostParams::default(), &lease("bh"))
        .await
        .unwrap();

    proxy.blackhole();
    let started = Instant::now();
    let outcome = tokio::time::timeout(SETTLE, leases.get("bh"))
        .await
        .expect("the client's own timeout must fire");
    assert!(outcome.is_err(), "a black hole cannot answer");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "failed before the timeout: {:?}",
        started.elapsed()
    );

    proxy.heal();
    eventually("requests after heal", || async {
        leases.get("bh").await.ok()
    })
    .await;
}

#[tokio::test]
async fn a_delaying_proxy_slows_each_request_by_at_least_the_delay() {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("delay").await.unwrap();
    let proxy = plane.fault_proxy().unwrap();
    let client = Client::try_from(plane.agent_config_via(1, &proxy).await.unwrap()).unwrap();
    let leases: Api<Lease> = Api::namespaced(client, ns.name());
    leases
        .create(&PostParams::default(), &lease("slow"))
        .await
        .unwrap();

    proxy.delay(Duration::from_millis(300));
    let started = Instant::now();
    leases.get("slow").await.unwrap();
    // A request and its response each cross the proxy once.
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "took only {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn reset_all_breaks_open_connections_and_new_ones_work() {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("reset").await.unwrap();
    let proxy = plane.fault_proxy().unwrap();
    let client = Client::try_from(plane.agent_config_via(1, &proxy).await.unwrap()).unwrap();
    let leases: Api<Lease> = Api::namespaced(client, ns.name());
    leases
        .create(&PostParams::default(), &lease("r"))
        .await
        .unwrap();

    // Hold a request inside a black hole, then reset: it must fail, not hang.
    proxy.blackhole();
    let in_flight = tokio::spawn({
        let leases = leases.clone();
        async move { leases.get("r").await }
    });
    tokio::time::timeout(SETTLE, proxy.held_chunks(1))
        .await
        .expect("the request reaches the proxy");
    proxy.reset_all();
    let outcome = tokio::time::timeout(SETTLE, in_flight)
        .await
        .expect("a reset ends the request")
        .unwrap();
    assert!(
        outcome.is_err(),
        "a reset connection cannot carry an answer"
    );

    proxy.heal();
    leases.get("r").await.unwrap();
}

#[tokio::test]
async fn a_paused_api_server_serves_again_after_resume() {
    let plane = ControlPlane::dedicated().unwrap();
    let ns = plane.namespace("pause").await.unwrap();
    let mut config = plane.agent_config(1).await.unwrap();
    config.read_timeout = Some(Duration::from_millis(500));
    let leases: Api<Lease> = Api::namespaced(Client::try_from(config).unwrap(), ns.name());
    leases
        .create(&PostParams::default(), &lease("p"))
        .await
        .unwrap();

    plane.pause(Component::ApiServer).unwrap();
    assert!(
        leases.get("p").await.is_err(),
        "a paused API server cannot answer"
    );
    plane.resume(Component::ApiServer).unwrap();
    eventually("answers after resume", || async {
        leases.get("p").await.ok()
    })
    .await;
}

#[tokio::test]
async fn a_restarted_etcd_is_used_again_and_keeps_the_data() {
    let plane = ControlPlane::dedicated().unwrap();
    let ns = plane.namespace("etcd").await.unwrap();
    let mut config = plane.agent_config(1).await.unwrap();
    config.read_timeout = Some(Duration::from_secs(2));
    let leases: Api<Lease> = Api::namespaced(Client::try_from(config).unwrap(), ns.name());
    leases
        .create(&PostParams::default(), &lease("before"))
        .await
        .unwrap();

    plane.stop(Component::Etcd).unwrap();
    let old_pid = plane.pid(Component::Etcd);
    assert!(old_pid.is_err(), "a stopped etcd is not listed as running");
    // Writes need etcd; with it gone they fail.
    assert!(
        leases
            .create(&PostParams::default(), &lease("during"))
            .await
            .is_err()
    );

    plane.start_again(Component::Etcd).unwrap();
    eventually("writes after etcd restart", || async {
        leases
            .create(&PostParams::default(), &lease("after"))
            .await
            .ok()
    })
    .await;
    assert!(
        leases.get("before").await.is_ok(),
        "data written before the restart survives it"
    );
}

#[tokio::test]
async fn a_restarted_api_server_comes_back_on_the_same_address() {
    let plane = ControlPlane::dedicated().unwrap();
    let ns = plane.namespace("restart").await.unwrap();
    let leases: Api<Lease> = Api::namespaced(plane.agent_client(1).await.unwrap(), ns.name());
    leases
        .create(&PostParams::default(), &lease("kept"))
        .await
        .unwrap();
    let before = plane.pid(Component::ApiServer).unwrap();

    plane.stop(Component::ApiServer).unwrap();
    assert!(
        leases.get("kept").await.is_err(),
        "a stopped API server cannot answer"
    );
    plane.start_again(Component::ApiServer).unwrap();
    assert_ne!(plane.pid(Component::ApiServer).unwrap(), before);
    eventually("answers after restart", || async {
        leases.get("kept").await.ok()
    })
    .await;
}

#[test]
fn dropping_a_dedicated_plane_stops_its_processes() {
    let plane = ControlPlane::dedicated().unwrap();
    let pids = [
        plane.pid(Component::Etcd).unwrap(),
        plane.pid(Component::ApiServer).unwrap(),
    ];
    drop(plane);
    for pid in pids {
        let gone = !leasehold_testkit::process_running(pid);
        assert!(gone, "pid {pid} still running after drop");
    }
}
