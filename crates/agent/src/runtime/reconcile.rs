//! The reconciler's decision, without I/O: given the inputs the policy
//! renders to now and the inputs running, which to start, stop or restart.
//!
//! An input's identity is its id; it is restarted when its rendered
//! settings change or when the leadership term it is bound to changes (a
//! gated input belongs to one term and never outlives it).

use std::collections::{HashMap, HashSet};

/// The election term a gated input is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Binding {
    /// Index of the election.
    pub election: usize,
    /// The term (`leaseTransitions`).
    pub term: i64,
}

/// What identifies one running instance of an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Input id.
    pub id: String,
    /// Hash of the rendered settings.
    pub config_hash: u64,
    /// The term a gated input is bound to.
    pub binding: Option<Binding>,
}

/// One step for the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Stop this id (no longer desired).
    Stop(String),
    /// Stop the running instance of this id and start the desired one.
    Restart(String),
    /// Start this id.
    Start(String),
}

/// The steps that make `running` equal to `desired`: stops first (they are
/// never delayed), then restarts, then starts, each in `desired` order.
pub fn plan(desired: &[Instance], running: &[Instance]) -> Vec<Action> {
    let want: HashSet<&str> = desired.iter().map(|i| i.id.as_str()).collect();
    let have: HashMap<&str, &Instance> = running.iter().map(|i| (i.id.as_str(), i)).collect();
    let mut out: Vec<Action> = running
        .iter()
        .filter(|r| !want.contains(r.id.as_str()))
        .map(|r| Action::Stop(r.id.clone()))
        .collect();
    for d in desired {
        match have.get(d.id.as_str()) {
            Some(r) if *r != d => out.push(Action::Restart(d.id.clone())),
            Some(_) => {}
            None => out.push(Action::Start(d.id.clone())),
        }
    }
    out.sort_by_key(|a| match a {
        Action::Stop(_) => 0,
        Action::Restart(_) => 1,
        Action::Start(_) => 2,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(id: &str, hash: u64, term: Option<i64>) -> Instance {
        Instance {
            id: id.into(),
            config_hash: hash,
            binding: term.map(|term| Binding { election: 0, term }),
        }
    }

    #[test]
    fn starts_stops_restarts_and_leaves_the_rest() {
        let running = [
            inst("same", 1, None),
            inst("gone", 2, None),
            inst("changed", 3, None),
            inst("gated", 4, Some(1)),
        ];
        let desired = [
            inst("same", 1, None),
            inst("changed", 30, None),
            inst("gated", 4, Some(2)),
            inst("new", 5, None),
        ];
        assert_eq!(
            plan(&desired, &running),
            vec![
                Action::Stop("gone".into()),
                Action::Restart("changed".into()),
                Action::Restart("gated".into()),
                Action::Start("new".into()),
            ]
        );
        assert!(plan(&desired, &desired).is_empty());
        assert_eq!(plan(&[], &running).len(), 4);
    }

    #[test]
    fn a_gated_input_that_loses_its_term_is_stopped_not_restarted() {
        let running = [inst("gated", 4, Some(1))];
        assert_eq!(plan(&[], &running), vec![Action::Stop("gated".into())]);
    }
}
