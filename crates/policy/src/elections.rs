//! The elections a policy asks for, read from provider
//! `kubernetes_leaderelection`.
//!
//! Two forms:
//! - the single form, as in Elastic Agent: settings directly under the
//!   provider; variables `kubernetes_leaderelection.{leader,term,holder}`;
//! - named elections: shared settings under the provider, and one entry per
//!   election under `elections`, each with its own Lease; variables
//!   `kubernetes_leaderelection.NAME.{leader,term,holder}`;
//! - a named election with `shards: N` is N elections, shard `i` on Lease
//!   `<lease>-<i>-of-<N>`; an input that reads its variables renders once
//!   per shard (see [`crate::render`]), and `shard`/`shards` say which.
//!
//! An election runs only when some input refers to its variables.

use crate::cond::Condition;
use crate::error::{PolicyError, Pos};
use crate::model::{Node, NodeKind, Policy};
use crate::providers::{
    DEFAULT_LEASE_TIMINGS_S, LeaseTimings, TIMING_HINT, describe_timings, parse_timing_secs,
};
use crate::subst::{self, Resolved};
use crate::value::Value;
use crate::vars::Vars;

/// The provider's name and the first segment of its variables.
pub const PROVIDER: &str = "kubernetes_leaderelection";

/// The Lease of the single form when `leader_lease` is not set.
pub const DEFAULT_LEASE: &str = "leasehold-cluster-leader";

/// Failures in a row of a gated input on the leader before it hands the
/// lease over, when `handover_after_failures` is not set.
pub const DEFAULT_HANDOVER_AFTER_FAILURES: u32 = 3;

/// The most shards an election may have: each is a Lease every agent
/// watches, so more shards cost every agent a watch each.
pub const MAX_SHARDS: u32 = 256;

/// Which shard of a sharded election a spec is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 0-based.
    pub index: u32,
    /// How many shards the election has.
    pub count: u32,
}

/// One election as the agent runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionSpec {
    /// `None` for the single form.
    pub name: Option<String>,
    /// The Lease name.
    pub lease: String,
    /// The Lease's namespace; `None` means the pod's own.
    pub namespace: Option<String>,
    /// Holder identity; `None` means the pod name.
    pub identity: Option<String>,
    /// Kubeconfig path; `None` means in-cluster or the agent's default.
    pub kube_config: Option<String>,
    /// Lease duration, renew deadline, retry period, in seconds; valid by
    /// construction.
    pub timings_s: LeaseTimings,
    /// Release the Lease at shutdown so a successor need not wait.
    pub release_on_shutdown: bool,
    /// Failures in a row of a gated input on the leader before handing over.
    pub handover_after_failures: u32,
    /// Set for each shard of a sharded election.
    pub shard: Option<Shard>,
}

impl ElectionSpec {
    /// Where its variables live: `kubernetes_leaderelection` or
    /// `kubernetes_leaderelection.NAME`.
    pub fn var_prefix(&self) -> String {
        match &self.name {
            None => PROVIDER.to_string(),
            Some(n) => format!("{PROVIDER}.{n}"),
        }
    }

    /// The name shown in status and logs: the election's name (with
    /// `/<shard>` for a shard), or `default` for the single form.
    pub fn label(&self) -> String {
        let name = self.group();
        match self.shard {
            Some(s) => format!("{name}/{}", s.index),
            None => name.to_string(),
        }
    }

    /// The election's name, shared by all its shards (`default` for the
    /// single form).
    pub fn group(&self) -> &str {
        self.name.as_deref().unwrap_or("default")
    }

    /// Whether variable `var` (provider included) belongs to it (to any of
    /// its shards when it has them).
    pub fn owns_var(&self, var: &str) -> bool {
        let prefix = self.var_prefix();
        var.strip_prefix(prefix.as_str())
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|leaf| VARIABLES.contains(&leaf))
    }
}

/// The variables of each election.
pub const VARIABLES: [&str; 5] = ["leader", "term", "holder", "shard", "shards"];

/// The Lease of shard `index` of `count` of an election whose Lease is
/// `base`: the count is part of the name so that agents on different
/// counts (a change of `shards` in a rolling update) never share a Lease
/// whose shard means different work.
pub fn shard_lease(base: &str, index: u32, count: u32) -> String {
    format!("{base}-{index}-of-{count}")
}

/// The elections of `policy` that some input refers to, in the order
/// written. String settings may use static variables (`${env.POD_NAME}`),
/// substituted from `vars`. Expects a policy that passed `check`; what it
/// still cannot use is an error naming the setting.
pub fn elections(policy: &Policy, vars: &Vars) -> Result<Vec<ElectionSpec>, PolicyError> {
    let empty = Node {
        kind: NodeKind::Map(Vec::new()),
        pos: Pos::new(1, 1),
    };
    let node = match policy.providers().iter().find(|(k, _)| k.name == PROVIDER) {
        Some((_, n))
            if matches!(
                n.get("enabled").map(|e| &e.kind),
                Some(NodeKind::Bool(false))
            ) =>
        {
            return Ok(Vec::new());
        }
        Some((_, n)) if matches!(n.kind, NodeKind::Map(_)) => n,
        _ => &empty,
    };
    let shared = node;
    let used = referenced_variables(policy);
    let mut out = Vec::new();
    match node.get("elections") {
        None => {
            let spec = read_spec(policy, vars, None, &[shared])?;
            if used.iter().any(|v| spec.owns_var(v)) {
                out.push(spec);
            }
        }
        Some(list) => {
            for (name, own) in list.entries() {
                let spec = read_spec(policy, vars, Some(&name.name), &[shared, own])?;
                if !used.iter().any(|v| spec.owns_var(v)) {
                    continue;
                }
                match shard_count(policy, own)? {
                    None => out.push(spec),
                    Some(count) => out.extend((0..count).map(|index| ElectionSpec {
                        lease: shard_lease(&spec.lease, index, count),
                        shard: Some(Shard { index, count }),
                        ..spec.clone()
                    })),
                }
            }
        }
    }
    Ok(out)
}

/// The `shards` an election's own settings ask for, if any.
fn shard_count(policy: &Policy, own: &Node) -> Result<Option<u32>, PolicyError> {
    let Some(n) = own.get("shards") else {
        return Ok(None);
    };
    match n.kind {
        NodeKind::Int(i) if (1..=i64::from(MAX_SHARDS)).contains(&i) => Ok(u32::try_from(i).ok()),
        _ => Err(PolicyError::new(
            &policy.file,
            n.pos,
            format!("`shards` must be a whole number from 1 to {MAX_SHARDS}"),
        )
        .with_hint("e.g. `shards: 8`: one Lease per shard, spread over the agents")),
    }
}

/// Reads one election; later layers override earlier ones.
fn read_spec(
    policy: &Policy,
    vars: &Vars,
    name: Option<&str>,
    layers: &[&Node],
) -> Result<ElectionSpec, PolicyError> {
    let find = |key: &str| layers.iter().rev().find_map(|l| l.get(key));
    // A string setting with its variables substituted.
    let substituted = |key: &str, n: &Node, s: &str| -> Result<Value, PolicyError> {
        let resolved = subst::substitute(s, vars, &policy.default_provider()).map_err(|e| {
            PolicyError::new(&policy.file, n.pos, format!("`{key}`: {}", e.message))
        })?;
        match resolved {
            Resolved::Value(v) => Ok(v),
            Resolved::NoMatch(r) | Resolved::Optional(r) => Err(PolicyError::new(
                &policy.file,
                n.pos,
                format!("`{key}`: variable {r} could not be resolved"),
            )
            .with_hint(
                "set the environment variable, or give the setting a default: ${env.X:'value'}",
            )),
        }
    };
    let text = |key: &str| -> Result<Option<String>, PolicyError> {
        let Some(n) = find(key) else { return Ok(None) };
        let Some(s) = n.as_str() else {
            return Err(PolicyError::new(
                &policy.file,
                n.pos,
                format!("`{key}` must be a string"),
            ));
        };
        match substituted(key, n, s)? {
            Value::Str(s) if !s.is_empty() => Ok(Some(s)),
            Value::Str(_) => Ok(None),
            v => Ok(Some(v.to_subst_text())),
        }
    };
    // A lease timing in whole seconds (an integer, or digits in a string,
    // also after substitution) and where it is written; the default when
    // it is not.
    let timing = |key: &str, default: i64| -> Result<(u64, Option<Pos>), PolicyError> {
        let Some(n) = find(key) else {
            return Ok((u64::try_from(default).unwrap_or(0), None));
        };
        let bad = |found: String| {
            PolicyError::new(
                &policy.file,
                n.pos,
                format!("`{key}` must be whole seconds, found {found}"),
            )
            .with_hint(TIMING_HINT)
        };
        let secs = match &n.kind {
            NodeKind::Int(i) => u64::try_from(*i).map_err(|_| bad(i.to_string()))?,
            NodeKind::Str { value: s, .. } => {
                let (text, shown) = match substituted(key, n, s)? {
                    Value::Int(i) => (i.to_string(), format!("{i} (from {s:?})")),
                    Value::Str(t) if t == *s => (t, format!("{s:?}")),
                    v => {
                        let t = v.to_subst_text();
                        let shown = format!("{t:?} (from {s:?})");
                        (t, shown)
                    }
                };
                parse_timing_secs(&text).ok_or_else(|| bad(shown))?
            }
            _ => return Err(bad(n.type_name().to_string())),
        };
        Ok((secs, Some(n.pos)))
    };
    let int = |key: &str, default: i64| -> i64 {
        match find(key).map(|n| &n.kind) {
            Some(NodeKind::Int(i)) => *i,
            _ => default,
        }
    };
    // Only the shared layer's lease applies to the single form; a named
    // election without its own gets `<shared or leasehold>-<name>`.
    let lease = match name {
        None => text("leader_lease")?.unwrap_or_else(|| DEFAULT_LEASE.to_string()),
        Some(n) => {
            let own = layers.last().and_then(|l| l.get("leader_lease")).is_some();
            match (own, text("leader_lease")?) {
                (true, Some(l)) => l,
                (false, Some(base)) => format!("{base}-{}", n.replace('_', "-")),
                (_, None) => format!("leasehold-{}", n.replace('_', "-")),
            }
        }
    };
    let [d, r, p] = DEFAULT_LEASE_TIMINGS_S;
    let (d, d_at) = timing("leader_leaseduration", d)?;
    let (r, r_at) = timing("leader_renewdeadline", r)?;
    let (p, p_at) = timing("leader_retryperiod", p)?;
    let timings = LeaseTimings::from_secs(d, r, p).map_err(|e| {
        let at = [d_at, r_at, p_at]
            .into_iter()
            .flatten()
            .max()
            .or_else(|| layers.last().map(|l| l.pos))
            .unwrap_or(Pos::new(1, 1));
        let whose = name.map_or(String::new(), |n| format!("election `{n}`: "));
        PolicyError::new(
            &policy.file,
            at,
            format!(
                "{whose}lease timings must satisfy duration > renew deadline > 1.2 × retry period, each positive and at most one day ({e}); got {}",
                describe_timings([d, r, p])
            ),
        )
        .with_hint("the defaults are 15 / 10 / 2 seconds")
    })?;
    Ok(ElectionSpec {
        name: name.map(str::to_string),
        lease,
        namespace: text("namespace")?,
        identity: text("identity")?,
        kube_config: text("kube_config")?,
        timings_s: timings,
        release_on_shutdown: !matches!(
            find("release_on_shutdown").map(|n| &n.kind),
            Some(NodeKind::Bool(false))
        ),
        handover_after_failures: u32::try_from(int(
            "handover_after_failures",
            i64::from(DEFAULT_HANDOVER_AFTER_FAILURES),
        ))
        .unwrap_or(DEFAULT_HANDOVER_AFTER_FAILURES),
        shard: None,
    })
}

/// Every variable the inputs of `policy` refer to, in conditions and in
/// substitutions (provider included, default provider applied).
pub fn referenced_variables(policy: &Policy) -> Vec<String> {
    fn walk(node: &Node, default_provider: &str, out: &mut Vec<String>) {
        match &node.kind {
            NodeKind::Str { value, .. } if subst::may_contain_vars(value) => {
                if let Ok(t) = subst::parse(value, default_provider) {
                    for r in t.refs() {
                        for a in &r.alts {
                            if let subst::Alt::Var(v) = a
                                && !out.contains(v)
                            {
                                out.push(v.clone());
                            }
                        }
                    }
                }
            }
            NodeKind::List(items) => items.iter().for_each(|n| walk(n, default_provider, out)),
            NodeKind::Map(entries) => {
                for (k, v) in entries {
                    if k.name == "condition" {
                        if let Some(Ok(c)) = v.as_str().map(Condition::parse) {
                            for name in c.variables() {
                                if !out.iter().any(|x| x == name) {
                                    out.push(name.to_string());
                                }
                            }
                        }
                    } else {
                        walk(v, default_provider, out);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    let default_provider = policy.default_provider();
    for input in policy.inputs() {
        walk(input, &default_provider, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Policy {
        Policy::parse(text, "p.yml").unwrap()
    }

    #[test]
    fn the_single_form_runs_only_when_referenced() {
        let p = policy(
            "providers:\n  kubernetes_leaderelection:\n    leader_lease: ksm\ninputs:\n  - type: exec\n",
        );
        assert!(elections(&p, &Vars::new()).unwrap().is_empty());
        let p = policy(
            "providers:\n  kubernetes_leaderelection:\n    leader_lease: ksm\n    leader_leaseduration: 20\ninputs:\n  - type: exec\n    condition: ${kubernetes_leaderelection.leader} == true\n",
        );
        let e = elections(&p, &Vars::new()).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].name, None);
        assert_eq!(e[0].lease, "ksm");
        assert_eq!(e[0].timings_s.secs(), [20, 10, 2]);
        assert!(e[0].release_on_shutdown);
        assert_eq!(e[0].var_prefix(), "kubernetes_leaderelection");
    }

    #[test]
    fn an_unconfigured_provider_still_elects_with_defaults_when_referenced() {
        let p =
            policy("inputs:\n  - type: exec\n    condition: ${kubernetes_leaderelection.leader}\n");
        let e = elections(&p, &Vars::new()).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].lease, DEFAULT_LEASE);
        assert_eq!(e[0].timings_s, LeaseTimings::default());
        let p = policy(
            "providers:\n  kubernetes_leaderelection:\n    enabled: false\ninputs:\n  - type: exec\n    condition: ${kubernetes_leaderelection.leader}\n",
        );
        assert!(elections(&p, &Vars::new()).unwrap().is_empty());
    }

    #[test]
    fn named_elections_inherit_shared_settings_and_get_their_own_lease() {
        let p = policy(
            "providers:\n  kubernetes_leaderelection:\n    leader_lease: lh\n    leader_leaseduration: 30\n    leader_renewdeadline: 20\n    identity: ${env.POD}\n    elections:\n      state_metrics: {}\n      events:\n        leader_lease: ev-lease\n        leader_retryperiod: 4\n      unused: {}\ninputs:\n  - type: a\n    condition: ${kubernetes_leaderelection.state_metrics.leader} == true\n  - type: b\n    streams:\n      - condition: ${kubernetes_leaderelection.events.leader} == true\n",
        );
        let mut vars = Vars::new();
        vars.set_provider(
            "env",
            Value::Map(
                [("POD".to_string(), Value::Str("pod-1".into()))]
                    .into_iter()
                    .collect(),
            ),
        );
        let e = elections(&p, &vars).unwrap();
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[0].lease, "lh-state-metrics");
        assert_eq!(e[0].timings_s.secs(), [30, 20, 2]);
        assert_eq!(e[0].identity.as_deref(), Some("pod-1"));
        assert_eq!(e[1].lease, "ev-lease");
        assert_eq!(e[1].timings_s.secs(), [30, 20, 4]);
        assert!(e[1].owns_var("kubernetes_leaderelection.events.leader"));
        assert!(!e[1].owns_var("kubernetes_leaderelection.leader"));
        assert!(!e[0].owns_var("kubernetes_leaderelection.events.leader"));
    }

    #[test]
    fn a_sharded_election_is_one_election_per_shard_each_on_its_own_lease() {
        let p = policy(
            "providers:\n  kubernetes_leaderelection:\n    leader_lease: lh\n    elections:\n      ksm: {shards: 3}\n      events: {leader_lease: ev}\ninputs:\n  - type: a\n    condition: ${kubernetes_leaderelection.ksm.leader} == true\n    hosts: ['ksm-${kubernetes_leaderelection.ksm.shard}:8080']\n  - type: b\n    condition: ${kubernetes_leaderelection.events.leader} == true\n",
        );
        let e = elections(&p, &Vars::new()).unwrap();
        let leases: Vec<&str> = e.iter().map(|e| e.lease.as_str()).collect();
        assert_eq!(
            leases,
            ["lh-ksm-0-of-3", "lh-ksm-1-of-3", "lh-ksm-2-of-3", "ev"]
        );
        assert_eq!(e[2].shard, Some(Shard { index: 2, count: 3 }));
        assert_eq!(e[2].label(), "ksm/2");
        assert_eq!(e[3].shard, None);
        assert!(e[1].owns_var("kubernetes_leaderelection.ksm.shard"));
        for bad in ["0", "257", "'8'"] {
            let text = format!(
                "providers:\n  kubernetes_leaderelection:\n    elections:\n      ksm: {{shards: {bad}}}\ninputs:\n  - type: a\n    condition: ${{kubernetes_leaderelection.ksm.leader}} == true\n"
            );
            let err = elections(&policy(&text), &Vars::new())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("`shards` must be a whole number from 1 to 256"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn an_unresolvable_setting_is_named() {
        let p = policy(
            "providers:\n  kubernetes_leaderelection:\n    identity: ${env.NOPE}\ninputs:\n  - type: exec\n    condition: ${kubernetes_leaderelection.leader}\n",
        );
        let e = elections(&p, &Vars::new()).unwrap_err();
        assert!(e.to_string().contains("`identity`"), "{e}");
        assert_eq!(e.pos.line, 3);
    }

    fn with_env(pairs: &[(&str, &str)]) -> Vars {
        let mut vars = Vars::new();
        vars.set_provider(
            "env",
            Value::Map(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Value::Str(v.to_string())))
                    .collect(),
            ),
        );
        vars
    }

    fn timings_policy(d: &str, r: &str, p: &str) -> Policy {
        policy(&format!(
            "providers:\n  kubernetes_leaderelection:\n    leader_leaseduration: {d}\n    leader_renewdeadline: {r}\n    leader_retryperiod: {p}\ninputs:\n  - type: exec\n    condition: ${{kubernetes_leaderelection.leader}}\n"
        ))
    }

    #[test]
    fn timings_from_variables_are_substituted_and_read_as_whole_seconds() {
        let p = timings_policy("${env.LEASE}", "\"${env.RENEW}\"", "\"3\"");
        let vars = with_env(&[("LEASE", "30"), ("RENEW", " 20 ")]);
        let e = elections(&p, &vars).unwrap();
        assert_eq!(e[0].timings_s.secs(), [30, 20, 3]);
        // A default in the variable applies when it is not set.
        let p = timings_policy("${env.LEASE:'25'}", "10", "2");
        let e = elections(&p, &Vars::new()).unwrap();
        assert_eq!(e[0].timings_s.secs(), [25, 10, 2]);
    }

    #[test]
    fn a_timing_that_is_not_whole_seconds_after_substitution_is_named() {
        for (value, shown) in [
            ("15s", "\"15s\" (from \"${env.LEASE}\")"),
            ("1.5", "\"1.5\" (from \"${env.LEASE}\")"),
            ("-3", "\"-3\" (from \"${env.LEASE}\")"),
            ("", "\"\" (from \"${env.LEASE}\")"),
        ] {
            let p = timings_policy("${env.LEASE}", "10", "2");
            let e = elections(&p, &with_env(&[("LEASE", value)])).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains(&format!(
                    "`leader_leaseduration` must be whole seconds, found {shown}"
                )),
                "{text}"
            );
            assert!(text.contains("15s` is not accepted"), "the hint: {text}");
            assert_eq!(e.pos.line, 3);
        }
        let p = timings_policy("${env.NOPE}", "10", "2");
        let e = elections(&p, &Vars::new()).unwrap_err();
        assert!(
            e.to_string().contains("`leader_leaseduration`: variable"),
            "{e}"
        );
        let p = timings_policy("-5", "10", "2");
        let e = elections(&p, &Vars::new()).unwrap_err();
        assert!(
            e.to_string().contains("must be whole seconds, found -5"),
            "{e}"
        );
        let p = timings_policy("[15]", "10", "2");
        let e = elections(&p, &Vars::new()).unwrap_err();
        assert!(e.to_string().contains("found list"), "{e}");
    }

    #[test]
    fn timings_that_break_the_rule_are_refused_never_defaulted() {
        let cases = [
            (
                ("${env.LEASE}", "10", "2"),
                "10",
                "duration must be greater than renew deadline",
            ),
            (
                ("15", "${env.RENEW}", "2"),
                "2",
                "renew deadline must be greater than 1.2",
            ),
            (
                ("${env.LEASE}", "10", "2"),
                "0",
                "lease duration must be positive",
            ),
            (("${env.LEASE}", "10", "2"), "90000", "at most one day"),
        ];
        for ((d, r, p), value, why) in cases {
            let pol = timings_policy(d, r, p);
            let vars = with_env(&[("LEASE", value), ("RENEW", value)]);
            let e = elections(&pol, &vars).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("duration > renew deadline > 1.2 × retry period"),
                "{text}"
            );
            assert!(text.contains(why), "{text}");
            let lease = if d.contains('$') { value } else { d };
            let renew = if r.contains('$') { value } else { r };
            assert!(
                text.contains(&format!(
                    "leader_leaseduration {lease}, leader_renewdeadline {renew}, leader_retryperiod {p}"
                )),
                "{text}"
            );
        }
        // A named election says which.
        let p = policy(
            "providers:\n  kubernetes_leaderelection:\n    elections:\n      ksm:\n        leader_renewdeadline: 20\ninputs:\n  - type: exec\n    condition: ${kubernetes_leaderelection.ksm.leader}\n",
        );
        let e = elections(&p, &Vars::new()).unwrap_err();
        assert!(
            e.to_string().contains("election `ksm`: lease timings"),
            "{e}"
        );
        assert_eq!(e.pos.line, 5);
    }
}
