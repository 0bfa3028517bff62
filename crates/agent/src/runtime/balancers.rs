//! One [`Candidacy`] task per sharded election this agent runs: started
//! once the election's first shard has a connection, fed the shards'
//! holders after every election event, stopped (withdrawing the candidate
//! Lease) when the election leaves the policy or the agent stops.

use std::collections::HashMap;

use kube::Api;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::candidacy::{Candidacy, ShardView};
use super::elections::Election;
use crate::kubeconn::Connection;

struct Balancer {
    view: watch::Sender<Vec<ShardView>>,
    stop: CancellationToken,
    join: JoinHandle<()>,
}

/// The running balancers, by election name and shard count (a reload that
/// changes the count starts a new one), and where they ask for hand-overs.
pub struct Balancers {
    running: HashMap<(String, u32), Balancer>,
    release_tx: UnboundedSender<usize>,
    /// Election keys of shards to hand over.
    pub release_rx: UnboundedReceiver<usize>,
}

impl Default for Balancers {
    fn default() -> Self {
        let (release_tx, release_rx) = mpsc::unbounded_channel();
        Balancers {
            running: HashMap::new(),
            release_tx,
            release_rx,
        }
    }
}

/// The shards of election `name` with `count` shards, in shard order.
fn view_of(elections: &[Election], name: &str, count: u32) -> Vec<ShardView> {
    let mut shards: Vec<(u32, ShardView)> = elections
        .iter()
        .filter(|e| {
            e.spec.shard.is_some_and(|s| s.count == count) && e.spec.name.as_deref() == Some(name)
        })
        .map(|e| {
            (
                e.spec.shard.map_or(0, |s| s.index),
                ShardView {
                    key: e.key,
                    holder: e.holder.clone(),
                },
            )
        })
        .collect();
    shards.sort_by_key(|(i, _)| *i);
    shards.into_iter().map(|(_, v)| v).collect()
}

impl Balancers {
    /// Starts the balancer of `e`'s election if it is sharded and has none.
    pub fn ensure(
        &mut self,
        elections: &[Election],
        e: &Election,
        conn: &Connection,
        identity: &str,
    ) {
        let (Some(name), Some(shard)) = (&e.spec.name, e.spec.shard) else {
            return;
        };
        let id = (name.clone(), shard.count);
        if self.running.contains_key(&id) {
            return;
        }
        let suffix = format!("-{}-of-{}", shard.index, shard.count);
        // Candidates of another shard count (a change of `shards` in a
        // rolling update) cannot take this count's shards: not counted.
        let base = format!(
            "{}-of-{}",
            e.spec.lease.strip_suffix(&suffix).unwrap_or(&e.spec.lease),
            shard.count
        );
        let candidacy = Candidacy {
            api: Api::namespaced(conn.client.clone(), &e.namespace),
            election: name.clone(),
            base,
            identity: identity.to_string(),
            lease_duration: e.timings().lease_duration(),
        };
        let (view, rx) = watch::channel(view_of(elections, name, shard.count));
        let stop = CancellationToken::new();
        let join = tokio::spawn(candidacy.run(rx, self.release_tx.clone(), stop.clone()));
        self.running.insert(id, Balancer { view, stop, join });
    }

    /// Gives every balancer its shards' holders; stops those whose
    /// election is gone.
    pub fn publish(&mut self, elections: &[Election]) {
        self.running.retain(|(name, count), b| {
            let view = view_of(elections, name, *count);
            if view.is_empty() {
                b.stop.cancel();
                return false;
            }
            b.view.send_if_modified(|v| {
                let changed = *v != view;
                *v = view;
                changed
            });
            true
        });
    }

    /// Stops every balancer and waits (until `deadline`) for them to
    /// withdraw their candidate Leases.
    pub async fn shutdown(&mut self, deadline: tokio::time::Instant) {
        let joins: Vec<JoinHandle<()>> = self
            .running
            .drain()
            .map(|(_, b)| {
                b.stop.cancel();
                b.join
            })
            .collect();
        let all = futures_util::future::join_all(joins);
        let _ = tokio::time::timeout_at(deadline, all).await;
    }
}
