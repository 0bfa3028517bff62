//! Kubernetes object name rules (RFC 1123), for the names a policy gives
//! the leader election provider.

/// A DNS label: what a namespace name must be. Lower-case letters, digits
/// and `-`, starting and ending with a letter or digit, at most 63 bytes.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS subdomain: what most object names (a Lease's) must be. Labels
/// joined by `.`, at most 253 bytes.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        for ok in ["a", "kube-system", "0a", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        assert!(is_dns_subdomain("leasehold.example.com"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(&format!("{}.b", "a".repeat(252))));
    }
}
