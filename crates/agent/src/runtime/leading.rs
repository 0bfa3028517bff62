//! The agent's elections: starting and connecting them, their events
//! (a term begins or ends), deferrals between them, hand-overs of shards,
//! and a gated input that keeps failing.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use leasehold_election::{Leadership, Metrics};

use super::elections::{self, Election, ElectionEvent};
use super::supervisor::GatedFailure;
use super::{Agent, CONNECT_RETRY};
use crate::kubeconn;
use crate::monitor::status::ElectionState;

impl Agent {
    pub(super) async fn start_elections(
        &mut self,
        specs: Vec<leasehold_policy::elections::ElectionSpec>,
    ) {
        let total = self.elections.len() + specs.len();
        let ranks = elections::ranks(total, self.rank_seed);
        for spec in specs {
            let key = self.next_key;
            self.next_key += 1;
            let namespace = spec
                .namespace
                .clone()
                .unwrap_or_else(kubeconn::default_namespace);
            self.elections.push(Election {
                key,
                spec,
                namespace,
                handle: None,
                leading: None,
                holder: None,
                state: ElectionState::Unknown,
                rank: 0,
                deferred: Duration::ZERO,
            });
            self.connect_election(key).await;
        }
        for (e, r) in self.elections.iter_mut().zip(ranks) {
            e.rank = r;
        }
        self.update_deferrals();
        self.publish_elections();
    }

    pub(super) async fn connect_election(&mut self, key: usize) {
        let Some(i) = self.elections.iter().position(|e| e.key == key) else {
            return;
        };
        if self.elections[i].handle.is_some() {
            return;
        }
        let kc = self.elections[i].spec.kube_config.clone();
        if !self.connections.contains_key(&kc) {
            let path = kc
                .as_deref()
                .map(Path::new)
                .or(self.opts.kubeconfig.as_deref());
            match kubeconn::connect(path).await {
                Ok(c) => {
                    self.connections.insert(kc.clone(), c);
                }
                Err(e) => {
                    tracing::error!(lease = %self.elections[i].spec.lease, "cannot connect to the API server: {e}; retrying in {CONNECT_RETRY:?} (node-local inputs keep running)");
                    let tx = self.retry_tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(CONNECT_RETRY).await;
                        let _ = tx.send(key);
                    });
                    return;
                }
            }
        }
        let Some(conn) = self.connections.get(&kc) else {
            return;
        };
        let e = &self.elections[i];
        let identity = e
            .spec
            .identity
            .clone()
            .unwrap_or_else(|| self.statics.fields.name.clone());
        let metrics: Arc<dyn Metrics> = self.election_metrics.clone();
        let fleet = self.opts.fleet.as_deref();
        match elections::start(e, conn, &identity, fleet, self.events_tx.clone(), metrics) {
            Ok(h) => {
                if let Some(m) = &self.monitor {
                    let health = h.health();
                    m.add_liveness_check(
                        format!("election {}", e.spec.label()),
                        Arc::new(move || health.check()),
                    );
                }
                tracing::info!(lease = %e.spec.lease, namespace = %e.namespace, identity = %identity, "joined election {}", e.spec.label());
                self.board
                    .set_problem(&format!("election {}", e.spec.label()), None);
                self.balancers.ensure(&self.elections, e, conn, &identity);
                self.elections[i].handle = Some(h);
            }
            Err(err) => {
                // Not a candidate: tried again, and not ready meanwhile
                // (this agent can never run the election's inputs).
                tracing::error!(lease = %e.spec.lease, "cannot start election {}: {err}; retrying in {CONNECT_RETRY:?}", e.spec.label());
                self.board.set_problem(
                    &format!("election {}", e.spec.label()),
                    Some((format!("cannot start: {err}"), true)),
                );
                let tx = self.retry_tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(CONNECT_RETRY).await;
                    let _ = tx.send(key);
                });
            }
        }
    }

    pub(super) fn on_election_event(&mut self, ev: ElectionEvent) {
        match ev {
            ElectionEvent::Leading {
                key,
                term,
                token,
                tracker,
            } => {
                if let Some(e) = self.elections.iter_mut().find(|e| e.key == key)
                    && !token.is_cancelled()
                {
                    tracing::info!(lease = %e.spec.lease, term, "leading election {}", e.spec.label());
                    e.leading = Some(elections::LeaderTerm {
                        term,
                        token,
                        tracker,
                    });
                    e.state = ElectionState::Leading;
                    e.holder = Some(
                        e.spec
                            .identity
                            .clone()
                            .unwrap_or_else(|| self.statics.fields.name.clone()),
                    );
                }
            }
            ElectionEvent::SteppedDown { key, term } => {
                if let Some(e) = self.elections.iter_mut().find(|e| e.key == key)
                    && e.leading.as_ref().is_some_and(|t| t.term == term)
                {
                    tracing::info!(lease = %e.spec.lease, term, "stepped down in election {}", e.spec.label());
                    e.leading = None;
                    if e.state == ElectionState::Leading {
                        e.state = ElectionState::Unknown;
                    }
                }
            }
            ElectionEvent::State { key, state } => {
                if let Some(e) = self.elections.iter_mut().find(|e| e.key == key) {
                    match state {
                        Leadership::Following { holder } => {
                            e.state = ElectionState::Following;
                            e.holder = holder;
                        }
                        Leadership::Leading { .. } => e.state = ElectionState::Leading,
                        Leadership::Stopped => e.state = ElectionState::Stopped,
                        _ => e.state = ElectionState::Unknown,
                    }
                    // A term token cancelled behind our back (shutdown) ends it too.
                    if e.leading.as_ref().is_some_and(|t| t.token.is_cancelled()) {
                        e.leading = None;
                    }
                }
            }
        }
        self.publish_elections();
    }

    pub(super) fn update_deferrals(&mut self) {
        let delays = elections::deferrals(&self.elections);
        for (e, d) in self.elections.iter_mut().zip(delays) {
            if e.deferred != d
                && let Some(h) = &e.handle
            {
                h.defer_acquisition(d);
                e.deferred = d;
            }
        }
    }

    pub(super) fn on_gated_failure(&mut self, f: GatedFailure) {
        let Some(e) = self.elections.iter().find(|e| e.key == f.election) else {
            return;
        };
        let Some(t) = &e.leading else { return };
        if t.term != f.term || f.failures < e.spec.handover_after_failures {
            return;
        }
        let hold_back = e.timings().lease_duration() * 2;
        tracing::warn!(
            lease = %e.spec.lease,
            input = %f.id,
            "input failed {} times in a row while leading; handing the lease over and holding back for {hold_back:?} so a healthy agent takes the work (this agent stays a candidate)",
            f.failures
        );
        if let Some(h) = &e.handle {
            h.resigner().resign(hold_back);
        }
    }

    pub(super) fn publish_elections(&mut self) {
        for e in &self.elections {
            self.board.set_election(e.spec.label(), e.status());
        }
        self.balancers.publish(&self.elections);
    }

    /// Hands shard `key` over (its balancer found it led by this agent while
    /// another candidate leads two fewer): steps down, releases the Lease
    /// once the shard's work stopped, and holds back a third of a lease
    /// duration so that the other candidate takes it.
    pub(super) fn hand_over_shard(&mut self, key: usize) {
        let Some(e) = self.elections.iter().find(|e| e.key == key) else {
            return;
        };
        if e.leading.is_none() {
            return;
        }
        if let Some(h) = &e.handle {
            tracing::info!(lease = %e.spec.lease, "handing shard {} over", e.spec.label());
            h.resigner().resign(e.timings().lease_duration() / 3);
        }
    }
}
