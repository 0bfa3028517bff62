//! Keeps the running inputs equal to what the policy renders: in full when
//! the policy, the variables or the elections change, and by change when
//! the `kubernetes` provider's objects do, so that a Pod event costs the
//! inputs of that Pod, however many Pods the provider sees.
//!
//! Both ways keep the same books: the rendering ([`Incremental`] when the
//! provider is configured), the inputs dropped after rendering (settings
//! that do not build, an unknown output, a registry owned by another
//! input) and who owns each registry.

use std::collections::{HashMap, HashSet};

use leasehold_policy::incremental::{
    Changes as RenderChanges, HeldMappings, Incremental, MappingSource,
};
use leasehold_policy::render::stable_hash;
use leasehold_policy::{PolicyError, Rendered, RenderedInput, ShardedElection, Vars};

use super::kubernetes::{self, Changes as ProviderChanges};
use super::reconcile::{self, Action, Binding, Instance};
use super::{Agent, Desired, StopHow, elections, state_claims};
use crate::inputs;
use crate::monitor::status::DroppedInput;

impl Agent {
    /// Makes the running inputs equal to what the policy renders to now,
    /// all of them.
    pub(super) fn reconcile(&mut self) {
        let vars = self.vars();
        let sharded = elections::sharded(&self.elections);
        let rendered = match self.render_all(&vars, &sharded) {
            Ok(r) => r,
            Err(e) => {
                // Inputs that were running keep running; stops by term still
                // happen through the term tokens.
                let e = self
                    .loaded
                    .redactor
                    .redact(&self.loaded.policy.relocate(e).to_string());
                tracing::error!("rendering the policy failed: {e}");
                self.board.policy_rejected(e);
                return;
            }
        };
        // Rendered settings may hold secrets from variables: redact those
        // too from what inputs report.
        let mut redactor = self.loaded.redactor.clone();
        for ri in &rendered.inputs {
            redactor.add_value("", &ri.config);
        }
        self.board.set_redactor(redactor.clone());
        self.books.redactor = redactor;
        self.books.render_dropped = rendered.dropped;
        self.books.refused.clear();
        let mut desired = Vec::with_capacity(rendered.inputs.len());
        for ri in &rendered.inputs {
            match self.desire(ri) {
                Ok(d) => desired.push(d),
                Err(d) => {
                    self.books.refused.insert(d.id.clone(), d);
                }
            }
        }
        let desired = self.refuse_shared_registries(desired);
        self.books.claim_all(&desired);
        let running: Vec<Instance> = self.running.values().map(|r| r.instance.clone()).collect();
        let wanted: Vec<Instance> = desired.iter().map(|(i, _, _)| i.clone()).collect();
        let mut desired: HashMap<String, Desired> =
            desired.into_iter().map(|d| (d.0.id.clone(), d)).collect();
        for action in reconcile::plan(&wanted, &running) {
            match action {
                Action::Stop(id) => {
                    let how = self.how_to_stop(&id, false);
                    self.stop(&id, how, true);
                }
                Action::Restart(id) => {
                    // Its successor reads other files (another container)
                    // or, naming the same registries, waits for the drain
                    // and reads on from the same offsets (`start_input`).
                    let how = self.how_to_stop(&id, true);
                    self.stop(&id, how, false);
                    if let Some((i, s, f)) = desired.remove(&id) {
                        self.start_input(i, s, f.as_ref());
                    }
                }
                Action::Start(id) => {
                    if let Some((i, s, f)) = desired.remove(&id) {
                        self.start_input(i, s, f.as_ref());
                    }
                }
            }
        }
        self.publish_dropped();
    }

    /// Follows the provider's changed objects: renders, starts, restarts
    /// and stops only what their mappings render.
    pub(super) fn on_provider_changes(&mut self, mut changes: ProviderChanges) {
        let Some(source) = self.provider.as_ref().map(|(_, p)| p.source.clone()) else {
            return;
        };
        let Some(inc) = self.books.renders.as_mut() else {
            // The last full rendering failed: try it again in full.
            self.reconcile();
            return;
        };
        changes.sort_unstable();
        changes.dedup();
        for object in changes {
            if inc.refresh(&self.loaded.policy, &source, &object).is_err() {
                // The full rendering reports the error with its place.
                self.books.renders = None;
                self.reconcile();
                return;
            }
        }
        let changed = inc.take_changes();
        if changed.dropped {
            self.books.render_dropped = inc.dropped();
        }
        self.apply(changed);
    }

    /// Starts, restarts and stops what `changed` names.
    fn apply(&mut self, changed: RenderChanges) {
        // The dropped list is published only when it changed: it can be
        // as long as the cluster (a refused hint per Pod).
        let mut dropped_changed = changed.dropped;
        if !changed.upserted.is_empty() {
            for ri in &changed.upserted {
                self.books.redactor.add_value("", &ri.config);
            }
            self.board.set_redactor(self.books.redactor.clone());
        }
        let mut released = false;
        for id in &changed.removed {
            dropped_changed |= self.books.refused.remove(id).is_some();
            released |= self.books.release(id);
            if self.running.contains_key(id) {
                let how = self.how_to_stop(id, false);
                self.stop(id, how, true);
            }
        }
        for ri in &changed.upserted {
            dropped_changed |= self.books.refused.remove(&ri.id).is_some();
            released |= self.books.release(&ri.id);
            let (instance, spec, fields) = match self.desire(ri) {
                Ok(d) => d,
                Err(d) => {
                    self.books.refused.insert(d.id.clone(), d);
                    dropped_changed = true;
                    if self.running.contains_key(&ri.id) {
                        let how = self.how_to_stop(&ri.id, false);
                        self.stop(&ri.id, how, true);
                    }
                    continue;
                }
            };
            let keys = spec.input.state_keys();
            let taken = keys.iter().find_map(|k| {
                self.books
                    .claims
                    .get(k)
                    .filter(|owner| **owner != ri.id)
                    .map(|owner| state_claims::conflict_reason(k, owner))
            });
            if let Some(reason) = taken {
                if self.warned_conflicts.insert(ri.id.clone()) {
                    tracing::error!(input = %ri.id, "input not started: {reason}");
                }
                dropped_changed = true;
                self.books.refused.insert(
                    ri.id.clone(),
                    DroppedInput {
                        id: ri.id.clone(),
                        reason,
                    },
                );
                if self.running.contains_key(&ri.id) {
                    let how = self.how_to_stop(&ri.id, false);
                    self.stop(&ri.id, how, true);
                }
                continue;
            }
            self.books.claim(&ri.id, keys);
            match self.running.get(&ri.id).map(|r| r.instance == instance) {
                Some(true) => {}
                Some(false) => {
                    let how = self.how_to_stop(&ri.id, true);
                    self.stop(&ri.id, how, false);
                    self.start_input(instance, spec, fields.as_ref());
                }
                None => self.start_input(instance, spec, fields.as_ref()),
            }
        }
        if released && !self.warned_conflicts.is_empty() {
            // A registry an input was refused for may be free now: who
            // owns what is decided again in full.
            self.reconcile();
            return;
        }
        if dropped_changed {
            self.publish_dropped();
        }
    }

    /// The whole rendering now; with the provider configured, kept as the
    /// start of renderings by change.
    fn render_all(
        &mut self,
        vars: &Vars,
        sharded: &[ShardedElection],
    ) -> Result<Rendered, PolicyError> {
        if self.loaded.kubernetes.is_none() {
            self.books.renders = None;
            return leasehold_policy::render_sharded(&self.loaded.policy, vars, None, sharded);
        }
        let none = HeldMappings::default();
        let source: &dyn MappingSource = match &self.provider {
            Some((_, p)) => &p.source,
            None => &none,
        };
        match Incremental::new(
            &self.loaded.policy,
            vars,
            kubernetes::PROVIDER,
            sharded,
            source,
        ) {
            Ok(mut inc) => {
                inc.take_changes();
                let r = inc.rendered();
                self.books.renders = Some(inc);
                Ok(r)
            }
            Err(e) => {
                self.books.renders = None;
                Err(e)
            }
        }
    }

    /// What running `ri` takes: its instance (bound to the term of the
    /// election its conditions read), its settings and its mapping's
    /// fields; or why it cannot run.
    fn desire(&self, ri: &RenderedInput) -> Result<Desired, DroppedInput> {
        let election = ri.condition_vars.iter().find_map(|v| {
            self.elections
                .iter()
                .find(|e| elections::binds(e, v, ri.shard))
        });
        let binding = election.and_then(|e| {
            e.leading.as_ref().map(|t| Binding {
                election: e.key,
                term: t.term,
            })
        });
        let spec = inputs::build(&ri.config).map_err(|problems| {
            let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
            DroppedInput {
                id: ri.id.clone(),
                reason: text.join("; "),
            }
        })?;
        if self.outputs.sender(&spec.use_output).is_none() {
            let pending = self
                .pending_outputs
                .as_ref()
                .is_some_and(|o| o.iter().any(|x| x.name == spec.use_output));
            let reason = if pending {
                format!(
                    "use_output names output `{}`, added by a reload: outputs start when the agent restarts, and so does this input",
                    spec.use_output
                )
            } else {
                format!(
                    "use_output names output `{}`, which is not defined (defined: {})",
                    spec.use_output,
                    self.outputs.names().join(", ")
                )
            };
            return Err(DroppedInput {
                id: ri.id.clone(),
                reason,
            });
        }
        // Fields a mapping adds are part of what the input is: new labels
        // restart it with them.
        let fields_hash = ri.fields.as_ref().map_or(0, stable_hash);
        Ok((
            Instance {
                id: ri.id.clone(),
                config_hash: stable_hash(&ri.config) ^ fields_hash.rotate_left(1),
                binding,
            },
            spec,
            ri.fields.clone(),
        ))
    }

    /// Takes out of `desired` every input naming a registry another one
    /// owns ([`state_claims::conflicts`]), into the refused ones, logging
    /// each conflict once; returns the inputs kept.
    fn refuse_shared_registries(&mut self, desired: Vec<Desired>) -> Vec<Desired> {
        let keys: Vec<Vec<String>> = desired
            .iter()
            .map(|(_, s, _)| s.input.state_keys())
            .collect();
        let claims: Vec<state_claims::Claim<'_>> = desired
            .iter()
            .zip(&keys)
            .map(|((i, _, _), k)| state_claims::Claim {
                id: &i.id,
                keys: k,
                running: self.running.contains_key(&i.id),
            })
            .collect();
        let conflicts = state_claims::conflicts(&claims);
        if conflicts.is_empty() {
            self.warned_conflicts.clear();
            return desired;
        }
        let mut refused: HashMap<usize, String> = HashMap::new();
        let mut warned = HashSet::new();
        for c in conflicts {
            let id = &desired[c.index].0.id;
            if !self.warned_conflicts.contains(id) {
                tracing::error!(input = %id, "input not started: {}", c.reason);
            }
            warned.insert(id.clone());
            refused.insert(c.index, c.reason);
        }
        self.warned_conflicts = warned;
        let mut kept = Vec::with_capacity(desired.len());
        for (n, d) in desired.into_iter().enumerate() {
            match refused.remove(&n) {
                Some(reason) => {
                    let id = d.0.id.clone();
                    self.books
                        .refused
                        .insert(id.clone(), DroppedInput { id, reason });
                }
                None => kept.push(d),
            }
        }
        kept
    }

    /// [`StopHow::Drain`] when running input `id` is to read its files
    /// to their ends first ([`state_claims::drains`]): its registries are
    /// claimed by no input that stays or starts (`restarting`: its
    /// successor, which reads on from them, is not counted).
    fn how_to_stop(&self, id: &str, restarting: bool) -> StopHow {
        match self.running.get(id) {
            Some(r)
                if state_claims::drains(
                    r.dynamic,
                    r.instance.binding.is_some(),
                    &r.keys,
                    |k| !restarting && self.books.claims.get(k).is_some_and(|o| o != id),
                ) =>
            {
                StopHow::Drain
            }
            _ => StopHow::Now,
        }
    }

    /// Publishes the dropped inputs: the rendering's, then those refused
    /// after it.
    fn publish_dropped(&self) {
        let mut all: Vec<DroppedInput> = self
            .books
            .render_dropped
            .iter()
            .map(|d| DroppedInput {
                id: d.id.clone(),
                reason: d.reason.clone(),
            })
            .collect();
        all.extend(self.books.refused.values().cloned());
        self.board.set_dropped(all);
    }
}
