//! Who stands for a sharded election. Agents that lead no shard are
//! invisible in the shard Leases, so each agent keeps a candidate Lease of
//! its own (`<lease>-of-<N>-candidate-<hash of identity>`, labelled with
//! the election and shard count) renewed every lease duration and deleted
//! when it stops; an
//! agent leading two or more shards lists them once per lease duration
//! and hands a shard over when [`super::balance`] says so. Only agents
//! leading two or more shards list, so a settled DaemonSet larger than the
//! shard count costs the API server one Lease write per agent per lease
//! duration and no reads.
//!
//! The candidate Leases only steer the spread: a missing or stale one
//! delays a rebalance, never lets two agents lead one shard (the shard
//! Leases decide that).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use tokio::sync::{mpsc::UnboundedSender, watch};
use tokio_util::sync::CancellationToken;

use super::balance::shards_to_release;

/// Label on candidate Leases naming the election they stand for.
pub const CANDIDATE_LABEL: &str = "leasehold.dev/candidate-for";

/// A candidate Lease counts while renewed within this many lease
/// durations.
const LIVE_FOR: u32 = 3;

/// After handing a shard over, no other hand-over for this many lease
/// durations (the taker needs a moment to show up as holder).
const AFTER_RELEASE: u32 = 2;

/// When a shard handed over came back (nobody else took it), no hand-over
/// for this many lease durations, doubled for each bounce in a row up to
/// [`AFTER_BOUNCE_MAX`]: a race lost once (the least busy agent was slow to
/// take it) is retried soon, a candidate that cannot lead is not handed
/// shards over and over.
const AFTER_BOUNCE: u32 = 3;

/// The longest wait after bounces in a row, in lease durations.
const AFTER_BOUNCE_MAX: u32 = 12;

/// The wait after the `n`th bounce in a row (from 0), in lease durations.
fn after_bounce(n: u32) -> u32 {
    AFTER_BOUNCE
        .saturating_mul(1 << n.min(8))
        .min(AFTER_BOUNCE_MAX)
}

/// Shards this agent handed over.
struct Released {
    /// Their election keys.
    keys: Vec<usize>,
    /// No other hand-over before this.
    until: tokio::time::Instant,
    /// For each, whether it has been seen held by someone else (or free)
    /// since.
    away: Vec<bool>,
}

/// One shard as the runtime sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardView {
    /// The runtime's key of the shard's election.
    pub key: usize,
    /// Its holder as last seen.
    pub holder: Option<String>,
}

/// What a balancer needs to know about its election and this agent.
pub struct Candidacy {
    /// Where the Leases live.
    pub api: Api<Lease>,
    /// The election's name (status, logs).
    pub election: String,
    /// The shard Leases' common base name and count, `<lease>-of-<N>`.
    pub base: String,
    /// This agent's identity, as it appears in holder fields.
    pub identity: String,
    /// The election's lease duration.
    pub lease_duration: Duration,
}

impl Candidacy {
    /// The candidate Lease's name.
    fn name(&self) -> String {
        let hash = leasehold_policy::fnv::fnv1a64(self.identity.as_bytes());
        format!("{}-candidate-{hash:016x}", self.base)
    }

    /// The label value shared by the election's candidate Leases.
    fn label(&self) -> String {
        let base = &self.base;
        if base.len() <= 63 {
            return base.clone();
        }
        format!("c-{:016x}", leasehold_policy::fnv::fnv1a64(base.as_bytes()))
    }

    fn record(&self) -> Lease {
        let secs = self
            .lease_duration
            .as_secs()
            .saturating_mul(u64::from(LIVE_FOR));
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name()),
                labels: Some([(CANDIDATE_LABEL.to_string(), self.label())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(i32::try_from(secs).unwrap_or(i32::MAX)),
                renew_time: Some(MicroTime(jiff::Timestamp::now())),
                ..LeaseSpec::default()
            }),
        }
    }

    /// Creates or renews this agent's candidate Lease: one update on the
    /// resource version it last wrote; a create, or a read first, only at
    /// start or when someone else changed it.
    async fn renew(&self, version: &mut Option<String>) -> Result<(), kube::Error> {
        let mut lease = self.record();
        let pp = PostParams::default();
        if let Some(rv) = version.take() {
            lease.metadata.resource_version = Some(rv);
            match self.api.replace(&self.name(), &pp, &lease).await {
                Ok(l) => {
                    *version = l.metadata.resource_version;
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                    lease.metadata.resource_version = None;
                }
                Err(e) => return Err(e),
            }
        }
        match self.api.create(&pp, &lease).await {
            Ok(l) => {
                *version = l.metadata.resource_version;
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let current = self.api.get(&self.name()).await?;
                lease.metadata.resource_version = current.metadata.resource_version;
                let l = self.api.replace(&self.name(), &pp, &lease).await?;
                *version = l.metadata.resource_version;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The identities of the live candidates.
    async fn live(&self) -> Result<Vec<String>, kube::Error> {
        let selector = format!("{CANDIDATE_LABEL}={}", self.label());
        let list = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?;
        let now = jiff::Timestamp::now();
        Ok(list
            .items
            .into_iter()
            .filter_map(|l| l.spec)
            .filter(|s| {
                let ttl = jiff::SignedDuration::from_secs(i64::from(
                    s.lease_duration_seconds.unwrap_or(0),
                ));
                s.renew_time
                    .as_ref()
                    .and_then(|t| t.0.checked_add(ttl).ok())
                    .is_some_and(|until| until > now)
            })
            .filter_map(|s| s.holder_identity)
            .collect())
    }

    /// Deletes this agent's candidate Lease (at shutdown or when the
    /// election goes away).
    async fn withdraw(&self) {
        if let Err(e) = self
            .api
            .delete(&self.name(), &DeleteParams::default())
            .await
            && !matches!(&e, kube::Error::Api(s) if s.code == 404)
        {
            tracing::debug!(election = %self.election, "deleting the candidate Lease: {e}");
        }
    }

    /// Keeps the candidate Lease and hands shards over, until `stop`;
    /// `view` is the election's shards as the runtime sees them, `release`
    /// where it asks the runtime to hand a shard (election key) over.
    pub async fn run(
        self,
        mut view: watch::Receiver<Vec<ShardView>>,
        release: UnboundedSender<usize>,
        stop: CancellationToken,
    ) {
        let period = self.lease_duration;
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut refused = false;
        // The resource version of the candidate Lease as last written.
        let mut version: Option<String> = None;
        // The last hand-over, until when no other follows it.
        let mut released: Option<Released> = None;
        // Hand-overs in a row whose shard came back.
        let mut bounces = 0;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
                r = view.changed() => {
                    if r.is_err() {
                        break;
                    }
                    if let Some(r) = released.as_mut() {
                        let holders: Vec<Option<String>> = {
                            let v = view.borrow();
                            r.keys
                                .iter()
                                .map(|k| v.iter().find(|s| s.key == *k).and_then(|s| s.holder.clone()))
                                .collect()
                        };
                        let me = Some(self.identity.as_str());
                        if holders.iter().any(|h| h.is_some() && h.as_deref() != me) {
                            // Another agent took one: the hand-over worked.
                            bounces = 0;
                        }
                        for (away, h) in r.away.iter_mut().zip(&holders) {
                            *away |= h.as_deref() != me;
                        }
                        let back = r.away.iter().zip(&holders).any(|(away, h)| *away && h.as_deref() == me);
                        if back && tokio::time::Instant::now() < r.until {
                            // Nobody else took it: the least busy agent was
                            // slow, or some candidate cannot lead.
                            let wait = period * after_bounce(bounces);
                            tracing::info!(election = %self.election, "a shard handed over came back: no other candidate took it; not handing over again for {wait:?}");
                            bounces += 1;
                            r.until = tokio::time::Instant::now() + wait;
                            r.keys.clear();
                            r.away.clear();
                        }
                    }
                    continue;
                }
            }
            match self.renew(&mut version).await {
                Ok(()) => refused = false,
                Err(e) => {
                    if !refused {
                        tracing::warn!(election = %self.election, "cannot write candidate Lease {}: {e}; agents that lead no shard stay invisible, so shards are not moved to them (grant create, get and update on leases)", self.name());
                    }
                    refused = true;
                }
            }
            if released
                .as_ref()
                .is_some_and(|r| tokio::time::Instant::now() < r.until)
            {
                continue;
            }
            let shards = view.borrow().clone();
            let led = shards
                .iter()
                .filter(|s| s.holder.as_deref() == Some(self.identity.as_str()))
                .count();
            if led < 2 {
                continue;
            }
            let candidates = match self.live().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(election = %self.election, "listing candidate Leases: {e}");
                    Vec::new()
                }
            };
            // Judge against the view now: it may have moved meanwhile.
            let shards = view.borrow().clone();
            let holders: Vec<Option<&str>> = shards.iter().map(|s| s.holder.as_deref()).collect();
            let cands: Vec<&str> = candidates.iter().map(String::as_str).collect();
            let give = shards_to_release(&self.identity, &holders, &cands);
            if !give.is_empty() {
                tracing::info!(election = %self.election, shards = ?give, led, candidates = cands.len(), "handing shards over so that shards spread evenly");
                let keys: Vec<usize> = give.iter().map(|i| shards[*i].key).collect();
                if keys.iter().any(|k| release.send(*k).is_err()) {
                    break;
                }
                released = Some(Released {
                    away: vec![false; keys.len()],
                    keys,
                    until: tokio::time::Instant::now() + period * AFTER_RELEASE,
                });
            }
        }
        self.withdraw().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounce_waits_little_and_bounces_in_a_row_wait_longer_up_to_a_bound() {
        assert_eq!(after_bounce(0), AFTER_BOUNCE);
        assert!(after_bounce(1) > after_bounce(0));
        assert_eq!(after_bounce(2), AFTER_BOUNCE_MAX);
        assert_eq!(after_bounce(u32::MAX), AFTER_BOUNCE_MAX);
    }
}
