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

/// Who talks to which API server, for error messages.
#[derive(Clone, Debug)]
pub(crate) struct Endpoint {
    pub(crate) server: String,
    pub(crate) user: String,
}

impl Default for Endpoint {
    fn default() -> Self {
        Endpoint {
            server: "the API server".into(),
            user: "this client".into(),
        }
    }
}

/// The operator-facing explanation of an error that is not about the
/// Lease itself (credentials, connection, TLS), naming the server, the
/// user and the fix. `None` for errors the election handles by itself
/// (409, 404, 403, 410, 5xx answers).
pub(crate) fn explain(e: &kube::Error, at: &Endpoint) -> Option<String> {
    let (server, user) = (&at.server, &at.user);
    if let kube::Error::Api(s) = e {
        return (s.code == 401).then(|| format!(
            "the API server {server} rejected the credentials of {user} (401 Unauthorized): the token or client certificate is invalid or expired; refresh the kubeconfig or the service-account token"
        ));
    }
    let mut chain: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        chain.push(err);
        next = err.source();
    }
    let refused = chain.iter().any(|err| {
        err.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    });
    let innermost = chain.last().map(|err| err.to_string()).unwrap_or_default();
    let tls = chain.iter().any(|err| {
        let text = err.to_string().to_ascii_lowercase();
        text.contains("certificate") || text.contains("tls") || text.contains("handshake")
    });
    Some(if refused {
        format!(
            "cannot connect to the API server at {server}: connection refused; check that it is running and that the kubeconfig's server address is right"
        )
    } else if tls {
        format!(
            "TLS verification of the API server at {server} failed: {innermost}; check certificate-authority (or certificate-authority-data) in the kubeconfig of {user}"
        )
    } else {
        format!("cannot reach the API server at {server}: {innermost}")
    })
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
    fn credentials_and_connection_errors_name_server_user_and_fix() {
        let at = Endpoint {
            server: "https://127.0.0.1:6443".into(),
            user: "user agent-1 of /k.conf".into(),
        };
        let unauthorized = kube::Error::Api(Box::new(kube::core::Status {
            code: 401,
            ..Default::default()
        }));
        let text = explain(&unauthorized, &at).unwrap();
        assert!(
            text.contains("rejected the credentials of user agent-1"),
            "{text}"
        );
        assert!(text.contains("https://127.0.0.1:6443"), "{text}");
        let conflict = kube::Error::Api(Box::new(kube::core::Status {
            code: 409,
            ..Default::default()
        }));
        assert!(explain(&conflict, &at).is_none());
        let refused =
            kube::Error::ReadEvents(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let text = explain(&refused, &at).unwrap();
        assert!(text.contains("connection refused"), "{text}");
        let tls = kube::Error::ReadEvents(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer",
        ));
        let text = explain(&tls, &at).unwrap();
        assert!(
            text.contains("TLS verification") && text.contains("UnknownIssuer"),
            "{text}"
        );
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
