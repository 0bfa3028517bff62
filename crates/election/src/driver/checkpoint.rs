//! Handover checkpoints: small values leader-only work keeps in the Lease's
//! annotations (`leasehold.dev/checkpoint.<name>`), written on the leader's
//! own Lease writes (renewals, release) at no extra API cost, and read by
//! the next leader from the Lease it took over. A stream input records how
//! far it has shipped; its successor resumes there.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube::api::DynamicObject;

/// Prefix of the annotation keys.
pub const ANNOTATION_PREFIX: &str = "leasehold.dev/checkpoint.";

/// The longest checkpoint name (annotation names are at most 63 bytes).
pub const MAX_NAME: usize = 63 - "checkpoint.".len();

/// Whether `name` can name a checkpoint: lower-case letters, digits, `-`,
/// `_` and `.`, starting and ending with a letter or digit.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'_' | b'.')
        })
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

#[derive(Default, Debug)]
struct State {
    /// Set by this process's leader-only work, written on its next write.
    to_write: BTreeMap<String, String>,
    /// As last seen on the Lease.
    seen: BTreeMap<String, String>,
}

/// Shared between the Lease lock and leader-only work. Cheap to clone.
#[derive(Clone, Default, Debug)]
pub struct Checkpoints(Arc<Mutex<State>>);

impl Checkpoints {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `value` under `name`, to be written with this leader's next
    /// Lease write (its next renewal, or its release). Ignored for an
    /// invalid name (see [`valid_name`]).
    pub fn set(&self, name: &str, value: impl Into<String>) {
        if valid_name(name) {
            self.lock().to_write.insert(name.to_string(), value.into());
        }
    }

    /// The value of `name`: what this process set last, else what the
    /// Lease held when last read (a previous leader's).
    pub fn get(&self, name: &str) -> Option<String> {
        let s = self.lock();
        s.to_write.get(name).or_else(|| s.seen.get(name)).cloned()
    }

    /// What the Lease held when last read, ignoring what this process set.
    pub fn on_lease(&self, name: &str) -> Option<String> {
        self.lock().seen.get(name).cloned()
    }

    /// Notes the checkpoints of an object read. When another holder wrote
    /// it, this process's own values are stale and dropped, so a later
    /// term of ours never writes back an older position.
    pub(crate) fn observe(&self, obj: &DynamicObject, holder: &str, identity: &str) {
        let mut s = self.lock();
        s.seen = obj
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter_map(|(k, v)| {
                k.strip_prefix(ANNOTATION_PREFIX)
                    .map(|n| (n.to_string(), v.clone()))
            })
            .collect();
        if !holder.is_empty() && holder != identity {
            s.to_write.clear();
        }
    }

    /// Forgets this process's own values: a new term of ours starts from
    /// what the Lease holds, never from a position an earlier term of ours
    /// set (another leader may have moved it since, unseen by us).
    pub(crate) fn forget_own(&self) {
        self.lock().to_write.clear();
    }

    /// Puts this process's values into an object about to be written.
    pub(crate) fn apply(&self, obj: &mut DynamicObject) {
        let s = self.lock();
        if s.to_write.is_empty() {
            return;
        }
        let annotations = obj.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for (k, v) in &s.to_write {
            annotations.insert(format!("{ANNOTATION_PREFIX}{k}"), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(annotations: &[(&str, &str)]) -> DynamicObject {
        let mut o = DynamicObject::new("l", &super::super::lease::lease_resource()).within("ns");
        o.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        o
    }

    #[test]
    fn written_by_the_leader_read_by_the_next_and_never_reverted() {
        let a = Checkpoints::default();
        a.set("events", "100");
        let mut obj = lease(&[("other", "kept")]);
        a.apply(&mut obj);
        let ann = obj.metadata.annotations.clone().unwrap();
        assert_eq!(
            ann.get("leasehold.dev/checkpoint.events")
                .map(String::as_str),
            Some("100")
        );
        assert_eq!(ann.get("other").map(String::as_str), Some("kept"));

        // The next leader reads it from the Lease.
        let b = Checkpoints::default();
        b.observe(&obj, "a", "b");
        assert_eq!(b.get("events").as_deref(), Some("100"));
        // Its own position wins once set.
        b.set("events", "150");
        assert_eq!(b.get("events").as_deref(), Some("150"));
        assert_eq!(b.on_lease("events").as_deref(), Some("100"));

        // A sees B's newer value while B holds the lease: A's stale 100 is
        // dropped and would not be written back at A's next acquire.
        let mut by_b = lease(&[]);
        b.apply(&mut by_b);
        a.observe(&by_b, "b", "a");
        assert_eq!(a.get("events").as_deref(), Some("150"));
        let mut next = by_b.clone();
        a.apply(&mut next);
        assert_eq!(
            next.metadata
                .annotations
                .unwrap()
                .get("leasehold.dev/checkpoint.events")
                .map(String::as_str),
            Some("150")
        );
    }

    #[test]
    fn names_follow_the_annotation_rules() {
        for ok in ["events", "a", "kube-events.v1", "x_1"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a/b", &"a".repeat(MAX_NAME + 1)] {
            assert!(!valid_name(bad), "{bad}");
        }
        let c = Checkpoints::default();
        c.set("Bad/Name", "1");
        assert_eq!(c.get("Bad/Name"), None);
    }
}
