//! Kubernetes name rules for the Lease and its namespace, checked before
//! the first request: an invalid name can never be created, so an elector
//! on it would stand for election forever without saying why.

use std::fmt;

/// Why a name is not a valid Kubernetes object or namespace name.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NameError {
    /// What was checked: `lease name` or `namespace`.
    pub what: &'static str,
    /// The name given.
    pub name: String,
    /// The rule it breaks.
    pub rule: &'static str,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} {:?}: {}", self.what, self.name, self.rule)
    }
}

impl std::error::Error for NameError {}

const LABEL_RULE: &str = "must consist of lower case alphanumeric characters or '-', start and end with an alphanumeric character, and be at most 63 characters (RFC 1123 label)";
const SUBDOMAIN_RULE: &str = "must consist of lower case alphanumeric characters, '-' or '.', start and end with an alphanumeric character, and be at most 253 characters (RFC 1123 subdomain)";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && edge(b[0])
        && edge(b[b.len() - 1])
        && b.iter().all(|&c| edge(c) || c == b'-')
}

/// A Lease name is an RFC 1123 subdomain (what the API server enforces).
pub fn validate_lease_name(name: &str) -> Result<(), NameError> {
    let ok = !name.is_empty() && name.len() <= 253 && name.split('.').all(is_label);
    ok.then_some(()).ok_or_else(|| NameError {
        what: "lease name",
        name: name.into(),
        rule: SUBDOMAIN_RULE,
    })
}

const LABEL_VALUE_RULE: &str = "must be at most 63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric character (a label value)";

/// A label value (the rename fence's fleet and election), as the API
/// server enforces it. `what` names the label.
pub fn validate_label_value(what: &'static str, value: &str) -> Result<(), NameError> {
    let b = value.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
        && b.iter().all(|c| edge(c) || matches!(c, b'-' | b'_' | b'.'));
    ok.then_some(()).ok_or_else(|| NameError {
        what,
        name: value.into(),
        rule: LABEL_VALUE_RULE,
    })
}

/// A namespace name is an RFC 1123 label.
pub fn validate_namespace(name: &str) -> Result<(), NameError> {
    is_label(name).then_some(()).ok_or_else(|| NameError {
        what: "namespace",
        name: name.into(),
        rule: LABEL_RULE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_follow_the_api_servers_rule() {
        for good in ["leasehold", "kube-system_a.1", "A", &"x".repeat(63)] {
            assert!(validate_label_value("fleet", good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "a-", "a b", "a/b", &"x".repeat(64)] {
            let e = validate_label_value("fleet", bad).unwrap_err();
            assert_eq!(e.what, "fleet");
        }
    }

    #[test]
    fn lease_names_follow_rfc_1123_subdomains() {
        for good in ["ksm-leader", "a", "leader.kube-system", "x1.y2-z"] {
            assert!(validate_lease_name(good).is_ok(), "{good}");
        }
        let long = "a".repeat(300);
        for bad in [
            "BadName",
            "a b",
            "..",
            "a/b",
            "-a",
            "a-",
            "a..b",
            "",
            long.as_str(),
        ] {
            let e = validate_lease_name(bad).unwrap_err();
            assert!(e.to_string().contains("RFC 1123 subdomain"), "{bad}: {e}");
        }
    }

    #[test]
    fn namespaces_follow_rfc_1123_labels() {
        assert!(validate_namespace("kube-system").is_ok());
        for bad in ["", "Kube", "a.b", "-x", &"n".repeat(64)] {
            assert!(validate_namespace(bad).is_err(), "{bad}");
        }
    }
}
