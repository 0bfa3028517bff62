//! Running input instances: starting one under its term (if gated),
//! stopping one at once or after it drained its files, and pruning those
//! that ended.

use std::sync::Arc;

use leasehold_policy::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::reconcile::Instance;
use super::supervisor::{self, Supervised};
use super::{Agent, Running, StopHow, Stopping};
use crate::inputs::{self, InputSpec};
use crate::pipeline::publisher::{EventSink, TermStamp};

impl Agent {
    pub(super) fn start_input(
        &mut self,
        instance: Instance,
        spec: InputSpec,
        fields: Option<&Value>,
    ) {
        let keys = spec.input.state_keys();
        if let Some(held) = self.held_by_draining(&keys) {
            // Started by the reconcile after that drain ended.
            tracing::debug!(input = %instance.id, registry = %held, "input waits for its predecessor to read its files to their ends");
            return;
        }
        let Some(sender) = self.outputs.sender(&spec.use_output) else {
            return;
        };
        let term = instance.binding.and_then(|b| {
            self.elections
                .iter()
                .find(|e| e.key == b.election)
                .and_then(|e| e.leading.clone().map(|t| (e, t)))
        });
        let checkpoints = term
            .as_ref()
            .and_then(|(e, _)| e.handle.as_ref().map(|h| h.checkpoints()));
        let (cancel, stamp, grace, tracker, gated) = match &term {
            Some((e, t)) => (
                t.token.child_token(),
                Some(TermStamp {
                    lease: e.spec.lease.clone(),
                    term: t.term,
                    token: t.token.clone(),
                    tracker: t.tracker.clone(),
                }),
                e.stop_grace(),
                Some(t.tracker.clone()),
                Some((e.key, t.term, self.failures_tx.clone())),
            ),
            None => (
                CancellationToken::new(),
                None,
                inputs::exec::DEFAULT_STOP_GRACE,
                None,
                None,
            ),
        };
        let abandon = CancellationToken::new();
        let sink = EventSink::new(
            &instance.id,
            &spec.type_name,
            &self.statics.fields,
            &spec.data_stream,
            stamp,
            abandon.clone(),
            Arc::new(sender.for_input(&instance.id)),
            self.metrics.input_counters(&instance.id),
        );
        let sink = match fields {
            Some(f) => sink.with_fields(f),
            None => sink,
        };
        let sink = match &spec.processors {
            Some(p) => sink.with_processors(Arc::clone(p), &spec.data_stream.dataset),
            None => sink,
        };
        let finish = CancellationToken::new();
        let sup = Supervised {
            id: instance.id.clone(),
            spec: spec.clone(),
            sink,
            cancel: cancel.clone(),
            finish: finish.clone(),
            redactor: self.loaded.redactor.clone(),
            stop_grace: grace,
            cluster: inputs::ClusterAccess {
                kubeconfig: self.opts.kubeconfig.clone(),
                checkpoints,
            },
            registries: Arc::clone(&self.registries),
            gated,
            board: self.board.clone(),
            metrics: self.metrics.clone(),
        };
        let join = match tracker {
            Some(t) => t.spawn(supervisor::supervise(sup)),
            None => tokio::spawn(supervisor::supervise(sup)),
        };
        tracing::info!(input = %instance.id, r#type = %spec.type_name, gated = instance.binding.is_some(), "input started");
        self.board
            .input_started(instance.id.clone(), spec.type_name.clone());
        self.running.insert(
            instance.id.clone(),
            Running {
                instance,
                spec,
                dynamic: fields.is_some(),
                keys,
                cancel,
                finish,
                abandon,
                join,
                grace,
            },
        );
    }

    pub(super) fn stop_input(&mut self, id: &str) {
        self.stop(id, StopHow::Now, false);
    }

    /// Stops `id`; a dynamic input stopped `for_good` has its metrics and
    /// registries forgotten once it ended (its container is gone).
    pub(super) fn stop(&mut self, id: &str, how: StopHow, for_good: bool) {
        if let Some(r) = self.running.remove(id) {
            let now = Instant::now();
            let draining = if how == StopHow::Drain {
                r.finish.cancel();
                tracing::info!(input = %id, r#type = %r.spec.type_name, "input stopping: reading its files to their ends first");
                Some((r.keys.clone(), now + self.drain_limit()))
            } else {
                r.cancel.cancel();
                tracing::info!(input = %id, r#type = %r.spec.type_name, "input stopped");
                None
            };
            self.board.input_stopped(id);
            let cut_at = draining.as_ref().map_or(now, |(_, at)| *at);
            // A stopping input may wait for queue room only a while.
            self.stopping.push(Stopping {
                join: r.join,
                cancel: r.cancel,
                abandon: r.abandon,
                until: cut_at + r.grace * 2,
                forget: (for_good && r.dynamic).then(|| id.to_string()),
                draining,
            });
        }
    }

    /// A registry of `keys` that a draining input still holds.
    pub(super) fn held_by_draining(&self, keys: &[String]) -> Option<String> {
        self.stopping
            .iter()
            .filter(|s| !s.join.is_finished())
            .filter_map(|s| s.draining.as_ref())
            .flat_map(|(held, _)| held.iter())
            .find(|h| keys.contains(h))
            .cloned()
    }

    pub(super) fn prune_stopping(&mut self) {
        let now = Instant::now();
        let mut ended = Vec::new();
        let mut drained = false;
        self.stopping.retain_mut(|s| {
            if let Some((_, cut_at)) = &s.draining
                && now >= *cut_at
            {
                s.cancel.cancel();
            }
            if now >= s.until {
                s.abandon.cancel();
            }
            if s.join.is_finished() {
                ended.extend(s.forget.take());
                drained |= s.draining.is_some();
                false
            } else {
                true
            }
        });
        if drained {
            // Inputs waiting for those registries start now, before any
            // is forgotten.
            self.reconcile();
        }
        for id in ended {
            // Started again meanwhile (its pod came back): keep.
            if self.running.contains_key(&id) {
                continue;
            }
            self.metrics.forget_input(&id);
            self.outputs.forget_input(&id);
            self.registries.forget_input(&id);
        }
    }
}
