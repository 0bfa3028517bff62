//! Classifying API errors for the core, and explaining 403s to operators.

use crate::core::Failure;

/// What an API error means to the election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ApiOutcome {
    Conflict,
    NotFound,
    Gone,
    Failed(Failure),
}

/// The HTTP status code of an error, or "error" if there was no response
/// (used as the `code` label of request metrics).
pub(crate) fn code_label(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code != 0 => s.code.to_string(),
        _ => "error".into(),
    }
}

pub(crate) fn classify(e: &kube::Error) -> ApiOutcome {
    match e {
        kube::Error::Api(s) => match s.code {
            403 => ApiOutcome::Failed(Failure::Forbidden),
            404 => ApiOutcome::NotFound,
            409 => ApiOutcome::Conflict,
            410 => ApiOutcome::Gone,
            _ => ApiOutcome::Failed(Failure::Other),
        },
        _ => ApiOutcome::Failed(Failure::Other),
    }
}

/// The operator-facing explanation of a 403 on `verb`.
pub(crate) fn forbidden_message(verb: &str, namespace: &str, lease: &str) -> String {
    match verb {
        "watch" => format!(
            "cannot watch leases.coordination.k8s.io \"{lease}\" in namespace \"{namespace}\": polling instead; add verb watch on leases to the agent's Role for near-zero follower load and instant handover"
        ),
        _ => format!(
            "cannot {verb} leases.coordination.k8s.io \"{lease}\" in namespace \"{namespace}\": add verbs get, create, update on leases to the agent's Role"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_message_names_verb_resource_namespace_and_rule() {
        assert_eq!(
            forbidden_message("update", "kube-system", "ksm-leader"),
            "cannot update leases.coordination.k8s.io \"ksm-leader\" in namespace \"kube-system\": add verbs get, create, update on leases to the agent's Role"
        );
        assert!(forbidden_message("watch", "ns", "l").contains("add verb watch on leases"));
    }

    #[test]
    fn api_codes_map_to_election_outcomes() {
        let api = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert_eq!(classify(&api(403)), ApiOutcome::Failed(Failure::Forbidden));
        assert_eq!(classify(&api(409)), ApiOutcome::Conflict);
        assert_eq!(classify(&api(404)), ApiOutcome::NotFound);
        assert_eq!(classify(&api(410)), ApiOutcome::Gone);
        assert_eq!(classify(&api(503)), ApiOutcome::Failed(Failure::Other));
        assert_eq!(code_label(&api(503)), "503");
    }
}
