//! Elastic Agent's defaults where they differ from leasehold's, applied
//! when the agent is started by Elastic's command line (its manifests),
//! so a DaemonSet switched from Elastic Agent behaves as it did.

use leasehold_policy::Policy;
use leasehold_policy::elections::{DEFAULT_LEASE, ElectionSpec, PROVIDER};

/// Elastic Agent's default `leader_lease`.
pub const ELASTIC_LEASE: &str = "elastic-agent-cluster-leader";

/// The single election's Lease is Elastic's when the policy names none:
/// what a DaemonSet of Elastic Agent held (so a rollout from it keeps one
/// leader), and what the Role of Elastic's manifest grants.
pub fn lease(policy: &Policy, mut specs: Vec<ElectionSpec>) -> Vec<ElectionSpec> {
    let named = policy
        .providers()
        .iter()
        .find(|(k, _)| k.name == PROVIDER)
        .is_some_and(|(_, n)| n.get("leader_lease").is_some());
    for spec in &mut specs {
        if !named && spec.name.is_none() && spec.lease == DEFAULT_LEASE {
            spec.lease = ELASTIC_LEASE.to_string();
        }
    }
    specs
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_policy::Vars;

    fn leases(text: &str) -> Vec<String> {
        let p = Policy::parse(text, "agent.yml").unwrap();
        let specs = leasehold_policy::elections::elections(&p, &Vars::new()).unwrap();
        lease(&p, specs).into_iter().map(|s| s.lease).collect()
    }

    #[test]
    fn the_single_election_takes_elastics_lease_unless_the_policy_names_one() {
        let gated =
            "inputs:\n  - type: exec\n    condition: ${kubernetes_leaderelection.leader} == true\n";
        assert_eq!(leases(gated), [ELASTIC_LEASE]);
        let named = format!(
            "providers:\n  kubernetes_leaderelection:\n    leader_lease: {DEFAULT_LEASE}\n{gated}"
        );
        assert_eq!(leases(&named), [DEFAULT_LEASE]);
        let own = format!("providers.kubernetes_leaderelection:\n  leader_lease: mine\n{gated}");
        assert_eq!(leases(&own), ["mine"]);
    }
}
