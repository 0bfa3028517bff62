//! The rename fence. A Lease renamed in a rolling update (a new
//! `leader_lease` or namespace reaching the pods one at a time) is, for a
//! while, two Leases guarding the same work: agents still on the old name
//! elect one leader, agents on the new name another. Each Lease an elector
//! writes carries two labels, its fleet and its election; a candidate takes
//! no lease while another Lease with the same labels is held (paused
//! acquisition, from a watch of those Leases), and a new leader lists them
//! once more after its acquiring write and before any work starts,
//! resigning if one is held. Two candidates of two such Leases each write
//! their own Lease and then read the other's, so at least one of them sees
//! the other's write and resigns: never both work.
//!
//! The shards of one sharded election share its labels but guard
//! different work: their Leases also carry the shard count, a shard watches
//! only Leases of other counts (or none), and lists the others of its own
//! count as [`Fence::peers`], which never block it. Shards of another
//! shard count (a change of `shards` in a rolling update) are siblings like
//! a renamed Lease.
//!
//! A held sibling stops blocking once released (the release shape), once
//! its holder acknowledged its stopped term with nobody named, or once it
//! went unchanged for its own `leaseDurationSeconds` on the local clock —
//! the same rules the core applies to its own Lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedSender;

use super::errors::{ApiOutcome, classify};
use super::lease::{lease_resource, parse};
use crate::core::{Failure, Input, Observed};

/// Label naming the fleet (the agents that share elections) on every Lease
/// an elector with a fence writes.
pub const FLEET_LABEL: &str = "leasehold.dev/fleet";
/// Label giving the shard count on the Leases of a sharded election.
pub const SHARDS_LABEL: &str = "leasehold.dev/shards";
/// Label naming the election within the fleet.
pub const ELECTION_LABEL: &str = "leasehold.dev/election";

/// How often a failed or refused sibling watch is retried.
const RETRY: Duration = Duration::from_secs(5);

/// The labels an elector's Leases carry and its siblings are found by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    /// The fleet: the agents that share elections (one DaemonSet).
    pub fleet: String,
    /// The election within the fleet, stable across renames of its Lease.
    pub election: String,
    /// Leases in the elector's namespace that carry the same labels but are
    /// not rivals: the other shards of the same sharded election.
    pub peers: Vec<String>,
    /// The shard count, for a shard of a sharded election: written as a
    /// label, and the siblings watched are only those of other counts, so
    /// the peers' renewals never reach this elector.
    pub shards: Option<u32>,
}

impl Fence {
    /// The labels, as written on Leases.
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (FLEET_LABEL, self.fleet.clone()),
            (ELECTION_LABEL, self.election.clone()),
        ];
        if let Some(n) = self.shards {
            out.push((SHARDS_LABEL, n.to_string()));
        }
        out
    }

    fn selector(&self) -> String {
        let mut s = format!(
            "{FLEET_LABEL}={},{ELECTION_LABEL}={}",
            self.fleet, self.election
        );
        if let Some(n) = self.shards {
            // Leases without the label (an unsharded election of the same
            // name) match too.
            s.push_str(&format!(",{SHARDS_LABEL}!={n}"));
        }
        s
    }
}

/// A Lease that keeps this candidate out: where, who holds it, and until
/// when at the latest (if nothing changes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Blocker {
    pub(crate) lease: String,
    pub(crate) holder: String,
    pub(crate) until: Instant,
}

/// One sibling as last seen: its resourceVersion, since when (local clock)
/// it has been unchanged, and what it says.
#[derive(Clone, Debug)]
struct Seen {
    rv: String,
    since: Instant,
    observed: Observed,
}

/// The sibling Leases (every Lease with the fence's labels except our own),
/// keyed by `namespace/name`. Pure: time comes in as arguments.
#[derive(Debug, Default)]
pub(crate) struct Siblings {
    /// Our own Lease and its peers, as `namespace/name`.
    own: Vec<String>,
    seen: HashMap<String, Seen>,
}

impl Siblings {
    pub(crate) fn new(own_namespace: &str, own_lease: &str, peers: &[String]) -> Siblings {
        let own = std::iter::once(own_lease)
            .chain(peers.iter().map(String::as_str))
            .map(|l| format!("{own_namespace}/{l}"))
            .collect();
        Siblings {
            own,
            seen: HashMap::new(),
        }
    }

    /// A sibling was seen as `observed` at `now`.
    pub(crate) fn observe(&mut self, now: Instant, key: String, observed: Observed) {
        if self.own.contains(&key) {
            return;
        }
        match self.seen.get_mut(&key) {
            Some(s) if s.rv == observed.resource_version => {}
            _ => {
                self.seen.insert(
                    key,
                    Seen {
                        rv: observed.resource_version.clone(),
                        since: now,
                        observed,
                    },
                );
            }
        }
    }

    /// A sibling was deleted.
    pub(crate) fn forget(&mut self, key: &str) {
        self.seen.remove(key);
    }

    /// Everything is listed afresh: siblings not in `keys` are gone.
    pub(crate) fn retain(&mut self, keys: &[String]) {
        self.seen.retain(|k, _| keys.contains(k));
    }

    /// The sibling keeping us out longest at `now`, if any.
    pub(crate) fn blocker(&self, now: Instant) -> Option<Blocker> {
        self.seen
            .iter()
            .filter_map(|(k, s)| blocking(k, &s.observed, s.since, now))
            .max_by_key(|b| b.until)
    }

    /// Judges a fresh list (`key`, object) at `now`: an object at the
    /// resourceVersion already seen has been unchanged since then; any
    /// other was just written.
    pub(crate) fn judge(&self, now: Instant, listed: &[(String, Observed)]) -> Option<Blocker> {
        listed
            .iter()
            .filter(|(k, _)| !self.own.contains(k))
            .filter_map(|(k, o)| {
                let since = match self.seen.get(k) {
                    Some(s) if s.rv == o.resource_version => s.since,
                    _ => now,
                };
                blocking(k, o, since, now)
            })
            .max_by_key(|b| b.until)
    }
}

/// Whether a sibling seen unchanged since `since` still keeps us out.
fn blocking(key: &str, o: &Observed, since: Instant, now: Instant) -> Option<Blocker> {
    let r = &o.record;
    let free = r.is_release_shape() || (r.is_free() && o.comes_from_stopped_term());
    let until = since + r.duration();
    (!free && now < until).then(|| Blocker {
        lease: key.to_string(),
        holder: r.holder.clone(),
        until,
    })
}

/// Where the fence may see its siblings, decided once at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every namespace: a renamed namespace is fenced too.
    Cluster,
    /// Only the elector's own namespace.
    Namespace,
    /// Nowhere (no rights): the fence is off.
    Off,
}

/// One elector's fence: its siblings as seen so far and the client that
/// lists and watches them (in the [`Scope`] decided at start).
#[derive(Clone)]
pub(crate) struct FenceRuntime {
    fence: Fence,
    siblings: Arc<Mutex<Siblings>>,
    client: kube::Client,
    namespace: String,
    lease: String,
}

impl FenceRuntime {
    pub(crate) fn new(
        fence: Fence,
        client: kube::Client,
        namespace: &str,
        lease: &str,
    ) -> FenceRuntime {
        FenceRuntime {
            siblings: Arc::new(Mutex::new(Siblings::new(namespace, lease, &fence.peers))),
            fence,
            client,
            namespace: namespace.into(),
            lease: lease.into(),
        }
    }

    fn siblings(&self) -> std::sync::MutexGuard<'_, Siblings> {
        self.siblings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The Leases of `scope` (never called with [`Scope::Off`]).
    fn api(&self, scope: Scope) -> Api<DynamicObject> {
        match scope {
            Scope::Cluster => Api::all_with(self.client.clone(), &lease_resource()),
            Scope::Namespace | Scope::Off => {
                Api::namespaced_with(self.client.clone(), &self.namespace, &lease_resource())
            }
        }
    }

    fn params(&self) -> ListParams {
        ListParams::default().labels(&self.fence.selector())
    }

    /// Lists the siblings with a quorum read: `Ok` with them, or why not.
    async fn list(&self, scope: Scope) -> Result<Vec<(String, Observed)>, kube::Error> {
        let list = self.api(scope).list(&self.params()).await?;
        Ok(list.items.iter().map(keyed).collect())
    }

    /// Which scope we may list: the cluster, else our namespace, else
    /// [`Scope::Off`] (the fence then says so).
    async fn scope(&self) -> Result<Scope, kube::Error> {
        for scope in [Scope::Cluster, Scope::Namespace] {
            match self.list(scope).await {
                Ok(_) => return Ok(scope),
                Err(e) if classify(&e) == ApiOutcome::Failed(Failure::Forbidden) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Scope::Off)
    }

    /// Called by a new leader after its acquiring write, before its work:
    /// `Err` names the sibling it must leave the work to (or why the
    /// siblings could not be read, which counts as held).
    pub(crate) async fn confirm(&self, scope: Scope) -> Result<(), String> {
        if scope == Scope::Off {
            return Ok(());
        }
        let listed = match self.list(scope).await {
            Ok(l) => l,
            Err(e) => {
                return Err(format!(
                    "the Leases of the same election cannot be read: {e}"
                ));
            }
        };
        let mut s = self.siblings();
        let now = Instant::now();
        let judged = s.judge(now, &listed);
        for (k, o) in listed {
            s.observe(now, k, o);
        }
        match judged {
            None => Ok(()),
            Some(b) => Err(format!(
                "Lease {} of the same election is held by {:?}",
                b.lease, b.holder
            )),
        }
    }

    /// Watches the siblings and pauses the core's acquisitions while one
    /// is held. Returns the scope decided (for [`FenceRuntime::confirm`])
    /// through `scope_tx` once known.
    pub(crate) async fn watch(
        self,
        inputs: UnboundedSender<Input>,
        scope_tx: tokio::sync::watch::Sender<Option<Scope>>,
    ) {
        let what = format!(
            "Leases labelled {} (renames of {}/{})",
            self.fence.selector(),
            self.namespace,
            self.lease
        );
        let scope = loop {
            match self.scope().await {
                Ok(Scope::Off) => {
                    tracing::warn!(
                        "cannot list {what}, neither in the cluster nor in namespace {}: renaming this Lease while agents run is not fenced (grant list and watch on leases)",
                        self.namespace
                    );
                    let _ = scope_tx.send(Some(Scope::Off));
                    return;
                }
                Ok(s) => break s,
                Err(e) => {
                    tracing::debug!("listing {what} failed ({e}); retrying");
                    tokio::time::sleep(RETRY).await;
                }
            }
        };
        if scope == Scope::Namespace {
            tracing::info!(
                "may list {what} only in namespace {}: a change of the election's namespace is not fenced (grant list and watch on leases in a ClusterRole for that)",
                self.namespace
            );
        }
        let _ = scope_tx.send(Some(scope));
        let config = watcher::Config::default().labels(&self.fence.selector());
        let stream = watcher(self.api(scope), config);
        futures_util::pin_mut!(stream);
        let mut paused = false;
        let mut listing: Vec<String> = Vec::new();
        let mut last_error: Option<String> = None;
        // Until when the current blocker keeps us out: judged again then,
        // if no event came first.
        let mut wake: Option<Instant> = None;
        loop {
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                ev = stream.next() => match ev {
                    None => return,
                    Some(Ok(ev)) => {
                        last_error = None;
                        self.apply(ev, &mut listing);
                    }
                    Some(Err(e)) => {
                        let text = e.to_string();
                        if last_error.as_deref() != Some(text.as_str()) {
                            tracing::warn!("cannot watch {what} ({text}); a new leader still lists them before it works");
                            last_error = Some(text);
                        }
                        tokio::time::sleep(RETRY).await;
                    }
                },
                () = sleep => {}
            }
            let blocker = self.siblings().blocker(Instant::now());
            wake = blocker.as_ref().map(|b| b.until);
            if blocker.is_some() != paused {
                paused = blocker.is_some();
                match &blocker {
                    Some(b) => tracing::info!(
                        lease = %format!("{}/{}", self.namespace, self.lease),
                        "not standing while Lease {} of the same election is held by {:?} (renamed while agents still use it); at the latest once it is unchanged until {:?} from now",
                        b.lease,
                        b.holder,
                        b.until.saturating_duration_since(Instant::now())
                    ),
                    None => tracing::info!(
                        lease = %format!("{}/{}", self.namespace, self.lease),
                        "no other Lease of the same election is held: standing again"
                    ),
                }
                if inputs.send(Input::PauseAcquisition(paused)).is_err() {
                    return;
                }
            }
        }
    }

    fn apply(&self, ev: watcher::Event<DynamicObject>, listing: &mut Vec<String>) {
        let now = Instant::now();
        let mut s = self.siblings();
        match ev {
            watcher::Event::Init => listing.clear(),
            watcher::Event::InitApply(o) => {
                let (k, obs) = keyed(&o);
                listing.push(k.clone());
                s.observe(now, k, obs);
            }
            watcher::Event::InitDone => s.retain(listing),
            watcher::Event::Apply(o) => {
                let (k, obs) = keyed(&o);
                s.observe(now, k, obs);
            }
            watcher::Event::Delete(o) => s.forget(&keyed(&o).0),
        }
    }
}

fn keyed(o: &DynamicObject) -> (String, Observed) {
    let key = format!(
        "{}/{}",
        o.metadata.namespace.as_deref().unwrap_or_default(),
        o.metadata.name.as_deref().unwrap_or_default()
    );
    (key, parse(o).0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{LeaseRecord, Term, WallTime};

    fn held(rv: &str, holder: &str, secs: i32) -> Observed {
        Observed {
            resource_version: rv.into(),
            record: LeaseRecord {
                holder: holder.into(),
                duration_secs: Some(secs),
                acquire_time: Some(WallTime::from_unix_micros(1_000_000)),
                renew_time: Some(WallTime::from_unix_micros(2_000_000)),
                transitions: Some(3),
            },
            stopped: None,
        }
    }

    #[test]
    fn the_other_shards_of_the_same_count_never_block_a_shard() {
        let t0 = Instant::now();
        let peers = ["ksm-0-of-2".to_string()];
        let mut s = Siblings::new("ns", "ksm-1-of-2", &peers);
        s.observe(t0, "ns/ksm-0-of-2".into(), held("1", "a", 15));
        assert_eq!(s.blocker(t0), None, "a peer shard is not a rival");
        let listed = [("ns/ksm-0-of-2".to_string(), held("2", "a", 15))];
        assert_eq!(s.judge(t0, &listed), None);
        // A shard of another count guards overlapping work: it blocks.
        s.observe(t0, "ns/ksm-0-of-3".into(), held("3", "b", 15));
        assert_eq!(s.blocker(t0).map(|b| b.holder), Some("b".to_string()));
    }

    #[test]
    fn a_held_sibling_blocks_until_released_or_unchanged_for_its_duration() {
        let t0 = Instant::now();
        let mut s = Siblings::new("ns", "new", &[]);
        s.observe(t0, "ns/old".into(), held("1", "pod-a", 15));
        let b = s.blocker(t0).expect("held");
        assert_eq!((b.lease.as_str(), b.holder.as_str()), ("ns/old", "pod-a"));
        assert_eq!(b.until, t0 + Duration::from_secs(15));
        // The same version seen again does not restart the wait; a renewal does.
        s.observe(
            t0 + Duration::from_secs(10),
            "ns/old".into(),
            held("1", "pod-a", 15),
        );
        assert!(s.blocker(t0 + Duration::from_secs(15)).is_none(), "expired");
        s.observe(
            t0 + Duration::from_secs(16),
            "ns/old".into(),
            held("2", "pod-a", 15),
        );
        assert!(s.blocker(t0 + Duration::from_secs(30)).is_some(), "renewed");
        // Released: free at once.
        let mut release = held("3", "", 1);
        release.record.acquire_time = release.record.renew_time;
        s.observe(t0 + Duration::from_secs(31), "ns/old".into(), release);
        assert!(s.blocker(t0 + Duration::from_secs(31)).is_none());
        // Our own Lease is never a sibling; a deleted sibling is gone.
        s.observe(t0, "ns/new".into(), held("9", "pod-b", 15));
        s.observe(t0, "other/old".into(), held("1", "pod-c", 15));
        assert_eq!(s.blocker(t0).unwrap().lease, "other/old");
        s.forget("other/old");
        assert!(s.blocker(t0).is_none());
    }

    #[test]
    fn a_cleared_holder_blocks_unless_its_term_was_acknowledged() {
        let t0 = Instant::now();
        let mut s = Siblings::new("ns", "new", &[]);
        let mut cleared = held("1", "", 15);
        s.observe(t0, "ns/old".into(), cleared.clone());
        assert!(s.blocker(t0).is_some(), "cleared by hand: waited out");
        cleared.resource_version = "2".into();
        cleared.stopped = Some(Term {
            holder: "pod-a".into(),
            acquire_time: WallTime::from_unix_micros(1_000_000),
            transitions: 3,
        });
        s.observe(t0, "ns/old".into(), cleared);
        assert!(s.blocker(t0).is_none(), "its leader said its work stopped");
    }

    #[test]
    fn a_fresh_list_counts_a_new_version_as_just_written() {
        let t0 = Instant::now();
        let mut s = Siblings::new("ns", "new", &[]);
        s.observe(t0, "ns/old".into(), held("1", "pod-a", 15));
        let later = t0 + Duration::from_secs(20);
        // Unchanged for longer than its duration: expired.
        assert!(
            s.judge(later, &[("ns/old".into(), held("1", "pod-a", 15))])
                .is_none()
        );
        // Written since (a takeover we had not seen): held.
        let b = s
            .judge(later, &[("ns/old".into(), held("2", "pod-b", 15))])
            .expect("held");
        assert_eq!(b.holder, "pod-b");
        // A sibling never seen before is held for its whole duration.
        assert!(
            s.judge(later, &[("ns/x".into(), held("5", "pod-c", 15))])
                .is_some()
        );
        assert!(
            s.judge(later, &[("ns/new".into(), held("5", "pod-c", 15))])
                .is_none()
        );
    }
}
