//! What the reconciler keeps from one reconcile to the next: the rendering
//! kept by change, the inputs refused after rendering, who owns each
//! registry, and the secrets to redact.

use std::collections::{BTreeMap, HashMap};

use leasehold_policy::Dropped;
use leasehold_policy::incremental::Incremental;

use super::Desired;
use crate::monitor::status::DroppedInput;
use crate::redact::Redactor;

/// What the reconciler keeps from one reconcile to the next.
#[derive(Default)]
pub(crate) struct Books {
    /// The rendering kept by change; `None` without the provider, or
    /// when the last full rendering failed.
    pub(super) renders: Option<Incremental>,
    /// The owner of each registry.
    pub(super) claims: HashMap<String, String>,
    /// The registries each input owns.
    owned: HashMap<String, Vec<String>>,
    /// Inputs the rendering kept that do not run, and why.
    pub(super) refused: BTreeMap<String, DroppedInput>,
    /// Inputs the rendering dropped.
    pub(super) render_dropped: Vec<Dropped>,
    /// The policy's secrets and those of the rendered settings.
    pub(super) redactor: Redactor,
}

impl Books {
    /// Makes `id` the owner of `keys`.
    pub(super) fn claim(&mut self, id: &str, keys: Vec<String>) {
        for k in &keys {
            self.claims.insert(k.clone(), id.to_string());
        }
        if !keys.is_empty() {
            self.owned.insert(id.to_string(), keys);
        }
    }

    /// `id` owns no registry any more; true if it owned one.
    pub(super) fn release(&mut self, id: &str) -> bool {
        let Some(keys) = self.owned.remove(id) else {
            return false;
        };
        for k in keys {
            if self.claims.get(&k).is_some_and(|o| o == id) {
                self.claims.remove(&k);
            }
        }
        true
    }

    /// Who owns what: exactly the registries of `desired`.
    pub(super) fn claim_all(&mut self, desired: &[Desired]) {
        self.claims.clear();
        self.owned.clear();
        for (i, s, _) in desired {
            self.claim(&i.id, s.input.state_keys());
        }
    }
}
