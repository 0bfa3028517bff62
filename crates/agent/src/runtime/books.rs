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
            self.owned.entry(id.to_string()).or_default().extend(keys);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_input_releases_only_the_registries_it_owns() {
        let mut b = Books::default();
        b.claim("a", keys(&["logs-1", "logs-2"]));
        b.claim("b", keys(&["logs-3"]));
        assert_eq!(b.claims.get("logs-2").map(String::as_str), Some("a"));
        // `b` takes over `logs-2` (as a restarted successor does): `a`
        // releasing later must not free it.
        b.claim("b", keys(&["logs-2"]));
        assert!(b.release("a"));
        assert_eq!(b.claims.get("logs-1"), None);
        assert_eq!(b.claims.get("logs-2").map(String::as_str), Some("b"));
        assert!(!b.release("a"), "nothing left to release");
        assert!(b.release("b"));
        assert!(b.claims.is_empty(), "{:?}", b.claims);
    }

    #[test]
    fn an_input_without_registries_owns_nothing() {
        let mut b = Books::default();
        b.claim("exec", Vec::new());
        assert!(!b.release("exec"));
        assert!(b.claims.is_empty());
    }
}
