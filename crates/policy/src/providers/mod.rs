//! What the `providers:` section of a policy may say: the providers
//! leasehold implements and the schema of their settings, including the
//! Kubernetes naming rules and the lease timing rule of the leader election
//! provider. Plain rules over the loaded tree: no Kubernetes client, no
//! election code.

mod leader_election;
mod names;

pub use leader_election::{
    DEFAULT_LEASE_TIMINGS_S, LeaseTimingError, LeaseTimings, MAX_LEASE_TIMING_MS,
    RESERVED_ELECTION_NAMES, TIMING_HINT, check_lease_timings, describe_timings, is_election_name,
    parse_timing_secs,
};
pub use names::{is_dns_label, is_dns_subdomain};

use crate::lint::{Report, Severity};
use crate::model::Policy;
use crate::subst::{self, Resolved};
use crate::value::Value;
use crate::vars::Vars;
use crate::yaml::NodeKind;

/// Providers leasehold implements.
pub const SUPPORTED_PROVIDERS: [&str; 6] = [
    "env",
    "host",
    "agent",
    "local",
    "kubernetes_leaderelection",
    "kubernetes",
];

/// Checks the `providers` section: unknown providers, settings that are not
/// mappings, and the settings of each supported provider.
///
/// `sample` variables, when given, let string settings that use variables
/// be judged as the agent would read them.
pub(crate) fn check(policy: &Policy, sample: Option<&Vars>, report: &mut Report) {
    let default_provider = policy.default_provider();
    let resolve = |s: &str| -> Option<String> {
        match subst::substitute(s, sample?, &default_provider) {
            Ok(Resolved::Value(Value::Str(v))) => Some(v),
            Ok(Resolved::Value(v)) => Some(v.to_subst_text()),
            _ => None,
        }
    };
    for (key, node) in policy.providers() {
        if !SUPPORTED_PROVIDERS.contains(&key.name.as_str()) {
            report.push(
                Severity::Warning,
                key.pos,
                format!(
                    "provider `{}` is not supported by leasehold; its variables will not resolve",
                    key.name
                ),
                Some(format!(
                    "supported providers: {}",
                    SUPPORTED_PROVIDERS.join(", ")
                )),
            );
        }
        if !matches!(node.kind, NodeKind::Map(_) | NodeKind::Null) {
            report.push(
                Severity::Error,
                node.pos,
                format!(
                    "the settings of provider `{}` must be a mapping, found {}",
                    key.name,
                    node.type_name()
                ),
                None,
            );
            continue;
        }
        match key.name.as_str() {
            "kubernetes_leaderelection" => leader_election::check(node, report, &resolve),
            "local" => {
                if let Some(v) = node.get("vars")
                    && !matches!(v.kind, NodeKind::Map(_))
                {
                    report.push(
                        Severity::Error,
                        v.pos,
                        "`providers.local.vars` must be a mapping".into(),
                        None,
                    );
                }
            }
            _ => {}
        }
    }
}
