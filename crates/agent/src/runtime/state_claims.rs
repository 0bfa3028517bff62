//! Who owns each registry (an input's [`state_keys`]), without I/O.
//!
//! Two inputs naming the same registry would read each other's files,
//! ship each other's lines twice and delete each other's offsets, so a
//! registry has one owner: an input already running keeps its claim, and
//! otherwise the first in rendering order wins. The others are refused
//! with a reason naming both.
//!
//! An input stopped for good whose registries nobody else claims is
//! drained (reads its files to their ends), because nothing else would
//! ever read what its container wrote last.
//!
//! [`state_keys`]: crate::inputs::Input::state_keys

use std::collections::HashMap;

/// One input that wants to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim<'a> {
    /// Rendered input id.
    pub id: &'a str,
    /// The registries it resumes from.
    pub keys: &'a [String],
    /// It runs now.
    pub running: bool,
}

/// An input refused because another one owns a registry it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Index of the refused input among the claims.
    pub index: usize,
    /// Why, for `/status` and the log.
    pub reason: String,
}

/// Which claims to refuse: every claim naming a registry that an earlier
/// claim (running ones first) holds. A refused input claims nothing.
pub fn conflicts(claims: &[Claim<'_>]) -> Vec<Conflict> {
    let mut order: Vec<usize> = (0..claims.len()).collect();
    // Stable: among running (and among new) inputs, rendering order.
    order.sort_by_key(|&i| !claims[i].running);
    let mut owner: HashMap<&str, &str> = HashMap::new();
    let mut out = Vec::new();
    for i in order {
        let c = &claims[i];
        // An input naming one registry twice is its own problem (its
        // settings are refused when built), not a conflict between two.
        let taken = c
            .keys
            .iter()
            .find_map(|k| owner.get(k.as_str()).map(|o| (k, *o)))
            .filter(|(_, o)| *o != c.id);
        match taken {
            Some((key, other)) => out.push(Conflict {
                index: i,
                reason: conflict_reason(key, other),
            }),
            None => {
                for k in c.keys {
                    owner.insert(k.as_str(), c.id);
                }
            }
        }
    }
    out.sort_by_key(|c| c.index);
    out
}

/// Why an input naming registry `key`, which input `other` owns, does not
/// start.
pub fn conflict_reason(key: &str, other: &str) -> String {
    format!(
        "stream id `{key}` is also a stream id of input `{other}`: two streams with one id would share one registry, reading and deleting each other's offsets; give each stream an `id` of its own (one rendered per Pod and container includes `${{kubernetes.container.id}}`)"
    )
}

/// Whether an input stopped for good, or restarted with other settings,
/// reads its files to their ends first: it was rendered from a mapping
/// (its container restarted or went), it is bound to no leadership term
/// (a term's work stops when the term does), it keeps registries, and no
/// input that stays or starts claims any of them (that one reads on from
/// the same offsets; two readers would ship lines twice).
/// `claimed` tells whether a registry is claimed.
pub fn drains(dynamic: bool, gated: bool, keys: &[String], claimed: impl Fn(&str) -> bool) -> bool {
    dynamic && !gated && !keys.is_empty() && keys.iter().all(|k| !claimed(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_second_input_naming_a_running_inputs_registry_is_refused_naming_both() {
        let (a, b, c) = (keys(&["logs-x"]), keys(&["logs-y", "logs-x"]), keys(&["z"]));
        let claims = [
            Claim {
                id: "new-pod",
                keys: &b,
                running: false,
            },
            Claim {
                id: "old-pod",
                keys: &a,
                running: true,
            },
            Claim {
                id: "other",
                keys: &c,
                running: false,
            },
        ];
        let refused = conflicts(&claims);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].index, 0, "the running input keeps its registry");
        assert!(
            refused[0].reason.contains("`logs-x`"),
            "{}",
            refused[0].reason
        );
        assert!(
            refused[0].reason.contains("`old-pod`"),
            "{}",
            refused[0].reason
        );
        // Refused, it claims nothing: `logs-y` is free for a later input.
        let d = keys(&["logs-y"]);
        let mut more = claims.to_vec();
        more.push(Claim {
            id: "later",
            keys: &d,
            running: false,
        });
        assert_eq!(conflicts(&more).len(), 1);
    }

    #[test]
    fn among_new_inputs_the_first_rendered_wins_and_the_same_input_twice_is_no_conflict() {
        let k = keys(&["same"]);
        let claims = [
            Claim {
                id: "first",
                keys: &k,
                running: false,
            },
            Claim {
                id: "second",
                keys: &k,
                running: false,
            },
        ];
        let refused = conflicts(&claims);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].index, 1);
        assert!(refused[0].reason.contains("`first`"));
        let twice = keys(&["a", "a"]);
        let alone = [Claim {
            id: "one",
            keys: &twice,
            running: true,
        }];
        assert!(conflicts(&alone).is_empty());
    }

    #[test]
    fn only_an_ungated_mapping_input_whose_registries_nobody_takes_over_drains() {
        let k = keys(&["logs-abc"]);
        let none = |_: &str| false;
        assert!(drains(true, false, &k, none));
        assert!(!drains(false, false, &k, none), "a policy reload resumes");
        assert!(!drains(true, true, &k, none), "a term's work stops with it");
        assert!(
            !drains(true, false, &[], none),
            "nothing to read to its end"
        );
        let taken = |k: &str| k == "logs-abc";
        assert!(!drains(true, false, &k, taken), "its successor reads on");
    }
}
