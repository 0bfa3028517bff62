//! When an agent hands a shard over so that shards spread evenly: the
//! deferral of free Leases ([`super::elections::deferrals`]) decides who
//! takes a free shard, but never moves one that is held, so an agent that
//! started alone would keep every shard. The rule here moves them: an
//! agent leading k shards of an election hands one over while some other
//! live candidate leads k − 2 or fewer, and only while every shard is
//! held. Once nobody does, the spread is settled: every agent leads ⌊N/M⌋
//! or ⌈N/M⌉ of the N shards among M candidates. Pure: the caller brings
//! who holds what and who is a candidate.

/// The shards (indices) this agent should hand over, if any: `me` is its
/// identity, `holders[i]` the holder of shard `i` as last seen (`None`:
/// free or unknown), `candidates` the identities of the live candidates
/// (holders count as candidates too). As many as it takes for this agent
/// to lead at most one more than the least busy candidate, counting each
/// handed-over shard as taken by the least busy one.
pub fn shards_to_release(me: &str, holders: &[Option<&str>], candidates: &[&str]) -> Vec<usize> {
    if holders.iter().any(Option::is_none) {
        // A free shard goes to the least busy candidate anyway: moving a
        // held one now would only add a handover.
        return Vec::new();
    }
    let mut others: Vec<(&str, usize)> = Vec::new();
    for c in candidates
        .iter()
        .copied()
        .chain(holders.iter().flatten().copied())
    {
        if c != me && !others.iter().any(|(o, _)| *o == c) {
            let led = holders.iter().filter(|h| **h == Some(c)).count();
            others.push((c, led));
        }
    }
    let mut mine: Vec<usize> = (0..holders.len())
        .filter(|i| holders[*i] == Some(me))
        .collect();
    let mut out = Vec::new();
    while let Some(least) = others.iter_mut().min_by_key(|(_, n)| *n)
        && least.1 + 2 <= mine.len()
    {
        least.1 += 1;
        out.extend(mine.pop());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_agent_holding_everything_hands_over_to_a_new_candidate() {
        let all_a = [Some("a"); 4];
        assert_eq!(shards_to_release("a", &all_a, &["a", "b"]), [3, 2]);
        assert_eq!(
            shards_to_release("a", &all_a, &["a", "b", "c", "d"]),
            [3, 2, 1]
        );
        // Nobody else: keep them.
        assert!(shards_to_release("a", &all_a, &["a"]).is_empty());
        // B is not this agent's business.
        assert!(shards_to_release("b", &all_a, &["a", "b"]).is_empty());
    }

    #[test]
    fn a_spread_within_one_is_settled_and_free_shards_come_first() {
        let h = [Some("a"), Some("a"), Some("b")];
        assert!(shards_to_release("a", &h, &["a", "b"]).is_empty());
        let h = [Some("a"), Some("a"), None];
        assert!(shards_to_release("a", &h, &["a", "b", "c"]).is_empty());
    }

    /// Applies the rule until nobody hands over: each round one agent
    /// releases its shards and the least busy candidates take them one by
    /// one. Returns the spread and the number of shards moved.
    fn settle(mut holders: Vec<String>, candidates: &[String]) -> (Vec<String>, usize) {
        let mut moved = 0;
        for _ in 0..1000 {
            let view: Vec<Option<&str>> = holders.iter().map(|h| Some(h.as_str())).collect();
            let cands: Vec<&str> = candidates.iter().map(String::as_str).collect();
            let Some((who, shards)) = candidates.iter().find_map(|c| {
                let s = shards_to_release(c, &view, &cands);
                (!s.is_empty()).then(|| (c.clone(), s))
            }) else {
                return (holders, moved);
            };
            for shard in shards {
                let taker = candidates
                    .iter()
                    .filter(|c| **c != who)
                    .min_by_key(|c| holders.iter().filter(|h| h == c).count())
                    .cloned()
                    .unwrap();
                holders[shard] = taker;
                moved += 1;
            }
        }
        panic!("no settled spread after 1000 rounds");
    }

    proptest! {
        #[test]
        fn handing_over_converges_at_no_more_than_the_ceiling_per_agent(
            shards in 1usize..40,
            agents in 1usize..12,
            start in proptest::collection::vec(0usize..12, 40),
        ) {
            let candidates: Vec<String> = (0..agents).map(|i| format!("agent-{i}")).collect();
            let holders: Vec<String> = (0..shards).map(|i| candidates[start[i] % agents].clone()).collect();
            let (settled, moved) = settle(holders, &candidates);
            let ceiling = shards.div_ceil(agents);
            let floor = shards / agents;
            for c in &candidates {
                let n = settled.iter().filter(|h| *h == c).count();
                prop_assert!(n <= ceiling && n >= floor, "{c} leads {n} of {shards} ({agents} agents)");
            }
            prop_assert!(moved <= shards, "{moved} hand-overs for {shards} shards");
        }
    }
}
