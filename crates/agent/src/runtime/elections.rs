//! The agent's elections: one elector per election the policy refers to,
//! the variables each publishes, the leadership term gated inputs are bound
//! to, and the acquisition deferral that spreads several elections across
//! the agents.

use std::sync::Arc;
use std::time::Duration;

use leasehold_election::{
    ElectionHandle, Elector, Fence, Leadership, Metrics, StateChange, Timings,
};
use leasehold_policy::elections::{ElectionSpec, PROVIDER};
use leasehold_policy::{Map, ShardedElection, Value};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::kubeconn::Connection;
use crate::monitor::status::{ElectionState, ElectionStatus};

/// What electors tell the runtime.
pub enum ElectionEvent {
    /// A term began: gated inputs of this election now run under it.
    Leading {
        /// Election key.
        key: usize,
        /// The term.
        term: i64,
        /// Cancelled at step-down.
        token: CancellationToken,
        /// The term's gated inputs; step-down waits for it to empty.
        tracker: TaskTracker,
    },
    /// The term ended (its token was cancelled).
    SteppedDown {
        /// Election key.
        key: usize,
        /// The term.
        term: i64,
    },
    /// The elector's view changed (for holder and status).
    State {
        /// Election key.
        key: usize,
        /// The new state.
        state: Leadership,
    },
}

/// A term this agent leads.
#[derive(Clone)]
pub struct LeaderTerm {
    /// `leaseTransitions` of the term.
    pub term: i64,
    /// Cancelled at step-down.
    pub token: CancellationToken,
    /// Where the term's gated inputs are spawned.
    pub tracker: TaskTracker,
}

/// One running election.
pub struct Election {
    /// Unique for the agent's lifetime (survives reloads of other elections).
    pub key: usize,
    /// As the policy gives it.
    pub spec: ElectionSpec,
    /// The Lease's namespace.
    pub namespace: String,
    /// The running elector; `None` until connected.
    pub handle: Option<ElectionHandle>,
    /// The term this agent leads, if any.
    pub leading: Option<LeaderTerm>,
    /// The holder as last seen.
    pub holder: Option<String>,
    /// For status.
    pub state: ElectionState,
    /// Its place in this agent's order of preference (spread).
    pub rank: u32,
    /// The deferral last given to the elector.
    pub deferred: Duration,
}

impl Election {
    /// Timings of the spec.
    pub fn timings(&self) -> Timings {
        timings_of(&self.spec)
    }

    /// The `{leader, term, holder, shard, shards}` variables (an election
    /// without shards is shard 0 of 1).
    pub fn vars(&self) -> Value {
        let mut m = Map::new();
        m.insert("leader", Value::Bool(self.leading.is_some()));
        m.insert(
            "term",
            self.leading
                .as_ref()
                .map_or(Value::Null, |t| Value::Int(t.term)),
        );
        m.insert(
            "holder",
            self.holder.clone().map_or(Value::Null, Value::Str),
        );
        let (index, count) = self.spec.shard.map_or((0, 1), |s| (s.index, s.count));
        m.insert("shard", Value::Int(i64::from(index)));
        m.insert("shards", Value::Int(i64::from(count)));
        Value::Map(m)
    }

    /// For `/status`.
    pub fn status(&self) -> ElectionStatus {
        ElectionStatus {
            lease: self.spec.lease.clone(),
            namespace: self.namespace.clone(),
            state: self.state.clone(),
            holder: self.holder.clone(),
            term: self
                .leading
                .as_ref()
                .and_then(|t| u64::try_from(t.term).ok()),
        }
    }

    /// How long a gated child process gets between SIGTERM and SIGKILL:
    /// a quarter of lease duration − renew deadline, so it is gone well
    /// before anyone else can see the lease expire.
    pub fn stop_grace(&self) -> Duration {
        let t = self.timings();
        ((t.lease_duration() - t.renew_deadline()) / 4).min(crate::inputs::exec::DEFAULT_STOP_GRACE)
    }
}

/// The timings of `spec`. A spec's [`leasehold_policy::providers::LeaseTimings`]
/// exist only when the policy crate's copy of the timing rule accepts them,
/// and `tests/timing_rules.rs` shows both copies refuse exactly the same
/// timings, so the election crate accepts them too: there is no default
/// to fall back to, and reaching the `Err` arm means the two copies of the
/// rule were changed apart.
pub fn timings_of(spec: &ElectionSpec) -> Timings {
    let [d, r, p] = spec.timings_s.secs();
    match Timings::new(
        Duration::from_secs(d),
        Duration::from_secs(r),
        Duration::from_secs(p),
    ) {
        Ok(t) => t,
        Err(e) => unreachable!(
            "lease timings {d}s / {r}s / {p}s passed the policy's timing rule but not the election's ({e}): the two copies of the rule differ"
        ),
    }
}

/// The `kubernetes_leaderelection` provider value for all elections.
pub fn provider_value(elections: &[Election]) -> Option<Value> {
    if elections.is_empty() {
        return None;
    }
    let mut m = Map::new();
    for e in elections {
        match (&e.spec.name, e.spec.shard) {
            (None, _) => return Some(e.vars()),
            (Some(n), None) => m.insert(n.clone(), e.vars()),
            // Inputs of a sharded election render once per shard with that
            // shard's variables ([`sharded`]); here only the count.
            (Some(n), Some(s)) => {
                let mut g = Map::new();
                g.insert("shards", Value::Int(i64::from(s.count)));
                m.insert(n.clone(), Value::Map(g));
            }
        }
    }
    Some(Value::Map(m))
}

/// The sharded elections with each shard's variables, for
/// [`leasehold_policy::render_sharded`].
pub fn sharded(elections: &[Election]) -> Vec<ShardedElection> {
    let mut out: Vec<ShardedElection> = Vec::new();
    for e in elections {
        let (Some(name), Some(_)) = (&e.spec.name, e.spec.shard) else {
            continue;
        };
        match out.iter_mut().find(|g| &g.name == name) {
            Some(g) => g.shards.push(e.vars()),
            None => out.push(ShardedElection {
                name: name.clone(),
                shards: vec![e.vars()],
            }),
        }
    }
    out
}

/// Whether `e` is the election a rendered input is bound to: the one that
/// owns the variable, and for a sharded election the input's shard.
pub fn binds(e: &Election, var: &str, shard: Option<u32>) -> bool {
    e.spec.owns_var(var) && e.spec.shard.map(|s| s.index) == shard
}

/// The provider name, for [`leasehold_policy::Vars::set_provider`].
pub const PROVIDER_NAME: &str = PROVIDER;

/// The rename fence's `election` label of `spec`: its name (`default` for
/// the unnamed election; the same for every shard), or a hash of it when
/// the name is no label value.
pub fn fence_label(spec: &ElectionSpec) -> String {
    let name = spec.group();
    if leasehold_election::names::validate_label_value("election", name).is_ok() {
        return name.to_string();
    }
    format!("e-{:016x}", leasehold_policy::fnv::fnv1a64(name.as_bytes()))
}

/// Starts the elector of `e` with connection `conn` and identity; with a
/// `fleet`, behind the rename fence.
pub fn start(
    e: &Election,
    conn: &Connection,
    identity: &str,
    fleet: Option<&str>,
    tx: UnboundedSender<ElectionEvent>,
    metrics: Arc<dyn Metrics>,
) -> Result<ElectionHandle, String> {
    let key = e.key;
    let state_tx = tx.clone();
    let mut builder = Elector::builder(
        conn.client.clone(),
        e.namespace.clone(),
        e.spec.lease.clone(),
        identity.to_string(),
    )
    .connection_info(conn.server.clone(), conn.user.clone())
    .timings(e.timings())
    .release_on_shutdown(e.spec.release_on_shutdown)
    .metrics(metrics);
    if let Some(fleet) = fleet {
        builder = builder.fence(Fence {
            fleet: fleet.to_string(),
            election: fence_label(&e.spec),
            peers: shard_peers(&e.spec),
            shards: e.spec.shard.map(|s| s.count),
        });
    }
    builder
        .on_state(move |c: &StateChange| {
            let _ = state_tx.send(ElectionEvent::State {
                key,
                state: c.state.clone(),
            });
        })
        .on_leading(move |term, token| {
            let tx = tx.clone();
            async move {
                let term = i64::from(term.transitions);
                let tracker = TaskTracker::new();
                let _ = tx.send(ElectionEvent::Leading {
                    key,
                    term,
                    token: token.clone(),
                    tracker: tracker.clone(),
                });
                token.cancelled().await;
                let _ = tx.send(ElectionEvent::SteppedDown { key, term });
                // Step-down completes when every gated input of the term is
                // gone (their tokens are children of this one).
                tracker.close();
                tracker.wait().await;
            }
        })
        .spawn()
        .map_err(|e| e.to_string())
}

/// The other shards' Leases of a shard's election (same count): they share
/// its fence labels without being rivals.
fn shard_peers(spec: &ElectionSpec) -> Vec<String> {
    let Some(s) = spec.shard else {
        return Vec::new();
    };
    let suffix = format!("-{}-of-{}", s.index, s.count);
    let Some(base) = spec.lease.strip_suffix(&suffix) else {
        return Vec::new();
    };
    (0..s.count)
        .filter(|i| *i != s.index)
        .map(|i| leasehold_policy::elections::shard_lease(base, i, s.count))
        .collect()
}

/// The acquisition deferral of each election (same order), so that an
/// agent already leading k other elections waits `unit × (k + rank / 2N)`
/// before taking a free lease (N elections, `rank` < N): agents leading
/// fewer elections come first by at least half a unit (a margin that
/// survives a loaded node or a slow watch, so a shard handed over goes to
/// the least busy agent and does not bounce), among equals the per-agent
/// random rank breaks ties, and an idle agent waits less than half a unit.
/// `unit` is half the retry period. One election: no deferral.
pub fn deferrals(elections: &[Election]) -> Vec<Duration> {
    let n = elections.len() as u32;
    let led = elections.iter().filter(|e| e.leading.is_some()).count() as u32;
    elections
        .iter()
        .map(|e| {
            if n <= 1 {
                return Duration::ZERO;
            }
            let others = led - u32::from(e.leading.is_some());
            let unit = e.timings().retry_period() / 2;
            unit * others + unit * e.rank / (2 * n)
        })
        .collect()
}

/// A random permutation of `0..n` for this agent's election ranks.
pub fn ranks(n: usize, seed: u64) -> Vec<u32> {
    let mut r: Vec<u32> = (0..n as u32).collect();
    let mut x = seed | 1;
    for i in (1..r.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.swap(i, (x % (i as u64 + 1)) as usize);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_policy::elections::DEFAULT_HANDOVER_AFTER_FAILURES;

    fn election(key: usize, rank: u32, leading: bool) -> Election {
        Election {
            key,
            spec: ElectionSpec {
                name: Some(format!("e{key}")),
                lease: format!("l{key}"),
                namespace: None,
                identity: None,
                kube_config: None,
                timings_s: Default::default(),
                release_on_shutdown: true,
                handover_after_failures: DEFAULT_HANDOVER_AFTER_FAILURES,
                shard: None,
            },
            namespace: "ns".into(),
            handle: None,
            leading: leading.then(|| LeaderTerm {
                term: 1,
                token: CancellationToken::new(),
                tracker: TaskTracker::new(),
            }),
            holder: None,
            state: ElectionState::Unknown,
            rank,
            deferred: Duration::ZERO,
        }
    }

    #[test]
    fn busier_agents_wait_longer_than_any_idle_one() {
        let s = Duration::from_secs(1);
        // Idle agent: only its rank, in steps of a unit / 2N.
        let idle = [election(0, 1, false), election(1, 0, false)];
        assert_eq!(deferrals(&idle), vec![s / 4, Duration::ZERO]);
        // Leading e0: e1 waits 1 + 0 units, at least half a unit (a
        // quarter of the retry period) more than any idle rank.
        let busy = [election(0, 1, true), election(1, 0, false)];
        assert_eq!(deferrals(&busy), vec![s / 4, s]);
        let idle_max = deferrals(&idle).into_iter().max().unwrap();
        assert!(deferrals(&busy)[1] >= idle_max + s / 2);
        // With 8 elections: the slowest agent leading one other (rank 7)
        // still comes more than half a unit before the quickest agent
        // leading two (rank 0).
        let one: Vec<Election> = (0..8)
            .map(|i| election(i, if i == 7 { 7 } else { 0 }, i == 0))
            .collect();
        let two: Vec<Election> = (0..8).map(|i| election(i, 0, i < 2)).collect();
        let (slow, quick) = (deferrals(&one)[7], deferrals(&two)[7]);
        assert_eq!(quick, s * 2);
        assert!(quick >= slow + s / 2, "{slow:?} vs {quick:?}");
        // One election: never deferred.
        assert_eq!(deferrals(&[election(0, 0, true)]), vec![Duration::ZERO]);
    }

    #[test]
    fn an_elections_fence_label_is_its_name_or_a_stable_hash() {
        let mut e = election(0, 0, false);
        assert_eq!(fence_label(&e.spec), "e0");
        e.spec.name = None;
        assert_eq!(fence_label(&e.spec), "default");
        e.spec.name = Some("cluster metrics/ksm".into());
        let hashed = fence_label(&e.spec);
        assert!(hashed.starts_with("e-") && hashed.len() == 18, "{hashed}");
        assert_eq!(fence_label(&e.spec), hashed, "the same on every agent");
        assert!(leasehold_election::names::validate_label_value("election", &hashed).is_ok());
    }

    #[test]
    fn ranks_are_permutations() {
        for seed in 0..50 {
            let mut r = ranks(5, seed);
            r.sort_unstable();
            assert_eq!(r, vec![0, 1, 2, 3, 4]);
        }
    }

    #[test]
    fn variables_follow_the_term() {
        let e = election(0, 0, true);
        let Value::Map(m) = e.vars() else { panic!() };
        assert_eq!(m.get("leader"), Some(&Value::Bool(true)));
        assert_eq!(m.get("term"), Some(&Value::Int(1)));
        let f = election(1, 0, false);
        let Value::Map(m) = provider_value(&[e, f]).unwrap() else {
            panic!()
        };
        assert!(m.contains_key("e0") && m.contains_key("e1"));
    }
}
